"""Block LPs: the one form every fractional policy is written in.

A block LP has one row of variables per block (a job) over k columns (GPU
types), coupled only through k column capacities and one optional scalar z:

    maximize    Σ_mj C[m, j] X[m, j] + c_z · z
    subject to  Σ_j A[m, j] X[m, j] − g[m] · z ≥ l[m]     for rows m with has_row[m]   ("share" rows)
                Σ_j X[m, j] ≤ 1                                                        ("time" rows)
                Σ_m S[m] X[m, j] ≤ W[j]                                                ("capacity")
                X ≥ 0,  X[m, j] = 0 where not allowed[m, j],   z free.

Max-min fairness (z = the minimum share), its water-filling levels, makespan,
max throughput and cost with SLOs are all this program with different arrays,
so each formulation is a few lines of numpy and every solver here serves all
of them. Optional pair columns (space sharing) add a block Y[p, j] that enters
two rows' share and time rows and the capacities; they break the block
structure and go to a general LP backend.

Solvers (``solve(lp, backend=...)``; ``auto`` picks by size, see AUTO_IPM_ENTRIES):
- ``ipm``: a primal-dual interior-point method that
  exploits the structure. Its Newton system G'DG is block diagonal (one k×k
  block per job) plus k rank-one capacity terms plus the z border, so each
  iteration costs O(n k²) numpy work: batched k×k inverses, Woodbury for the
  capacities, a Schur complement for z. Like ECOS/Clarabel (and unlike a
  simplex vertex) it returns a point in the relative interior of the optimal
  face and strictly complementary duals, which water filling reads.
- ``clarabel``, ``highs-ipm``, ``highs-simplex``: the same program exported
  as sparse matrices (``to_matrix``) to a general backend (solvers/lp.py).
  ``ipm`` falls back to ``clarabel`` when it does not converge.
"""

from __future__ import annotations

import time
import dataclasses
from dataclasses import dataclass, field

import numpy as np

BLOCK_BACKENDS = ("auto", "ipm", "clarabel", "highs-ipm", "highs-simplex")
# ``auto`` by the number of X entries after merging identical jobs (measured on
# max-min instances, 2 cores): up to the bound CLARABEL's compiled LDL
# beats the IPM's per-iteration numpy overhead (100 jobs × 3 types 5 ms vs
# 11 ms; ~150 merged classes of 1,000 Gavel jobs 9 ms vs 23 ms); above it
# the IPM's O(n k²) iterations win (2,048 × 3: 0.10 vs 0.29 s). Small
# programs stay with CLARABEL even though its interface imports scipy.sparse
# (0.15–0.4 s in a cold process): a simulation solves thousands of them.
AUTO_IPM_ENTRIES = 3000
# A warm start (the previous water-filling round's prices) pays from this many
# entries on (hierarchical 1,000 × 3: 107 rounds, CLARABEL ~55 ms each, the
# crossover ~10 ms); Gavel-table rounds merge far below it and stay with CLARABEL.
WARM_ENTRIES = 1000
MERGE_BELOW = 0.9  # merge identical rows only when the classes are at most this fraction of the rows


@dataclass(frozen=True)
class PairBlock:
    """Pair columns Y[p, j] (space sharing): pair p = (pairs[p, 0], pairs[p, 1])
    packed on type j adds share[p, j, r] to the share row of its r-th member,
    counts in both members' time rows and uses S_pair[p] GPUs of type j."""

    pairs: np.ndarray  # (p, 2) row indices
    share: np.ndarray  # (p, k, 2) share-row coefficients of each member
    allowed: np.ndarray  # (p, k) bool
    S: np.ndarray  # (p,)
    C: np.ndarray  # (p, k) objective coefficients


@dataclass(frozen=True)
class BlockLP:
    A: np.ndarray  # (n, k) share-row coefficients
    S: np.ndarray  # (n,) capacity used per unit of X[m, j]
    W: np.ndarray  # (k,) capacities
    allowed: np.ndarray  # (n, k) bool
    C: np.ndarray | None = None  # (n, k) objective on X (None: 0)
    c_z: float = 0.0  # objective on z
    g: np.ndarray | None = None  # (n,) z's coefficient in the share rows (None: no z)
    lower: np.ndarray | None = None  # (n,) right-hand sides l (None: 0)
    has_row: np.ndarray | None = None  # (n,) bool, which share rows exist (None: all, if g or lower is given)
    pairs: PairBlock | None = None

    @property
    def n(self) -> int:
        return self.A.shape[0]

    @property
    def k(self) -> int:
        return self.A.shape[1]

    @property
    def has_z(self) -> bool:
        return self.g is not None

    def rows(self) -> np.ndarray:
        if self.has_row is not None:
            return self.has_row
        return np.full(self.n, self.g is not None or self.lower is not None)

    def objective_X(self) -> np.ndarray:
        return np.zeros((self.n, self.k)) if self.C is None else self.C


@dataclass(frozen=True)
class BlockSolution:
    ok: bool
    status: str  # "optimal", "infeasible", "time_limit", "error"
    X: np.ndarray | None
    z: float
    Y: np.ndarray | None  # pair fractions, when the LP has pairs
    value: float  # the maximized objective
    share_dual: np.ndarray | None  # (n,) multipliers of the share rows (>= 0)
    price: np.ndarray | None  # (k,) capacity multipliers: objective gained per unit of W_j
    seconds: float
    backend: str
    iterations: int = 0
    message: str = ""
    info: dict = field(default_factory=dict)


def solve(lp: BlockLP, backend: str = "auto", time_limit: float = 60.0, interior: bool = False,
          warm: tuple | None = None) -> BlockSolution:
    """Solve; never raises for solver trouble (ok=False and a message instead).
    Identical rows are merged first (exact, see identical_rows). ``seconds``
    excludes loading the backend's modules in a cold process, reported apart
    as ``info["import_seconds"]``. ``interior=True`` asks for strictly
    complementary duals (water filling reads them): no crossover to a vertex
    from the IPM's own iterate. ``warm`` = (prices per type, level[, slacks])
    of a similar program solved before (the previous water-filling round, a
    sibling POP partition): large programs of the max-min family then try a
    crossover from them first, once per slack (default WARM_SLACK), widest last."""

    if backend not in BLOCK_BACKENDS:
        raise ValueError(f"unknown backend {backend!r} (choose from {', '.join(BLOCK_BACKENDS)})")
    t0 = time.perf_counter()
    target, expand = lp, None
    if lp.pairs is None and lp.n > 1:
        classes, inverse, counts = identical_rows(lp)
        # Merge when it shrinks the program: a few large classes among distinct
        # rows gain nothing and their count·S entries worsen the IPM's scaling
        # (100k × 3 congested: 99,071 classes, the IPM stalled merged, converged not).
        if len(counts) <= MERGE_BELOW * lp.n:
            target, expand = _merged(lp, classes, counts), (inverse, counts)
    requested = backend
    backend = _chosen(target, backend)
    if requested == "auto" and warm is not None and target.pairs is None and target.n * target.k >= WARM_ENTRIES:
        backend = "ipm"  # the warm crossover, then the IPM, beat CLARABEL from this size on (the IPM path tries it)
    sol, imports = None, 0.0
    if requested == "auto" and backend == "clarabel" and exact_first(target, interior):
        # The max-min family's exact shortcuts first, then CLARABEL if they decline (loaded only then).
        imports = load_modules(EXACT_MODULES)
        from optsched.solvers import block_exact

        deadline = t0 + imports + time_limit
        with np.errstate(all="ignore"):
            data = block_exact.program_data(target)
            sol = block_exact.uncongested(target, data) or block_exact.level_search(target, deadline, data)
        if sol is not None:
            sol = dataclasses.replace(sol, seconds=time.perf_counter() - t0 - imports)
    if sol is None:
        more = _load_backend(backend)
        sol = _solve(target, backend, time_limit, t0 + imports + more, interior, warm)
        imports += more
    if expand is not None:
        sol = _expand(sol, *expand, t0 + imports)
    imports += sol.info.get("import_seconds", 0.0)
    return dataclasses.replace(sol, info={**sol.info, "import_seconds": imports}) if imports else sol


def exact_first(lp: BlockLP, interior: bool = False) -> bool:
    """``auto`` tries the max-min family's exact shortcuts (solvers/block_exact.py:
    uncongested, level search) before CLARABEL on a program of WARM_ENTRIES+ entries.
    The IPM path always tries them first; CLARABEL took every program up to
    AUTO_IPM_ENTRIES, a bound measured against the IPM's iterations, not against the
    shortcuts, so 1,000 distinct jobs × 3 types went to CLARABEL at 0.06 s where the
    shortcuts take 0.003 s (1,024 × 3 took the IPM path: 0.01 s). Measured on distinct
    rows (2 cores, CPU s, shortcuts vs CLARABEL, congested and not): 300 × 3
    0.0015-0.0046 vs 0.014-0.018, 1,000 × 3 0.003-0.006 vs 0.07-0.08, 600 × 5
    0.002-0.008 vs 0.07. Below WARM_ENTRIES both take a few ms, and CLARABEL's interior
    point stays: the class programs of simulations on Gavel's table (a few hundred
    entries, solved thousands of times) keep the allocations they always had."""
    if lp.pairs is not None or interior or lp.n * lp.k < WARM_ENTRIES:
        return False
    from optsched.solvers import block_exact

    return block_exact.applicable(lp)


def _chosen(lp: BlockLP, backend: str) -> str:
    if backend != "auto":
        return backend
    if lp.pairs is not None:
        return "highs-ipm"
    return "clarabel" if lp.n * lp.k <= AUTO_IPM_ENTRIES else "ipm"


def load_modules(modules) -> float:
    """Import ``modules`` (names) that a cold process has not loaded yet; the seconds
    it took. Callers time imports apart, so no solve time counts a cold start."""
    import sys

    if all(m in sys.modules for m in modules):
        return 0.0
    import importlib

    t0 = time.perf_counter()
    for m in modules:
        importlib.import_module(m)
    return time.perf_counter() - t0


EXACT_MODULES = ("optsched.solvers.lp", "highspy")  # the exact shortcuts and crossovers: HiGHS, no scipy


def _load_backend(backend: str) -> float:
    """Import what ``backend`` needs (the IPM: numpy only); seconds it took."""
    # (the general backends take the program through to_matrix: scipy.sparse)
    return load_modules({"ipm": (), "clarabel": ("optsched.solvers.lp", "clarabel", "scipy.sparse")}.get(
        backend, ("optsched.solvers.lp", "highspy", "scipy.sparse")))


def preload(lp: BlockLP, backend: str = "auto") -> float:
    """Load the modules ``solve(lp, backend)`` may use, before the caller's timer
    starts; seconds it took. ``auto`` and the IPM may end on CLARABEL or HiGHS whatever
    the size: merged identical rows make a smaller program, the IPM hands over to
    CLARABEL and crosses over with HiGHS, and formulations solving a loop of programs
    (finish-time fairness) solve smaller ones. Programs the IPM path takes load HiGHS
    only (its exact shortcuts: no scipy, ~0.2 s cold); should one fall through to
    CLARABEL, that import is timed apart there (``import_seconds`` of the solution)."""
    chosen = _chosen(lp, backend)
    if backend == "auto" and chosen == "clarabel" and exact_first(lp):
        return load_modules(EXACT_MODULES)  # (CLARABEL and scipy load only if the shortcuts decline, timed apart)
    seconds = _load_backend(chosen)
    if backend in ("auto", "ipm") and lp.pairs is None:  # (the IPM's crossover and exact rounds use HiGHS)
        seconds += load_modules(EXACT_MODULES)
    return seconds


def _solve(lp: BlockLP, backend: str, time_limit: float, t0: float, interior: bool = False, warm=None) -> BlockSolution:
    if backend == "ipm" and lp.pairs is None:
        from optsched.solvers import block_exact

        deadline = t0 + time_limit
        shortcut = block_exact.applicable(lp)
        data = block_exact.program_data(lp) if shortcut else None
        with np.errstate(all="ignore"):
            sol = block_exact.uncongested(lp, data) if shortcut else None
            for slack in (warm[2] if warm is not None and len(warm) > 2 else (WARM_SLACK,)):
                if sol is not None or not shortcut or warm is None:
                    break
                sol = block_exact.crossover(lp, warm[0], warm[1], slack, deadline)  # failing rungs stop early
            # A caller that passes a warm start takes a vertex (its duals prove every job they
            # price stuck, water filling reads them so): the level search's prices serve it as
            # well as the warm ones, and far better when those were poor (0.05 s of IPM at 1,000 × 3).
            if sol is None and shortcut and (not interior or warm is not None):
                sol = block_exact.level_search(lp, deadline, data)
            if sol is None and shortcut and warm is None and not interior and lp.n * lp.k >= SAMPLE_ENTRIES:
                sol = _sampled_crossover(lp, deadline)
        if sol is not None:
            return sol
        cross = None
        if shortcut and not interior:
            cross = lambda price, level, slack: block_exact.crossover(lp, price, level, slack, deadline)  # noqa: E731
        try:
            with np.errstate(all="ignore"):
                sol = _ipm(lp, deadline=deadline, crossover=cross)
        except np.linalg.LinAlgError as e:  # a singular Newton system: let the general backend decide
            sol = BlockSolution(False, "error", None, float("nan"), None, float("nan"), None, None,
                                time.perf_counter() - t0, "ipm", message=f"block IPM: {e}")
        if sol.ok:
            return sol
        if shortcut and "price" in sol.info and time.perf_counter() < deadline:
            # A stalled IPM's best iterate is usually close (near-degenerate rounds lose
            # the dual residual's last digits): a crossover from it may still certify.
            gap = max(1e-4, CROSSOVER_SLACK * min(sol.info["gap"], CROSSOVER_GAP))
            with np.errstate(all="ignore"):
                vertex = block_exact.crossover(lp, sol.info["price"], sol.info["z"], gap, deadline)
            if vertex is not None:
                return dataclasses.replace(vertex, seconds=time.perf_counter() - t0, iterations=sol.iterations)
        import logging

        logging.getLogger("optsched.solvers").info("block IPM: %s; solving with clarabel", sol.message)
        tried = sol.message  # a failure names every backend tried, in order
        late = _load_backend("clarabel")  # (preload leaves scipy out of the IPM's path; timed apart)
        deadline += late
        sol = _matrix_solve(lp, "clarabel", max(deadline - time.perf_counter(), 1e-3))
        if late:
            sol = dataclasses.replace(sol, info={**sol.info, "import_seconds": late})
        if sol.ok:
            return sol
        tried = f"{tried}; {sol.message}"
        if sol.status == "time_limit" or time.perf_counter() > deadline:
            return dataclasses.replace(sol, message=tried)
        # Badly scaled water-filling rounds (rows divided by tiny levels, entries ~1e4)
        # where CLARABEL reports a feasible program infeasible: HiGHS decides.
        logging.getLogger("optsched.solvers").info("clarabel: %s; solving with highs-ipm", sol.message)
        sol = _matrix_solve(lp, "highs-ipm", max(deadline - time.perf_counter(), 1e-3))
        return sol if sol.ok else dataclasses.replace(sol, message=f"{tried}; {sol.message}")
    elif backend == "ipm":
        backend = "highs-ipm"  # pair columns couple rows: a general sparse backend
    return _matrix_solve(lp, backend, max(t0 + time_limit - time.perf_counter(), 1e-3))


# Very large congested programs: prices from a random quarter of the jobs with a
# quarter of every capacity (the program POP would solve), then an exact
# crossover on the whole program from them (bounded by its work limits); the IPM
# only if that fails. Measured at 100,000 × 5 congested: sample
# 1.45 s + crossover 1.05 s against 7.9 s for the IPM, the same optimum.
SAMPLE_ENTRIES = 200_000
SAMPLE_FRACTION = 0.25
SAMPLE_SLACKS = (1e-2, 3e-2)


def _sampled_crossover(lp: BlockLP, deadline: float):
    from optsched.solvers import block_exact

    t0 = time.perf_counter()
    rng = np.random.default_rng(0)  # deterministic: the same program, the same sample
    take = np.sort(rng.choice(lp.n, size=max(1, int(lp.n * SAMPLE_FRACTION)), replace=False))
    pick = lambda v: None if v is None else np.asarray(v)[take]  # noqa: E731
    sample = dataclasses.replace(lp, A=lp.A[take], S=pick(lp.S), allowed=lp.allowed[take], C=pick(lp.C),
                                 g=pick(lp.g), lower=pick(lp.lower), has_row=pick(lp.has_row),
                                 W=np.asarray(lp.W, dtype=float) * SAMPLE_FRACTION)
    sol = solve(sample, backend="auto", time_limit=max(deadline - t0, 1e-3))
    if not sol.ok or sol.price is None or not np.any(sol.price > 0):
        return None
    # Bounded by the crossover's own work limits (rounds, rows, master pivots), never by a
    # multiple of the sample's wall time: that made the path depend on the machine's load.
    for slack in SAMPLE_SLACKS:
        vertex = block_exact.crossover(lp, sol.price, sol.z, slack, deadline)
        if vertex is not None:
            return dataclasses.replace(vertex, seconds=time.perf_counter() - t0, backend="sample+crossover")
    return None


# ---------------------------------------------------------------------------
# Identical rows: one class row per group of interchangeable jobs
# ---------------------------------------------------------------------------
#
# Rows with the same data (A, allowed, S, C, g, l) are interchangeable: the LP
# is invariant under permuting them, its optimal set is convex, so averaging
# an optimum over those permutations gives an optimum in which they are equal.
# One class row with capacity use count·S and objective count·C finds it
# exactly. Traces draw jobs from a few dozen models and scale factors (Gavel's
# table: 26 job types), so thousands of jobs collapse to a few hundred rows.


def identical_rows(lp: BlockLP) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first row of each class, class of every row, class sizes)."""
    n = lp.n
    cols = [lp.A, lp.allowed.astype(float), np.asarray(lp.S, dtype=float)[:, None], lp.rows().astype(float)[:, None]]
    if lp.C is not None:
        cols.append(lp.C)
    if lp.g is not None:
        cols.append(np.asarray(lp.g, dtype=float)[:, None])
    if lp.lower is not None:
        cols.append(np.asarray(lp.lower, dtype=float)[:, None])
    key = np.concatenate(cols, axis=1)
    order = _row_order(key)
    if order is None:  # no two projections equal, so no two rows: every row its own class
        return np.arange(n), np.arange(n), np.ones(n, dtype=np.int64)
    ordered = key[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    starts = np.flatnonzero(new)
    return order[starts], inverse, np.diff(np.append(starts, n))


def _row_order(key: np.ndarray) -> np.ndarray | None:
    """An order of the rows that puts equal rows next to each other (None when
    no two rows project alike, so none are equal): by a
    random projection (one float sort, ~4× a lexsort over every column), then
    by every column within the rare runs of equal projections (different
    rows that round to the same projection must not split a group of equal
    ones). Summed column by column, so equal rows project to bit-equal floats
    whatever their memory alignment."""
    weights = np.random.default_rng(12345).uniform(0.5, 1.5, key.shape[1])
    projection = np.zeros(len(key))
    for c in range(key.shape[1]):
        projection += key[:, c] * weights[c]
    order = np.argsort(projection, kind="stable")
    p = projection[order]
    tie = p[1:] == p[:-1]
    if not tie.any():
        return None  # (distinct rows: the caller needs no order)
    mixed = tie & (key[order[1:]] != key[order[:-1]]).any(axis=1)
    if mixed.any():
        starts = np.flatnonzero(np.diff(np.r_[False, tie, False].astype(np.int8)) == 1)
        ends = np.flatnonzero(np.diff(np.r_[False, tie, False].astype(np.int8)) == -1) + 1
        for a, b in zip(starts, ends):
            if mixed[a : b - 1].any():
                run = order[a:b]
                order[a:b] = run[np.lexsort(key[run].T[::-1])]
    return order


def _merged(lp: BlockLP, first: np.ndarray, counts: np.ndarray) -> BlockLP:
    pick = lambda v: None if v is None else np.asarray(v)[first]  # noqa: E731
    return BlockLP(
        A=lp.A[first], S=np.asarray(lp.S, dtype=float)[first] * counts, W=lp.W, allowed=lp.allowed[first],
        C=None if lp.C is None else lp.C[first] * counts[:, None], c_z=lp.c_z, g=pick(lp.g), lower=pick(lp.lower),
        has_row=pick(lp.has_row),
    )


def _expand(sol: BlockSolution, inverse: np.ndarray, counts: np.ndarray, t0: float) -> BlockSolution:
    """Class solution -> every member's row; a class's share multiplier splits evenly."""

    if not sol.ok:
        return dataclasses.replace(sol, seconds=time.perf_counter() - t0)
    share_dual = None if sol.share_dual is None else (sol.share_dual / counts)[inverse]
    return dataclasses.replace(sol, X=sol.X[inverse], share_dual=share_dual, seconds=time.perf_counter() - t0,
                               info={**sol.info, "classes": int(len(counts))})


# ---------------------------------------------------------------------------
# General backends: the block LP as sparse matrices
# ---------------------------------------------------------------------------


def to_matrix(lp: BlockLP):
    """(c, A_ub, b_ub, lb, ub) of ``minimize c'v s.t. A_ub v <= b_ub, lb <= v <= ub``
    with v = [vec(X) row-major, vec(Y) row-major, z]; rows: share rows (negated),
    time rows, capacity rows."""
    import scipy.sparse as sp

    n, k = lp.n, lp.k
    p = 0 if lp.pairs is None else len(lp.pairs.pairs)
    nx, ny = n * k, p * k
    nz = 1 if lp.has_z else 0
    rows = np.flatnonzero(lp.rows())
    r = len(rows)
    row_of = np.full(n, -1)
    row_of[rows] = np.arange(r)
    m_idx, j_idx = np.nonzero(lp.allowed)
    x_col = m_idx * k + j_idx
    I, J, V = [], [], []
    # Share rows (as <=): -A X - pairs + g z <= -l.
    in_row = row_of[m_idx] >= 0
    I.append(row_of[m_idx[in_row]]), J.append(x_col[in_row]), V.append(-lp.A[m_idx[in_row], j_idx[in_row]])
    if nz and r:
        I.append(np.arange(r)), J.append(np.full(r, nx + ny)), V.append(lp.g[rows])
    # Time rows, capacity rows.
    I.append(r + m_idx), J.append(x_col), V.append(np.ones(len(x_col)))
    I.append(r + n + j_idx), J.append(x_col), V.append(lp.S[m_idx].astype(float))
    if p:
        pb = lp.pairs
        q_idx, pj = np.nonzero(pb.allowed)
        y_col = nx + q_idx * k + pj
        for role in (0, 1):
            member = pb.pairs[q_idx, role]
            has = row_of[member] >= 0
            I.append(row_of[member[has]]), J.append(y_col[has]), V.append(-pb.share[q_idx[has], pj[has], role])
            I.append(r + member), J.append(y_col), V.append(np.ones(len(y_col)))
        I.append(r + n + pj), J.append(y_col), V.append(pb.S[q_idx].astype(float))
    A_ub = sp.csc_matrix(
        (np.concatenate(V), (np.concatenate(I), np.concatenate(J))), shape=(r + n + k, nx + ny + nz)
    )
    lower = np.zeros(n) if lp.lower is None else lp.lower
    b_ub = np.concatenate([-lower[rows], np.ones(n), lp.W])
    c = np.zeros(nx + ny + nz)
    c[:nx] = -lp.objective_X().reshape(-1)
    if p:
        c[nx : nx + ny] = -lp.pairs.C.reshape(-1)
    if nz:
        c[-1] = -lp.c_z
    ub = np.concatenate([lp.allowed.reshape(-1).astype(float), np.zeros(ny) if not p else lp.pairs.allowed.reshape(-1).astype(float), np.full(nz, np.inf)])
    lb = np.concatenate([np.zeros(nx + ny), np.full(nz, -np.inf)])
    return c, A_ub, b_ub, lb, ub, rows


def _matrix_solve(lp: BlockLP, backend: str, time_limit: float) -> BlockSolution:
    from optsched.solvers.lp import solve_lp

    t0 = time.perf_counter()
    c, A_ub, b_ub, lb, ub, rows = to_matrix(lp)
    sol = solve_lp(c, A_ub, b_ub, lb=lb, ub=ub, backend=backend, time_limit=time_limit)
    n, k = lp.n, lp.k
    if not sol.ok:
        return BlockSolution(False, sol.status, None, float("nan"), None, float("nan"), None, None,
                             time.perf_counter() - t0, backend, message=sol.message)
    x = sol.x
    X = np.clip(x[: n * k].reshape(n, k), 0.0, None)
    Y = None
    if lp.pairs is not None:
        p = len(lp.pairs.pairs)
        Y = np.clip(x[n * k : n * k + p * k].reshape(p, k), 0.0, None)
    z = float(x[-1]) if lp.has_z else float("nan")
    share_dual = np.zeros(n)
    share_dual[rows] = sol.dual_ub[: len(rows)]
    price = sol.dual_ub[len(rows) + n :]
    return BlockSolution(True, "optimal", X, z, Y, -sol.value, share_dual, price,
                         time.perf_counter() - t0, backend)


# ---------------------------------------------------------------------------
# The structured interior-point method
# ---------------------------------------------------------------------------
#
# Standard form: minimize q'v subject to G v + s = h, s >= 0 (dual λ >= 0,
# q + G'λ = 0), with v = (x = X on allowed entries, z) and four row groups:
#   R0  -x          <= 0          (one row per allowed entry)
#   R1  -A_m x_m + g_m z <= -l_m  (share rows)
#   R2  Σ_j x_mj    <= 1          (time rows)
#   R3  Σ_m S_m x_mj / W_j <= 1   (capacity rows, scaled to 1 for conditioning)
# Mehrotra predictor-corrector on the normal equations (G'DG) Δv = rhs,
# D = diag(λ/s), solved blockwise as described in the module docstring.

MAX_ITERATIONS = 60
FEASIBILITY_TOL = 1e-9  # relative primal and dual residuals
GAP_TOL = 1e-8  # relative duality gap
STEP = 0.99  # fraction of the step to the boundary
STALL_WINDOW = 15  # iterations without a twofold gain in merit: stalled
REFINEMENTS = 1
# A best iterate within this factor of the tolerances is accepted when the
# iterations stall (~1e-7 relative: what Clarabel's "almost solved" accepts).
ACCEPT_MERIT = 100.0
# Crossover (solvers/block_exact.py) starts once every residual, in units of the
# gap tolerance, is below this: ~2/3 of the iterations, prices good to ~1e-3.
CROSSOVER_GAP = 1e-3
# Candidates for two types at the hand-over: types within this many gaps of a
# job's cheapest (measured, max-min 10k-100k x 5 congested: 3 misses the optimum's
# split jobs at 10k and the IPM goes on; 30 makes the master 20 % slower at 100k).
CROSSOVER_SLACK = 10.0
# Candidates for two types, from a warm start's prices: types within this
# relative cost of a job's cheapest (consecutive water-filling rounds: ~1e-3 apart).
WARM_SLACK = 1e-3


@dataclass
class _Problem:
    """The block LP in the IPM's standard form (minimization, scaled capacity
    rows). Slacks and multipliers are flat vectors laid out as
    [R0 on allowed entries | R1 on existing share rows | R2 (n) | R3 (k)]."""

    A: np.ndarray  # (n, k), zero where not allowed or no share row
    g: np.ndarray  # (n,)
    Sa: np.ndarray  # (n, k) S_m / W_j on allowed entries
    qx: np.ndarray  # (n, k) -C
    qz: float
    allowed: np.ndarray  # (n, k) bool
    entries: np.ndarray  # flat indices of allowed entries
    rows: np.ndarray  # indices of share rows
    h: np.ndarray  # right-hand side, flat
    has_z: bool
    both: np.ndarray = None  # (n, k, k) both entries allowed, as 0/1
    AA: np.ndarray = None  # (n, k, k) A_mj A_ml, constant over the iterations
    dense: bool = False  # every entry allowed and every share row present: no scatter/gather

    @classmethod
    def of(cls, lp: BlockLP) -> "_Problem":
        allowed = np.asarray(lp.allowed, dtype=bool)
        has_row = lp.rows().astype(bool)
        W = np.maximum(np.asarray(lp.W, dtype=float), 1e-300)
        rows = np.flatnonzero(has_row)
        lower = np.zeros(lp.n) if lp.lower is None else np.asarray(lp.lower, dtype=float)
        entries = np.flatnonzero(allowed)
        h = np.concatenate([np.zeros(len(entries)), -lower[rows], np.ones(lp.n), np.ones(lp.k)])
        return cls(
            A=np.where(allowed & has_row[:, None], lp.A, 0.0),
            g=np.where(has_row, lp.g, 0.0) if lp.has_z else np.zeros(lp.n),
            Sa=np.where(allowed, np.asarray(lp.S, dtype=float)[:, None] / W[None, :], 0.0),
            qx=np.where(allowed, -lp.objective_X(), 0.0), qz=-float(lp.c_z), allowed=allowed,
            entries=entries, rows=rows, h=h, has_z=lp.has_z,
            both=(allowed[:, :, None] & allowed[:, None, :]).astype(float),
            dense=bool(allowed.all() and has_row.all()),
        )

    def __post_init__(self):
        if self.AA is None:
            self.AA = self.A[:, :, None] * self.A[:, None, :]

    def split(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Flat row vector -> (R0 as (n, k) with zeros elsewhere, R1 as (n,), R2, R3)."""
        n, k = self.A.shape
        e, r = len(self.entries), len(self.rows)
        if self.dense:
            return v[:e].reshape(n, k), v[e : e + r], v[e + r : e + r + n], v[e + r + n :]
        v0 = np.zeros(n * k)
        v0[self.entries] = v[:e]
        v1 = np.zeros(n)
        v1[self.rows] = v[e : e + r]
        return v0.reshape(n, k), v1, v[e + r : e + r + n], v[e + r + n :]

    def G(self, x: np.ndarray, z: float) -> np.ndarray:
        share = -(self.A * x).sum(axis=1) + self.g * z
        if self.dense:
            return np.concatenate([-x.reshape(-1), share, x.sum(axis=1), (self.Sa * x).sum(axis=0)])
        return np.concatenate([-x.reshape(-1)[self.entries], share[self.rows], x.sum(axis=1), (self.Sa * x).sum(axis=0)])

    def GT(self, t: np.ndarray) -> tuple[np.ndarray, float]:
        t0, t1, t2, t3 = self.split(t)
        gx = -t0 - t1[:, None] * self.A + t2[:, None] + t3[None, :] * self.Sa
        return (gx if self.dense else np.where(self.allowed, gx, 0.0)), _dot(self.g, t1)

class _Newton:
    """Solves (G'DG) Δv = r for one D = diag(w).

    Per job, H_m = R_m + w1_m a_m a_m' with R_m = diag(w0_m) + w2_m e e' (x >= 0
    and time rows) and a_m the share row: batched k×k LU (numpy), which stays
    accurate where Sherman–Morrison's subtractions lose digits. The k
    capacity rows and z couple the jobs: they are eliminated into one small
    (k+1)×(k+1) system. z's entry there, h_zz − b'H⁻¹b, would cancel
    catastrophically near the optimum if computed as written; it is summed as
    Σ_m w1 g² / (1 + w1 ρ_m), ρ_m = a_m' R_m⁻¹ a_m, which is exact and positive.
    """

    def __init__(self, P: _Problem, w_flat: np.ndarray):
        self.P = P
        self.w_flat = w_flat
        w = _Split(*P.split(w_flat))
        self.w = w
        k = P.A.shape[1]
        A = P.A
        reg = 1e-13 * (w.r0.max(axis=1) + w.r2 + w.r1 * (A * A).sum(axis=1)) + 1e-300  # relative regularization
        w0 = w.r0 + reg[:, None]
        # H_m = diag(w0) + w2 e e' + w1 a a' on allowed entries, identity on entries fixed at 0
        # (A and ``both`` vanish there).
        H = w.r1[:, None, None] * P.AA + w.r2[:, None, None] * P.both
        H.reshape(len(H), k * k)[:, :: k + 1] += np.where(P.allowed, w0, 1.0)
        self.Hinv = _spd_inverse(H)
        # ρ = a' R⁻¹ a, R = diag(w0) + w2 e e', in a form with no subtraction:
        # (Σ d a² + w2 · Σ_{j<l} d_j d_l (a_j − a_l)²) / (1 + w2 Σ d),  d = 1/w0.
        d = np.where(P.allowed, 1.0 / w0, 0.0)
        spread = np.zeros(len(d))
        for j in range(k - 1):
            spread += d[:, j] * (d[:, j + 1 :] * (A[:, j + 1 :] - A[:, j : j + 1]) ** 2).sum(axis=1)
        rho = ((d * A * A).sum(axis=1) + w.r2 * spread) / (1.0 + w.r2 * d.sum(axis=1))
        denom = 1.0 + w.r1 * rho
        self.BinvV = self.Hinv * P.Sa[:, None, :]  # column j: H_m⁻¹ (Sa_mj e_j)
        K = np.diag(1.0 / np.maximum(w.r3, 1e-300)) + np.einsum("mj,mjl->jl", P.Sa, self.BinvV)
        if P.has_z:
            self.Binv_b = -(w.r1 * P.g)[:, None] * np.einsum("mjl,ml->mj", self.Hinv, A)  # H_m⁻¹ b_m, b_m = -w1 g a_m
            c = (P.Sa * self.Binv_b).sum(axis=0)
            system = np.zeros((k + 1, k + 1))
            system[:k, :k], system[:k, k], system[k, :k] = K, c, -c
            system[k, k] = float((w.r1 * P.g * P.g / denom).sum())
        else:
            system = K
        self.system_inv = np.linalg.inv(system)

    def _direct(self, rx: np.ndarray, rz: float) -> tuple[np.ndarray, float]:
        P = self.P
        k = P.A.shape[1]
        t = np.einsum("mjl,ml->mj", self.Hinv, rx)  # B⁻¹ rx
        rhs = (P.Sa * t).sum(axis=0)
        if P.has_z:
            rhs = np.append(rhs, rz + float(((self.w.r1 * P.g)[:, None] * P.A * t).sum()))
        sol = self.system_inv @ rhs
        dx = t - np.einsum("mjl,l->mj", self.BinvV, sol[:k])
        dz = 0.0
        if P.has_z:
            dz = float(sol[k])
            dx = dx - self.Binv_b * dz
        return np.where(P.allowed, dx, 0.0), dz

    def solve(self, rx: np.ndarray, rz: float, refinements: int = REFINEMENTS) -> tuple[np.ndarray, float]:
        """Direct solve plus iterative refinement: near the optimum D spans many
        orders of magnitude and the elimination loses digits; the residual,
        computed with G and G' directly, wins them back."""
        dx, dz = self._direct(rx, rz)
        for _ in range(refinements):
            hx, hz = self.P.GT(self.w_flat * self.P.G(dx, dz))
            ex, ez = self._direct(rx - hx - 1e-12 * dx, rz - hz)
            dx, dz = dx + ex, dz + ez
        return dx, dz


@dataclass
class _Split:
    r0: np.ndarray
    r1: np.ndarray
    r2: np.ndarray
    r3: np.ndarray


def _spd_inverse(H: np.ndarray) -> np.ndarray:
    """Inverses of a stack (n, k, k) of symmetric positive definite matrices:
    Cholesky, then the inverse of the factor, each entry a vector op over the
    n matrices (batch last, contiguous). 2–3× faster than np.linalg.inv's
    per-matrix LAPACK calls for k ≤ 8; as stable as LU on SPD matrices (no
    pivoting is needed: every pivot is a Schur complement of an SPD matrix)."""
    n, k, _ = H.shape
    if k > 8:
        return np.linalg.inv(H)
    M = np.ascontiguousarray(H.transpose(1, 2, 0))
    L = [[None] * k for _ in range(k)]
    for j in range(k):
        d = M[j, j] - sum(L[j][p] * L[j][p] for p in range(j)) if j else M[j, j]
        L[j][j] = np.sqrt(d)
        inv = 1.0 / L[j][j]
        for i in range(j + 1, k):
            v = M[i, j] - sum(L[i][p] * L[j][p] for p in range(j)) if j else M[i, j]
            L[i][j] = v * inv
    R = [[None] * k for _ in range(k)]  # R = L⁻¹, lower triangular
    for j in range(k):
        R[j][j] = 1.0 / L[j][j]
        for i in range(j + 1, k):
            R[i][j] = -sum(L[i][p] * R[p][j] for p in range(j, i)) / L[i][i]
    out = np.empty((k, k, n))
    for j in range(k):  # H⁻¹ = R' R
        for l in range(j + 1):
            v = sum(R[p][j] * R[p][l] for p in range(j, k))
            out[j, l] = v
            out[l, j] = v
    return np.ascontiguousarray(out.transpose(2, 0, 1))


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """a·b without BLAS: OpenBLAS threads its dot above ~10⁴ entries, and on a
    shared machine those threads wait for cores (3× slower at 10k jobs, load 5)."""
    return float(np.multiply(a, b).sum())


def _max_step(v: np.ndarray, dv: np.ndarray) -> float:
    """Largest α <= 1 with v + α dv >= 0."""
    neg = dv < 0
    return min(1.0, float(np.min(-v[neg] / dv[neg]))) if neg.any() else 1.0


def _ipm(lp: BlockLP, deadline: float, crossover=None) -> BlockSolution:
    """``crossover(price, level, slack)``, when given, is tried once the gap is
    below CROSSOVER_GAP: a certified optimal vertex ends the run early."""

    t0 = time.perf_counter()
    n, k = lp.n, lp.k
    if n == 0:
        return BlockSolution(True, "optimal", np.zeros((0, k)), 0.0, None, 0.0, np.zeros(0), np.zeros(k), 0.0, "ipm")
    P = _Problem.of(lp)
    x, z = _start(P)
    s = np.maximum(P.h - P.G(x, z), 1.0)
    lam = np.ones_like(s)
    count = len(s)
    scale_p = 1.0 + float(np.abs(P.h).max())
    scale_d = 1.0 + max(float(np.abs(P.qx).max()), abs(P.qz))
    best, best_merit, status, it = None, np.inf, "iteration limit", 0
    history: list[float] = []  # best merit after each iteration
    for it in range(1, MAX_ITERATIONS + 1):
        gx, gz = P.GT(lam)
        rdx, rdz = P.qx + gx, P.qz + gz
        rp = P.G(x, z) + s - P.h
        mu = _dot(s, lam) / count
        pobj = float((P.qx * x).sum() + P.qz * z)
        dobj = -_dot(P.h, lam)
        merit = max(
            float(np.abs(rp).max()) / scale_p / FEASIBILITY_TOL,
            max(float(np.abs(rdx).max()), abs(rdz)) / scale_d / FEASIBILITY_TOL,
            abs(pobj - dobj) / (1.0 + abs(pobj)) / GAP_TOL,
        )
        if not np.isfinite(merit):
            status = "numerical trouble"
            break
        if merit < best_merit:
            best, best_merit = (x, z, lam), merit
        if merit <= 1.0:
            status = "optimal"
            break
        if crossover is not None and merit * GAP_TOL <= CROSSOVER_GAP:
            gap = abs(pobj - dobj) / (1.0 + abs(pobj))
            _, _, _, cap = P.split(lam)
            vertex = crossover(cap / np.maximum(np.asarray(lp.W, dtype=float), 1e-300), z, max(1e-4, CROSSOVER_SLACK * gap))
            if vertex is not None:
                return dataclasses.replace(vertex, seconds=time.perf_counter() - t0, iterations=it)
            crossover = None  # once: the iterations go on
        history.append(best_merit)
        # No twofold progress in 15 iterations: an infeasible program (the IPM has
        # no certificate; the general backend proves it) or numerics gone flat.
        # (Tenfold in 10 was too strict: near-degenerate water-filling rounds pass
        # through slow phases, 36-48 iterations in all, and converge.)
        stalled = merit > 1e6 * best_merit or (it > STALL_WINDOW and best_merit > 0.5 * history[-STALL_WINDOW - 1])
        # At the limit of double precision (the best iterate already acceptable and
        # two iterations without improving it) more iterations only add noise.
        stalled |= best_merit <= ACCEPT_MERIT and len(history) > 2 and history[-3] == best_merit
        if stalled or time.perf_counter() > deadline:
            status = "stalled" if stalled else "time_limit"
            break
        w = lam / s
        newton = _Newton(P, w)

        def direction(rc: np.ndarray, refinements: int = REFINEMENTS):
            t = w * (rp + rc / lam)
            tx, tz = P.GT(t)
            dx, dz = newton.solve(-rdx - tx, -rdz - tz, refinements)
            dlam = w * (P.G(dx, dz) + rp + rc / lam)
            return dx, dz, (rc - s * dlam) / lam, dlam

        rc_aff = -(s * lam)
        dx, dz, ds, dl = direction(rc_aff, 0)  # the predictor only sets the centering: no refinement
        a_aff = min(_max_step(s, ds), _max_step(lam, dl))
        sigma = (_dot(s + a_aff * ds, lam + a_aff * dl) / count / mu) ** 3 if mu > 0 else 0.0
        dx, dz, ds, dl = direction(rc_aff - ds * dl + sigma * mu)
        # One step for both sides: separate primal and dual steps rescued two more
        # near-degenerate water-filling rounds but cost 30-60 % more iterations on
        # congested max-min (100k x 5: 9.8 vs 6.2 s); the crossover from a stalled
        # iterate (_solve) rescues those rounds instead.
        alpha = min(1.0, STEP * min(_max_step(s, ds), _max_step(lam, dl)))
        x = np.where(P.allowed, x + alpha * dx, 0.0)
        z = z + alpha * dz
        s = s + alpha * ds
        lam = lam + alpha * dl
    seconds = time.perf_counter() - t0
    # A stalled run whose best iterate is within 100× of the tolerances is still
    # a solution to ~1e-7 (what Clarabel's default "almost solved" accepts).
    if status != "optimal" and best is not None and best_merit <= ACCEPT_MERIT:
        status = "optimal"
    if status != "optimal":
        info = {}
        if best is not None:  # its prices can still start a crossover (see _solve)
            _, _, _, cap = P.split(best[2])
            info = {"price": cap / np.maximum(np.asarray(lp.W, dtype=float), 1e-300), "z": float(best[1]),
                    "gap": best_merit * GAP_TOL}
        return BlockSolution(False, status, None, float("nan"), None, float("nan"), None, None, seconds, "ipm", it,
                             message=f"block IPM stopped: {status} after {it} iterations", info=info)
    x, z, lam = best
    X = np.clip(x, 0.0, None)
    W = np.maximum(np.asarray(lp.W, dtype=float), 1e-300)
    value = float((lp.objective_X() * X).sum() + (lp.c_z * z if lp.has_z else 0.0))
    _, share_dual, _, cap = P.split(lam)
    return BlockSolution(True, "optimal", X, float(z) if lp.has_z else float("nan"), None, value, share_dual,
                         cap / W, seconds, "ipm", it)


def _start(P: _Problem) -> tuple[np.ndarray, float]:
    """A point well inside the time and capacity rows; z just below the smallest share."""
    per_row = np.maximum(P.allowed.sum(axis=1), 1)
    x = np.where(P.allowed, 0.5 / per_row[:, None], 0.0)
    use = (P.Sa * x).sum(axis=0)
    x = x * np.minimum(1.0, 0.5 / np.maximum(use, 1e-300))[None, :]
    z = 0.0
    if P.has_z and len(P.rows):
        h1 = P.h[len(P.entries) : len(P.entries) + len(P.rows)]  # -l on the share rows
        live = P.g[P.rows] > 0
        if live.any():
            m = P.rows[live]
            z = float(np.min(((P.A[m] * x[m]).sum(axis=1) + h1[live]) / P.g[m])) - 1.0
    return x, z
