"""Round-based cluster simulator: ``simulate(trace, cluster, policy=...)``.

One loop for rigid and elastic jobs (optsched/sim/loop.py, stages in
optsched/sim/stages.py). It drives the same path an embedding scheduler uses —
policy → Allocation → Allocator → Placement — on a trace, and reports the
metrics papers report (optsched/sim/metrics.py) in one schema
(``SCHEMA_VERSION``) whatever the jobs are.
"""

from __future__ import annotations

import inspect
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING

import numpy as np

from optsched.model import Cluster, OptschedError
from optsched.policy import NEEDS_STEPS, supports_packing  # noqa: F401  (supports_packing re-exported: its home is the policy layer)

SCHEMA_VERSION = 1
DEFAULT_CLUSTER = "v100=36,p100=36,k80=36"  # rigid traces (Gavel's)
DEFAULT_ELASTIC_SERVERS = "16x4"  # Pollux/Sia workloads: Pollux's cluster
CONFIGURATION_POLICIES = ("pollux", "sia", "hadar", "optimus")  # choose GPU counts (and nodes) themselves
NEEDS_LENGTH = tuple(sorted(NEEDS_STEPS)) + ("min_cost_slo",)  # (an SLO needs the job's length)

if TYPE_CHECKING:  # (tables are pandas frames; the import waits for the simulator's modules that use them)
    import pandas as pd

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
        p.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "summary": self.summary, "config": self.config},
                                indent=2, default=_plain) + "\n")
        paths.append(p)
        return paths


def _plain(x):
    """JSON for numpy scalars and tuples (no Python reprs in user output)."""
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, (tuple, set, np.ndarray)):
        return list(x)
    return str(x)


def check_run(trace, policy: str, solver: str = "auto", packing: bool = False, table=None,
              allocator_options: dict | None = None, placement: str = "consolidated") -> None:
    """Reject an option that cannot apply to this trace and policy — before any
    expensive work (profile fits, solves). One line, naming the option."""
    from optsched.policy import policy_names
    from optsched.sim.jobs import elastic_rows
    from optsched.solvers import SOLVERS

    if policy not in policy_names():
        raise OptschedError(f"--policy: unknown policy {policy!r} (choose from {', '.join(policy_names())})")
    from optsched.solvers import SOLVER_ALIASES

    if solver not in SOLVERS and solver not in SOLVER_ALIASES:  # (the old names still work, unlisted)
        raise OptschedError(f"--solver: unknown solver {solver!r} (choose from {', '.join(SOLVERS)})")
    elastic = elastic_rows(trace)
    kind = f"{trace.format} trace"
    if elastic.any():
        if policy in NEEDS_LENGTH:
            raise OptschedError(f"--policy: {policy} needs job lengths; elastic jobs ({kind}: Pollux/Sia workloads) "
                                "run to an epoch count and have none")
        if policy == "hadar":
            raise OptschedError("--policy: hadar splits a job over GPU types; elastic jobs run on one type")
        if packing:
            raise OptschedError(f"--packing: elastic jobs ({kind}) have no pair throughputs; packing needs a "
                                "throughput table with them (Gavel's simulation_throughputs.json)")
        if table is not None and elastic.all():
            raise OptschedError(f"--throughputs: a {kind} of elastic jobs uses application profiles, not a throughput table")
    elif policy in ("pollux", "sia"):
        raise OptschedError(f"--policy: {policy} co-adapts elastic jobs; the {kind} has none "
                            "(give a Pollux/Sia workload CSV)")
    if trace.speed == "duration" and not elastic.all():
        if table is not None:
            raise OptschedError(f"--throughputs: a {kind} gives each job's duration (the same speed on every type); "
                                "it reads no throughput table")
        if packing:
            raise OptschedError(f"--packing: a {kind} has no job types, so no pair throughputs; "
                                "packing needs a trace with job types (gavel, philly)")
    if packing:
        from optsched.traces.throughputs import default_throughputs

        if not (table or default_throughputs()).pairs:
            raise OptschedError("--packing: the throughput table has no pair throughputs "
                                "(use --throughputs with Gavel's simulation_throughputs.json)")
        if not supports_packing(policy):
            raise OptschedError(f"--packing: policy {policy} has no space sharing (use max_min_fairness, "
                                "finish_time_fairness, makespan, max_throughput, gandiva or lucid)")
    if policy in CONFIGURATION_POLICIES:
        opts = allocator_options or {}
        for key, flag in (("queue", "--queue"), ("type_order", "--type-order"), ("migration_cost", "--migration-cost"),
                          ("hysteresis", "--hysteresis")):
            if key in opts:  # (its own restart costs are part of the policy: pollux, sia)
                raise OptschedError(f"{flag}: policy {policy} chooses every job's GPUs itself; "
                                    "the allocator's walk does not apply")
        if placement != "consolidated":
            raise OptschedError(f"--placement: policy {policy} chooses every job's GPUs and nodes itself; "
                                "placement does not apply")


def simulate_flags(
    trace=None,
    cluster: Cluster | dict | str | None = None,
    policy: str = "max_min_fairness",
    throughputs=None,
    progress_rate=None,
    on_round=None,
    apps: dict | None = None,
    **config,
) -> SimResult:
    """``simulate`` as the commands (``simulate``, ``compare``, ``sweep``) call it: its
    errors name the CLI's flags (``--round-length``)."""
    from optsched.sim.jobs import elastic_rows, parse_cluster, resolve_jobs, with_servers
    from optsched.sim.loop import ROUND_COLUMNS, SimConfig, simulate_jobs
    from optsched.sim.metrics import add_fairness, jobs_frame, rounds_frame, summarize
    from optsched.traces.generate import default_trace
    from optsched.traces.io import read_trace
    from optsched.traces.throughputs import ThroughputTable, default_throughputs, read_throughputs

    if throughputs is not None and not isinstance(throughputs, ThroughputTable):
        throughputs = read_throughputs(throughputs)
    if trace is None:
        trace = default_trace(throughputs)  # the built-in example, of the table's job types
    elif isinstance(trace, (str, os.PathLike)):
        trace = read_trace(trace)
    elastic = elastic_rows(trace)
    if cluster is None:
        cluster = parse_cluster(None, DEFAULT_ELASTIC_SERVERS) if elastic.all() else DEFAULT_CLUSTER
    cluster = _cluster(cluster, parse_cluster)
    import dataclasses
    import difflib

    known = [f.name for f in dataclasses.fields(SimConfig) if f.name != "policy"]
    named = [p for p in inspect.signature(simulate_flags).parameters if p != "config"]  # (trace, cluster, policy, ...)
    for key in config:
        if key not in known:  # (SimConfig's TypeError named the class, not the options)
            near = difflib.get_close_matches(key, known + named, n=1)
            raise OptschedError(f"simulate: unknown option {key!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
                                + f"; options: {', '.join(named + sorted(known))}")
    cfg = SimConfig(policy=policy, **config)
    cfg.validate(bool(elastic.any()))  # the documented limits (optsched.sim.limits); the rounds bound once jobs resolve
    cfg.check_policy_option_keys()
    check_run(trace, policy, cfg.solver, cfg.packing, throughputs, cfg.allocator_options, cfg.placement)
    if elastic.any():
        cluster = with_servers(cluster)
        if apps is None:
            from optsched.sim.goodput_jobs import applications_for, available_applications
            from optsched.sim.jobs import check_applications

            apps = applications_for(cluster, trace.jobs["model"][elastic])
            if len(apps) < len(set(trace.jobs["model"][elastic])):  # named with the peers' whole list
                check_applications(trace.jobs, elastic, apps, f"{trace.format} trace {trace.source}",
                                   f"profiled for {', '.join(sorted(cluster.gpus))}: "
                                   f"{', '.join(available_applications(cluster))}")
    from optsched.policy import GOODPUT_POLICIES

    pair_table = (throughputs or default_throughputs()) if cfg.packing else None
    jobs = resolve_jobs(trace, cluster, throughputs, seed=cfg.seed, skip_unrunnable=cfg.skip_unrunnable, apps=apps,
                        co_adapt=policy in GOODPUT_POLICIES, pair_table=pair_table,
                        spread_rates=cfg.spread_rates)
    if jobs.n == 0:
        raise OptschedError("simulate: the trace has no runnable job")
    loss_report = {}
    if cfg.loss_threshold is not None:
        from optsched.sim.stages import loss_termination

        jobs, loss_report = loss_termination(jobs, trace, cfg.loss_threshold)
    features = None
    from optsched.sim.stages import PREDICTION_POLICIES

    if policy in PREDICTION_POLICIES:
        from optsched.predict.features import trace_features

        feats = trace_features(trace.jobs)
        pos = dict(zip(trace.jobs["job_id"], range(len(trace.jobs))))
        features = feats.iloc[[pos[j] for j in jobs.job_ids]].reset_index(drop=True)
    resources = None
    if "cpu_profile" in trace.jobs or "memory_profile" in trace.jobs:  # Synergy's sensitivity profiles
        from optsched.sim.stages import ResourceProfiles

        by_id = trace.jobs.set_index("job_id")
        col = lambda c: [by_id[c].get(j) if c in by_id else None for j in jobs.job_ids]  # noqa: E731
        resources = ResourceProfiles.of(col("cpu_profile"), col("memory_profile"))
    st, rounds, info = simulate_jobs(jobs, cluster, cfg, progress_rate=progress_rate, on_round=on_round,
                                     features=features, resources=resources)
    capacity = np.array([cluster.gpus[t] for t in jobs.gpu_types], dtype=float)
    jdf = add_fairness(jobs_frame(jobs, st), jobs, capacity)
    rdf = rounds_frame(rounds, jobs.gpu_types, ROUND_COLUMNS)
    summary = summarize(jdf, rdf, info, cfg.window, jobs.skipped)
    summary.update({"schema_version": SCHEMA_VERSION, "policy": policy, "solver": info["solver"],
                    "round_length": info["round_length"], "packing": bool(cfg.packing),
                    "elastic_jobs": int(jobs.is_elastic.sum()), "extrapolated_jobs": jobs.extrapolated,
                    "display_time_unit": time_unit(jdf), "progress_violation_steps": st.progress_violation,
                    "spread_rate_jobs": int((jobs.spread_throughput != jobs.throughput).any(axis=1).sum())
                    if jobs.spread_throughput is not None else 0, **loss_report})
    if cfg.window is not None:
        # Gavel generates jobs until the window completes; a finite trace whose
        # arrivals stop earlier lets the queue drain and understates the JCT.
        summary["arrivals_ended_before_window"] = bool(jobs.arrival[-1] < info["end_time"])
        summary["end_time"] = float(info["end_time"])
    config_out = {"policy": policy, "cluster": dict(cluster.gpus), "trace": trace.source, "format": trace.format,
                  **{k: v for k, v in cfg.__dict__.items() if k != "policy"}, "round_length": info["round_length"]}
    if cluster.price_per_hour:
        config_out["prices"] = dict(cluster.price_per_hour)
    return SimResult(jdf, rdf, summary, config_out)


def simulate(*args, **kwargs) -> SimResult:
    """Simulate ``trace`` (a Trace, a path, or None for the built-in default) on
    ``cluster`` (a Cluster, ``{"v100": 36, ...}``, ``"v100=36,p100=36,k80=36"``;
    default 36:36:36 v100/p100/k80, or 16 servers × 4 GPUs for a Pollux/Sia
    workload). ``throughputs``: a ThroughputTable or a path to one (default:
    the project's table). ``apps``: profiled applications for elastic jobs
    (default: the peers' profiles for the cluster's types). Other keywords:
    SimConfig. An OptschedError names the keyword at fault (``round_length``)."""
    from optsched.sim.limits import keyword_names

    try:
        return simulate_flags(*args, **kwargs)
    except OptschedError as e:
        raise OptschedError(keyword_names(str(e))) from None


simulate.__signature__ = inspect.signature(simulate_flags)  # help() shows the keywords


def _cluster(cluster, parse_cluster) -> Cluster:
    """A Cluster from simulate's ``cluster`` argument; a size over the documented limits is a one-line
    OptschedError naming the field (``cluster.gpus: ...``), not a pydantic traceback."""
    from pydantic import ValidationError

    from optsched.model import _format_validation_error

    try:
        if isinstance(cluster, str):
            return parse_cluster(cluster)
        if isinstance(cluster, dict):
            return Cluster(gpus=cluster)
    except ValidationError as e:
        raise OptschedError(_format_validation_error(e).replace("invalid snapshot: ", "cluster.", 1)) from None
    if not isinstance(cluster, Cluster):
        raise OptschedError(f"--cluster: expected a Cluster, {{type: count}} or 'v100=36,k80=36', got {cluster!r}")
    return cluster


def time_unit(jobs: pd.DataFrame) -> str:
    """The unit tables and plots show times in (the summary's ``display_time_unit``; its
    values are seconds): "s" when the median JCT (else the arrival span) is under an
    hour, else "h"."""
    jct = jobs["jct"].dropna()
    scale = float(jct.median()) if len(jct) else float(jobs["arrival_time"].max() - jobs["arrival_time"].min())
    return "s" if scale < 3600 else "h"


__all__ = ["SCHEMA_VERSION", "SimResult", "check_run", "simulate"]
