"""AlloX (EuroSys'20): jobs to GPU types by a min-cost bipartite assignment.

Each GPU type j is one machine of W_j GPUs; job m's processing time there is
p[m, j] = (remaining seconds on type j) · s_m / W_j (a job of s_m GPUs uses
s_m/W_j of the machine). With positions k = 1..n counted from the *last* job
of a machine, a job in position k delays k completions (its own and the k − 1
after it), so the sum of completion times of a schedule is

    Σ_{m} Σ_{j,k} k · p[m, j] · y[m, (j, k)]

and minimizing it over assignments y (each job one slot, each slot at most one
job) is a min-cost bipartite matching (Bruno, Coffman & Sethi; AlloX §4),
solved exactly with scipy's linear_sum_assignment. Each type then runs its
jobs from its highest position down; X[m, j] = 1 for the jobs that fit now
(running jobs keep their GPUs: AlloX does not preempt), with backfill.

Waiting time (AlloX's fairness knob α ∈ (0, 1]): only the ⌈α·n⌉ jobs that
have waited longest are matched in a recomputation (α = 1: all; the others
wait for the next one); at most ``max_jobs`` (default 400) longest-waiting
jobs enter one matching, which bounds its size.

Remaining seconds: steps_remaining / T[m, j] when the job's length is known
(AlloX estimates it by profiling on each type), else the predicted duration
(optsched.predict) minus what the job ran, scaled by T_max/T[m, j].
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from optsched.formulations.priority import greedy_fit
from optsched.formulations.seed_common import remaining_predicted, running_mask, waiting_seconds
from optsched.model import Allocation, Instance, OptschedError
from optsched.checks import check_number


def processing_times(inst: Instance, predictor=None) -> tuple[np.ndarray, str]:
    """(remaining seconds per job and type, inf where it cannot run; source)."""
    T = inst.throughput
    R = inst.steps_remaining
    with np.errstate(divide="ignore", invalid="ignore"):
        exact = np.where(T > 0, R[:, None] / T, np.inf)
    if not np.isnan(R).any():
        return exact, "steps_remaining"
    from optsched.predict.models import predicted_durations

    pred, source, _ = predicted_durations(inst, predictor, contributions=False)
    rem = remaining_predicted(inst, pred)
    with np.errstate(divide="ignore", invalid="ignore"):
        guess = np.where(T > 0, rem[:, None] * T.max(axis=1, keepdims=True) / T, np.inf)
    return np.where(np.isnan(R)[:, None], guess, exact), source


def min_cost_assignment(P: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Jobs × (machine, position-from-last) matching minimizing Σ k·P[m, j].
    Returns (machine, position, cost) per job (machine −1 if it cannot run)."""
    from scipy.optimize import linear_sum_assignment

    n, k = P.shape
    pos = np.arange(1, n + 1, dtype=float)
    big = 1e18
    cost = np.where(np.isfinite(P)[:, :, None], P[:, :, None] * pos[None, None, :], big).reshape(n, k * n)
    rows, cols = linear_sum_assignment(cost)
    machine = np.full(n, -1)
    position = np.zeros(n, dtype=int)
    ok = cost[rows, cols] < big
    machine[rows[ok]] = cols[ok] // n
    position[rows[ok]] = cols[ok] % n + 1
    return machine, position, float(cost[rows[ok], cols[ok]].sum())


# What allocate() imports, loaded (and timed as import_seconds) before its timer: optsched/policy.py.
IMPORTS = ("scipy.optimize",)


def allocate(inst: Instance, policy: str = "allox", solver: str = "auto", time_limit: float = 60.0,
             alpha: float = 1.0, max_jobs: int = 400, predictor=None, **_) -> Allocation:
    alpha = check_number("alpha", alpha)
    if not 0 < alpha <= 1:
        raise OptschedError(f"alpha: the fairness knob must be in (0, 1], got {alpha}")
    max_jobs = check_number("max_jobs", max_jobs, 1, whole=True)
    t0 = time.perf_counter()
    running = running_mask(inst)
    P_full, source = processing_times(inst, predictor)
    waiting = np.flatnonzero(~running)
    wait = waiting_seconds(inst)[waiting]
    take = min(len(waiting), max_jobs, int(np.ceil(alpha * len(waiting))))
    chosen = waiting[np.lexsort((inst.arrival_time[waiting], -wait))[:take]] if take else waiting[:0]
    P = P_full[chosen] * inst.scale_factor[chosen, None] / inst.capacity[None, :]
    machine, position, cost = min_cost_assignment(P) if len(chosen) else (np.zeros(0, int), np.zeros(0, int), 0.0)
    # Run order: running jobs first, then per machine from the highest position (first to run) down.
    order_key = np.full(inst.n, np.inf)
    order_key[chosen] = -position.astype(float)  # larger position runs earlier
    order_key[running] = -np.inf  # running jobs keep their GPUs (placed first)
    pinned_first = np.lexsort((inst.arrival_time, order_key))
    pinned_first = pinned_first[order_key[pinned_first] < np.inf]
    Tm = np.zeros_like(inst.throughput)
    Tm[running] = inst.throughput[running]
    for i, m in enumerate(chosen):
        if machine[i] >= 0:
            Tm[m, machine[i]] = inst.throughput[m, machine[i]]
    restricted = replace(inst, throughput=Tm)
    X = greedy_fit(restricted, pinned_first)
    explanation = {
        "priority_order": [inst.job_ids[m] for m in pinned_first],
        "assigned_type": {inst.job_ids[m]: inst.gpu_types[machine[i]] for i, m in enumerate(chosen) if machine[i] >= 0},
        "position_from_last": {inst.job_ids[m]: int(position[i]) for i, m in enumerate(chosen)},
        "matching_cost": cost,
        "matched_jobs": int(len(chosen)),
        "processing_time_source": source,
    }
    return Allocation.of(inst, policy, X, "optimal", cost, time.perf_counter() - t0, explanation=explanation)
