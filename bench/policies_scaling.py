"""Build and solve time of every policy of the family at n = 100, 1,000, 10,000
jobs, and of space sharing at 1,000 jobs with a realistic pair density.

    OPENBLAS_NUM_THREADS=1 python bench/policies_scaling.py            # full sweep (a few minutes)
    OPENBLAS_NUM_THREADS=1 python bench/policies_scaling.py --quick    # n = 100, 1,000

Jobs are drawn from Gavel's measured throughput table (peer data,
``gavel/simulation_throughputs.json``: 26 single-GPU job types on k80 / p100 /
v100, Narayanan et al., OSDI'20) when it is present, else from a synthetic
matrix; the cluster has about one GPU per two jobs (half of each type's share),
scale factors 1/2/4/8 with Gavel's generator probabilities 0.70/0.10/0.15/0.05.
Pair density for packing: each job lists co-location throughputs with 8
random partners (a profiling budget; Gavel measures every pair of job types,
and 74 % of its single-GPU pairs on v100 beat time slicing), single-GPU jobs
only (only equal widths pack), then the admission rule and the 8-best-partner
cap apply (formulations/base.py).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from optsched.model import Instance
from optsched.policy import solve_instance

ROOT = Path(__file__).resolve().parents[1]
TYPES = ("k80", "p100", "v100")
POLICIES = [
    "max_min_fairness",
    "max_min_fairness_water_filling",
    "max_min_fairness_hierarchical",
    "finish_time_fairness",
    "makespan",
    "max_throughput",
    "proportional_fairness",
    "min_cost",
    "min_cost_slo",
    "fifo",
    "las",
    "srtf",
    "tiresias",
    "gandiva",
]
PACKING = ["max_min_fairness", "finish_time_fairness", "makespan", "max_throughput"]
PRICE = {"k80": 0.45, "p100": 1.46, "v100": 2.48}  # $/GPU-hour, the example snapshot's (AWS-like) prices


def gavel_table():
    """{job type: (solo steps/s per type (3,), {other type: per-type (t_self, t_other) (3, 2)})} or None."""
    path = Path(os.environ.get("OPTSCHED_PEER_DATA", ROOT.parent / "shared" / "data")) / "gavel" / "simulation_throughputs.json"
    if not path.is_file():
        return None
    raw = json.loads(path.read_text())
    table = {}
    for key in raw["v100"]:
        name, sf = ast.literal_eval(key)
        if sf != 1:
            continue
        solo = np.array([raw[t][key]["null"] for t in TYPES])
        pairs = {}
        for other in raw["v100"][key]:
            if other == "null" or ast.literal_eval(other)[1] != 1:
                continue
            pairs[ast.literal_eval(other)[0]] = np.array([raw[t][key].get(other, [0.0, 0.0]) for t in TYPES])
        table[name] = (solo, pairs)
    return table


def instance(n: int, rng: np.random.Generator, table, pairs_per_job: int = 0) -> Instance:
    k = len(TYPES)
    sf = rng.choice([1, 2, 4, 8], n, p=[0.70, 0.10, 0.15, 0.05]).astype(float) if not pairs_per_job else np.ones(n)
    if table:
        names = sorted(table)
        kinds = rng.integers(0, len(names), n)
        T = np.stack([table[names[c]][0] for c in kinds]) * sf[:, None] ** 0.8  # sublinear multi-GPU scaling
    else:
        kinds, names = np.zeros(n, dtype=int), []
        T = rng.uniform(0.5, 20, (n, k)) * np.array([0.3, 0.7, 1.0])
    capacity = np.full(k, float(max(8, n // (2 * k))))
    steps = rng.uniform(1e3, 1e6, n)
    inst = Instance(
        job_ids=tuple(f"job{m:05d}" for m in range(n)),
        gpu_types=TYPES,
        throughput=T,
        scale_factor=sf,
        weight=rng.choice([1.0, 2.0], n, p=[0.8, 0.2]),
        capacity=capacity,
        steps_remaining=steps,
        elapsed_time=rng.uniform(0, 3600, n),
        attained_service=rng.uniform(0, 2e4, n),
        arrival_time=np.sort(rng.uniform(0, 3600, n)),
        entity=tuple(f"team{t}" for t in rng.integers(0, 10, n)),
        entity_weights={f"team{t}": float(1 + t % 3) for t in range(10)},
        time=3600.0,
        slo=np.where(rng.random(n) < 0.1, 3600 + steps / T.max(axis=1) * rng.uniform(2, 20, n), np.nan),
        price=np.array([PRICE[t] for t in TYPES]),
    )
    if not pairs_per_job:
        return inst
    a = np.repeat(np.arange(n), pairs_per_job)
    b = rng.integers(0, n, n * pairs_per_job)
    keep = a != b
    P = np.unique(np.sort(np.stack([a[keep], b[keep]], axis=1), axis=1), axis=0)
    if table:
        rates = np.stack([table[names[kinds[x]]][1].get(names[kinds[y]], np.zeros((k, 2))) for x, y in P])
    else:
        rates = rng.uniform(0.3, 0.9, (len(P), k, 2)) * np.stack([T[P[:, 0]], T[P[:, 1]]], axis=2)
    return dataclass_replace(inst, pairs=P, pair_throughput=rates)


def dataclass_replace(inst, **kw):
    import dataclasses

    return dataclasses.replace(inst, **kw)


def run(inst: Instance, policy: str, **opts):
    t0 = time.perf_counter()
    alloc = solve_instance(inst, policy, time_limit=600.0, **opts)
    wall = time.perf_counter() - t0
    return alloc, wall


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n = 100 and 1,000 only")
    ap.add_argument("--sizes", type=int, nargs="*", help="override the job counts")
    ap.add_argument("--policies", nargs="*", help="subset of policies")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--synthetic", action="store_true", help="random throughputs instead of Gavel's table")
    args = ap.parse_args(argv)
    sizes = args.sizes or ([100, 1000] if args.quick else [100, 1000, 10000])
    policies = args.policies or POLICIES
    table = None if args.synthetic else gavel_table()
    run(instance(20, np.random.default_rng(0), table), "max_min_fairness")  # warm up imports (numpy, the backends)
    console = Console(width=140)
    console.print(f"throughputs: {'Gavel simulation_throughputs.json' if table else 'synthetic'}; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")

    out = Table(title="policy solve time (seconds; wall = build + solve + decode)", header_style="bold")
    out.add_column("policy")
    for n in sizes:
        out.add_column(f"n={n:,} wall", justify="right")
        out.add_column("build", justify="right")
    out.add_column(f"status / rounds @ n={sizes[-1]:,}")
    instances = {n: instance(n, np.random.default_rng(args.seed), table) for n in sizes}
    for policy in policies:
        cells, last = [], ""
        for n in sizes:
            alloc, wall = run(instances[n], policy)
            cells += [f"{wall:.2f}", f"{alloc.build_seconds:.2f}"]
            rounds = alloc.explanation.get("lp_rounds")
            last = alloc.status + (f", {rounds} LPs" if rounds else "")
        out.add_row(policy, *cells, last)
        console.print(f"  {policy} done", style="dim")
    console.print(out)

    if not args.policies or set(args.policies) & set(PACKING):
        n = 1000
        inst = instance(n, np.random.default_rng(args.seed + 1), table, pairs_per_job=8)
        pk = Table(title=f"space sharing, n = {n:,} single-GPU jobs, {len(inst.pairs):,} measured pairs", header_style="bold")
        for c in ("policy", "no packing s", "packing s", "objective alone", "objective packed", "pairs admitted", "pairs used"):
            pk.add_column(c, justify="right" if c != "policy" else "left")
        for policy in [p for p in PACKING if not args.policies or p in args.policies]:
            a0, w0 = run(inst, policy)
            a1, w1 = run(inst, policy, packing=True)
            pk.add_row(
                policy, f"{w0:.2f}", f"{w1:.2f}", f"{a0.objective:.6g}", f"{a1.objective:.6g}",
                str(a1.explanation.get("pairs_admitted", 0)), str(a1.explanation.get("pairs_packed", 0)),
            )
        console.print(pk)
    return 0


if __name__ == "__main__":
    sys.exit(main())
