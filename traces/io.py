"""Read any supported trace, detecting the format from the file."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

from optsched.model import OptschedError
from optsched.traces.trace import Trace

FORMATS = ("gavel", "tiresias", "pollux", "philly")


def detect_format(path: str | os.PathLike) -> str:
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt") as f:
        first = f.readline().strip()
    if p.name.endswith(".trace") or first.count("\t") in (6, 9):
        return "gavel"
    header = {c.strip() for c in first.split(",")}
    if {"num_gpu", "submit_time", "iterations"} <= header:
        return "tiresias"
    if {"name", "time", "application", "num_replicas"} <= header:
        return "pollux"
    if {"timestamp", "duration", "num_gpus"} <= header:
        return "philly"
    raise OptschedError(f"trace {p}: cannot detect the format from its first line; pass --format {'|'.join(FORMATS)}")


def read_trace(path: str | os.PathLike, format: str | None = None, **options) -> Trace:
    p = Path(path)
    if not p.exists():
        raise OptschedError(f"trace {p}: no such file")
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
    return reader(p, **options)


def write_trace(trace: Trace, path: str | os.PathLike, format: str) -> None:
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
