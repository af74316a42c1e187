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
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from optsched.formulations.base import base_lp, fallback_allocation, no_packing, program_weights
from optsched.formulations.max_min_fairness import normalized_throughput
from optsched.model import Allocation, Instance
from optsched.checks import check_flag, check_number
from optsched.solvers import block_backend, block_lp

# A job is stuck when its multiplier, scaled to mean 1 over the unfrozen jobs,
# exceeds STUCK_DUAL. CLARABEL's noise on the multipliers of jobs that can rise
# was seen up to ~3e-7: 1e-3 leaves a wide margin. A stuck job whose multiplier
# is smaller is simply not frozen yet: the next round cannot raise t past it,
# and freezes it then at the same level (one extra LP, same result).
STUCK_DUAL = 1e-3
FREEZE_MARGIN = 1e-6  # relative: a level read off an LP is frozen this much below the solver's (see _lp_round)


# What allocate() imports, loaded (and timed as import_seconds) before its timer: optsched/policy.py.
IMPORTS = ("optsched.solvers.lp", "clarabel", "highspy", "scipy.sparse")


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
    max_rounds, warm_levels = check_water_fill_options(max_rounds, warm_levels)
    A0 = normalized_throughput(inst, agnostic) * inst.weight[:, None]  # unweighted share
    weights = weights or (lambda frozen: inst.weight)
    return water_fill(inst, policy, A0, weights, solver, time_limit, max_rounds, warm_levels)


def check_water_fill_options(max_rounds, warm_levels) -> tuple[int | None, bool]:
    """``max_rounds``: None (until every job is frozen) or a whole number >= 1; ``warm_levels``: a flag."""
    return (check_number("max_rounds", max_rounds, 1, whole=True, none=True),
            check_flag("warm_levels", warm_levels))


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
    used = np.bincount(full[out], weights=lp.S[out] * pinned_time(A0, level, full)[out], minlength=lp.k)
    return dataclasses.replace(lp, allowed=lp.allowed & ~out[:, None], W=np.maximum(lp.W - used, 0.0),
                               has_row=~out, lower=np.where(out, 0.0, lp.lower))


def pinned_time(A0: np.ndarray, level: np.ndarray, full: np.ndarray) -> np.ndarray:
    """The time a job fixed on type full[m] needs for its level: level / A0[m, full[m]] (≤ 1)."""
    rows = np.flatnonzero(full >= 0)
    time = np.zeros(len(full))
    time[rows] = np.minimum(level[rows] / A0[rows, full[rows]], 1.0)
    return time


def saturated(inst: Instance, A0: np.ndarray, frozen: np.ndarray, level: np.ndarray) -> np.ndarray:
    """For each frozen job whose level is its largest share (all of its time on
    its one best type), that type; -1 for every other job. Their rows admit a
    single point, which leaves an interior-point method no interior: they are
    fixed instead. Jobs with two equally good types stay in the program."""
    A = np.where(inst.available, A0, 0.0)
    order = np.sort(A, axis=1)
    best, second = order[:, -1], (order[:, -2] if A.shape[1] > 1 else np.zeros(len(A)))
    unique = best > second * (1 + 1e-9)
    # Only at the largest share up to rounding: a job even 1e-6 below it may still
    # split its time, and capacity can bind at that scale (measured: pinning within
    # 2e-6 made a round infeasible by 5.5e-8). A pinned job gets the time its level needs.
    at_max = frozen & (level >= best * (1 - 1e-9)) & (best > 0) & unique
    return np.where(at_max, np.argmax(A, axis=1), -1)


def stuck_jobs(lp, sol, U: np.ndarray) -> np.ndarray:
    """Which unfrozen jobs U cannot rise (mask over U): multiplier, scaled to mean 1
    over U (they sum to 1 at the optimum, so the largest is ≥ 1 and every round
    freezes someone), above STUCK_DUAL, and larger than the row's slack
    (complementarity: at an interior optimum one of the two vanishes; an
    inexact iterate leaves noise ~mu/slack on a job that can still rise, seen
    at 2e-6 of the total against a slack of 8e-4 of the level)."""
    lam = np.maximum(sol.share_dual[U], 0.0)
    total = max(lam.sum(), 1e-300)
    A = np.where(lp.allowed[U], lp.A[U], 0.0)
    lower = 0.0 if lp.lower is None else np.asarray(lp.lower, dtype=float)[U]
    slack = (A * sol.X[U]).sum(axis=1) - np.asarray(lp.g, dtype=float)[U] * sol.z - lower
    return (lam * len(U) / total > STUCK_DUAL) & (lam / total > slack / max(abs(sol.z), 1e-300))


@dataclass
class _Fill:
    """The water filling's state between rounds."""

    frozen: np.ndarray
    level: np.ndarray
    X: np.ndarray | None = None  # the last round's optimal allocation
    objective: float = float("nan")  # the first round's level (max-min's objective)
    bottleneck: list = field(default_factory=list)  # the jobs stuck in the first round
    rounds: int = 0
    event_rounds: int = 0  # rounds certified as saturation events, without an LP
    build_seconds: float = 0.0
    solver_seconds: float = 0.0
    warm: tuple | None = None  # prices and level for the next LP round's crossover
    status: str = "optimal"
    idle: int = 0  # consecutive rounds that froze no job

    def freeze(self, inst, jobs: np.ndarray, levels, t: float) -> None:
        self.rounds += 1
        self.idle = 0 if len(jobs) else self.idle + 1
        if self.rounds == 1:
            self.objective, self.bottleneck = t, [inst.job_ids[m] for m in jobs]
        self.frozen[jobs], self.level[jobs] = True, levels


MAX_IDLE_ROUNDS = 5


def water_fill(inst, policy, A0, weights, solver, time_limit, max_rounds=None, warm_levels=True) -> Allocation:
    """``warm_levels=False`` solves every round cold (the IPM with interior duals): the
    same leximin shares, for measuring what the warm rounds save."""
    t_start = time.perf_counter()
    st = _Fill(np.zeros(inst.n, dtype=bool), np.zeros(inst.n))
    deadline = time.perf_counter() + time_limit
    backend = block_backend(solver, has_pairs=False)
    # Saturation events (see below) on large programs; after an event run stops,
    # the next round is an LP.
    use_events = events = warm_levels and inst.n * inst.k >= block_lp.WARM_ENTRIES
    exact_test = True  # the event run's exact test pays except right after a round where capacity bound
    while not st.frozen.all():
        if max_rounds is not None and st.rounds >= max_rounds:
            st.status = f"stopped after max_rounds={max_rounds} ({int((~st.frozen).sum())} jobs not frozen)"
            break
        if events:
            events = False
            budget = inst.n if max_rounds is None else max_rounds - st.rounds
            if _event_run(st, inst, A0, weights, budget, exact_test, deadline):
                continue
        sol = _lp_round(st, inst, A0, weights, backend, deadline, warm_levels)
        if sol is None:
            if not st.status.startswith("fallback"):  # (policy.finish_procedure logs the fallbacks)
                logging.getLogger("optsched.policy").warning("%s: %s", policy, st.status)
            break
        events = use_events
        exact_test = not (sol.price is not None and np.any(sol.price > 1e-9 * abs(sol.z)))
    X = st.X if st.X is not None else fallback_allocation(inst)
    return Allocation.of(inst, policy, X, st.status, st.objective, time.perf_counter() - t_start,
                         explanation={"lp_rounds": st.rounds, "event_rounds": st.event_rounds,
                                      "bottleneck_jobs": st.bottleneck},
                         build_seconds=st.build_seconds, solver_seconds=st.solver_seconds)


def _event_run(st: _Fill, inst, A0, weights, budget: int, exact_test: bool, deadline: float) -> bool:
    """Apply the certified saturation events from st on; whether there were any."""
    t0 = time.perf_counter()
    ev = saturation_events(inst, A0, weights, st.frozen, st.level, budget, exact_test, max(deadline - t0, 1e-3))
    st.solver_seconds += time.perf_counter() - t0
    if ev.price is not None:  # the prices of the demands that did not fit: near the next LP round's
        st.warm = (ev.price, ev.t[-1] if ev.t else (st.warm[1] if st.warm else 0.0))
    for m, lv, t in zip(ev.jobs, ev.levels, ev.t):
        st.freeze(inst, np.array([m]), lv, t)
    st.event_rounds += len(ev.jobs)
    if ev.jobs:
        st.X = ev.X
    return bool(ev.jobs)


def _lp_round(st: _Fill, inst, A0, weights, backend: str, deadline: float, warm_levels: bool):
    """One round solved as an LP; its solution, or None (st.status says why)."""
    U = np.flatnonzero(~st.frozen)
    w = np.asarray(weights(st.frozen), dtype=float)
    wu, unit = program_weights(w[U])  # the round's t is unit × the reported level (formulations.base)
    w = w / unit
    w[U] = wu
    t0 = time.perf_counter()
    full = saturated(inst, A0, st.frozen, st.level)
    lp = round_lp(inst, A0, w, st.frozen, st.level, full)
    st.build_seconds += time.perf_counter() - t0
    # Consecutive rounds differ by a few frozen rows: the previous round's prices
    # start a crossover to this one's optimum (large programs; block_lp.solve).
    # Its vertex duals prove stuck jobs too (complementary slackness), if not
    # always all of them: a stuck job missed waits a round, at the same level.
    # Cold rounds: interior duals, which freeze every stuck job at once.
    warm = (st.warm[0] * unit, st.warm[1] * unit) if warm_levels and st.warm is not None else None
    sol = block_lp.solve(lp, backend=backend, time_limit=max(deadline - time.perf_counter(), 1e-3), interior=True,
                         warm=warm)
    st.solver_seconds += sol.seconds
    if sol.ok and sol.backend not in CERTIFIED and not _levels_fit(st, inst, A0, U[stuck_jobs(lp, sol, U)],
                                                                    frozen_levels(inst, A0, sol.z * w)):
        # An interior solver "solved" the round to its tolerance but the levels it gives
        # do not fit (measured: CLARABEL 1.4e-5 high on a badly scaled round): an exact vertex.
        sol = block_lp.solve(lp, backend="highs-simplex", time_limit=max(deadline - time.perf_counter(), 1e-3))
        st.solver_seconds += sol.seconds
    if not sol.ok:
        st.status = f"fallback: round {st.rounds + 1}: {sol.message or sol.status}" + (
            "" if st.X is not None else " (equal share scaled to fit)")
        return None
    st.X = sol.X.copy()
    fixed = np.flatnonzero(full >= 0)  # the fixed jobs (no columns in the program)
    st.X[fixed, full[fixed]] = pinned_time(A0, st.level, full)[fixed]
    if sol.price is not None and np.any(sol.price > 0):
        st.warm = (sol.price / unit, sol.z / unit)  # (kept in the weights' own units)
    elif st.warm is not None:  # a round set by a job's time row prices no capacity: keep the last prices
        st.warm = (st.warm[0], sol.z / unit)
    stuck = U[stuck_jobs(lp, sol, U)]
    # Frozen a hair below the level the solver found: its solution meets the rows only
    # to its tolerance, and levels above what fits make a later round infeasible.
    st.freeze(inst, stuck, frozen_levels(inst, A0, sol.z * w)[stuck], sol.z / unit)
    if st.idle >= MAX_IDLE_ROUNDS:  # a missed stuck job waits one round, never this many: numerics
        st.status = (f"stopped: {st.idle} rounds froze no job (numerical trouble); "
                     f"{int((~st.frozen).sum())} jobs keep the last round's level")
        return None
    return sol


def frozen_levels(inst, A0, level: np.ndarray) -> np.ndarray:
    """The levels to freeze from an LP's: FREEZE_MARGIN lower, except at a job's
    largest share (up to rounding), where the job is pinned to its best type
    (saturated) and a margin would only leave a thin row."""
    best = np.where(inst.available, A0, 0.0).max(axis=1)
    return np.where(level >= best * (1 - 1e-9), np.minimum(level, best), level * (1 - FREEZE_MARGIN))


CERTIFIED = ("uncongested", "ipm+crossover", "prices+crossover")  # certified vertices (solvers/block_exact)


def _levels_fit(st: _Fill, inst, A0, stuck: np.ndarray, levels: np.ndarray) -> bool:
    """Do the frozen levels, with ``stuck`` frozen at ``levels[stuck]``, fit the cluster?"""
    from optsched.solvers import block_exact

    C = np.where(st.frozen, st.level, 0.0)
    C[stuck] = levels[stuck]
    A = np.where(inst.available, A0, 0.0)
    if block_exact.fit_demand(A, inst.scale_factor, inst.capacity, C) is not None:
        return True
    return block_exact.fits(A, inst.scale_factor, inst.capacity, C)[0] is not None


# ---------------------------------------------------------------------------
# Saturation events: many rounds without an LP
# ---------------------------------------------------------------------------
#
# While capacity does not bind, round r's optimum is set by the first
# unfrozen job to run all of its time on its best type: t_r = min_m best_m /
# w_m^(r), and that job alone is stuck (the uncongested certificate of
# solvers/block_exact). Such rounds are *events* that can be simulated in
# O(n) each: freeze the job at its largest share, update the weights, repeat.
# An event is certified when the demands of every round up to it fit the
# capacities: round e needs D^e (frozen jobs at their levels, the others at
# t_e w^(e)), and the running maximum C^e = max_{e' ≤ e} D^e' grows with e, so
# "C^e fits" is monotone and a few checks (the greedy fit, then the exact
# Dantzig–Wolfe test of solvers/block_exact.fits) certify a whole block of
# events; a failed block is bisected. Strict slack matters: the test certifies
# loads below (1 − FIT_MARGIN) W, so every job below its largest share could
# still rise; where capacity binds at t_e other jobs may be stuck too, which
# the LP round decides instead. The first event that fails is an LP round.

EVENT_BLOCK = 32  # events simulated between two checks (the block's C^e are kept for bisection)


@dataclass
class _Events:
    jobs: list  # the frozen jobs, in order
    levels: list  # their levels
    t: list  # each event's round level t_e
    X: np.ndarray | None = None  # an optimal allocation of the last certified event's round
    price: np.ndarray | None = None  # capacity prices of the last exact test (a warm start for the round after)


def saturation_events(inst, A0, weights, frozen, level, budget: int, exact_test: bool, time_limit: float) -> _Events:
    """The rounds from (frozen, level) on that are certified saturation events
    (see above); at most ``budget``. ``exact_test=False`` certifies with the
    greedy fit only (after a round where capacity bound, the exact test rarely pays)."""
    best = np.where(inst.available, A0, 0.0).max(axis=1)
    fz, lv = frozen.copy(), level.copy()
    cmax = np.where(fz, lv, 0.0)
    out, block = _Events([], [], []), []
    checker = _Checker(inst, A0, exact_test, time_limit)
    while len(out.jobs) < budget and not fz.all():
        w = np.asarray(weights(fz), dtype=float)
        cap = np.where(~fz & (w > 0), best / np.where(w > 0, w, 1.0), np.inf)
        m = int(np.argmin(cap))
        t = float(cap[m])
        if not np.isfinite(t):
            break
        np.maximum(cmax, np.where(fz, lv, t * w), out=cmax)
        fz[m], lv[m] = True, t * w[m]
        out.jobs.append(m), out.levels.append(lv[m]), out.t.append(t)
        block.append(cmax.copy())
        if len(out.jobs) > 1 and len(block) < EVENT_BLOCK and not fz.all() and len(out.jobs) < budget:
            continue
        X = checker(cmax)
        if X is not None:
            out.X, block = X, []
            continue
        passed = len(out.jobs) - len(block)  # events certified before this block
        lo, hi = 0, len(block) - 1  # block[hi] fails; find the last that fits
        while lo < hi:
            mid = (lo + hi) // 2
            X = checker(block[mid])
            if X is not None:
                out.X, lo = X, mid + 1
            else:
                hi = mid
        keep = passed + lo
        del out.jobs[keep:], out.levels[keep:], out.t[keep:]
        break
    out.price = checker.binding
    return out


class _Checker:
    """Does demand C fit? The greedy fit first, then (if allowed) the exact
    test of solvers/block_exact.fits, warm-started from the previous test's
    prices. Returns an X or None."""

    def __init__(self, inst, A0, exact_test: bool, time_limit: float):
        self.inst, self.exact_test = inst, exact_test
        self.A = np.where(inst.available, A0, 0.0)
        self.deadline = time.perf_counter() + time_limit
        self.price = self.binding = None

    def __call__(self, C: np.ndarray) -> np.ndarray | None:
        from optsched.solvers import block_exact

        X = block_exact.fit_demand(self.A, self.inst.scale_factor, self.inst.capacity, C)
        if X is not None or not self.exact_test or time.perf_counter() > self.deadline:
            return X
        X, price = block_exact.fits(self.A, self.inst.scale_factor, self.inst.capacity, C, self.price)
        self.price = price if price is not None else self.price
        if X is None and price is not None:
            self.binding = price  # the prices of demands that do not fit: near the LP round's own
        return X
