"""What the CLI prints and refuses: the '*' footnote by policy, the solver list, --format without a trace."""

from __future__ import annotations

from typer.testing import CliRunner

from optsched.cli import app

runner = CliRunner()


def test_the_star_is_a_bottleneck_only_for_max_min_objectives():
    mm = runner.invoke(app, ["solve", "examples/snapshot.json", "--policy", "max_min_fairness"])
    mc = runner.invoke(app, ["solve", "examples/snapshot.json", "--policy", "min_cost"])
    assert mm.exit_code == 0 and mc.exit_code == 0, (mm.output, mc.output)
    assert "bottleneck: these jobs' share cannot rise" in mm.output
    # min_cost leaves some jobs without GPUs: lowest on its measure, not a max-min bottleneck
    assert "bottleneck" not in mc.output and "lowest value of the policy's per-job measure" in mc.output


def test_simulate_lists_the_solvers_solve_lists():
    res = runner.invoke(app, ["simulate", "--solver", "bogus"])
    assert res.exit_code == 2
    assert "choose from auto, ipm, clarabel, highs, highs-simplex)" in res.output and "direct" not in res.output


def test_format_without_a_trace_is_refused():
    for cmd in (["simulate", "--format", "tiresias"], ["trace", "describe", "--format", "tiresias"]):
        res = runner.invoke(app, cmd)
        assert res.exit_code == 2 and "--format" in res.output, (cmd, res.output)


def test_simulate_takes_prices_for_the_cost_aware_policies():
    """min_cost could not run in simulate or compare at all: there was no way to give prices."""
    res = runner.invoke(app, ["simulate", "--policy", "min_cost", "--quiet", "--sample", "5"])
    assert res.exit_code == 2 and "--prices" in res.output
    for bad, msg in (("v100=x", "is not TYPE=$/GPU-hour"), ("a100=1", "unknown GPU type 'a100'"),
                     ("v100=-1", "must be 0 or between 1e-06 and 1e+06"), ("v100=1e-300", "must be 0 or between"),
                     ("v100=1,v100=2", "v100 is given twice")):
        res = runner.invoke(app, ["simulate", "--policy", "min_cost", "--quiet", "--sample", "5", "--prices", bad])
        assert res.exit_code == 2 and msg in res.output, res.output


def test_min_cost_in_the_simulator_prefers_the_cheaper_gpus():
    import numpy as np

    from optsched.sim import simulate
    from optsched.sim.jobs import parse_cluster
    from optsched.traces.generate import default_trace

    trace = default_trace().head(12)
    used = {}
    for cheap in ("k80", "v100"):
        prices = ",".join(f"{t}={0.1 if t == cheap else 5.0}" for t in ("v100", "p100", "k80"))
        r = simulate(trace, parse_cluster("v100=4,p100=4,k80=4", prices=prices), policy="min_cost")
        used[cheap] = {t: float(r.summary["utilization"][t]) for t in ("v100", "k80")}
        assert np.isfinite(r.summary["avg_jct"])
    assert used["k80"]["k80"] > used["v100"]["k80"] and used["v100"]["v100"] > used["k80"]["v100"]


def test_trace_and_table_errors_name_the_row_and_the_option(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                    "a,1,0,100,m,100,0\nb,1,0,100,m,100,0,9\n")
    res = runner.invoke(app, ["simulate", str(path), "--quiet"])
    assert res.exit_code == 2 and "row 3: 8 fields where the header has 7" in res.output, res.output
    res = runner.invoke(app, ["simulate", "--quiet", "--throughputs", str(tmp_path / "none.json")])
    assert res.exit_code == 2 and res.output.startswith("error: --throughputs: ") and "cannot be read" in res.output


def test_service_flags_are_json_booleans():
    import pytest
    from pydantic import ValidationError

    from optsched.service.models import SolveRequest

    snap = {"cluster": {"gpus": {"v100": 1}}, "jobs": []}
    assert SolveRequest.model_validate({"snapshot": snap, "packing": True}).packing is True
    for bad in ("true", 1, "yes"):
        with pytest.raises(ValidationError):
            SolveRequest.model_validate({"snapshot": snap, "packing": bad})


def test_a_job_without_throughput_on_the_cluster_is_named_as_such():
    """--servers 16x4 on a rigid trace: the message blamed the job's 4 GPUs, not the missing 'gpu' rates."""
    res = runner.invoke(app, ["simulate", "--servers", "16x4", "--quiet"])
    assert res.exit_code == 2 and "no throughput on any GPU type of the cluster (64 gpu)" in res.output, res.output
