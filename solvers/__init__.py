"""Solver layer: names for users, and a cvxpy entry point kept for the one
MILP still written in cvxpy (formulations/hadar.py). Knows nothing of jobs or
clusters (docs/architecture.md §2).

Every fractional policy is a block LP (solvers/block_lp.py) solved without
cvxpy; the user-facing solver names map to its backends (optsched/policy.py):

- ``auto`` (default): CLARABEL for small block LPs, ``ipm`` for large ones, HiGHS IPM when pair columns
  (space sharing) couple the jobs (measured in bench/solve_scaling.py).
- ``ipm``: the structured interior-point method of solvers/block_lp.py.
- ``clarabel``: CLARABEL called directly (interior point).
- ``highs``: HiGHS interior point without crossover.
- ``highs-simplex``: HiGHS dual simplex (a vertex solution).

Old names stay as aliases (SOLVER_ALIASES): ``clarabel-direct``,
``highs-direct``, ``highs-simplex-direct``, and ``scs`` (now CLARABEL).

``solve(problem, ...)`` solves a cvxpy problem (CVXPY_SOLVERS); cvxpy is
imported inside it, never at import time (``import cvxpy`` costs 1.5–5 s).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

SOLVERS = ("auto", "ipm", "clarabel", "highs", "highs-simplex")
SOLVER_ALIASES = {
    "clarabel-direct": "clarabel",
    "highs-direct": "highs",
    "highs-simplex-direct": "highs-simplex",
    "scs": "clarabel",
}
CVXPY_SOLVERS = ("clarabel", "highs", "highs-simplex", "scs")
DEFAULT_TIME_LIMIT = 60.0


def solver_name(solver: str) -> str:
    """The user-facing name (an alias resolved), or ValueError naming the choices."""
    name = SOLVER_ALIASES.get(solver, solver)
    if name not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r} (choose from {', '.join(SOLVERS)})")
    return name


def block_backend(solver: str, has_pairs: bool) -> str:
    """The solvers/block_lp.py backend for a user-facing solver name.

    ``auto`` with pair columns: HiGHS IPM. Measured (bench/solve_scaling.py
    --packing, 2 cores, max-min, 1,000 single-GPU jobs with 8 measured
    partners each): HiGHS IPM 1.1 s, CLARABEL 13.5 s (its LDL fills in along
    the pair graph), HiGHS simplex 7.5 s; the block IPM does not take pairs.
    Without pairs: block_lp's own ``auto`` (CLARABEL or the block IPM by size
    after merging identical jobs; 1,000 jobs 0.07 s both, 10,000 jobs
    1.3 s / 1.7 s, HiGHS IPM 4.0 s; table in bench/solve_scaling.py).
    """
    name = solver_name(solver)
    if name == "auto":  # by size, after merging identical jobs: solvers/block_lp.py AUTO_IPM_ENTRIES
        return "highs-ipm" if has_pairs else "auto"
    return {"ipm": "ipm", "clarabel": "clarabel", "highs": "highs-ipm", "highs-simplex": "highs-simplex"}[name]


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
    raise ValueError(f"unknown solver {solver!r} (choose from {', '.join(CVXPY_SOLVERS)})")


def solve(problem, solver: str = "clarabel", time_limit: float = DEFAULT_TIME_LIMIT, **options) -> Solution:
    """Solve ``problem`` in place. Never raises for solver trouble: returns
    ``ok=False`` with the status and message instead, so the caller can fall back."""
    import cvxpy as cp

    if solver not in CVXPY_SOLVERS:
        raise ValueError(f"unknown solver {solver!r} (choose from {', '.join(CVXPY_SOLVERS)})")
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
