"""Gandiva (OSDI'18): time slicing, packing when over-subscribed, migration.

1. FIFO placement with backfill (formulations/priority.py): the jobs that fit
   run (X = 1 on their fastest type with room).
2. Packing when over-subscribed: a job left waiting joins a running job of the
   same width on that job's GPUs when the pair is admitted (pair throughputs,
   formulations/base.py's rule), best packing gain first, one partner per job
   (``gandiva_pack``); the pair holds those GPUs all the time.
3. Time slicing: if jobs still wait, every unpacked job that fits a type
   shares it round-robin — on type j each of them gets the same time fraction
   min(1, (W_j − GPUs of packed pairs on j) / Σ s of the jobs sharing j);
   running jobs stay on their type, waiting ones (FIFO) pick the type where
   their time-sliced throughput is highest (Gandiva's suspend/resume at iteration
   boundaries; the allocator's rounds realize the fractions).
4. Migration to defragment: Gandiva moves jobs so multi-GPU jobs get
   consolidated servers. The policy does not see servers; it marks
   ``explanation.defragment`` (the multi-GPU jobs that wait or are time
   sliced), which the allocator's consolidated placement serves by moving
   running jobs (``Placement.migrated``) when a placement needs it.

``time_slicing=False`` gives the old FIFO-plus-packing baseline.
"""

from __future__ import annotations

import time

import numpy as np

from optsched.formulations.priority import gandiva_pack, greedy_fit, priority_order
from optsched.model import Allocation, Instance, OptschedError
from optsched.checks import check_flag, check_number


def allocate(inst: Instance, policy: str = "gandiva", solver: str = "auto", time_limit: float = 60.0,
             time_slicing: bool = True, packing: bool = False, max_partners: int | None = None, agnostic: bool = False,
             **_) -> Allocation:
    time_slicing, agnostic = check_flag("time_slicing", time_slicing), check_flag("agnostic", agnostic)
    max_partners = check_number("max_partners", max_partners, 0, whole=True, none=True)
    t0 = time.perf_counter()
    order, _ = priority_order(inst, "fifo")
    X = greedy_fit(inst, order, agnostic)
    X, pairs, Y, _ = gandiva_pack(inst, X, max_partners)
    in_pair = np.zeros(inst.n, dtype=bool)
    in_pair[pairs.ravel()] = True
    placed = (X.sum(axis=1) > 0) | in_pair
    sliced = np.zeros(inst.n, dtype=bool)
    if time_slicing and not placed.all():
        pair_gpus = inst.scale_factor[pairs[:, 0]] @ Y if len(pairs) else np.zeros(inst.k)
        free = inst.capacity - pair_gpus
        solo = np.flatnonzero(~in_pair)
        col = np.where(X.sum(axis=1) > 0, X.argmax(axis=1), -1)
        demand = np.bincount(col[col >= 0], weights=inst.scale_factor[col >= 0], minlength=inst.k).astype(float)
        rank = {m: i for i, m in enumerate(order)}
        for m in sorted(np.flatnonzero(~in_pair & (col < 0)), key=rank.get):
            # the type where the job's time-sliced throughput is highest (ties: type order)
            fits = (inst.throughput[m] > 0) & (inst.scale_factor[m] <= free)
            if agnostic:
                speed = fits.astype(float)
            else:
                speed = inst.throughput[m]
            value = np.where(fits, speed * np.minimum(1.0, free / np.maximum(demand + inst.scale_factor[m], 1e-12)), -1.0)
            if value.max() > 0:
                col[m] = int(np.argmax(value))
                demand[col[m]] += inst.scale_factor[m]
        X = np.zeros_like(X)
        for j in range(inst.k):
            on = solo[col[solo] == j]
            if len(on):
                frac = min(1.0, free[j] / inst.scale_factor[on].sum())
                X[on, j] = frac
                sliced[on] = frac < 1.0
    thr = (inst.throughput * X).sum(axis=1)
    if len(pairs):
        from optsched.formulations.base import admitted_pairs

        all_pairs, rate, _ = admitted_pairs(inst, max_partners)
        idx = {tuple(p): i for i, p in enumerate(all_pairs.tolist())}
        for q, (a, b) in enumerate(pairs.tolist()):
            j = int(np.argmax(Y[q]))
            r = rate[idx[(a, b)], j]
            thr[a] += inst.throughput[a, j] * r[0]
            thr[b] += inst.throughput[b, j] * r[1]
    used = inst.scale_factor @ X + (inst.scale_factor[pairs[:, 0]] @ Y if len(pairs) else 0.0)
    explanation = {
        "priority_order": [inst.job_ids[m] for m in order],
        "time_sliced": [inst.job_ids[m] for m in np.flatnonzero(sliced)],
        "defragment": [inst.job_ids[m] for m in np.flatnonzero((inst.scale_factor > 1) & (sliced | ~((X.sum(axis=1) > 0) | in_pair)))],
        "capacity_used": {t: float(u) for t, u in zip(inst.gpu_types, used)},
        "capacity": {t: float(c) for t, c in zip(inst.gpu_types, inst.capacity)},
    }
    if (used > inst.capacity + 1e-9).any():
        raise OptschedError("gandiva: internal error, capacity exceeded")
    running = int(((X.sum(axis=1) > 0) | in_pair).sum())
    return Allocation.of(inst, policy, X, "ok", float(running), time.perf_counter() - t0, thr, explanation,
                         pairs=pairs, pair_fractions=Y)
