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

Fixed batch size (``inst.extras["fixed_batch_size"]``, per job, nan for
others; the simulator sets it for elastic jobs, as the Pollux simulator's
Optimus keeps each workload job's batch size): Optimus does not adapt the
batch size, so for those jobs the speed model is its own — iterations/s at
that batch size split over g GPUs (micro-batch and accumulation by the peers'
rule: local = ⌈B/g⌉, accumulation ⌈local/max_local⌉ − 1, at least 1 on one GPU
when B > M0), the step time the job's fitted throughput parameters predict
(no observations yet: linear speed-up from its one-GPU rate) — and R is
``inst.extras["remaining_iterations"]`` (its convergence model: iterations
left at that batch size). GPU counts above B / min micro-batch are not used.

Output: GPU counts per job (``Allocation.gpu_counts``, as pollux/sia), so it
runs elastic jobs (Pollux workloads) as well as rigid ones; Optimus is
preemptive (re-decided every recomputation).
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from dataclasses import replace

from optsched.formulations.configurations import Assignment, allocation_from_choice, check_feasible, goodput_matrix
from optsched.goodput.model import iteration_time
from optsched.model import Allocation, Instance, OptschedError


def fixed_batch_split(batch: np.ndarray, gpus: np.ndarray, init_bsz: np.ndarray, max_bsz: np.ndarray,
                      max_local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(micro-batch, accumulation steps) of a fixed global batch on ``gpus``
    replicas, elementwise (the peers' rule; see the module docstring)."""
    batch = np.minimum(batch, max_bsz)
    local = np.ceil(batch / gpus - 1e-8)
    accum = np.ceil(local / max_local - 1e-8) - 1
    accum = np.where((gpus == 1) & (batch > init_bsz), np.maximum(accum, 1), accum)
    accum = np.maximum(accum, 0)
    atomic = np.ceil(local / (accum + 1) - 1e-8)
    atomic = np.minimum(atomic, np.floor(max_bsz / (gpus * (accum + 1))))
    return np.maximum(atomic, 1), accum


def fixed_batch_speed(inst: Instance, gm, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(speed, micro-batch, accumulation), each (n, C): iterations/s at each
    job's fixed batch size per configuration (rows with nan batch: 0)."""
    el, cfg = inst.elastic, gm.configs
    rows = np.flatnonzero(np.isfinite(batch))
    n, C = inst.n, len(cfg.gpus)
    out = np.zeros((n, C))
    bs, ac = np.zeros((n, C), dtype=int), np.zeros((n, C), dtype=int)
    if el is None or not len(rows):
        return out, bs, ac
    g = cfg.gpus[None, :].astype(float)
    b = batch[rows, None]
    atomic, accum = fixed_batch_split(b, g, el.init_batch_size[rows, None], el.max_batch_size[rows, None],
                                      el.max_local_bsz[rows, None])
    P = gm.params[rows][:, cfg.gpu_type, :]  # (r, C, 7) after bootstrapping; nan: never observed
    known = np.isfinite(P).all(axis=2)
    t_fit = iteration_time(np.nan_to_num(P, nan=1.0), cfg.nodes[None, :], g, atomic, accum)
    # no observations: linear speed-up from the one-GPU rate (samples/s at the smallest micro-batch)
    per_gpu = inst.throughput[rows][:, cfg.gpu_type] / np.maximum(inst.scale_factor[rows, None], 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_prior = np.where(per_gpu > 0, b / (per_gpu * g), np.inf)
        speed = np.where(known, 1.0 / t_fit, 1.0 / t_prior)
    within = (g <= np.maximum(np.floor(b / np.maximum(el.min_local_bsz[rows, None], 1.0)), 1.0)) & (
        g <= el.max_gpus[rows, None])
    out[rows] = np.where(within & np.isfinite(speed) & (speed > 0), speed, 0.0)
    bs[rows], ac[rows] = atomic.astype(int), accum.astype(int)
    return out, bs, ac


def allocate(inst: Instance, policy: str = "optimus", solver: str = "auto", time_limit: float = 60.0, **_) -> Allocation:
    t0 = time.perf_counter()
    gm = goodput_matrix(inst)
    R = np.where(np.isnan(inst.steps_remaining), 1.0, np.maximum(inst.steps_remaining, 1e-9))
    batch = np.asarray(inst.extras.get("fixed_batch_size", np.full(inst.n, np.nan)), dtype=float)
    if batch.shape != (inst.n,):
        raise OptschedError(f"extras.fixed_batch_size: needs one value per job ({inst.n}), got shape {batch.shape}")
    fixed = np.isfinite(batch)
    if fixed.any():
        left = np.asarray(inst.extras.get("remaining_iterations", np.full(inst.n, np.nan)), dtype=float)
        if left.shape != (inst.n,) or not np.all(np.isfinite(left[fixed])):
            raise OptschedError("extras.remaining_iterations: needs a finite value for every job with a fixed batch size")
        speed, atomic, accum = fixed_batch_speed(inst, gm, batch)
        f = fixed[:, None]
        gm = replace(gm, goodput=np.where(f, speed, gm.goodput), atomic_bsz=np.where(f, atomic, gm.atomic_bsz),
                     accum_steps=np.where(f, accum, gm.accum_steps))
        R = np.where(fixed, np.maximum(left, 1e-9), R)
    check_feasible(inst, gm.goodput)
    cfg, G = gm.configs, gm.goodput
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
