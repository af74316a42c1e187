"""The round-based simulation loop (DESIGN.md §6-7).

Each round, in this order (Blox-style stages, each a plain function of state):

    admission  new arrivals (arrival <= now) join the active set — all of them
               (``admission="accept-all"``), or while the GPUs demanded by active
               jobs stay <= ``load_factor`` × cluster GPUs (``"load"``, FIFO;
               the wait counts in the JCT);
    policy     the allocation X is recomputed when jobs arrived or left, but
               not sooner than ``min_recompute_interval`` s after the previous
               recomputation (Gavel: 1,920 s), and at least every
               ``recompute_every`` rounds when set; otherwise the *same*
               Allocation object is reused, so the allocator keeps its
               time-received counters (Gavel semantics);
    allocator  ``Allocator.next_round(active jobs, allocation)`` → Placement
               (``allocator_options``: queue discipline, type order, ...;
               ``queue="gavel"`` is Gavel's own walk, optsched/allocator.py);
    progress   each placed job advances ``rate × (run − overhead)`` steps, rate
               = ``progress_rate(job, gpu_type, n_gpus)`` (default: its
               throughput on that type at its scale factor, × n/s if the
               placement gives it n ≠ s GPUs), overhead = ``restart_overhead``
               when it (re)starts or migrates. A job that finishes mid-round
               completes at that instant and its GPUs stay idle until the round
               ends; the round ends early when every placed job has finished
               (Gavel). Arrivals wait for the next round boundary but their
               JCT counts from their arrival.

Idle stretches (no active job) are skipped in one step. The loop stops when
every job has finished, or when every job of ``window`` has (steady-state
measurement, as Gavel's ``jobs_to_complete``), or at ``max_time``.
Deterministic given the seed (the allocator's tie breaks use it).
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from optsched.model import Cluster, Instance, OptschedError
from optsched.sim.jobs import JobArrays, resolve_jobs
from optsched.sim.policy_step import ClassSolveCache, choose_solver, compute_allocation

ADMISSION = ("accept-all", "load")
ALLOCATOR_OPTIONS = ("queue", "type_order", "work_conserving", "gpus_per_server", "placement_time_limit")


@dataclass(frozen=True)
class RunningJob:
    """What a custom progress-rate function sees about a placed job."""

    job_id: str
    model: str
    scale_factor: int
    gpu_type: str
    n_gpus: int
    throughput: float  # steps/s on gpu_type at its scale factor (0 if it cannot run there)
    steps_done: float
    steps_total: float


ProgressRate = Callable[[RunningJob], float]


@dataclass(frozen=True)
class SimConfig:
    policy: str = "max_min_fairness"
    round_length: float = 360.0
    min_recompute_interval: float = 0.0
    recompute_every: int | None = None
    restart_overhead: float = 0.0
    admission: str = "accept-all"
    load_factor: float = 2.0
    placement: str = "consolidated"
    solver: str = "auto"
    time_limit: float = 60.0
    aggregate: bool = True
    seed: int = 0
    window: tuple[int, int] | None = None  # [start, end) indices in arrival order
    max_time: float | None = None
    skip_unrunnable: bool = False
    policy_options: dict = field(default_factory=dict)
    allocator_options: dict = field(default_factory=dict)  # Allocator keywords: queue, type_order, work_conserving

    def validate(self) -> None:
        if not self.round_length > 0:
            raise OptschedError(f"round_length must be positive, got {self.round_length}")
        if self.admission not in ADMISSION:
            raise OptschedError(f"admission: unknown {self.admission!r} (choose from {', '.join(ADMISSION)})")
        if self.restart_overhead < 0 or self.min_recompute_interval < 0:
            raise OptschedError("restart_overhead and min_recompute_interval must be >= 0")
        if self.recompute_every is not None and self.recompute_every < 1:
            raise OptschedError(f"recompute_every must be >= 1 round, got {self.recompute_every}")
        if self.load_factor <= 0:
            raise OptschedError(f"load_factor must be positive, got {self.load_factor}")
        unknown = sorted(set(self.allocator_options) - set(ALLOCATOR_OPTIONS))
        if unknown:
            raise OptschedError(f"allocator_options: unknown {unknown[0]!r} "
                                f"(choose from {', '.join(ALLOCATOR_OPTIONS)})")


@dataclass
class SimState:
    """Mutable per-job progress (numpy, one slot per job)."""

    steps_done: np.ndarray
    gpu_seconds: np.ndarray
    first_start: np.ndarray
    completion: np.ndarray
    last_run: np.ndarray
    isolated_time: np.ndarray
    preemptions: np.ndarray
    migrations: np.ndarray
    progress_violation: float = 0.0  # max(steps gained − throughput·time) seen; 0 when consistent

    @classmethod
    def empty(cls, n: int) -> "SimState":
        nan = np.full(n, np.nan)
        return cls(np.zeros(n), np.zeros(n), nan.copy(), nan.copy(), nan.copy(), np.zeros(n),
                   np.zeros(n, np.int64), np.zeros(n, np.int64))


def simulate_jobs(
    jobs: JobArrays,
    cluster: Cluster,
    config: SimConfig,
    progress_rate: ProgressRate | None = None,
    on_round: Callable[[dict], None] | None = None,
):
    """Run the loop on resolved jobs; returns (state, rounds list, info dict)."""
    from optsched.allocator import Allocator

    config.validate()
    solver = choose_solver(config.policy, config.solver)
    allocator = Allocator(cluster, placement=config.placement, seed=config.seed, round_length=config.round_length,
                          **config.allocator_options)
    types = jobs.gpu_types
    type_index = {t: j for j, t in enumerate(types)}
    capacity = np.array([cluster.gpus[t] for t in types], dtype=float)
    total_gpus = capacity.sum()
    n = jobs.n
    st = SimState.empty(n)
    index_of = {jid: m for m, jid in enumerate(jobs.job_ids)}
    equal_thr = jobs.throughput @ capacity / total_gpus  # X^equal throughput (Gavel's proportional share)
    equal_thr_floor = np.maximum(equal_thr, 1e-300)  # divisor of the isolated-time credit

    window = None
    if config.window is not None:
        lo, hi = config.window
        window = np.arange(max(lo, 0), min(hi, n))
        if window.size == 0:
            raise OptschedError(f"window [{lo}, {hi}) selects no job of the {n} in the trace")
    window_left = int(window.size) if window is not None else -1
    in_window = np.zeros(n, dtype=bool)
    if window is not None:
        in_window[window] = True

    active: list[int] = []
    waiting: list[int] = []  # arrived, not admitted (load-based admission)
    demand = 0.0
    nxt = 0
    now = float(jobs.arrival[0]) if n else 0.0
    allocation = None
    dirty = True
    last_recompute = -np.inf
    rounds_since = 0
    rounds: list[tuple] = []
    solver_seconds_total = 0.0
    n_recomputes = 0
    wall0 = _time.perf_counter()
    class_cache = ClassSolveCache()  # a recomputation with unchanged job classes reuses the last solve
    view: _ActiveSet | None = None  # arrays of the active set; None when it changed

    while True:
        # --- admission ---
        while nxt < n and jobs.arrival[nxt] <= now:
            waiting.append(nxt)
            nxt += 1
        if waiting:
            if config.admission == "accept-all":
                admitted, waiting = waiting, []
            else:
                admitted = []
                limit = config.load_factor * total_gpus
                while waiting and (demand + jobs.scale_factor[waiting[0]] <= limit or not active and not admitted):
                    m = waiting.pop(0)
                    admitted.append(m)
                    demand += jobs.scale_factor[m]
            if admitted:
                active.extend(admitted)
                view = None
                if config.admission == "accept-all":
                    demand += float(jobs.scale_factor[admitted].sum())
                dirty = True
        if window_left == 0 or (nxt >= n and not active and not waiting):
            break
        if config.max_time is not None and now >= config.max_time:
            break
        if not active:
            now = max(now, float(jobs.arrival[nxt]))  # skip the idle stretch
            continue

        if view is None:
            view = _ActiveSet.of(jobs, active)
        # --- policy ---
        recompute = allocation is None or (
            dirty and now - last_recompute >= config.min_recompute_interval
        ) or (config.recompute_every is not None and rounds_since >= config.recompute_every)
        solve_s = 0.0
        inst = _instance(view, jobs, st, capacity, now)
        if recompute:
            t0 = _time.perf_counter()
            allocation = compute_allocation(
                inst, config.policy, solver, config.time_limit, config.aggregate, cache=class_cache,
                **config.policy_options,
            )
            solve_s = _time.perf_counter() - t0
            solver_seconds_total += solve_s
            n_recomputes += 1
            last_recompute, dirty, rounds_since = now, False, 0

        # --- allocator / placement ---
        placement = allocator.next_round(inst, allocation)
        sched_m, sched_t, sched_n = _scheduled(placement.assignments, index_of, type_index)
        sm = np.asarray(sched_m, dtype=np.int64)
        stype = np.asarray(sched_t, dtype=np.int64)
        sn = np.asarray(sched_n, dtype=float)
        running_jobs = len(set(sched_m))
        one_row_per_job = running_jobs == len(sched_m)  # then sm has no repeats and a[sm] += x adds once each

        # --- progress ---
        if config.restart_overhead:
            restarted = set(placement.started) | set(placement.migrated)
            overhead = np.array([config.restart_overhead if jobs.job_ids[m] in restarted else 0.0 for m in sm])
        else:
            overhead = np.zeros(len(sm))
        solo_rate = jobs.throughput[sm, stype] * sn / jobs.scale_factor[sm]  # throughput × n/s
        if progress_rate is None:
            rate = solo_rate
        else:
            rate = np.array([
                progress_rate(RunningJob(jobs.job_ids[m], str(jobs.models[m]), int(jobs.scale_factor[m]), types[t],
                                         int(c), float(jobs.throughput[m, t]), float(st.steps_done[m]),
                                         float(jobs.steps_total[m])))
                for m, t, c in zip(sm, stype, sn)
            ], dtype=float)
        remaining = np.maximum(jobs.steps_total[sm] - st.steps_done[sm], 0.0)
        with np.errstate(divide="ignore"):
            need = overhead + np.where(rate > 0, remaining / np.maximum(rate, 1e-300), np.inf)
        run = np.minimum(need, config.round_length)
        finished = need <= config.round_length
        duration = float(run.max()) if run.size and finished.all() else config.round_length
        gained = rate * np.maximum(run - overhead, 0.0)
        # Invariant: progress never exceeds throughput × time.
        if progress_rate is None and sm.size:
            st.progress_violation = max(st.progress_violation, float((gained - solo_rate * run).max()))
        any_finished = bool(finished.any())
        _add(st.steps_done, sm, gained, one_row_per_job)
        if any_finished:
            st.steps_done[sm[finished]] = jobs.steps_total[sm[finished]]  # no float drift at completion
        _add(st.gpu_seconds, sm, sn * run, one_row_per_job)
        _add(st.isolated_time, sm, gained / equal_thr_floor[sm], one_row_per_job)
        first = np.isnan(st.first_start[sm])
        st.first_start[sm[first]] = now
        st.last_run[sm] = now + run
        for jid in placement.preempted:
            st.preemptions[index_of[jid]] += 1
        for jid in placement.migrated:
            st.migrations[index_of[jid]] += 1
        for i in np.flatnonzero(run < config.round_length).tolist():
            allocator.record(jobs.job_ids[sm[i]], types[stype[i]], float(run[i]))
        done = np.unique(sm[finished]) if any_finished else sm[:0]
        if done.size:
            for m, r in zip(sm[finished], run[finished]):
                st.completion[m] = now + r
            allocator.remove([jobs.job_ids[m] for m in done])
            done_set = set(done.tolist())
            active = [m for m in active if m not in done_set]
            view = None
            demand -= float(jobs.scale_factor[done].sum())
            if window is not None:
                window_left -= int(in_window[done].sum())
            dirty = True

        busy = np.bincount(stype, weights=sn * run, minlength=len(types))
        record = (
            now, duration, inst.n, running_jobs, len(waiting), bool(recompute), solve_s,
            len(placement.started), len(placement.preempted), len(placement.migrated), int(done.size),
            *(busy / np.maximum(capacity * duration, 1e-300)),
        )
        rounds.append(record)
        if on_round is not None:
            on_round({"time": now + duration, "completed": int(np.isfinite(st.completion).sum()), "active": len(active),
                      "solver_seconds": solver_seconds_total, "jobs": n})
        now += duration
        rounds_since += 1

    info = {
        "wall_seconds": _time.perf_counter() - wall0,
        "solver_seconds": solver_seconds_total,
        "recomputations": n_recomputes,
        "solver": solver,
        "end_time": now,
        "unfinished": int(np.isnan(st.completion).sum()),
    }
    return st, rounds, info


@dataclass(frozen=True)
class _ActiveSet:
    """The active jobs' arrays that change only when the set does (admission or
    completion), built once per set instead of once per round. The allocator
    also sees the same ``job_ids`` tuple round after round."""

    index: np.ndarray
    job_ids: tuple[str, ...]
    throughput: np.ndarray
    scale_factor: np.ndarray
    weight: np.ndarray
    arrival: np.ndarray

    @classmethod
    def of(cls, jobs: JobArrays, active: list[int]) -> "_ActiveSet":
        act = np.asarray(active)
        return cls(act, tuple(jobs.job_ids[m] for m in active), jobs.throughput[act], jobs.scale_factor[act],
                   jobs.weight[act], jobs.arrival[act])


def _instance(view: _ActiveSet, jobs: JobArrays, st: SimState, capacity: np.ndarray, now: float) -> Instance:
    act = view.index
    return Instance(
        job_ids=view.job_ids,
        gpu_types=jobs.gpu_types,
        throughput=view.throughput,
        scale_factor=view.scale_factor,
        weight=view.weight,
        capacity=capacity,
        steps_remaining=jobs.steps_total[act] - st.steps_done[act],
        elapsed_time=now - view.arrival,
        attained_service=st.gpu_seconds[act],
        arrival_time=view.arrival,
        time=now,
        isolated_time=st.isolated_time[act],
        last_run_time=st.last_run[act],
    )


def _scheduled(assignments: dict, index_of: dict, type_index: dict) -> tuple[list[int], list[int], list[int]]:
    """(job index, type column, GPU count) for every (job, GPU type) the
    placement uses, in the placement's order (a job normally sits on one type;
    a split job lists its types in the order of its slots)."""
    sched_m, sched_t, sched_n = [], [], []
    for jid, slots in assignments.items():
        if len(slots) == 1:  # the common single-GPU case, kept short: ~30 jobs × 27,000 rounds
            sched_m.append(index_of[jid])
            sched_t.append(type_index[slots[0].gpu_type])
            sched_n.append(1)
            continue
        per_type: dict[str, int] = {}
        for s in slots:
            per_type[s.gpu_type] = per_type.get(s.gpu_type, 0) + 1
        for t, c in per_type.items():
            sched_m.append(index_of[jid])
            sched_t.append(type_index[t])
            sched_n.append(c)
    return sched_m, sched_t, sched_n


def _add(target: np.ndarray, index: np.ndarray, values: np.ndarray, unique: bool) -> None:
    """target[index] += values, repeated indices accumulating (np.add.at); the
    plain fancy += when there are no repeats (the common case, ~5× cheaper)."""
    if unique:
        target[index] += values
    else:
        np.add.at(target, index, values)


ROUND_COLUMNS = ("time", "duration", "active_jobs", "running_jobs", "waiting_jobs", "recomputed", "solver_seconds",
                 "started", "preempted", "migrated", "completed")
