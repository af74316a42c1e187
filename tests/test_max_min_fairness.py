"""Heterogeneity-aware max-min fairness (issue 2): optimum, invariants, closed form."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from optsched.formulations.max_min_fairness import normalized_throughput
from optsched.model import Instance
from optsched.policy import solve_instance
from tests.conftest import random_instance


def assert_feasible(inst: Instance, X: np.ndarray, tol: float = 1e-7) -> None:
    assert X.shape == (inst.n, inst.k)
    assert np.all(X >= 0) and np.all(X <= 1 + tol)
    assert np.all(X.sum(axis=1) <= 1 + tol), "a job gets more than all of the time"
    assert np.all(inst.scale_factor @ X <= inst.capacity + tol), "capacity exceeded"
    assert np.all(X[~inst.available] == 0), "a job got a type it cannot run on"


def linprog_max_min(inst: Instance, agnostic: bool = False) -> float:
    """Independent solve: the same LP written out by hand for scipy's HiGHS,
    variables (X row-major, z), maximize z."""
    n, k = inst.n, inst.k
    A = normalized_throughput(inst, agnostic)
    nv = n * k + 1
    c = np.zeros(nv)
    c[-1] = -1.0
    rows, rhs = [], []
    for m in range(n):  # z - Σ_j A[m,j] X[m,j] <= 0
        r = np.zeros(nv)
        r[m * k:(m + 1) * k] = -A[m]
        r[-1] = 1.0
        rows.append(r), rhs.append(0.0)
        r = np.zeros(nv)
        r[m * k:(m + 1) * k] = 1.0
        rows.append(r), rhs.append(1.0)
    for j in range(k):
        r = np.zeros(nv)
        r[j:n * k:k] = inst.scale_factor
        rows.append(r), rhs.append(inst.capacity[j])
    bounds = [(0, 1 if inst.available[m, j] else 0) for m in range(n) for j in range(k)] + [(0, None)]
    res = linprog(c, A_ub=np.array(rows), b_ub=np.array(rhs), bounds=bounds, method="highs")
    assert res.status == 0
    return -res.fun


@pytest.mark.parametrize("seed", range(8))
def test_max_min_clarabel_matches_highs_and_independent_lp(seed):
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, n=int(rng.integers(2, 60)), k=int(rng.integers(1, 5)))
    a = solve_instance(inst, "max_min_fairness", solver="clarabel")
    b = solve_instance(inst, "max_min_fairness", solver="highs")
    ref = linprog_max_min(inst)
    assert a.status.startswith("optimal") and b.status.startswith("optimal")
    assert a.objective == pytest.approx(ref, rel=1e-6)
    assert b.objective == pytest.approx(ref, rel=1e-6)
    assert_feasible(inst, a.fractions)
    assert_feasible(inst, b.fractions)
    # The reported objective is achieved by the returned allocation.
    assert a.explanation["bottleneck_jobs"]
    assert np.min((normalized_throughput(inst) * a.fractions).sum(axis=1)) == pytest.approx(ref, rel=1e-5)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 25),
    k=st.integers(1, 4),
    agnostic=st.booleans(),
)
def test_allocation_is_always_feasible(seed, n, k, agnostic):
    inst = random_instance(np.random.default_rng(seed), n=n, k=k)
    alloc = solve_instance(inst, "max_min_fairness_agnostic" if agnostic else "max_min_fairness")
    assert alloc.status.startswith("optimal")
    assert_feasible(inst, alloc.fractions)
    thr = (inst.throughput * alloc.fractions).sum(axis=1)
    np.testing.assert_allclose(alloc.effective_throughput, thr)


def _instance(T, capacity, scale_factor=None, weight=None) -> Instance:
    T = np.asarray(T, dtype=float)
    n, k = T.shape
    return Instance(
        job_ids=tuple(f"j{i}" for i in range(n)),
        gpu_types=tuple(f"t{j}" for j in range(k)),
        throughput=T,
        scale_factor=np.ones(n) if scale_factor is None else np.asarray(scale_factor, float),
        weight=np.ones(n) if weight is None else np.asarray(weight, float),
        capacity=np.asarray(capacity, float),
        steps_remaining=np.full(n, np.nan),
        elapsed_time=np.zeros(n),
        attained_service=np.zeros(n),
        arrival_time=np.zeros(n),
    )


def test_two_jobs_two_types_closed_form():
    # Job 0: 4 vs 1 steps/s, job 1: 2 vs 1; one GPU of each type. Equal-share
    # throughputs 2.5 and 1.5. Job 0 has the larger relative advantage on t0,
    # so at the optimum both rows are full: X0 = (a, 1-a), X1 = (1-a, a), and
    # (3a + 1)/2.5 = (2 - a)/1.5 gives a = 1/2, min share = 1.
    inst = _instance([[4.0, 1.0], [2.0, 1.0]], [1, 1])
    alloc = solve_instance(inst, "max_min_fairness")
    assert alloc.objective == pytest.approx(1.0, rel=1e-7)
    np.testing.assert_allclose(alloc.effective_throughput, [2.5, 1.5], rtol=1e-6)


def test_identical_jobs_share_equally():
    # Three identical jobs on one GPU of each of two types. Equal-share
    # throughput is (2 + 1)/2 = 1.5; each job gets a third of the whole
    # cluster's steps, (2 + 1)/3 = 1, so the share is 1/1.5 = 2/3.
    inst = _instance([[2.0, 1.0]] * 3, [1, 1])
    alloc = solve_instance(inst, "max_min_fairness")
    assert alloc.objective == pytest.approx(2 / 3, rel=1e-7)


def test_weight_scales_the_share_a_job_needs():
    # Weight 2 means the job is entitled to twice the share: with two identical
    # jobs on one GPU, the weighted job gets 2/3 of the time.
    inst = _instance([[1.0], [1.0]], [1], weight=[2.0, 1.0])
    alloc = solve_instance(inst, "max_min_fairness")
    np.testing.assert_allclose(alloc.fractions[:, 0], [2 / 3, 1 / 3], rtol=1e-6)


def test_scale_factor_counts_against_capacity():
    # A 2-GPU job and a 1-GPU job on 2 GPUs.
    inst = _instance([[1.0], [1.0]], [2], scale_factor=[2, 1])
    alloc = solve_instance(inst, "max_min_fairness")
    assert 2 * alloc.fractions[0, 0] + alloc.fractions[1, 0] <= 2 + 1e-7
    assert alloc.objective > 0


@pytest.mark.parametrize("seed", range(10))
def test_aware_beats_agnostic_on_its_own_objective(seed):
    # The heterogeneity-aware optimum is at least what the agnostic allocation
    # achieves when measured with real throughputs (it is feasible for the LP).
    inst = random_instance(np.random.default_rng(100 + seed), n=40, k=3, sparsity=0.0)
    aware = solve_instance(inst, "max_min_fairness")
    agnostic = solve_instance(inst, "max_min_fairness_agnostic")
    A = normalized_throughput(inst)
    assert aware.objective >= np.min((A * agnostic.fractions).sum(axis=1)) - 1e-6


def test_aware_has_more_total_throughput_than_agnostic_on_gavel_like_clusters():
    # Gavel's setting: single-GPU jobs whose speedups differ across types; the
    # aware policy moves jobs to the types they gain most on.
    totals = []
    for seed in range(10):
        rng = np.random.default_rng(seed)
        n = 60
        base = rng.uniform(1, 10, n)
        speedup = np.stack([np.ones(n), rng.uniform(1.2, 3.5, n), rng.uniform(1.5, 10.0, n)], axis=1)
        inst = _instance(base[:, None] * speedup, [12, 12, 12])
        aware = solve_instance(inst, "max_min_fairness").effective_throughput.sum()
        agn = solve_instance(inst, "max_min_fairness_agnostic").effective_throughput.sum()
        totals.append((aware, agn))
    aware, agn = np.array(totals).T
    assert np.all(aware >= agn * 0.999)
    assert aware.mean() > 1.05 * agn.mean()


def test_solver_failure_falls_back_to_equal_share_scaled_to_fit(monkeypatch, caplog):
    from optsched.solvers import block_lp

    inst = random_instance(np.random.default_rng(7), n=30, k=3)

    def failing(lp, backend="ipm", time_limit=60.0, **kwargs):
        return block_lp.BlockSolution(False, "time_limit", None, float("nan"), None, float("nan"), None, None, 0.1,
                                      backend, message="time limit of 0.1s reached")

    monkeypatch.setattr(block_lp, "solve", failing)
    with caplog.at_level("WARNING", logger="optsched.policy"):
        alloc = solve_instance(inst, "max_min_fairness")
    assert alloc.status.startswith("fallback") and "time limit" in alloc.status
    assert any("time limit" in r.getMessage() for r in caplog.records if r.name == "optsched.policy")
    assert_feasible(inst, alloc.fractions)
    assert np.all(alloc.fractions.sum(axis=1) > 0), "fallback must give every job a share"
    # The equal share's lowest jobs are not the policy's bottleneck: no marks.
    assert "bottleneck_jobs" not in alloc.explanation


def test_a_failure_names_every_backend_tried():
    from optsched.solvers import block_lp

    rng = np.random.default_rng(3)
    n = 3000  # distinct rows, congested: neither merging nor an exact shortcut ends it before the IPM
    lp = block_lp.BlockLP(A=rng.uniform(0.5, 2.0, (n, 3)), S=np.ones(n), W=np.array([100.0, 100.0, 100.0]),
                          allowed=np.ones((n, 3), bool), c_z=1.0, g=np.ones(n))
    sol = block_lp.solve(lp, backend="ipm", time_limit=1e-9)
    assert not sol.ok
    assert "block IPM" in sol.message and "CLARABEL" in sol.message, sol.message


def test_gpu_prices_are_zero_when_capacity_is_slack():
    inst = _instance([[1.0, 2.0]], [4, 4])
    for solver in ("auto", "clarabel", "highs"):  # interior points leave ~1e-11 there: shown as exactly 0
        alloc = solve_instance(inst, "max_min_fairness", solver=solver)
        assert all(p == 0.0 for p in alloc.explanation["gpu_price"].values()), (solver, alloc.explanation["gpu_price"])


def test_gpu_price_is_positive_on_contended_type():
    inst = _instance([[1.0, 0.0]] * 4, [1, 1])
    alloc = solve_instance(inst, "max_min_fairness")
    assert alloc.explanation["gpu_price"]["t0"] > 0
    assert set(alloc.explanation["bottleneck_jobs"]) == {"j0", "j1", "j2", "j3"}


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.sampled_from([1e-8, 1e-5, 1e5, 1e8]),
       solver=st.sampled_from(["auto", "ipm", "highs", "highs-simplex"]),
       policy=st.sampled_from(["max_min_fairness", "max_min_fairness_water_filling"]))
def test_max_min_is_the_same_program_at_any_weight_scale(seed, scale, solver, policy):
    """Weights × c change nothing but the objective's unit (÷ c). Weights of 1e8 made the level
    1e-8, under the solvers' absolute tolerances: HiGHS starved two of three jobs, 'optimal'."""
    import dataclasses

    from optsched.bench.instances import rigid

    rng = np.random.default_rng(seed)
    inst = rigid(int(rng.integers(3, 9)), int(rng.integers(1, 4)), seed)
    inst = dataclasses.replace(inst, weight=rng.choice([1.0, 2.0, 3.0], inst.n))  # distinct weights, exact ratios
    base = solve_instance(inst, policy, solver=solver)
    big = solve_instance(dataclasses.replace(inst, weight=inst.weight * scale), policy, solver=solver)
    assert base.status == big.status == "optimal"
    assert big.objective * scale == pytest.approx(base.objective, rel=1e-5)
    A = normalized_throughput(inst)  # leximin-unique for water filling; max-min: compare the minimum share
    sb, sg = (A * base.fractions).sum(axis=1), (A * big.fractions).sum(axis=1)
    assert sg.min() == pytest.approx(sb.min(), rel=1e-5)
    if policy.endswith("water_filling"):
        np.testing.assert_allclose(np.sort(sg), np.sort(sb), rtol=1e-4, atol=1e-7)


def test_the_python_api_solves_with_the_clis_default_solver():
    """optsched.solve defaulted to clarabel while the CLI, the service and policy.solve use auto."""
    import inspect

    import optsched
    from optsched import policy

    assert inspect.signature(optsched.solve).parameters["solver"].default == \
        inspect.signature(policy.solve).parameters["solver"].default == "auto"


@pytest.mark.parametrize("solver", ["auto", "ipm", "highs"])
@pytest.mark.parametrize("policy", ["max_min_fairness", "max_min_fairness_water_filling"])
def test_weights_1e9_and_1e_9_side_by_side_still_solve(solver, policy):
    """1e18 between two weights in one matrix: every solver gave up and a simulation ran the
    equal-share fallback. The tiny weight counts as 1e-12 of the largest in the program."""
    T = np.array([[2.0, 1.0], [1.5, 0.5]])
    inst = Instance(job_ids=("a", "b"), gpu_types=("v100", "k80"), throughput=T, scale_factor=np.ones(2),
                    weight=np.array([1e9, 1e-9]), capacity=np.array([1.0, 1.0]), steps_remaining=np.full(2, 1e4),
                    elapsed_time=np.zeros(2), attained_service=np.zeros(2), arrival_time=np.zeros(2))
    alloc = solve_instance(inst, policy, solver=solver)
    assert alloc.status == "optimal", alloc.status
    X = alloc.fractions
    assert (X.sum(axis=1) <= 1 + 1e-7).all() and (X.sum(axis=0) <= 1 + 1e-7).all()
    # the weight-1e9 job sets the level; with it alone on the faster type the objective is its share there
    assert alloc.objective == pytest.approx(normalized_throughput(inst)[0] @ X[0], rel=1e-6)
