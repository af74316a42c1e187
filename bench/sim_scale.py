"""End-to-end scale: a 10,000-job trace on a 2,048-GPU cluster.

    python bench/sim_scale.py [--jobs 10000] [--rate 60] [--policy max_min_fairness]

Gavel-style stream (traces/generate.py) with multi-GPU jobs on the project's
own throughput table, cluster v100=1024, p100=512, k80=512 (2,048 GPUs), rounds
of 360 s, recomputation at most every 1,920 s. Prints wall time and where it
went: solves, the allocator (mechanism + placement), and the simulator itself.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=60.0, help="arrivals per hour")
    ap.add_argument("--policy", default="max_min_fairness")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from optsched.sim import simulate
    from optsched.traces.generate import generate_gavel
    from optsched.traces.throughputs import default_throughputs

    import optsched.allocator  # noqa: F401  (import time is not simulation time)
    from optsched.policy import _module

    _module(a.policy)

    trace = generate_gavel(default_throughputs(), a.jobs, a.rate, seed=a.seed, multi_gpu=True)
    cluster = {"v100": 1024, "p100": 512, "k80": 512}
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    r = simulate(trace, cluster, policy=a.policy, min_recompute_interval=1920.0, seed=a.seed)
    prof.disable()
    wall = time.perf_counter() - t0
    stats = pstats.Stats(prof)
    alloc = next((v[3] for k, v in stats.stats.items() if k[2] == "next_round" and "allocator" in k[0]), 0.0)
    prof_total = max(stats.total_tt, 1e-9)
    s = r.summary
    t = Table(title=f"{a.jobs:,} jobs on 2,048 GPUs (v100 1024, p100 512, k80 512), {a.policy}", header_style="bold")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    for k, v in (
        ("wall time (s)", f"{wall:.1f}"),
        ("rounds / recomputations", f"{s['rounds']:,} / {s['recomputations']:,}"),
        ("solver time (s)", f"{s['solver_seconds']:.1f} ({s['solver_seconds'] / s['wall_seconds']:.0%} of the loop)"),
        ("allocator share (profiled)", f"{alloc / prof_total:.0%}"),
        ("simulator + metrics share", f"{max(0.0, 1 - alloc / prof_total - s['solver_seconds'] / s['wall_seconds']):.0%}"),
        ("jobs completed", f"{s['jobs_completed']:,}"),
        ("avg / p99 JCT (h)", f"{s['avg_jct'] / 3600:.2f} / {s['p99_jct'] / 3600:.2f}"),
        ("makespan (h)", f"{s['makespan'] / 3600:.1f}"),
        ("utilization", ", ".join(f"{k} {v:.0%}" for k, v in s["utilization"].items())),
    ):
        t.add_row(k, v)
    Console(width=160).print(t)


if __name__ == "__main__":
    main()
