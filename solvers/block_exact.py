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

import dataclasses
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


def program_data(lp) -> "_Data | None":
    """The program's jobs that need capacity, for the shortcuts below (``data=``: computed once)."""
    return _Data.of(lp)


def uncongested(lp, data: "_Data | None" = None):
    """The optimum when capacity does not bind at z_cap, else None."""
    t0 = time.perf_counter()
    d = _Data.of(lp) if data is None else data
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
    with np.errstate(divide="ignore"):
        least = (d.S * demand * (1.0 / best)).sum()  # (1/A is least at the largest A: one pass over n, not n × k)
    room = d.W + 1e-9 * np.maximum(d.W, 1.0)  # (_fit's tolerance; fits' W (1 + 1e-9) is within it)
    if least > room.sum():
        return None  # the least GPU time the demands need passes every GPU: capacity binds (no greedy needed)
    price = _start_prices(d.A, d.W) / np.maximum(d.W, 1e-300)
    if _priced_demand(d, demand, price) > price @ room:
        return None  # the same test at the types' typical-speed prices: capacity binds
    X = _fit(d, demand)
    if X is None:
        # The one-type greedy can miss a fit that needs a few jobs split between types
        # (uncongested distinct rows, 2-25 %): the exact test decides, with an explicit X
        # or prices proving that none exists (then capacity binds: the level search).
        # Started at prices by the types' typical speed: where capacity binds, its first
        # round usually proves it (equal prices per GPU are the least-GPU-time test above).
        X, _ = fits(d.A, d.S, d.W, demand, price)
        if X is None:
            return None
    lam = np.zeros(len(d.A))
    bottleneck = int(np.argmin(cap))
    lam[bottleneck] = 1.0 / d.g[bottleneck]  # Σ g λ = 1; its time row carries the price, capacities none
    return d.solution(lp, z, X, lam, np.zeros(lp.k), "uncongested", t0)


def _priced_demand(d: _Data, demand: np.ndarray, price: np.ndarray) -> float:
    """Σ_m the least cost of job m's demand at GPU prices ``price`` with its time row dropped
    (its best price per unit of share): a lower bound on the cost of any X meeting the demands
    (LP duality), so above price·W no X fits. One n × k pass, where the greedy and the exact
    fit's first round (``cheapest`` over every job, most of them near their largest share at
    z_cap) took 1.6 ms at Gavel's rows with 0.5 GPUs per job, 1,000 × 3, 4.7 ms at 2,000 × 5."""
    with np.errstate(divide="ignore", invalid="ignore"):
        unit = np.where(d.A > 0, price[None, :] / np.where(d.A > 0, d.A, 1.0), np.inf).min(axis=1)
    return float((d.S * demand * unit).sum())


def fit_demand(A: np.ndarray, S: np.ndarray, W: np.ndarray, demand: np.ndarray) -> np.ndarray | None:
    """X (n, k) with Σ_j A[m, j] X[m, j] ≥ demand[m], time rows ≤ 1 and the
    capacities W, one type per job (the greedy of ``_fit``), or None when the
    greedy finds none (which does not prove that none exists). A is zero where
    a job cannot run; jobs with demand 0 get X = 0."""
    X = np.zeros(A.shape)
    need = demand > 0
    if need.any():
        A1 = A[need]
        if not np.all(A1.max(axis=1) > 0):
            return None
        d = _Data(A1, np.asarray(S, dtype=float)[need], np.zeros(len(A1)), demand[need], np.asarray(W, dtype=float),
                  np.flatnonzero(need))
        Xn = _fit(d, demand[need])
        if Xn is None:
            return None
        X[need] = Xn
    return X


# ---------------------------------------------------------------------------
# Do demands fit? Dantzig–Wolfe over the k capacity rows
# ---------------------------------------------------------------------------
#
# Demands d fit iff  min_X max_j load_j(X) / W_j ≤ 1  over the X meeting them
# (share rows ≥ d, time rows ≤ 1). By LP duality that minimum u* equals
# max_{π ≥ 0, π·W = 1} Σ_m c_m(π), where c_m(π) is the cheapest way for job
# m alone to meet its demand at GPU prices π: a two-row LP whose optimum uses
# one type, or two with its time row full. So k prices decide a program of
# n·k variables: each price vector gives an assignment (a column of loads), a
# k-row master mixes the columns (min u s.t. Σ θ_i L_i ≤ u W, Σ θ_i = 1), and
# its duals are the next prices. Both ends are certificates: a mix with u < 1
# is an explicit X (a convex combination of assignments, each meeting every
# demand within its time row), and prices with Σ c_m(π) > π·W prove that no X
# fits (every X meeting the demands costs at least Σ c_m(π) at prices π).

FIT_ROUNDS = 60  # master rounds before giving up undecided (measured: 15–30 near u* = 1 at 10k × 5)
FIT_MARGIN = 1e-9  # u below 1 − this: fits, loads checked against W explicitly


def cheapest(a: np.ndarray, S: np.ndarray, price: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per job, the cheapest X with Σ_j a[m, j] X[m, j] ≥ 1 and Σ_j X[m, j] ≤ 1 at
    GPU prices ``price`` (a = A / demand, zero where the job cannot run), and its cost.
    The two-row LP's vertices: one type fast enough alone (X = 1/a), or a type
    too slow alone topped up by one that is fast enough, the time row full."""
    n, k = a.shape
    rows = np.arange(n)
    fast = a >= 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        one = np.where(fast, S[:, None] * price[None, :] / np.where(fast, a, 1.0), np.inf)
    j1 = np.argmin(one, axis=1)
    cost = one[rows, j1]
    lo, hi, x_hi = np.full(n, -1), np.full(n, -1), np.zeros(n)
    # Every pair (slow type j, fast type j2) at once, (jobs, j, j2) (a loop over the k² pairs
    # cost ~10 numpy calls each: 0.3 ms per pricing pass at 5 types where time rows bind).
    # The first cheapest pair in (j, j2) order, taken only when cheaper than one type: the loop's choice.
    slow = (a > 0) & ~fast
    m = np.flatnonzero(slow.any(axis=1) & fast.any(axis=1))
    if len(m):
        aj, aj2 = a[m][:, :, None], a[m][:, None, :]
        ok = slow[m][:, :, None] & fast[m][:, None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            x2 = np.where(ok, (1.0 - aj) / np.where(ok, aj2 - aj, 1.0), 0.0)
            c = np.where(ok, S[m][:, None, None] * (price[None, :, None] * (1.0 - x2) + price[None, None, :] * x2),
                         np.inf)
        flat = c.reshape(len(m), k * k)
        best = np.argmin(flat, axis=1)
        c_best = flat[np.arange(len(m)), best]
        better = c_best < cost[m]
        m, best = m[better], best[better]
        cost[m], lo[m], hi[m] = c_best[better], best // k, best % k
        x_hi[m] = x2.reshape(-1, k * k)[np.flatnonzero(better), best]
    X = np.zeros((n, k))
    single = rows[lo < 0]
    X[single, j1[single]] = 1.0 / a[single, j1[single]]
    mix = rows[lo >= 0]
    X[mix, lo[mix]] = 1.0 - x_hi[mix]
    X[mix, hi[mix]] = x_hi[mix]
    return X, cost


class _MixMaster:
    """min u s.t. Σ_i θ_i L_i − u W ≤ 0, Σ_i θ_i = 1, θ ≥ 0: one HiGHS model that
    grows a column per price vector and re-solves from its last basis (a model
    built per round cost ~4 ms of the 5 ms a round took)."""

    def __init__(self, W: np.ndarray):
        import highspy

        self.k = k = len(W)
        self.h = h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", 1)
        inf = highspy.kHighsInf
        h.addRows(k + 1, np.r_[np.full(k, -inf), 1.0], np.r_[np.zeros(k), 1.0], 0, np.zeros(0, dtype=np.int32),
                  np.zeros(0, dtype=np.int32), np.zeros(0))
        h.addCol(1.0, 0.0, inf, k, np.arange(k, dtype=np.int32), -np.asarray(W, dtype=float))  # u
        self.index = np.arange(k + 1, dtype=np.int32)

    def add(self, load: np.ndarray) -> None:
        import highspy

        self.h.addCol(0.0, 0.0, highspy.kHighsInf, self.k + 1, self.index, np.r_[load, 1.0])

    def solve(self):
        """(u, θ, prices) or None."""
        import highspy

        self.h.run()
        if self.h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        sol = self.h.getSolution()
        x = np.asarray(sol.col_value)
        return float(x[0]), np.maximum(x[1:], 0.0), np.maximum(-np.asarray(sol.row_dual)[: self.k], 0.0)


def fits(A: np.ndarray, S: np.ndarray, W: np.ndarray, demand: np.ndarray, price: np.ndarray | None = None):
    """(X, prices): X meeting ``demand`` within time rows and capacities W, or
    None when prices prove that none exists or FIT_ROUNDS pass undecided;
    the prices are the last master's (a warm start for a similar question)."""
    S, W = np.asarray(S, dtype=float), np.asarray(W, dtype=float)
    need = demand > 0
    X = np.zeros(A.shape)
    if not need.any():
        return X, price
    top = A[need].max(axis=1)
    d = demand[need]
    d = np.where(d <= top * (1 + 1e-12), np.minimum(d, top), d)  # a job at its largest share, up to rounding
    a = A[need] / d[:, None]
    if not np.all(a.max(axis=1) >= 1.0):
        return None, price  # a job no type can serve within its time
    Sn, k = S[need], A.shape[1]
    W1 = np.maximum(W, 1e-300)
    p = np.full(k, 1.0 / W1.sum()) if price is None else np.maximum(np.asarray(price, dtype=float), 0.0)
    master, prices = _MixMaster(W1), []
    for _ in range(FIT_ROUNDS):
        p = p / max(float(p @ W1), 1e-300) if p.sum() > 0 else np.full(k, 1.0 / W1.sum())
        Xp, cost = cheapest(a, Sn, p)
        if cost.sum() > 1.0 + FIT_MARGIN:  # Σ c_m(π) > π·W = 1: no X fits
            return None, p
        prices.append(p)
        master.add(Sn @ Xp)
        out = master.solve()
        if out is None:
            return None, p
        u, theta, dual = out
        if u < 1.0 - FIT_MARGIN:
            for i in np.flatnonzero(theta > 0):
                X[need] += theta[i] / theta.sum() * cheapest(a, Sn, prices[i])[0]
            if np.all(S @ X <= W * (1 + FIT_MARGIN)) and np.all(X.sum(axis=1) <= 1 + 1e-9):
                return X, p
            return None, p
        p = dual
    return None, p


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
    return _crossover(lp, price, level, slack, deadline)


def _crossover(lp, price: np.ndarray, level: float, slack: float, deadline: float, flood: float = FLOOD,
               data: "_Data | None" = None):
    """``crossover``; also None when more than ``flood`` of the jobs would need rows of their own.
    First with the jobs near a full time row folded into the capacity rows (``_crossover_at``),
    then, when that does not settle, with each of them a row of the master."""
    d = _Data.of(lp) if data is None else data
    if d is None:
        return None
    for fold in (True, False):
        sol = _crossover_at(lp, d, price, level, slack, deadline, flood, fold)
        if sol is not None:
            return sol
    return None


def _crossover_at(lp, d: _Data, price: np.ndarray, level: float, slack: float, deadline: float, flood: float,
                  fold_mixes: bool):
    t0 = time.perf_counter()
    n, k = d.A.shape
    rows = np.arange(n)
    p = np.maximum(np.asarray(price, dtype=float), 0.0)
    cost = np.where(d.A > 0, d.S[:, None] * (p + 1e-12 * max(float(p.max()), 1e-300))[None, :]
                    / np.where(d.A > 0, d.A, 1.0), np.inf)
    single = np.argmin(cost, axis=1)  # each job's cheapest type per unit of share
    a1 = d.A[rows, single]
    cand = (cost <= cost[rows, single][:, None] * (1 + slack)) & (d.A > 0)
    near_full = d.g * level + d.l >= a1 * (1 - slack) - 1e-12
    full_cols, lo, hi = _full_columns(d, near_full, p, level)
    cand |= full_cols
    # A job whose cheapest way alone is two types with its time row full is folded into the
    # capacity rows like a one-type job (X_lo + X_hi = 1, A_lo X_lo + A_hi X_hi = g z + l:
    # linear in z); it keeps those two columns as candidates and becomes a row of the master
    # only when its mix leaves [0, 1] or its duals price another column in.
    mixed = (lo >= 0) & fold_mixes
    cand[mixed] = False
    cand[np.flatnonzero(mixed), lo[mixed]] = True
    cand[np.flatnonzero(mixed), hi[mixed]] = True
    explicit = ((cand.sum(axis=1) > 1) | near_full) & ~mixed
    cand[~explicit & ~mixed] = False
    fold = (mixed, lo, hi)
    for rounds in range(1, MAX_ROUNDS + 1):
        # The flood counts jobs near a price tie (prices too far off); jobs whose time row binds
        # are rows the optimum needs whatever the prices (Gavel's rows at 0.5 GPUs per job,
        # 5,000 × 5: 5-15 % of the jobs, where the IPM took 0.5 s and this 0.15 s).
        if time.perf_counter() > deadline or (explicit & ~near_full).sum() > max(200, flood * n):
            return None
        m = _settled_master(d, single, explicit, cand, slack, deadline, fold)
        if m is None:
            return None
        lam = np.where(a1 > 0, d.S * m.price[single] / a1, 0.0)
        mu = np.zeros(n)
        lam[explicit], mu[explicit] = m.lam, m.mu
        f = np.flatnonzero(mixed & ~explicit)
        flo, fhi = lo[f], hi[f]
        lam[f] = d.S[f] * (m.price[fhi] - m.price[flo]) / (d.A[f, fhi] - d.A[f, flo])
        mu[f] = lam[f] * d.A[f, flo] - d.S[f] * m.price[flo]
        gain = lam[:, None] * d.A
        cost_now = d.S[:, None] * m.price[None, :] + np.maximum(mu, 0.0)[:, None]
        violated = (d.A > 0) & (gain - cost_now > PRICING_TOL * (gain + cost_now + 1e-300)) & ~cand
        singles = ~explicit & ~mixed
        violated[rows[singles], single[singles]] = False  # priced at zero by construction
        new = violated.any(axis=1)
        # A folded mix whose duals are not feasible (a negative time-row or share multiplier) is
        # not complementary: it becomes a row of the master.
        new[f] |= (lam[f] < 0) | (mu[f] < -PRICING_TOL * (lam[f] * d.A[f, flo] + d.S[f] * m.price[flo] + 1e-300))
        mu = np.maximum(mu, 0.0)
        if not new.any():
            X = np.zeros((n, k))
            X[rows[singles], single[singles]] = (d.g[singles] * m.z + d.l[singles]) / a1[singles]
            X[explicit] = m.X
            X[f, flo], X[f, fhi] = _mix(d, f, flo, fhi, m.z)
            return d.solution(lp, m.z, X, lam, m.price, "ipm+crossover", t0, rounds)
        cand[rows[new & ~explicit], single[new & ~explicit]] = True
        cand |= violated
        explicit |= new
    return None


def _mix(d: _Data, f: np.ndarray, lo: np.ndarray, hi: np.ndarray, z: float) -> tuple[np.ndarray, np.ndarray]:
    """(X_lo, X_hi) of folded jobs at level z: the time row full, the share row tight."""
    x_hi = (d.g[f] * z + d.l[f] - d.A[f, lo]) / (d.A[f, hi] - d.A[f, lo])
    return 1.0 - x_hi, x_hi


def _full_columns(d: _Data, full: np.ndarray, p: np.ndarray, level: float):
    """Candidate columns of jobs near a full time row: the types of each one's cheapest way to
    meet its demand at the level alone (``cheapest``: one type, or two with the time row full),
    every usable type for a job no type serves within its time there. Column generation adds
    any other column that prices in; all k of them for 250 such jobs made a master of 1,300
    columns (25 ms of HiGHS at Gavel's rows with 0.5 GPUs per job, 5,000 × 5)."""
    out = np.zeros(d.A.shape, dtype=bool)
    lo, hi = np.full(len(d.A), -1), np.full(len(d.A), -1)
    m = np.flatnonzero(full)
    demand = d.g[m] * level + d.l[m]
    ok = demand > 0
    a = d.A[m[ok]] / demand[ok][:, None]
    served = a.max(axis=1) >= 1.0
    X, _ = cheapest(a[served], d.S[m[ok][served]], p)
    on = m[ok][served]
    out[on] = X > 0
    two = (X > 0).sum(axis=1) == 2
    if two.any():  # (the slower of the two types first)
        js = np.argsort(np.where(X[two] > 0, d.A[on[two]], np.inf), axis=1)[:, :2]
        lo[on[two]], hi[on[two]] = js[:, 0], js[:, 1]
    rest = np.setdiff1d(m, on)
    out[rest] = d.A[rest] > 0
    return out, lo, hi


def _settled_master(d: _Data, single, explicit, cand, slack: float, deadline: float = float("inf"),
                    fold=None) -> _Master | None:
    """The master, after giving rows to single-type jobs whose time rows bind
    (their X = (g z + l) / a would pass 1) and to folded two-type jobs whose mix
    leaves [0, 1] at the master's level."""
    rows = np.arange(len(d.A))
    a1 = d.A[rows, single]
    n = len(d.A)
    mixed, lo, hi = fold if fold is not None else (np.zeros(n, dtype=bool), np.full(n, -1), np.full(n, -1))
    for _ in range(MAX_ROUNDS):
        full = ~explicit & ~mixed & (d.g == 0) & (d.l > a1)  # a frozen row no single type can carry
        if not full.any():
            f = np.flatnonzero(mixed & ~explicit)
            m = _master(d, single, explicit, cand, deadline, (f, lo[f], hi[f]))
            if m is None and len(f):
                # The folded pairs (each job's cheapest at the search's prices) cannot all hold
                # together: every folded job becomes a row of the master, as without folding.
                explicit[f] = True
                continue
            if m is None:
                return None
            live = ~explicit & ~mixed & (d.g > 0)
            zcap = np.where(live, (a1 - d.l) / np.where(live, d.g, 1.0), np.inf)
            full = zcap <= m.z * (1 + max(slack, 1e-6)) + 1e-12
            x_lo, x_hi = _mix(d, f, lo[f], hi[f], m.z)
            full[f[(x_lo < -1e-12) | (x_hi < -1e-12)]] = True
            if not full.any():
                return m
        explicit |= full
        cand[full] |= d.A[full] > 0
    return None


MASTER_PIVOTS = 20  # per master row: the pivot limit of one master solve (a work limit, not a clock)
MASTER_NO_PRESOLVE = 100  # explicit jobs up to which a master skips HiGHS's presolve


def _master(d: _Data, single: np.ndarray, explicit: np.ndarray, cand: np.ndarray,
            deadline: float = float("inf"), fold=None) -> _Master | None:
    """max z over the explicit jobs' columns; single-type jobs (and ``fold``'s two-type
    jobs, their time row full) folded into the capacity rows as G_j z + L_j.
    HiGHS's primal simplex (a vertex and its duals)."""
    from optsched.solvers.lp import CscArrays, solve_lp

    k = d.A.shape[1]
    f, flo, fhi = fold if fold is not None else (np.zeros(0, dtype=int),) * 3
    out = ~explicit
    out[f] = False
    singles = np.flatnonzero(out)
    js = single[singles]
    a1 = d.A[singles, js]
    # (float: np.bincount of no jobs is int64 even with weights, and the fold adds floats to it)
    G = np.bincount(js, weights=d.S[singles] * d.g[singles] / a1, minlength=k).astype(float)
    L = np.bincount(js, weights=d.S[singles] * d.l[singles] / a1, minlength=k).astype(float)
    if len(f):  # X_hi = (g z + l − A_lo) / Δ, X_lo = 1 − X_hi
        gap = d.A[f, fhi] - d.A[f, flo]
        G += np.bincount(fhi, weights=d.S[f] * d.g[f] / gap, minlength=k)
        G -= np.bincount(flo, weights=d.S[f] * d.g[f] / gap, minlength=k)
        L += np.bincount(fhi, weights=d.S[f] * (d.l[f] - d.A[f, flo]) / gap, minlength=k)
        L += np.bincount(flo, weights=d.S[f] * (d.A[f, fhi] - d.l[f]) / gap, minlength=k)
    ex = np.flatnonzero(explicit)
    e = len(ex)
    em, ej = np.nonzero(cand[ex])  # em indexes ex
    nv = len(em) + 1  # the explicit columns, then z
    gm = ex[em]
    if nv == k + e:
        vertex = _square_master(d, G, L, ex, em, ej)
        if vertex is not None:
            return vertex
    # Bare CSC arrays (no scipy.sparse on this path): rows are the k capacities, the e
    # share rows, the e time rows; each X column has one entry in each, in row order,
    # and z's column has the k folded capacity terms and the explicit share rows' g.
    indices = np.concatenate([np.stack([ej, k + em, k + e + em], axis=1).reshape(-1), np.arange(k + e)])
    data = np.concatenate([np.stack([d.S[gm], -d.A[gm, ej], np.ones(len(em))], axis=1).reshape(-1), G, d.g[ex]])
    indptr = np.r_[np.arange(0, 3 * len(em) + 1, 3), 3 * len(em) + k + e].astype(np.int32)
    A_ub = CscArrays(indptr, indices.astype(np.int32), data.astype(float), k + 2 * e)
    b_ub = np.concatenate([d.W - L, -d.l[ex], np.ones(e)])
    c = np.zeros(nv)
    c[-1] = -1.0
    # z >= 0: the folded rows stay linear. Primal simplex: z's column is dense (every
    # explicit share row and capacity row), where HiGHS's dual simplex took 2-3× the pivots.
    # A master of thousands of jobs can run for a minute: a pivot limit (deterministic, whatever
    # the machine's load) gives up on it; the caller's deadline (the user's time limit) bounds it too.
    # A master of a few jobs (the level search's: 2-10) is solved faster than HiGHS presolves it
    # (0.79 → 0.60 ms at 2 explicit jobs).
    options = {"simplex_strategy": 4, "simplex_iteration_limit": MASTER_PIVOTS * (k + 2 * e + 1)}
    if e <= MASTER_NO_PRESOLVE:
        options["presolve"] = "off"
    sol = solve_lp(c, A_ub, b_ub, lb=0.0, ub=np.inf, backend="highs-simplex", highs_options=options,
                   time_limit=max(deadline - time.perf_counter(), 1e-3))
    if not sol.ok or sol.x[-1] <= 1e-12:
        return None  # z at its bound 0: the folded rows may not be linear there
    Xe = np.zeros((e, k))
    Xe[em, ej] = np.maximum(sol.x[:-1], 0.0)
    duals = sol.dual_ub
    return _Master(float(sol.x[-1]), duals[:k], Xe, duals[k : k + e], duals[k + e :])


def _square_master(d: _Data, G: np.ndarray, L: np.ndarray, ex: np.ndarray, em: np.ndarray,
                   ej: np.ndarray) -> _Master | None:
    """The master's optimal vertex without an LP solver when it has as many columns (the
    explicit jobs' and z) as capacity and share rows, the usual case after the level search
    (k − 1 jobs split between two types each): the vertex where every capacity and share row
    binds and no time row does, solved as one square system, with its duals from the
    transposed one; None unless it is feasible (X ≥ 0, time rows ≤ 1, z > 0) and its duals
    are (capacity prices and share multipliers ≥ 0), which makes it optimal. Saves a
    HiGHS call (~0.3-0.6 ms) per level search; the caller's pricing of every column is
    still the certificate."""
    k, e = len(G), len(ex)
    gm = ex[em]
    B = np.zeros((k + e, k + e))
    cols = np.arange(len(em))
    B[ej, cols] = d.S[gm]
    B[k + em, cols] = -d.A[gm, ej]
    B[:k, -1] = G
    B[k:, -1] = d.g[ex]
    rhs = np.concatenate([d.W - L, -d.l[ex]])
    c = np.zeros(k + e)
    c[-1] = 1.0
    try:
        x = np.linalg.solve(B, rhs)
        y = np.linalg.solve(B.T, c)
    except np.linalg.LinAlgError:
        return None
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        return None
    z, cols_x = float(x[-1]), x[:-1]
    scale = np.abs(B) @ np.abs(x) + np.abs(rhs) + 1e-300
    if (z <= 1e-12 or np.any(cols_x < -1e-12) or np.any(y < -1e-12 * np.abs(y).max())
            or np.any(np.abs(B @ x - rhs) > 1e-12 * scale)):
        return None
    Xe = np.zeros((e, k))
    Xe[em, ej] = np.maximum(cols_x, 0.0)
    if np.any(Xe.sum(axis=1) > 1.0 + 1e-12):
        return None
    y = np.maximum(y, 0.0)
    return _Master(z, y[:k], Xe, y[k:], np.zeros(e))


# ---------------------------------------------------------------------------
# Level search: the optimum's prices and level from the k capacity prices alone
# ---------------------------------------------------------------------------
#
# For a level z every job's demand d_m = g_m z + l_m is fixed, and the least
# load ratio that meets them, u(z) = min_X max_j load_j / W_j, is by LP duality
# max over prices q ≥ 0 with Σ q = 1 (per unit of each capacity) of Σ_m c_m(q),
# each job's cheapest way to meet its demand alone (``cheapest``). That is a
# concave function of k numbers, a sum of n pieces: Kelley's cutting planes,
# one per group of jobs and round (multi-cut; a cut per group instead of one
# for the sum takes 2–3× fewer rounds), reach its maximum in 10–30 rounds of
# O(n k) numpy work and a tiny HiGHS model over k + groups variables. u is
# convex and piecewise linear in z, linear while no time row binds (u(z) = z u(1)),
# so a safeguarded Newton step on u(z) = 1 lands on the optimal level in one or
# two steps. Neither step is trusted: the crossover below starts from the prices
# and level found, and its pricing of every column is the certificate.

LEVEL_GROUPS = 16  # cut groups (measured at 1k-10k × 3-5: 8-32 alike, 64 slower; one cut in all takes 2-3× the rounds)
LEVEL_JOBS_PER_GROUP = 1000  # more groups for more jobs (100k × 5: 16 groups left a 3e-6 gap after 60 rounds)
LEVEL_MAX_GROUPS = 128
LEVEL_ROUNDS = 60  # cutting-plane rounds per level (measured: 7-31 to a 1e-9 gap)
# First round: a multiplicative price adjustment q ← q (load_j / q·load)^η from the best prices so
# far, each point a cut, η adapted to the answer (× LEVEL_ADJUST_GROW when a point raises the lower
# bound, × LEVEL_ADJUST_SHRINK when not), each factor within ×/÷ LEVEL_ADJUST_CLIP. A pricing pass
# costs a fifth of a master round. A fixed η (0.5, clip 2) oscillated on Gavel's rows, whose jobs
# come in clusters (prices 20 % off → 40 % off after 8 steps): master rounds per level, fixed → adaptive,
# at Gavel-noisy 1,024 × 3 6.6 → 2.1, 2,048 × 3 8.3 → 2.1, 1,024 × 5 12.8 → 4.4, 10,000 × 5 23 → 7.4;
# random rows 1,024 × 3 3.1 → 2.3, 10,000 × 5 7.7 → 2.3; Gavel's rows at 0.5 GPUs per job, where time
# rows bind, 1,000 × 3 13.4 → 6.7 (every level's search summed). Keeping only the best few points'
# cuts took more rounds: the cuts away from the optimum shape the master too.
LEVEL_ADJUST = 12
LEVEL_ADJUST_STEP = 0.5
LEVEL_ADJUST_GROW = 1.5
LEVEL_ADJUST_SHRINK = 0.3
LEVEL_ADJUST_CLIP = 1.5
# (The same from a previous level's prices when the level moved far, as from z = 1e-3·z_cap to
# the first Newton step where time rows bind: 3 adjustments for every warm search took 1.3-1.5×
# the master rounds at Gavel's rows with 0.5 GPUs per job, none 3-4×.)
# From a level within LEVEL_NEAR of the last one (the Newton steps after the first overshoot, ~0.5 %
# apart) its prices are near the optimum: 2 adjustments (Gavel's rows at 0.5 GPUs per job, pricing
# passes 43.8 → 34.0 at 1,000 × 3, master rounds 4.1 → 4.2; with none, 8.8 rounds).
LEVEL_NEAR = 1e-2
LEVEL_ADJUST_NEAR = 2
LEVEL_STEPS = 6  # Newton steps on the level
LEVEL_ROOT_STEPS = 8  # Newton steps on the lower bound at fixed prices (``_priced_root``; measured 1-3)
# Newton stops at |u - 1| <= this when the step is ``_priced_root``'s: its level is ~1e-7 off the
# optimum from the second search's prices (a plain Newton step 3e-5), so the crossover gets it and
# those prices instead of a third search (Gavel's rows at 0.5 GPUs per job, 2,000 × 5 and
# 5,000 × 5: searches 3 → 2, the level search ~10 % less CPU; the crossover settles at its first slack).
LEVEL_ROOT_TOL = 1e-2
LEVEL_TOL = 1e-9  # relative gap of u(z) and of u(z) = 1
# Newton on the level stops once u(z) is within this of 1: the crossover's master has the level
# as a variable and settles the last digits itself (measured: 0.028 → 0.017 s at Gavel-noisy
# 1,000 × 3 with 0.5 GPUs per job, where time rows bind and u is not linear; every crossover
# settled at its first slack, as at 1e-9).
LEVEL_NEWTON_TOL = 1e-4
LEVEL_START = 1e-3  # the first level, × the largest: no time row binds, so the prices are those of u(1)
LEVEL_SLACKS = (1e-6, 1e-4, 1e-3)  # crossover candidates: types within this relative cost of a job's cheapest
LEVEL_FLOOD = 0.02  # prices this far off are not worth a master of more rows: the IPM goes on


def level_search(lp, deadline: float, data: "_Data | None" = None):
    """An optimal vertex with its certificate, from prices found by cutting
    planes over the k capacity prices and a Newton search on the level; None
    when the search or the crossover does not settle (the caller goes on)."""
    t0 = time.perf_counter()
    d = _Data.of(lp) if data is None else data
    if d is None:
        return None
    A = d.A if np.all(d.W > 0) else np.where(d.W[None, :] > 0, d.A, 0.0)  # (an empty type serves nobody)
    best = A.max(axis=1)
    live = d.g > 0
    if np.any(best <= 0) or np.any(d.l[~live] > best[~live] * (1 + 1e-12)):
        return None
    zcap = float(np.min((best[live] - d.l[live]) / d.g[live]))
    found = _level(A, d, zcap)
    if found is None:
        return None
    z, price = found
    for slack in LEVEL_SLACKS:
        sol = _crossover(lp, price, z, slack, deadline, LEVEL_FLOOD, d)
        if sol is not None:
            return dataclasses.replace(sol, seconds=time.perf_counter() - t0, backend="prices+crossover")
    return None


def _level(A: np.ndarray, d: _Data, zcap: float):
    """(level, prices per GPU): the level where u = 1 (up to LEVEL_TOL, or the
    Newton step onto it when u is linear there), or None."""
    homogeneous = not np.any(d.l > 0)  # u(z) = z u(1) until a time row binds
    lo, hi = 0.0, zcap
    z, q, last = LEVEL_START * zcap, None, None
    for _ in range(LEVEL_STEPS):
        near = last is not None and abs(z - last) <= LEVEL_NEAR * last
        out = _least_load(A, d.S, d.W, d.g, d.g * z + d.l, q, LEVEL_ADJUST_NEAR if near else LEVEL_ADJUST)
        last = z
        if out is None:
            return None
        u, q, slope, reach = out
        step = z + (1.0 - u) / slope if slope > 0 else float("nan")
        tol = LEVEL_NEWTON_TOL
        if 0.0 < step and not (homogeneous and reach * step / z <= 1.0):
            step = _priced_root(A, d, q, min(step, zcap), zcap)  # (time rows bind: u bends past z)
            tol = LEVEL_ROOT_TOL
        if abs(u - 1.0) <= tol:
            # Close enough for the crossover, whose master has the level as a variable; the
            # Newton step is closer still (from above, u convex: between the level and z).
            if lo < step < hi or (u > 1.0 and lo < step < z):
                z = step
            break
        if u > 1.0:
            hi = z
        else:
            lo = z
            if z >= zcap:
                break  # every job at its largest share fits: the level cannot rise further
        if homogeneous and z < step <= hi and reach * step / z <= 1.0:
            # u is linear up to the step (the best assignment's jobs stay within their time):
            # the step is the level (the crossover checks it; if not, the caller gives up).
            return step, q / np.maximum(d.W, 1e-300)
        if step >= hi == zcap and z < zcap:
            z = zcap  # the step passes the largest level: one test there (u ≤ 1 ends it) beats bisecting up to it
        else:
            z = step if lo < step < hi else 0.5 * (lo + hi)
    return z, q / np.maximum(d.W, 1e-300)


def _priced_root(A: np.ndarray, d: _Data, q: np.ndarray, z: float, zcap: float) -> float:
    """From a Newton step z of u: the level where the lower bound L_q(z) = Σ_m c_m(q) at the
    fixed prices q (each job's cheapest way to meet its demand alone) reaches 1, by Newton
    on L_q (convex, piecewise linear, ≤ u: from the right its steps stay at or above the
    root, which is at or above the optimal level). The Newton step of u uses u's slope at one
    level; where time rows start to bind past it (Gavel's rows at 0.5 GPUs per job) it
    overshoots by 0.5-0.9 %, the root of L_q at the same prices by 0.03-0.1 % from the first
    level's prices and 1e-7 from the next ones: one cutting-plane search fewer. A few
    pricing passes, no LP; nan when a pass fails (the caller bisects)."""
    for _ in range(LEVEL_ROOT_STEPS):
        out = _priced_load(A, d, q, z)
        if out is None:
            return float("nan")
        lb, slope = out
        if lb - 1.0 <= LEVEL_TOL or not slope > 0:
            return z  # (below 1 only at z_cap, where the level stops anyway)
        nxt = z + (1.0 - lb) / slope
        if not nxt < z:
            return z
        z = nxt
    return z


def _priced_load(A: np.ndarray, d: _Data, q: np.ndarray, z: float):
    """(L_q(z), a subgradient dL_q/dz) at the scaled prices q, or None when a job cannot meet its demand."""
    demand = d.g * z + d.l
    need = demand > 0
    a = A[need] / demand[need][:, None]
    top = a.max(axis=1)
    if np.any(top < 1.0 - 1e-12):
        return None
    if np.any(top < 1.0):
        a = a / np.minimum(top, 1.0)[:, None]
    pricing = _Pricing(a, d.S[need], np.maximum(d.W, 1e-300), 1)
    lb, _, chosen = pricing.at(q)
    return lb, float((d.g[need] * pricing.marginal(q, *chosen) / demand[need]).sum())


def _least_load(A: np.ndarray, S: np.ndarray, W: np.ndarray, g: np.ndarray, demand: np.ndarray, q0,
                adjust: int | None = None):
    """(u, q, du/dz, the longest time a job of the best assignment uses) with
    u = min_X max_j load_j / W_j over X meeting ``demand``
    (time rows ≤ 1), found to LEVEL_TOL by multi-cut Kelley over the scaled
    prices q (q_j = π_j W_j, Σ q = 1); None when a job cannot meet its demand
    or the rounds run out."""
    n, k = A.shape
    need = demand > 0
    every = bool(need.all())  # (no copies of A, S, demand: the usual case)
    a = A / demand[:, None] if every else A[need] / demand[need][:, None]
    top = a.max(axis=1)
    if np.any(top < 1.0 - 1e-12):
        return None  # a job no type can serve within its time
    if np.any(top < 1.0):
        a = a / np.minimum(top, 1.0)[:, None]  # (a job at its largest share, up to rounding)
    Sn, dn = (S, demand) if every else (S[need], demand[need])
    W1 = np.maximum(W, 1e-300)
    groups = min(max(LEVEL_GROUPS, len(a) // LEVEL_JOBS_PER_GROUP), LEVEL_MAX_GROUPS, len(a))
    pricing = _Pricing(a, Sn, W1, groups)
    q = np.maximum(_start_prices(a, W1) if q0 is None else q0, 0.0)
    q = q / max(float(q.sum()), 1e-300)
    master = _CutMaster(k, groups)
    best_lb, best_q, best = -np.inf, q, None
    points, unit = _adjusted(pricing, q, LEVEL_ADJUST if adjust is None else adjust), None
    for r in range(LEVEL_ROUNDS):
        cuts = []
        for lb, cut, chosen, q in points:
            if lb > best_lb:
                best_lb, best_q, best = lb, q, chosen
            cuts.append(cut)
        if unit is None:  # the master's values near `groups` (HiGHS's tolerances are absolute)
            unit = groups / max(best_lb, 1e-300)
        master.add(np.concatenate(cuts) * unit)
        out = master.solve()
        if out is None:
            return None
        ub, q = out
        ub /= unit
        if ub - best_lb <= LEVEL_TOL * abs(ub):
            break  # (else the best prices so far: the crossover's slacks may still settle them)
        # The master's point first: after the first round it is usually the optimum itself
        # (Gavel-noisy 1,024 × 3: 7 of 8), and then no master needs to confirm it.
        points = [(*pricing.at(q), q)]
        if points[0][0] > best_lb:
            best_lb, best_q, best = points[0][0], q, points[0][2]
            if ub - best_lb <= LEVEL_TOL * abs(ub):
                break
        # In-out: the master's point and points towards the best prices so far
        # (cuts there do not swing as far; 1.5-2× fewer rounds, and a round's
        # HiGHS solve costs more than the evaluations).
        points += [(*pricing.at(x), x) for x in [w * q + (1 - w) * best_q for w in _INOUT]]
    # du/dz at the best prices: Σ_m g_m × each job's marginal cost of demand (per unit of u).
    marginal = pricing.marginal(best_q, *best) / dn  # per unit of demand (c is per unit of a-share)
    j1, slow, _ = best
    reach = np.inf if len(slow) else float(pricing.inv[np.arange(len(j1)), j1].max())  # the longest time used
    return best_lb, best_q, float((g[need] * marginal).sum()), reach


def _adjusted(pricing: "_Pricing", q: np.ndarray, steps: int = LEVEL_ADJUST) -> list:
    """The first round's points (lower bound, cut, assignment, prices): ``q`` and LEVEL_ADJUST
    price adjustments towards balanced loads, each from the best point so far, with a step
    that grows after a better point and shrinks after a worse one."""
    k = len(q)
    lb, cut, chosen = pricing.at(q)
    points = [(lb, cut, chosen, q)]
    best, eta = points[0], LEVEL_ADJUST_STEP
    for _ in range(steps):
        load, base = best[1].sum(axis=0), best[3]
        step = (load / max(float(base @ load), 1e-300)) ** eta
        nxt = base * np.clip(step, 1.0 / LEVEL_ADJUST_CLIP, LEVEL_ADJUST_CLIP)
        nxt = np.maximum(nxt / max(float(nxt.sum()), 1e-300), 1e-6 / k)  # (a type nobody uses keeps a price)
        if not np.all(np.isfinite(nxt)):
            break
        nxt = nxt / nxt.sum()
        lb, cut, chosen = pricing.at(nxt)
        points.append((lb, cut, chosen, nxt))
        if lb > best[0]:
            best, eta = points[-1], eta * LEVEL_ADJUST_GROW
        else:
            eta *= LEVEL_ADJUST_SHRINK
    return points


def _start_prices(a: np.ndarray, W: np.ndarray) -> np.ndarray:
    """First prices (scaled, q_j = π_j W_j): a GPU of type j priced by how fast the jobs
    typically run there, the geometric mean of a[m, j] / max_j a[m, j] over the jobs
    (measured against equal q: master rounds 16.0 → 12.8 at Gavel's rows 1,024 × 5,
    26 → 23 at 10,000 × 5, the same on random rows)."""
    rel = a / a.max(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        typical = np.exp(np.where(rel > 0, np.log(np.where(rel > 0, rel, 1.0)), 0.0).sum(axis=0)
                         / np.maximum((rel > 0).sum(axis=0), 1))
    q = W * typical
    return q / q.sum() if q.sum() > 0 and np.all(np.isfinite(q)) else np.full(len(W), 1.0 / len(W))


_INOUT = (0.5,)  # in-out points between the master's prices and the best so far (more: a slower model)
KEEP_CUTS = 6  # rows per group the cut model keeps (the others: only cuts that bind)


class _Pricing:
    """Each job's cheapest way to meet its demand alone at scaled prices q
    (``cheapest``), summed into one cut per group. The common case, the type of
    the best price per unit of share serving the job within its time (a ≥ 1),
    is a few vectorized passes; only the other jobs go through ``cheapest``."""

    def __init__(self, a: np.ndarray, S: np.ndarray, W: np.ndarray, groups: int):
        n, k = a.shape
        self.a, self.S, self.W, self.groups, self.k = a, S, W, groups, k
        with np.errstate(divide="ignore"):
            self.inv = np.where(a > 0, 1.0 / a, 0.0)  # time per unit of demand on each type
        self.banned = np.where(a > 0, 0.0, np.inf)
        self.flat = np.arange(n) * k
        self.slot = (np.arange(n) % groups) * k  # a job's group's first cell in the (groups, k) cut

    def at(self, q: np.ndarray):
        """(Σ_m c_m, cut (groups, k) of the loads / W, (first types, slow rows, their X))."""
        p = q / self.W
        ratio = self.inv * p[None, :] + self.banned
        j1 = np.argmin(ratio, axis=1)
        cell = self.flat + j1
        cost = self.S * ratio.ravel()[cell]
        time1 = self.inv.ravel()[cell]
        slow = np.flatnonzero(time1 > 1.0)
        load = self.S * time1 / self.W[j1]
        Xs = None
        if len(slow):
            Xs, cost[slow] = cheapest(self.a[slow], self.S[slow], p)
            load[slow] = 0.0
        cut = np.bincount(self.slot + j1, weights=load, minlength=self.groups * self.k)
        if len(slow):
            extra = self.S[slow, None] * Xs / self.W[None, :]
            cut += np.bincount((self.slot[slow, None] + np.arange(self.k)[None, :]).ravel(), weights=extra.ravel(),
                               minlength=self.groups * self.k)
        return float(cost.sum()), cut.reshape(self.groups, self.k), (j1, slow, Xs)

    def marginal(self, q: np.ndarray, j1: np.ndarray, slow: np.ndarray, Xs) -> np.ndarray:
        """Each job's cost of one more unit of a-share at its assignment: S p_j / a_j
        on one type (its cost: demand is one unit), ``_marginal`` for the others."""
        p = q / self.W
        out = self.S * p[j1] * self.inv[np.arange(len(j1)), j1]
        if len(slow):
            out[slow] = _marginal(self.a[slow], self.S[slow], p, Xs)
        return out


def _marginal(a: np.ndarray, S: np.ndarray, price: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Each job's cost of one more unit of a-share at its assignment X: S p_j / a_j
    on one type, S (p_hi − p_lo) / (a_hi − a_lo) on two with the time row full."""
    n = len(a)
    two = (X > 0).sum(axis=1) > 1
    rows = np.arange(n)
    j = np.argmax(X > 0, axis=1)
    out = S * price[j] / a[rows, j]
    if two.any():
        m = rows[two]
        order = np.argsort(np.where(X[m] > 0, a[m], -np.inf), axis=1)
        hi, lo = order[:, -1], order[:, -2]
        out[m] = S[m] * (price[hi] - price[lo]) / (a[m, hi] - a[m, lo])
    return out


class _CutMaster:
    """max Σ_G t_G s.t. t_G ≤ q·L_{G,i} for every cut i, Σ q = 1, q ≥ 0: one
    HiGHS model that grows a row per group and round (dual simplex from the last
    basis). Tolerances 1e-10: the level is read off its value."""

    def __init__(self, k: int, groups: int):
        import highspy

        self.k, self.groups = k, groups
        self.h = h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", 1)
        h.setOptionValue("primal_feasibility_tolerance", 1e-10)
        h.setOptionValue("dual_feasibility_tolerance", 1e-10)
        h.setOptionValue("presolve", "off")  # (each round starts from the last basis; presolve would start afresh)
        inf = highspy.kHighsInf
        h.addVars(k, np.zeros(k), np.full(k, inf))
        h.addVars(groups, np.full(groups, -inf), np.full(groups, inf))
        h.changeColsCost(groups, np.arange(k, k + groups, dtype=np.int32), -np.ones(groups))  # (min −Σ t)
        h.addRow(1.0, 1.0, k, np.arange(k, dtype=np.int32), np.ones(k))
        self.index = np.concatenate([np.r_[np.arange(k), k + g] for g in range(groups)]).astype(np.int32)

    def add(self, cut: np.ndarray) -> None:
        """Rows t_G − q·cut[r] ≤ 0, r = G·c + group for the c-th set of cuts."""
        import highspy

        R, k = cut.shape
        values = np.concatenate([-cut, np.ones((R, 1))], axis=1).reshape(-1)
        index = np.tile(self.index, R // self.groups)
        self.h.addRows(R, np.full(R, -highspy.kHighsInf), np.zeros(R), len(values),
                       np.arange(R, dtype=np.int32) * (k + 1), index, values)

    def solve(self):
        """(upper bound, next q) or None. Cuts with slack and no price leave the
        model once it holds more than KEEP_CUTS rows per group: a round's simplex
        work grows with the rows (0.3 ms at 17 rows, 1.1 ms at 400)."""
        import highspy

        self.h.run()
        if self.h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        sol = self.h.getSolution()
        x = np.asarray(sol.col_value)
        out = -float(self.h.getInfo().objective_function_value), np.maximum(x[: self.k], 0.0)
        rows = self.h.getNumRow()
        if rows > KEEP_CUTS * self.groups:
            slack = np.asarray(sol.row_value)[1:] < -1e-9 * max(abs(out[0]), 1.0)
            idle = np.flatnonzero(slack & (np.asarray(sol.row_dual)[1:] == 0)) + 1  # (row 0: Σ q = 1)
            if len(idle):
                self.h.deleteRows(len(idle), idle.astype(np.int32))
        return out
