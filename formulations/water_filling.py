"""Max-min fairness with water filling (Gavel): lift the lowest share, freeze
the jobs that cannot go higher, repeat until every job is frozen.

Round r solves the LP

    maximize t
    s.t.  share_m(X) ≥ t · w_m^(r)      for every unfrozen job m
          share_m(X) ≥ level_m          for every frozen job m
          base constraints,

with share_m(X) = Σ_j T[m, j] X[m, j] · s_m / thr_equal_m (max_min_fairness's
normalized share before dividing by the weight). As a block LP (z = t):
unfrozen rows A0[m] / w_m^(r) with g = 1, lower 0; frozen rows A0[m] / level_m
with g = 0, lower 1 (both divided through for scaling: the same rows as
share_m ≥ t w_m and share_m ≥ level_m). A job is frozen at
level_m = t_r w_m^(r) when it cannot rise above it in any optimal solution of
round r. Gavel finds these jobs with a MILP per round; we read them off the
duals instead: an interior-point solver returns a strictly complementary
dual, whose multiplier on ``share_m ≥ t w_m`` is positive exactly when
share_m = t w_m in every optimal solution (Goldman–Tucker). The block IPM,
CLARABEL and HiGHS IPM without crossover all return such interior duals; with
a vertex dual (simplex) a positive multiplier still proves the job stuck
(complementary slackness), only some stuck jobs may wait a round. Each round
freezes at least one job (the multipliers sum to 1), so there are at most n
rounds; in practice one per distinct share level. The first round is
max_min_fairness, so the minimum share equals its objective; the result is
the leximin (water-filled) allocation.

``weights`` (a function of the frozen mask, returning w^(r)) lets the
hierarchical policy re-split a tenant's weight among its unfrozen jobs.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable

import numpy as np

from optsched.formulations.base import base_lp, fallback_allocation, no_packing
from optsched.formulations.max_min_fairness import normalized_throughput
from optsched.model import Allocation, Instance
from optsched.solvers import block_backend, block_lp

# A job is stuck when its multiplier, scaled to mean 1 over the unfrozen jobs,
# exceeds STUCK_DUAL. CLARABEL's noise on the multipliers of jobs that can rise
# was seen up to ~3e-7: 1e-3 leaves a wide margin. A stuck job whose multiplier
# is smaller is simply not frozen yet: the next round cannot raise t past it,
# and freezes it then at the same level (one extra LP, same result).
STUCK_DUAL = 1e-3


def allocate(
    inst: Instance,
    policy: str = "max_min_fairness_water_filling",
    solver: str = "auto",
    time_limit: float = 60.0,
    agnostic: bool = False,
    packing: bool = False,
    weights: Callable[[np.ndarray], np.ndarray] | None = None,
    max_rounds: int | None = None,
    warm_levels: bool = True,
) -> Allocation:
    no_packing(policy, packing)
    A0 = normalized_throughput(inst, agnostic) * inst.weight[:, None]  # unweighted share
    weights = weights or (lambda frozen: inst.weight)
    return water_fill(inst, policy, A0, weights, solver, time_limit, max_rounds, warm_levels)


def round_lp(inst: Instance, A0: np.ndarray, w: np.ndarray, frozen: np.ndarray, level: np.ndarray, full=None):
    """Round r's block LP: maximize t s.t. A0[m] X[m] / w_m ≥ t (unfrozen), A0[m] X[m] / level_m ≥ 1 (frozen).
    ``full[m]`` = the type a frozen job must run on all of the time to reach its level (-1: none):
    such a job leaves the program and its GPUs leave the capacities (see saturated)."""
    pinned = frozen & (level > 0)  # a job frozen at level 0 (it cannot run) keeps the row share ≥ 0
    scale = np.where(pinned, level, np.where(frozen, 1.0, w))
    lp = base_lp(inst, A=A0 / scale[:, None], g=np.where(frozen, 0.0, 1.0), lower=np.where(pinned, 1.0, 0.0), c_z=1.0)
    if full is None or not np.any(full >= 0):
        return lp
    out = full >= 0
    used = np.bincount(full[out], weights=lp.S[out], minlength=lp.k)
    return dataclasses.replace(lp, allowed=lp.allowed & ~out[:, None], W=np.maximum(lp.W - used, 0.0),
                               has_row=~out, lower=np.where(out, 0.0, lp.lower))


def saturated(inst: Instance, A0: np.ndarray, frozen: np.ndarray, level: np.ndarray) -> np.ndarray:
    """For each frozen job whose level is its largest share (all of its time on
    its one best type), that type; -1 for every other job. Their rows admit a
    single point, which leaves an interior-point method no interior: they are
    fixed instead. Jobs with two equally good types stay in the program."""
    A = np.where(inst.available, A0, 0.0)
    order = np.sort(A, axis=1)
    best, second = order[:, -1], (order[:, -2] if A.shape[1] > 1 else np.zeros(len(A)))
    unique = best > second * (1 + 1e-9)
    at_max = frozen & (level >= best * (1 - 1e-9)) & (best > 0) & unique
    return np.where(at_max, np.argmax(A, axis=1), -1)


def water_fill(inst, policy, A0, weights, solver, time_limit, max_rounds=None, warm_levels=True) -> Allocation:
    """``warm_levels=False`` solves every round cold (the IPM with interior duals): the
    same leximin shares, for measuring what the warm rounds save."""
    t_start = time.perf_counter()
    n = inst.n
    frozen = np.zeros(n, dtype=bool)
    level = np.zeros(n)
    X_best, objective, first_bottleneck = None, float("nan"), []
    rounds, build_seconds, solver_seconds, status = 0, 0.0, 0.0, "optimal"
    deadline = time.perf_counter() + time_limit
    backend = block_backend(solver, has_pairs=False)
    warm = None  # the previous round's prices and level
    while not frozen.all():
        if max_rounds is not None and rounds >= max_rounds:
            status = f"stopped after max_rounds={max_rounds} ({int((~frozen).sum())} jobs not frozen)"
            break
        U = np.flatnonzero(~frozen)
        w = np.asarray(weights(frozen), dtype=float)
        t0 = time.perf_counter()
        full = saturated(inst, A0, frozen, level)
        lp = round_lp(inst, A0, w, frozen, level, full)
        build_seconds += time.perf_counter() - t0
        # Consecutive rounds differ by a few frozen rows: the previous round's prices
        # start a crossover to this one's optimum (large programs; block_lp.solve).
        # Its vertex duals prove stuck jobs too (complementary slackness), if not
        # always all of them: a stuck job missed waits a round, at the same level.
        # Cold rounds: interior duals, which freeze every stuck job at once.
        sol = block_lp.solve(lp, backend=backend, time_limit=max(deadline - time.perf_counter(), 1e-3), interior=True,
                             warm=warm if warm_levels else None)
        solver_seconds += sol.seconds
        rounds += 1
        if not sol.ok:
            status = f"fallback: round {rounds}: {sol.message or sol.status}" + ("" if X_best is not None else " (equal share scaled to fit)")
            logging.getLogger("optsched.policy").warning("%s: %s", policy, status)
            break
        X_best, t_r = sol.X.copy(), sol.z
        X_best[np.flatnonzero(full >= 0), full[full >= 0]] = 1.0  # the fixed jobs (no columns in the program)
        if sol.price is not None and np.any(sol.price > 0):
            warm = (sol.price, t_r)
        elif warm is not None:  # a round set by a job's time row prices no capacity: keep the last prices
            warm = (warm[0], t_r)
        lam = np.maximum(sol.share_dual[U], 0.0)
        # Multipliers scaled to mean 1 (they sum to 1 at the optimum, so the
        # largest is ≥ 1 and every round freezes someone).
        stuck = lam * len(U) / max(lam.sum(), 1e-300) > STUCK_DUAL
        if rounds == 1:
            objective = t_r
            first_bottleneck = [inst.job_ids[m] for m in U[stuck]]
        level[U[stuck]] = t_r * w[U[stuck]]
        frozen[U[stuck]] = True
    X = X_best if X_best is not None else fallback_allocation(inst)
    return Allocation.of(inst, policy, X, status, objective, time.perf_counter() - t_start,
                         explanation={"lp_rounds": rounds, "bottleneck_jobs": first_bottleneck},
                         build_seconds=build_seconds, solver_seconds=solver_seconds)
