"""Idle capacity before and after the second stage (formulations/base.fill_idle).

    OPENBLAS_NUM_THREADS=1 python bench/idle_capacity.py            # 20 instances per size
    OPENBLAS_NUM_THREADS=1 python bench/idle_capacity.py --count 5  # quicker

Snapshots drawn from Gavel's throughput table (bench/policies_scaling.instance:
26 job types on k80/p100/v100, scale factors 1/2/4/8, n/6 GPUs per type: capacity
does not bind at makespan's optimum), seeds 0..count-1, at 1,024, 2,048 and
10,000 jobs. For each policy and instance: the raw optimum (fill_idle=False) and
the filled allocation of the same solve; utilization of all GPUs and of usable
GPUs, the policy's objective evaluated on both X (makespan: max_m R_m / thr_m;
max-min: the least normalized share), and the CPU seconds of the second stage
alone (fill_idle on the raw X, time.process_time). ``--distinct``: the bench's
distinct random rows instead (optsched.bench.instances.rigid, 0.5 GPUs per job,
or CONGESTED with ``--congested``), where no rows merge. Prints a Markdown table
(p50 / p99 / max over instances) and the load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from policies_scaling import gavel_table, instance  # noqa: E402

from optsched.formulations.base import fill_idle, utilization  # noqa: E402
from optsched.formulations.max_min_fairness import normalized_throughput  # noqa: E402
from optsched.policy import solve_instance  # noqa: E402


def objective(policy: str, inst, X) -> float:
    if policy == "makespan":
        return float(np.max(inst.steps_remaining / (inst.throughput * X).sum(axis=1)))
    return float((normalized_throughput(inst) * X).sum(axis=1).min())


def measure(policy: str, n: int, seed: int, table, distinct: str | None = None, reference: bool = False) -> dict:
    if distinct:
        from optsched.bench.instances import CONGESTED, rigid

        inst = rigid(n, 3, seed=seed, gpus_per_job=CONGESTED if distinct == "congested" else 0.5)
    else:
        inst = instance(n, np.random.default_rng(seed), table)
    raw = solve_instance(inst, policy, time_limit=600.0, fill_idle=False)
    reps = 5  # the fill is ~1 ms: the least of a few runs, in CPU seconds
    cpu = []
    for _ in range(reps):
        t0 = time.process_time()
        X = fill_idle(inst, raw.fractions)
        cpu.append(time.process_time() - t0)
    filled = solve_instance(inst, policy, time_limit=600.0)
    assert np.array_equal(filled.fractions, X)  # the entry point's second stage is this one
    u0, u1 = utilization(inst, raw.fractions), utilization(inst, X)
    o0, o1 = objective(policy, inst, raw.fractions), objective(policy, inst, X)
    ref = {}
    if reference and policy == "makespan":  # Gavel-style bisection with cvxpy + ECOS (optsched/bench/references.py)
        from optsched.bench import references

        try:
            _, Xr = references.makespan(inst)
            ref = {"ref_of_capacity": utilization(inst, Xr)["of_capacity"],
                   "ours_vs_ref": objective(policy, inst, X) / objective(policy, inst, Xr) - 1}
        except Exception as e:  # (ECOS fails on some bisection steps: counted, not hidden)
            ref = {"ref_error": f"{type(e).__name__}"}
    return {**ref, "backend": raw.explanation.get("backend"), "of_capacity_raw": u0["of_capacity"],
            "of_capacity": u1["of_capacity"], "usable_raw": u0["total"], "usable": u1["total"],
            "objective_change": (o1 - o0) / abs(o0), "fill_cpu": min(cpu), "solve_cpu": raw.solve_seconds}


def pct(values, q) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--sizes", type=int, nargs="*", default=[1024, 2048, 10000])
    ap.add_argument("--policies", nargs="*", default=["makespan", "max_min_fairness"])
    ap.add_argument("--reference", action="store_true", help="makespan: also Gavel-style bisection (cvxpy + ECOS)")
    ap.add_argument("--distinct", action="store_true", help="distinct random rows (bench instances), 3 types")
    ap.add_argument("--congested", action="store_true", help="with --distinct: capacity binds")
    args = ap.parse_args(argv)
    distinct = ("congested" if args.congested else "loose") if args.distinct else None
    table = gavel_table()
    print(f"throughputs: {'distinct rows, ' + distinct if distinct else 'Gavel simulation_throughputs.json' if table else 'synthetic'}; "
          f"load average at start {os.getloadavg()[0]:.1f}")
    print("| policy | jobs | raw backend | GPUs used raw p50/p99/max | usable used raw p50/min | after: of all GPUs "
          "p50/min | usable used after (min) | objective change max | fill CPU ms p50/p99/max | solve ms p50 (wall) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for policy in args.policies:
        for n in args.sizes:
            rows = [measure(policy, n, seed, table, distinct, args.reference) for seed in range(args.count)]
            col = {k: [r[k] for r in rows if k in r] for k in {k for r in rows for k in r}}
            backends = ", ".join(sorted(set(col["backend"])))
            print(f"| {policy} | {n:,} | {backends} | "
                  f"{100 * pct(col['of_capacity_raw'], 50):.1f} / {100 * pct(col['of_capacity_raw'], 99):.1f} / "
                  f"{100 * max(col['of_capacity_raw']):.1f} % | "
                  f"{100 * pct(col['usable_raw'], 50):.1f} / {100 * min(col['usable_raw']):.1f} % | "
                  f"{100 * pct(col['of_capacity'], 50):.2f} / {100 * min(col['of_capacity']):.2f} % | "
                  f"{100 * min(col['usable']):.2f} % | {max(col['objective_change'], key=abs):+.1e} | "
                  f"{1e3 * pct(col['fill_cpu'], 50):.2f} / {1e3 * pct(col['fill_cpu'], 99):.2f} / "
                  f"{1e3 * max(col['fill_cpu']):.2f} | {1e3 * pct(col['solve_cpu'], 50):.1f} |", flush=True)
            if "ref_of_capacity" in col or "ref_error" in col:
                failed = len(col.get("ref_error", []))
                col.setdefault("ref_of_capacity", [np.nan])
                col.setdefault("ours_vs_ref", [np.nan])
                print(f"|   reference (bisection, ECOS; {failed} of {len(rows)} failed) | {n:,} | GPUs used p50/min "
                      f"{100 * pct(col['ref_of_capacity'], 50):.1f} / {100 * min(col['ref_of_capacity']):.1f} % | "
                      f"our makespan vs its: p50 {100 * pct(col['ours_vs_ref'], 50):+.3f} %, "
                      f"max {100 * max(col['ours_vs_ref']):+.3f} % | | | | | | |", flush=True)
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
