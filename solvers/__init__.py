"""Solver layer: solve a cvxpy problem with a named backend, a time limit, and
an honest status. Knows nothing of jobs or clusters (DESIGN.md §2).

Backends (measured in bench/solve_scaling.py):
- ``clarabel`` (default): interior point, fastest on our LPs and convex programs.
- ``highs``: HiGHS interior point for LPs (``solver=ipm``), branch-and-cut for MILPs.
- ``highs-simplex``: HiGHS default simplex, for a vertex solution on small LPs.
- ``scs``: first-order fallback for convex programs CLARABEL cannot take.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

SOLVERS = ("clarabel", "highs", "highs-simplex", "scs")
DEFAULT_TIME_LIMIT = 60.0


@dataclass(frozen=True)
class Solution:
    ok: bool  # an optimal (or optimal-inaccurate) solution is available
    status: str  # "optimal", "optimal_inaccurate", "time_limit", "infeasible", "unbounded", "error"
    value: float
    solver: str
    solve_seconds: float  # wall time of problem.solve (includes cvxpy's canonicalization)
    solver_seconds: float  # time reported by the backend itself
    message: str = ""


def _options(solver: str, time_limit: float, is_mip: bool) -> tuple[str, dict]:
    import cvxpy as cp

    if solver == "clarabel":
        return cp.CLARABEL, {"time_limit": float(time_limit)}
    if solver == "highs":
        # Nested dict: "solver" would clash with cvxpy's own keyword.
        highs: dict = {"time_limit": float(time_limit)}
        if is_mip:
            highs.update(mip_rel_gap=1e-6, threads=1)
        else:
            highs["solver"] = "ipm"
        return cp.HIGHS, {"highs_options": highs}
    if solver == "highs-simplex":
        return cp.HIGHS, {"highs_options": {"time_limit": float(time_limit)}}
    if solver == "scs":
        return cp.SCS, {"time_limit_secs": float(time_limit)}
    raise ValueError(f"unknown solver {solver!r} (choose from {', '.join(SOLVERS)})")


def solve(problem, solver: str = "clarabel", time_limit: float = DEFAULT_TIME_LIMIT, **options) -> Solution:
    """Solve ``problem`` in place. Never raises for solver trouble: returns
    ``ok=False`` with the status and message instead, so the caller can fall back."""
    import cvxpy as cp

    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r} (choose from {', '.join(SOLVERS)})")
    if problem.is_mixed_integer() and solver in ("clarabel", "scs"):
        solver = "highs"  # only HiGHS takes integer variables here
    name, opts = _options(solver, time_limit, problem.is_mixed_integer())
    opts.update(options)
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            problem.solve(solver=name, **opts)
        status = problem.status
        msg = ""
    except cp.SolverError as e:
        status, msg = "error", str(e).splitlines()[0] if str(e) else "solver error"
    except Exception as e:  # a backend crash must not take the scheduler down
        status, msg = "error", f"{type(e).__name__}: {e}".splitlines()[0]
    elapsed = time.perf_counter() - t0
    stats = getattr(problem, "solver_stats", None)
    solver_seconds = float(stats.solve_time) if stats is not None and stats.solve_time is not None else elapsed
    mapped = {
        cp.OPTIMAL: "optimal",
        cp.OPTIMAL_INACCURATE: "optimal_inaccurate",
        cp.INFEASIBLE: "infeasible",
        cp.INFEASIBLE_INACCURATE: "infeasible",
        cp.UNBOUNDED: "unbounded",
        cp.UNBOUNDED_INACCURATE: "unbounded",
        cp.USER_LIMIT: "time_limit",
    }.get(status, "error" if status == "error" else str(status))
    value = problem.value if status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE, cp.USER_LIMIT) else float("nan")
    ok = mapped in ("optimal", "optimal_inaccurate")
    if mapped == "time_limit":
        # HiGHS returns its incumbent on a time limit; usable only if it has values.
        ok = False
        msg = msg or f"time limit of {time_limit:g}s reached"
    if not ok and not msg:
        msg = f"solver status {mapped}"
    return Solution(
        ok=ok,
        status=mapped,
        value=float(value) if value is not None else float("nan"),
        solver=solver,
        solve_seconds=elapsed,
        solver_seconds=solver_seconds,
        message=msg,
    )
