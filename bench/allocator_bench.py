"""Allocator and placement benchmarks: time per next_round, convergence of the
time fractions to X, CP-SAT vs greedy placement. Prints tables.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/allocator_bench.py [--quick]

Jobs follow Gavel's generator mix (traces/generate.py): scale factors 1/2/4/8 with
probabilities 0.70/0.10/0.15/0.05; three GPU types, servers of 4 GPUs.
X is the max-min fairness allocation (optsched.policy) of the same jobs.
Timings on a shared 2-core machine: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from optsched.allocator import Allocator
from optsched.model import Cluster, Instance
from optsched.placement import Layout, place
from optsched.policy import solve_instance

TYPES = ("k80", "p100", "v100")
console = Console(width=160)


def jobs(n: int, gpus: int, rng: np.random.Generator) -> Instance:
    capacity = np.array([gpus // 3 + (1 if i < gpus % 3 else 0) for i in range(3)], dtype=float)
    speed = np.array([1.0, 2.2, 3.3])  # k80 < p100 < v100, roughly Gavel's table
    T = rng.uniform(0.5, 1.5, (n, 1)) * speed * rng.uniform(0.8, 1.2, (n, 3))
    sf = rng.choice([1, 2, 4, 8], n, p=[0.7, 0.1, 0.15, 0.05]).astype(float)
    T[sf[:, None] > capacity[None, :]] = 0.0
    return Instance(
        job_ids=tuple(f"job{i}" for i in range(n)), gpu_types=TYPES, throughput=T, scale_factor=sf,
        weight=np.ones(n), capacity=capacity, steps_remaining=np.full(n, np.nan), elapsed_time=np.zeros(n),
        attained_service=np.zeros(n), arrival_time=np.zeros(n),
    )


def cluster_of(inst: Instance) -> Cluster:
    return Cluster(gpus={t: int(c) for t, c in zip(inst.gpu_types, inst.capacity)})


def time_rounds(inst, alloc, placement: str, rounds: int, time_limit: float = 1.0):
    allocator = Allocator(cluster_of(inst), placement=placement, placement_time_limit=time_limit)
    t0 = time.process_time()
    p = allocator.next_round(inst, alloc)
    first = time.process_time() - t0
    times, notes, moved, switched, continued = [], 0, 0, 0, 0
    for _ in range(rounds):
        t0 = time.process_time()
        q = allocator.next_round(inst, alloc)
        times.append(time.process_time() - t0)
        same = {j for j in q.continued if q.gpu_type(j) == p.gpu_type(j)}
        moved += len(same & set(q.migrated))
        switched += len(q.continued) - len(same)
        continued += len(q.continued)
        notes += bool(q.note)
        p = q
    t = np.array(times) * 1e3
    c = max(continued, 1)
    return first * 1e3, np.median(t), np.percentile(t, 95), moved / c, switched / c, notes


def bench_next_round(quick: bool) -> None:
    table = Table(title="next_round: CPU time per call (ms; process time, the machine is shared)", header_style="bold")
    for c in ("jobs", "GPUs", "placement", "first round", "median", "p95", "moved in type", "type switch", "rounds w/ note"):
        table.add_column(c, justify="left" if c == "placement" else "right")
    cases = [(50, 96, 300), (200, 96, 300), (1000, 512, 30), (10_000, 2048, 3 if quick else 5)]
    for n, gpus, rounds in cases:
        inst = jobs(n, gpus, np.random.default_rng(n))
        alloc = solve_instance(inst, "max_min_fairness")
        for placement in ("consolidated", "first_fit", "cpsat"):
            first, med, p95, moved, switched, notes = time_rounds(inst, alloc, placement, rounds)
            table.add_row(str(n), str(gpus), placement, f"{first:.2f}", f"{med:.3f}", f"{p95:.3f}",
                          f"{moved:.3f}", f"{switched:.3f}", f"{notes}/{rounds}")
    console.print(table)


def empirical(inst, alloc, rounds: int, **options) -> np.ndarray:
    allocator = Allocator(cluster_of(inst), **options)
    col = {t: c for c, t in enumerate(inst.gpu_types)}
    pos = {j: m for m, j in enumerate(inst.job_ids)}
    counts = np.zeros((inst.n, inst.k))
    for _ in range(rounds):
        p = allocator.next_round(inst, alloc)
        for job in p.assignments:
            counts[pos[job], col[p.gpu_type(job)]] += 1
    return counts / rounds


def bench_convergence(quick: bool) -> None:
    rounds = 200 if quick else 500
    table = Table(title=f"max over jobs and types of |fraction − X| after {rounds} rounds (work_conserving=False)", header_style="bold")
    table.add_column("instance")
    variants = [("per_type", "fixed"), ("per_type", "shuffle"), ("phased", "fixed"), ("phased", "shuffle"), ("global", "fixed")]
    for q, o in variants:
        table.add_column(f"{q}/{o}" + (" (Gavel)" if (q, o) == ("per_type", "shuffle") else "") + (" (default)" if (q, o) == ("phased", "fixed") else ""), justify="right")
    for label, n, gpus in (("contended: 150 jobs, 96 GPUs", 150, 96), ("slack: 60 jobs, 96 GPUs", 60, 96)):
        worst = []
        for q, o in variants:
            gaps = []
            for seed in range(2 if quick else 3):
                inst = jobs(n, gpus, np.random.default_rng(100 + seed))
                alloc = solve_instance(inst, "max_min_fairness")
                F = empirical(inst, alloc, rounds, queue=q, type_order=o, work_conserving=False)
                gaps.append(np.abs(F - alloc.fractions).max())
            worst.append(f"{max(gaps):.3f}")
        table.add_row(label, *worst)
    console.print(table)


def bench_cpsat(quick: bool) -> None:
    table = Table(title="placement on random rounds: servers spanned and migrations (sums)", header_style="bold")
    for c in ("GPUs", "GPUs / server", "instances", "greedy spans", "cpsat spans", "greedy migr.", "cpsat migr.",
              "greedy ms", "cpsat ms (median)", "cpsat notes"):
        table.add_column(c, justify="right")
    # 683 GPUs: one type's share of a 2,048-GPU, three-type cluster.
    cases = [(64, 4, 10 if quick else 30), (64, 8, 10 if quick else 30), (683, 4, 2 if quick else 3), (683, 8, 2 if quick else 3)]
    for gpus, per_server, count in cases:
        rng = np.random.default_rng(per_server)
        layout = Layout.from_cluster(Cluster(gpus={"v100": gpus}), gpus_per_server=per_server).types["v100"]
        totals = np.zeros(4, dtype=int)
        times, gtimes, notes = [], [], 0
        for _ in range(count):
            widths, previous, used = [], [], 0
            perm = rng.permutation(layout.W)
            while True:
                w = int(rng.choice([1, 2, 4, 8], p=[0.7, 0.1, 0.15, 0.05]))
                if sum(widths) + w > layout.W:
                    break
                widths.append(w)
                if rng.random() < 0.5 and used + w <= layout.W:
                    previous.append(np.sort(perm[used : used + w]))  # scattered: a fragmented past
                    used += w
                else:
                    previous.append(None)
            widths = np.array(widths)
            t0 = time.process_time()
            g = place(layout, widths, previous, "consolidated")
            gtimes.append(time.process_time() - t0)
            t0 = time.process_time()
            e = place(layout, widths, previous, "cpsat", time_limit=1.0)
            times.append(time.process_time() - t0)
            totals += [g.spans, e.spans, g.migrations, e.migrations]
            notes += bool(e.note)
        table.add_row(str(gpus), str(per_server), str(count), *map(str, totals), f"{np.median(gtimes) * 1e3:.1f}",
                      f"{np.median(times) * 1e3:.1f}", str(notes))
    console.print(table)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    bench_next_round(args.quick)
    bench_convergence(args.quick)
    bench_cpsat(args.quick)


if __name__ == "__main__":
    main()
