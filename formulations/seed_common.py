"""What the seeds' schedulers (qssf, lucid, allox, optimus, synergy, gandiva)
share: which jobs are running now, non-preemptive placement, and predicted
durations.

Running jobs are read from the instance alone, so the same policy runs in
``optsched solve``, the simulator and a service session: a job runs now when
it has received service and ``last_run_time`` is at (or after) the snapshot
time minus ``tolerance`` seconds (the simulator sets it to the end of the
job's last round; a service sets it from its reports). Non-preemptive
policies place those jobs first (X = 1 on their fastest type with room; the
Instance does not say which type a job is on, so on a heterogeneous cluster
the allocator may move it), then walk their own order with backfill.
"""

from __future__ import annotations

import numpy as np

from optsched.model import Instance

RUNNING_TOLERANCE = 1.0  # seconds


def running_mask(inst: Instance, tolerance: float = RUNNING_TOLERANCE) -> np.ndarray:
    if inst.last_run_time is None:
        return np.zeros(inst.n, dtype=bool)
    lr = np.nan_to_num(inst.last_run_time, nan=-np.inf)
    return (inst.attained_service > 0) & (lr >= inst.time - tolerance)


def executed_seconds(inst: Instance) -> np.ndarray:
    return inst.attained_service / np.maximum(inst.scale_factor, 1.0)


def waiting_seconds(inst: Instance) -> np.ndarray:
    """Time in the queue: elapsed − executed (≥ 0)."""
    return np.maximum(inst.elapsed_time - executed_seconds(inst), 0.0)


def pinned_order(inst: Instance, key: np.ndarray, pinned: np.ndarray) -> np.ndarray:
    """Pinned (running) jobs first by key, then the rest by key; ties: arrival, then id."""
    ids = np.array(inst.job_ids, dtype=object)
    id_rank = np.argsort(np.argsort(ids, kind="stable"), kind="stable")
    return np.lexsort((id_rank, inst.arrival_time, key, ~pinned))


def remaining_predicted(inst: Instance, predicted: np.ndarray) -> np.ndarray:
    """Predicted remaining seconds: the prediction minus what the job ran, at
    least 10 % of the prediction (a job that outlived its estimate is not free)."""
    return np.maximum(predicted - executed_seconds(inst), 0.1 * predicted)


def contributions_dict(inst: Instance, contrib, extra_log_terms: dict | None = None, limit: int = 200) -> dict:
    """{job: {feature: contribution to log priority}} for at most ``limit`` jobs."""
    if contrib is None:
        return {}
    out = {}
    for m, jid in enumerate(inst.job_ids[:limit]):
        row = {c: round(float(v), 4) for c, v in contrib.iloc[m].items() if v != 0}
        for name, arr in (extra_log_terms or {}).items():
            row[name] = round(float(arr[m]), 4)
        out[jid] = row
    return out
