"""Priority-order baselines in the allocation shape of the fractional policies.

Jobs are sorted by a priority key; walking that order, each job takes its
scale factor's worth of GPUs of the fastest type it can run on that still has
room (X[m, j] = 1), or waits (row of zeros) — later jobs that fit may still
start (backfilling). Ties: arrival time, then job id. The orders:

- ``fifo``: arrival time.
- ``las``: least attained service (GPU-seconds) first.
- ``srtf``: shortest remaining time first, R_m / max_j T[m, j] (needs ``steps_total``).
- ``tiresias``: discretized 2D-LAS (Tiresias, NSDI'19): attained GPU-service
  (GPU count × time = ``attained_service``) places a job in queue q, the first
  q with service < thresholds[q]; defaults 3,250 and 7,200 GPU-seconds (three
  queues), the Tiresias simulator's ``queue_limit``. FIFO by arrival within a
  queue. Starvation: a job in a lower queue that has waited at least
  ``starvation_factor`` × its executed time (service / s_m) since it last ran
  is promoted to queue 0 (the simulator's ``solve_starvation`` knob, which it
  runs at 1, 2, 4, 8, …; default 8, 0 disables). Waiting time is
  ``now − last_run_time`` when the snapshot has it, else elapsed time − executed
  time (the total waiting since arrival).
- ``gandiva``: FIFO placement, then Gandiva-style packing: a job left waiting
  joins a running job of the same width on that job's GPUs when the pair is
  admitted (formulations.base admission rule), best packing gain first; each
  running job takes at most one partner. The pair then holds the GPUs all the
  time (pair fraction 1).

``agnostic=True`` places on any type with room, in type order, instead of the
fastest. The objective reported is the number of jobs running.
"""

from __future__ import annotations

import numpy as np

from optsched.formulations.base import admitted_pairs, require_steps_remaining
from optsched.model import Allocation, Instance, OptschedError

ORDERS = ("fifo", "las", "srtf", "tiresias", "gandiva")
TIRESIAS_THRESHOLDS = (3250.0, 7200.0)  # GPU-seconds, Tiresias simulator jobs.py
STARVATION_FACTOR = 8.0


def priority_order(
    inst: Instance, order: str, thresholds=TIRESIAS_THRESHOLDS, starvation_factor: float = STARVATION_FACTOR
) -> tuple[np.ndarray, np.ndarray | None]:
    """Job indices, highest priority first (and the Tiresias queue of each job)."""
    ids = np.array(inst.job_ids, dtype=object)
    id_rank = np.argsort(np.argsort(ids, kind="stable"), kind="stable")  # lexicographic rank of the id
    queue = None
    if order in ("fifo", "gandiva"):
        primary = np.zeros(inst.n)
    elif order == "las":
        primary = inst.attained_service
    elif order == "srtf":
        primary = require_steps_remaining(inst, "srtf") / inst.throughput.max(axis=1)
    elif order == "tiresias":
        queue = tiresias_queues(inst, thresholds, starvation_factor)
        primary = queue.astype(float)
    else:
        raise OptschedError(f"order: unknown priority order {order!r} (choose from {', '.join(ORDERS)})")
    return np.lexsort((id_rank, inst.arrival_time, primary)), queue


def tiresias_queues(inst: Instance, thresholds=TIRESIAS_THRESHOLDS, starvation_factor: float = STARVATION_FACTOR) -> np.ndarray:
    """Queue index per job: discretized attained GPU-service, with starvation promotion."""
    limits = np.asarray(sorted(thresholds), dtype=float)
    queue = np.searchsorted(limits, inst.attained_service, side="right")
    if starvation_factor > 0:
        executed = inst.attained_service / inst.scale_factor
        waited = np.maximum(inst.elapsed_time - executed, 0.0)
        if inst.last_run_time is not None:
            since = inst.time - inst.last_run_time
            waited = np.where(np.isnan(since), waited, np.maximum(since, 0.0))
        queue = np.where((queue > 0) & (executed > 0) & (waited >= starvation_factor * executed), 0, queue)
    return queue


def greedy_fit(inst: Instance, order: np.ndarray, agnostic: bool = False) -> np.ndarray:
    """X[m, j] = 1 for the jobs that fit, walking ``order``; fastest usable type first."""
    X = np.zeros((inst.n, inst.k))
    free = inst.capacity.copy()
    # Per job, types by descending throughput (ties: type order); agnostic: type order.
    pref = np.tile(np.arange(inst.k), (inst.n, 1)) if agnostic else np.argsort(-inst.throughput, axis=1, kind="stable")
    for m in order:
        s = inst.scale_factor[m]
        for j in pref[m]:
            if inst.throughput[m, j] > 0 and free[j] >= s:
                X[m, j] = 1.0
                free[j] -= s
                break
        if not free.any():
            break
    return X


def gandiva_pack(inst: Instance, X: np.ndarray, max_partners: int | None = None):
    """Pair each waiting job with at most one running job on the running job's GPUs."""
    pairs, rate, ok = admitted_pairs(inst, max_partners)
    running = X.sum(axis=1) > 0
    on_type = X.argmax(axis=1)
    a, b = pairs[:, 0], pairs[:, 1]
    # Candidate (pair, type): exactly one member running, on a type the pair is admitted on.
    host = np.where(running[a], a, b)
    cand = np.flatnonzero((running[a] ^ running[b]) & ok[np.arange(len(pairs)), on_type[host]])
    gain = rate[cand, on_type[host[cand]]].sum(axis=1)
    busy = np.zeros(inst.n, dtype=bool)
    chosen = []
    for p in cand[np.lexsort((cand, -gain))]:
        if not busy[a[p]] and not busy[b[p]]:
            busy[a[p]] = busy[b[p]] = True
            chosen.append(p)
    chosen = np.array(chosen, dtype=int)
    Y = np.zeros((len(chosen), inst.k))
    if len(chosen):
        Y[np.arange(len(chosen)), on_type[host[chosen]]] = 1.0
        X = X.copy()
        X[host[chosen]] = 0.0  # the host's GPUs now run the pair
    thr = (inst.throughput * X).sum(axis=1)
    for q, p in enumerate(chosen):  # few pairs: a short loop over chosen pairs only
        j = on_type[host[p]]
        thr[a[p]] += inst.throughput[a[p], j] * rate[p, j, 0]
        thr[b[p]] += inst.throughput[b[p], j] * rate[p, j, 1]
    return X, pairs[chosen].reshape(-1, 2), Y, thr


def allocate(
    inst: Instance,
    policy: str = "fifo",
    solver: str = "clarabel",
    time_limit: float = 60.0,
    order: str = "fifo",
    agnostic: bool = False,
    packing: bool = False,
    thresholds=TIRESIAS_THRESHOLDS,
    starvation_factor: float = STARVATION_FACTOR,
    max_partners: int | None = None,
) -> Allocation:
    """solver and time_limit are unused: a priority order needs no solver."""
    if packing and order != "gandiva":
        raise OptschedError(f"packing: policy {policy} does not support space sharing (gandiva packs by itself)")
    import time

    t0 = time.perf_counter()
    ranked, queue = priority_order(inst, order, thresholds, starvation_factor)
    X = greedy_fit(inst, ranked, agnostic)
    explanation: dict = {"priority_order": [inst.job_ids[m] for m in ranked]}
    if queue is not None:
        explanation["tiresias_queue"] = {jid: int(q) for jid, q in zip(inst.job_ids, queue)}
    pairs, Y, thr = np.zeros((0, 2), dtype=int), np.zeros((0, inst.k)), (inst.throughput * X).sum(axis=1)
    if order == "gandiva":
        X, pairs, Y, thr = gandiva_pack(inst, X, max_partners)
        explanation["capacity_used"] = {t: float(u) for t, u in zip(inst.gpu_types, inst.scale_factor @ X + inst.scale_factor[pairs[:, 0]] @ Y)}
        explanation["capacity"] = {t: float(c) for t, c in zip(inst.gpu_types, inst.capacity)}
        thr_equal = (inst.throughput * inst.equal_share()).sum(axis=1) * inst.weight / inst.scale_factor  # as explain()
        rel = np.divide(thr, thr_equal, out=np.zeros_like(thr), where=thr_equal > 0)
        explanation["share_vs_equal"] = {jid: float(r) for jid, r in zip(inst.job_ids, rel)}
    running = int((X.sum(axis=1) > 0).sum() + 2 * len(pairs))
    return Allocation.of(inst, policy, X, "ok", float(running), time.perf_counter() - t0, thr, explanation,
                         pairs=pairs, pair_fractions=Y)
