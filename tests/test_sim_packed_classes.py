"""Packing over job-type classes (optsched/packed_classes.py): the class program's
optimum is the per-job program's over *every* pair, and its job pairs are a feasible
allocation of that program."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optsched.model import Instance
from optsched.policy import solve_instance
from optsched.packed_classes import ClassPairs, solve_packed_classes


def class_instance(seed: int, types: int, n: int, k: int = 3, symmetric: bool = True):
    """n jobs of ``types`` job types: rows, scale factors and pair rates by type; every pair listed."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.5, 10, (types, k)) * (rng.random((types, k)) > 0.15)
    base[np.arange(types), rng.integers(0, k, types)] = rng.uniform(0.5, 10, types)
    sf = rng.choice([1.0, 2.0], types, p=[0.7, 0.3])
    labels = rng.integers(0, types, n)
    R = {}
    for a in range(types):
        for b in range(a, types):
            r = rng.uniform(0.3, 0.9, (k, 2)) * np.stack([base[a], base[b]], axis=1)
            if a == b and symmetric:
                r[:, 1] = r[:, 0]
            R[a, b] = r

    def rates(a, b):
        return R[a, b] if a <= b else R[b, a][:, ::-1]

    P = np.array([(i, j) for i in range(n) for j in range(i + 1, n)], dtype=int).reshape(-1, 2)
    pt = np.stack([rates(labels[i], labels[j]) for i, j in P]) if len(P) else np.zeros((0, k, 2))
    inst = Instance(job_ids=tuple(f"j{i}" for i in range(n)), gpu_types=("a", "b", "c")[:k], throughput=base[labels],
                    scale_factor=sf[labels], weight=np.ones(n), capacity=rng.integers(1, max(2, n // 3), k).astype(float),
                    steps_remaining=np.full(n, 1e5), elapsed_time=np.zeros(n), attained_service=np.zeros(n),
                    arrival_time=np.zeros(n), time=0.0, pairs=P, pair_throughput=pt)
    return inst, ClassPairs(labels, rates)


def _per_job(alloc, inst):
    """(time per job, GPUs per type, normalized share per job) of an allocation with pairs."""
    from optsched.formulations.max_min_fairness import normalized_throughput

    X, P, Y = alloc.fractions, alloc.pairs, alloc.pair_fractions
    time = X.sum(axis=1) + np.bincount(P.reshape(-1), weights=np.repeat(Y.sum(axis=1), 2), minlength=inst.n)
    gpus = inst.scale_factor @ X + (inst.scale_factor[P[:, 0]] @ Y if len(P) else 0.0)
    A = normalized_throughput(inst)
    share = alloc.effective_throughput * A.max(axis=1) / np.where(inst.throughput.max(axis=1) > 0,
                                                                   inst.throughput.max(axis=1), 1.0)
    return time, gpus, share


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 5), st.integers(2, 24))
def test_class_optimum_is_the_all_pairs_optimum_and_its_pairs_are_feasible(seed, types, n):
    inst, pc = class_instance(seed, types, n)
    every_pair = solve_instance(inst, "max_min_fairness", packing=True, max_partners=None)
    alloc = solve_packed_classes(inst, pc)
    if alloc is None:  # no admitted class pair: the per-job path has nothing to pack either
        assert every_pair.explanation.get("pairs_packed", 0) == 0
        return
    assert alloc.objective == pytest.approx(every_pair.objective, rel=1e-6, abs=1e-9)
    time, gpus, share = _per_job(alloc, inst)
    assert time.max() <= 1 + 1e-9 and (gpus <= inst.capacity + 1e-9).all()
    assert share.min() >= alloc.objective * (1 - 1e-9)
    # Pairs only of distinct jobs, each once, on types where both may pack.
    P = alloc.pairs
    assert (P[:, 0] < P[:, 1]).all() and len({tuple(p) for p in P.tolist()}) == len(P)
    assert len(P) <= 2 * inst.n + 5 * types ** 2  # O(n + classes²), never O(n²)


def test_a_job_type_packed_with_itself_at_two_rates_takes_the_per_job_path():
    """Two members of such a type are not interchangeable (a pair's roles differ): no class program."""
    inst, pc = class_instance(3, 1, 6, symmetric=False)
    assert solve_packed_classes(inst, pc) is None


def test_simulate_packs_max_min_fairness_over_job_types(monkeypatch, tmp_path):
    """`simulate --packing` with max_min_fairness takes the class program (over every pair of
    active jobs) at each recomputation, and every round stays within capacity."""
    from conftest import peer_data_dir

    d = peer_data_dir()
    if not d.is_dir():
        pytest.skip(f"peer data not found at {d} (set OPTSCHED_PEER_DATA)")
    from optsched import packed_classes
    from optsched.sim import simulate
    from optsched.traces.generate import generate_gavel
    from optsched.traces.throughputs import gavel_throughputs

    table = gavel_throughputs(d)
    calls = []
    real = packed_classes.solve_packed_classes

    def spy(inst, pc, time_limit=60.0):
        a = real(inst, pc, time_limit)
        calls.append(a is not None)
        return a

    monkeypatch.setattr(packed_classes, "solve_packed_classes", spy)
    trace = generate_gavel(table, 30, 40.0, seed=2)
    r = simulate(trace, "v100=2,p100=2,k80=2", throughputs=table, packing=True, seed=1)
    assert r.summary["jobs_completed"] == 30 and any(calls)
    assert int(r.rounds["packed_jobs"].sum()) > 0
    again = simulate(trace, "v100=2,p100=2,k80=2", throughputs=table, packing=True, seed=1)
    assert again.summary["avg_jct"] == r.summary["avg_jct"]  # deterministic
