"""Checks of single values, shared by every layer: a flag, a number in a range, an increasing
list, each refused with one line that starts with the value's name (``max_rounds: must be >= 1,
got -1``). The formulations check their own options with them (so the Python API refuses what
the CLI refuses), the simulator and the commands their options (``optsched/sim/limits.py``,
``optsched/cli/limits.py``). Types layer: nothing above ``optsched.model`` is imported.
"""

from __future__ import annotations

import math
import numbers

from optsched.model import MAX_GPUS, OptschedError

MIN_ROUND_LENGTH = 1e-3  # seconds: shorter rounds vanish in a session clock's rounding
MAX_SECONDS = 1e10  # any time option (the trace limit of arrival times and durations)
MAX_GPU_SECONDS = MAX_SECONDS * MAX_GPUS  # GPU-time: that many seconds on every GPU a cluster may have


def fmt(x) -> str:
    """A bound or value as text: integers with thousands separators, floats in %g."""
    return f"{x:,}" if isinstance(x, numbers.Integral) and not isinstance(x, bool) else f"{x:g}"


def as_written(value) -> str:
    """A value as the file it came from writes it: TOML's and JSON's ``true``/``false``
    (Python's True/False read as someone else's syntax), lists element by element."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(as_written(v) for v in value) + "]"
    return repr(value)


def is_flag(value) -> bool:
    return isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b"


def check_flag(key: str, value, *, none: bool = False) -> bool | None:
    """``value`` as a bool: True/False, or 1/0 (the command line's convention); None passes with ``none``."""
    if value is None and none:
        return None
    if is_flag(value):
        return bool(value)
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    what = "true, false (or 1/0) or None" if none else "true or false (or 1/0)"
    raise OptschedError(f"{key}: must be {what}, got {as_written(value)}")


def check_number(key: str, value, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
                 hi_open: bool = False, whole: bool = False, none: bool = False, unit: str = ""):
    """``value`` when it is a finite number in the range (``lo_open``/``hi_open`` exclude a bound), as an
    int when ``whole`` (a whole float such as 4.0 is accepted), else a float; None passes with ``none``."""
    if value is None and none:
        return None
    kind = "a whole number" if whole else "a number"
    if is_flag(value) or not isinstance(value, numbers.Real):
        raise OptschedError(f"{key}: must be {kind}, got {as_written(value)}")
    v = float(value)
    if not math.isfinite(v):
        raise OptschedError(f"{key}: must be a finite number, got {v}")
    if whole and not v.is_integer():
        raise OptschedError(f"{key}: must be a whole number, got {v:g}")
    u = f" {unit}" if unit else ""
    shown = fmt(int(value)) if isinstance(value, numbers.Integral) else f"{v:g}"
    if lo is not None and (v <= lo if lo_open else v < lo):
        bound = "positive" if lo_open and lo == 0 else f"{'>' if lo_open else '>='} {fmt(lo)}{u}"
        raise OptschedError(f"{key}: must be {bound}, got {shown}")
    if hi is not None and (v >= hi if hi_open else v > hi):
        raise OptschedError(f"{key}: must be {'<' if hi_open else '<='} {fmt(hi)}{u}, got {shown}")
    return int(value) if whole else v


def check_increasing(key: str, values, hi: float | None = None, *, unit: str = "") -> tuple[float, ...]:
    """One or more finite numbers, positive and strictly increasing (at most ``hi``), as a tuple of floats."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise OptschedError(f"{key}: must be a list of numbers, got {as_written(values)}")
    vals = list(values)
    if not vals or any(is_flag(v) or not isinstance(v, numbers.Real) for v in vals):
        raise OptschedError(f"{key}: must be a list of numbers, got {as_written(vals)}")
    vals = [float(v) for v in vals]
    shown = "[" + ", ".join(f"{v:g}" for v in vals) + "]"
    if not all(math.isfinite(v) for v in vals):
        raise OptschedError(f"{key}: must be finite numbers, got {shown}")
    if any(v <= 0 for v in vals) or any(b <= a for a, b in zip(vals, vals[1:])):
        raise OptschedError(f"{key}: must be positive and increasing, got {shown}")
    if hi is not None and vals[-1] > hi:
        raise OptschedError(f"{key}: must be at most {fmt(hi)}{f' {unit}' if unit else ''}, got {shown}")
    return tuple(vals)
