"""Solve time of a policy vs problem size and backend.

    python bench/solve_scaling.py [--sizes 100,1000,10000] [--types 3,5] [--repeat 3]

Prints build (cvxpy model), solve (problem.solve: canonicalization + backend),
the backend's own time, and total wall seconds, the median of --repeat runs, and the objective so the
backends can be compared. Run with OPENBLAS_NUM_THREADS=1 on a quiet machine.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--types", default="3,5")
    ap.add_argument("--solvers", default="clarabel,highs")
    ap.add_argument("--policy", default="max_min_fairness")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    table = Table(title=f"{args.policy}: seconds (median of {args.repeat})", header_style="bold")
    for col in ("jobs", "types", "solver", "build", "solve", "(backend)", "total", "objective", "status"):
        table.add_column(col, justify="right")
    for k in map(int, args.types.split(",")):
        for n in map(int, args.sizes.split(",")):
            inst = gavel_like_instance(n, k)
            for solver in args.solvers.split(","):
                builds, solves, backend, totals = [], [], [], []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    alloc = solve_instance(inst, args.policy, solver=solver, time_limit=120)
                    totals.append(time.perf_counter() - t0)
                    builds.append(alloc.build_seconds)
                    solves.append(alloc.solve_seconds)
                    backend.append(alloc.solver_seconds)
                table.add_row(
                    str(n), str(k), solver,
                    f"{statistics.median(builds):.3f}",
                    f"{statistics.median(solves):.3f}",
                    f"{statistics.median(backend):.3f}",
                    f"{statistics.median(totals):.3f}",
                    f"{alloc.objective:.6f}",
                    alloc.status,
                )
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
