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
