"""Read any supported trace, detecting the format from the file."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

from optsched.model import OptschedError
from optsched.traces.trace import Trace

FORMATS = ("gavel", "tiresias", "pollux", "philly")


def detect_format(path: str | os.PathLike) -> str:
    p = Path(path)
    first = _first_line(p)
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


def _first_line(p: Path) -> str:
    """The first line, read without trusting the file: a truncated .gz or
    undecodable bytes are one line naming the file."""
    where = f"trace {p}"
    try:
        if p.suffix == ".gz":
            with gzip.open(p, "rb") as f:
                head = f.read(1 << 16)
        else:
            with open(p, "rb") as f:
                head = f.read(1 << 16)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise OptschedError(f"{where}: not a valid gzip file ({str(e) or 'truncated'})") from None
    except IsADirectoryError:
        raise OptschedError(f"{where}: is a directory") from None
    except OSError as e:
        raise OptschedError(f"{where}: cannot read ({e.strerror or e})") from None
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
