"""Migration-aware rounds: what moving jobs costs when a restart is not free.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/migration_bench.py [--quick] [--jobs 300]

The simulator charges ``restart_overhead`` seconds whenever a job (re)starts or
moves (a checkpoint and a restart, as Gavel's and Blox's runtimes pay it). Each
trace runs max_min_fairness with three allocators on the same jobs:

- ``gavel``: Gavel's mechanism as its code has it (``queue="gavel"``, walk
  order v100, p100, k80; bench/fidelity.py);
- ``default``: our default walk (``queue="phased"``), which ignores the cost;
- ``aware``: the default walk with ``migration_cost`` = the restart overhead
  (optsched/allocator/walk.py: a running job stays on its type and GPUs unless
  it is more than H = 20·cost/round rounds further behind its share elsewhere;
  a running job keeps its GPUs until a waiting one is ~X·H rounds further
  behind).

Traces: Gavel's continuous-arrival stream (traces/generate.py ``generate_gavel``,
single-GPU jobs, job types from ``simulation_throughputs.json``) at 2.0 and
4.0 jobs/h, and the built-in 120-job default trace; 36:36:36 v100/p100/k80,
rounds of 360 s (Gavel's trace: allocation recomputed at most every 1,920 s).

Columns: migrations and preemptions per job-hour (Σ over jobs / Σ JCT in
hours), average JCT, and the share error: for each job present ≥ 10 rounds,
max over types |rounds it ran there − Σ over its rounds of X| / rounds
present, averaged over jobs (work conservation adds time beyond X when X
leaves GPUs idle, so this is not 0 even for a perfect mechanism at low load).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

PEER = Path(os.environ.get("OPTSCHED_PEER_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
CLUSTER = {"v100": 36, "p100": 36, "k80": 36}
GAVEL = {"queue": "gavel", "type_order": ["v100", "p100", "k80"]}


class ShareMeter:
    """Wraps the simulator's Allocator: accumulates, per job, X of every round
    it was present and the rounds it ran on each type."""

    def __init__(self):
        self.target: dict[str, np.ndarray] = {}
        self.got: dict[str, np.ndarray] = {}
        self.present: dict[str, int] = {}

    def allocator_class(self):
        from optsched.allocator import Allocator

        meter = self

        class Metered(Allocator):
            def next_round(self, jobs, allocation):
                p = super().next_round(jobs, allocation)
                cols = [self.cols.index[t] for t in allocation.gpu_types]
                X = np.asarray(allocation.fractions, dtype=float)
                row = {j: m for m, j in enumerate(allocation.job_ids)}
                ids = jobs.job_ids if hasattr(jobs, "job_ids") else [j.id for j in jobs.jobs]
                for j in ids:
                    t = meter.target.setdefault(j, np.zeros(self.cols.k))
                    if j in row:
                        t[cols] += X[row[j]]
                    meter.present[j] = meter.present.get(j, 0) + 1
                    g = meter.got.setdefault(j, np.zeros(self.cols.k))
                    if j in p.assignments:
                        g[self.cols.index[p.gpu_type(j)]] += 1
                return p

        return Metered

    def error(self) -> float:
        errs = [np.abs(self.got[j] - self.target[j]).max() / n for j, n in self.present.items() if n >= 10]
        return float(np.mean(errs)) if errs else float("nan")


def run(trace, table, overhead: float, variant: str, **config) -> dict:
    import optsched.allocator as allocator_module
    from optsched.sim import simulate

    options = {"gavel": GAVEL, "default": {}, "aware": {"migration_cost": overhead}}[variant]
    meter = ShareMeter()
    original = allocator_module.Allocator
    allocator_module.Allocator = meter.allocator_class()  # the loop imports it when it starts
    try:
        t0 = time.perf_counter()
        r = simulate(trace, CLUSTER, policy="max_min_fairness", throughputs=table, round_length=360.0,
                     restart_overhead=overhead, allocator_options=options, **config)
        wall = time.perf_counter() - t0
    finally:
        allocator_module.Allocator = original
    df = r.jobs
    hours = float(df["jct"].sum()) / 3600.0
    return {"migr/job-h": float(df["migrations"].sum()) / hours, "preempt/job-h": float(df["preemptions"].sum()) / hours,
            "avg JCT (h)": float(df["jct"].mean()) / 3600.0, "share error": meter.error(),
            "migrations": int(df["migrations"].sum()), "done": int(df["jct"].notna().sum()), "wall s": wall}


def _allow_migration_cost() -> None:
    """The simulator validates allocator_options against a list of names; add
    ``migration_cost`` to it when the simulator does not list it yet."""
    import optsched.sim.loop as loop

    if "migration_cost" not in loop.ALLOCATOR_OPTIONS:
        loop.ALLOCATOR_OPTIONS = (*loop.ALLOCATOR_OPTIONS, "migration_cost")


def main() -> None:
    from rich.console import Console
    from rich.table import Table

    from optsched.traces.generate import default_trace, generate_gavel
    from optsched.traces.throughputs import gavel_throughputs

    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=300, help="jobs in Gavel's stream")
    ap.add_argument("--overheads", default="30,120")
    ap.add_argument("--rates", default="2.0,4.0")
    ap.add_argument("--quick", action="store_true", help="one overhead (120 s), one rate (2.0), 150 jobs")
    args = ap.parse_args()
    overheads = [120.0] if args.quick else [float(x) for x in args.overheads.split(",")]
    rates = [2.0] if args.quick else [float(x) for x in args.rates.split(",")]
    n_jobs = 150 if args.quick else args.jobs
    _allow_migration_cost()
    table = gavel_throughputs(PEER)
    traces = [(f"gavel {rate:g} jobs/h, {n_jobs} jobs", generate_gavel(table, n_jobs, rate, seed=0), table,
               {"min_recompute_interval": 1920.0}) for rate in rates]
    traces.append(("built-in default (120 jobs)", default_trace(), None, {}))
    load0 = os.getloadavg()
    out = Table(title="max_min_fairness, 36:36:36 v100/p100/k80, rounds of 360 s: migrations and JCT with restart costs",
                header_style="bold")
    cols = ["trace", "restart s", "allocator", "migr/job-h", "preempt/job-h", "avg JCT (h)", "share error", "migrations",
            "done", "wall s"]
    for c in cols:
        out.add_column(c, justify="left" if c in ("trace", "allocator") else "right")
    for label, trace, tbl, config in traces:
        for overhead in overheads:
            for variant in ("gavel", "default", "aware"):
                r = run(trace, tbl, overhead, variant, seed=0, **config)
                out.add_row(label, f"{overhead:g}", variant + (f" (cost {overhead:g} s)" if variant == "aware" else ""),
                            f"{r['migr/job-h']:.3f}", f"{r['preempt/job-h']:.3f}", f"{r['avg JCT (h)']:.2f}",
                            f"{r['share error']:.3f}", str(r["migrations"]), str(r["done"]), f"{r['wall s']:.1f}")
            out.add_section()
    console = Console(width=170)
    console.print(out)
    load1 = os.getloadavg()
    console.print(f"load average (1/5/15 min) before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; "
                  f"after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} (2 shared cores: wall times are indicative)")


if __name__ == "__main__":
    main()
