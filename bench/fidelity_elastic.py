"""Fidelity of the elastic policies against Pollux's and Sia's published means.

    python bench/fidelity.py --only pollux|sia          (sections registered there)
    python bench/fidelity_elastic.py [--only pollux|sia] [--workloads 1-8]

- pollux: Pollux's 8 workloads (160 jobs each, ``pollux/workloads/``) on 16 nodes ×
  4 GPUs, 60 s rounds, 30 s restarts; average JCT of ``pollux`` (elastic, our MILP),
  ``tiresias`` (2 queues, 16 GPU-h threshold, the workload's GPUs and batch size)
  and ``fifo``. Published (Pollux OSDI'21 simulator, mean over workloads, 1× load):
  Pollux 2,751 s, Tiresias 4,038 s (0.5×: 1,534 / 2,092; 2×: 5,289 / 10,040; those
  workload sets are not in the peer data, so only 1× is run here).
- sia: Sia's default heterogeneous cluster (6 × 4 T4 "aws" + 2 × 8 A100 "dgx-ext"
  + 3 × 8 RTX 2080Ti "rtx" = 64 GPUs) on the Saturn workloads; ``sia`` (p = −0.5,
  λ_n = 1.1, 60 s), ``max_min_fairness`` (Gavel, rigid, 360 s rounds) and ``pollux``
  (heterogeneity-agnostic goodput); per-application restart seconds. Published
  (Sia SOSP'23, Helios/Saturn, mean over workloads): avg JCT Sia 0.7 h, Pollux 1.0 h,
  Gavel 2.5 h; p99 10.9 / 15.0 / 38.7 h; makespan 14.9 / 25.5 / 43.0 h.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

PEER = Path(os.environ.get("OPTSCHED_PEER_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
POLLUX_PUBLISHED = {"pollux": 2751.0, "tiresias": 4038.0}  # seconds, 1× load, Pollux OSDI'21
SIA_PUBLISHED = {  # hours: avg JCT, p99 JCT, makespan (Sia SOSP'23, Helios/Saturn)
    "sia": (0.7, 10.9, 14.9), "pollux": (1.0, 15.0, 25.5), "max_min_fairness": (2.5, 38.7, 43.0),
}
SIA_CLUSTER = {"aws": (6, 4), "dgx-ext": (2, 8), "rtx": (3, 8)}


def _workloads(spec: str, count: int) -> list[int]:
    if not spec:
        return list(range(1, count + 1))
    lo, _, hi = spec.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def pollux(workloads: str = "", policies=("pollux", "tiresias", "fifo")) -> dict:
    from rich.console import Console
    from rich.table import Table

    from optsched.goodput.profiles import pollux_applications
    from optsched.sim.elastic import ElasticSimulator, read_workload, summarize

    apps = pollux_applications(PEER)
    ids = _workloads(workloads, 8)
    res: dict[str, list[float]] = {p: [] for p in policies}
    wall: dict[str, float] = {p: 0.0 for p in policies}
    for w in ids:
        wl = read_workload(PEER / "pollux" / "workloads" / f"workload-{w}.csv")
        for p in policies:
            t0 = time.perf_counter()
            sim = ElasticSimulator(wl, apps, {"gpu": (16, 4)}, p)
            res[p].append(summarize(sim.run())["avg_jct"])
            wall[p] += time.perf_counter() - t0
    t = Table(title=f"Pollux workloads {ids[0]}-{ids[-1]} on 16×4 GPUs (avg JCT, s)", header_style="bold")
    for c in ("policy", "ours", "published", "ours/published", "wall s"):
        t.add_column(c, justify="right")
    for p in policies:
        ours = float(np.mean(res[p]))
        pub = POLLUX_PUBLISHED.get(p)
        t.add_row(p, f"{ours:,.0f}", f"{pub:,.0f}" if pub else "-", f"{ours / pub:.2f}" if pub else "-", f"{wall[p]:.0f}")
    Console(width=160).print(t)
    if "pollux" in res and "tiresias" in res:
        ours = np.mean(res["tiresias"]) / np.mean(res["pollux"])
        Console(width=160).print(f"Tiresias/Pollux JCT ratio: ours {ours:.2f}, published {4038 / 2751:.2f}")
    return {p: res[p] for p in policies}


def sia(workloads: str = "", policies=("sia", "pollux", "max_min_fairness")) -> dict:
    from rich.console import Console
    from rich.table import Table

    from optsched.goodput.profiles import sia_applications
    from optsched.sim.elastic import ElasticSimulator, read_workload, summarize

    apps = sia_applications(PEER)
    ids = _workloads(workloads, 10)
    res: dict[str, list[dict]] = {p: [] for p in policies}
    wall: dict[str, float] = {p: 0.0 for p in policies}
    for w in ids:
        wl = read_workload(PEER / "sia" / "workloads" / "saturn" / f"workload-{w}.csv")
        for p in policies:
            t0 = time.perf_counter()
            sim = ElasticSimulator(wl, apps, SIA_CLUSTER, p, restart_seconds="application")
            res[p].append(summarize(sim.run()))
            wall[p] += time.perf_counter() - t0
    t = Table(title=f"Sia: Saturn workloads {ids[0]}-{ids[-1]}, 64 GPUs (T4/A100/RTX), hours", header_style="bold")
    for c in ("policy", "avg JCT", "pub.", "p99 JCT", "pub.", "makespan", "pub.", "wall s"):
        t.add_column(c, justify="right")
    for p in policies:
        avg = np.mean([r["avg_jct"] for r in res[p]]) / 3600
        p99 = np.mean([r["p99_jct"] for r in res[p]]) / 3600
        mk = np.mean([r["makespan"] for r in res[p]]) / 3600
        pub = SIA_PUBLISHED[p]
        t.add_row(p, f"{avg:.2f}", f"{pub[0]}", f"{p99:.1f}", f"{pub[1]}", f"{mk:.1f}", f"{pub[2]}", f"{wall[p]:.0f}")
    Console(width=160).print(t)
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["pollux", "sia"], action="append")
    ap.add_argument("--workloads", default="", help="e.g. 1-8 (default: all)")
    a = ap.parse_args(argv)
    for name in a.only or ["pollux", "sia"]:
        {"pollux": pollux, "sia": sia}[name](a.workloads)


if __name__ == "__main__":
    main()
