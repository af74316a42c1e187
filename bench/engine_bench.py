"""optsched's policies against reference formulations written the way Gavel
writes them, on the same instances, in one run (in-process, warm).

    OPENBLAS_NUM_THREADS=1 python bench/engine_bench.py              # n = 1,000 / 2,048 / 10,000
    OPENBLAS_NUM_THREADS=1 python bench/engine_bench.py --sizes 1000 --policies max_min_fairness

The references are our own code in Gavel's style (not Gavel's code):
- max-min fairness: one vectorized cvxpy program, ECOS (Gavel's `MaxMinFairnessPolicyWithPerf`);
- finish-time fairness: a cvxpy expression per job with ``inv_pos`` built in a
  Python loop, ECOS (Gavel's `FinishTimeFairnessPolicyWithPerf`);
- makespan: bisection over the makespan with a feasibility LP per step (Gavel's
  `MinTotalDurationPolicyWithPerf`);
- water filling: per level one LP for the level and one MILP that finds the
  jobs that can still rise (Gavel's `MaxMinFairnessWaterFillingPolicyWithPerf`).
Jobs come from Gavel's measured throughput table (peer data) when present,
else synthetic; ``--synthetic`` forces distinct random rows (no two jobs
alike, so identical-job classes cannot help). Each cell is the median of
``--repeat`` runs; the ratio is reference / optsched from the same run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from policies_scaling import gavel_table, instance  # noqa: E402

from optsched.formulations.base import equal_share_throughput, isolated_throughput  # noqa: E402
from optsched.policy import solve_instance  # noqa: E402

# References slower than this (seconds, measured at the previous size) are not run at larger sizes.
BUDGET = 120.0


def _normalized(inst):
    T = inst.throughput
    return T * (inst.scale_factor / (inst.weight * equal_share_throughput(inst, T)))[:, None]


def _base(cp, inst):
    X = cp.Variable((inst.n, inst.k), nonneg=True)
    return X, [cp.sum(X, axis=1) <= 1, X <= inst.available.astype(float), inst.scale_factor @ X <= inst.capacity]


def ref_max_min(inst):
    import cvxpy as cp

    X, cons = _base(cp, inst)
    p = cp.Problem(cp.Maximize(cp.min(cp.sum(cp.multiply(_normalized(inst), X), axis=1))), cons)
    p.solve(solver=cp.ECOS)
    return p.value


def ref_ftf(inst):
    import cvxpy as cp

    X, cons = _base(cp, inst)
    T = inst.throughput
    iso = isolated_throughput(inst, T)
    R = inst.steps_remaining
    rhos = []
    for m in range(inst.n):  # Gavel's loop: one expression per job
        thr = cp.sum(cp.multiply(T[m], X[m]))
        D = inst.elapsed_time[m] + R[m] / iso[m]
        rhos.append((inst.elapsed_time[m] + R[m] * cp.inv_pos(thr)) / D)
    p = cp.Problem(cp.Minimize(cp.maximum(*rhos)), cons)
    p.solve(solver=cp.ECOS)
    return p.value


def ref_makespan(inst, tol=1e-3):
    import cvxpy as cp

    T, R = inst.throughput, inst.steps_remaining
    lo, hi = 0.0, float((R / T.max(axis=1)).sum())  # everything one after another
    while hi - lo > tol * hi:
        mid = (lo + hi) / 2
        X, cons = _base(cp, inst)
        p = cp.Problem(cp.Minimize(0), cons + [cp.sum(cp.multiply(T, X), axis=1) >= R / mid])
        p.solve(solver=cp.ECOS)
        lo, hi = (lo, mid) if p.status == "optimal" else (mid, hi)
    return hi


def ref_water_filling(inst, eps=1e-4):
    import cvxpy as cp

    A = _normalized(inst) * inst.weight[:, None]
    w = inst.weight
    frozen, level = np.zeros(inst.n, bool), np.zeros(inst.n)
    first = None
    while not frozen.all():
        U, F = np.flatnonzero(~frozen), np.flatnonzero(frozen)
        X, cons = _base(cp, inst)
        t = cp.Variable()
        share = cp.sum(cp.multiply(A, X), axis=1)
        cons_f = [share[F] >= level[F]] if len(F) else []
        p = cp.Problem(cp.Maximize(t), cons + cons_f + [share[U] >= cp.multiply(w[U], t)])
        p.solve(solver=cp.ECOS)
        t_r = float(t.value)
        first = t_r if first is None else first
        # Which unfrozen jobs can rise above the level? One MILP (Gavel's approach).
        X2, cons2 = _base(cp, inst)
        b = cp.Variable(len(U), boolean=True)
        share2 = cp.sum(cp.multiply(A, X2), axis=1)
        cons2 += [share2[F] >= level[F]] if len(F) else []
        cons2 += [share2[U] >= cp.multiply(w[U] * t_r, 1 + eps * b)]
        cp.Problem(cp.Maximize(cp.sum(b)), cons2).solve(solver=cp.HIGHS)
        stuck = U[np.round(b.value) < 0.5] if b.value is not None else U
        if len(stuck) == 0:
            stuck = U
        level[stuck], frozen[stuck] = t_r * w[stuck], True
    return first


REFERENCES = {
    "max_min_fairness": ("vectorized cvxpy + ECOS", ref_max_min),
    "finish_time_fairness": ("per-job inv_pos loop, ECOS", ref_ftf),
    "makespan": ("bisection, ECOS LPs", ref_makespan),
    "max_min_fairness_water_filling": ("LP + MILP per level", ref_water_filling),
}


def timed(fn, repeat: int):
    times, value = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[1000, 2048, 10000])
    ap.add_argument("--policies", nargs="*", default=list(REFERENCES))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--synthetic", action="store_true", help="distinct random throughput rows")
    args = ap.parse_args(argv)
    table = None if args.synthetic else gavel_table()
    console = Console(width=160)
    console.print(f"instances: {'Gavel throughput table' if table else 'synthetic, distinct rows'}; "
                  f"{os.cpu_count()} cores; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    warm = instance(50, np.random.default_rng(1), table)
    for p in args.policies:  # warm imports and caches of both sides
        solve_instance(warm, p)
        REFERENCES[p][1](warm)
    out = Table(title="in-process seconds (median); ratio = reference / optsched", header_style="bold")
    for c in ("policy", "n", "optsched", "status", "reference", "ref time", "ratio", "objective (ours / ref)"):
        out.add_column(c, justify="left" if c in ("policy", "status", "reference") else "right")
    for p in args.policies:
        label, ref = REFERENCES[p]
        last_ref = 0.0
        for n in args.sizes:
            inst = instance(n, np.random.default_rng(args.seed), table)
            ours, alloc = timed(lambda: solve_instance(inst, p, time_limit=600.0), args.repeat)
            if last_ref > BUDGET:
                out.add_row(p, f"{n:,}", f"{ours:.3f}", alloc.status, label, "skipped", "–", f"{alloc.objective:.6g}")
                continue
            r_time, r_val = timed(lambda: ref(inst), 1 if p != "max_min_fairness" else args.repeat)
            last_ref = r_time
            out.add_row(p, f"{n:,}", f"{ours:.3f}", alloc.status, label, f"{r_time:.3f}", f"{r_time / ours:.1f}×",
                        f"{alloc.objective:.6g} / {r_val:.6g}")
            console.print(f"  {p} n={n:,} done", style="dim")
    console.print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
