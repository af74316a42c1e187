"""The trace of one run: (trace, trace options, load, seed) → Trace.

- ``gavel``: Gavel-style Poisson arrivals (optsched.traces.generate), ``load``
  jobs per hour, ``jobs`` jobs (default 100), the run's seed.
- ``bursty``: the same base stream plus bursts of short jobs (:func:`generate_bursty`).
- a file: read once per process (cached), optionally filtered (``philly_cluster``),
  cut (``skip``, ``jobs``: a contiguous slice in arrival order) or sampled
  (``sample``: N jobs without replacement, seeded by the run's seed), then its
  inter-arrival times are scaled by 1/load (arrivals shifted to start at 0).
- ``length_scale`` (any trace): every job's steps and duration × the factor
  (short jobs for quick sweeps and tests).
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace

import numpy as np

from optsched.model import OptschedError


def throughput_table(trace_options: dict, options: dict | None = None):
    path = trace_options.get("throughputs") or (options or {}).get("throughputs")
    if path:
        return _read_table(str(path))
    return None


@functools.lru_cache(maxsize=4)
def _read_table(path: str):
    from optsched.traces.throughputs import read_throughputs

    return read_throughputs(path)


@functools.lru_cache(maxsize=4)
def _read(path: str, fmt: str | None, philly_cluster: str | None):
    from optsched.traces.io import read_trace

    opts = {"cluster": philly_cluster} if philly_cluster else {}
    from optsched.traces.io import FORMAT_HINT

    try:
        return read_trace(path, fmt, **opts)
    except OptschedError as e:  # sweep has no --format flag: the format goes in its file
        raise OptschedError(str(e).replace(FORMAT_HINT, "set format in the sweep file's [trace_options]")) from None


def generate_bursty(table, n_jobs: int, jobs_per_hour: float, seed: int = 0, burst_factor: float = 2.0,
                    burst_hours: float = 2.0, burst_every_hours: float = 4.0, burst_short: bool = True,
                    multi_gpu: bool = False):
    """A Gavel-style stream at ``jobs_per_hour`` plus, for ``burst_hours`` out
    of every ``burst_every_hours`` (starting at t = 0), extra Poisson arrivals of
    short jobs at (burst_factor − 1) × jobs_per_hour: inside a burst the arrival
    rate is burst_factor × the base rate. Burst jobs' durations on the
    reference GPU are 60·10^U(1.5, 2.5) s (32 min – 5.3 h: Gavel's short class,
    cut at its lower half) when ``burst_short``. ``n_jobs`` counts base jobs;
    bursts add theirs up to the base stream's last arrival. Deterministic in the seed."""
    from optsched.traces.generate import generate_gavel
    from optsched.traces.trace import make_trace

    if not (burst_factor > 1 and 0 < burst_hours <= burst_every_hours):
        raise OptschedError("bursty: needs burst_factor > 1 and 0 < burst_hours <= burst_every_hours")
    base = generate_gavel(table, n_jobs, jobs_per_hour, seed=seed, multi_gpu=multi_gpu)
    span = float(base.jobs["arrival_time"].max())
    extra_rate = (burst_factor - 1.0) * jobs_per_hour
    expected = int(np.ceil(span / 3600.0 * extra_rate * burst_hours / burst_every_hours * 1.5)) + 8
    burst = generate_gavel(table, expected, extra_rate, seed=seed + 7919, multi_gpu=multi_gpu).jobs.copy()
    tau = burst["arrival_time"].to_numpy()  # time inside the concatenated burst windows
    h, every = burst_hours * 3600.0, burst_every_hours * 3600.0
    k = np.floor(tau / h)
    t = k * every + (tau - k * h)
    burst["arrival_time"] = t
    if burst_short:
        rng = np.random.default_rng(seed + 104729)
        dur = 60.0 * 10.0 ** rng.uniform(1.5, 2.5, len(burst))
        burst["steps_total"] = burst["steps_total"] / burst["duration"] * dur
        burst["duration"] = dur
    burst = burst[burst["arrival_time"] <= span]
    j = base.jobs
    cols = ("arrival_time", "model", "scale_factor", "steps_total", "duration", "weight")
    rec = {c: np.concatenate([j[c].to_numpy(), burst[c].to_numpy()]) for c in cols}
    order = np.argsort(rec["arrival_time"], kind="stable")
    rec = {c: v[order] for c, v in rec.items()}
    rec["job_id"] = [str(i) for i in range(len(order))]
    is_burst = np.concatenate([np.zeros(len(j), bool), np.ones(len(burst), bool)])[order]
    return make_trace(rec, "generated",
                      f"bursty: {n_jobs} jobs at {jobs_per_hour:g}/h + {len(burst)} burst jobs "
                      f"({burst_factor:g}× for {burst_hours:g} h every {burst_every_hours:g} h), seed {seed}",
                      notes=("burst jobs are short" if burst_short else "burst jobs as the base stream",),
                      extra={"burst": is_burst})


def build_trace(trace: str, trace_options: dict, load: float, seed: int):
    tr = _build_trace(trace, trace_options, load, seed)
    scale = trace_options.get("length_scale")
    if scale is not None and float(scale) != 1.0:
        if not float(scale) > 0:
            raise OptschedError(f"trace_options.length_scale: must be positive, got {scale}")
        j = tr.jobs.copy()
        j["steps_total"] = j["steps_total"] * float(scale)
        j["duration"] = j["duration"] * float(scale)
        tr = replace(tr, jobs=j, notes=tr.notes + (f"job lengths × {float(scale):g}",))
    return tr


def _build_trace(trace: str, trace_options: dict, load: float, seed: int):
    o = trace_options
    if trace in ("gavel", "bursty"):
        from optsched.traces.throughputs import default_throughputs

        table = throughput_table(o) or default_throughputs()
        n = int(o.get("jobs", 100))
        if trace == "gavel":
            from optsched.traces.generate import generate_gavel

            return generate_gavel(table, n, float(load), seed=int(seed), multi_gpu=bool(o.get("multi_gpu", False)))
        return generate_bursty(table, n, float(load), seed=int(seed), burst_factor=float(o.get("burst_factor", 2.0)),
                               burst_hours=float(o.get("burst_hours", 2.0)),
                               burst_every_hours=float(o.get("burst_every_hours", 4.0)),
                               burst_short=bool(o.get("burst_short", True)), multi_gpu=bool(o.get("multi_gpu", False)))
    from pathlib import Path

    tr = _read(str(Path(trace).expanduser().resolve()), o.get("format"), o.get("philly_cluster"))
    j = tr.jobs
    if o.get("sample"):
        n = int(o["sample"])
        if n > len(j):
            raise OptschedError(f"trace_options.sample: {n} jobs asked, the trace has {len(j)}")
        idx = np.sort(np.random.default_rng(int(seed)).choice(len(j), size=n, replace=False))
        j = j.iloc[idx]
    skip = int(o.get("skip", 0))
    if o.get("jobs") or skip:
        j = j.iloc[skip: skip + int(o["jobs"])] if o.get("jobs") else j.iloc[skip:]
    if len(j) == 0:
        raise OptschedError("trace_options: the slice selects no job")
    j = j.reset_index(drop=True).copy()
    t0 = float(j["arrival_time"].min())
    j["arrival_time"] = (j["arrival_time"] - t0) / float(load)
    return replace(tr, jobs=j, notes=tr.notes + (f"inter-arrival times scaled by 1/{load:g}",))


def build_cluster(cluster: str | None, prices: str | None = None, trace=None):
    """A run's cluster: ``v100=8,p100=8`` or a shape ``16x4`` (None: the simulator's
    default for ``trace``). ``prices`` (``v100=2.48,k80=0.45``, the sweep's ``--prices``)
    are applied for the types this cluster has, so one price list serves every shape."""
    from optsched.sim.jobs import parse_cluster, parse_prices, with_prices

    if cluster is None and not prices:
        return None
    built = parse_cluster(*_cluster_args(cluster, trace))
    mine = {t: v for t, v in parse_prices(prices).items() if t in built.gpus} if prices else {}
    return with_prices(built, mine) if mine else built


def cluster_types(cluster: str | None, trace) -> tuple[str, ...]:
    """The GPU types of a run's cluster (the simulator's default for ``trace`` when None)."""
    from optsched.sim.jobs import parse_cluster

    return tuple(parse_cluster(*_cluster_args(cluster, trace)).gpus)


def _cluster_args(cluster: str | None, trace) -> tuple[str | None, str | None]:
    if cluster is None:
        from optsched.sim import DEFAULT_CLUSTER, DEFAULT_ELASTIC_SERVERS
        from optsched.sim.jobs import elastic_rows

        cluster = DEFAULT_ELASTIC_SERVERS if trace is not None and elastic_rows(trace).all() else DEFAULT_CLUSTER
    if re.fullmatch(r"\s*\d+\s*x\s*\d+\s*", cluster):
        return None, cluster.replace(" ", "")
    return cluster, None
