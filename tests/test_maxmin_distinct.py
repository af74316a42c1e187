"""The level search of the max-min family (solvers/block_exact.level_search:
cutting planes over the k capacity prices, a Newton step on the level, the
exact crossover's certificate) on programs whose rows are all distinct:
every answer is checked against an independent solve of the whole program
(HiGHS simplex) and against its own dual certificate, on random instances
congested and not, 3 and 5 types, weights, types a job cannot use, frozen
rows (water filling) and unequal z coefficients (makespan)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from optsched.solvers import block_exact, block_lp
from optsched.solvers.block_lp import BlockLP
from test_block_exact import certificate_gap, check_primal, freeze


def independent(lp: BlockLP):
    sol = block_lp._matrix_solve(lp, "highs-simplex", 60.0)
    assert sol.ok
    return sol


def distinct_lp(rng: np.random.Generator, n: int, k: int, gpus_per_job: float, frozen: float = 0.0,
                makespan: bool = False) -> BlockLP:
    """Distinct random rows (max-min's normalized throughputs, weights 1 or 2),
    some types forbidden per job; ``frozen``: a fraction of rows at a fixed level
    (g = 0, l > 0) below a feasible point's share; ``makespan``: g in (0, 1]."""
    T = rng.uniform(0.5, 20.0, (n, k)) * rng.uniform(0.3, 2.4, k)
    allowed = rng.random((n, k)) > 0.1
    allowed[np.arange(n), rng.integers(0, k, n)] = True
    S = rng.choice([1.0, 2.0, 4.0, 8.0], n, p=[0.7, 0.1, 0.15, 0.05])
    W = np.full(k, max(2.0, n * gpus_per_job / k)) * rng.uniform(0.7, 1.3, k)
    w = rng.choice([1.0, 2.0], n, p=[0.8, 0.2])
    Tm = np.where(allowed, T, 0.0)
    A = Tm * (S / (w * (Tm @ W) / W.sum()))[:, None]
    g = rng.uniform(0.05, 1.0, n) if makespan else np.ones(n)
    lower = np.zeros(n)
    if frozen:
        freeze(rng, A, S, W, allowed, g, lower, frozen)
    return BlockLP(A=A, S=S, W=W, allowed=allowed, c_z=1.0, g=g, lower=lower)


@pytest.mark.parametrize("seed", range(40))
def test_level_search_matches_an_independent_solve_and_proves_itself(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(50, 700)), int(rng.choice([3, 5, 1, 2, 4], p=[0.35, 0.35, 0.1, 0.1, 0.1]))
    gpus = float(rng.choice([0.05, 0.15, 0.3, 2.0]))
    lp = distinct_lp(rng, n, k, gpus, frozen=float(rng.choice([0.0, 0.0, 0.3])), makespan=bool(rng.random() < 0.25))
    ref = independent(lp)
    sol = block_exact.level_search(lp, time.perf_counter() + 60)
    congested = np.any(ref.price > 1e-9) and not np.any(lp.g == 0)
    if sol is None:
        assert not congested, "the level search declined a congested max-min program"
        return
    assert sol.backend == "prices+crossover"
    check_primal(lp, sol, tol=1e-7)
    assert certificate_gap(lp, sol) <= 1e-7
    assert sol.z == pytest.approx(ref.z, rel=1e-7, abs=1e-10)


@pytest.mark.parametrize("k", [3, 5])
def test_level_is_found_without_the_crossover(k):
    """The level search alone (before any crossover) lands on the optimal level:
    u(z) = 1 to ~1e-9, on congested programs where no time row binds."""
    rng = np.random.default_rng(100 + k)
    lp = distinct_lp(rng, 800, k, 0.15)
    d = block_exact.program_data(lp)
    zcap = float(np.min(d.A.max(axis=1) / d.g))
    z, price = block_exact._level(d.A, d, zcap)
    ref = independent(lp)
    assert z == pytest.approx(ref.z, rel=1e-8)
    assert np.all(price >= 0) and np.any(price > 0)


def test_least_load_is_the_lp_optimum():
    """u(d) = min_X max_j load_j / W_j over X meeting the demands, against the LP
    written out for HiGHS; with time rows that bind for some jobs (demands near their largest share)."""
    import scipy.sparse as sp

    from optsched.solvers.lp import solve_lp

    rng = np.random.default_rng(7)
    n, k = 120, 3
    lp = distinct_lp(rng, n, k, 0.3)
    A = np.where(lp.allowed, lp.A, 0.0)
    demand = A.max(axis=1) * rng.uniform(0.05, 0.98, n)
    u, q, _, _ = block_exact._least_load(A, lp.S, lp.W, np.ones(n), demand, None)
    # min u s.t. A_m·X_m ≥ d_m, Σ_j X_mj ≤ 1, Σ_m S_m X_mj − u W_j ≤ 0.
    nv = n * k + 1
    rows, cols, vals = [], [], []
    for m in range(n):
        for j in range(k):
            c = m * k + j
            rows += [m, n + m, 2 * n + j]
            cols += [c, c, c]
            vals += [-A[m, j], 1.0, lp.S[m]]
    rows += list(2 * n + np.arange(k))
    cols += [nv - 1] * k
    vals += list(-lp.W)
    M = sp.csc_matrix((vals, (rows, cols)), shape=(2 * n + k, nv))
    b = np.concatenate([-demand, np.ones(n), np.zeros(k)])
    c = np.zeros(nv)
    c[-1] = 1.0
    ub = np.r_[np.where(lp.allowed.reshape(-1), np.inf, 0.0), np.inf]
    sol = solve_lp(c, M, b, lb=0.0, ub=ub, backend="highs-simplex")
    assert sol.ok
    assert u == pytest.approx(sol.value, rel=1e-8)
    assert q.sum() == pytest.approx(1.0) and np.all(q >= 0)


@pytest.mark.parametrize("kind,k", [("random", 3), ("random", 5), ("gavel", 3), ("gavel", 5)])
def test_policy_takes_the_level_search_on_distinct_congested_rows(kind, k):
    from optsched.bench import distinct_rows
    from optsched.formulations import max_min_fairness
    from optsched.policy import solve_instance

    if kind == "gavel" and not distinct_rows.table_path().is_file():
        pytest.skip("Gavel's throughput table not in OPTSCHED_PEER_DATA")
    inst = distinct_rows.instance(kind, 1100, k, 3)
    assert distinct_rows.distinct(inst)
    alloc = solve_instance(inst, "max_min_fairness")
    assert alloc.status == "optimal" and alloc.explanation["backend"] == "prices+crossover"
    assert distinct_rows.binds(alloc.explanation["gpu_price"])
    ref = independent(max_min_fairness.build(inst).lp)
    assert alloc.objective == pytest.approx(ref.z, rel=1e-7)


@pytest.mark.parametrize("seed", range(12))
def test_auto_tries_the_exact_shortcuts_before_clarabel(seed):
    """Programs between WARM_ENTRIES and AUTO_IPM_ENTRIES entries (1,000 distinct jobs
    × 3 types went to CLARABEL: 0.06 s where the shortcuts take 0.003 s): ``auto``
    runs the uncongested test and the level search first. Each answer against an
    independent solve and its own certificate, congested and not."""
    rng = np.random.default_rng(500 + seed)
    k = int(rng.choice([3, 5, 2]))
    n = int(rng.integers(block_lp.WARM_ENTRIES // k + 1, block_lp.AUTO_IPM_ENTRIES // k + 1))
    lp = distinct_lp(rng, n, k, float(rng.choice([0.15, 0.3, 0.5, 2.0])), makespan=bool(rng.random() < 0.25))
    assert block_lp._chosen(lp, "auto") == "clarabel" and block_lp.exact_first(lp)
    sol = block_lp.solve(lp, "auto")
    ref = independent(lp)
    assert sol.ok and sol.backend in ("uncongested", "prices+crossover")
    check_primal(lp, sol, tol=1e-7)
    assert certificate_gap(lp, sol) <= 1e-7
    assert sol.z == pytest.approx(ref.z, rel=1e-7, abs=1e-10)
    assert not block_lp.exact_first(lp, interior=True)  # water filling's rounds keep interior duals
    small = BlockLP(A=lp.A[:100], S=lp.S[:100], W=lp.W, allowed=lp.allowed[:100], c_z=1.0, g=lp.g[:100])
    assert not block_lp.exact_first(small)  # small programs keep CLARABEL's interior point


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_uncongested_certifies_a_fit_the_greedy_misses(seed):
    """Capacity does not bind at z_cap, but every job on one type does not fit:
    the uncongested test asks the exact fit (``fits``) instead of declining."""
    from optsched.bench import instances
    from optsched.formulations import max_min_fairness

    lp = max_min_fairness.build(instances.rigid(100, 3, seed, gpus_per_job=0.5)).lp
    d = block_exact.program_data(lp)
    zcap = float(np.min(d.A.max(axis=1) / d.g))
    assert block_exact._fit(d, d.g * zcap) is None  # the greedy alone would decline
    sol = block_exact.uncongested(lp, d)
    ref = independent(lp)
    assert sol is not None and sol.z == pytest.approx(zcap) == pytest.approx(ref.z, rel=1e-9)
    check_primal(lp, sol, tol=1e-7)
    assert certificate_gap(lp, sol) <= 1e-7


@pytest.mark.parametrize("seed", range(24))
def test_priced_root_bounds_the_level_where_time_rows_bind(seed):
    """``_priced_root`` (the level where the lower bound at fixed prices reaches 1) is at or
    above the optimal level at any prices, and on it at the optimum's own prices; the level
    search that uses it matches an independent solve and proves itself, on programs with
    many jobs at their largest share: random rows at 0.3-0.8 GPUs per job, and Gavel's rows
    at 0.4-0.7 (time rows bind at the level while capacity does)."""
    from optsched.bench import distinct_rows
    from optsched.formulations import max_min_fairness

    rng = np.random.default_rng(1300 + seed)
    n, k = int(rng.integers(80, 400)), int(rng.choice([2, 3, 4, 5]))
    if seed % 2:
        if not distinct_rows.table_path().is_file():
            pytest.skip("Gavel's throughput table not in OPTSCHED_PEER_DATA")
        inst = distinct_rows.instance("gavel", n, k, 1300 + seed, float(rng.choice([0.4, 0.5, 0.7])))
        lp = max_min_fairness.build(inst).lp
    else:
        lp = distinct_lp(rng, n, k, float(rng.choice([0.3, 0.5, 0.8])), makespan=bool(rng.random() < 0.3))
    ref = independent(lp)
    sol = block_exact.level_search(lp, time.perf_counter() + 60)
    if not np.any(ref.price > 1e-9):
        assert sol is None or sol.z == pytest.approx(ref.z, rel=1e-7)
        return
    assert sol is not None and sol.backend == "prices+crossover"
    check_primal(lp, sol, tol=1e-7)
    assert certificate_gap(lp, sol) <= 1e-7
    assert sol.z == pytest.approx(ref.z, rel=1e-7, abs=1e-10)
    d = block_exact.program_data(lp)
    best = d.A.max(axis=1)
    zcap = float(np.min((best - d.l) / d.g))
    for q in [rng.dirichlet(np.ones(k)) for _ in range(4)] + [ref.price * lp.W / (ref.price @ lp.W)]:
        start = float(rng.uniform(ref.z, zcap))
        root = block_exact._priced_root(d.A, d, q, start, zcap)
        assert ref.z * (1 - 1e-9) <= root <= start
    q = ref.price * lp.W / (ref.price @ lp.W)
    assert block_exact._priced_root(d.A, d, q, ref.z * 1.001, zcap) == pytest.approx(ref.z, rel=1e-7)


def test_folded_mixes_settle_and_prove_themselves():
    """The crossover with jobs near a full time row folded into the capacity rows (two
    types, time row full: linear in z) from the level search's prices: on Gavel's rows at
    0.4-0.7 GPUs per job and random rows at 0.3-0.8, where many jobs sit at their largest
    share, each answer it gives matches an independent solve and its own certificate, and
    it settles (without unfolding) on most of them, with folded jobs in each."""
    from optsched.bench import distinct_rows
    from optsched.formulations import max_min_fairness

    gavel = distinct_rows.table_path().is_file()
    settled = tried = 0
    for seed in range(20):
        rng = np.random.default_rng(1700 + seed)
        n, k = int(rng.integers(100, 400)), int(rng.choice([2, 3, 4, 5]))
        if gavel and seed % 4:
            inst = distinct_rows.instance("gavel", n, k, 1700 + seed, float(rng.choice([0.4, 0.5, 0.7])))
            lp = max_min_fairness.build(inst).lp
        else:
            lp = distinct_lp(rng, n, k, float(rng.choice([0.3, 0.5, 0.8])))
        d = block_exact.program_data(lp)
        best = d.A.max(axis=1)
        found = block_exact._level(d.A, d, float(np.min((best - d.l) / d.g)))
        ref = independent(lp)
        if found is None or not np.any(ref.price > 1e-9):
            continue
        z, price = found
        cost = np.where(d.A > 0, d.S[:, None] * price[None, :] / np.where(d.A > 0, d.A, 1.0), np.inf)
        a1 = d.A[np.arange(len(d.A)), np.argmin(cost, axis=1)]
        _, lo, _ = block_exact._full_columns(d, d.g * z + d.l >= a1 * (1 - 1e-6) - 1e-12, price, z)
        if not np.any(lo >= 0):
            continue
        tried += 1
        sol = block_exact._crossover_at(lp, d, price, z, 1e-6, time.perf_counter() + 60, block_exact.LEVEL_FLOOD, True)
        if sol is None:
            continue
        settled += 1
        check_primal(lp, sol, tol=1e-7)
        assert certificate_gap(lp, sol) <= 1e-7
        assert sol.z == pytest.approx(ref.z, rel=1e-7, abs=1e-10)
    assert tried >= 8 and settled >= tried // 2, (tried, settled)


@pytest.mark.parametrize("seed", range(16))
def test_uncongested_declines_only_where_capacity_binds(seed):
    """The uncongested test's priced decline (``_priced_demand`` above price·W) is a
    lower bound on what any X meeting the demands costs (checked on the independent
    optimum's X at random prices), and it declines exactly where the independent
    solve's level is below z_cap; otherwise its answer matches and proves itself.
    Many jobs near their largest share (0.3-2 GPUs per job), frozen rows, makespan."""
    rng = np.random.default_rng(900 + seed)
    n, k = int(rng.integers(60, 400)), int(rng.choice([1, 2, 3, 5]))
    lp = distinct_lp(rng, n, k, float(rng.choice([0.1, 0.2, 0.3, 0.5, 2.0])),
                     frozen=float(rng.choice([0.0, 0.3])), makespan=bool(rng.random() < 0.3))
    ref = independent(lp)
    d = block_exact.program_data(lp)
    X = ref.X[d.index]
    for _ in range(5):
        price = rng.uniform(0.0, 1.0, k) * rng.choice([0.0, 1.0], k, p=[0.2, 0.8])
        bound = block_exact._priced_demand(d, d.g * ref.z + d.l, price)
        assert bound <= (d.S[:, None] * X * price[None, :]).sum() * (1 + 1e-9) + 1e-12
    best = d.A.max(axis=1)
    live = d.g > 0
    zcap = float(np.min((best[live] - d.l[live]) / d.g[live]))
    sol = block_exact.uncongested(lp, d)
    if sol is None:
        assert ref.z < zcap * (1 - 1e-9) or np.any(d.l[~live] > best[~live]), "declined an uncongested program"
        return
    assert sol.z == pytest.approx(ref.z, rel=1e-9)
    check_primal(lp, sol, tol=1e-7)
    assert certificate_gap(lp, sol) <= 1e-7


@pytest.mark.parametrize("n", [1000, 1100])
def test_a_cold_max_min_solve_loads_no_scipy(n):
    """The exact path of a distinct-row program (level search, crossover), whether
    ``auto`` reaches it before CLARABEL (1,000 × 3) or on the IPM path (1,100 × 3),
    needs HiGHS only: scipy.sparse (~0.3 s cold) stays unloaded, and what is
    imported is reported as import_seconds, not solve time."""
    code = ("import json, sys\n"
            "from optsched.bench import distinct_rows\n"
            "from optsched.policy import solve_instance\n"
            f"a = solve_instance(distinct_rows.instance('random', {n}, 3, 0), 'max_min_fairness')\n"
            "print(json.dumps({'scipy': sorted(m for m in sys.modules if m.startswith('scipy')),"
            " 'backend': a.explanation['backend'], 'imports': a.import_seconds}))\n")
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout.strip().splitlines()[-1])
    assert out["backend"] == "prices+crossover"
    assert out["scipy"] == []
    assert out["imports"] > 0


def test_distinct_row_instances():
    from optsched.bench import distinct_rows
    from optsched.model import OptschedError

    inst = distinct_rows.instance("random", 300, 5, 1)
    assert distinct_rows.distinct(inst) and inst.k == 5
    assert distinct_rows.binds({"a": 0.0, "b": 1.5}) and not distinct_rows.binds({"a": 0.0})
    with pytest.raises(OptschedError, match="kind"):
        distinct_rows.instance("other", 10, 3, 0)
    if distinct_rows.table_path().is_file():
        g = distinct_rows.instance("gavel", 500, 5, 2)
        assert distinct_rows.distinct(g) and g.gpu_types == ("k80", "p100", "v100", "a100", "h100")
        assert np.all(g.throughput[:, 2] > 0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_water_filling_on_congested_distinct_rows_takes_the_level_search(seed, monkeypatch):
    """Congested distinct rows: the water filling's LP round (warm from the
    event test's prices) takes the level search's certified vertex, not the
    IPM (0.05 s at 1,000 × 3); its duals freeze the stuck jobs, and the shares
    are the cold rounds' (interior duals) leximin shares, the first level the
    independent max-min optimum."""
    import math

    from optsched.bench import distinct_rows
    from optsched.formulations import hierarchical, max_min_fairness, water_filling
    from optsched.formulations.max_min_fairness import normalized_throughput

    inst = distinct_rows.instance("random", 400 + 50 * seed, 3, seed)
    backends = []
    solve = block_lp.solve

    def recorded(lp, *a, **kw):
        sol = solve(lp, *a, **kw)
        backends.append(sol.backend)
        return sol

    monkeypatch.setattr(block_lp, "solve", recorded)
    for module in (water_filling, hierarchical):
        backends.clear()
        warm = module.allocate(inst, warm_levels=True, time_limit=math.inf)
        assert "prices+crossover" in backends and "ipm" not in backends and "clarabel" not in backends
        cold = module.allocate(inst, warm_levels=False, time_limit=math.inf)
        assert warm.status == cold.status == "optimal"
        X = warm.fractions
        assert np.all(X.sum(axis=1) <= 1 + 1e-7)
        assert np.all(inst.scale_factor @ X <= inst.capacity * (1 + 1e-7) + 1e-9)
        A0 = normalized_throughput(inst)
        np.testing.assert_allclose((A0 * X).sum(axis=1), (A0 * cold.fractions).sum(axis=1), rtol=1e-5, atol=1e-7)
        if module is water_filling:  # its first level is max-min's optimum
            ref = independent(max_min_fairness.build(inst).lp)
            assert warm.objective == pytest.approx(ref.z, rel=1e-6)


def test_identical_rows_of_distinct_rows_are_every_row():
    """No two projections alike: every row is its own class (the early exit), and
    two equal rows among distinct ones still make one class."""
    rng = np.random.default_rng(3)
    lp = distinct_lp(rng, 300, 3, 0.15)
    first, inverse, counts = block_lp.identical_rows(lp)
    assert len(counts) == 300 and np.array_equal(lp.A[first][inverse], lp.A)
    A = lp.A.copy()
    A[7] = A[100]
    allowed = lp.allowed.copy()
    allowed[7] = allowed[100]
    S = lp.S.copy()
    S[7] = S[100]
    twin = BlockLP(A=A, S=S, W=lp.W, allowed=allowed, c_z=1.0, g=lp.g, lower=lp.lower)
    first, inverse, counts = block_lp.identical_rows(twin)
    assert len(counts) == 299 and inverse[7] == inverse[100] and np.array_equal(A[first][inverse], A)


def degenerate_lp(rng: np.random.Generator, n: int, k: int, gpus_per_job: float) -> BlockLP:
    """distinct_lp with ties made on purpose: copies of rows (equal jobs the level search
    sees apart: it is called without the class merge), rows equal in ratio on every type
    (a tie between all types at prices ∝ S/W), rows tied between two types, and a share
    of jobs whose largest share is near the others' level (time rows bind)."""
    lp = distinct_lp(rng, n, k, gpus_per_job)
    A, S, allowed = lp.A.copy(), lp.S.copy(), lp.allowed.copy()
    m = rng.permutation(n)
    copies, flat, pair, capped = np.array_split(m[: n // 2], 4)
    src = rng.integers(0, n, len(copies))
    A[copies], S[copies], allowed[copies] = A[src], S[src], allowed[src]
    A[flat] = A[flat].max(axis=1, keepdims=True) * (lp.W / lp.W.mean())[None, :]
    allowed[flat] = True
    if k > 1:
        A[pair, 1] = A[pair, 0] * lp.W[1] / lp.W[0]
        allowed[pair, :2] = True
    A[capped] *= rng.uniform(0.05, 0.3, (len(capped), 1))
    return BlockLP(A=np.where(allowed, A, 0.0), S=S, W=lp.W, allowed=allowed, c_z=1.0, g=lp.g, lower=lp.lower)


@pytest.mark.parametrize("seed", range(30))
def test_level_search_on_degenerate_rows(seed):
    """Ties between types, equal jobs, jobs at their largest share, k = 1..5: the level
    search (adaptive first prices, the master's point as the end test, the square master)
    against an independent solve and its own certificate."""
    rng = np.random.default_rng(900 + seed)
    n, k = int(rng.integers(40, 600)), int(rng.integers(1, 6))
    lp = degenerate_lp(rng, n, k, float(rng.choice([0.05, 0.15, 0.5])))
    ref = independent(lp)
    sol = block_exact.level_search(lp, time.perf_counter() + 60)
    if sol is None:
        assert not np.any(ref.price > 1e-9), "the level search declined a congested program"
        return
    check_primal(lp, sol, tol=1e-7)
    assert certificate_gap(lp, sol) <= 1e-7
    assert sol.z == pytest.approx(ref.z, rel=1e-7, abs=1e-10)


@pytest.mark.parametrize("seed", range(40))
def test_square_master_is_the_lp_masters_optimum(seed, monkeypatch):
    """The crossover's master as one square system (_square_master): whenever it returns a
    vertex, that vertex is feasible, its duals are, and its level is the HiGHS master's on
    the same explicit jobs; it declines (None) rather than return a vertex that is not
    optimal. Masters from random explicit sets near a tie (k = 1..5, frozen rows,
    makespan's g), not only the level search's."""
    rng = np.random.default_rng(1300 + seed)
    n, k = int(rng.integers(30, 400)), int(rng.integers(1, 6))
    lp = distinct_lp(rng, n, k, float(rng.choice([0.05, 0.15])), frozen=float(rng.choice([0.0, 0.2])),
                     makespan=bool(rng.random() < 0.3))
    d = block_exact.program_data(lp)
    ref = independent(lp)
    p = np.maximum(ref.price, 0.0) * rng.uniform(1 - 1e-3, 1 + 1e-3, k)  # prices near the optimum
    cost = np.where(d.A > 0, d.S[:, None] * p[None, :] / np.where(d.A > 0, d.A, 1.0), np.inf)
    single = np.argmin(cost, axis=1)
    order = np.argsort(cost, axis=1)
    explicit = np.zeros(len(d.A), dtype=bool)
    cand = np.zeros(d.A.shape, dtype=bool)
    if k > 1:
        tie = np.take_along_axis(cost, order[:, 1:2], axis=1)[:, 0] / cost[np.arange(len(d.A)), single] - 1
        explicit[np.argsort(tie)[: k - 1]] = True  # the k − 1 jobs nearest a tie
        rows = np.flatnonzero(explicit)
        cand[rows, order[rows, 0]] = cand[rows, order[rows, 1]] = True
        cand &= d.A > 0
    square = block_exact._square_master
    calls = []
    monkeypatch.setattr(block_exact, "_square_master", lambda *a: calls.append(square(*a)) or calls[-1])
    fast = block_exact._master(d, single, explicit.copy(), cand.copy())
    monkeypatch.setattr(block_exact, "_square_master", lambda *a: None)
    lp_master = block_exact._master(d, single, explicit.copy(), cand.copy())
    if not calls or fast is None or calls[-1] is None:
        return  # not square, or declined: the HiGHS master solved it (the same call)
    assert lp_master is not None
    assert fast.z == pytest.approx(lp_master.z, rel=1e-9)
    assert np.all(fast.price >= 0) and np.all(fast.lam >= 0) and np.all(fast.X >= 0)
    assert np.all(fast.X.sum(axis=1) <= 1 + 1e-12)
    ex = np.flatnonzero(explicit)
    # Dual feasibility on the master's columns: λ_m A_mj ≤ S_m p_j, with equality where X > 0.
    gain = fast.lam[:, None] * d.A[ex]
    price = d.S[ex, None] * fast.price[None, :]
    assert np.all(gain[cand[ex]] <= price[cand[ex]] * (1 + 1e-9) + 1e-12)
    used = fast.X > 1e-12
    np.testing.assert_allclose(gain[used], price[used], rtol=1e-9, atol=1e-12)


def test_square_master_is_taken_on_the_level_search_path(monkeypatch):
    """After the level search, the crossover's master is square on congested distinct rows
    (k − 1 jobs split between two types): no HiGHS call for it."""
    from optsched.solvers import lp as lp_module

    rng = np.random.default_rng(11)
    lp = distinct_lp(rng, 600, 3, 0.15)
    called = []
    solve_lp = lp_module.solve_lp
    monkeypatch.setattr(lp_module, "solve_lp", lambda *a, **kw: called.append(1) or solve_lp(*a, **kw))
    sol = block_exact.level_search(lp, time.perf_counter() + 60)
    assert sol is not None and sol.backend == "prices+crossover"
    assert called == []
    ref = independent(lp)
    assert sol.z == pytest.approx(ref.z, rel=1e-9)
    assert certificate_gap(lp, sol) <= 1e-9


@pytest.mark.parametrize("seed", range(6))
def test_cheapest_is_each_jobs_two_row_lp(seed):
    """``cheapest`` (every (slow, fast) type pair at once): each job's cheapest way to meet
    its demand alone, against its two-row LP solved by HiGHS; jobs no type serves alone,
    forbidden types, ties between types and prices of 0, k = 1..5."""
    from optsched.solvers.lp import solve_lp

    rng = np.random.default_rng(40 + seed)
    k = 1 + seed % 5
    n = 60
    a = rng.uniform(0.2, 3.0, (n, k)) * (rng.random((n, k)) > 0.2)
    a[: n // 4] = np.round(a[: n // 4], 1)  # ties
    a[np.arange(n), rng.integers(0, k, n)] = rng.uniform(1.0, 3.0, n)  # every job served by one type at least
    S = rng.choice([1.0, 2.0, 4.0], n)
    price = np.round(rng.uniform(0.0, 2.0, k), 1) * (rng.random(k) > 0.15)
    X, cost = block_exact.cheapest(a, S, price)
    assert np.all(X >= 0) and np.all(X.sum(axis=1) <= 1 + 1e-12) and np.all(X[a == 0] == 0)
    assert np.all((a * X).sum(axis=1) >= 1 - 1e-12)
    np.testing.assert_allclose((X * price[None, :]).sum(axis=1) * S, cost, rtol=1e-12, atol=1e-15)
    for m in range(n):
        c = S[m] * price
        M = np.array([-a[m], np.ones(k)])
        sol = solve_lp(c, M, np.array([-1.0, 1.0]), lb=0.0, ub=np.where(a[m] > 0, np.inf, 0.0),
                       backend="highs-simplex")
        assert sol.ok
        assert cost[m] == pytest.approx(sol.value, rel=1e-9, abs=1e-12)
