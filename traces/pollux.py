"""Pollux / Sia workload CSVs: ``name,time,application,num_replicas,batch_size``.

``time`` is the submission time (s), ``num_replicas`` the GPUs the job asks for
at submission, ``application`` one of the profiled apps (bert, cifar10,
deepspeech2, imagenet, ncf, yolov3). These workloads carry no job length: in
Pollux's and Sia's simulators a job runs until a fixed number of epochs under a
goodput model: ``steps_total`` is inf (no length) and ``duration`` NaN, which
makes every job elastic for the simulator (optsched/sim/goodput_jobs.py).
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from optsched.model import OptschedError
from optsched.traces.csvutil import read_csv_checked
from optsched.traces.trace import Trace, make_trace, numeric_column

COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
# The trace's fields as this file names them (in messages about a row).
FIELD_COLUMNS = {"job_id": "name", "arrival_time": "time", "model": "application", "scale_factor": "num_replicas"}


def read_pollux(path: str | os.PathLike) -> Trace:
    df, rows, where = read_csv_checked(path, COLUMNS, "pollux")
    return _trace(df, rows, where, str(path))


def workload_trace(df: pd.DataFrame, source: str = "") -> Trace:
    """A Trace from a workload DataFrame (the CSV's columns), e.g. a resampled one."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise OptschedError(f"pollux workload {source}: missing column {missing[0]!r}")
    df = df.reset_index(drop=True).astype({c: str for c in COLUMNS})
    return _trace(df, np.arange(2, len(df) + 2), f"pollux workload {source}".strip(), source)


def _trace(df: pd.DataFrame, rows, where: str, source: str) -> Trace:
    rec = {
        "job_id": df["name"].tolist(),
        "arrival_time": numeric_column(df["time"], "time", rows, where),
        "model": df["application"].tolist(),
        "scale_factor": numeric_column(df["num_replicas"], "num_replicas", rows, where, integer=True),
        "row": rows,
        # No length in the file; a marker duration of 0 would be wrong, so the
        # trace keeps NaN and the batch size as an extra column.
        "duration": np.full(len(df), np.nan),
        "steps_total": np.full(len(df), np.inf),
    }
    batch = numeric_column(df["batch_size"], "batch_size", rows, where, integer=True)
    # The goodput model's M0. 0 = unknown: the application's default batch (what
    # the writer emits for a job without one); a negative one was silently replaced.
    if (batch < 0).any():
        i = int(np.argmax(batch < 0))
        raise OptschedError(f"{where}: row {rows[i]}: batch_size must be >= 0 (0: the application's default) "
                            f"({int(batch[i])})")
    return make_trace(rec, "pollux", source, speed="goodput", extra={"batch_size": batch.astype(np.int64)},
                      notes=("Pollux/Sia workloads have no job length: jobs run to a target epoch count under a goodput model",),
                      columns=FIELD_COLUMNS)


def write_pollux(trace: Trace, path: str | os.PathLike) -> None:
    """Writes every job; a Pollux/Sia workload names a profiled application and
    a batch size per job, so traces without them get a warning from
    ``optsched.traces.io.write_trace`` (the simulator rejects such rows)."""
    j = trace.jobs
    batch = j["batch_size"] if "batch_size" in j else pd.Series(np.zeros(len(j), dtype=int))
    pd.DataFrame(
        {"name": j["job_id"], "time": j["arrival_time"].round().astype(int), "application": j["model"],
         "num_replicas": j["scale_factor"], "batch_size": batch}
    ).to_csv(path, index=False)
