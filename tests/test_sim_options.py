"""Every `optsched simulate` option × every trace kind (gavel, tiresias, philly,
Pollux/Sia workload): the option is honoured — it changes the result or the
outputs as it should — or refused up front, by name, with exit code 2.

The options are enumerated from the command itself, so a new option without a
case here fails ``test_every_simulate_option_has_a_case``. Tiny traces keep
it fast."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

import optsched.cli  # noqa: F401  (registers every command)
from optsched.cli import app

KINDS = ("gavel", "tiresias", "philly", "pollux")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    from conftest import peer_data_dir
    from optsched.traces.generate import generate_gavel
    from optsched.traces.io import write_trace
    from optsched.traces.throughputs import ThroughputTable, default_throughputs, gavel_throughputs

    peer = peer_data_dir()
    if not peer.is_dir():
        pytest.skip(f"peer data not found at {peer} (set OPTSCHED_PEER_DATA)")
    d = tmp_path_factory.mktemp("traces")
    ours, gavel = default_throughputs(), gavel_throughputs(peer)
    common = ThroughputTable(alone={k: v for k, v in ours.alone.items() if gavel.has_model(k[0])}, gpu_types=ours.gpu_types)
    write_trace(generate_gavel(common, 6, 40.0, seed=3), d / "small.trace", "gavel")  # job types in both tables
    wl = pd.read_csv(peer / "pollux" / "workloads" / "workload-1.csv")
    wl = wl[wl.application == "ncf"].head(2).copy()
    wl.iloc[1, wl.columns.get_loc("num_replicas")] = 2  # one 2-GPU job (for --skip-unrunnable on 1 GPU)
    wl.to_csv(d / "workload.csv", index=False)
    return {
        "gavel": ([str(d / "small.trace")], "v100=2,p100=2,k80=2"),
        "tiresias": ([str(peer / "tiresias" / "60_job.csv"), "--sample", "5"], "gpu=16"),
        "philly": ([str(peer / "philly" / "philly.csv.gz"), "--sample", "5"], "v100=2,p100=2,k80=2"),
        "pollux": ([str(d / "workload.csv")], "gpu=8"),
        "gavel_table": str(peer / "gavel" / "simulation_throughputs.json"),
    }


def _run(traces, kind, extra, tmp_path, cluster=True):
    args, cl = traces[kind]
    cmd = ["simulate", *args, "--quiet", "--out", str(tmp_path / "out"), "--json"]
    if cluster and not any(a in ("--cluster", "--servers") for a in extra):
        cmd += ["--cluster", cl]
    res = CliRunner().invoke(app, cmd + list(extra))
    summary = json.loads(res.stdout) if res.exit_code == 0 else None
    return res, summary


_BASE: dict = {}


def _base(traces, kind, tmp_path):
    if kind not in _BASE:
        res, s = _run(traces, kind, [], tmp_path / "base")
        assert res.exit_code == 0, res.output
        _BASE[kind] = s
    return _BASE[kind]


def _config(tmp_path) -> dict:
    return json.loads((tmp_path / "out" / "summary.json").read_text())["config"]


def _differs(keys):
    return lambda b, s, d: any(b.get(k) != s.get(k) for k in keys)


# option -> {kind: (extra args, check(base summary, summary, tmp dir)) or ("refused",)}; "*" = every kind
CASES = {
    # (pollux/sia on a workload: tests/test_cli_elastic.py)
    "--policy": {"*": (["--policy", "fifo"], lambda b, s, d: s["policy"] == "fifo" and _config(d)["policy"] == "fifo")},
    "--format": {"*": ("format",)},
    "--cluster": {"*": (["--cluster", "v100=8,p100=8,k80=8"], lambda b, s, d: set(s["utilization"]) == {"v100", "p100", "k80"}),
                  "tiresias": (["--cluster", "gpu=8"], lambda b, s, d: _config(d)["cluster"] == {"gpu": 8}),
                  "pollux": (["--cluster", "gpu=4"], lambda b, s, d: _config(d)["cluster"] == {"gpu": 4})},
    "--servers": {"*": (["--servers", "3x4", "--cluster", "v100"], lambda b, s, d: set(s["utilization"]) == {"v100"}),
                  "tiresias": (["--servers", "2x4"], lambda b, s, d: set(s["utilization"]) == {"gpu"}),
                  "pollux": (["--servers", "2x4"], lambda b, s, d: set(s["utilization"]) == {"gpu"})},
    "--round-length": {"*": (["--round-length", "37"], lambda b, s, d: s["round_length"] == 37 and s["rounds"] != b["rounds"])},
    "--seed": {"*": (["--seed", "5"], lambda b, s, d: _config(d)["seed"] == 5)},
    "--throughputs": {"gavel": (["--throughputs", "GAVEL"], _differs(["avg_jct"])),
                      "philly": (["--throughputs", "GAVEL"], _differs(["avg_jct"])),
                      "tiresias": ("refused",), "pollux": ("refused",)},
    "--min-recompute-interval": {"*": (["--min-recompute-interval", "100000"], lambda b, s, d: s["recomputations"] < b["recomputations"])},
    "--recompute-every": {"*": (["--recompute-every", "1"], lambda b, s, d: s["recomputations"] == s["rounds"])},
    # (shorter than a round: 360 s, 60 s for elastic jobs; longer is refused, tests/test_fuzz_options.py)
    "--restart-overhead": {"*": (["--restart-overhead", "300"], lambda b, s, d: s["avg_jct"] > b["avg_jct"]),
                           "pollux": (["--restart-overhead", "50"], lambda b, s, d: s["avg_jct"] > b["avg_jct"])},
    # (jobs that overlap wait: JCT never lower; tests/test_sim.py checks the hold-back itself)
    "--admission": {"*": (["--admission", "load", "--load-factor", "0.01"],
                          lambda b, s, d: _config(d)["admission"] == "load" and s["avg_jct"] >= b["avg_jct"])},
    "--load-factor": {"*": ("refused",)},  # without --admission load
    "--window": {"*": (["--window", "0:1"], lambda b, s, d: s["window"] == [0, 1] and "window_avg_jct" in s)},
    "--sample": {"*": (["--sample", "1"], lambda b, s, d: s["jobs"] == 1)},
    "--skip-unrunnable": {"*": (["--skip-unrunnable", "--cluster", "v100=1,p100=1,k80=1"], lambda b, s, d: s["skipped_jobs"] > 0 or s["jobs"] == b["jobs"]),
                          "tiresias": (["--skip-unrunnable", "--cluster", "gpu=1"], lambda b, s, d: s["skipped_jobs"] > 0),
                          "pollux": (["--skip-unrunnable", "--cluster", "gpu=1"], lambda b, s, d: s["skipped_jobs"] > 0)},
    "--solver": {"*": (["--solver", "clarabel"], lambda b, s, d: s["solver"] == "clarabel"),
                 "pollux": (["--solver", "no-such-solver"], "refused")},
    "--queue": {"*": (["--queue", "gavel"], lambda b, s, d: _config(d)["allocator_options"] == {"queue": "gavel"})},
    "--type-order": {"*": (["--type-order", "shuffle"], lambda b, s, d: _config(d)["allocator_options"] == {"type_order": "shuffle"})},
    # migration-aware walk: the allocator gets the cost (and H = 20·cost/round) and never moves jobs more than without it
    "--migration-cost": {"*": (["--migration-cost", "3600"], lambda b, s, d: _config(d)["allocator_options"] == {"migration_cost": 3600.0}
                               and s["migrations"] <= b["migrations"])},
    "--hysteresis": {"*": (["--hysteresis", "50"], lambda b, s, d: _config(d)["allocator_options"] == {"hysteresis": 50.0}
                           and s["migrations"] <= b["migrations"])},
    # min_cost could not run in the simulator before (no way to give prices); the cheapest type is used
    "--prices": {"*": (["--policy", "min_cost", "--prices", "v100=3,p100=2,k80=0.5"],
                       lambda b, s, d: s["utilization"]["k80"] > 0 and s["jobs"] == b["jobs"]),
                 "tiresias": (["--policy", "min_cost", "--prices", "gpu=1"], lambda b, s, d: s["jobs"] == b["jobs"]),
                 "pollux": (["--policy", "min_cost", "--prices", "gpu=1"], lambda b, s, d: s["jobs"] == b["jobs"])},
    "--placement": {"*": (["--placement", "first_fit"], lambda b, s, d: _config(d)["placement"] == "first_fit")},
    "--packing": {"gavel": (["--packing", "--throughputs", "GAVEL"], lambda b, s, d: s["packing"] is True),
                  "philly": (["--packing", "--throughputs", "GAVEL"], lambda b, s, d: s["packing"] is True),
                  "tiresias": ("refused",), "pollux": ("refused",)},
    # POP for every recomputation (tests/test_pop_stages.py checks each merged allocation)
    "--partitions": {"*": (["--partitions", "2"], lambda b, s, d: _config(d)["partitions"] == 2 and s["jobs_failed"] == 0),
                     "pollux": (["--partitions", "2"], "refused")},  # elastic jobs
    # (the fixtures carry no convergence profiles; a trace with them: tests/test_seed_loss_termination.py)
    "--loss-threshold": {"*": (["--loss-threshold", "0.05"], "refused")},
    # (values refused by name: tests/test_seed_policy_options.py)
    "--policy-option": {"*": (["--policy", "tiresias", "--policy-option", "thresholds=1"],
                              lambda b, s, d: _config(d)["policy_options"] == {"thresholds": [1.0]})},
    "--out": {"*": ([], lambda b, s, d: all((d / "out" / f).stat().st_size > 0 for f in
                                            ("jobs.csv", "jobs.parquet", "rounds.csv", "rounds.parquet", "summary.json")))},
    "--plot": {"*": (["--plot"], lambda b, s, d: (d / "out" / "jct_cdf.png").exists() and (d / "out" / "utilization.png").exists())},
    "--json": {"*": ([], lambda b, s, d: s["schema_version"] == 1)},
    "--quiet": {"*": ([], lambda b, s, d: True)},
}


def _case(option, kind):
    cases = CASES[option]
    return cases.get(kind, cases.get("*"))


def test_every_simulate_option_has_a_case():
    import typer

    cmd = typer.main.get_command(app)
    params = cmd.commands["simulate"].params
    opts = {o for p in params if p.param_type_name == "option" for o in p.opts if o.startswith("--")}
    assert opts == set(CASES), f"options without a case: {sorted(opts - set(CASES))}; stale: {sorted(set(CASES) - opts)}"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("option", sorted(CASES))
def test_option_is_honoured_or_refused_by_name(traces, kind, option, tmp_path):
    case = _case(option, kind)
    if case == ("format",):
        res, s = _run(traces, kind, ["--format", kind], tmp_path)
        assert res.exit_code == 0, res.output
        assert s["avg_jct"] == _base(traces, kind, tmp_path)["avg_jct"]
        res, _ = _run(traces, kind, ["--format", "nosuch"], tmp_path)
        assert res.exit_code == 2 and "--format" in res.stderr
        return
    if case[0] == "refused" or (len(case) == 2 and case[1] == "refused"):
        extra = case[0] if isinstance(case[0], list) else _refusal_args(option)
        extra = [traces["gavel_table"] if a == "GAVEL" else a for a in extra]
        res, _ = _run(traces, kind, extra, tmp_path)
        assert res.exit_code == 2, res.output
        assert option in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        return
    extra, check = case
    extra = [traces["gavel_table"] if a == "GAVEL" else a for a in extra]
    base = _base(traces, kind, tmp_path)
    res, s = _run(traces, kind, extra, tmp_path)
    assert res.exit_code == 0, res.output
    assert check(base, s, tmp_path), (option, kind, {k: (base.get(k), s.get(k)) for k in ("avg_jct", "rounds", "recomputations")})


def _refusal_args(option):
    return {"--throughputs": ["--throughputs", "GAVEL"], "--load-factor": ["--load-factor", "2"],  # even the default value, given, needs --admission load
            "--packing": ["--packing"]}[option]


@pytest.mark.parametrize("option,value", [("--queue", "gavel"), ("--type-order", "shuffle"), ("--placement", "first_fit")])
def test_walk_options_are_refused_for_configuration_policies(traces, option, value, tmp_path):
    res, _ = _run(traces, "pollux", ["--policy", "pollux", option, value], tmp_path)
    assert res.exit_code == 2 and option in res.stderr


def test_unknown_policy_is_refused_before_any_work(traces, tmp_path):
    res, _ = _run(traces, "pollux", ["--policy", "nosuch"], tmp_path)
    assert res.exit_code == 2 and "--policy" in res.stderr
    assert res.stdout == ""


def test_plot_without_out_writes_to_the_documented_default(traces, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args, cl = traces["gavel"]
    res = CliRunner().invoke(app, ["simulate", *args, "--cluster", cl, "--plot", "--quiet"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "optsched-out" / "jct_cdf.png").exists()


def test_rigid_and_elastic_runs_share_one_schema(traces, tmp_path):
    outs = {}
    for kind in ("gavel", "pollux"):
        res, s = _run(traces, kind, [], tmp_path / kind)
        assert res.exit_code == 0, res.output
        d = tmp_path / kind / "out"
        outs[kind] = (set(s), list(pd.read_csv(d / "jobs.csv").columns), list(pd.read_csv(d / "rounds.csv").columns)[:13],
                      set(json.loads((d / "summary.json").read_text())))
    assert outs["gavel"] == outs["pollux"]
