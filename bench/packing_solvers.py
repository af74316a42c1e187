"""Which LP solver could take packing at 10,000 jobs under 5 s? One run, one table.

Packing's column generation (formulations/base.py ``solve_packed``) spends
nearly all its time in one master LP. This script builds that master on the
bench's packing instance and times it with every general backend we have,
plus restrictions that show where the time goes (the optimal support alone,
one pair type per pair, degree-capped supports, POP groups), OR-Tools PDLP
(its duals certify a bound; its support, solved exactly, gives the primal)
and the program without its time rows (a relaxation: where IPX's time goes):

    python bench/packing_solvers.py                   # 10,000 jobs × 3 types (~3 min)
    python bench/packing_solvers.py --jobs 2000       # smaller and quicker
    python bench/packing_solvers.py --slow            # adds CLARABEL and GLOP (minutes each at 10,000)

Every row reports its objective; restricted rows (a subset of the pairs) are
feasible for the all-pairs program, so their loss is against the all-pairs
optimum (the first HiGHS IPM row over every admitted pair).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np


def _master(n: int, seed: int):
    """(instance, block LP over every admitted pair, CG's starting pair mask, pair-free duals)."""
    from optsched.bench import instances
    from optsched.formulations import max_min_fairness
    from optsched.formulations.base import priced_start
    from optsched.solvers import block_lp

    inst = instances.packing(n, seed, k=3)
    form = max_min_fairness.build(inst, packing=True)
    lp, pk = form.lp, form.packing
    solo = block_lp.solve(dataclasses.replace(lp, pairs=None), backend="auto")
    start = pk.candidates.copy() if pk.candidates is not None else np.ones(len(pk.pairs), bool)
    priced_start(lp, solo, start, 1.0 + float(np.abs(lp.objective_X()).max()) + abs(lp.c_z))  # solve_packed's scale
    rx = np.where(lp.allowed, solo.share_dual[:, None] * lp.A - lp.S[:, None] * solo.price[None, :], -np.inf)
    return inst, lp, start, (solo.share_dual, np.maximum(rx.max(axis=1), 0.0), solo.price)


def _matrix(lp, pairs_mask, allowed=None):
    from optsched.formulations.base import _restrict
    from optsched.solvers import block_lp

    sub = _restrict(lp.pairs, pairs_mask)
    if allowed is not None:
        sub = dataclasses.replace(sub, allowed=allowed[pairs_mask],
                                  share=np.where(allowed[pairs_mask][:, :, None], sub.share, 0.0))
    c, A, b, lb, ub, _ = block_lp.to_matrix(dataclasses.replace(lp, pairs=sub))
    keep = ub > 0
    return c[keep], A.tocsc()[:, keep], b, lb[keep], ub[keep], keep


def _timed(backend: str, c, A, b, lb, ub, options=None, limit=600.0):
    from optsched.solvers.lp import solve_lp

    t = time.perf_counter()
    if backend == "highs-pdlp":
        # solve_lp's highs-ipm would set solver=ipm over these options; the simplex backend leaves them.
        sol = solve_lp(c, A, b, lb=lb, ub=ub, backend="highs-simplex", time_limit=limit,
                       highs_options={"solver": "pdlp", **(options or {})})
    else:
        sol = solve_lp(c, A, b, lb=lb, ub=ub, backend=backend, time_limit=limit, highs_options=options)
    return sol, time.perf_counter() - t


def _glop(c, A, b, lb, ub, limit: float = 600.0):
    """OR-Tools GLOP (its dual simplex) on the program, handed over as an MPS file: (objective, status, seconds)."""
    import os
    import tempfile

    import highspy
    from ortools.linear_solver.python import model_builder as mb

    A = A.tocsc()
    inf = highspy.kHighsInf
    model = highspy.HighsLp()
    model.num_col_, model.num_row_ = A.shape[1], A.shape[0]
    model.col_cost_ = c
    model.col_lower_, model.col_upper_ = np.nan_to_num(lb, neginf=-inf), np.nan_to_num(ub, posinf=inf)
    model.row_lower_, model.row_upper_ = np.full(A.shape[0], -inf), b
    model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    model.a_matrix_.start_, model.a_matrix_.index_, model.a_matrix_.value_ = A.indptr, A.indices, A.data
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.passModel(model)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "master.mps")
        h.writeModel(path)
        m = mb.Model()
        m.import_from_mps_file(path)
    solver = mb.Solver("glop")
    solver.set_time_limit_in_seconds(limit)
    t = time.perf_counter()
    status = solver.solve(m)
    sec = time.perf_counter() - t
    return -solver.objective_value, status.name.lower(), sec


def _ortools_pdlp(c, A, b, lb, ub, eps: float):
    """OR-Tools PDLP (one thread) to relative and absolute tolerance ``eps``: (primal, row duals >= 0, seconds)."""
    from ortools.pdlp import solvers_pb2
    from ortools.pdlp.python import pdlp

    qp = pdlp.QuadraticProgram()
    qp.objective_vector = c
    qp.constraint_matrix = A.tocsc()
    qp.constraint_lower_bounds = np.full(A.shape[0], -np.inf)
    qp.constraint_upper_bounds = b
    qp.variable_lower_bounds = lb
    qp.variable_upper_bounds = np.where(np.isfinite(lb), np.inf, ub)  # X, Y <= 1 is implied by the time rows
    params = solvers_pb2.PrimalDualHybridGradientParams()
    crit = params.termination_criteria.simple_optimality_criteria
    crit.eps_optimal_relative = crit.eps_optimal_absolute = eps
    params.num_threads = 1
    t = time.perf_counter()
    res = pdlp.primal_dual_hybrid_gradient(qp, params)
    # PDLP's duals of <= rows of a minimization are <= 0; the bound wants prices >= 0.
    return np.asarray(res.primal_solution), np.maximum(-np.asarray(res.dual_solution), 0.0), time.perf_counter() - t


def _repaired_value(lp, c, A, b, x) -> float:
    """max-min objective of x after scaling it into every time and capacity row (z re-read)."""
    x = np.clip(x, 0.0, None)
    x[-1] = 0.0
    rows_over = np.maximum(A[:, :-1] @ x[:-1] - b, 0.0)
    n = lp.n
    t_rows, cap = slice(n, 2 * n), slice(2 * n, 2 * n + lp.k)
    scale = np.ones(A.shape[0])
    scale[t_rows] = 1.0 / (1.0 + rows_over[t_rows])
    scale[cap] = b[cap] / (b[cap] + rows_over[cap])
    # Each column scaled by the tightest time or capacity row it touches.
    Acoo = A[:, :-1].tocoo()
    col_scale = np.ones(len(x) - 1)
    inside = Acoo.row >= n
    np.minimum.at(col_scale, Acoo.col[inside], scale[Acoo.row[inside]])
    x[:-1] *= col_scale
    share = -(A[:n, :-1] @ x[:-1])  # share rows are stored negated (-share + g z <= 0)
    g = A[:n, -1].toarray().ravel()
    return float(np.min(share / np.where(g > 0, g, np.inf)))


def _pop_row(inst, groups: int) -> tuple:
    """POP's split with only the pairs inside a group: each group solved by column generation."""
    from optsched import pop
    from optsched.policy import solve_instance

    t = time.perf_counter()
    worst = np.inf
    for jobs in pop.partition(inst, groups, 0):
        sub = pop.sub_instance(inst, jobs, groups)
        pos = np.full(inst.n, -1)
        pos[jobs] = np.arange(len(jobs))
        inside = (pos[inst.pairs[:, 0]] >= 0) & (pos[inst.pairs[:, 1]] >= 0)
        sub = dataclasses.replace(sub, pairs=np.sort(pos[inst.pairs[inside]], axis=1),
                                  pair_throughput=inst.pair_throughput[inside])
        worst = min(worst, solve_instance(sub, "max_min_fairness", packing=True, time_limit=600.0).objective)
    return (f"POP, {groups} groups, pairs inside a group", "CG per group", "–", time.perf_counter() - t, worst, "optimal")


def _pdlp_rows(lp, start, rows) -> None:
    """OR-Tools PDLP on the CG start: its primal repaired into the time and capacity
    rows, its duals' certified bound over every admitted pair (formulations/base.py
    ``_dual_bound``), and the exact program over the pairs its primal uses."""
    from optsched.formulations.base import _dual_bound

    n, k = lp.n, lp.k
    c, A, b, lb, ub, keep = _matrix(lp, start)
    for eps in (1e-3, 1e-4):
        x, d, sec = _ortools_pdlp(c, A, b, lb, ub, eps)
        value = _repaired_value(lp, c, A, b, x.copy())
        bound = _dual_bound(lp, d[:n], d[n : 2 * n], d[2 * n :])
        rows.append((f"CG start (bound {bound:.6f})", f"OR-Tools PDLP {eps:g}, repaired", f"{A.shape[1]:,}", sec, value, "approx"))
        print(f"  PDLP {eps:g}: {sec:.2f} s, repaired {value:.6f}, certified bound {bound:.6f}", flush=True)
    # The last (1e-4) run's support (entries above 1e-4), solved exactly: the primal PDLP points at.
    full = np.zeros(len(keep))
    full[keep] = x
    na = int(start.sum())
    Y = np.zeros(lp.pairs.allowed.shape)
    Y[start] = full[n * k : n * k + na * k].reshape(na, k)
    used = Y > 1e-4
    c2, A2, b2, lb2, ub2, _ = _matrix(lp, used.any(axis=1), used)
    sol, sec2 = _timed("clarabel", c2, A2, b2, lb2, ub2)
    rows.append(("PDLP 1e-4's support", "CLARABEL", f"{A2.shape[1]:,}", sec + sec2, -sol.value if sol.ok else float("nan"),
                 sol.status))
    print(f"  PDLP support, exact: {sec + sec2:.2f} s, objective {rows[-1][4]:.6f}", flush=True)


def _relaxed_rows(lp, start, rows) -> None:
    """The CG start without its time rows (a relaxation, so above the optimum), then
    with the time rows its solution violates: the time rows set IPX's pace."""
    n = lp.n
    c, A, b, lb, ub, _ = _matrix(lp, start)
    share_cap = np.r_[np.arange(n), np.arange(2 * n, A.shape[0])]
    Ar = A.tocsr()
    sol, sec = _timed("highs-ipm", c, Ar[share_cap].tocsc(), b[share_cap], lb, ub)
    over = np.flatnonzero(Ar[n : 2 * n] @ sol.x > 1 + 1e-6)
    rows.append(("CG start, no time rows (relaxation)", "highs-ipm", f"{A.shape[1]:,}", sec, -sol.value, sol.status))
    keep = np.sort(np.r_[share_cap, n + over])
    sol2, sec2 = _timed("highs-ipm", c, Ar[keep].tocsc(), b[keep], lb, ub)
    rows.append((f"+ the {len(over):,} time rows it violates", "highs-ipm", f"{A.shape[1]:,}", sec2, -sol2.value, sol2.status))
    print(f"  no time rows: {sec:.2f} s ({len(over)} violated); with them: {sec2:.2f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--slow", action="store_true", help="also CLARABEL and OR-Tools GLOP on the CG start (minutes at 10,000)")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table

    from optsched.formulations.base import _pair_reduced_costs

    inst, lp, start, duals = _master(args.jobs, args.seed)
    n, k = lp.n, lp.k
    every = np.ones(len(lp.pairs.pairs), bool)
    rows: list[tuple] = []

    def row(name, backend, mask, allowed=None, options=None, repaired=False, label=""):
        c, A, b, lb, ub, _ = _matrix(lp, mask, allowed)
        sol, sec = _timed(backend, c, A, b, lb, ub, options)
        value = (_repaired_value(lp, c, A, b, sol.x.copy()) if repaired else -sol.value) if sol.x is not None else float("nan")
        rows.append((name, backend + label, f"{A.shape[1]:,}", sec, value, sol.status))
        print(f"  {name}: {backend} {sec:.2f} s, objective {value:.6f} ({sol.status})", flush=True)
        return sol, A

    full_sol, A_full = row("every admitted pair", "highs-ipm", every)
    start_sol, _ = row("CG start", "highs-ipm", start)
    row("CG start", "highs-ipm", start, options={"ipm_optimality_tolerance": 1e-4}, label=", tol 1e-4")
    row("CG start", "highs-pdlp", start, options={"primal_feasibility_tolerance": 1e-4,
                                                  "dual_feasibility_tolerance": 1e-4}, repaired=True,
        label=", tol 1e-4, repaired")
    if args.slow:
        row("CG start", "clarabel", start)
        c, A, b, lb, ub, _ = _matrix(lp, start)
        value, status, sec = _glop(c, A, b, lb, ub)
        rows.append(("CG start", "OR-Tools GLOP", f"{A.shape[1]:,}", sec, value, status))
        print(f"  CG start: GLOP {sec:.2f} s, objective {value:.6f} ({status})", flush=True)
    # The optimal support: pairs the all-pairs solution packs.
    ny = int(every.sum())
    Y = np.zeros((ny, k))
    nx = int(lp.allowed.sum())
    y_flat = full_sol.x[nx:-1]
    allowed_flat = lp.pairs.allowed.reshape(-1)
    Y.reshape(-1)[np.flatnonzero(allowed_flat)] = y_flat
    used = Y.sum(axis=1)
    row("optimal support", "highs-ipm", used > 1e-5)
    lam, mu, pi = duals
    best = _pair_reduced_costs(lp.pairs, lam, mu, pi).argmax(axis=1)
    one_type = np.zeros_like(lp.pairs.allowed)
    one_type[np.arange(len(best)), best] = True
    row("CG start, one type per pair", "highs-ipm", start, allowed=one_type & lp.pairs.allowed)
    for cap_degree in (1, 2, 3):
        deg = np.zeros(n, int)
        keep = np.zeros(len(used), bool)
        for p in np.argsort(-used, kind="stable"):
            a, b = lp.pairs.pairs[p]
            if used[p] <= 1e-5:
                break
            if deg[a] < cap_degree and deg[b] < cap_degree:
                keep[p] = True
                deg[a] += 1
                deg[b] += 1
        row(f"support, degree <= {cap_degree}", "highs-ipm", keep)
    _pdlp_rows(lp, start, rows)
    _relaxed_rows(lp, start, rows)
    rows.append(_pop_row(inst, 4))
    print(f"  {rows[-1][0]}: {rows[-1][3]:.2f} s, objective {rows[-1][4]:.6f}", flush=True)
    table = Table(title=f"packing master LPs, {n:,} jobs × {k} types (seconds; loss vs every admitted pair)")
    for col in ("program", "solver", "columns", "seconds", "objective", "loss", "status"):
        table.add_column(col)
    ref = rows[0][4]
    for name, backend, cols, sec, value, status in rows:
        table.add_row(name, backend, cols, f"{sec:.2f}", f"{value:.6f}", f"{(ref - value) / ref:.1e}", status)
    Console(width=max(Console().width, 120)).print(table)


if __name__ == "__main__":
    main()
