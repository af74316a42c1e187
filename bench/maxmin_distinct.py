"""Max-min fairness on distinct rows, congested: optsched against Gavel's
formulation (one vectorized cvxpy program, ECOS: optsched/bench/references.py)
on the same instances, in one warm process, CPU seconds.

    OPENBLAS_NUM_THREADS=1 OPTSCHED_PEER_DATA=/work/shared/data python bench/maxmin_distinct.py
    python bench/maxmin_distinct.py --sizes 1024 --types 3 --instances 5 --kinds random
    python bench/maxmin_distinct.py --uncongested --sizes 1000 2000 5000 10000   # 0.5 GPUs per job

Instances: optsched/bench/distinct_rows.py (random rows, and Gavel's table with
per-job noise; every row distinct, capacity binds). Per case: p50 / p99 / max
of each side's CPU seconds (time.process_time around the whole call: build,
solve, decode for optsched; canonicalization and ECOS for the reference), the
ratio of the medians and the smallest per-instance ratio, the largest relative
objective difference, and optsched's backends. A last line solves one instance
in a fresh process and reports its import_seconds apart from its solve, and
whether scipy was loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


def _cpu(fn):
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def run_case(kind: str, n: int, k: int, count: int, seed: int, gpus_per_job: float) -> dict:
    from optsched.bench import distinct_rows
    from optsched.bench.references import max_min_cvxpy
    from optsched.policy import solve_instance

    ours, ref, ratio, diff, backends, bound = [], [], [], [], {}, 0
    for i in range(count):
        inst = distinct_rows.instance(kind, n, k, seed + i, gpus_per_job)
        assert distinct_rows.distinct(inst)
        t_ours, alloc = _cpu(lambda: solve_instance(inst, "max_min_fairness", time_limit=600.0))
        t_ref, value = _cpu(lambda: max_min_cvxpy(inst))
        ours.append(t_ours)
        ref.append(t_ref)
        ratio.append(t_ref / t_ours)
        diff.append(abs(alloc.objective - value) / abs(value))
        backend = alloc.explanation.get("backend", "?")
        backends[backend] = backends.get(backend, 0) + 1
        bound += distinct_rows.binds(alloc.explanation.get("gpu_price"))
        print(f"  {kind} {n}x{k} #{i}: ours {t_ours:.4f} s ({backend}), ECOS {t_ref:.4f} s, "
              f"objective {alloc.objective:.9g} vs {value:.9g}", file=sys.stderr, flush=True)
    q = lambda v, p: float(np.percentile(v, p))  # noqa: E731
    return {"kind": kind, "n": n, "k": k, "gpus_per_job": gpus_per_job, "instances": count, "binds": bound,
            "ours": [q(ours, 50), q(ours, 99), max(ours)], "ref": [q(ref, 50), q(ref, 99), max(ref)],
            "ratio_p50": q(ref, 50) / q(ours, 50), "ratio_min": min(ratio), "diff_max": max(diff),
            "backends": backends}


def cold_solve() -> dict:
    """One solve in a fresh process: its import_seconds apart, and whether scipy came in."""
    code = ("import json, sys, time\n"
            "from optsched.bench import distinct_rows\n"
            "from optsched.policy import solve_instance\n"
            "inst = distinct_rows.instance('random', 2048, 5, 0)\n"
            "t0 = time.process_time(); a = solve_instance(inst, 'max_min_fairness'); t = time.process_time() - t0\n"
            "print(json.dumps({'cpu': t, 'import_seconds': a.import_seconds, 'solver_seconds': a.solver_seconds,"
            " 'backend': a.explanation.get('backend'), 'scipy': 'scipy' in sys.modules}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    head = ("| instances | jobs × types | binds | optsched p50 / p99 / max (s) | ECOS p50 / p99 / max (s) "
            "| ratio p50 | worst ratio | max objective diff | optsched backends |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        o, e = r["ours"], r["ref"]
        lines.append(f"| {r['kind']} ×{r['instances']} | {r['n']:,} × {r['k']} | {r['binds']}/{r['instances']} "
                     f"| {o[0]:.4f} / {o[1]:.4f} / {o[2]:.4f} | {e[0]:.3f} / {e[1]:.3f} / {e[2]:.3f} "
                     f"| {r['ratio_p50']:.1f}× | {r['ratio_min']:.1f}× | {r['diff_max']:.1e} "
                     f"| {', '.join(f'{b} {c}' for b, c in sorted(r['backends'].items()))} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", nargs="*", default=["random", "gavel"])
    ap.add_argument("--sizes", type=int, nargs="*", default=[1024, 2048, 10000])
    ap.add_argument("--types", type=int, nargs="*", default=[3, 5])
    ap.add_argument("--instances", type=int, default=20)
    ap.add_argument("--instances-10k", type=int, default=None, help="instances at 10,000 jobs (default: --instances)")
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--uncongested", action="store_true",
                    help="0.5 GPUs per job (the bench's uncongested clusters) instead of 0.15 (capacity binds)")
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args(argv)
    from optsched.bench import distinct_rows
    from optsched.bench.references import max_min_cvxpy
    from optsched.policy import solve_instance

    gpus = 0.5 if args.uncongested else distinct_rows.instances.CONGESTED
    for kind in args.kinds:  # imports and first-call costs of both sides, on the paths the cases take, untimed
        for n in sorted({min(args.sizes), 1100}):
            warm = distinct_rows.instance(kind, n, 3, 1, gpus)
            solve_instance(warm, "max_min_fairness")
            max_min_cvxpy(warm)
    load0 = os.getloadavg()
    rows = []
    for kind in args.kinds:
        for n in args.sizes:
            for k in args.types:
                count = args.instances_10k if n >= 10000 and args.instances_10k else args.instances
                rows.append(run_case(kind, n, k, count, args.seed, gpus))
    load1 = os.getloadavg()
    cold = cold_solve()
    print(table(rows))
    print(f"\nload average (1/5/15 min) at start {load0[0]:.1f} / {load0[1]:.1f} / {load0[2]:.1f}, "
          f"at end {load1[0]:.1f} / {load1[1]:.1f} / {load1[2]:.1f}; {os.cpu_count()} cores; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    print(f"cold process, random 2,048 × 5: {cold['cpu']:.3f} CPU s in all, import_seconds {cold['import_seconds']:.3f}, "
          f"solver_seconds {cold['solver_seconds']:.4f}, backend {cold['backend']}, scipy loaded: {cold['scipy']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "load": [load0, load1], "cold": cold}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
