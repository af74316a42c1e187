"""The scheduling core: the decision of one round, written once for every
executor (docs/architecture.md §1).

A round is admission → observe → decide → allocate → execute → record. The
executors differ only in where jobs run and where progress comes from —
simulated progress (``optsched.sim``), local processes or Ray
(``optsched.runtime``), or a caller that runs the jobs and reports
(``optsched.service`` sessions). Everything that *decides* lives here:

    admission   ``admit``: which arrived jobs join the active set (accept-all,
                or FIFO while the active jobs' GPUs stay within load_factor ×
                the cluster's);
    observe     the executor's refit of goodput models (called by the core,
                for goodput policies, before the instance is built);
    decide      ``RoundCore.decide``: recompute the allocation when jobs
                arrived, left or changed (not sooner than
                ``min_recompute_interval``), every ``recompute_every`` rounds
                (every round for per-round policies), else keep the same
                Allocation object (Gavel: the allocator's counters carry on);
                the solve is ``compute_allocation``: identical-job classes,
                POP partitions, packing (over job types when the simulator
                knows them), Optimus's fixed batch sizes;
    allocate    ``Allocator.next_round`` → the round's Placement (placement
                policy, migration cost, hysteresis are allocator options).

The executor builds the round's ``Instance`` (its view of the active jobs)
and executes the Placement; nothing in ``optsched.runtime`` or
``optsched.service`` calls the policy or ``Allocator.next_round`` itself
(tests/test_one_core.py checks the imports).
"""

from __future__ import annotations

import math
import time as _time
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from optsched.model import Allocation, Instance, OptschedError

ADMISSION = ("accept-all", "load")
DEFAULT_LOAD_FACTOR = 2.0
SYMMETRIC_POLICIES = frozenset({"max_min_fairness", "max_min_fairness_agnostic"})
POLLUX_TIRESIAS_THRESHOLD = 16 * 3600.0  # GPU-seconds, the Pollux simulator's Tiresias (2 queues)


# ---------------------------------------------------------------- the rules


@dataclass(frozen=True)
class RoundRules:
    """What decides a round, whatever the executor: the policy and its solve,
    and when the allocation is recomputed."""

    policy: str = "max_min_fairness"
    solver: str = "auto"
    time_limit: float = 60.0
    aggregate: bool = True  # solve identical jobs as one class (exact; see compute_allocation)
    packing: bool = False  # space sharing (pair throughputs in the instance)
    partitions: int = 1  # POP: solve this many job groups and merge
    min_recompute_interval: float = 0.0  # seconds
    recompute_every: int | None = None  # None: every round for per-round policies, else on changes only
    policy_options: dict = field(default_factory=dict)
    elastic: bool = False  # the jobs include elastic ones (Tiresias gets the Pollux simulator's queues)

    @property
    def every(self) -> int | None:
        from optsched.policy import PER_ROUND_POLICIES

        if self.recompute_every is None and self.policy in PER_ROUND_POLICIES:
            return 1
        return self.recompute_every

    @property
    def goodput_policy(self) -> bool:
        from optsched.policy import GOODPUT_POLICIES

        return self.policy in GOODPUT_POLICIES

    @property
    def fixed_batch(self) -> bool:
        """Optimus: chooses GPU counts, keeps each elastic job's batch size."""
        from optsched.policy import FIXED_BATCH_POLICIES

        return self.policy in FIXED_BATCH_POLICIES

    def options(self) -> dict:
        """The policy's keyword options as the rules imply them."""
        options = dict(self.policy_options)
        if self.packing and self.policy != "gandiva":  # gandiva packs by itself once the instance has pairs
            options.setdefault("packing", True)
        if self.policy == "tiresias" and self.elastic:
            # The Pollux simulator's Tiresias: two queues split at 16 GPU-hours, no starvation promotion.
            options.setdefault("thresholds", (POLLUX_TIRESIAS_THRESHOLD,))
            options.setdefault("starvation_factor", 0.0)
        return options

    def check(self, where: str = "--") -> None:
        """The rules' combinations every executor refuses the same way (``where``: the
        options' prefix, ``--`` for commands, '' for a session's fields)."""
        from optsched.policy import check_packing
        from optsched.pop import check_partitions

        check_partitions(self.policy, self.partitions, self.packing, f"{where}partitions")
        check_packing(self.policy, self.packing, f"{where}packing")


# ---------------------------------------------------------------- admission


def admit(waiting: list, size, demand: float, admission: str, limit: float, idle: bool) -> tuple[list, float]:
    """Admit jobs from the front of ``waiting`` (arrival order): all of them
    (``accept-all``), or FIFO while the demand (GPUs of admitted jobs) stays
    within ``limit`` (``load``; one job always when nothing is active:
    ``idle``). ``size``: GPUs per job, an array indexed by the waiting entries
    or a function of them. Removes the admitted from ``waiting``; returns
    (admitted, new demand)."""
    if not waiting:
        return [], demand
    gpus = size.__getitem__ if isinstance(size, np.ndarray) else size
    if admission == "accept-all":
        admitted = waiting[:]
        del waiting[:]
        total = size[admitted].sum() if isinstance(size, np.ndarray) else sum(gpus(m) for m in admitted)
        return admitted, demand + float(total)
    admitted = []
    while waiting and (demand + gpus(waiting[0]) <= limit or idle and not admitted):
        m = waiting.pop(0)
        admitted.append(m)
        demand += gpus(m)
    return admitted, demand


def check_admission(admission: str, load_factor: float | None, where: str = "--") -> None:
    if admission not in ADMISSION:
        raise OptschedError(f"{where}admission: unknown {admission!r} (choose from {', '.join(ADMISSION)})")
    if load_factor is not None and admission != "load":
        raise OptschedError(f"{where}load-factor: applies only with {where}admission load"
                            if where == "--" else f"{where}load_factor: applies only with admission load")


# ---------------------------------------------------------------- decide


@dataclass
class DecisionState:
    """What the core carries from round to round: the allocation in force and
    the recomputation bookkeeping. Executors keep it (the simulator's
    LoopState extends it; a session stores its fields)."""

    allocation: object = None
    dirty: bool = True  # jobs arrived, left or changed since the last recomputation
    last_recompute: float = -math.inf
    rounds_since: int = 0
    solver_seconds: float = 0.0
    fit_seconds: float = 0.0
    recomputations: int = 0


@dataclass(frozen=True)
class RoundDecision:
    """One round's decision: the allocation in force, the placement, and how it came about."""

    allocation: Allocation
    placement: object  # optsched.allocator.Placement
    recomputed: bool
    solve_seconds: float
    fit_seconds: float


class RoundCore:
    """Decides rounds under ``rules`` with ``allocator`` (an
    ``optsched.allocator.Allocator``; a session swaps in its reloaded one)."""

    def __init__(self, rules: RoundRules, allocator=None):
        self.rules = rules
        self.allocator = allocator
        self.cache = ClassSolveCache()  # a recomputation with unchanged job classes reuses the last solve
        self._options = rules.options()

    def due(self, ds: DecisionState, now: float) -> bool:
        """Is the allocation recomputed this round?"""
        every = self.rules.every
        due = ds.dirty or (every is not None and ds.rounds_since >= every)
        return ds.allocation is None or (due and now - ds.last_recompute >= self.rules.min_recompute_interval)

    def solve(self, inst: Instance, pair_classes=None) -> Allocation:
        r = self.rules
        if r.fixed_batch and "fixed_batch_size" not in inst.extras:
            inst = fixed_batch_instance(inst)
        return compute_allocation(inst, r.policy, r.solver, r.time_limit, r.aggregate and not r.packing,
                                  cache=self.cache, partitions=r.partitions, pair_classes=pair_classes,
                                  **self._options)

    def decide(self, ds: DecisionState, now: float, instance: Callable[[], Instance] | Instance,
               observe: Callable[[], None] | None = None, pair_classes: Callable[[], object] | None = None,
               place: bool = True) -> tuple[Instance, RoundDecision]:
        """One round: observe (goodput policies), recompute when due, place.
        ``instance``: the executor's view of the active jobs (or a function
        building it after observe); ``pair_classes``: packing over job types
        (the simulator's). Updates ``ds``; returns (instance, decision)."""
        fit_s = 0.0
        if observe is not None and self.rules.goodput_policy:
            t0 = _time.perf_counter()
            observe()
            fit_s = _time.perf_counter() - t0
            ds.fit_seconds += fit_s
        recompute = self.due(ds, now)
        inst = instance() if callable(instance) else instance
        solve_s = 0.0
        if recompute:
            t0 = _time.perf_counter()
            ds.allocation = self.solve(inst, pair_classes() if pair_classes is not None else None)
            solve_s = _time.perf_counter() - t0
            ds.solver_seconds += solve_s
            ds.recomputations += 1
            ds.last_recompute, ds.dirty, ds.rounds_since = now, False, 0
        placement = self.allocator.next_round(inst, ds.allocation) if place else None
        ds.rounds_since += 1
        return inst, RoundDecision(ds.allocation, placement, recompute, solve_s, fit_s)


def fixed_batch_instance(inst: Instance) -> Instance:
    """The round's Instance with a fixed batch size per elastic job (formulations/optimus.py's
    ``fixed_batch_size`` and ``remaining_iterations`` extras) when the executor has no
    convergence model of its own (the simulator's stages.optimus_extras has one): the batch the
    job was submitted with (its goodput spec's init_batch_size, within max_batch_size), and the
    iterations left at it: its steps left (steps are iterations at a fixed batch), or 1 for a
    job without a length (equal remaining work, as the formulation assumes)."""
    el = inst.elastic
    if el is None or not el.is_elastic.any():
        return inst
    batch = np.where(el.is_elastic, np.minimum(el.init_batch_size, el.max_batch_size), np.nan)
    left = np.where(el.is_elastic, np.nan_to_num(inst.steps_remaining, nan=1.0), np.nan)
    return replace(inst, extras={**inst.extras, "fixed_batch_size": batch, "remaining_iterations": left})


# ---------------------------------------------------------------- the policy solve


class ClassSolveCache:
    """The last class-merged solve of one run, keyed by everything the
    class program reads. When a recomputation finds the same classes (rows,
    merged scale factors and weights, capacities, policy, solver, options) it
    reuses that solution instead of solving again: the solvers are
    deterministic, so a re-solve of the identical program returns the same
    class fractions, and members are mapped to them exactly as after a solve.
    Only optimal solves are kept (a time-limited one could end elsewhere)."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.allocation: Allocation | None = None
        self.hits = 0


def compute_allocation(
    inst: Instance, policy: str, solver: str, time_limit: float, aggregate: bool,
    cache: ClassSolveCache | None = None, partitions: int = 1, pair_classes=None, **options,
) -> Allocation:
    """The policy's allocation of ``inst``, with two speed-ups that do not change the optimum.

    ``pair_classes`` (optsched.packed_classes.ClassPairs): max_min_fairness with packing over
    every pair of jobs, solved over job types (the per-job path over the instance's candidate
    pairs only when the class program does not apply). ``partitions`` > 1: POP's merged solve
    over job groups (never class-merged: POP splits jobs). ``aggregate``: for policies whose
    program depends only on (throughput row, scale factor, weight) — max-min fairness, aware
    and agnostic (which sees only the row's pattern T > 0) — jobs with equal rows are
    interchangeable, so by convexity the program has an optimal solution that gives them
    equal fractions (average any optimum over permutations of identical jobs): one row per
    class with scale factor count·s (capacity counts every member) and weight count·w (which
    keeps a member's normalized share s/(w·thr_equal)). Gavel's continuous experiment (26
    job types) turns a ~100-job LP into a ≤ 26-row one."""
    from optsched.packed_classes import row_classes
    from optsched.policy import solve_instance

    if pair_classes is not None and inst.n > 1:
        from optsched.packed_classes import solve_packed_classes

        a = solve_packed_classes(inst, pair_classes, time_limit)
        if a is not None:
            return a
    if partitions > 1:
        from optsched.pop import solve_maybe_partitioned

        # POP in-process (workers=1): no process pool forked from a server's threads or a sweep's workers.
        return solve_maybe_partitioned(inst, policy, partitions, solver, time_limit, workers=1, **options)
    if not (aggregate and policy in SYMMETRIC_POLICIES and inst.n > 1):
        return solve_instance(inst, policy, solver, time_limit, **options)
    rows = (inst.throughput > 0).astype(float) if policy.endswith("_agnostic") else inst.throughput
    key = np.column_stack([rows, inst.scale_factor, inst.weight])
    first, inverse, counts = row_classes(key)
    if len(first) == inst.n:
        return solve_instance(inst, policy, solver, time_limit, **options)
    classes = Instance(
        job_ids=tuple(f"class{c}" for c in range(len(first))),
        gpu_types=inst.gpu_types,
        throughput=inst.throughput[first],
        scale_factor=inst.scale_factor[first] * counts,
        weight=inst.weight[first] * counts,
        capacity=inst.capacity,
        steps_remaining=inst.steps_remaining[first],
        elapsed_time=inst.elapsed_time[first],
        attained_service=inst.attained_service[first],
        arrival_time=inst.arrival_time[first],
    )
    cache_key = None
    if cache is not None:
        cache_key = (policy, solver, time_limit, repr(sorted(options.items())), classes.gpu_types,
                     classes.throughput.tobytes(), classes.scale_factor.tobytes(), classes.weight.tobytes(),
                     classes.capacity.tobytes())
    if cache is not None and cache_key == cache.key:
        a = replace(cache.allocation, solve_seconds=0.0, build_seconds=0.0)  # nothing was solved
        cache.hits += 1
    else:
        a = solve_instance(classes, policy, solver, time_limit, **options)
        if cache is not None:
            cache.key, cache.allocation = (cache_key, a) if a.status == "optimal" else (None, None)
    X = a.fractions[inverse]
    return replace(
        a,
        job_ids=inst.job_ids,
        fractions=X,
        effective_throughput=(inst.throughput * X).sum(axis=1),
        explanation={"job_classes": int(len(first)), **{k: v for k, v in a.explanation.items()
                                                        if k in ("gpu_price", "capacity", "capacity_used")}},
    )


def decide_once(inst: Instance, rules: RoundRules, allocator=None, jobs=None):
    """A one-off decision (the service's stateless /v1/solve): the policy's solve of
    ``inst`` under ``rules`` and, with an ``allocator``, its placement of ``jobs``
    (default ``inst``). Returns (allocation, placement or None)."""
    alloc = RoundCore(rules).solve(inst)
    placement = None if allocator is None else allocator.next_round(inst if jobs is None else jobs, alloc)
    return alloc, placement


def warm_up(rules: RoundRules, inst: Instance) -> None:
    """Import and run the policy once (a real executor calls it before its clock
    starts, so imports of the solver stack do not count in the first jobs' JCT)."""
    try:
        compute_allocation(inst, rules.policy, rules.solver, rules.time_limit, False, **rules.options())
    except OptschedError:
        pass


__all__ = ["ADMISSION", "ClassSolveCache", "DecisionState", "RoundCore", "RoundDecision", "RoundRules", "admit",
           "check_admission", "compute_allocation", "decide_once", "fixed_batch_instance", "warm_up"]
