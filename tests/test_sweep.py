"""optsched sweep: the cross product, local/serial/Ray executors give the same
table, resumable, fault-tolerant, sweep files, one-line errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from optsched.cli import app
from optsched.sweep import TIMING_COLUMNS, read_spec_file, run_sweep, spec_from_dict
from optsched.sweep.traces import build_trace

TINY = {"trace": "gavel", "policies": ["max_min_fairness", "fifo"], "loads": [6], "seeds": [0, 1],
        "cluster": "v100=1,p100=1,k80=1", "trace_options": {"jobs": 5}}


def comparable(table: pd.DataFrame) -> pd.DataFrame:
    return table.drop(columns=[c for c in TIMING_COLUMNS if c in table]).reset_index(drop=True)


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "local"
    res = run_sweep(spec_from_dict({**TINY, "executor": "local", "workers": 2}), out)
    return out, res


def test_local_sweep_tidy_table(local_sweep):
    out, res = local_sweep
    t = res.table
    assert res.total == 4 and res.executed == 4 and res.failed == 0
    assert list(t["run_id"]) == sorted(t["run_id"]) and t["run_id"].is_unique
    assert set(t["policy"]) == {"max_min_fairness", "fifo"} and set(t["seed"]) == {0, 1}
    assert (t["status"] == "ok").all() and (t["jobs_completed"] == 5).all()
    for name in ("results.parquet", "results.csv", "jobs.parquet", "rounds.parquet", "sweep.json"):
        assert (out / name).exists(), name
    pd.testing.assert_frame_equal(pd.read_parquet(out / "results.parquet"), t)
    jobs = pd.read_parquet(out / "jobs.parquet")
    assert len(jobs) == 20 and {"run_id", "policy", "load", "seed", "jct"} <= set(jobs.columns)
    for rid in t["run_id"]:
        d = out / "runs" / rid
        assert (d / "done").exists() and (d / "jobs.parquet").exists() and (d / "summary.json").exists()


def test_serial_equals_local(local_sweep, tmp_path):
    _, res = local_sweep
    ser = run_sweep(spec_from_dict({**TINY, "executor": "serial"}), tmp_path / "serial")
    pd.testing.assert_frame_equal(comparable(ser.table), comparable(res.table))


def test_ray_equals_local(local_sweep, tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'optsched[ray]')")
    _, res = local_sweep
    r = run_sweep(spec_from_dict({**TINY, "executor": "ray", "workers": 2}), tmp_path / "ray")
    assert r.failed == 0
    pd.testing.assert_frame_equal(comparable(r.table), comparable(res.table))


def test_resume_skips_finished_runs(tmp_path):
    spec = spec_from_dict({**TINY, "policies": ["fifo"], "executor": "serial"})
    first = run_sweep(spec, tmp_path)
    again = run_sweep(spec, tmp_path)
    assert (again.executed, again.reused) == (0, 2)
    pd.testing.assert_frame_equal(comparable(again.table), comparable(first.table))
    rid = first.table["run_id"].iloc[0]
    (tmp_path / "runs" / rid / "done").unlink()  # an interrupted run: no marker
    third = run_sweep(spec, tmp_path)
    assert (third.executed, third.reused) == (1, 1)
    # A bigger sweep in the same folder runs only what is new.
    more = run_sweep(spec_from_dict({**TINY, "policies": ["fifo"], "seeds": [0, 1, 2], "executor": "serial"}), tmp_path)
    assert (more.executed, more.reused) == (1, 2)


def test_failed_run_is_recorded_and_retried(tmp_path, monkeypatch):
    import optsched.sweep.traces as traces

    real = traces.build_trace

    def flaky(trace, options, load, seed):
        if seed == 1:
            raise RuntimeError("disk on fire")
        return real(trace, options, load, seed)

    monkeypatch.setattr(traces, "build_trace", flaky)
    spec = spec_from_dict({**TINY, "policies": ["fifo"], "executor": "serial"})
    res = run_sweep(spec, tmp_path, validate=False)
    t = res.table.set_index("seed")
    assert res.failed == 1 and t.loc[1, "status"] == "failed" and t.loc[1, "error"] == "RuntimeError: disk on fire"
    assert t.loc[0, "status"] == "ok"
    err = json.loads((tmp_path / "runs" / t.loc[1, "run_id"] / "error.json").read_text())
    assert "disk on fire" in err["traceback"]
    kept = run_sweep(spec, tmp_path, retry_failed=False, validate=False)
    assert kept.executed == 0
    monkeypatch.setattr(traces, "build_trace", real)
    fixed = run_sweep(spec, tmp_path)
    assert fixed.executed == 1 and (fixed.table["status"] == "ok").all()


def test_sweep_files_and_recorded_config(tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text('trace = "gavel"\npolicies = ["max_min_fairness", "fifo"]\nloads = [6]\nseeds = [0, 1]\n'
                    'cluster = "v100=1,p100=1,k80=1"\n[trace_options]\njobs = 5\n')
    yaml_ = tmp_path / "s.yaml"
    yaml_.write_text("trace: gavel\npolicies: [max_min_fairness, fifo]\nloads: [6]\nseeds: [0, 1]\n"
                     "cluster: v100=1,p100=1,k80=1\ntrace_options: {jobs: 5}\n")
    ids = [r["run_id"] for r in spec_from_dict(TINY).runs()]
    assert [r["run_id"] for r in spec_from_dict(read_spec_file(toml)).runs()] == ids
    assert [r["run_id"] for r in spec_from_dict(read_spec_file(yaml_)).runs()] == ids
    run_sweep(spec_from_dict({**TINY, "policies": ["fifo"], "seeds": [0], "executor": "serial"}), tmp_path / "o")
    recorded = spec_from_dict(read_spec_file(tmp_path / "o" / "sweep.json"))
    assert recorded.runs() == spec_from_dict({**TINY, "policies": ["fifo"], "seeds": [0]}).runs()


def test_real_trace_load_scales_interarrivals(peer_data):
    path = str(peer_data / "tiresias" / "60_job.csv")
    one = build_trace(path, {"jobs": 20}, 1.0, 0).jobs["arrival_time"].to_numpy()
    two = build_trace(path, {"jobs": 20}, 2.0, 0).jobs["arrival_time"].to_numpy()
    assert len(one) == 20 and one[0] == 0 and (two == pytest.approx(one / 2))


def test_cli_sweep_and_errors(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["sweep", "gavel", "--policies", "fifo", "--loads", "6", "--jobs", "4",
                            "--cluster", "v100=1,p100=1,k80=1", "--executor", "serial", "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    assert "1 runs: 1 executed" in r.output and (tmp_path / "c" / "results.csv").exists()
    for args, msg in (
        (["gavel", "--policies", "fifo,nope"], "unknown policy 'nope'"),
        ([str(tmp_path / "missing.csv"), "--policies", "fifo"], "no such file"),
        (["gavel", "--policies", "fifo", "--loads", "2,x"], "--loads"),
        (["gavel", "--policies", "fifo", "--loads", "-1"], "--loads: must be positive"),
        (["gavel", "--policies", "fifo", "--executor", "spark"], "--executor: unknown"),
        (["gavel", "--policies", "fifo", "--set", "round_lenght=3"], "unknown simulate option 'round_lenght'"),
        (["gavel", "--policies", "fifo", "--cluster", "v100=x"], "--cluster"),
    ):
        r = runner.invoke(app, ["sweep", *args, "--out", str(tmp_path / "e")])
        assert r.exit_code == 2, (args, r.output)
        assert msg in r.output and "Traceback" not in r.output, (args, r.output)
    assert not (tmp_path / "e" / "runs").exists() or not any((tmp_path / "e" / "runs").iterdir())


def test_cli_sweep_exits_1_when_a_run_fails_after_writing_everything(tmp_path, peer_data):
    """A run that fails on its own (jobs its cluster can never run) is reported and the
    sweep exits 1 once the table is written (it exited 0, so a script could not tell)."""
    trace = str(peer_data / "tiresias" / "60_job.csv")
    base = ["sweep", trace, "--policies", "fifo", "--loads", "1", "--seeds", "0", "--jobs", "20",
            "--cluster", "v100=1,p100=1,k80=1", "--executor", "serial"]
    r = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "f")])
    assert r.exit_code == 1, r.output
    assert "can never run" in r.stderr and (tmp_path / "f" / "results.csv").exists()
    r = CliRunner().invoke(app, [*base, "--set", "skip_unrunnable=true", "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output


def test_cli_file_of_a_previous_sweep_resumes_in_its_folder(tmp_path, monkeypatch):
    """`optsched sweep --file DIR/sweep.json` runs in DIR: every run is already done there
    (it re-ran all of them into ./sweep-out)."""
    from optsched.cli import app

    run_sweep(spec_from_dict({**TINY, "policies": ["fifo"], "seeds": [0], "executor": "serial"}), tmp_path / "o")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["sweep", "--file", str(tmp_path / "o" / "sweep.json"), "--quiet"])
    assert res.exit_code == 0, res.output
    assert "0 executed" in res.output and not (tmp_path / "sweep-out").exists(), res.output


def test_a_sweep_without_clusters_and_with_a_relative_trace_resumes_from_its_sweep_json(tmp_path, monkeypatch):
    """sweep.json stored "clusters": [null] (read back as the cluster 'None') and the trace as typed
    (a relative path: not found from another folder)."""
    from optsched.cli import app

    trace = tmp_path / "t.trace"
    res = CliRunner().invoke(app, ["trace", "generate", str(trace), "--jobs", "4", "--rate", "6"])
    assert res.exit_code == 0, res.output
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["sweep", "t.trace", "--policies", "fifo", "--executor", "serial", "--out", "sw",
                                   "--quiet"])
    assert res.exit_code == 0, res.output
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    res = CliRunner().invoke(app, ["sweep", "--file", str(tmp_path / "sw" / "sweep.json"), "--quiet"])
    assert res.exit_code == 0 and "0 executed" in res.output, res.output


def test_recorded_clusters_read_back_whole():
    """A list entry is one cluster: "v100=1,p100=1" is not split at its commas; null is the default."""
    base = {k: v for k, v in TINY.items() if k != "cluster"}
    spec = spec_from_dict({**base, "clusters": ["v100=1,p100=1,k80=1", None]})
    assert spec.clusters == ["v100=1,p100=1,k80=1", None]
    assert spec_from_dict({**TINY, "cluster": "v100=2,p100=2"}).clusters == ["v100=2,p100=2"]


def test_a_sweep_file_or_throughput_table_repeating_a_key_is_refused(tmp_path):
    from optsched.model import OptschedError
    from traces.throughputs import read_throughputs

    spec = tmp_path / "s.json"
    spec.write_text('{"policies": ["fifo"], "seeds": [0], "seeds": [1, 2]}')
    with pytest.raises(OptschedError, match=r"s\.json: key 'seeds' appears twice"):
        read_spec_file(spec)
    table = tmp_path / "t.json"
    table.write_text('{"k80": {"null": 1.0}, "k80": {"null": 2.0}}')
    with pytest.raises(OptschedError, match=r"t\.json: key 'k80' appears twice"):
        read_throughputs(table)


def test_prices_reach_every_run_and_a_cost_policy_without_them_is_refused_up_front(tmp_path):
    from optsched.model import OptschedError
    from optsched.sweep.spec import validate

    base = {"trace": "gavel", "policies": ["min_cost"], "loads": [20], "trace_options": {"jobs": 8},
            "clusters": ["v100=2,k80=2", "v100=3"], "executor": "serial"}
    with pytest.raises(OptschedError, match=r"^--prices: min_cost needs a price for every GPU type; 'v100' of cluster 'v100=2,k80=2' has none"):
        validate(spec_from_dict(base))
    with pytest.raises(OptschedError, match=r"^--prices: .*'k8O'"):  # a typo is not dropped as "not in this cluster"
        validate(spec_from_dict({**base, "prices": "v100=2.48,k8O=0.45"}))
    spec = spec_from_dict({**base, "prices": {"v100": 2.48, "k80": 0.45}})  # a sweep file's table
    validate(spec)
    res = run_sweep(spec, tmp_path / "o")
    assert res.failed == 0 and len(res.table) == 2
    recorded = [json.loads((tmp_path / "o" / "runs" / r["run_id"] / "summary.json").read_text())["config"]
                for r in spec.runs()]
    assert [c.get("prices") for c in recorded] == [{"v100": 2.48, "k80": 0.45}, {"v100": 2.48}]
    # Without prices, or with prices its policy does not read, a run's configuration (and so its id) is what
    # it was before prices existed: adding min_cost and prices to a sweep does not re-run its fifo runs.
    assert "prices" not in spec_from_dict({**base, "policies": ["fifo"]}).runs()[0]
    assert "prices" not in spec_from_dict({**base, "policies": ["fifo"], "prices": "v100=1"}).runs()[0]
    again = spec_from_dict({**base, "prices": "k80=0.45, v100=2.480"}).runs()
    assert [r["run_id"] for r in again] == [r["run_id"] for r in spec.runs()]


@pytest.mark.parametrize("options,message", [
    ({"window": [0, "x"]}, "--set window: must be a whole number, got 'x'"),
    ({"policy_options": {"bogus": 1}}, "--set policy_options: unknown key 'bogus' for policy tiresias"),
    ({"policy_options": {"thresholds": [-5, 10]}}, "thresholds: must be positive and increasing"),
    ({"partitions": 2}, "--set partitions: policy 'tiresias' cannot be partitioned"),
    ({"max_time": -1}, "--set max_time: must be positive, got -1"),
])
def test_every_runs_options_are_checked_before_the_first_run(options, message):
    """Each of these failed every run with a TypeError (or ran 0 jobs and said ok) after the sweep started."""
    from optsched.model import OptschedError
    from optsched.sweep.spec import validate

    spec = spec_from_dict({"trace": "gavel", "policies": ["tiresias"], "trace_options": {"jobs": 4},
                           "cluster": "v100=4,k80=4", "options": options})
    with pytest.raises(OptschedError) as e:
        validate(spec)
    assert message in str(e.value)


@pytest.mark.parametrize("key", ["loads", "seeds", "clusters"])
def test_a_value_listed_twice_is_refused_not_run_twice(key):
    from optsched.model import OptschedError
    from optsched.sweep.spec import validate

    value = {"loads": [1, 1], "seeds": [0, 0], "clusters": ["v100=4", "v100=4"]}[key]
    with pytest.raises(OptschedError, match="is listed twice"):
        validate(spec_from_dict({"trace": "gavel", "policies": ["fifo"], "trace_options": {"jobs": 4}, key: value}))


def test_a_yaml_sweep_file_or_a_set_value_repeating_a_key_is_refused(tmp_path):
    from optsched.model import OptschedError

    y = tmp_path / "s.yaml"
    y.write_text("trace: gavel\npolicies: [max_min_fairness]\nloads: [5]\npolicies: [fifo]\n")
    with pytest.raises(OptschedError, match=r"s\.yaml: line 4: key 'policies' appears twice"):
        read_spec_file(y)
    r = CliRunner().invoke(app, ["sweep", "gavel", "--policies", "fifo", "--out", str(tmp_path / "o"),
                                 "--set", 'allocator_options={"queue": "gavel", "queue": "bogus"}'])
    assert r.exit_code == 2 and "--set allocator_options: key 'queue' appears twice" in r.output


@pytest.mark.parametrize("extra,message", [
    ({"options": 1}, "options must be a table"),
    ({"trace_options": [1, 2]}, "trace_options must be a table"),
    ({"auto": 5}, "auto must be a table"),
    ({"workers": "x"}, "workers: must be a whole number"),
    ({"workers": 1.5}, "workers: must be a whole number, got 1.5"),
    ({"cluster": "v100=2", "clusters": ["v100=4"]}, "give cluster or clusters, not both"),
])
def test_a_sweep_file_of_the_wrong_shape_is_one_line(tmp_path, extra, message):
    """A number where a table belongs was a 35-line TypeError traceback; workers 1.5 ran as 1;
    cluster beside clusters was silently ignored."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"trace": "gavel", "policies": ["fifo"], "loads": [1], "executor": "serial", **extra}))
    res = CliRunner().invoke(app, ["sweep", "--file", str(path), "--jobs", "4", "--auto-every", "2",
                                   "--out", str(tmp_path / "o"), "--quiet"])
    assert res.exit_code == 2, res.output
    assert message in (res.stderr or res.output) and "Traceback" not in res.output


def test_a_job_type_the_table_lacks_is_refused_before_any_run(tmp_path):
    """Each run failed alone with the same error (a sweep "finished" with every run failed),
    naming simulate's --throughputs, which a sweep spells trace_options.throughputs."""
    trace = tmp_path / "t.trace"
    trace.write_text("NoSuchModel (batch size 1)\tcmd\t.\t--n\t1\t100\t1\t1\t-1\t0\n")
    res = CliRunner().invoke(app, ["sweep", str(trace), "--policies", "fifo", "--loads", "1",
                                   "--out", str(tmp_path / "o"), "--quiet"])
    assert res.exit_code == 2, res.output
    msg = res.stderr or res.output
    assert "unknown job type 'NoSuchModel (batch size 1)'" in msg and "trace_options.throughputs" in msg
    assert not (tmp_path / "o" / "runs").exists()


def test_an_interrupted_local_sweep_cancels_its_queued_runs_and_stops_the_running_ones(tmp_path):
    """Ctrl-C left the pool's `with` block, which waited for every queued run: the
    sweep ran to its end and then dropped the results. _stop cancels the queue and
    ends the worker running a task (here: touch a marker, sleep 10 minutes)."""
    import multiprocessing as mp
    import time
    from concurrent.futures import ProcessPoolExecutor

    from optsched.sweep.executors import _stop

    def task(i):
        return f"import pathlib, time; pathlib.Path(r'{tmp_path}/{i}').touch(); time.sleep(600)"

    pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"))
    futures = [pool.submit(exec, task(i)) for i in range(4)]
    deadline = time.time() + 120
    while not (tmp_path / "0").exists() and time.time() < deadline:  # the first task runs on the worker
        time.sleep(0.05)
    assert (tmp_path / "0").exists()
    workers = list(pool._processes.values())
    _stop(pool)
    for p in workers:
        p.join(timeout=30)
    assert not any(p.is_alive() for p in workers)  # (without _stop's terminate: asleep for 10 minutes)
    time.sleep(1.0)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["0"]  # no queued task ran
    assert all(f.done() or f.cancelled() for f in futures[2:])
