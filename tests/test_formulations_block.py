"""The block-LP path (formulations → solvers/block_lp.py → decode) against
independent cvxpy oracles written here, comparing whole allocations where
the optimum is unique (water-filling share vectors, proportional fairness's
throughputs) and the achieved objective of the returned allocation where it
is not; the structured IPM against CLARABEL on random block LPs; timings and
import hygiene."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, random_instance
from optsched.formulations.base import admitted_pairs
from optsched.model import Instance
from optsched.policy import solve_instance
from optsched.solvers import block_lp
from optsched.solvers.block_lp import BlockLP


# --------------------------------------------------------------------------
# The structured IPM against CLARABEL on random block LPs (guards block_lp._ipm)
# --------------------------------------------------------------------------


def random_block_lp(rng: np.random.Generator, n: int, k: int, kind: str) -> BlockLP:
    A = rng.uniform(0.1, 5.0, (n, k)) * rng.uniform(0.2, 1.0, (1, k))
    allowed = rng.random((n, k)) > 0.25
    allowed[np.arange(n), rng.integers(0, k, n)] = True
    A = np.where(allowed, A, 0.0)
    S = rng.choice([1.0, 2.0, 4.0], n, p=[0.7, 0.2, 0.1])
    W = rng.integers(4, 20, k).astype(float)
    allowed &= S[:, None] <= W[None, :]
    allowed[allowed.sum(axis=1) == 0, int(np.argmax(W))] = True
    A = np.where(allowed, np.maximum(A, 0.1), 0.0)
    if kind == "max_min":
        return BlockLP(A=A, S=S, W=W, allowed=allowed, g=rng.choice([1.0, 0.5, 2.0], n), c_z=1.0)
    if kind == "objective":
        return BlockLP(A=A, S=S, W=W, allowed=allowed, C=rng.uniform(0.0, 3.0, (n, k)))
    # Frozen rows (g = 0, lower bounds) next to lifted rows, as in water filling:
    # lower bounds from a feasible point (the equal split scaled to fit), halved.
    X0 = np.where(allowed, 1.0 / k, 0.0)
    X0 *= np.minimum(1.0, W / np.maximum(S @ X0, 1e-12))[None, :]
    frozen = rng.random(n) < 0.4
    frozen[rng.integers(n)] = False  # z stays bounded
    lower = np.where(frozen, 0.5 * (A * X0).sum(axis=1), 0.0)
    return BlockLP(A=A, S=S, W=W, allowed=allowed, g=np.where(frozen, 0.0, 1.0), lower=lower, c_z=1.0,
                   C=rng.uniform(0.0, 0.1, (n, k)) if kind == "mixed" else None)


def assert_block_feasible(lp: BlockLP, sol, tol: float = 1e-6):
    X = sol.X
    assert (X >= -tol).all() and (X[~lp.allowed] <= tol).all()
    assert (X.sum(axis=1) <= 1 + tol).all()
    assert (lp.S @ X <= lp.W * (1 + tol) + tol).all()
    rows = lp.rows()
    if rows.any():
        lhs = (lp.A * X).sum(axis=1) - (0.0 if lp.g is None else lp.g * sol.z)
        lower = np.zeros(lp.n) if lp.lower is None else lp.lower
        assert (lhs[rows] >= lower[rows] - tol * (1 + np.abs(lower[rows]))).all()


@pytest.mark.parametrize("kind", ["max_min", "objective", "frozen", "mixed"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), k=st.integers(1, 5))
def test_ipm_and_clarabel_agree_on_random_block_lps(kind, seed, n, k):
    lp = random_block_lp(np.random.default_rng(seed), n, k, kind)
    a = block_lp.solve(lp, backend="ipm")
    b = block_lp.solve(lp, backend="clarabel")
    assert a.ok and b.ok, (a.message, b.message)
    assert a.value == pytest.approx(b.value, rel=1e-6, abs=1e-8)
    assert_block_feasible(lp, a)
    assert_block_feasible(lp, b)
    # Objective of the returned point = reported value; prices are objective per GPU (≥ 0).
    assert a.value == pytest.approx(float((lp.objective_X() * a.X).sum() + lp.c_z * (a.z if lp.has_z else 0.0)), rel=1e-6, abs=1e-8)
    assert (a.price >= -1e-7).all()


def test_auto_backend_is_chosen_by_size_without_pairs_and_highs_with_pairs():
    from optsched.solvers import block_backend
    from optsched.solvers.block_lp import AUTO_IPM_ENTRIES

    assert block_backend("auto", has_pairs=False) == "auto"  # block_lp picks clarabel or ipm by size
    assert AUTO_IPM_ENTRIES > 0
    assert block_backend("auto", has_pairs=True) == "highs-ipm"
    assert block_backend("highs-direct", has_pairs=False) == "highs-ipm"  # old names are aliases
    assert block_backend("clarabel-direct", has_pairs=False) == "clarabel"
    assert block_backend("scs", has_pairs=False) == "clarabel"


# --------------------------------------------------------------------------
# Oracles (vectorized cvxpy, written from the math)
# --------------------------------------------------------------------------


def oracle_base(inst: Instance, pairs=None):
    """X (and Y over the given admitted pairs) with the base constraints."""
    n, k = inst.n, inst.k
    X = cp.Variable((n, k), nonneg=True)
    cons = [X[~inst.available] == 0] if (~inst.available).any() else []
    if pairs is None:
        cons += [cp.sum(X, axis=1) <= 1, inst.scale_factor @ X <= inst.capacity]
        return X, None, cons
    P, rate, ok = pairs
    Y = cp.Variable((len(P), k), nonneg=True)
    member = np.zeros((n, len(P)))
    member[P[:, 0], np.arange(len(P))] = 1
    member[P[:, 1], np.arange(len(P))] = 1
    cons += [Y[~ok] == 0] if (~ok).any() else []
    cons += [cp.sum(X, axis=1) + member @ cp.sum(Y, axis=1) <= 1,
             inst.scale_factor @ X + inst.scale_factor[P[:, 0]] @ Y <= inst.capacity]
    return X, Y, cons


def oracle_thr(inst: Instance, T, X, Y=None, pairs=None):
    thr = cp.sum(cp.multiply(T, X), axis=1)
    if Y is None:
        return thr
    P, rate, ok = pairs
    n = inst.n
    first, second = np.zeros((n, len(P))), np.zeros((n, len(P)))
    first[P[:, 0], np.arange(len(P))] = 1
    second[P[:, 1], np.arange(len(P))] = 1
    c0, c1 = T[P[:, 0]] * rate[:, :, 0], T[P[:, 1]] * rate[:, :, 1]
    return thr + first @ cp.sum(cp.multiply(c0, Y), axis=1) + second @ cp.sum(cp.multiply(c1, Y), axis=1)


def equal_share(inst: Instance, T) -> np.ndarray:
    return T @ inst.capacity / inst.capacity.sum()


def iso(inst: Instance, T) -> np.ndarray:
    share = np.where(inst.available, inst.capacity[None, :] / inst.n / inst.scale_factor[:, None], 0.0)
    share /= np.maximum(share.sum(axis=1), 1.0)[:, None]
    return (T * share).sum(axis=1)


def shares(inst: Instance, X: np.ndarray) -> np.ndarray:
    return (inst.throughput * X).sum(axis=1) * inst.scale_factor / (inst.weight * equal_share(inst, inst.throughput))


def unweighted(inst: Instance) -> Instance:
    return dataclasses.replace(inst, weight=np.ones(inst.n))


# --------------------------------------------------------------------------
# Max-min fairness and water filling: whole share vectors
# --------------------------------------------------------------------------


def oracle_water_filling(inst: Instance) -> np.ndarray:
    """Leximin shares by the textbook procedure: maximize t; then, per job, one
    LP asks whether it can rise above t with everyone at ≥ t (freeze if not)."""
    norm = inst.scale_factor / (inst.weight * equal_share(inst, inst.throughput))
    level = np.full(inst.n, np.nan)
    while np.isnan(level).any():
        X, _, cons = oracle_base(inst)
        share = cp.multiply(norm, cp.sum(cp.multiply(inst.throughput, X), axis=1))
        done = ~np.isnan(level)
        if done.any():
            cons.append(share[np.flatnonzero(done)] >= level[done] * (1 - 1e-9))
        live = np.flatnonzero(~done)
        t = cp.Variable()
        t_val = cp.Problem(cp.Maximize(t), cons + [share[live] >= t]).solve(solver=cp.HIGHS)
        for m in live:
            up = cp.Problem(cp.Maximize(share[m]), cons + [share[live] >= t_val * (1 - 1e-9)]).solve(solver=cp.HIGHS)
            if up <= t_val * (1 + 1e-6):
                level[m] = t_val
    return level


@pytest.mark.parametrize("weights", ["ones", "random"])
@pytest.mark.parametrize("seed", [10, 11, 12])
def test_water_filling_share_vector_matches_oracle(seed, weights):
    inst = random_instance(np.random.default_rng(seed), 9)
    if weights == "ones":
        inst = unweighted(inst)
    ours = shares(inst, solve_instance(inst, "max_min_fairness_water_filling").fractions)
    expected = oracle_water_filling(inst)
    np.testing.assert_allclose(np.sort(ours), np.sort(expected), rtol=1e-5)
    np.testing.assert_allclose(ours, expected, rtol=1e-5)


def oracle_hierarchical(inst: Instance) -> np.ndarray:
    """Per-tenant water filling by the textbook procedure: in each round an
    unfrozen job m of tenant e needs share_m ≥ t · ω_e w_m / Σ_{unfrozen m' ∈ e} w_m'
    (share without the job weight); maximize t, then freeze every job that
    cannot rise above its bound with all others at theirs."""
    norm = inst.scale_factor / equal_share(inst, inst.throughput)
    tenants = sorted(set(inst.entity))
    omega = {e: (inst.entity_weights or {}).get(e, 1.0) for e in tenants}
    level = np.full(inst.n, np.nan)
    while np.isnan(level).any():
        live = np.flatnonzero(np.isnan(level))
        w = np.zeros(inst.n)
        for m in live:
            e = inst.entity[m]
            w[m] = omega[e] * inst.weight[m] / sum(inst.weight[i] for i in live if inst.entity[i] == e)
        X, _, cons = oracle_base(inst)
        share = cp.multiply(norm, cp.sum(cp.multiply(inst.throughput, X), axis=1))
        done = np.flatnonzero(~np.isnan(level))
        if len(done):
            cons.append(share[done] >= level[done] * (1 - 1e-9))
        t = cp.Variable()
        t_val = cp.Problem(cp.Maximize(t), cons + [share[live] >= t * w[live]]).solve(solver=cp.HIGHS)
        for m in live:
            up = cp.Problem(cp.Maximize(share[m] / w[m]), cons + [share[live] >= t_val * w[live] * (1 - 1e-9)]).solve(solver=cp.HIGHS)
            if up <= t_val * (1 + 1e-6):
                level[m] = t_val * w[m]
    return level


@pytest.mark.parametrize("seed", [13, 14])
def test_hierarchical_share_vector_matches_oracle(seed):
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, 9)
    inst = dataclasses.replace(inst, entity=tuple(rng.choice(["a", "b", "c"], inst.n)), entity_weights={"a": 1.0, "b": 2.0})
    X = solve_instance(inst, "max_min_fairness_hierarchical").fractions
    ours = (inst.throughput * X).sum(axis=1) * inst.scale_factor / equal_share(inst, inst.throughput)
    np.testing.assert_allclose(ours, oracle_hierarchical(inst), rtol=1e-5)


@pytest.mark.parametrize("solver", ["ipm", "clarabel", "highs", "highs-simplex"])
def test_water_filling_is_the_same_leximin_vector_with_every_backend(solver):
    inst = random_instance(np.random.default_rng(21), 30)
    ref = shares(inst, solve_instance(inst, "max_min_fairness_water_filling", solver="clarabel").fractions)
    ours = shares(inst, solve_instance(inst, "max_min_fairness_water_filling", solver=solver).fractions)
    np.testing.assert_allclose(ours, ref, rtol=1e-5)


@pytest.mark.parametrize("agnostic", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_max_min_on_unit_weights_matches_oracle_and_allocation_achieves_it(seed, agnostic):
    inst = unweighted(random_instance(np.random.default_rng(30 + seed), 25))
    T = np.where(inst.throughput > 0, 1.0, 0.0) if agnostic else inst.throughput
    X, _, cons = oracle_base(inst)
    t = cp.Variable()
    norm = inst.scale_factor / equal_share(inst, T)
    expected = cp.Problem(cp.Maximize(t), cons + [cp.multiply(norm, oracle_thr(inst, T, X)) >= t]).solve(solver=cp.CLARABEL)
    alloc = solve_instance(inst, "max_min_fairness_agnostic" if agnostic else "max_min_fairness")
    assert alloc.objective == pytest.approx(expected, rel=1e-6)
    achieved = norm * (T * alloc.fractions).sum(axis=1)
    assert achieved.min() == pytest.approx(expected, rel=1e-6)
    # The water-filled allocation lifts the same minimum and never lowers it.
    wf = solve_instance(inst, "max_min_fairness_water_filling_agnostic" if agnostic else "max_min_fairness_water_filling")
    assert (norm * (T * wf.fractions).sum(axis=1)).min() == pytest.approx(expected, rel=1e-5)


# --------------------------------------------------------------------------
# Finish-time fairness: the root finding against an inv_pos model
# --------------------------------------------------------------------------


def oracle_ftf(inst: Instance, T, pairs=None) -> float:
    X, Y, cons = oracle_base(inst, pairs)
    iso_time = np.where(np.isnan(inst.isolated_time), inst.elapsed_time, inst.isolated_time) \
        if inst.isolated_time is not None else inst.elapsed_time
    D = iso_time + inst.steps_remaining / iso(inst, T)
    rho = (inst.elapsed_time + cp.multiply(inst.steps_remaining, cp.inv_pos(oracle_thr(inst, T, X, Y, pairs)))) / D
    return cp.Problem(cp.Minimize(cp.max(rho)), cons).solve(solver=cp.CLARABEL)


def achieved_rho(inst: Instance, T, alloc) -> np.ndarray:
    thr = (T * alloc.fractions).sum(axis=1)
    for p, (a, b) in enumerate(alloc.pairs):
        q = int(np.flatnonzero((inst.pairs == [a, b]).all(axis=1))[0])
        rate = inst.pair_throughput[q] / np.where(inst.throughput[[a, b]].T > 0, inst.throughput[[a, b]].T, 1.0)
        thr[a] += (T[a] * rate[:, 0] * alloc.pair_fractions[p]).sum()
        thr[b] += (T[b] * rate[:, 1] * alloc.pair_fractions[p]).sum()
    iso_time = np.where(np.isnan(inst.isolated_time), inst.elapsed_time, inst.isolated_time) \
        if inst.isolated_time is not None else inst.elapsed_time
    D = iso_time + inst.steps_remaining / iso(inst, T)
    return (inst.elapsed_time + inst.steps_remaining / thr) / D


@pytest.mark.parametrize("contended", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_finish_time_fairness_matches_inv_pos_oracle(seed, contended):
    rng = np.random.default_rng(40 + seed)
    inst = random_instance(rng, int(rng.integers(3, 20)), int(rng.integers(1, 4)), multi_gpu=not contended)
    if contended:  # few GPUs: jobs cannot all run at their best, the root finding iterates
        inst = dataclasses.replace(inst, capacity=np.full(inst.k, max(1.0, np.floor(inst.n / (3 * inst.k)))),
                                   elapsed_time=inst.elapsed_time * 0.01)  # no single long-waiting job sets ρ
    # Mixed histories: some jobs waited longer than they would have run alone.
    inst = dataclasses.replace(inst, isolated_time=np.where(rng.random(inst.n) < 0.5, inst.elapsed_time * rng.uniform(0.2, 1.0, inst.n), np.nan))
    expected = oracle_ftf(inst, inst.throughput)
    alloc = solve_instance(inst, "finish_time_fairness")
    assert alloc.status == "optimal"
    assert alloc.objective == pytest.approx(expected, rel=1e-6)
    assert achieved_rho(inst, inst.throughput, alloc).max() == pytest.approx(expected, rel=1e-6)
    assert alloc.explanation["max_min_solves"] <= 20
    if contended:
        assert alloc.explanation["max_min_solves"] > 1


@pytest.mark.parametrize("solver", ["ipm", "clarabel", "highs"])
def test_finish_time_fairness_same_optimum_on_every_backend(solver):
    inst = random_instance(np.random.default_rng(47), 30)
    ref = solve_instance(inst, "finish_time_fairness", solver="clarabel").objective
    assert solve_instance(inst, "finish_time_fairness", solver=solver).objective == pytest.approx(ref, rel=1e-6)


# --------------------------------------------------------------------------
# Proportional fairness: the throughput vector is unique
# --------------------------------------------------------------------------


@pytest.mark.parametrize("agnostic", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_proportional_fairness_throughputs_match_oracle(seed, agnostic):
    inst = random_instance(np.random.default_rng(50 + seed), 20)
    T = np.where(inst.throughput > 0, 1.0, 0.0) if agnostic else inst.throughput
    X, _, cons = oracle_base(inst)
    thr = oracle_thr(inst, T / iso(inst, T)[:, None], X)
    prob = cp.Problem(cp.Maximize(inst.weight @ cp.log(thr)), cons)
    expected = prob.solve(solver=cp.CLARABEL)
    alloc = solve_instance(inst, "proportional_fairness_agnostic" if agnostic else "proportional_fairness")
    assert alloc.objective == pytest.approx(expected, rel=1e-6, abs=1e-6)
    ours = (T * alloc.fractions).sum(axis=1)
    np.testing.assert_allclose(ours, (T * X.value).sum(axis=1), rtol=1e-4)


# --------------------------------------------------------------------------
# Linear policies: the allocation achieves the oracle's optimum
# --------------------------------------------------------------------------


@pytest.mark.parametrize("solver", ["auto", "clarabel", "highs", "highs-simplex"])
@pytest.mark.parametrize("seed", range(3))
def test_linear_policies_allocation_achieves_oracle_optimum(seed, solver):
    rng = np.random.default_rng(60 + seed)
    inst = random_instance(rng, 15)
    inst = dataclasses.replace(inst, price=rng.uniform(0.3, 3.0, inst.k), time=0.0,
                               slo=np.where(rng.random(inst.n) < 0.3, rng.uniform(1e5, 1e7, inst.n), np.nan))
    T, R = inst.throughput, inst.steps_remaining
    # max throughput
    X, _, cons = oracle_base(inst)
    A = T / iso(inst, T)[:, None]
    expected = cp.Problem(cp.Maximize(cp.sum(cp.multiply(A, X))), cons).solve(solver=cp.HIGHS)
    alloc = solve_instance(inst, "max_throughput", solver=solver)
    assert (A * alloc.fractions).sum() == pytest.approx(expected, rel=1e-6)
    # makespan
    X, _, cons = oracle_base(inst)
    z = cp.Variable()
    expected = 1 / cp.Problem(cp.Maximize(z), cons + [oracle_thr(inst, T, X) >= R * z]).solve(solver=cp.HIGHS)
    alloc = solve_instance(inst, "makespan", solver=solver)
    assert alloc.objective == pytest.approx(expected, rel=1e-6)
    assert (R / (T * alloc.fractions).sum(axis=1)).max() == pytest.approx(expected, rel=1e-5)
    # min cost with SLOs
    X, _, cons = oracle_base(inst)
    C = A / (inst.scale_factor[:, None] * inst.price[None, :])
    live = np.flatnonzero(np.isfinite(inst.slo))
    slo = [oracle_thr(inst, T, X)[live] >= R[live] / inst.slo[live]] if len(live) else []
    prob = cp.Problem(cp.Maximize(cp.sum(cp.multiply(C, X))), cons + slo)
    expected = prob.solve(solver=cp.HIGHS)
    alloc = solve_instance(inst, "min_cost_slo", solver=solver)
    if prob.status == cp.INFEASIBLE:
        assert "SLOs cannot all be met" in alloc.status
    else:
        assert alloc.status == "optimal"
        assert (C * alloc.fractions).sum() == pytest.approx(expected, rel=1e-6)
        thr = (T * alloc.fractions).sum(axis=1)
        assert (thr[live] >= R[live] / inst.slo[live] * (1 - 1e-6)).all()


# --------------------------------------------------------------------------
# Packing: the same admitted pairs (with the partner cap) in a cvxpy model
# --------------------------------------------------------------------------


def with_pairs(inst: Instance, rng: np.random.Generator, per_job: float = 4.0) -> Instance:
    n, k = inst.n, inst.k
    m = int(n * per_job)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = a != b
    P = np.unique(np.sort(np.stack([a[keep], b[keep]], axis=1), axis=1), axis=0).reshape(-1, 2)
    rates = rng.uniform(0.3, 0.95, (len(P), k, 2)) * np.stack([inst.throughput[P[:, 0]], inst.throughput[P[:, 1]]], axis=2)
    return dataclasses.replace(inst, pairs=P, pair_throughput=rates)


@pytest.mark.parametrize("policy", ["max_min_fairness", "finish_time_fairness", "makespan", "max_throughput"])
@pytest.mark.parametrize("seed", [70, 71])
def test_packing_with_partner_cap_matches_oracle_on_the_same_admitted_pairs(policy, seed):
    rng = np.random.default_rng(seed)
    inst = with_pairs(random_instance(rng, 16, 2, multi_gpu=False), rng)
    pairs = admitted_pairs(inst, max_partners=3)
    assert 0 < len(pairs[0]) < len(inst.pairs)  # the cap matters
    T, R = inst.throughput, inst.steps_remaining
    X, Y, cons = oracle_base(inst, pairs)
    if policy == "max_min_fairness":
        t = cp.Variable()
        norm = inst.scale_factor / (inst.weight * equal_share(inst, T))
        expected = cp.Problem(cp.Maximize(t), cons + [cp.multiply(norm, oracle_thr(inst, T, X, Y, pairs)) >= t]).solve(solver=cp.HIGHS)
    elif policy == "max_throughput":
        A = T / iso(inst, T)[:, None]
        expected = cp.Problem(cp.Maximize(cp.sum(oracle_thr(inst, A, X, Y, pairs))), cons).solve(solver=cp.HIGHS)
    elif policy == "makespan":
        z = cp.Variable()
        expected = 1 / cp.Problem(cp.Maximize(z), cons + [oracle_thr(inst, T, X, Y, pairs) >= R * z]).solve(solver=cp.HIGHS)
    else:
        expected = oracle_ftf(inst, T, pairs)
    alloc = solve_instance(inst, policy, packing=True, max_partners=3)
    assert alloc.status == "optimal"
    assert alloc.objective == pytest.approx(expected, rel=1e-6)
    assert alloc.explanation["pairs_admitted"] == len(pairs[0])
    if policy == "finish_time_fairness":
        assert achieved_rho(inst, T, alloc).max() == pytest.approx(expected, rel=1e-6)


# --------------------------------------------------------------------------
# Timings, solver names, import hygiene
# --------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["max_min_fairness", "finish_time_fairness", "proportional_fairness",
                                    "max_min_fairness_water_filling"])
def test_timings_are_separate_and_add_up(policy):
    alloc = solve_instance(random_instance(np.random.default_rng(80), 40), policy)
    d = alloc.to_dict()
    for key in ("solve_seconds", "build_seconds", "solver_seconds", "decode_seconds"):
        assert d[key] >= 0
    assert alloc.solver_seconds > 0
    assert alloc.build_seconds + alloc.solver_seconds + alloc.decode_seconds <= alloc.solve_seconds * (1 + 1e-9) + 1e-6


def test_unknown_solver_lists_the_user_names():
    from optsched.model import OptschedError

    with pytest.raises(OptschedError, match="auto, ipm, clarabel, highs, highs-simplex"):
        solve_instance(random_instance(np.random.default_rng(0), 3), "max_min_fairness", solver="gurobi")


def test_solve_path_never_imports_cvxpy():
    code = (
        "import sys, json\n"
        "from optsched.policy import solve\n"
        "from optsched.cli.solve import example_snapshot_text\n"
        "for p in ['max_min_fairness', 'max_min_fairness_water_filling', 'finish_time_fairness', 'makespan',\n"
        "          'max_throughput', 'proportional_fairness']:\n"
        "    assert solve(example_snapshot_text(), p).status.startswith('optimal'), p\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'cvxpy')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_identical_rows_are_exactly_the_equal_rows():
    """Classes from the projection sort equal np.unique's, also when different
    rows round to the same projection (values a few ulps apart)."""
    from optsched.solvers.block_lp import BlockLP, identical_rows

    rng = np.random.default_rng(5)
    for trial in range(20):
        n, k = int(rng.integers(2, 400)), int(rng.integers(1, 6))
        base = rng.choice([0.0, 1.0, 3.0, 0.1 + 0.2], (max(1, n // 4), k))  # few distinct rows
        A = base[rng.integers(0, len(base), n)].copy()
        near = rng.random(n) < 0.1
        A[near] = np.nextafter(A[near], np.inf)  # ulp neighbours
        S = rng.choice([1.0, 2.0], n)
        lp = BlockLP(A=A, S=S, W=np.ones(k), allowed=A > 0, g=np.ones(n), c_z=1.0)
        first, inverse, counts = identical_rows(lp)
        key = np.concatenate([A, (A > 0).astype(float), S[:, None]], axis=1)
        assert len(counts) == len(np.unique(key, axis=0))
        assert np.array_equal(key[first][inverse], key)  # every row equals its class's first row
        assert counts.sum() == n
