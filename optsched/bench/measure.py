"""Measurement for `optsched bench`: CPU and wall seconds of one call, the p50 / p99 / max
of a case's samples, utilization of an allocation, and the objective gap to a reference.

CPU seconds (``time.process_time``: this process, all its threads) are the primary
measure, since the machine is shared; wall seconds stand beside them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Sample:
    cpu: float
    wall: float
    out: object  # what the call returned


def timed(fn: Callable[[], object], repeat: int = 1) -> Sample:
    """The call's CPU and wall seconds (the run with the median CPU time of ``repeat``)."""
    runs = []
    for _ in range(max(repeat, 1)):
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        runs.append(Sample(time.process_time() - c0, time.perf_counter() - w0, out))
    return sorted(runs, key=lambda s: s.cpu)[(len(runs) - 1) // 2]


def spread(xs) -> tuple[float, float, float]:
    """(p50, p99, max) of the finite values (NaN when none). With 20 samples p99 lies
    between the largest two (linear interpolation)."""
    a = np.asarray([x for x in xs if x is not None and np.isfinite(x)], float)
    if not len(a):
        return (float("nan"),) * 3
    return float(np.median(a)), float(np.percentile(a, 99)), float(a.max())


def utilization(inst, X: np.ndarray | None) -> float:
    """Utilization of usable capacity of the time fractions X (formulations/base.utilization:
    GPUs used / (used + idle GPUs jobs with time left could run on)); NaN without X."""
    from optsched.formulations.base import utilization as of_usable

    if X is None or X.shape != (inst.n, inst.k):
        return float("nan")
    total = of_usable(inst, X)["total"]
    return float("nan") if total is None else float(total)


def allocation_utilization(inst, alloc) -> float:
    """The allocation's own report when it has one (``explanation.utilization``), else its
    fractions' (configuration policies: GPUs given / capacity)."""
    reported = (alloc.explanation or {}).get("utilization")
    if isinstance(reported, dict) and reported.get("total") is not None:
        return float(reported["total"])
    if alloc.gpu_counts is not None:
        return float(alloc.gpu_counts.sum() / max(inst.capacity.sum(), 1e-12))
    if alloc.pairs is not None and len(alloc.pairs):
        return float("nan")
    return utilization(inst, alloc.fractions)


def gap(ours: float, ref: float, maximize: bool = True) -> float:
    """How much worse ours is than the reference, relative to it (< 0: ours is better)."""
    if ref is None or not np.isfinite(ref) or not np.isfinite(ours):
        return float("nan")
    return ((ref - ours) if maximize else (ours - ref)) / max(abs(ref), 1e-12)
