"""Read any supported trace, detecting the format from the file."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from optsched.model import OptschedError
from optsched.traces.trace import Trace

FORMATS = ("gavel", "tiresias", "pollux", "philly")
# How to give the format, in the commands and read_trace; interfaces without either replace it.
FORMAT_HINT = "pass --format (format= in Python)"


def detect_format(path: str | os.PathLike) -> str:
    p = Path(path)
    first = _first_line(p)
    if not first:
        from optsched.traces.csvutil import read_bytes

        head = read_bytes(p, f"trace {p}", 1 << 16)
        if not head.replace(b"\xef\xbb\xbf", b"").strip() and len(head) < 1 << 16:  # (BOM, blanks: as each reader says)
            raise OptschedError(f"trace {p}: empty file")
    if p.name.endswith(".trace") or first.count("\t") in (6, 9):
        return "gavel"
    header = {c.strip() for c in first.split(",")}
    if {"num_gpu", "submit_time", "iterations"} <= header:
        return "tiresias"
    if {"name", "time", "application", "num_replicas"} <= header:
        return "pollux"
    if {"timestamp", "duration", "num_gpus"} <= header:
        return "philly"
    raise OptschedError(f"trace {p}: cannot detect the format from its first line (one of {'|'.join(FORMATS)}); {FORMAT_HINT}")


def _first_line(p: Path) -> str:
    """The first line, read without trusting the file: a truncated .gz or
    undecodable bytes are one line naming the file."""
    from optsched.traces.csvutil import read_bytes

    where = f"trace {p}"
    head = read_bytes(p, where, 1 << 16)
    line = head.split(b"\n", 1)[0]
    try:
        return line.decode("utf-8-sig").strip()
    except UnicodeDecodeError as e:
        raise OptschedError(f"{where}: row 1: not UTF-8 text (byte {e.start})") from None


def read_trace(path: str | os.PathLike, format: str | None = None, **options) -> Trace:
    p = Path(path)
    if not p.exists():
        raise OptschedError(f"trace {p}: no such file")
    if p.is_dir():
        raise OptschedError(f"trace {p}: is a directory")
    fmt = format or detect_format(p)
    if fmt == "gavel":
        from optsched.traces.gavel import read_gavel as reader
    elif fmt == "tiresias":
        from optsched.traces.tiresias import read_tiresias as reader
    elif fmt == "pollux":
        from optsched.traces.pollux import read_pollux as reader
    elif fmt == "philly":
        from optsched.traces.philly import read_philly as reader
    else:
        raise OptschedError(f"--format: unknown trace format {fmt!r} (choose from {', '.join(FORMATS)})")
    try:
        return reader(p, **options)
    except OptschedError as e:  # a cell or header quoted into the message stays on one line
        if "\n" in str(e) or "\r" in str(e):
            raise OptschedError(" ".join(str(e).split())) from None
        raise


# Extensions a trace cannot have: the readers read text (optionally .gz), and a
# file named .parquet holding tab-separated text would mislead its reader.
NOT_TRACE_SUFFIXES = (".parquet", ".pq", ".feather", ".arrow", ".json", ".xlsx", ".npz", ".pkl")


def write_trace(trace: Trace, path: str | os.PathLike, format: str, table=None) -> list[str]:
    """Write ``trace`` as ``format``. Refuses (OptschedError) what the target
    format cannot carry in a form the simulator reads back; warns (logged, and
    returned) about what it drops. ``table``: the throughput table the user
    gave (``--throughputs``), against which a Gavel trace's job types are
    checked (default: the built-in one). Returns the warnings."""
    p = Path(path)
    if p.suffix.lower() in NOT_TRACE_SUFFIXES:
        raise OptschedError(
            f"output: {p.name}: traces are text files ({'.trace' if format == 'gavel' else '.csv'}, optionally .gz); "
            f"{p.suffix} is not a trace format")
    if format in FORMATS and len(trace) == 0:
        raise OptschedError(f"{format} writer: the trace has no jobs")
    if format == "gavel":
        from optsched.traces.gavel import write_gavel as writer
    elif format == "tiresias":
        from optsched.traces.tiresias import write_tiresias as writer
    elif format == "pollux":
        from optsched.traces.pollux import write_pollux as writer
    elif format == "philly":
        from optsched.traces.philly import write_philly as writer
    else:
        raise OptschedError(f"--format: unknown trace format {format!r} (choose from {', '.join(FORMATS)})")
    writer(trace, path)
    warnings = _conversion_warnings(trace, format, table)
    for w in warnings:  # after the write: a refused trace gets its one error line, no warnings before it
        logging.getLogger("optsched.traces").warning(w)
    return warnings


def _conversion_warnings(trace: Trace, format: str, table=None) -> list[str]:
    """What ``format`` drops from ``trace`` (refusals are raised by the writers)."""
    j = trace.jobs
    out: list[str] = []
    if format == trace.format:
        return out
    if format == "gavel":
        from optsched.traces.throughputs import default_throughputs

        given = table is not None
        table = table if given else default_throughputs()
        unknown = sorted({m for m in j["model"] if m and not table.has_model(m)})
        if unknown:
            shown = ", ".join(unknown[:5]) + (f" (+{len(unknown) - 5} more)" if len(unknown) > 5 else "")
            out.append(f"gavel writer: job types {shown} are not in the given --throughputs table: simulate needs a "
                       "table that has them" if given else
                       f"gavel writer: job types {shown} are not in the default throughput table: "
                       "simulate needs --throughputs with a table that has them")
        if j["duration"].notna().any() and trace.speed == "duration":
            out.append("gavel writer: the trace's durations (its job speeds) are dropped: Gavel traces take "
                       "speeds from a throughput table")
    if format == "pollux":
        from optsched.goodput.profiles import MAX_EPOCHS

        apps = sorted(MAX_EPOCHS)
        unknown = sorted({m for m in j["model"] if m not in apps})
        if unknown:
            shown = ", ".join(repr(m) for m in unknown[:3]) + (f" (+{len(unknown) - 3} more)" if len(unknown) > 3 else "")
            out.append(f"pollux writer: job types {shown} are not profiled applications ({', '.join(apps)}): "
                       "simulate rejects those jobs")
        if "batch_size" not in j or (j["batch_size"].fillna(0) <= 0).any():
            out.append("pollux writer: the trace has no batch sizes (written as 0): simulate rejects those jobs")
        if (j["steps_total"].notna() & ~np.isinf(j["steps_total"])).any() or j["duration"].notna().any():
            out.append("pollux writer: job lengths are dropped: a Pollux/Sia job runs to its application's epoch count")
    if format == "philly" and (j["model"] != "").any():
        out.append("philly writer: job types are dropped (Philly has no model names; simulate assigns them from a seed)")
    if format == "tiresias" and trace.speed == "table":
        out.append("tiresias writer: the job types' per-GPU-type speeds are dropped: a Tiresias trace has one duration "
                   "per job (a homogeneous cluster)")
    return out
