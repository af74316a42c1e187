"""The snapshot contract and `optsched solve` on good and bad input (issue 2)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from optsched.cli import app, example_snapshot_text
from optsched.model import OptschedError, parse_snapshot, snapshot_schema

runner = CliRunner()


def base_snapshot() -> dict:
    return {
        "version": 1,
        "time": 0.0,
        "cluster": {"gpus": {"v100": 4, "k80": 4}},
        "jobs": [
            {"id": "a", "model": "m", "scale_factor": 1, "throughput": {"v100": 4.0, "k80": 1.0}},
            {"id": "b", "model": "m", "scale_factor": 2, "throughput": {"v100": 3.0}},
        ],
    }


def run(args, input=None):
    return runner.invoke(app, args, input=input)


def test_solve_without_arguments_runs_the_builtin_example():
    res = run(["solve"])
    assert res.exit_code == 0, res.output
    assert "max_min_fairness" in res.output and "optimal" in res.output
    snap = parse_snapshot(example_snapshot_text())
    for job in snap.jobs:
        assert job.id in res.output


def test_solve_json_output_has_the_documented_fields(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps(base_snapshot()))
    res = run(["solve", str(p), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert set(out) >= {"policy", "status", "objective", "solve_seconds", "allocation", "effective_throughput", "explanation"}
    assert set(out["allocation"]) == {"a", "b"}
    assert "k80" not in out["allocation"]["b"]
    ex = out["explanation"]
    assert set(ex) >= {"gpu_price", "bottleneck_jobs", "share_vs_equal"}
    # Both solvers agree through the CLI too.
    res2 = run(["solve", str(p), "--json", "--solver", "highs"])
    assert json.loads(res2.output)["objective"] == pytest.approx(out["objective"], rel=1e-6)


def test_empty_job_list_is_a_valid_snapshot_with_empty_allocation(tmp_path):
    snap = base_snapshot()
    snap["jobs"] = []
    p = tmp_path / "s.json"
    p.write_text(json.dumps(snap))
    res = run(["solve", str(p), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["allocation"] == {} and out["objective"] is None


def _mutate(fn):
    snap = base_snapshot()
    fn(snap)
    return json.dumps(snap)


BAD = {
    "malformed_json": ('{"version": 1, "cluster": ', "malformed JSON"),
    "empty_id": (_mutate(lambda s: s["jobs"][1].update(id="")), "jobs[1].id"),
    # Beyond these ranges the programs' coefficients overflow (1e308 solved to a wrong "optimal").
    "huge_throughput": (_mutate(lambda s: s["jobs"][0]["throughput"].update(v100=1e308)), "jobs[0].throughput"),
    "tiny_throughput": (_mutate(lambda s: s["jobs"][0]["throughput"].update(v100=1e-300)), "jobs[0].throughput"),
    "huge_weight": (_mutate(lambda s: s["jobs"][0].update(weight=1e308)), "jobs[0].weight"),
    "gpus_true": (_mutate(lambda s: s["cluster"]["gpus"].update(v100=True)), "cluster.gpus['v100']: must be a whole number"),
    "gpus_text": (_mutate(lambda s: s["cluster"]["gpus"].update(v100="4")), "cluster.gpus['v100']: must be a whole number"),
    # Every number, not only a GPU count: a flag or text is refused, not converted (scale_factor "2" ran as 2).
    "scale_factor_text": (_mutate(lambda s: s["jobs"][0].update(scale_factor="2")),
                          "jobs[0].scale_factor: must be a whole number, not str"),
    "scale_factor_true": (_mutate(lambda s: s["jobs"][0].update(scale_factor=True)),
                          "jobs[0].scale_factor: must be a whole number, not bool"),
    "weight_true": (_mutate(lambda s: s["jobs"][0].update(weight=True)), "jobs[0].weight: must be a number, not bool"),
    "throughput_text": (_mutate(lambda s: s["jobs"][0]["throughput"].update(v100="2")),
                        "jobs[0].throughput['v100']: must be a number, not str"),
    "elapsed_text": (_mutate(lambda s: s["jobs"][0].update(elapsed_time="4")), "jobs[0].elapsed_time: must be a number"),
    "service_false": (_mutate(lambda s: s["jobs"][0].update(attained_service=False)),
                      "jobs[0].attained_service: must be a number, not bool"),
    "server_gpus_text": (_mutate(lambda s: s["cluster"].update(servers=[{"id": "n0", "gpu_type": t, "gpus": "4"}
                                                                        for t in s["cluster"]["gpus"]])),
                         "cluster.servers[0].gpus: must be a whole number, not str"),
    "servers_empty": (_mutate(lambda s: s["cluster"].update(servers=[])), "cluster: servers: an empty list"),
    "tiny_price": (_mutate(lambda s: s["cluster"].update(price_per_hour={"v100": 1e-300})),
                   "cluster.price_per_hour['v100']: must be 0 or between 1e-06 and 1e+06 $/GPU-hour"),
    "nan_prior_allocation": ('{"cluster": {"gpus": {"v100": 2}}, "jobs": [{"id": "a", "throughput": {"v100": 1}}], '
                             '"prior_allocation": {"a": {"v100": NaN}}}', "prior_allocation['a']['v100']"),
    "huge_integer": ('{"version": 1, "cluster": {"gpus": {"v100": ' + "9" * 5000 + '}}, "jobs": []}', "4,300 digits"),
    "done_past_total": (_mutate(lambda s: s["jobs"][1].update(steps_total=100, steps_done=200)),
                        "jobs[1].steps_done: 200 exceeds steps_total 100"),
    "wrong_type": (_mutate(lambda s: s["jobs"][0].update(scale_factor="two")), "jobs[0].scale_factor"),
    "negative_throughput": (_mutate(lambda s: s["jobs"][0]["throughput"].update(v100=-1.0)), "jobs[0].throughput"),
    "nan_throughput": (_mutate(lambda s: s["jobs"][0]["throughput"].update(v100=float("nan"))), "jobs[0].throughput"),
    "too_wide": (_mutate(lambda s: s["jobs"][1].update(scale_factor=8)), "jobs[1].scale_factor"),
    "unknown_gpu_type": (_mutate(lambda s: s["jobs"][0]["throughput"].update(a100=1.0)), "unknown GPU type 'a100'"),
    "unknown_field": (_mutate(lambda s: s["jobs"][0].update(gpu=1)), "jobs[0].gpu"),
    "duplicate_id": (_mutate(lambda s: s["jobs"][1].update(id="a")), "duplicate job id"),
    "zero_throughput": (_mutate(lambda s: s["jobs"][1].update(throughput={"v100": 0.0})), "jobs[1].throughput"),
    "bad_version": (_mutate(lambda s: s.update(version=2)), "version"),
    "negative_gpus": (_mutate(lambda s: s["cluster"]["gpus"].update(k80=-1)), "cluster.gpus"),
    "not_an_object": ("[1, 2]", "top level"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_snapshot_is_a_one_line_error_with_exit_code_2(tmp_path, case):
    text, needle = BAD[case]
    p = tmp_path / "s.json"
    p.write_text(text)
    res = runner.invoke(app, ["solve", str(p)])
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    msg = res.stderr.strip() if res.stderr else res.output.strip()
    assert "Traceback" not in res.output
    assert len(msg.splitlines()) == 1, msg
    assert needle in msg, msg
    with pytest.raises(OptschedError, match="invalid snapshot"):
        parse_snapshot(text)


def test_unknown_policy_and_solver_are_one_line_errors():
    res = run(["solve", "--policy", "nope"])
    assert res.exit_code == 2 and "unknown policy 'nope'" in res.stderr
    res = run(["solve", "--solver", "gurobi"])
    assert res.exit_code == 2 and "unknown solver 'gurobi'" in res.stderr


def test_unknown_placement_policy_is_a_one_line_error():
    res = run(["solve", "--placement", "--placement-policy", "nope"])
    assert res.exit_code == 2 and "--placement-policy: unknown policy 'nope'" in res.stderr


def test_missing_file_is_a_one_line_error(tmp_path):
    res = run(["solve", str(tmp_path / "absent.json")])
    assert res.exit_code == 2 and "absent.json" in res.stderr


def test_snapshot_from_stdin():
    res = run(["solve", "-", "--json"], input=json.dumps(base_snapshot()))
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["status"] == "optimal"


def test_schema_is_published_and_describes_the_contract():
    res = run(["schema"])
    assert res.exit_code == 0
    schema = json.loads(res.output)
    assert schema == snapshot_schema()
    assert {"version", "cluster", "jobs"} <= set(schema["properties"])
    job = schema["$defs"]["Job"]["properties"]
    for field in ("id", "model", "scale_factor", "weight", "throughput", "steps_total", "steps_done",
                  "arrival_time", "elapsed_time", "attained_service"):
        assert field in job


def test_servers_must_match_gpu_counts():
    snap = base_snapshot()
    snap["cluster"]["servers"] = [{"id": "n0", "gpu_type": "v100", "gpus": 2}]
    with pytest.raises(OptschedError, match="servers"):
        parse_snapshot(snap)


def test_same_input_same_output(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(example_snapshot_text())
    a = json.loads(run(["solve", str(p), "--json"]).output)
    b = json.loads(run(["solve", str(p), "--json"]).output)
    for timing in [key for key in a if key.endswith("_seconds")]:  # solve, build, solver, decode, parse
        a.pop(timing), b.pop(timing)
    assert a == b


def test_table_rows_are_capped_with_bottleneck_jobs_first(tmp_path):
    """A 100,000-job table took minutes in rich: the table shows --rows jobs (default 50),
    the bottleneck ones first, and says how many more; --json keeps every job."""
    jobs = [{"id": f"j{m:03d}", "model": "m", "throughput": {"v100": 1.0 + m % 7, "k80": 1.0}} for m in range(120)]
    jobs[97]["throughput"] = {"k80": 0.01}  # the slowest job anywhere: the bottleneck
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"version": 1, "cluster": {"gpus": {"v100": 30, "k80": 30}}, "jobs": jobs}))
    res = run(["solve", str(path)])
    assert res.exit_code == 0, res.output
    bottleneck = json.loads(run(["solve", str(path), "--json"]).output)["explanation"]["bottleneck_jobs"]
    assert "j097" in bottleneck
    shown = [j["id"] for j in jobs if f" {j['id']} " in res.output]
    assert len(shown) == 50
    assert set(bottleneck) <= set(shown) if len(bottleneck) <= 50 else set(shown) <= set(bottleneck)
    assert "70 more jobs" in res.output
    every = run(["solve", str(path), "--rows", "0"])
    assert all(f" {j['id']} " in every.output for j in jobs) and "more jobs" not in every.output
    bad = run(["solve", str(path), "--rows", "-1"])
    assert bad.exit_code == 2 and "--rows" in bad.output


def test_the_table_shows_control_characters_in_names_instead_of_sending_them(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"cluster": {"gpus": {"v100": 2}},
                             "jobs": [{"id": "a\u001b[2Jb", "model": "m\u0007", "throughput": {"v100": 1.0}}]}))
    res = runner.invoke(app, ["solve", str(p)])
    assert res.exit_code == 0, res.output
    assert "\x1b" not in res.output and "\x07" not in res.output
    assert "a\\x1b[2Jb" in res.output
