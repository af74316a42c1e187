"""Exact shortcuts for the max-min family of block LPs (objective z alone).

Max-min fairness, its water-filling and hierarchical levels, makespan and the
finish-time-fairness oracle maximize z with no objective on X. Two facts of
that family let most of an interior-point solve be skipped, each ending in a
certificate, never in a guess:

* **Uncongested** (`uncongested`): z can never exceed z_cap, the level at
  which the first job runs all of the time on its best type. If every job's
  demand at z_cap fits the capacities (a greedy assignment, rebalanced between
  types), z_cap is optimal; the dual that proves it prices the bottleneck
  job's share row only (capacities at price 0).
* **Crossover** (`crossover`): from an interior iterate with a small gap, the
  prices p and level z are nearly optimal. A job that runs on one type at an
  optimum needs no variable of its own: its share row is tight, so X[m, j] =
  (g_m z + l_m) / A[m, j], a linear function of z that folds into the k
  capacity rows. Only jobs near a tie between types, or whose time row may
  bind, keep rows: a small *master* LP (HiGHS simplex). Its duals give every
  job's share multiplier, and every column's reduced cost is checked; columns
  that price out are added (column generation). No column left means the
  master's duals are feasible for the full program: the vertex is optimal.

Both return None when their assumptions fail (the caller keeps its
interior-point method). The duals are a vertex's, not strictly complementary:
a positive share multiplier still proves a job cannot rise above its level,
but callers that need *every* such job (water filling) ask for interior duals.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

PRICING_TOL = 1e-9  # reduced costs above this (relative to the terms compared) price a column in
MAX_ROUNDS = 8  # column-generation rounds before giving the problem back to the IPM
FLOOD = 0.15  # give up when more than this fraction of the jobs would need rows of their own


def applicable(lp) -> bool:
    if lp.pairs is not None or not lp.has_z or lp.c_z <= 0:
        return False
    if lp.C is not None and np.any(lp.C[lp.allowed] != 0):
        return False
    rows = lp.rows()
    lower = np.zeros(lp.n) if lp.lower is None else np.asarray(lp.lower, dtype=float)
    return bool(np.all(np.asarray(lp.g)[rows] >= 0) and np.all(lower[rows] >= 0))


@dataclass
class _Data:
    """The jobs that need capacity (a share row with g > 0 or l > 0); the others
    run at X = 0. A is zero where a job cannot run."""

    A: np.ndarray  # (n, k)
    S: np.ndarray
    g: np.ndarray
    l: np.ndarray
    W: np.ndarray
    index: np.ndarray  # rows of the original program

    @classmethod
    def of(cls, lp) -> "_Data | None":
        if not applicable(lp):
            return None
        rows = lp.rows()
        g = np.where(rows, np.asarray(lp.g, dtype=float), 0.0)
        l = np.zeros(lp.n) if lp.lower is None else np.where(rows, np.asarray(lp.lower, dtype=float), 0.0)
        active = rows & ((g > 0) | (l > 0))
        A = np.where(lp.allowed & (lp.A > 0), lp.A, 0.0)[active]
        if not len(A) or not np.any(g[active] > 0) or not np.all(A.max(axis=1) > 0):
            return None  # z unbounded, or a job that must get a share but can run nowhere
        return cls(A, np.asarray(lp.S, dtype=float)[active], g[active], l[active], np.asarray(lp.W, dtype=float),
                   np.flatnonzero(active))

    def solution(self, lp, z: float, X: np.ndarray, lam: np.ndarray, price: np.ndarray, backend: str, t0: float, rounds=0):
        from optsched.solvers.block_lp import BlockSolution

        Xfull = np.zeros((lp.n, lp.k))
        Xfull[self.index] = X
        share_dual = np.zeros(lp.n)
        share_dual[self.index] = lam * lp.c_z
        return BlockSolution(True, "optimal", Xfull, float(z), None, float(lp.c_z * z), share_dual,
                             np.asarray(price, dtype=float) * lp.c_z, time.perf_counter() - t0, backend, rounds)


# ---------------------------------------------------------------------------
# Uncongested: the first job to run out of time sets z
# ---------------------------------------------------------------------------


def uncongested(lp):
    """The optimum when capacity does not bind at z_cap, else None."""
    t0 = time.perf_counter()
    d = _Data.of(lp)
    if d is None:
        return None
    best = d.A.max(axis=1)  # the most share a job can get: all of its time on its best type
    live = d.g > 0
    if np.any(d.l[~live] > best[~live]):
        return None  # a frozen row no single type can carry alone: the general method decides
    cap = np.where(live, (best - d.l) / np.where(live, d.g, 1.0), np.inf)
    z = float(cap.min())
    if not np.isfinite(z) or z < 0:
        return None
    demand = d.g * z + d.l
    X = _fit(d, demand)
    if X is None:
        return None
    lam = np.zeros(len(d.A))
    bottleneck = int(np.argmin(cap))
    lam[bottleneck] = 1.0 / d.g[bottleneck]  # Σ g λ = 1; its time row carries the price, capacities none
    return d.solution(lp, z, X, lam, np.zeros(lp.k), "uncongested", t0)


def _fit(d: _Data, demand: np.ndarray) -> np.ndarray | None:
    """X meeting every demand on one type per job within the capacities, or None.
    Each job starts on the type where it needs the least GPU time; overloaded
    types then hand jobs to types with room, cheapest extra GPU time first."""
    n, k = d.A.shape
    rows = np.arange(n)
    with np.errstate(divide="ignore"):
        need = np.where(d.A > 0, demand[:, None] / np.where(d.A > 0, d.A, 1.0), np.inf)  # time on each type
    need[need > 1.0 + 1e-12] = np.inf  # more than all of its time
    use = d.S[:, None] * need  # GPU time on each type
    on = np.argmin(use, axis=1)
    if not np.all(np.isfinite(use[rows, on])):
        return None
    for _ in range(2 * k):
        load = np.bincount(on, weights=use[rows, on], minlength=k)
        over = load - d.W
        if np.all(over <= 1e-9 * np.maximum(d.W, 1.0)):
            X = np.zeros((n, k))
            X[rows, on] = np.minimum(need[rows, on], 1.0)
            return X
        j = int(np.argmax(over / np.maximum(d.W, 1e-300)))
        moved = False
        for t in np.argsort(load - d.W):  # types with the most room first
            room = d.W[t] - load[t]
            if t == j or room <= 0 or over[j] <= 0:
                continue
            mine = np.flatnonzero((on == j) & np.isfinite(use[:, t]))
            if not len(mine):
                continue
            ratio = use[mine, t] / use[mine, j]  # GPU time on t per GPU time freed on j
            order = mine[np.argsort(ratio, kind="stable")]
            extra = np.cumsum(use[order, t])
            freed = np.cumsum(use[order, j])
            fits = int((extra <= room).sum())  # a prefix: extra only grows
            take = min(int(np.searchsorted(freed, over[j]) + 1), fits)  # enough to clear the overload
            if take > 0:
                on[order[:take]] = t
                load[t] += extra[take - 1]
                over[j] -= freed[take - 1]
                moved = True
        if not moved:
            return None
    return None


# ---------------------------------------------------------------------------
# Crossover: from nearly optimal prices to an optimal vertex
# ---------------------------------------------------------------------------


@dataclass
class _Master:
    z: float
    price: np.ndarray  # (k,)
    X: np.ndarray  # (e, k) the explicit jobs' rows
    lam: np.ndarray  # (e,)
    mu: np.ndarray  # (e,)


def crossover(lp, price: np.ndarray, level: float, slack: float, deadline: float):
    """An optimal vertex from nearly optimal capacity prices and level, or None."""
    t0 = time.perf_counter()
    d = _Data.of(lp)
    if d is None:
        return None
    n, k = d.A.shape
    rows = np.arange(n)
    p = np.maximum(np.asarray(price, dtype=float), 0.0)
    cost = np.where(d.A > 0, d.S[:, None] * (p + 1e-12 * max(float(p.max()), 1e-300))[None, :]
                    / np.where(d.A > 0, d.A, 1.0), np.inf)
    single = np.argmin(cost, axis=1)  # each job's cheapest type per unit of share
    a1 = d.A[rows, single]
    cand = (cost <= cost[rows, single][:, None] * (1 + slack)) & (d.A > 0)
    near_full = d.g * level + d.l >= a1 * (1 - slack) - 1e-12
    cand[near_full] |= d.A[near_full] > 0
    explicit = (cand.sum(axis=1) > 1) | near_full
    cand[~explicit] = False
    for rounds in range(1, MAX_ROUNDS + 1):
        if time.perf_counter() > deadline or explicit.sum() > max(200, FLOOD * n):
            return None
        m = _settled_master(d, single, explicit, cand, slack)
        if m is None:
            return None
        lam = np.where(a1 > 0, d.S * m.price[single] / a1, 0.0)
        mu = np.zeros(n)
        lam[explicit], mu[explicit] = m.lam, m.mu
        gain = lam[:, None] * d.A
        cost_now = d.S[:, None] * m.price[None, :] + mu[:, None]
        violated = (d.A > 0) & (gain - cost_now > PRICING_TOL * (gain + cost_now + 1e-300)) & ~cand
        violated[rows[~explicit], single[~explicit]] = False  # priced at zero by construction
        new = violated.any(axis=1)
        if not new.any():
            X = np.zeros((n, k))
            singles = ~explicit
            X[rows[singles], single[singles]] = (d.g[singles] * m.z + d.l[singles]) / a1[singles]
            X[explicit] = m.X
            return d.solution(lp, m.z, X, lam, m.price, "ipm+crossover", t0, rounds)
        cand[rows[new & ~explicit], single[new & ~explicit]] = True
        cand |= violated
        explicit |= new
    return None


def _settled_master(d: _Data, single, explicit, cand, slack: float) -> _Master | None:
    """The master, after giving rows to single-type jobs whose time rows bind
    (their X = (g z + l) / a would pass 1)."""
    rows = np.arange(len(d.A))
    a1 = d.A[rows, single]
    for _ in range(MAX_ROUNDS):
        full = ~explicit & (d.g == 0) & (d.l > a1)  # a frozen row no single type can carry
        if not full.any():
            m = _master(d, single, explicit, cand)
            if m is None:
                return None
            live = ~explicit & (d.g > 0)
            zcap = np.where(live, (a1 - d.l) / np.where(live, d.g, 1.0), np.inf)
            full = zcap <= m.z * (1 + max(slack, 1e-6)) + 1e-12
            if not full.any():
                return m
        explicit |= full
        cand[full] |= d.A[full] > 0
    return None


def _master(d: _Data, single: np.ndarray, explicit: np.ndarray, cand: np.ndarray) -> _Master | None:
    """max z over the explicit jobs' columns; single-type jobs folded into the
    capacity rows as G_j z + L_j. HiGHS's primal simplex (a vertex and its duals)."""
    import scipy.sparse as sp

    from optsched.solvers.lp import solve_lp

    k = d.A.shape[1]
    singles = np.flatnonzero(~explicit)
    js = single[singles]
    a1 = d.A[singles, js]
    G = np.bincount(js, weights=d.S[singles] * d.g[singles] / a1, minlength=k)
    L = np.bincount(js, weights=d.S[singles] * d.l[singles] / a1, minlength=k)
    ex = np.flatnonzero(explicit)
    e = len(ex)
    em, ej = np.nonzero(cand[ex])  # em indexes ex
    nv = len(em) + 1  # the explicit columns, then z
    col = np.arange(len(em))
    gm = ex[em]
    I = np.concatenate([ej, k + em, k + e + em, np.arange(k), k + np.arange(e)])
    J = np.concatenate([col, col, col, np.full(k, nv - 1), np.full(e, nv - 1)])
    V = np.concatenate([d.S[gm], -d.A[gm, ej], np.ones(len(em)), G, d.g[ex]])
    A_ub = sp.csc_matrix((V, (I, J)), shape=(k + 2 * e, nv))
    b_ub = np.concatenate([d.W - L, -d.l[ex], np.ones(e)])
    c = np.zeros(nv)
    c[-1] = -1.0
    # z >= 0: the folded rows stay linear. Primal simplex: z's column is dense (every
    # explicit share row and capacity row), where HiGHS's dual simplex took 2-3× the pivots.
    sol = solve_lp(c, A_ub, b_ub, lb=0.0, ub=np.inf, backend="highs-simplex", highs_options={"simplex_strategy": 4})
    if not sol.ok or sol.x[-1] <= 1e-12:
        return None  # z at its bound 0: the folded rows may not be linear there
    Xe = np.zeros((e, k))
    Xe[em, ej] = np.maximum(sol.x[:-1], 0.0)
    duals = sol.dual_ub
    return _Master(float(sol.x[-1]), duals[:k], Xe, duals[k : k + e], duals[k + e :])
