"""allox (assignment vs brute force), optimus (marginal gains), synergy (CPU/memory LP)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from optsched.formulations.allox import min_cost_assignment
from optsched.formulations.synergy import envelope
from optsched.model import Instance, OptschedError, parse_snapshot
from optsched.policy import solve, solve_instance
from tests.conftest import random_instance


def _brute_force_sum_completion(P: np.ndarray) -> float:
    """Each job to a machine; each machine runs its jobs shortest first."""
    n, k = P.shape
    best = np.inf
    for assign in itertools.product(range(k), repeat=n):
        total = 0.0
        for j in range(k):
            p = np.sort([P[m, j] for m in range(n) if assign[m] == j])
            total += np.cumsum(p).sum()
        best = min(best, total)
    return best


@pytest.mark.parametrize("seed", range(8))
def test_allox_matching_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, k = rng.integers(2, 6), rng.integers(1, 4)
    P = rng.uniform(1, 10, (n, k))
    P[rng.random((n, k)) < 0.2] = np.inf
    P[np.arange(n), rng.integers(0, k, n)] = rng.uniform(1, 10, n)
    machine, position, cost = min_cost_assignment(P)
    assert cost == pytest.approx(_brute_force_sum_completion(P))
    assert np.all(np.isfinite(P[np.arange(n), machine]))


def test_allox_puts_jobs_on_their_fast_type_and_runs_short_ones_first():
    # two types of 1 GPU; j0 fast on a, j1 fast on b, j2 short everywhere
    T = np.array([[10.0, 1.0], [1.0, 10.0], [10.0, 10.0]])
    inst = Instance(job_ids=("j0", "j1", "j2"), gpu_types=("a", "b"), throughput=T, scale_factor=np.ones(3),
                    weight=np.ones(3), capacity=np.ones(2), steps_remaining=np.array([1000.0, 1000.0, 10.0]),
                    elapsed_time=np.zeros(3), attained_service=np.zeros(3), arrival_time=np.zeros(3))
    a = solve_instance(inst, "allox")
    at = a.explanation["assigned_type"]
    assert at["j0"] == "a" and at["j1"] == "b"
    assert a.fractions[2].sum() == 1.0  # the short job runs first on its machine
    assert np.all(inst.scale_factor @ a.fractions <= inst.capacity)


def test_allox_and_optimus_invariants_on_random_instances():
    for seed in range(4):
        inst = random_instance(np.random.default_rng(seed), 30)
        for p in ("allox", "optimus", "synergy"):
            a = solve_instance(inst, p)
            used = (a.gpu_counts.sum(axis=0) if a.gpu_counts is not None else inst.scale_factor @ a.fractions)
            assert np.all(used <= inst.capacity + 1e-9), p
            assert np.all(a.fractions[~inst.available] == 0), p


def test_optimus_gives_shortest_remaining_gpu_time_first():
    inst = Instance(job_ids=("long", "short", "wide"), gpu_types=("v100",), throughput=np.ones((3, 1)),
                    scale_factor=np.array([1.0, 1.0, 2.0]), weight=np.ones(3), capacity=np.array([2.0]),
                    steps_remaining=np.array([1000.0, 10.0, 10.0]), elapsed_time=np.zeros(3),
                    attained_service=np.zeros(3), arrival_time=np.zeros(3))
    a = solve_instance(inst, "optimus")
    # GPU-time: long 1000, short 10, wide 20 -> short, wide (no room), long
    assert a.gpu_counts[:, 0].tolist() == [1, 1, 0]


def _synergy_snapshot(cpus=12.0, memory=200.0, profiles=True):
    servers = [{"id": "s0", "gpu_type": "v100", "gpus": 4, "cpus": cpus, "memory": memory}]
    jobs = [
        {"id": "hungry", "throughput": {"v100": 1.0}, "arrival_time": 0.0,
         **({"cpu_profile": [[1, 0.4], [6, 1.0]], "memory_profile": [[10, 1.0]]} if profiles else {})},
        {"id": "flat", "throughput": {"v100": 1.0}, "arrival_time": 1.0,
         **({"cpu_profile": [[0.5, 1.0]], "memory_profile": [[10, 1.0]]} if profiles else {})},
    ]
    return {"cluster": {"gpus": {"v100": 4}, "servers": servers}, "jobs": jobs}


def test_synergy_moves_cpus_to_the_sensitive_job():
    a = solve(_synergy_snapshot(), policy="synergy")
    e = a.explanation
    # proportional share: 3 CPUs per GPU. flat needs 0.5; hungry takes the remaining 11.5 -> capped at 6 (speed 1)
    assert e["cpus"]["flat"] == pytest.approx(0.5, abs=1e-4)
    assert e["speed_factor"]["hungry"] == pytest.approx(1.0)
    assert sum(e["cpus"].values()) <= 12 + 1e-6
    # LP optimum against a grid search over hungry's CPUs
    f = lambda c: min(a_ * c + b for a_, b in envelope([[1, 0.4], [6, 1.0]]))  # noqa: E731
    assert max(f(c) for c in np.linspace(0, 11.5, 500)) == pytest.approx(e["speed_factor"]["hungry"], abs=1e-3)


def test_synergy_respects_the_proportional_floor_and_falls_back_without_profiles():
    a = solve(_synergy_snapshot(cpus=4.0), policy="synergy")
    f = lambda c: min(a_ * c + b for a_, b in envelope([[1, 0.4], [6, 1.0]]))  # noqa: E731
    assert a.explanation["speed_factor"]["hungry"] >= f(1.0) - 1e-6  # 4 CPUs / 4 GPUs = 1 per GPU
    b = solve(_synergy_snapshot(profiles=False), policy="synergy")
    assert b.explanation["cpus"] == {"hungry": pytest.approx(3.0), "flat": pytest.approx(3.0)}
    snap = _synergy_snapshot()
    del snap["cluster"]["servers"]
    c = solve(snap, policy="synergy")
    assert c.explanation["resource_defaults"] == ["cpus", "memory"]


def test_synergy_bad_input_names_the_field():
    snap = _synergy_snapshot()
    snap["jobs"][0]["cpu_profile"] = [[1, 1.5]]
    with pytest.raises(OptschedError, match=r"jobs\[0\].cpu_profile"):
        parse_snapshot(snap)
    snap = _synergy_snapshot()
    snap["cluster"]["servers"] = [{"id": "s0", "gpu_type": "v100", "gpus": 2, "cpus": 8},
                                  {"id": "s1", "gpu_type": "v100", "gpus": 2}]
    with pytest.raises(OptschedError, match="synergy needs cpus on every server"):
        solve(snap, policy="synergy")
