"""Round-based cluster simulator: ``simulate(trace, cluster, policy=...)``.

It drives the same path an embedding scheduler uses — policy → Allocation →
Allocator → Placement — on a trace, and reports the metrics papers report
(optsched/sim/metrics.py). See optsched/sim/loop.py for the round semantics.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from optsched.model import Cluster, OptschedError


@dataclass(frozen=True)
class SimResult:
    jobs: pd.DataFrame  # one row per job (arrival order)
    rounds: pd.DataFrame  # one row per round
    summary: dict
    config: dict = field(default_factory=dict)

    def write(self, out_dir: str | os.PathLike, name: str = "") -> list[Path]:
        """jobs/rounds as CSV and Parquet, and summary.json, into ``out_dir``."""
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        pre = f"{name}_" if name else ""
        paths = []
        for table, frame in (("jobs", self.jobs), ("rounds", self.rounds)):
            for ext in ("csv", "parquet"):
                p = d / f"{pre}{table}.{ext}"
                frame.to_csv(p, index=False) if ext == "csv" else frame.to_parquet(p, index=False)
                paths.append(p)
        p = d / f"{pre}summary.json"
        p.write_text(json.dumps({"summary": self.summary, "config": self.config}, indent=2, default=str) + "\n")
        paths.append(p)
        return paths


def simulate(
    trace=None,
    cluster: Cluster | dict | str | None = None,
    policy: str = "max_min_fairness",
    throughputs=None,
    progress_rate=None,
    on_round=None,
    **config,
) -> SimResult:
    """Simulate ``trace`` (a Trace, a path, or None for the built-in default) on
    ``cluster`` (a Cluster, ``{"v100": 36, ...}``, ``"v100=36,p100=36,k80=36"``;
    default 36:36:36 v100/p100/k80). ``throughputs``: a ThroughputTable or a
    path to one (default: the project's table). Other keywords: SimConfig."""
    from optsched.sim.jobs import parse_cluster, resolve_jobs
    from optsched.sim.loop import ROUND_COLUMNS, SimConfig, simulate_jobs
    from optsched.sim.metrics import add_fairness, jobs_frame, rounds_frame, summarize
    from optsched.traces.generate import default_trace
    from optsched.traces.io import read_trace
    from optsched.traces.throughputs import ThroughputTable, read_throughputs

    if trace is None:
        trace = default_trace()
    elif isinstance(trace, (str, os.PathLike)):
        trace = read_trace(trace)
    if cluster is None:
        cluster = "v100=36,p100=36,k80=36"
    if isinstance(cluster, str):
        cluster = parse_cluster(cluster)
    elif isinstance(cluster, dict):
        cluster = Cluster(gpus=cluster)
    if throughputs is not None and not isinstance(throughputs, ThroughputTable):
        throughputs = read_throughputs(throughputs)
    try:
        cfg = SimConfig(policy=policy, **config)
    except TypeError as e:
        raise OptschedError(f"simulate: {e}") from None
    jobs = resolve_jobs(trace, cluster, throughputs, seed=cfg.seed, skip_unrunnable=cfg.skip_unrunnable)
    if jobs.n == 0:
        raise OptschedError("simulate: the trace has no runnable job")
    st, rounds, info = simulate_jobs(jobs, cluster, cfg, progress_rate=progress_rate, on_round=on_round)
    capacity = np.array([cluster.gpus[t] for t in jobs.gpu_types], dtype=float)
    jdf = add_fairness(jobs_frame(jobs, st), jobs, capacity)
    rdf = rounds_frame(rounds, jobs.gpu_types, ROUND_COLUMNS)
    summary = summarize(jdf, rdf, info, cfg.window, jobs.skipped)
    summary.update({"policy": policy, "solver": info["solver"], "extrapolated_jobs": jobs.extrapolated,
                    "progress_violation_steps": st.progress_violation})
    config_out = {"policy": policy, "cluster": dict(cluster.gpus), "trace": trace.source, "format": trace.format,
                  **{k: v for k, v in cfg.__dict__.items() if k != "policy"}}
    return SimResult(jdf, rdf, summary, config_out)


__all__ = ["simulate", "SimResult"]
