"""Optimus (EuroSys'18): marginal-gain GPU allocation from a speed model and a
convergence (remaining work) model.

Job m's remaining time at configuration c (GPUs of one type) is
t_m(c) = R_m / G[m, c], with G the speed model (formulations/configurations:
the Pollux goodput model for elastic jobs, at the batch size it picks per
configuration; a rigid job has one configuration, its scale factor) and R_m
the remaining work (``steps_remaining``; the convergence model's estimate
when a caller supplies it; elastic jobs without a length: equal remaining
work, R = 1, documented). Optimus's greedy:

1. every job gets its smallest configuration on its fastest type with room,
   jobs in order of the largest completion rate per GPU 1/(t_m(c₀)·g₀)
   (shortest remaining GPU-time on the fastest type first), while GPUs last;
2. then, repeatedly, the admitted job whose next larger configuration on the
   same type has the largest marginal gain (t_m(c) − t_m(c'))/(g' − g) > 0
   grows to it, while it fits.

Output: GPU counts per job (``Allocation.gpu_counts``, as pollux/sia), so it
runs elastic jobs (Pollux workloads) as well as rigid ones; Optimus is
preemptive (re-decided every recomputation).
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from optsched.formulations.configurations import Assignment, allocation_from_choice, check_feasible, goodput_matrix
from optsched.model import Allocation, Instance


def allocate(inst: Instance, policy: str = "optimus", solver: str = "auto", time_limit: float = 60.0, **_) -> Allocation:
    t0 = time.perf_counter()
    gm = goodput_matrix(inst)
    check_feasible(inst, gm.goodput)
    cfg, G = gm.configs, gm.goodput
    R = np.where(np.isnan(inst.steps_remaining), 1.0, np.maximum(inst.steps_remaining, 1e-9))
    with np.errstate(divide="ignore"):
        t = np.where(G > 0, R[:, None] / np.where(G > 0, G, 1.0), np.inf)  # (n, C)
    n = inst.n
    # Fastest type per job at its smallest configuration; ladder = that type's configs by size.
    smallest = np.where(G > 0, cfg.gpus[None, :], np.inf).min(axis=1)
    at_min = np.where((G > 0) & (cfg.gpus[None, :] == smallest[:, None]), G, 0.0)
    c0 = np.argmax(at_min, axis=1)
    free = inst.capacity.astype(float).copy()
    choice = np.full(n, -1)
    key = t[np.arange(n), c0] * cfg.gpus[c0]
    for m in np.lexsort((inst.arrival_time, key)):
        # its smallest configuration, fastest type first, on a type with room
        cands = np.flatnonzero((G[m] > 0) & (cfg.gpus == smallest[m]))
        for c in cands[np.argsort(-G[m, cands], kind="stable")]:
            if free[cfg.gpu_type[c]] >= cfg.gpus[c]:
                choice[m] = c
                free[cfg.gpu_type[c]] -= cfg.gpus[c]
                break
    ladders = {}
    heap: list = []

    def push(m: int) -> None:
        c = choice[m]
        lad = ladders.setdefault(m, [x for x in np.argsort(cfg.gpus, kind="stable")
                                     if cfg.gpu_type[x] == cfg.gpu_type[c] and G[m, x] > 0])
        bigger = [x for x in lad if cfg.gpus[x] > cfg.gpus[c] and G[m, x] > G[m, c]]
        if bigger:
            x = bigger[0]
            gain = (t[m, c] - t[m, x]) / (cfg.gpus[x] - cfg.gpus[c])
            heapq.heappush(heap, (-gain, m, int(x)))

    for m in np.flatnonzero(choice >= 0):
        push(int(m))
    steps = 0
    while heap:
        neg, m, x = heapq.heappop(heap)
        c = choice[m]
        extra = cfg.gpus[x] - cfg.gpus[c]
        if free[cfg.gpu_type[x]] >= extra:
            free[cfg.gpu_type[x]] -= extra
            choice[m] = x
            steps += 1
            push(m)
    value = float(np.sum(np.where(choice >= 0, t[np.arange(n), np.maximum(choice, 0)], 0.0)))
    a = Assignment(choice, value, "ok", time.perf_counter() - t0, float("nan"))
    rel = np.where(choice >= 0, G[np.arange(n), np.maximum(choice, 0)] / np.maximum(G[np.arange(n), c0], 1e-300), 0.0)
    alloc = allocation_from_choice(inst, policy, gm, a, objective=value, share=rel,
                                   extra={"marginal_steps": steps,
                                          "remaining_time": {jid: float(t[m, choice[m]]) for m, jid in enumerate(inst.job_ids) if choice[m] >= 0}})
    return alloc
