"""optsched's policies against reference formulations written the way Gavel
writes them, on the same instances, in one run (in-process, warm).

    OPENBLAS_NUM_THREADS=1 python bench/engine_bench.py              # n = 1,000 / 2,048 / 10,000
    OPENBLAS_NUM_THREADS=1 python bench/engine_bench.py --sizes 1000 --policies max_min_fairness

The references are our own code in Gavel's style (not Gavel's code; optsched/bench/references.py):
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

from optsched.bench import references  # noqa: E402
from optsched.policy import solve_instance  # noqa: E402

# References slower than this (seconds, measured at the previous size) are not run at larger sizes.
BUDGET = 120.0

# The references live in optsched/bench/references.py (`optsched bench` runs them too); here
# only their objectives are compared.
REFERENCES = {
    "max_min_fairness": ("vectorized cvxpy + ECOS", lambda inst: references.max_min(inst)[0]),
    "finish_time_fairness": ("per-job inv_pos loop, ECOS", lambda inst: references.finish_time_fairness(inst)[0]),
    "makespan": ("bisection, ECOS LPs", lambda inst: references.makespan(inst)[0]),
    "max_min_fairness_water_filling": ("LP + MILP per level", lambda inst: references.water_filling(inst)[0]),
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
