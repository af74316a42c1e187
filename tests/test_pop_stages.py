"""POP (``partitions``) in the simulator and in service sessions, not only in
`optsched solve`: every recomputation is POP's merged solve, each merged
allocation satisfies the whole cluster's constraints, a session reloaded from
its database decides like one that never stopped, and combinations POP cannot
serve are refused in one line naming the option."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from optsched import pop
from optsched.model import OptschedError
from optsched.service import Session, Store, workload
from test_scale import feasible
from test_service_session import decisions


@pytest.fixture
def pop_calls(monkeypatch):
    """Every call of POP's merged solve, with its instance, group count and result."""
    calls: list[tuple] = []
    original = pop.solve_partitioned

    def spy(inst, policy, partitions, *a, **kw):
        alloc = original(inst, policy, partitions, *a, **kw)
        calls.append((inst, partitions, alloc))
        return alloc

    monkeypatch.setattr(pop, "solve_partitioned", spy)
    return calls


def test_simulated_recomputations_are_pop_solves_feasible_for_the_whole_cluster(pop_calls):
    from optsched.sim import simulate
    from optsched.traces.generate import generate_gavel
    from optsched.traces.throughputs import default_throughputs

    trace = generate_gavel(default_throughputs(), 40, 6.0, seed=3, multi_gpu=True)
    r = simulate(trace, {"v100": 8, "p100": 8, "k80": 8}, policy="max_min_fairness", partitions=3, seed=3)
    assert r.summary["jobs_completed"] == 40 and r.summary["jobs_failed"] == 0
    assert len(pop_calls) == r.summary["recomputations"] > 0
    assert r.config["partitions"] == 3
    for inst, k, alloc in pop_calls:
        assert k == 3
        feasible(inst, alloc.fractions)
        assert alloc.explanation["partitions"] == min(3, inst.n)
    # Same input and seed, same schedule.
    again = simulate(trace, {"v100": 8, "p100": 8, "k80": 8}, policy="max_min_fairness", partitions=3, seed=3)
    assert np.array_equal(r.jobs["completion_time"].to_numpy(), again.jobs["completion_time"].to_numpy())


@pytest.mark.parametrize("options,message", [
    ({"partitions": 2, "policy": "fifo"}, "partitions: policy 'fifo' cannot be partitioned"),
    ({"partitions": 0}, "partitions: must be an integer between 1 and 1024"),
    ({"partitions": 2, "packing": True}, "partitions: space sharing (packing) cannot be partitioned"),
])
def test_simulate_refuses_what_pop_cannot_serve(options, message):
    from optsched.sim import simulate
    from optsched.traces.generate import generate_gavel
    from optsched.traces.throughputs import default_throughputs

    trace = generate_gavel(default_throughputs(), 5, 6.0, seed=0)
    with pytest.raises(OptschedError, match=message.replace("(", r"\(").replace(")", r"\)")):
        simulate(trace, {"v100": 2}, **{"policy": "max_min_fairness", **options})


def test_cli_simulate_partitions_runs_and_refuses_in_one_line():
    from optsched.cli import app

    runner = CliRunner()
    ok = runner.invoke(app, ["simulate", "--partitions", "2", "--quiet", "--json"])
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(app, ["simulate", "--partitions", "2", "--policy", "srtf", "--quiet"])
    assert bad.exit_code == 2
    assert "--partitions: policy 'srtf' cannot be partitioned" in bad.output
    assert "Traceback" not in bad.output


@pytest.mark.parametrize("jobs", [0, 3])
@pytest.mark.parametrize("args,message", [
    (["--packing"], "--partitions: space sharing (packing) cannot be partitioned"),
    (["--policy", "fifo"], "--partitions: policy 'fifo' cannot be partitioned"),
    (["--policy", "no_such_policy"], "--policy: unknown policy 'no_such_policy'"),
])
def test_cli_solve_refuses_what_pop_cannot_split_with_or_without_jobs(tmp_path, jobs, args, message):
    """`optsched solve --partitions` checks before solving, as POST /v1/solve does:
    a snapshot with no jobs (which takes the exact path) is refused the same way."""
    import json

    from optsched.cli import app

    snap = {"cluster": {"gpus": {"v100": 2}},
            "jobs": [{"id": f"j{i}", "throughput": {"v100": 1.0 + i}} for i in range(jobs)]}
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snap))
    out = CliRunner().invoke(app, ["solve", str(path), "--partitions", "2", *args])
    assert out.exit_code == 2, out.output
    assert message in out.output and "Traceback" not in out.output
    ok = CliRunner().invoke(app, ["solve", str(path), "--partitions", "2", "--json"])
    assert ok.exit_code == 0, ok.output


def test_a_pop_session_reloaded_from_its_database_decides_like_one_that_never_stopped(tmp_path, pop_calls):
    cfg = {"cluster": workload.CLUSTER, "partitions": 2, "recompute_every": 3, "session_id": "s"}
    twin = Session.create(cfg, store=Store(tmp_path / "twin.db"))
    db = tmp_path / "reload.db"
    s = Session.create(cfg, store=Store(db))
    dt, ds = workload.Driver(7), workload.Driver(7)
    for r in range(25):
        dt.before_round(twin)
        ds.before_round(s)
        if r % 3 == 1:
            s = Session.load("s", Store(db))
        assert decisions(dt.next_round(twin)) == decisions(ds.next_round(s)), f"round {r}"
    assert s.config.partitions == 2
    assert pop_calls, "no recomputation went through POP"
    for inst, k, alloc in pop_calls:
        feasible(inst, alloc.fractions)


@pytest.mark.parametrize("cfg,message", [
    ({"policy": "las", "partitions": 2}, "partitions: policy 'las' cannot be partitioned"),
    ({"packing": True, "partitions": 4}, "partitions: space sharing"),
])
def test_a_session_pop_cannot_serve_is_refused_at_creation(cfg, message):
    with pytest.raises(OptschedError, match=message):
        Session.create({"cluster": workload.CLUSTER, **cfg})


def test_elastic_jobs_fall_back_to_the_exact_solve_with_a_note():
    from optsched.bench import instances
    from optsched.model import Instance, parse_snapshot
    from optsched.policy import solve_instance

    inst = Instance.from_snapshot(parse_snapshot(instances.elastic_snapshot(0, 12, [("v100", 16, 4), ("k80", 16, 4)])))
    assert pop.has_elastic(inst)
    alloc = pop.solve_maybe_partitioned(inst, "max_min_fairness", 3)
    exact = solve_instance(inst, "max_min_fairness")
    assert alloc.explanation["partitions_note"].startswith("elastic jobs")
    assert np.allclose(alloc.fractions, exact.fractions)


def test_no_jobs_is_the_exact_solve_in_every_entry_point(pop_calls):
    """Nothing to split: the CLI, the service's solve and sessions all take the exact path."""
    from optsched.model import Instance, parse_snapshot
    from optsched.policy import solve_instance

    inst = Instance.from_snapshot(parse_snapshot({"cluster": {"gpus": {"v100": 2}}, "jobs": []}))
    alloc = pop.solve_maybe_partitioned(inst, "max_min_fairness", 3)
    assert alloc.status == solve_instance(inst, "max_min_fairness").status
    assert "partitions" not in alloc.explanation and "partitions_note" not in alloc.explanation
    s = Session.create({"cluster": workload.CLUSTER, "partitions": 3})
    assert s.next_round()["allocation_status"] == alloc.status
    assert pop_calls == []


@pytest.mark.parametrize("bad", range(5))
def test_a_groups_error_names_the_job_by_its_index_in_the_snapshot(bad):
    """A policy error inside a POP group named the job's position in its group
    (jobs[1] for the snapshot's jobs[3]); it names the snapshot's index."""
    from optsched.model import parse_snapshot

    jobs = [{"id": f"j{i}", "throughput": {"v100": 1.0 + i}, **({} if i == bad else {"steps_total": 10})}
            for i in range(5)]
    from optsched.model import Instance

    inst = Instance.from_snapshot(parse_snapshot({"cluster": {"gpus": {"v100": 2}}, "jobs": jobs}))
    with pytest.raises(OptschedError, match=rf"^jobs\[{bad}\]\.steps_total: .*job 'j{bad}'"):
        pop.solve_partitioned(inst, "makespan", 2)


@pytest.mark.parametrize("k", [2, 3])
def test_pop_hierarchical_objective_is_in_the_exact_solves_units(k):
    """Each group's level counted only the tenant's jobs inside it, so the merged objective fell by about k
    (12.7 → 6.2 → 4.1) while the allocation barely changed: the merged level is now the program's own."""
    from pathlib import Path

    import optsched
    from optsched.formulations.hierarchical import first_level
    from optsched.model import Instance

    from optsched.pop import solve_maybe_partitioned

    snap = optsched.parse_snapshot((Path(__file__).parents[1] / "examples" / "snapshot.json").read_text())
    inst = Instance.from_snapshot(snap)
    exact = optsched.solve(snap, "max_min_fairness_hierarchical")
    pop = solve_maybe_partitioned(inst, "max_min_fairness_hierarchical", k, workers=1)
    level, jobs = first_level(inst, pop.fractions)
    assert pop.objective == pytest.approx(level, rel=1e-9)
    assert pop.explanation["bottleneck_jobs"] == [inst.job_ids[m] for m in jobs] and len(jobs) >= 1
    assert 0.8 * exact.objective <= pop.objective <= exact.objective * (1 + 1e-6)
