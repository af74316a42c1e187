"""User-facing text: values as people read them, never Python reprs
(no ``{'gpu': 64}``, ``[]``, ``None``, ``nan`` in a command's text output;
tests/test_fuzz_options.py scans every command's output for them)."""

from __future__ import annotations

import math

from rich.markup import escape
from rich.table import Table

NONE = "none"
MISSING = "–"


def plain(value) -> str:
    """Any JSON-like value as one line of plain text."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return MISSING
        return f"{value:,.0f}" if value.is_integer() else f"{value:,.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{plain(k)}: {plain(v)}" for k, v in value.items()) or NONE
    if isinstance(value, (list, tuple, set)):
        return "; ".join(plain(v) for v in value) or NONE
    return str(value)


def seconds(value) -> str:
    """A time in seconds, with hours when it is long."""
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{value:,.0f} s ({value / 3600:,.1f} h)" if value >= 3600 else f"{value:,.1f} s"


def gpu_demand(counts: dict) -> str:
    """{1: 30, 2: 10} -> '1 GPU: 30 jobs, 2 GPUs: 10'."""
    parts = [f"{g:,} GPU{'s' if g != 1 else ''}: {n:,}{' jobs' if i == 0 else ''}"
             for i, (g, n) in enumerate(sorted(counts.items()))]
    return ", ".join(parts) or NONE


def cluster(gpus: dict) -> str:
    """{'v100': 36, 'k80': 4} -> '36 v100, 4 k80'."""
    return ", ".join(f"{n:,} {t}" for t, n in gpus.items()) or NONE


DESCRIBE_ROWS = (
    ("format", "format", plain),
    ("source", "source", plain),
    ("jobs", "jobs", plain),
    ("first arrival", "first_arrival", seconds),
    ("last arrival", "last_arrival", seconds),
    ("GPUs per job", "scale_factors", gpu_demand),
    ("job types", "models", plain),
    ("failed jobs", "failed", plain),
    ("skipped rows", "skipped", plain),
    ("notes", "notes", plain),
)


def describe_table(d: dict) -> Table:
    """``trace describe``'s text output (its --json keeps the raw keys)."""
    t = Table(show_header=False, show_edge=False)
    known = set()
    for label, key, fmt in DESCRIBE_ROWS:
        if key in d:
            known.add(key)
            t.add_row(label, escape(fmt(d[key])))
    for key, value in d.items():  # keys added later still print, as text
        if key not in known:
            t.add_row(escape(str(key)), escape(plain(value)))
    return t


__all__ = ["MISSING", "NONE", "cluster", "describe_table", "gpu_demand", "plain", "seconds"]
