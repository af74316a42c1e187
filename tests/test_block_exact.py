"""The exact shortcuts of the max-min family (solvers/block_exact.py): every
answer they give is checked against CLARABEL on the whole program and against
its own dual certificate (strong duality, dual feasibility), on random
instances congested and not, with frozen rows (water filling) and forbidden
types."""

from __future__ import annotations

import time

import numpy as np
import pytest

from optsched.solvers import block_exact, block_lp
from optsched.solvers.block_lp import BlockLP


def random_lp(rng: np.random.Generator, n: int, k: int, capacity: float, frozen: float = 0.0) -> BlockLP:
    A = rng.uniform(0.1, 3.0, (n, k)) * rng.uniform(0.5, 2.0, k)
    allowed = rng.random((n, k)) > 0.15
    allowed[np.arange(n), rng.integers(0, k, n)] = True
    S = rng.choice([1.0, 2.0, 4.0], n, p=[0.7, 0.2, 0.1])
    W = np.maximum(1.0, capacity * S.sum() / k * rng.uniform(0.5, 1.5, k))
    g = np.ones(n)
    lower = np.zeros(n)
    if frozen:
        freeze(rng, A, S, W, allowed, g, lower, frozen)
    return BlockLP(A=A, S=S, W=W, allowed=allowed, c_z=1.0, g=g, lower=lower)


def freeze(rng, A, S, W, allowed, g, lower, frozen: float) -> None:
    """Water-filling levels, in place: a fraction ``frozen`` of the rows get g = 0 and
    a level l at part of a feasible point's share."""
    n = len(A)
    X0 = allowed / allowed.sum(axis=1, keepdims=True)
    X0 = X0 * np.minimum(1.0, W / (S @ X0))[None, :]
    fz = rng.random(n) < frozen
    g[fz] = 0.0
    lower[fz] = rng.uniform(0.3, 0.9) * (A * X0).sum(axis=1)[fz]


def certificate_gap(lp: BlockLP, sol) -> float:
    """Relative gap between the solution's value and the dual objective its
    multipliers prove, after checking the multipliers are dual feasible."""
    lam, p = sol.share_dual, sol.price
    assert np.all(lam >= -1e-9) and np.all(p >= -1e-9)
    g = np.asarray(lp.g, dtype=float)
    assert abs(float(g @ lam) - lp.c_z) <= 1e-6 * lp.c_z  # z's column
    A = np.where(lp.allowed, lp.A, 0.0)
    mu = np.maximum(0.0, (lam[:, None] * A - lp.S[:, None] * p[None, :]).max(axis=1))  # best time-row price
    lower = np.zeros(lp.n) if lp.lower is None else lp.lower
    dual = float(mu.sum() + p @ lp.W - lam @ lower)
    return abs(dual - sol.value) / max(1.0, abs(sol.value))


def check_primal(lp: BlockLP, sol, tol: float = 1e-7) -> None:
    X = sol.X
    assert np.all(X >= -tol) and np.all(X[~lp.allowed] == 0)
    assert np.all(X.sum(axis=1) <= 1 + tol)
    assert np.all(lp.S @ X <= lp.W * (1 + tol) + tol)
    share = (lp.A * X).sum(axis=1)
    lower = np.zeros(lp.n) if lp.lower is None else lp.lower
    assert np.all(share >= lp.g * sol.z + lower - tol * (1 + share))


def reference(lp: BlockLP):
    sol = block_lp._matrix_solve(lp, "clarabel", 60.0)
    assert sol.ok
    return sol


@pytest.mark.parametrize("seed", range(24))
def test_shortcuts_match_clarabel_and_prove_themselves(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(20, 400)), int(rng.integers(1, 6))
    lp = random_lp(rng, n, k, capacity=float(rng.choice([0.05, 0.2, 0.5, 3.0])), frozen=float(rng.choice([0.0, 0.3])))
    ref = reference(lp)
    found = 0
    quick = block_exact.uncongested(lp)
    if quick is not None:
        found += 1
        check_primal(lp, quick)
        assert quick.z == pytest.approx(ref.z, rel=1e-6, abs=1e-9)
        assert certificate_gap(lp, quick) <= 1e-9
    # Crossover from the exact prices, and from prices 2 % off.
    for noise in (0.0, 0.02):
        price = ref.price * rng.uniform(1 - noise, 1 + noise, k)
        cross = block_exact.crossover(lp, price, ref.z, max(1e-4, noise), time.perf_counter() + 60)
        if cross is None:
            continue
        found += 1
        check_primal(lp, cross)
        assert cross.z == pytest.approx(ref.z, rel=1e-6, abs=1e-9)
        assert certificate_gap(lp, cross) <= 1e-6
    assert found or noise  # with exact prices the crossover must succeed unless the shortcut applies


def test_uncongested_is_the_first_job_out_of_time():
    rng = np.random.default_rng(7)
    lp = random_lp(rng, 300, 4, capacity=50.0)
    sol = block_exact.uncongested(lp)
    assert sol is not None and sol.backend == "uncongested"
    best = np.where(lp.allowed, lp.A, 0.0).max(axis=1)
    assert sol.z == pytest.approx(best.min())


def test_uncongested_declines_when_capacity_binds():
    rng = np.random.default_rng(8)
    lp = random_lp(rng, 300, 4, capacity=0.05)
    assert block_exact.uncongested(lp) is None


@pytest.mark.parametrize("capacity", [0.01, 0.03])
def test_ipm_with_crossover_is_exact_at_scale(capacity):
    """Through block_lp.solve: the level search (or the IPM) hands over to the
    crossover (or the IPM finishes) and the result is the program's optimum either way."""
    rng = np.random.default_rng(11)
    lp = random_lp(rng, 3000, 3, capacity=capacity)
    sol = block_lp.solve(lp, "ipm")
    ref = reference(lp)
    assert sol.ok and sol.backend in ("ipm", "ipm+crossover", "prices+crossover")
    check_primal(lp, sol, tol=1e-6)
    assert sol.z == pytest.approx(ref.z, rel=1e-6)
    interior = block_lp.solve(lp, "ipm", interior=True)
    assert interior.backend == "ipm" and interior.z == pytest.approx(ref.z, rel=1e-6)


def test_not_applicable_outside_the_family():
    rng = np.random.default_rng(3)
    lp = random_lp(rng, 50, 3, capacity=0.3)
    import dataclasses

    with_objective = dataclasses.replace(lp, C=np.ones((50, 3)))
    assert not block_exact.applicable(with_objective)
    assert block_exact.uncongested(with_objective) is None
    negative = dataclasses.replace(lp, lower=-np.ones(50))
    assert not block_exact.applicable(negative)


@pytest.mark.parametrize("case", ["zero-capacity type", "no capacity", "a job that can run nowhere", "a zero throughput row", "no jobs"])
def test_ipm_path_edges_match_clarabel(case):
    """Edges through the shortcuts and the IPM (backend "ipm" forces that path at any size):
    the same optimum as CLARABEL, or a clean ok for an empty program."""
    rng = np.random.default_rng(2)
    n, k = 200, 3
    A, S, W, allowed = rng.uniform(0.1, 3.0, (n, k)), np.ones(n), np.full(k, 30.0), np.ones((n, k), dtype=bool)
    if case == "zero-capacity type":
        W[0] = 0.0
    elif case == "no capacity":
        W[:] = 0.0
    elif case == "a job that can run nowhere":
        allowed[0] = False
    elif case == "a zero throughput row":
        A[0] = 0.0
    elif case == "no jobs":
        A, S, allowed = A[:0], S[:0], allowed[:0]
    lp = BlockLP(A=A, S=S, W=W, allowed=allowed, g=np.ones(len(A)), c_z=1.0)
    sol = block_lp.solve(lp, "ipm")
    assert sol.ok
    if len(A):
        assert sol.z == pytest.approx(reference(lp).z, abs=1e-7)
        check_primal(lp, sol, tol=1e-6)


# ---------------------------------------------------------------------------
# Do demands fit? (block_exact.fits: Dantzig–Wolfe over the capacity rows)
# ---------------------------------------------------------------------------


def min_load_ratio(A, S, W, demand) -> float:
    """u* = min max_j load_j / W_j over X meeting the demands (time rows ≤ 1),
    by HiGHS on the whole program: the independent answer fits must agree with."""
    from scipy.optimize import linprog

    n, k = A.shape
    nv = n * k + 1  # X row-major, then u
    rows, cols, vals, b = [], [], [], []
    for m in range(n):  # -Σ_j A X ≤ -d ; Σ_j X ≤ 1
        for j in range(k):
            rows += [2 * m, 2 * m + 1]
            cols += [m * k + j, m * k + j]
            vals += [-A[m, j], 1.0]
        b += [-demand[m], 1.0]
    for j in range(k):  # Σ_m S X - u W ≤ 0
        rows += [2 * n + j] * (n + 1)
        cols += [m * k + j for m in range(n)] + [n * k]
        vals += list(S) + [-W[j]]
        b.append(0.0)
    import scipy.sparse as sp

    M = sp.csr_matrix((vals, (rows, cols)), shape=(2 * n + k, nv))
    bounds = [(0, None if A[m, j] > 0 else 0) for m in range(n) for j in range(k)] + [(0, None)]
    c = np.zeros(nv)
    c[-1] = 1.0
    res = linprog(c, A_ub=M, b_ub=np.array(b), bounds=bounds, method="highs")
    assert res.status == 0
    return float(res.x[-1])


@pytest.mark.parametrize("seed", range(30))
def test_fits_decides_as_the_whole_lp(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(20, 120)), int(rng.integers(2, 6))
    A = rng.uniform(0.2, 3.0, (n, k)) * rng.uniform(0.5, 2.0, k)
    A[rng.random((n, k)) < 0.2] = 0.0
    A[np.arange(n), rng.integers(0, k, n)] = rng.uniform(0.5, 3.0, n)
    S = rng.choice([1.0, 2.0, 4.0], n, p=[0.7, 0.2, 0.1])
    W = rng.uniform(0.5, 1.5, k) * S.sum() / k
    best = A.max(axis=1)
    base = best * rng.uniform(0.05, 1.0, n)
    base[rng.random(n) < 0.1] = 0.0  # jobs that need nothing
    # Scale the demands so that u* lands near 1 (within 1 % half of the time),
    # some jobs at their largest share (one type, all of the time).
    u0 = min_load_ratio(A, S, W, np.minimum(base, best))
    demand = np.minimum(base * rng.choice([rng.uniform(0.99, 1.01), rng.uniform(0.5, 1.5)]) / max(u0, 1e-9), best)
    at_max = rng.random(n) < 0.05
    demand[at_max] = best[at_max]
    u = min_load_ratio(A, S, W, demand)
    X, price = block_exact.fits(A, S, W, demand, None)
    if X is not None:
        assert u < 1 + 1e-7
        assert np.all(X >= 0) and np.all(X[A == 0] == 0)
        assert np.all(X.sum(axis=1) <= 1 + 1e-9)
        assert np.all(S @ X <= W * (1 + 1e-9))
        assert np.all((A * X).sum(axis=1) >= demand * (1 - 1e-9))
    else:
        assert u > 1 - 1e-6  # None: does not fit (or undecided right at u* = 1)
    assert price is None or (np.all(price >= 0) and np.isfinite(price).all())


@pytest.mark.parametrize("seed", range(4))
def test_sampled_crossover_reaches_the_whole_programs_optimum(seed, monkeypatch):
    """Very large congested programs take their prices from a random quarter of the
    jobs (block_lp._sampled_crossover); lowered here to 3,000-job programs. The
    vertex must be the whole program's optimum (CLARABEL, and its own certificate)."""
    from optsched.bench.instances import CONGESTED, rigid
    from optsched.formulations import max_min_fairness

    monkeypatch.setattr(block_lp, "SAMPLE_ENTRIES", 5000)
    monkeypatch.setattr(block_exact, "level_search", lambda *args: None)  # (it comes first)
    lp = max_min_fairness.build(rigid(3000, 3 + seed % 3, seed, gpus_per_job=CONGESTED)).lp
    sol = block_lp.solve(lp)
    ref = reference(lp)
    assert sol.ok and sol.z == pytest.approx(ref.z, rel=1e-6)
    check_primal(lp, sol)
    if sol.backend == "sample+crossover":
        assert certificate_gap(lp, sol) < 1e-6


def test_sampled_crossover_is_used(monkeypatch):
    from optsched.bench.instances import CONGESTED, rigid
    from optsched.formulations import max_min_fairness

    monkeypatch.setattr(block_lp, "SAMPLE_ENTRIES", 5000)
    monkeypatch.setattr(block_exact, "level_search", lambda *args: None)  # (it comes first)
    used = [block_lp.solve(max_min_fairness.build(rigid(4000, 3, s, gpus_per_job=CONGESTED)).lp).backend
            for s in range(3)]
    assert "sample+crossover" in used
