"""Matrix-form LPs solved directly by a backend, without cvxpy.

    minimize    cᵀx
    subject to  A_ub x <= b_ub,   A_eq x = b_eq,   lb <= x <= ub

The general backends of solvers/block_lp.py: a block LP is exported as these
arrays (block_lp.to_matrix) and one backend call solves it. (cvxpy's
canonicalization cost ~5-7 ms per build at 100 jobs and ``import cvxpy``
1.5-5 s per process; neither is on any solve path now.)

Backends:
- ``highs-ipm`` (default): HiGHS interior point *without crossover*. It returns
  a point in the relative interior of the optimal face, like CLARABEL/ECOS in the
  cvxpy path. That matters for degenerate LPs such as max-min fairness, whose
  non-bottleneck jobs can take many optimal allocations: a simplex vertex
  concentrates them on one GPU type, an interior point spreads them the way
  Gavel's (ECOS) solutions do.
- ``highs-simplex``: HiGHS dual simplex, a vertex solution.
- ``clarabel``: CLARABEL called directly (interior point).

Duals are returned for the inequality rows (>= 0, the price of relaxing a
``<=`` row by one unit in a *minimization*) and the equality rows.

Constraint blocks are scipy.sparse matrices (or dense arrays), or ``CscArrays``:
bare CSC arrays (with CscArrays and HiGHS, scipy is never imported: ~0.2 s in a
cold process). They
are stacked with numpy, not scipy.sparse.vstack: on the simulator's ≤ 30-row
LPs scipy's constructors and format checks cost more than the solve. The
stacked matrix is exactly the one scipy would build (same entries, same order,
explicit zeros kept), so the backends see the same input.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

LP_BACKENDS = ("highs-ipm", "highs-simplex", "clarabel")


@dataclass(frozen=True)
class LPSolution:
    ok: bool
    status: str  # "optimal", "time_limit", "infeasible", "unbounded", "error"
    x: np.ndarray | None
    value: float  # cᵀx (minimization)
    dual_ub: np.ndarray | None  # (m_ub,) >= 0
    dual_eq: np.ndarray | None  # (m_eq,)
    solve_seconds: float
    backend: str
    message: str = ""


class CscArrays(NamedTuple):
    """A sparse matrix as bare CSC arrays: ``indptr`` (n_cols + 1), row
    ``indices`` sorted and without repeats within each column, ``data``."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    n_rows: int


def solve_lp(
    c: np.ndarray,
    A_ub: "sp.spmatrix | CscArrays | None" = None,
    b_ub: np.ndarray | None = None,
    A_eq: "sp.spmatrix | CscArrays | None" = None,
    b_eq: np.ndarray | None = None,
    lb: np.ndarray | float = 0.0,
    ub: np.ndarray | float = np.inf,
    backend: str = "highs-ipm",
    time_limit: float = 60.0,
    highs_options: dict | None = None,
) -> LPSolution:
    """Solve the LP; never raises for solver trouble (``ok=False`` instead).
    ``highs_options`` are passed to HiGHS as they are (e.g. simplex_strategy)."""
    if backend not in LP_BACKENDS:
        raise ValueError(f"unknown LP backend {backend!r} (choose from {', '.join(LP_BACKENDS)})")
    c = np.asarray(c, dtype=float)
    nv = c.size
    A_ub = _columns(A_ub, nv)
    A_eq = _columns(A_eq, nv)
    b_ub = np.zeros(0) if b_ub is None else np.asarray(b_ub, dtype=float)
    b_eq = np.zeros(0) if b_eq is None else np.asarray(b_eq, dtype=float)
    lb = np.broadcast_to(np.asarray(lb, dtype=float), (nv,))
    ub = np.broadcast_to(np.asarray(ub, dtype=float), (nv,))
    t0 = time.perf_counter()
    try:
        if backend == "clarabel":
            out = _clarabel(c, A_ub, b_ub, A_eq, b_eq, lb, ub, time_limit)
        else:
            out = _highs(c, A_ub, b_ub, A_eq, b_eq, lb, ub, time_limit, ipm=backend == "highs-ipm", options=highs_options)
    except Exception as e:  # a backend crash must not take the scheduler down
        out = ("error", None, float("nan"), None, None, f"{type(e).__name__}: {e}".splitlines()[0])
    status, x, value, d_ub, d_eq, msg = out
    return LPSolution(
        ok=status == "optimal",
        status=status,
        x=x,
        value=value,
        dual_ub=d_ub,
        dual_eq=d_eq,
        solve_seconds=time.perf_counter() - t0,
        backend=backend,
        message=msg or ("" if status == "optimal" else f"solver status {status}"),
    )


def _highs(c, A_ub, b_ub, A_eq, b_eq, lb, ub, time_limit, ipm: bool, options: dict | None = None):
    import highspy

    m_ub, m_eq = A_ub.n_rows, A_eq.n_rows
    A = _stack([A_ub, A_eq])
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_ = c.size
    lp.num_row_ = m_ub + m_eq
    lp.col_cost_ = c
    lp.col_lower_ = np.where(np.isfinite(lb), lb, -inf)
    lp.col_upper_ = np.where(np.isfinite(ub), ub, inf)
    lp.row_lower_ = np.concatenate([np.full(m_ub, -inf), b_eq])
    lp.row_upper_ = np.concatenate([b_ub, b_eq])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = A.indptr
    lp.a_matrix_.index_ = A.indices
    lp.a_matrix_.value_ = A.data
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", float(time_limit))
    for name, value in (options or {}).items():
        h.setOptionValue(name, value)
    if ipm:
        h.setOptionValue("solver", "ipm")
        h.setOptionValue("run_crossover", "off")
    h.passModel(lp)
    h.run()
    ms = h.getModelStatus()
    if ipm and ms == highspy.HighsModelStatus.kUnknown:
        # IPX without crossover sometimes stops "imprecise" on tiny or very
        # degenerate LPs; crossover then recovers an optimal (vertex) solution.
        h.setOptionValue("run_crossover", "on")
        h.run()
        ms = h.getModelStatus()
    if ms == highspy.HighsModelStatus.kOptimal:
        sol = h.getSolution()
        x = np.asarray(sol.col_value)
        # HiGHS row duals are d(objective)/d(row bound): <= 0 for binding <=
        # rows of a minimization; report prices as non-negative numbers.
        rd = np.asarray(sol.row_dual)
        return "optimal", x, float(c @ x), np.maximum(-rd[:m_ub], 0.0), -rd[m_ub:], ""
    name = {
        highspy.HighsModelStatus.kInfeasible: "infeasible",
        highspy.HighsModelStatus.kUnbounded: "unbounded",
        highspy.HighsModelStatus.kUnboundedOrInfeasible: "infeasible",
        highspy.HighsModelStatus.kTimeLimit: "time_limit",
    }.get(ms, "error")
    return name, None, float("nan"), None, None, f"HiGHS: {h.modelStatusToString(ms)}"


def _clarabel(c, A_ub, b_ub, A_eq, b_eq, lb, ub, time_limit):
    import clarabel
    import scipy.sparse as sp  # (CLARABEL's interface takes scipy's CSC; the HiGHS path needs no scipy)

    nv = c.size
    fin_lb, fin_ub = np.isfinite(lb), np.isfinite(ub)
    # Clarabel form: A x + s = b, s in cones. Equalities first (zero cone),
    # then <= rows, then bounds written as rows (-x <= -lb, x <= ub).
    stacked = _stack([A_eq, A_ub, _bound_rows(fin_lb, -1.0), _bound_rows(fin_ub, 1.0)])
    A = sp.csc_matrix((stacked.data, stacked.indices, stacked.indptr), shape=(stacked.n_rows, nv))
    b = np.concatenate([b_eq, b_ub, -lb[fin_lb], ub[fin_ub]])
    m_eq, m_ub = A_eq.n_rows, A_ub.n_rows
    cones = ([clarabel.ZeroConeT(m_eq)] if m_eq else []) + [clarabel.NonnegativeConeT(stacked.n_rows - m_eq)]
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.time_limit = float(time_limit)
    solver = clarabel.DefaultSolver(_no_quadratic(nv), c, A, b, cones, settings)
    res = solver.solve()
    st = str(res.status)
    if st in ("Solved", "AlmostSolved"):
        x = np.asarray(res.x)
        z = np.asarray(res.z)
        return "optimal", x, float(c @ x), z[m_eq : m_eq + m_ub], z[:m_eq], ""
    name = {"PrimalInfeasible": "infeasible", "DualInfeasible": "unbounded", "MaxTime": "time_limit"}.get(st, "error")
    return name, None, float("nan"), None, None, f"CLARABEL: {st}"


@lru_cache(maxsize=64)
def _no_quadratic(nv: int) -> sp.csc_matrix:
    """The all-zero P of an LP (CLARABEL copies it; shared, never modified)."""
    import scipy.sparse as sp

    return sp.csc_matrix((np.zeros(0), np.zeros(0, np.int32), np.zeros(nv + 1, np.int32)), shape=(nv, nv))


def _columns(A, nv: int) -> CscArrays:
    """A constraint block (CscArrays, any scipy.sparse format, dense, or None) as CscArrays."""
    if A is None:
        return CscArrays(np.zeros(nv + 1, np.int32), np.zeros(0, np.int32), np.zeros(0), 0)
    if isinstance(A, CscArrays):
        return A
    import scipy.sparse as sp  # (only for callers passing scipy or dense matrices)

    A = A.tocsc() if sp.issparse(A) else sp.csc_matrix(np.asarray(A, dtype=float))
    if not A.has_canonical_format:  # sorted rows, duplicates summed (as a CSR→CSC conversion gives)
        A = A.copy()
        A.sum_duplicates()
    return CscArrays(A.indptr, A.indices, np.asarray(A.data, dtype=float), A.shape[0])


def _bound_rows(finite: np.ndarray, sign: float) -> CscArrays:
    """sign · I restricted to the rows of variables with a finite bound."""
    indptr = np.zeros(finite.size + 1, np.int32)
    np.cumsum(finite, out=indptr[1:])
    count = int(indptr[-1])
    return CscArrays(indptr, np.arange(count, dtype=np.int32), np.full(count, sign), count)


def _stack(blocks: list[CscArrays]) -> CscArrays:
    """Row-stack CSC blocks (vertically, in order): each column lists its
    entries of the first block, then of the second, ... — rows stay sorted."""
    per_column = np.diff(np.stack([b.indptr for b in blocks]), axis=1)  # (blocks, columns) entry counts
    n_blocks, n_cols = per_column.shape
    # Concatenated block after block, then a stable sort by column: block order within a column.
    column = np.repeat(np.tile(np.arange(n_cols), n_blocks), per_column.reshape(-1))
    order = np.argsort(column, kind="stable")
    n_rows = [b.n_rows for b in blocks]
    row_offset = np.repeat(np.cumsum([0] + n_rows[:-1]), per_column.sum(axis=1))
    indices = (np.concatenate([b.indices for b in blocks]) + row_offset)[order]
    data = np.concatenate([b.data for b in blocks])[order]
    indptr = np.zeros(n_cols + 1, np.int32)
    np.cumsum(per_column.sum(axis=0), out=indptr[1:])
    return CscArrays(indptr, indices.astype(np.int32), data, sum(n_rows))
