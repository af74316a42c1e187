"""Philly-derived CSV (as summarized by the Pollux artifact; data CC BY 4.0,
Jeon et al., ATC'19): ``timestamp,duration,num_gpus,gpu_time,cluster``.

The file has no model names. To simulate it on a throughput table we assign
job types deterministically from a seed (:func:`assign_models`): uniform over
the table's models that have a measured profile at the job's scale factor (for
s > 8, at the largest measured one; models with only single-GPU profiles are
redrawn for multi-GPU jobs, as Gavel's generator does). The trace's duration is
taken as the runtime on the reference GPU type (V100), so
``steps_total = duration × throughput(model, s, reference)``.

An optional ``status`` column (``Pass``/``Failed``/``Killed`` as in the raw
Philly logs) marks failed jobs; they leave after their recorded duration.
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pandas as pd

from optsched.model import OptschedError
from optsched.traces.csvutil import read_csv_checked
from optsched.traces.throughputs import ThroughputTable
from optsched.traces.trace import MAX_SECONDS, Trace, make_trace, numeric_column, require_durations

COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
REFERENCE_GPU = "v100"
# The trace's fields as this file names them (in messages about a row).
FIELD_COLUMNS = {"arrival_time": "timestamp", "duration": "duration", "scale_factor": "num_gpus"}


def read_philly(path: str | os.PathLike, cluster: str | None = None) -> Trace:
    df, rows, where = read_csv_checked(path, COLUMNS, "philly")
    ts = _timestamps(df["timestamp"], rows, where)
    duration = numeric_column(df["duration"], "duration", rows, where)
    gpus = numeric_column(df["num_gpus"], "num_gpus", rows, where, integer=True)
    keep = np.ones(len(df), dtype=bool) if cluster is None else (df["cluster"] == cluster).to_numpy()
    if not keep.any():
        raise OptschedError(f"{where}: no jobs in cluster {cluster!r}")
    t0 = ts[keep].min()
    arrival = (ts - t0).dt.total_seconds().to_numpy()
    failed = df["status"].str.lower().isin(["failed", "killed"]).to_numpy() if "status" in df else np.zeros(len(df), bool)
    idx = np.flatnonzero(keep)
    rec = {
        "job_id": [str(i) for i in range(len(idx))],
        "arrival_time": arrival[idx],
        "duration": duration[idx],
        "scale_factor": gpus[idx],
        "failed": failed[idx],
        "row": [rows[i] for i in idx],
    }
    return make_trace(rec, "philly", str(path), extra={"cluster": df["cluster"].to_numpy()[idx]},
                      notes=("Philly has no model names: job types are assigned from a seed",), columns=FIELD_COLUMNS)


DATE_TIME = r"\s*\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?\s*"


def _timestamps(col: pd.Series, rows, where: str) -> pd.Series:
    """Naive date-times; the first cell that is not one (garbled, out of range,
    a time zone mixed with naive times) raises naming its row."""
    import warnings

    def bad(i: int, why: str = "is not a date-time"):
        raise OptschedError(f"{where}: row {rows[i]}: timestamp {col.iat[i]!r} {why}")

    # A full calendar date first: pandas also reads 'now', 'today', '12:00' (today's date) and
    # 'Oct 9' against the wall clock, which would make a run depend on the day it runs.
    dated = col.astype(str).str.fullmatch(DATE_TIME)
    if not dated.all():
        bad(int(np.argmax(~dated.to_numpy())), "is not a date-time (YYYY-MM-DD[ HH:MM[:SS]])")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:  # each cell as ISO 8601 (rows may mix HH:MM and HH:MM:SS); 07:01:61 is not a time
            ts = pd.to_datetime(col.astype(str).str.strip(), format="ISO8601", errors="coerce")
            ok = pd.api.types.is_datetime64_dtype(ts)  # not tz-aware, not objects
        except (ValueError, TypeError, OverflowError, pd.errors.OutOfBoundsDatetime):
            ok = False
        if not ok:  # find the cell: parse one by one
            for i, v in enumerate(col):
                try:
                    t = pd.Timestamp(v)
                except (ValueError, TypeError, OverflowError, pd.errors.OutOfBoundsDatetime):
                    bad(i)
                if t is pd.NaT:
                    bad(i)
                if t.tzinfo is not None:
                    bad(i, "has a time zone (Philly times are naive local times)")
            bad(0)
    if ts.isna().any():
        bad(int(np.argmax(ts.isna().to_numpy())), "is not a valid date-time")
    span = (ts.max() - ts.min()).total_seconds()
    if span > MAX_SECONDS:
        bad(int(np.argmax(ts.to_numpy() == ts.max().to_datetime64())), f"lies more than {MAX_SECONDS:g} s after the first")
    return ts


def write_philly(trace: Trace, path: str | os.PathLike, start: str = "2017-10-01 00:00:00") -> None:
    require_durations(trace, "philly")
    j = trace.jobs
    ts = pd.Timestamp(start) + pd.to_timedelta(j["arrival_time"], unit="s")
    pd.DataFrame(
        {"timestamp": ts.dt.strftime("%Y-%m-%d %H:%M:%S"), "duration": j["duration"], "num_gpus": j["scale_factor"],
         "gpu_time": j["duration"] * j["scale_factor"], "cluster": j.get("cluster", "optsched")}
    ).to_csv(path, index=False)


def assign_models(trace: Trace, table: ThroughputTable, seed: int = 0) -> Trace:
    """Give every job without a model a job type from ``table`` (see module doc)."""
    rng = np.random.default_rng(seed)
    models = table.models
    multi = tuple(m for m in models if max(table.scale_factors(m)) > 1) or models
    j = trace.jobs.copy()
    missing = (j["model"] == "").to_numpy()
    s = j["scale_factor"].to_numpy()
    pick_single = rng.integers(0, len(models), len(j))
    pick_multi = rng.integers(0, len(multi), len(j))
    chosen = np.where(s > 1, np.array(multi, dtype=object)[pick_multi], np.array(models, dtype=object)[pick_single])
    j.loc[missing, "model"] = chosen[missing]
    ref = REFERENCE_GPU if REFERENCE_GPU in table.gpu_types else table.gpu_types[0]
    need = missing & j["steps_total"].isna().to_numpy()
    if need.any():
        T, _ = table.matrix(j["model"].to_numpy()[need], s[need], (ref,))
        steps = j["steps_total"].to_numpy().copy()
        steps[need] = j["duration"].to_numpy()[need] * T[:, 0]
        j["steps_total"] = steps
    return replace(trace, jobs=j, notes=trace.notes + (f"job types assigned with seed {seed}; duration = runtime on {ref}",))


def sample_philly(trace: Trace, n_jobs: int, seed: int = 0, jobs_per_hour: float | None = None) -> Trace:
    """``n_jobs`` jobs drawn without replacement (fixed seed), kept in arrival
    order; with ``jobs_per_hour`` the arrivals are redrawn as a Poisson process."""
    if n_jobs > len(trace):
        raise OptschedError(f"philly sample: asked for {n_jobs} jobs, the trace has {len(trace)}")
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(trace), size=n_jobs, replace=False))
    j = trace.jobs.iloc[idx].reset_index(drop=True).copy()
    if jobs_per_hour:
        j["arrival_time"] = np.cumsum(rng.exponential(3600.0 / jobs_per_hour, n_jobs)) - 0.0
        j["arrival_time"] -= j["arrival_time"].iloc[0]
    else:
        j["arrival_time"] -= j["arrival_time"].min()
    j["job_id"] = [str(i) for i in range(n_jobs)]
    return replace(trace, jobs=j, notes=trace.notes + (f"sampled {n_jobs} jobs with seed {seed}",))
