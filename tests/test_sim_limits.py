"""The documented limits of a simulation's options (optsched.sim.limits) hold in
the library, not only in the CLI: ``optsched.simulate`` and sweeps run from
Python refuse an out-of-range value with one OptschedError naming the option
before the first round (``on_round`` never fires, the policy is never solved),
where they used to loop for ever (round_length=1e-300, restart_overhead=inf).
The CLI calls the same functions; the API's messages name its keywords
(``round_length``), the CLI's its flags (``--round-length``)."""

from __future__ import annotations

import numpy as np
import pytest

import optsched
from optsched.model import OptschedError
from optsched.sim import simulate
from optsched.sim.loop import SimConfig
from optsched.traces.generate import generate_gavel
from optsched.traces.throughputs import ThroughputTable, default_throughputs
from optsched.traces.trace import make_trace

CLUSTER = "v100=2,p100=2,k80=2"


@pytest.fixture(scope="module")
def trace():
    return generate_gavel(default_throughputs(), 4, 30.0, seed=1)


@pytest.fixture
def never_solved(monkeypatch):
    """Fails the test if any round's policy is solved: the refusal must come before the first round."""
    import optsched.core as core  # (the scheduling core solves every executor's rounds)

    def boom(*a, **k):
        raise AssertionError("a round was solved: the option was not refused up front")

    monkeypatch.setattr(core, "compute_allocation", boom)


def _refused(trace, option: str, **kw) -> str:
    rounds = []
    with pytest.raises(OptschedError) as err:
        simulate(trace, kw.pop("cluster", CLUSTER), on_round=rounds.append, **kw)
    msg = str(err.value)
    assert msg.startswith(option) and "\n" not in msg, msg
    assert rounds == []
    return msg


@pytest.mark.parametrize("kw, option, words", [
    ({"round_length": 1e-300}, "round_length", ">= 0.001 s"),
    ({"round_length": float("inf")}, "round_length", "finite"),
    ({"round_length": float("nan")}, "round_length", "finite"),
    ({"round_length": 1e8}, "round_length", "<= 1e+07 s"),
    ({"restart_overhead": float("inf")}, "restart_overhead", "finite"),
    ({"restart_overhead": 1e308}, "restart_overhead", "shorter than a round"),
    ({"restart_overhead": 360.0}, "restart_overhead", "shorter than a round (360 s)"),
    ({"restart_overhead": -1.0}, "restart_overhead", ">= 0"),
    ({"min_recompute_interval": float("inf")}, "min_recompute_interval", "finite"),
    ({"recompute_every": 0}, "recompute_every", ">= 1"),
    ({"admission": "load", "load_factor": float("inf")}, "load_factor", "finite"),
    ({"allocator_options": {"migration_cost": 1e308}}, "allocator_options['migration_cost']", "<= 1e+07 s"),
    ({"allocator_options": {"hysteresis": float("inf")}}, "allocator_options['hysteresis']", "finite"),
    ({"seed": -1}, "seed", "0 to 2^63 - 1"),
])
def test_python_api_refuses_out_of_range_options_by_name(trace, never_solved, kw, option, words):
    assert words in _refused(trace, option, **kw)


def test_too_many_rounds_are_refused_before_the_first(trace, never_solved):
    """The lower bound on rounds (the longest job alone at its fastest rate) names the job and the bound."""
    msg = _refused(trace, "round_length", round_length=0.01)
    assert "rounds of 0.01 s need at least" in msg and "limited to 100,000 rounds" in msg and "alone runs" in msg


@pytest.mark.parametrize("cluster", [{"v100": 10**9}, "v100=1000000000", {"v100": 60_000, "k80": 60_000}])
def test_a_cluster_over_the_gpu_limit_is_one_line_naming_the_field(trace, never_solved, cluster):
    msg = _refused(trace, "cluster.gpus", cluster=cluster)
    assert "100,000" in msg


def test_a_huge_cluster_with_tiny_rounds_is_refused_by_the_rounds_bound(trace, never_solved):
    """Spreading the work over 100,000 GPUs does not shorten the longest job: still too many rounds."""
    msg = _refused(trace, "round_length", cluster={"v100": 100_000}, round_length=0.001)
    assert "alone runs" in msg


def test_elastic_jobs_need_rounds_of_a_second(never_solved):
    wl = make_trace({"job_id": ["e0"], "arrival_time": [0.0], "model": ["ncf"], "scale_factor": [1],
                     "steps_total": [np.inf], "duration": [np.nan]}, "mixed", "test", extra={"batch_size": [256.0]})
    msg = _refused(wl, "round_length", cluster="gpu=4", policy="pollux", round_length=0.5)
    assert "elastic jobs" in msg


def test_the_edges_inside_the_limits_run(trace):
    """restart_overhead just under a round runs; tiny rounds run when max_time caps the rounds."""
    r = simulate(trace, CLUSTER, round_length=360.0, restart_overhead=359.0)
    assert r.summary["jobs_completed"] == 4
    rounds = []
    r = simulate(trace, CLUSTER, round_length=0.01, max_time=float(trace.jobs["arrival_time"].min()) + 50.0,
                 on_round=rounds.append)
    assert 0 < len(r.rounds) <= 5001 and len(rounds) == len(r.rounds)


def test_a_window_bounds_the_rounds_by_its_own_jobs():
    """The run stops when the window's jobs finish: only their length counts in the bound."""
    table = ThroughputTable(alone={("ResNet", 1): {"gpu": 1.0}}, gpu_types=("gpu",))
    tr = make_trace({"job_id": ["short", "long"], "arrival_time": [0.0, 1.0], "model": ["ResNet", "ResNet"],
                     "scale_factor": [1, 1], "steps_total": [100.0, 1e9], "duration": [np.nan, np.nan]},
                    "gavel", "test")
    with pytest.raises(OptschedError, match=r"^round_length: .*job 'long' alone"):
        simulate(tr, "gpu=2", throughputs=table, round_length=1.0)
    r = simulate(tr, "gpu=2", throughputs=table, round_length=1.0, window=(0, 1))
    assert r.jobs.set_index("job_id").loc["short", "completion_time"] == pytest.approx(100.0, abs=2.0)


def test_simconfig_validate_checks_the_same_limits():
    with pytest.raises(OptschedError, match=r"^--round-length: must be a finite number"):
        SimConfig(round_length=float("inf")).validate()
    with pytest.raises(OptschedError, match=r"^--round-length: must be >= 1 s for elastic jobs"):
        SimConfig(round_length=0.5).validate(elastic=True)
    SimConfig(round_length=0.5).validate()


def test_the_cli_uses_the_simulators_checks():
    import optsched.cli.limits as cli
    import optsched.sim.limits as sim
    import optsched.sweep.spec as sweep

    assert cli.check_sim_options is sim.check_sim_options and cli.check_rounds is sim.check_rounds
    assert cli.number is sim.number and cli.MAX_ROUNDS == sim.MAX_ROUNDS
    assert cli.check_sweep_rounds is sweep.check_sweep_rounds


@pytest.mark.parametrize("options, option", [({"round_length": 1e-300}, "--set round_length"),
                                             ({"restart_overhead": float("inf")}, "--set restart_overhead"),
                                             ({"round_length": 0.01}, "--set round_length")])
def test_a_sweep_from_python_is_refused_before_any_run(tmp_path, options, option):
    from optsched.sweep import run_sweep, spec_from_dict

    spec = spec_from_dict({"trace": "gavel", "policies": ["fifo"], "loads": [30], "cluster": CLUSTER,
                           "trace_options": {"jobs": 3}, "options": options, "executor": "serial"})
    with pytest.raises(OptschedError, match=f"^{option}: "):
        run_sweep(spec, tmp_path)
    assert not (tmp_path / "runs").exists()


def test_an_unvalidated_sweep_records_the_refusal_per_run(tmp_path):
    """run_sweep(validate=False) still cannot hang: each run fails with the simulator's own message."""
    from optsched.sweep import run_sweep, spec_from_dict

    spec = spec_from_dict({"trace": "gavel", "policies": ["fifo"], "loads": [30], "cluster": CLUSTER,
                           "trace_options": {"jobs": 3}, "options": {"round_length": 1e-300}, "executor": "serial"})
    res = run_sweep(spec, tmp_path, validate=False)
    assert res.failed == 1
    assert "--round-length: must be >= 0.001 s" in res.table["error"].iloc[0]


def test_top_level_simulate_is_the_checked_one(trace):
    with pytest.raises(OptschedError, match=r"^round_length"):
        optsched.simulate(trace, CLUSTER, round_length=1e-300)


def test_the_cli_names_the_flags_the_api_names_the_keywords():
    from typer.testing import CliRunner

    from optsched.cli import app
    from optsched.sim.limits import keyword_names

    assert keyword_names("--queue: x; --servers 16x4 --type-order, --skip-unrunnable drops") == (
        "allocator_options['queue']: x; cluster 16x4 allocator_options['type_order'], skip_unrunnable drops")
    res = CliRunner().invoke(app, ["simulate", "--round-length", "1e-300", "--quiet"])
    assert res.exit_code == 2 and "error: --round-length: must be >= 0.001 s, got 1e-300" in res.output


@pytest.mark.parametrize("rate", [float("nan"), -1.0, float("inf")])
def test_a_progress_rate_that_is_not_a_rate_is_refused(trace, rate):
    """NaN and negative rates looped for ever; inf finished every job at once with a numpy warning."""
    with pytest.raises(OptschedError, match=r"^progress_rate: must return a finite number of steps/s >= 0"):
        simulate(trace, CLUSTER, progress_rate=lambda job: rate)


def test_a_run_whose_jobs_stop_progressing_ends_at_the_round_limit(trace, monkeypatch):
    """A rate of 0 passes every up-front bound; the loop itself stops at MAX_ROUNDS (lowered here)."""
    import optsched.sim.loop as loop

    monkeypatch.setattr(loop, "MAX_ROUNDS", 50)
    with pytest.raises(OptschedError, match=r"^simulate: the run reached the limit of 50 rounds .* stopped progressing"):
        simulate(trace, CLUSTER, progress_rate=lambda job: 0.0)


@pytest.mark.parametrize("kw, message", [
    ({"window": (0, "2")}, "window: must be a whole number, got '2'"),
    ({"window": (0,)}, "window: must be (START, END) job indices"),
    ({"time_limit": "1"}, "time_limit: must be a number, got '1'"),
    ({"max_time": -1}, "max_time: must be positive"),
    ({"max_time": float("nan")}, "max_time: must be a finite number"),
    ({"seed": 1.5}, "seed: must be a whole number"),
    ({"recompute_every": 1.5}, "recompute_every: must be a whole number"),
    ({"policy_options": None}, "policy_options: must be a dict"),
    ({"policy_options": {"bogus": 1}}, "policy_options: unknown key 'bogus' for policy max_min_fairness"),
    ({"allocator_options": {"work_conserving": "x"}}, "work_conserving: must be true or false"),
    ({"cluster": [1]}, "cluster: expected a Cluster"),
])
def test_the_python_api_refuses_what_only_python_can_pass(trace, never_solved, kw, message):
    """Strings, float seeds, None dicts and unknown policy options raised TypeError/IndexError/AttributeError,
    or ran (max_time=-1: 0 jobs, 'ok')."""
    with pytest.raises(OptschedError) as e:
        simulate(trace, kw.pop("cluster", CLUSTER), **kw)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_run_finishing_on_the_last_allowed_round_is_not_refused(monkeypatch, tmp_path):
    """The in-loop limit fired after the round that finished the last job (0 jobs unfinished)."""
    import optsched.sim.loop as loop

    monkeypatch.setattr(loop, "MAX_ROUNDS", 50)
    path = tmp_path / "one.csv"
    path.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,1,0,100,vgg19,49.5,30\n")
    r = simulate(path, "v100=1", round_length=1.0, policy="fifo")
    assert r.summary["jobs_completed"] == 1 and len(r.rounds) == 50


def test_an_infinite_time_limit_means_no_limit():
    import optsched

    from optsched.cli.solve import example_snapshot_text
    from optsched.sim.loop import SimConfig

    assert optsched.solve(example_snapshot_text(), time_limit=float("inf")).status == "optimal"

    SimConfig(time_limit=float("inf")).validate()


def test_a_run_stuck_for_good_says_so_after_a_thousand_rounds(trace):
    """With no arrival left and nothing progressing for STALL_ROUNDS rounds nothing can change:
    the run used to take the 100,000-round limit (~45 s) to end."""
    from optsched.sim.loop import STALL_ROUNDS

    with pytest.raises(OptschedError, match=rf"^simulate: no job progressed in {STALL_ROUNDS:,} rounds .* no arrivals left"):
        simulate(trace, CLUSTER, progress_rate=lambda job: 0.0)
    assert STALL_ROUNDS < 100_000
