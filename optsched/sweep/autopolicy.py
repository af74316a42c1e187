"""The policy ``auto`` simulates with: a schedule of candidate policies over time.

Registered (``optsched.policy.register``) under :data:`NAME`, it receives
``schedule`` — ((start_time, policy), ...) sorted by time — and ``memo`` (a
fresh dict per simulation) through ``policy_options``. The simulator runs it
with ``recompute_every=1``; for a candidate that the simulator would *not*
recompute every round (max-min fairness, ...) it returns the previous
allocation while the active jobs are unchanged and the candidate is the same,
which is exactly when the simulator itself would reuse it (recomputation on
arrivals and completions, ``min_recompute_interval`` 0). So a schedule with a
single policy reproduces that policy's static run (tests/test_sweep_auto.py).
"""

from __future__ import annotations

import bisect

NAME = "_auto_schedule"


def register() -> None:
    from optsched.policy import POLICIES, register as _register

    if NAME not in POLICIES:
        _register(NAME, "optsched.sweep.autopolicy")


def active_policy(schedule, now: float) -> str:
    times = [t for t, _ in schedule]
    i = bisect.bisect_right(times, now + 1e-9) - 1
    return schedule[max(i, 0)][1]


def allocate(inst, policy=None, solver="auto", time_limit=60.0, schedule=(), memo=None, aggregate=True, **options):
    from optsched.sim.policy_step import ClassSolveCache, compute_allocation
    from optsched.sim.stages import PER_ROUND_POLICIES

    memo = {} if memo is None else memo
    cand = active_policy(schedule, float(inst.time))
    last = memo.get("last")
    if cand not in PER_ROUND_POLICIES and last is not None and last[0] == cand and last[1] == inst.job_ids:
        return last[2]
    cache = memo.setdefault(("cache", cand), ClassSolveCache())
    alloc = compute_allocation(inst, cand, solver, time_limit, aggregate, cache=cache, **options)
    memo["last"] = (cand, inst.job_ids, alloc)
    memo.setdefault("used", []).append((float(inst.time), cand))
    return alloc
