"""Gavel ``.trace`` files (tab-separated, one job per line), both formats:

- 10 fields (``gavel/traces/*.trace``): job type, command, working directory,
  num-steps argument, needs-data-dir, total steps, scale factor, priority
  weight, SLO, arrival time.
- 7 fields (``gavel/traces/msr-seed0/*.trace``, Philly-derived): job type,
  command, num-steps argument, needs-data-dir, total steps, arrival time, scale
  factor. Scale factors go up to 64; see traces/throughputs.py for how speeds
  beyond the table's measured 8 are extrapolated.

Job ids are the 0-based line numbers, as Gavel numbers jobs in arrival order.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

from optsched.model import OptschedError
from optsched.traces.csvutil import read_text
from optsched.traces.trace import Trace, make_trace, numeric_column

FIELDS_10 = ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir", "total_steps",
             "scale_factor", "priority_weight", "slo", "arrival_time")
FIELDS_7 = ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time", "scale_factor")
# The trace's fields as messages about a row name them (the file has no header).
FIELD_COLUMNS = {"model": "job type", "steps_total": "total steps", "arrival_time": "arrival time",
                 "scale_factor": "scale factor", "weight": "priority weight", "slo": "SLO"}


def read_gavel(path: str | os.PathLike) -> Trace:
    p = Path(path)
    where = f"gavel trace {p}"
    text = read_text(p, where)
    lines = [(i + 1, line.rstrip("\r\n")) for i, line in enumerate(text.splitlines()) if line.strip()]
    if not lines:
        raise OptschedError(f"{where}: no jobs")
    width = len(lines[0][1].split("\t"))
    if width not in (7, 10):
        raise OptschedError(f"{where}: row {lines[0][0]}: expected 7 or 10 tab-separated fields, got {width}")
    names = FIELDS_10 if width == 10 else FIELDS_7
    cols: dict[str, list[str]] = {k: [] for k in names}
    rows = []
    for lineno, line in lines:
        parts = line.split("\t")
        if len(parts) != width:
            raise OptschedError(f"{where}: row {lineno}: expected {width} tab-separated fields, got {len(parts)}")
        for k, v in zip(names, parts):
            cols[k].append(v)
        rows.append(lineno)
    for i, m in enumerate(cols["job_type"]):
        if not m.strip():
            raise OptschedError(f"{where}: row {rows[i]}: job type is missing")
    rec = {
        "job_id": [str(i) for i in range(len(rows))],
        "model": cols["job_type"],
        "steps_total": numeric_column(cols["total_steps"], "total steps", rows, where),
        "arrival_time": numeric_column(cols["arrival_time"], "arrival time", rows, where),
        "scale_factor": numeric_column(cols["scale_factor"], "scale factor", rows, where, integer=True),
        "row": rows,
    }
    if width == 10:
        rec["weight"] = numeric_column(cols["priority_weight"], "priority weight", rows, where)
        slo = numeric_column(cols["slo"], "SLO", rows, where)
        rec["slo"] = np.where(slo < 0, np.nan, slo)  # Gavel writes -1 for "no SLO"
    return make_trace(rec, "gavel", str(p), notes=(f"{width}-field Gavel format",) if width == 7 else (),
                      columns=FIELD_COLUMNS)


def write_gavel(trace: Trace, path: str | os.PathLike) -> None:
    """Write the 10-field format. Commands and directories are not known to us:
    we write the job type as the command and an empty working directory."""
    j = trace.jobs
    if j["steps_total"].isna().any():
        raise OptschedError("gavel writer: every job needs total steps (resolve durations against a throughput table first)")
    endless = ~np.isfinite(j["steps_total"].to_numpy(dtype=float))
    if endless.any():  # Pollux/Sia jobs run to an epoch count, not a number of steps
        raise OptschedError(f"gavel writer: every job needs total steps; job {j['job_id'].iat[int(np.argmax(endless))]!r} "
                            "has no length (a Pollux/Sia job runs to an epoch count)")
    opener = gzip.open if Path(path).suffix == ".gz" else open  # the reader decompresses .gz
    with opener(path, "wt") as f:
        for r in j.itertuples(index=False):
            slo = -1.0 if np.isnan(r.slo) else r.slo
            f.write(
                f"{r.model}\t{r.model}\t.\t--num_steps\t1\t{int(round(r.steps_total))}\t{int(r.scale_factor)}\t"
                f"{r.weight:g}\t{slo:f}\t{r.arrival_time:g}\n"
            )
