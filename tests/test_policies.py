"""The policy family: each optimum against a deliberately naive, loop-based
cvxpy model written here from the math (solved by a second backend where the
program is an LP), invariants on many random snapshots, tiny known answers,
water filling's leximin property, priority orders and bad input."""

from __future__ import annotations

import dataclasses
import json

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import random_instance
from optsched.model import Instance, OptschedError, parse_snapshot
from optsched.policy import solve, solve_instance

FRACTIONAL = [
    "max_min_fairness",
    "max_min_fairness_agnostic",
    "max_min_fairness_water_filling",
    "max_min_fairness_hierarchical",
    "finish_time_fairness",
    "finish_time_fairness_agnostic",
    "makespan",
    "makespan_agnostic",
    "max_throughput",
    "max_throughput_agnostic",
    "proportional_fairness",
    "proportional_fairness_agnostic",
    "min_cost",
    "min_cost_slo",
]
PRIORITY = ["fifo", "las", "srtf", "tiresias", "gandiva"]


def priced(inst: Instance, rng: np.random.Generator) -> Instance:
    """Add prices and a few SLO deadlines (some loose, some passed)."""
    slo = np.where(rng.random(inst.n) < 0.3, rng.uniform(-1e3, 1e7, inst.n), np.nan)
    return dataclasses.replace(inst, price=rng.uniform(0.3, 3.0, inst.k), slo=slo, time=0.0)


# --------------------------------------------------------------------------
# Naive loop-based models (one Python expression per job, no shared helpers)
# --------------------------------------------------------------------------


def naive_base(inst: Instance):
    n, k = inst.n, inst.k
    X = cp.Variable((n, k))
    cons = [X >= 0]
    for m in range(n):
        cons.append(sum(X[m, j] for j in range(k)) <= 1)
        for j in range(k):
            if inst.throughput[m, j] <= 0:
                cons.append(X[m, j] == 0)
    for j in range(k):
        cons.append(sum(inst.scale_factor[m] * X[m, j] for m in range(n)) <= inst.capacity[j])
    return X, cons


def thr_expr(T, X, m):
    return sum(T[m, j] * X[m, j] for j in range(T.shape[1]))


def naive_iso_throughput(inst: Instance, T) -> list[float]:
    out = []
    for m in range(inst.n):
        share = [inst.capacity[j] / inst.n / inst.scale_factor[m] if inst.throughput[m, j] > 0 else 0.0 for j in range(inst.k)]
        total = sum(share)
        if total > 1:
            share = [x / total for x in share]
        out.append(sum(T[m, j] * share[j] for j in range(inst.k)))
    return out


def agnostic_ones(inst):
    return np.where(inst.throughput > 0, 1.0, 0.0)


def agnostic_mean(inst):
    T = inst.throughput.copy()
    for m in range(inst.n):
        usable = T[m] > 0
        T[m, usable] = T[m, usable].mean()
    return T


def naive_value(inst: Instance, policy: str) -> float:
    """Optimal objective of ``policy`` from a naive model."""
    X, cons = naive_base(inst)
    n, k = inst.n, inst.k
    agnostic = policy.endswith("_agnostic")
    name = policy.removesuffix("_agnostic")
    if name == "max_min_fairness":
        T = agnostic_ones(inst) if agnostic else inst.throughput
        t = cp.Variable()
        for m in range(n):
            equal = sum(T[m, j] * inst.capacity[j] for j in range(k)) / inst.capacity.sum()
            cons.append(thr_expr(T, X, m) * inst.scale_factor[m] / (inst.weight[m] * equal) >= t)
        return cp.Problem(cp.Maximize(t), cons).solve(solver=cp.HIGHS)
    if name == "finish_time_fairness":
        T = agnostic_mean(inst) if agnostic else inst.throughput
        iso = naive_iso_throughput(inst, T)
        z = cp.Variable()
        for m in range(n):
            R, el = inst.steps_remaining[m], inst.elapsed_time[m]
            cons.append((el + R * cp.inv_pos(thr_expr(T, X, m))) / (el + R / iso[m]) <= z)
        return cp.Problem(cp.Minimize(z), cons).solve(solver=cp.CLARABEL)
    if name == "makespan":
        T = agnostic_mean(inst) if agnostic else inst.throughput
        # Independent route: minimize the makespan M through the time fractions
        # F[m, j] = X[m, j] · M (a job needs R_m steps done within M seconds).
        F, M = cp.Variable((n, k), nonneg=True), cp.Variable(nonneg=True)
        cons = []
        for m in range(n):
            cons.append(sum(F[m, j] for j in range(k)) <= M)
            cons.append(thr_expr(T, F, m) >= inst.steps_remaining[m])
            for j in range(k):
                if inst.throughput[m, j] <= 0:
                    cons.append(F[m, j] == 0)
        for j in range(k):
            cons.append(sum(inst.scale_factor[m] * F[m, j] for m in range(n)) <= inst.capacity[j] * M)
        return cp.Problem(cp.Minimize(M), cons).solve(solver=cp.HIGHS)
    if name == "max_throughput":
        T = agnostic_ones(inst) if agnostic else inst.throughput
        iso = naive_iso_throughput(inst, T)
        return cp.Problem(cp.Maximize(sum(thr_expr(T, X, m) / iso[m] for m in range(n))), cons).solve(solver=cp.HIGHS)
    if name == "proportional_fairness":
        T = agnostic_ones(inst) if agnostic else inst.throughput
        iso = naive_iso_throughput(inst, T)
        obj = sum(inst.weight[m] * cp.log(thr_expr(T, X, m) / iso[m]) for m in range(n))
        return cp.Problem(cp.Maximize(obj), cons).solve(solver=cp.CLARABEL)
    if name in ("min_cost", "min_cost_slo"):
        iso = naive_iso_throughput(inst, inst.throughput)
        obj = sum(
            inst.throughput[m, j] / iso[m] * X[m, j] / (inst.scale_factor[m] * inst.price[j]) for m in range(n) for j in range(k)
        )
        slo_cons = []
        if name == "min_cost_slo":
            for m in range(n):
                if np.isfinite(inst.slo[m]) and inst.slo[m] > inst.time:
                    slo_cons.append(thr_expr(inst.throughput, X, m) >= inst.steps_remaining[m] / (inst.slo[m] - inst.time))
        prob = cp.Problem(cp.Maximize(obj), cons + slo_cons)
        value = prob.solve(solver=cp.HIGHS)
        if prob.status == cp.INFEASIBLE:  # documented: solved without the SLOs
            value = cp.Problem(cp.Maximize(obj), cons).solve(solver=cp.HIGHS)
        return value
    raise AssertionError(policy)


ORACLE = [p for p in FRACTIONAL if "water_filling" not in p and "hierarchical" not in p and p != "makespan_agnostic"]


@pytest.mark.parametrize("policy", ORACLE)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_optimum_matches_naive_loop_model(policy, seed):
    rng = np.random.default_rng(seed)
    inst = priced(random_instance(rng, 9, sparsity=0.25), rng)
    ours = solve_instance(inst, policy)
    assert ours.status.startswith("optimal"), ours.status
    expected = naive_value(inst, policy)
    assert ours.objective == pytest.approx(expected, rel=1e-6, abs=1e-7)


def test_agnostic_makespan_equals_aware_makespan_of_type_blind_matrix():
    rng = np.random.default_rng(5)
    inst = random_instance(rng, 9)
    blind = dataclasses.replace(inst, throughput=agnostic_mean(inst))
    assert solve_instance(inst, "makespan_agnostic").objective == pytest.approx(naive_value(blind, "makespan"), rel=1e-6)


def test_second_backend_agrees_on_every_lp_policy():
    rng = np.random.default_rng(11)
    inst = priced(random_instance(rng, 40), rng)
    for policy in ["max_min_fairness", "makespan", "max_throughput", "min_cost", "min_cost_slo"]:
        a = solve_instance(inst, policy, solver="clarabel").objective
        b = solve_instance(inst, policy, solver="highs").objective
        assert a == pytest.approx(b, rel=1e-6), policy


# --------------------------------------------------------------------------
# Invariants on many random snapshots
# --------------------------------------------------------------------------


def assert_feasible(inst: Instance, X: np.ndarray, tol: float = 1e-7):
    assert X.shape == (inst.n, inst.k)
    assert (X >= 0).all() and (X <= 1 + tol).all()
    assert (X.sum(axis=1) <= 1 + tol).all(), "a job runs more than all of the time"
    assert (inst.scale_factor @ X <= inst.capacity * (1 + tol) + tol).all(), "capacity exceeded"
    assert (X[~inst.available] == 0).all(), "time on a type the job cannot use"


@pytest.mark.parametrize("policy", FRACTIONAL + PRIORITY)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12), k=st.integers(1, 4))
def test_allocation_respects_capacity_rows_and_availability(policy, seed, n, k):
    rng = np.random.default_rng(seed)
    inst = priced(random_instance(rng, n, k), rng)
    alloc = solve_instance(inst, policy)
    assert not alloc.status.startswith("fallback"), alloc.status
    assert_feasible(inst, alloc.fractions)
    thr = (inst.throughput * alloc.fractions).sum(axis=1)
    if not len(alloc.pairs):
        np.testing.assert_allclose(alloc.effective_throughput, thr, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------
# Tiny instances with known answers
# --------------------------------------------------------------------------


def tiny(T, capacity, **kw) -> Instance:
    T = np.asarray(T, dtype=float)
    n, k = T.shape
    fields = dict(
        job_ids=tuple(f"j{i}" for i in range(n)),
        gpu_types=tuple(f"t{j}" for j in range(k)),
        throughput=T,
        scale_factor=np.ones(n),
        weight=np.ones(n),
        capacity=np.asarray(capacity, dtype=float),
        steps_remaining=np.full(n, 100.0),
        elapsed_time=np.zeros(n),
        attained_service=np.zeros(n),
        arrival_time=np.arange(n, dtype=float),
    )
    fields.update({key: np.asarray(v, dtype=float) if isinstance(v, list) else v for key, v in kw.items()})
    return Instance(**fields)


def test_makespan_of_two_jobs_sharing_one_gpu_is_their_total_work():
    # 100 and 300 steps at 1 step/s on one GPU: X = (1/4, 3/4), makespan 400 s.
    inst = tiny([[1.0], [1.0]], [1], steps_remaining=[100.0, 300.0])
    alloc = solve_instance(inst, "makespan")
    assert alloc.objective == pytest.approx(400.0, rel=1e-7)
    np.testing.assert_allclose(alloc.fractions[:, 0], [0.25, 0.75], atol=1e-6)
    # With two GPUs each job has its own: the longer job alone sets 300 s.
    assert solve_instance(dataclasses.replace(inst, capacity=np.array([2.0])), "makespan").objective == pytest.approx(300.0, rel=1e-7)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), solver=st.sampled_from(["auto", "clarabel", "ipm", "highs", "highs-simplex"]))
def test_makespan_on_one_type_is_mcnaughtons_bound_at_any_scale(seed, solver):
    """One type of W GPUs, preemptive: the optimal makespan is max(max_m D_m, Σ s_m D_m / W),
    D_m = R_m / T_m (McNaughton). Steps 1e-3..1e15 and rates 1e-6..1e9 in one program made
    the old single scale put 2e-10 and 1e5 in one row set: HiGHS dropped rows and left jobs
    with nothing ("optimal", objective null), CLARABEL was 3.8x off."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 7))
    T = 10.0 ** rng.uniform(-6, 9, n)
    R = 10.0 ** rng.uniform(-3, 15, n)
    s = rng.integers(1, 3, n).astype(float)
    W = float(rng.integers(2, 9))
    inst = dataclasses.replace(tiny(T[:, None].tolist(), [W], steps_remaining=R.tolist()), scale_factor=s)
    alloc = solve_instance(inst, "makespan", solver=solver)
    D = R / T
    best = max(D.max(), (s * D).sum() / W)
    assert alloc.status == "optimal"
    assert alloc.objective == pytest.approx(best, rel=1e-5)
    thr = alloc.fractions[:, 0] * T  # every job finishes by the makespan reported
    assert (R / np.maximum(thr, 1e-300) <= alloc.objective * (1 + 1e-4)).all()
    assert (s @ alloc.fractions <= W * (1 + 1e-7)).all()


@pytest.mark.parametrize("policy", ["finish_time_fairness", "finish_time_fairness_agnostic"])
def test_finish_time_fairness_with_a_job_whose_rho_no_longer_moves(policy):
    """Job 1 has 1,000 steps left after 1e7 s at 1e15 steps/s: its ρ is 1 to 19 digits, so
    ρ − a rounded to 0, its row to nothing, and a two-job round fell back ("below 1")."""
    inst = tiny([[2.0, 0.0], [1e15, 1.0]], [4, 4], steps_remaining=[1e15, 1000.0], elapsed_time=[0.0, 1e7])
    alloc = solve_instance(inst, policy)
    assert alloc.status == "optimal"
    assert alloc.objective == pytest.approx(1.0, rel=1e-6)
    thr = (inst.throughput * alloc.fractions).sum(axis=1)
    assert (thr > 0).all()  # both jobs progress: neither ρ is infinite
    # ρ − a 1.5e-12 of ρ: computed by cancellation, 1e-4 off, and the LP read v(ρ) < 1
    one = tiny([[1.0, 1e6, 1.0]], [1, 1, 1], steps_remaining=[4.889], elapsed_time=[1e7])
    alone = solve_instance(one, policy)
    assert alone.status == "optimal" and alone.objective == pytest.approx(1.0, rel=1e-6)


def test_finish_time_fairness_of_identical_jobs_is_one():
    inst = tiny([[2.0], [2.0]], [1])
    alloc = solve_instance(inst, "finish_time_fairness")
    assert alloc.objective == pytest.approx(1.0, rel=1e-6)
    np.testing.assert_allclose(alloc.fractions[:, 0], [0.5, 0.5], atol=1e-5)


def test_finish_time_fairness_favours_the_job_that_already_waited():
    # Job 0 waited 100 s without progress; job 1 just arrived. One GPU, 100 steps each at 1 step/s.
    # ρ0 = (100 + 100/x0) / (100 + 200), ρ1 = (100/x1) / 200 with x0 + x1 = 1: equal at x0 = 1/2... solve:
    inst = tiny([[1.0], [1.0]], [1], elapsed_time=[100.0, 0.0])
    alloc = solve_instance(inst, "finish_time_fairness")
    x0, x1 = alloc.fractions[:, 0]
    rho0, rho1 = (100 + 100 / x0) / 300, (100 / x1) / 200
    assert rho0 == pytest.approx(rho1, rel=1e-5) and alloc.objective == pytest.approx(rho0, rel=1e-5)
    # The exact optimum is x0 = x1 = 1/2 (ρ = 1 for both): isolated_time
    # defaults to the elapsed time, so the wait cancels out of ρ0. (This once
    # read ``x0 > x1``, true only by solver noise.) The waited job wins
    # strictly when its isolated time is shorter than its wait:
    assert x0 >= x1 - 1e-6
    waited = dataclasses.replace(inst, isolated_time=np.array([50.0, np.nan]))
    alloc = solve_instance(waited, "finish_time_fairness")
    x0, x1 = alloc.fractions[:, 0]
    rho0, rho1 = (100 + 100 / x0) / 250, (100 / x1) / 200  # D0 = 50 + 100 / (1/2)
    assert rho0 == pytest.approx(rho1, rel=1e-5) and alloc.objective == pytest.approx(rho0, rel=1e-5)
    assert x0 > x1 + 0.01


def test_max_throughput_and_proportional_fairness_known_values():
    inst = tiny([[3.0], [1.0]], [1])
    # Isolated share is 1/2 each: Σ thr / thr_iso = 2 (x0 + x1) ≤ 2.
    assert solve_instance(inst, "max_throughput").objective == pytest.approx(2.0, rel=1e-7)
    # Σ log(2 x_m) with x0 + x1 = 1: x = 1/2, value 0.
    pf = solve_instance(inst, "proportional_fairness")
    assert pf.objective == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_allclose(pf.fractions[:, 0], [0.5, 0.5], atol=1e-5)


def test_min_cost_buys_the_cheapest_progress_and_meets_the_slo():
    # Types sorted: t0 = k80-like (4 steps/s, $1), t1 = v100-like (10 steps/s, $3).
    inst = tiny([[4.0, 10.0]], [1, 1], price=[1.0, 3.0], steps_remaining=[800.0], slo=[100.0], time=0.0)
    np.testing.assert_allclose(solve_instance(inst, "min_cost").fractions, [[1.0, 0.0]], atol=1e-6)
    # SLO: 800 steps in 100 s = 8 steps/s: 4 a + 10 b ≥ 8, a + b ≤ 1 → a = 1/3, b = 2/3.
    alloc = solve_instance(inst, "min_cost_slo")
    np.testing.assert_allclose(alloc.fractions, [[1 / 3, 2 / 3]], atol=1e-6)


def test_min_cost_slo_documented_fallbacks():
    # A deadline already passed is dropped and reported; an impossible one relaxes all SLOs.
    inst = tiny([[4.0, 10.0], [4.0, 10.0]], [1, 1], price=[1.0, 3.0], steps_remaining=[800.0, 800.0], slo=[-5.0, 100.0], time=0.0)
    alloc = solve_instance(inst, "min_cost_slo")
    assert alloc.explanation["slo_missed"] == ["j0"]
    assert alloc.status == "optimal"
    impossible = dataclasses.replace(inst, slo=np.array([10.0, 10.0]))  # 80 steps/s each: no way
    alloc = solve_instance(impossible, "min_cost_slo")
    assert "SLOs cannot all be met" in alloc.status and alloc.explanation["slo_dropped"]
    assert_feasible(impossible, alloc.fractions)


# --------------------------------------------------------------------------
# Water filling and the hierarchical policy
# --------------------------------------------------------------------------


def shares(inst: Instance, X: np.ndarray) -> np.ndarray:
    equal = inst.throughput @ inst.capacity / inst.capacity.sum()
    return (inst.throughput * X).sum(axis=1) * inst.scale_factor / (inst.weight * equal)


def test_water_filling_min_share_equals_max_min_objective_and_never_lowers_anyone():
    for seed in range(4):
        inst = random_instance(np.random.default_rng(seed), 25)
        mmf = solve_instance(inst, "max_min_fairness")
        wf = solve_instance(inst, "max_min_fairness_water_filling")
        assert wf.objective == pytest.approx(mmf.objective, rel=1e-6)
        s = shares(inst, wf.fractions)
        assert s.min() == pytest.approx(mmf.objective, rel=1e-5)
        assert wf.explanation["lp_rounds"] >= 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_water_filling_share_cannot_rise_without_lowering_a_smaller_share(seed):
    """Leximin by perturbation: for every job m, the LP that maximizes m's share
    while no job with a share ≤ m's may drop cannot beat m's share."""
    inst = random_instance(np.random.default_rng(seed), 10)
    s = shares(inst, solve_instance(inst, "max_min_fairness_water_filling").fractions)
    equal = inst.throughput @ inst.capacity / inst.capacity.sum()
    for m in range(inst.n):
        X, cons = naive_base(inst)
        share = [thr_expr(inst.throughput, X, i) * inst.scale_factor[i] / (inst.weight[i] * equal[i]) for i in range(inst.n)]
        for i in range(inst.n):
            if i != m and s[i] <= s[m] * (1 + 1e-6):
                cons.append(share[i] >= s[i] * (1 - 1e-7))
        best = cp.Problem(cp.Maximize(share[m]), cons).solve(solver=cp.HIGHS)
        assert best <= s[m] * (1 + 1e-4) + 1e-7, f"job {m} could rise from {s[m]} to {best}"


def naive_water_filling(inst: Instance) -> np.ndarray:
    """Gavel-style loop: per round, one LP for t, then one LP per unfrozen job to
    test whether it can rise above t (freeze it if not)."""
    equal = inst.throughput @ inst.capacity / inst.capacity.sum()
    frozen: dict[int, float] = {}
    while len(frozen) < inst.n:
        X, cons = naive_base(inst)
        share = [thr_expr(inst.throughput, X, i) * inst.scale_factor[i] / (inst.weight[i] * equal[i]) for i in range(inst.n)]
        t = cp.Variable()
        live = [i for i in range(inst.n) if i not in frozen]
        base = cons + [share[i] >= v for i, v in frozen.items()]
        t_val = cp.Problem(cp.Maximize(t), base + [share[i] >= t for i in live]).solve(solver=cp.HIGHS)
        for m in live:
            up = cp.Problem(cp.Maximize(share[m]), base + [share[i] >= t_val * (1 - 1e-9) for i in live]).solve(solver=cp.HIGHS)
            if up <= t_val * (1 + 1e-6):
                frozen[m] = t_val
    return np.array([frozen[i] for i in range(inst.n)])


@pytest.mark.parametrize("seed", [3, 4])
def test_water_filling_levels_match_naive_per_job_freezing(seed):
    inst = random_instance(np.random.default_rng(seed), 8)
    ours = shares(inst, solve_instance(inst, "max_min_fairness_water_filling").fractions)
    # Leximin share vectors are unique: compare them sorted and per job.
    np.testing.assert_allclose(ours, naive_water_filling(inst), rtol=1e-5)


def test_hierarchical_splits_the_cluster_between_tenants_first():
    # Two identical GPUs, four identical jobs: tenant A has one job, tenant B three.
    base = tiny([[1.0]] * 4, [2], entity=("A", "B", "B", "B"))
    np.testing.assert_allclose(solve_instance(base, "max_min_fairness_hierarchical").fractions[:, 0], [1, 1 / 3, 1 / 3, 1 / 3], atol=1e-5)
    weighted = dataclasses.replace(base, entity_weights={"A": 1.0, "B": 3.0})
    np.testing.assert_allclose(solve_instance(weighted, "max_min_fairness_hierarchical").fractions[:, 0], [0.5, 0.5, 0.5, 0.5], atol=1e-5)


def test_hierarchical_gives_a_capped_jobs_leftover_to_its_own_tenant():
    # A's first job is slow on the only type it can use... make it capped: it can
    # only take type t1 (1 GPU); A's second job and B's job share t0 (2 GPUs).
    T = [[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]]
    inst = tiny(T, [2, 1], entity=("A", "A", "B"))
    X = solve_instance(inst, "max_min_fairness_hierarchical").fractions
    np.testing.assert_allclose(X[:, 0], [0, 1, 1], atol=1e-5)
    np.testing.assert_allclose(X[0, 1], 1, atol=1e-5)


def test_hierarchical_with_one_tenant_per_job_is_water_filling():
    inst = random_instance(np.random.default_rng(8), 12)
    inst = dataclasses.replace(inst, entity=tuple(inst.job_ids), weight=np.ones(inst.n))
    a = solve_instance(inst, "max_min_fairness_hierarchical").fractions
    b = solve_instance(inst, "max_min_fairness_water_filling").fractions
    np.testing.assert_allclose(shares(inst, a), shares(inst, b), rtol=1e-5)


# --------------------------------------------------------------------------
# Priority baselines
# --------------------------------------------------------------------------


def test_fifo_runs_jobs_in_arrival_order_on_their_fastest_type_with_backfill():
    T = [[1.0, 3.0], [1.0, 2.0], [5.0, 1.0], [1.0, 1.0]]
    inst = tiny(T, [1, 1], scale_factor=[1.0, 1.0, 1.0, 2.0], arrival_time=[0.0, 1.0, 2.0, 3.0])
    X = solve_instance(inst, "fifo").fractions
    # j0 takes t1 (fastest), j1 falls back to t0, j2 finds nothing, j3 (2 GPUs) never fits.
    np.testing.assert_array_equal(X, [[0, 1], [1, 0], [0, 0], [0, 0]])


def test_las_and_srtf_orders():
    inst = tiny([[1.0]] * 3, [1], attained_service=[50.0, 10.0, 10.0], steps_remaining=[10.0, 500.0, 100.0])
    assert solve_instance(inst, "las").fractions[:, 0].tolist() == [0, 1, 0]  # tie 10/10 → earlier arrival j1
    assert solve_instance(inst, "srtf").fractions[:, 0].tolist() == [1, 0, 0]


def test_tiresias_queues_and_starvation_promotion():
    from optsched.formulations.priority import tiresias_queues

    inst = tiny([[1.0]] * 4, [1], attained_service=[0.0, 4000.0, 8000.0, 8000.0], elapsed_time=[0.0, 4000.0, 8000.0, 80000.0])
    # Queue limits 3,250 and 7,200 GPU-s; job 3 waited 72,000 s ≥ 8 × 8,000 s executed: promoted.
    assert tiresias_queues(inst).tolist() == [0, 1, 2, 0]
    assert tiresias_queues(inst, starvation_factor=0).tolist() == [0, 1, 2, 2]
    # Within queue 0, FIFO by arrival: job 0 (arrived first) runs.
    assert solve_instance(inst, "tiresias").fractions[:, 0].tolist() == [1, 0, 0, 0]
    # last_run_time, when known, measures the wait since the job last ran.
    recent = dataclasses.replace(inst, last_run_time=np.array([np.nan, np.nan, np.nan, 79000.0]), time=80000.0)
    assert tiresias_queues(recent).tolist() == [0, 1, 2, 2]


def test_priority_ties_break_by_arrival_then_id():
    inst = tiny([[1.0]] * 3, [1], arrival_time=[5.0, 5.0, 5.0])
    inst = dataclasses.replace(inst, job_ids=("b", "c", "a"))
    assert solve_instance(inst, "fifo").fractions[:, 0].tolist() == [0, 0, 1]


# --------------------------------------------------------------------------
# Snapshots and bad input
# --------------------------------------------------------------------------


def snapshot(**job_overrides) -> dict:
    job = {"id": "a", "throughput": {"v100": 2.0}}
    return {"cluster": {"gpus": {"v100": 2}}, "jobs": [job | job_overrides, {"id": "b", "throughput": {"v100": 1.0}, "steps_total": 10}]}


@pytest.mark.parametrize("policy", ["makespan", "finish_time_fairness", "srtf"])
def test_policy_needing_steps_total_names_the_job(policy):
    with pytest.raises(OptschedError, match=r"jobs\[0\]\.steps_total"):
        solve(snapshot(), policy)


def test_min_cost_without_prices_names_the_field():
    with pytest.raises(OptschedError, match=r"cluster\.price_per_hour\['v100'\]"):
        solve(snapshot(steps_total=5), "min_cost")


def test_slo_job_without_steps_total_is_an_error():
    snap = snapshot(slo=100.0)
    snap["cluster"]["price_per_hour"] = {"v100": 1.0}
    with pytest.raises(OptschedError, match=r"jobs\[0\]\.steps_total"):
        solve(snap, "min_cost_slo")


def test_packing_on_a_policy_without_it_is_a_clear_error():
    with pytest.raises(OptschedError, match="packing"):
        solve(snapshot(steps_total=5), "proportional_fairness", packing=True)


def test_snapshot_fields_reach_the_instance():
    snap = snapshot(steps_total=5, isolated_time=7.0, slo=9.0, entity="t", last_run_time=3.0)
    snap["cluster"]["price_per_hour"] = {"v100": 2.5}
    snap["entity_weights"] = {"t": 2.0}
    snap["time"] = 4.0
    inst = Instance.from_snapshot(parse_snapshot(json.dumps(snap)))
    assert inst.isolated_time[0] == 7.0 and np.isnan(inst.isolated_time[1])
    assert inst.slo[0] == 9.0 and inst.last_run_time[0] == 3.0 and inst.time == 4.0
    assert inst.price.tolist() == [2.5] and inst.entity_weights == {"t": 2.0}


def test_bad_entity_weight_and_price_are_rejected():
    snap = snapshot()
    snap["entity_weights"] = {"t": 0.0}
    with pytest.raises(OptschedError, match=r"entity_weights\['t'\]"):
        parse_snapshot(snap)
    snap = snapshot()
    snap["cluster"]["price_per_hour"] = {"a100": 1.0}
    with pytest.raises(OptschedError, match="price_per_hour: unknown GPU type 'a100'"):
        parse_snapshot(snap)


@pytest.mark.parametrize("packing", [False, True])
def test_finish_time_fairness_with_a_finished_job_warns_nothing(packing):
    """A job with steps_done == steps_total has nothing left (0/0 in its ρ): masked, not a
    numpy RuntimeWarning on stderr before the output (a one-line error became three)."""
    import warnings

    import optsched

    snap = {"cluster": {"gpus": {"v100": 1}}, "jobs": [
        {"id": "a", "throughput": {"v100": 1}, "steps_total": 5},
        {"id": "b", "throughput": {"v100": 1}, "steps_total": 1, "steps_done": 1,
         **({"colocated": {"a": {"v100": [0.8, 0.8]}}} if packing else {})}]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        alloc = optsched.solve(optsched.parse_snapshot(snap), "finish_time_fairness", packing=packing)
    assert alloc.status == "optimal" and np.isfinite(alloc.objective)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.sampled_from([1e-9, 1e-5, 1e5, 1e9]))
def test_proportional_fairness_is_the_same_program_at_any_weight_scale(seed, scale):
    """Σ w log thr is maximized by the same X for w × c. One job of weight 1e9 on one GPU was
    'optimal' at objective 13.4 (it is 0 there); weight 1e-9 gave the lone job 0.69 of its GPU."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5))
    inst = tiny(rng.uniform(0.5, 5.0, (n, 2)).tolist(), [int(rng.integers(1, 4)), int(rng.integers(1, 4))])
    inst = dataclasses.replace(inst, weight=rng.choice([1.0, 2.0], n))
    base = solve_instance(inst, "proportional_fairness")
    big = solve_instance(dataclasses.replace(inst, weight=inst.weight * scale), "proportional_fairness")
    assert base.status == big.status == "optimal"
    assert big.objective == pytest.approx(base.objective * scale, rel=1e-5, abs=1e-9 * scale)
    thr_b, thr_g = (inst.throughput * base.fractions).sum(axis=1), (inst.throughput * big.fractions).sum(axis=1)
    np.testing.assert_allclose(thr_g, thr_b, rtol=1e-4)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_min_cost_slo_agrees_across_solvers_at_extreme_prices_and_rates(seed):
    """Prices of 1e4 $/h made the objective 1e-4 and CLARABEL stopped 30 % short ('optimal');
    an SLO row T / rate of 4e16 made HiGHS give up ('Not Set') on a one-job instance."""
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    T = 10.0 ** rng.uniform(-3, 12, (n, k))
    R = 10.0 ** rng.uniform(2, 12, n)
    inst = tiny(T.tolist(), rng.integers(1, 5, k).tolist(), steps_remaining=R.tolist())
    slo = R / (T.max(axis=1) * rng.uniform(0.05, 2.0, n))  # deadlines from 20x slack to unmeetable
    inst = dataclasses.replace(inst, price=10.0 ** rng.uniform(-6, 6, k), slo=slo)
    results = [solve_instance(inst, "min_cost_slo", solver=s) for s in ("auto", "ipm", "highs", "highs-simplex")]
    assert len({a.status for a in results}) == 1 and not results[0].status.startswith("fallback"), \
        [a.status for a in results]
    ref = results[-1].objective  # the simplex vertex
    for a in results:
        assert a.objective == pytest.approx(ref, rel=1e-5)


@pytest.mark.parametrize("solver", ["auto", "highs-simplex"])
def test_makespan_prices_are_seconds_saved_per_gpu(solver):
    """makespan's gpu_price was z's dual in the program's internal unit (and changed with it):
    it is −dM/dW, checked against a finite difference of the optimum."""
    from optsched.bench.instances import rigid

    inst = rigid(45, 3, 2)
    alloc = solve_instance(inst, "makespan", solver=solver)
    for j, t in enumerate(inst.gpu_types):
        cap = inst.capacity.astype(float).copy()
        cap[j] += 1e-3
        more = solve_instance(dataclasses.replace(inst, capacity=cap), "makespan", solver="highs-simplex")
        assert alloc.explanation["gpu_price"][t] == pytest.approx((alloc.objective - more.objective) / 1e-3, rel=1e-3)


def test_makespan_with_a_job_that_runs_nowhere_solves_the_others():
    """A hand-built Instance may hold a job with no throughput anywhere (snapshots refuse it):
    R / 0 made the program NaN and CLARABEL fell back. It has no row; the others' makespan stands."""
    inst = tiny([[1.0], [1.0], [0.0]], [1], steps_remaining=[100.0, 300.0, 50.0])
    alloc = solve_instance(inst, "makespan")
    assert alloc.status == "optimal" and alloc.objective == pytest.approx(400.0, rel=1e-7)
    assert alloc.fractions[2].sum() == 0
