"""Migration-aware rounds (Allocator(migration_cost=...)): the invariants still
hold, the fractions still converge to X on long contended runs, running jobs
move far less, never stay on a type their X gives 0 to, and the option off
changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import random_instance
from test_allocator import allocation, check_round, cluster_of, feasible_rounds_average, random_cluster, run, subset
from optsched.allocator import HYSTERESIS_PER_COST, Allocator
from optsched.model import Cluster, Instance, OptschedError
from optsched.policy import solve_instance


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), placement=st.sampled_from(["consolidated", "first_fit", "cpsat"]),
       queue=st.sampled_from(["phased", "per_type", "global", "gavel"]), cost=st.sampled_from([30.0, 120.0, 3600.0]))
def test_migration_aware_rounds_keep_the_invariants(seed, placement, queue, cost):
    """Never more GPUs than exist, exactly scale_factor GPUs of one type,
    GPUs shared only by allocated pairs — with X changing, jobs leaving."""
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, int(rng.integers(1, 40)), int(rng.integers(1, 4)))
    cluster = random_cluster(rng, inst)
    allocator = Allocator(cluster, placement=placement, seed=seed % 1000, placement_time_limit=0.2, queue=queue,
                          migration_cost=cost)
    active = np.ones(inst.n, bool)
    alloc = None
    for r in range(9):
        view = subset(inst, active)
        if r % 3 == 0:  # a new X every third round; the one in force otherwise
            X = rng.random((view.n, view.k)) * view.available
            X /= np.maximum(X.sum(axis=1, keepdims=True), 1.0)
            X[rng.random(view.n) < 0.2] = 0.0
            pairs, pf = [], []
            for _ in range(int(rng.integers(0, 4))):
                a, b = rng.choice(view.n, 2, replace=False) if view.n > 1 else (0, 0)
                if a != b and (a, b) not in pairs and (b, a) not in pairs:
                    pairs.append((a, b))
                    pf.append(rng.random(view.k) * (rng.random(view.k) < 0.7) * 0.5)
            alloc = allocation(view, X, pairs or None, pf or None) if pairs else allocation(view, X)
        p = allocator.next_round(view, alloc)
        check_round(p, view, cluster, alloc)
        assert set(p.started) | set(p.continued) == set(p.assignments)
        if active.sum() > 1 and rng.random() < 0.4:
            m = int(rng.choice(np.flatnonzero(active)))
            active[m] = False
            allocator.remove([inst.job_ids[m]])


@pytest.mark.parametrize("seed,cost", [(0, 120.0), (1, 120.0), (2, 360.0)])
def test_fractions_converge_to_the_max_min_allocation_with_migration_cost(seed, cost):
    """1,000 rounds on a contended cluster (150 jobs, scale factors 1/2/4/8),
    X from the max-min LP: every |fraction − X| ≤ 0.02 even with a hysteresis
    of 6.7 or 20 rounds."""
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, 150, 3)
    alloc = solve_instance(inst, "max_min_fairness")
    F = run(Allocator(cluster_of(inst), migration_cost=cost), inst, alloc, 1000)
    assert np.abs(F - alloc.fractions).max() <= 0.02


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_fractions_converge_for_any_realizable_allocation_with_migration_cost(seed):
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, 200, 3)
    X = feasible_rounds_average(inst, rng)
    F = run(Allocator(cluster_of(inst), work_conserving=False, migration_cost=120.0), inst, allocation(inst, X), 1000)
    assert np.abs(F - X).max() <= 0.02


def low_load(seed: int):
    """8 one-GPU jobs on 24 GPUs (nobody waits); X spreads jobs over types."""
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, 8, 3, multi_gpu=False)
    inst = Instance(**{**inst.__dict__, "capacity": np.array([8.0, 8.0, 8.0])})
    return inst, Cluster(gpus={t: 8 for t in inst.gpu_types}), solve_instance(inst, "max_min_fairness")


def moves(allocator: Allocator, inst: Instance, alloc, rounds: int) -> tuple[int, int]:
    """(migrations, rounds with a migration) over ``rounds`` rounds."""
    total = with_move = 0
    allocator.next_round(inst, alloc)
    for _ in range(rounds):
        p = allocator.next_round(inst, alloc)
        total += len(p.migrated)
        with_move += bool(p.migrated)
        assert not p.preempted  # nobody waits: nobody is preempted
    return total, with_move


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fewer_migrations_at_low_load(seed):
    inst, cluster, alloc = low_load(seed)
    plain, _ = moves(Allocator(cluster), inst, alloc, 100)
    aware, _ = moves(Allocator(cluster, migration_cost=120.0), inst, alloc, 100)
    assert aware * 5 <= plain, (aware, plain)
    assert Allocator(cluster, migration_cost=120.0).hysteresis == pytest.approx(HYSTERESIS_PER_COST * 120.0 / 360.0)


def test_a_job_is_never_held_on_a_type_its_x_gives_nothing():
    """A running job whose new X is 0 on its type moves at once (no hysteresis)."""
    inst = random_instance(np.random.default_rng(0), 4, 2, multi_gpu=False)
    inst = Instance(**{**inst.__dict__, "throughput": np.ones((4, 2)), "capacity": np.array([4.0, 4.0])})
    cluster = cluster_of(inst)
    a = Allocator(cluster, migration_cost=3600.0)  # H = 200 rounds
    first = allocation(inst, np.array([[1.0, 0.0]] * 4))
    for _ in range(5):
        p = a.next_round(inst, first)
    assert {p.gpu_type(j) for j in inst.job_ids} == {"t0"}
    moved = allocation(inst, np.array([[0.0, 1.0]] * 2 + [[1.0, 0.0]] * 2))
    p = a.next_round(inst, moved)
    assert [p.gpu_type(j) for j in inst.job_ids] == ["t1", "t1", "t0", "t0"]
    assert set(p.migrated) == {"j0", "j1"}


def test_a_running_job_stays_on_its_type_within_the_hysteresis():
    """X = ½ on each of two types, one job, plenty of GPUs: without a cost it
    alternates; with one it stays about H rounds per type and still splits
    its time evenly."""
    inst = random_instance(np.random.default_rng(0), 1, 2, multi_gpu=False)
    inst = Instance(**{**inst.__dict__, "throughput": np.ones((1, 2)), "capacity": np.array([2.0, 2.0])})
    cluster = cluster_of(inst)
    alloc = allocation(inst, np.array([[0.5, 0.5]]))
    plain, _ = moves(Allocator(cluster), inst, alloc, 200)
    a = Allocator(cluster, hysteresis=5.0)
    aware, _ = moves(a, inst, alloc, 200)
    assert plain >= 90 and aware <= 200 / 5
    F = run(Allocator(cluster, hysteresis=5.0), inst, alloc, 400)
    assert F[0] == pytest.approx([0.5, 0.5], abs=0.02)


def test_migration_cost_zero_is_the_default_walk():
    rng = np.random.default_rng(5)
    inst = random_instance(rng, 60, 3)
    cluster = random_cluster(rng, inst)
    alloc = solve_instance(inst, "max_min_fairness")
    a, b = Allocator(cluster), Allocator(cluster, migration_cost=0.0)
    for _ in range(30):
        p, q = a.next_round(inst, alloc), b.next_round(inst, alloc)
        assert (p.assignments, p.started, p.preempted, p.migrated) == (q.assignments, q.started, q.preempted, q.migrated)


@pytest.mark.parametrize("kw,message", [
    ({"migration_cost": -1.0}, "migration_cost: must be a finite number of seconds >= 0"),
    ({"migration_cost": float("inf")}, "migration_cost: must be a finite"),
    ({"migration_cost": "30"}, "migration_cost: must be a finite"),
    ({"hysteresis": -2.0}, "hysteresis: must be a finite number of rounds >= 0"),
])
def test_bad_migration_options_are_errors_naming_them(kw, message):
    with pytest.raises(OptschedError, match=message):
        Allocator(Cluster(gpus={"v100": 4}), **kw)
