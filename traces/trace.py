"""The trace every reader returns and the simulator consumes.

A trace is a table of jobs (pandas, one row per job, in arrival order):

    job_id        str     unique
    arrival_time  float   seconds from the trace start (>= 0)
    model         str     job type (a throughput-table model), "" when unknown
    scale_factor  int     GPUs requested (> 0)
    steps_total   float   work in steps; NaN when the trace gives a duration instead
    duration      float   runtime in isolation at its scale factor, seconds; NaN if unknown
    weight        float   priority weight (> 0)
    slo           float   SLO factor (Gavel), NaN when absent
    failed        bool    the trace says the job failed (it leaves after its work)
    row           int     line of the source file (for error messages)

``speed`` says where per-GPU-type speeds come from: ``"table"`` (job type →
throughput table) or ``"duration"`` (the trace's own duration on a homogeneous
cluster: the same speed on every type, steps/duration).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from optsched.model import MAX_GPUS, MAX_WEIGHT, MIN_WEIGHT, OptschedError

# Documented limits of a trace's numbers (docs/guide/solve.md, the snapshot's limits, traces): checked while reading,
# before the simulator's work scales with them.
MAX_INTEGER = 2**53  # integer cells (exact in a float)
MAX_SECONDS = 1e10  # arrival times and durations (~317 years)
MAX_STEPS = 1e15  # total steps of a job

COLUMNS = ("job_id", "arrival_time", "model", "scale_factor", "steps_total", "duration", "weight", "slo", "failed", "row")


@dataclass(frozen=True)
class Trace:
    jobs: pd.DataFrame
    format: str
    source: str = ""
    speed: str = "table"  # "table" | "duration"
    notes: tuple[str, ...] = ()
    skipped: int = 0  # rows dropped by a documented rule (counted in the summary)

    def __len__(self) -> int:
        return len(self.jobs)

    def head(self, n: int) -> "Trace":
        return replace(self, jobs=self.jobs.iloc[:n].reset_index(drop=True))

    def describe(self) -> dict:
        j = self.jobs
        gpu_demand = j["scale_factor"].value_counts().sort_index()
        return {
            "format": self.format,
            "source": self.source,
            "jobs": int(len(j)),
            "first_arrival": float(j["arrival_time"].min()) if len(j) else 0.0,
            "last_arrival": float(j["arrival_time"].max()) if len(j) else 0.0,
            "scale_factors": {int(k): int(v) for k, v in gpu_demand.items()},
            "models": int(j["model"].nunique()),
            "failed": int(j["failed"].sum()),
            "skipped": self.skipped,
            "notes": list(self.notes),
        }


def make_trace(records: dict, fmt: str, source: str = "", speed: str = "table", notes=(), skipped: int = 0,
               extra: dict | None = None, columns: dict[str, str] | None = None) -> Trace:
    """Assemble a Trace from column arrays (missing optional columns get defaults),
    validate, and sort by arrival time (stable: ties keep file order).
    ``columns``: the file's name of each field ({"scale_factor": "num_gpu"}), so a
    message names the column the user can fix, not ours."""
    def column_of(col: str) -> str:
        return (columns or {}).get(col, col)

    n = len(records["arrival_time"])
    df = pd.DataFrame(
        {
            "job_id": records.get("job_id", [str(i) for i in range(n)]),
            "arrival_time": np.asarray(records["arrival_time"], dtype=float),
            "model": records.get("model", [""] * n),
            "scale_factor": np.asarray(records.get("scale_factor", np.ones(n)), dtype=np.int64),
            "steps_total": np.asarray(records.get("steps_total", np.full(n, np.nan)), dtype=float),
            "duration": np.asarray(records.get("duration", np.full(n, np.nan)), dtype=float),
            "weight": np.asarray(records.get("weight", np.ones(n)), dtype=float),
            "slo": np.asarray(records.get("slo", np.full(n, np.nan)), dtype=float),
            "failed": np.asarray(records.get("failed", np.zeros(n, dtype=bool)), dtype=bool),
            "row": np.asarray(records.get("row", np.arange(1, n + 1)), dtype=np.int64),
        }
    )
    for name, values in (extra or {}).items():
        df[name] = values
    df["job_id"] = df["job_id"].astype(str)
    df["model"] = df["model"].astype(str)
    where = f"{fmt} trace {source}".strip()
    if n == 0:
        raise OptschedError(f"{where}: no jobs")
    for col, ok, rule in (
        ("arrival_time", df["arrival_time"] >= 0, ">= 0"),
        ("scale_factor", df["scale_factor"] > 0, "positive"),
        ("weight", df["weight"] >= MIN_WEIGHT, f">= {MIN_WEIGHT:g}"),
        ("steps_total", ~(df["steps_total"] < 0), ">= 0"),
        ("duration", ~(df["duration"] < 0), ">= 0"),
    ):
        bad = ~ok.to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            raise OptschedError(f"{where}: row {df['row'].iat[i]}: {column_of(col)} must be {rule}, got {df[col].iat[i]:g}")
    for col, limit, what in (
        ("arrival_time", MAX_SECONDS, "s"),
        ("duration", MAX_SECONDS, "s"),
        ("steps_total", MAX_STEPS, "steps"),
        ("scale_factor", MAX_GPUS, "GPUs"),
        ("weight", MAX_WEIGHT, ""),
    ):
        v = df[col].to_numpy(dtype=float)
        # inf steps_total is the documented "no length" of an elastic (Pollux/Sia) job
        big = (v > limit) & ~(np.isinf(v) & (col == "steps_total")) | (np.isinf(v) & (col != "steps_total"))
        if big.any():
            i = int(np.argmax(big))
            raise OptschedError(
                f"{where}: row {df['row'].iat[i]}: {column_of(col)} {df[col].iat[i]:g} exceeds the limit of {limit:g}"
                f"{' ' + what if what else ''}")
    no_work = df["steps_total"].isna() & df["duration"].isna()
    if no_work.any():
        i = int(np.argmax(no_work.to_numpy()))
        raise OptschedError(f"{where}: row {df['row'].iat[i]}: job has neither total steps nor a duration")
    dup = df["job_id"].duplicated()
    if dup.any():
        i = int(np.argmax(dup.to_numpy()))
        raise OptschedError(f"{where}: row {df['row'].iat[i]}: duplicate job id {df['job_id'].iat[i]!r}")
    df = df.sort_values("arrival_time", kind="stable").reset_index(drop=True)
    return Trace(jobs=df, format=fmt, source=source, speed=speed, notes=tuple(notes), skipped=skipped)


def require_durations(trace: Trace, writer: str) -> None:
    """A writer's refusal of a job without a duration, saying how to get one."""
    j = trace.jobs
    missing = j["duration"].isna().to_numpy()
    if not missing.any():
        return
    i = int(np.argmax(missing))
    why = (f"job {j['job_id'].iat[i]!r} has none: its duration is its total steps at its speed on v100, "
           "from a throughput table (optsched trace convert --throughputs TABLE; "
           "optsched.traces.throughputs.with_durations)" if np.isfinite(j["steps_total"].iat[i]) else
           f"job {j['job_id'].iat[i]!r} has no length (a Pollux/Sia job runs to an epoch count)")
    raise OptschedError(f"{writer} writer: every job needs a duration; {why}")


def numeric_column(values, name: str, rows, where: str, integer: bool = False, allow_missing: bool = False) -> np.ndarray:
    """Parse one column of strings; the first bad cell raises naming its row."""
    s = pd.Series(values, dtype=object)
    x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
    blank = s.isna().to_numpy() | (s.astype(str).str.strip() == "").to_numpy()
    bad = ~np.isfinite(x) & ~(blank & allow_missing)  # NaN, inf, 1e999: not a number a trace can mean
    if integer:
        bad |= np.isfinite(x) & (x != np.round(x))
    if bad.any():
        i = int(np.argmax(bad))
        what = "missing" if blank[i] else f"not a{'n integer' if integer else ' finite number'} ({s.iat[i]!r})"
        raise OptschedError(f"{where}: row {rows[i]}: {name} is {what}")
    if integer:
        big = np.abs(x) > MAX_INTEGER
        if big.any():
            i = int(np.argmax(big))
            raise OptschedError(f"{where}: row {rows[i]}: {name} {s.iat[i]!r} exceeds the limit of {MAX_INTEGER:,}")
    return x
