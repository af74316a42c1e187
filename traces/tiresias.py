"""Tiresias CSV traces: ``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``.

``duration`` is the job's runtime alone at ``num_gpu`` GPUs (seconds), so speeds
come from the trace itself (``speed="duration"``): iterations/duration on every
GPU type — Tiresias simulates a homogeneous cluster. ``interval`` (the gap to
the previous submission) is redundant with ``submit_time`` and not used.
Optional columns ``loss_initial,loss_final,loss_tau,loss_alpha`` (a job's
convergence profile, empty cells: none; optsched/predict/convergence.py) are
kept for ``simulate --loss-threshold``.
"""

from __future__ import annotations

import os

import numpy as np

from optsched.traces.csvutil import read_csv_checked
from optsched.traces.trace import Trace, make_trace, numeric_column, require_durations

COLUMNS = ("job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration", "interval")
LOSS_COLUMNS = ("loss_initial", "loss_final", "loss_tau", "loss_alpha")  # optional
# The trace's fields as this file names them (in messages about a row).
FIELD_COLUMNS = {"job_id": "job_id", "scale_factor": "num_gpu", "arrival_time": "submit_time",
                 "steps_total": "iterations", "model": "model_name", "duration": "duration"}


def read_tiresias(path: str | os.PathLike) -> Trace:
    df, rows, where = read_csv_checked(path, COLUMNS[:6], "tiresias")
    rec = {
        "job_id": df["job_id"].tolist(),
        "scale_factor": numeric_column(df["num_gpu"], "num_gpu", rows, where, integer=True),
        "arrival_time": numeric_column(df["submit_time"], "submit_time", rows, where),
        "steps_total": numeric_column(df["iterations"], "iterations", rows, where),
        "model": df["model_name"].tolist(),
        "duration": numeric_column(df["duration"], "duration", rows, where),
        "row": rows,
    }
    bad = rec["duration"] <= 0
    if bad.any():
        i = int(np.argmax(bad))
        from optsched.model import OptschedError

        raise OptschedError(f"{where}: row {rows[i]}: duration must be positive, got {rec['duration'][i]:g}")
    extra = {c: numeric_column(df[c], c, rows, where, allow_missing=True) for c in LOSS_COLUMNS if c in df}
    return make_trace(rec, "tiresias", str(path), speed="duration", extra=extra, columns=FIELD_COLUMNS)


def write_tiresias(trace: Trace, path: str | os.PathLike) -> None:
    require_durations(trace, "tiresias")
    j = trace.jobs
    steps = j["steps_total"].fillna(j["duration"])
    out = j.assign(
        num_gpu=j["scale_factor"],
        submit_time=j["arrival_time"].round().astype(int),
        iterations=steps.round().astype(int),
        model_name=j["model"],
        duration=j["duration"].round().astype(int),
        interval=j["arrival_time"].diff().fillna(j["arrival_time"]).round().astype(int),
    )
    out[list(COLUMNS)].to_csv(path, index=False)
