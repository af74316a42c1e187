"""Solve time of a policy vs problem size and backend (the measurement behind ``auto``).

    OPENBLAS_NUM_THREADS=1 python bench/solve_scaling.py [--sizes 100,1000,10000] [--types 3] [--repeat 3]
    OPENBLAS_NUM_THREADS=1 python bench/solve_scaling.py --packing --sizes 1000   # pair columns

Prints build (the block LP's arrays), solver (the backend, including the
export to sparse matrices for the general backends), decode and total wall
seconds, the median of --repeat runs, and the objective so the backends can be
compared. Run with OPENBLAS_NUM_THREADS=1 on a quiet machine.

Measured (2 cores shared with other work, load average 4-7, OPENBLAS_NUM_THREADS=1,
warm process, max_min_fairness on gavel_like_instance, 3 types; median total
seconds of 5 runs, 3 for highs-simplex and packing):

    jobs     auto     ipm      clarabel   highs (IPM)   highs-simplex
    100      0.040    0.040    0.009      0.008         0.013
    1,000    0.068    0.071    0.066      0.080         0.30
    10,000   1.35     1.32     1.71       4.0           100 (an earlier run, load 7)

    packing (single-GPU jobs, 8 random measured partners each; ipm does not take pairs):
    jobs     highs (IPM)   clarabel   highs-simplex
    100      0.058         0.084      0.12
    1,000    1.14          13.5       7.5
    3,000    6.7           53.1       —

so ``auto`` = HiGHS IPM with pairs (12x faster than CLARABEL, whose LDL
fills in along the pair graph), and without pairs the block IPM or CLARABEL
by size (solvers/block_lp.py AUTO_*_ENTRIES: at 1,000-10,000 jobs they are
within noise of each other here, both 3x faster than HiGHS IPM).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from optsched.model import Instance  # noqa: E402
from optsched.policy import solve_instance  # noqa: E402


def gavel_like_instance(n: int, k: int, seed: int = 0) -> Instance:
    """n jobs on k types with Gavel-like heterogeneity: per-type speedups 1–10×,
    scale factors 1/2/4/8 w.p. .7/.1/.15/.05, ~3 jobs per GPU."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.5, 10.0, n)
    speedup = np.concatenate([np.ones((n, 1)), rng.uniform(1.0, 10.0, (n, k - 1))], axis=1)
    T = base[:, None] * speedup
    T[rng.random((n, k)) < 0.05] = 0.0
    T[T.sum(axis=1) == 0, 0] = 1.0
    sf = rng.choice([1, 2, 4, 8], n, p=[0.7, 0.1, 0.15, 0.05]).astype(float)
    capacity = np.full(k, max(8.0, np.ceil(sf.sum() / 3 / k)))
    return Instance(
        job_ids=tuple(f"j{i}" for i in range(n)),
        gpu_types=tuple(f"t{j}" for j in range(k)),
        throughput=T,
        scale_factor=sf,
        weight=np.ones(n),
        capacity=capacity,
        steps_remaining=rng.uniform(1e4, 1e6, n),
        elapsed_time=np.zeros(n),
        attained_service=np.zeros(n),
        arrival_time=np.zeros(n),
    )


def with_pairs(inst: Instance, partners: int = 8, seed: int = 1) -> Instance:
    """Single-GPU jobs, each listing packed rates (30–95 % of solo) with ``partners`` random others."""
    import dataclasses

    rng = np.random.default_rng(seed)
    n, k = inst.n, inst.k
    a = np.repeat(np.arange(n), partners)
    b = rng.integers(0, n, n * partners)
    keep = a != b
    P = np.unique(np.sort(np.stack([a[keep], b[keep]], axis=1), axis=1), axis=0)
    rates = rng.uniform(0.3, 0.95, (len(P), k, 2)) * np.stack([inst.throughput[P[:, 0]], inst.throughput[P[:, 1]]], axis=2)
    return dataclasses.replace(inst, scale_factor=np.ones(n), pairs=P, pair_throughput=rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--types", default="3,5")
    ap.add_argument("--solvers", default="auto,ipm,clarabel,highs,highs-simplex")
    ap.add_argument("--packing", action="store_true", help="single-GPU jobs with 8 random measured partners each")
    ap.add_argument("--policy", default="max_min_fairness")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    console = Console(width=140)
    table = Table(title=f"{args.policy}{' (packing)' if args.packing else ''}: seconds (median of {args.repeat})",
                  header_style="bold")
    for col in ("jobs", "types", "solver", "build", "solver s", "decode", "total", "objective", "status"):
        table.add_column(col, justify="right")
    for k in map(int, args.types.split(",")):
        for n in map(int, args.sizes.split(",")):
            inst = gavel_like_instance(n, k)
            opts = {}
            if args.packing:
                inst, opts = with_pairs(inst), {"packing": True}
            for solver in args.solvers.split(","):
                builds, decodes, backend, totals = [], [], [], []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    alloc = solve_instance(inst, args.policy, solver=solver, time_limit=120, **opts)
                    totals.append(time.perf_counter() - t0)
                    builds.append(alloc.build_seconds)
                    decodes.append(alloc.decode_seconds)
                    backend.append(alloc.solver_seconds)
                console.print(f"  n={n} k={k} {solver}: total {statistics.median(totals):.3f} s "
                              f"(min {min(totals):.3f}), solver {statistics.median(backend):.3f} s, {alloc.status}", style="dim")
                table.add_row(
                    str(n), str(k), solver,
                    f"{statistics.median(builds):.3f}",
                    f"{statistics.median(backend):.3f}",
                    f"{statistics.median(decodes):.3f}",
                    f"{statistics.median(totals):.3f}",
                    f"{alloc.objective:.6f}",
                    alloc.status,
                )
    console.print(table)


if __name__ == "__main__":
    main()
