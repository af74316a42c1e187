"""The round-based simulation loop (docs/allocator.md-7, §11): rigid and elastic jobs
in one loop of stages (optsched/sim/stages.py), each round in this order:

    admission  new arrivals (arrival <= now) join the active set — all of them
               (``admission="accept-all"``), or while the GPUs demanded by active
               jobs stay <= ``load_factor`` × cluster GPUs (``"load"``, FIFO;
               the wait counts in the JCT);
    observe    elastic jobs' goodput models are refit from the step times they
               ran at (goodput policies only: pollux, sia);
    policy     (the scheduling core, optsched/core.py, as for every executor)
               the allocation X is recomputed when jobs arrived or left, but
               not sooner than ``min_recompute_interval`` s after the previous
               recomputation (Gavel: 1,920 s), and at least every
               ``recompute_every`` rounds (default: every round for policies
               that read per-round state — pollux, sia, tiresias, las, fifo,
               srtf, gandiva); otherwise the *same* Allocation object is
               reused, so the allocator keeps its time-received counters
               (Gavel semantics);
    allocator  ``Allocator.next_round(active jobs, allocation)`` → Placement
               (``allocator_options``: queue discipline, type order, ...;
               ``queue="gavel"`` is Gavel's own walk, optsched/allocator.py);
               packed pairs share their GPUs (``packing=True``);
    progress   a rigid job advances ``rate × (run − overhead)`` steps, rate =
               ``progress_rate(job)`` (default: its throughput on that type at
               its scale factor, × n/s if it got n ≠ s GPUs; a packed job its
               pair throughput; a multi-GPU job spread over servers the
               table's ``*_unconsolidated`` rate when ``spread_rates`` — Gavel's
               simulator always uses the consolidated rate); an elastic job runs its goodput model
               (optsched/sim/goodput_jobs.py); overhead = ``restart_overhead``
               seconds, paid when a job (re)starts, moves or changes
               configuration (carried into the next round if longer). A job
               that finishes mid-round completes at that instant and its GPUs
               stay idle until the round ends; the round ends early when every
               placed job has finished (Gavel). Arrivals wait for the next
               round boundary but their JCT counts from their arrival.

Idle stretches (no active job) are skipped in one step. The loop stops when
every job has finished, or when every job of ``window`` has (steady-state
measurement, as Gavel's ``jobs_to_complete``), or at the first round boundary
at or after ``max_time`` (as Gavel's simulator: the round under way when
``max_time`` passes runs to its end, and what finishes in it counts).
Deterministic given the seed (the allocator's tie breaks use it).
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from optsched.core import ADMISSION, POLLUX_TIRESIAS_THRESHOLD, RoundCore, RoundRules, check_admission
from optsched.model import Cluster, OptschedError
from optsched.sim.jobs import JobArrays
from optsched.sim.limits import MAX_ROUNDS, check_job_rounds, check_sim_options, default_round_length
from optsched.sim.stages import (
    ROUND_COLUMNS, ActiveSet, LoopState, SimState, admit, allocate, apply_progress, instance, observe, round_record,
    simulated_progress,
)
ALLOCATOR_OPTIONS = ("queue", "type_order", "work_conserving", "gpus_per_server", "placement_time_limit",
                     "migration_cost", "hysteresis")


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
    round_length: float | None = None  # None: 360 s; 60 s (Pollux's and Sia's) when the trace has elastic jobs
    min_recompute_interval: float = 0.0
    recompute_every: int | None = None  # None: 1 for PER_ROUND_POLICIES, else only on arrivals/completions
    restart_overhead: float | str | None = None  # None: 0 for rigid jobs, 30 s (one type) or per application (Sia's types) for elastic ones; "application": per application
    admission: str = "accept-all"
    load_factor: float | None = None  # None: 2.0; given at all, it needs admission="load"
    placement: str = "consolidated"
    solver: str = "auto"
    time_limit: float = 60.0
    aggregate: bool = True
    seed: int = 0
    window: tuple[int, int] | None = None  # [start, end) indices in arrival order
    max_time: float | None = None  # no round starts at or after it (the last one may end past it)
    skip_unrunnable: bool = False
    packing: bool = False  # space sharing with the throughput table's pair throughputs
    max_partners: int = 8  # packing: candidate partners per job
    partitions: int = 1  # POP: each recomputation solves this many job groups (each 1/k of every type) and merges
    spread_rates: bool = False  # True: multi-GPU rigid jobs spread over servers run at the table's *_unconsolidated rate (off: Gavel's model)
    policy_options: dict = field(default_factory=dict)
    loss_threshold: float | None = None  # end a job whose loss is within this relative distance of its final loss (stages.loss_termination)
    allocator_options: dict = field(default_factory=dict)  # Allocator keywords: queue, type_order, work_conserving
    # True: a recomputation at t = 0 does not start min_recompute_interval, as in Gavel's simulator (it
    # tests ``_last_reset_time == 0`` for "never reset", so after its reset at t = 0 the next one is free)
    gavel_zero_reset: bool = False

    def validate(self, elastic: bool = False) -> None:
        """Every option against its documented range (optsched.sim.limits; ``elastic``: the jobs include
        elastic ones, whose rounds are at least 1 s); one-line OptschedError naming the option."""
        if isinstance(self.restart_overhead, str) and self.restart_overhead != "application":
            raise OptschedError(f"--restart-overhead: {self.restart_overhead!r} is not a number of seconds or 'application'")
        self._check_types()
        check_sim_options(self.__dict__, elastic)
        check_admission(self.admission, self.load_factor)
        if not self.time_limit > 0:
            raise OptschedError(f"--time-limit: must be positive, got {self.time_limit:g}")
        if self.loss_threshold is not None and not (0 <= self.loss_threshold < np.inf):
            raise OptschedError(f"--loss-threshold: must be a number >= 0, got {self.loss_threshold:g}")
        from optsched.pop import check_partitions

        check_partitions(self.policy, self.partitions, self.packing, "--partitions")
        if elastic and self.partitions > 1:
            raise OptschedError("--partitions: elastic jobs cannot be partitioned (POP's groups carry no goodput "
                                "models); use it on rigid traces")
        if self.max_partners < 1:
            raise OptschedError(f"max_partners: must be >= 1, got {self.max_partners}")
        if self.window is not None and not (0 <= self.window[0] < self.window[1]):
            raise OptschedError(f"--window: START:END needs 0 <= START < END, got {self.window[0]}:{self.window[1]}")
        unknown = sorted(set(self.allocator_options) - set(ALLOCATOR_OPTIONS))
        if unknown:
            raise OptschedError(f"allocator_options: unknown {unknown[0]!r} "
                                f"(choose from {', '.join(ALLOCATOR_OPTIONS)})")
        check_queue(self.allocator_options)

    def _check_types(self) -> None:
        """What the Python API can pass and the CLI cannot: a string, a float seed, None for a dict."""
        import numbers

        from optsched.checks import check_flag, check_number, is_flag

        for key in ("aggregate", "skip_unrunnable", "packing", "spread_rates", "gavel_zero_reset"):
            check_flag(f"--{key.replace('_', '-')}", getattr(self, key))
        if self.time_limit != float("inf"):  # (inf: no limit)
            check_number("--time-limit", self.time_limit, 0.0, lo_open=True, unit="s")
        check_number("--loss-threshold", self.loss_threshold, 0.0, none=True)
        check_number("--max-time", self.max_time, 0.0, lo_open=True, none=True, unit="s")
        check_number("--recompute-every", self.recompute_every, 1, whole=True, none=True)
        if is_flag(self.seed) or not isinstance(self.seed, numbers.Integral):  # (its range: check_sim_options)
            raise OptschedError(f"--seed: must be a whole number, got {self.seed!r}")
        check_number("--max-partners", self.max_partners, 1, whole=True)
        if self.window is not None:
            w = self.window
            if isinstance(w, (str, bytes)) or not hasattr(w, "__len__") or len(w) != 2:
                raise OptschedError(f"--window: must be (START, END) job indices, got {w!r}")
            for v in w:
                check_number("--window", v, 0, whole=True)
        for key in ("policy_options", "allocator_options"):
            if not isinstance(getattr(self, key), dict):
                raise OptschedError(f"{key}: must be a dict, got {getattr(self, key)!r}")

    def check_policy_option_keys(self) -> None:
        """A key ``policy`` does not take (it failed at the first solve with a TypeError); the CLI's
        --policy-option parser checks its own, for every policy of a comparison."""
        from optsched.policy import unknown_options
        from optsched.policy_options import accepted_options

        try:
            unknown = unknown_options(self.policy, self.policy_options)
        except OptschedError:  # an unknown policy: check_run names it
            return
        if unknown:
            shown = ", ".join(sorted(accepted_options(self.policy))) or "none"
            raise OptschedError(f"--policy-option: unknown key {unknown[0]!r} for policy {self.policy} (it takes: {shown})")

    def resolved_round_length(self, elastic: bool) -> float:
        return self.round_length if self.round_length is not None else default_round_length(elastic)

    def rules(self, elastic: bool) -> RoundRules:
        """The core's rules of a round under this configuration."""
        return RoundRules(self.policy, self.solver, self.time_limit, self.aggregate, self.packing, self.partitions,
                          self.min_recompute_interval, self.recompute_every, dict(self.policy_options), elastic)


def check_queue(allocator_options: dict | None) -> None:
    """The allocator's queue discipline, before any run (the Allocator would refuse it
    only once a run starts, and a sweep would record every run as failed)."""
    from optsched.allocator.walk import QUEUES

    queue = (allocator_options or {}).get("queue")
    if queue is not None and queue not in QUEUES:
        raise OptschedError(f"queue: unknown queue discipline {queue!r} (choose from {', '.join(QUEUES)})")


def restart_seconds(config: SimConfig, jobs: JobArrays, multi_type: bool) -> np.ndarray:
    """Per-job restart overhead (seconds) for the configuration's rule."""
    out = np.zeros(jobs.n)
    ro = config.restart_overhead
    if isinstance(ro, (int, float)):
        out[:] = float(ro)
    if jobs.any_elastic and not isinstance(ro, (int, float)):
        per_app = ro == "application" or multi_type
        for m in np.flatnonzero(jobs.is_elastic).tolist():
            out[m] = jobs.apps[m].restart_seconds if per_app else 30.0
    return out


def _packing_by_type(config: SimConfig, jobs, policy_options: dict):
    """active jobs -> ClassPairs, when max_min_fairness packs rigid jobs from a pair table
    with no option the class program ignores (optsched.packed_classes); else None."""
    if not (config.packing and config.policy == "max_min_fairness" and config.aggregate and config.partitions == 1
            and jobs.pair_table is not None and not jobs.any_elastic and set(policy_options) <= {"packing"}):
        return None
    from optsched.sim.packing import by_job_type

    return by_job_type(jobs)


@dataclass(frozen=True)
class _Run:
    """What one simulation fixes before its first round (the loop's constants)."""

    jobs: JobArrays
    types: tuple
    type_index: dict
    capacity: np.ndarray  # GPUs per type
    server: object  # stages' per-server GPU counts
    index_of: dict  # job id -> row of ``jobs``
    equal_thr_floor: np.ndarray  # divisor of the isolated-time credit
    overhead: np.ndarray  # restart seconds per job
    round_length: float
    in_window: np.ndarray  # bool per job: counted by ``--window``
    price: np.ndarray | None  # $/GPU-hour per type (cluster.price_per_hour; nan where not given)

    @classmethod
    def of(cls, jobs: JobArrays, cluster: Cluster, config: SimConfig, in_window: np.ndarray) -> "_Run":
        from optsched.sim.jobs import server_gpus

        types = jobs.gpu_types
        capacity = np.array([cluster.gpus[t] for t in types], dtype=float)
        equal_thr = jobs.throughput @ capacity / capacity.sum()  # X^equal throughput (Gavel's proportional share)
        return cls(jobs, types, {t: j for j, t in enumerate(types)}, capacity, server_gpus(cluster, types),
                   {jid: m for m, jid in enumerate(jobs.job_ids)}, np.maximum(equal_thr, 1e-300),
                   restart_seconds(config, jobs, len(types) > 1), config.resolved_round_length(jobs.any_elastic),
                   in_window, None if cluster.price_per_hour is None
                   else np.array([cluster.price_per_hour.get(t, np.nan) for t in types], dtype=float))


def _window(config: SimConfig, n: int) -> np.ndarray | None:
    """The jobs ``--window`` [lo, hi) counts, or None for all."""
    if config.window is None:
        return None
    lo, hi = config.window
    window = np.arange(max(lo, 0), min(hi, n))
    if window.size == 0:
        raise OptschedError(f"--window: [{lo}, {hi}) selects no job of the {n} in the trace")
    return window


def _execute(run: _Run, ls: LoopState, st: SimState, allocator, plan, progress_rate, resources):
    """Execution and completion of one round: (progress, duration, finished job rows)."""
    jobs, types = run.jobs, run.types
    speed = resources.speeds(plan, ls.allocation, jobs.job_ids) if resources is not None else None
    prog = simulated_progress(plan, jobs, st, run.round_length, run.overhead, run.server, progress_rate, speed)
    duration = float(prog.run.max()) if prog.run.size and prog.finished.all() else run.round_length
    done = apply_progress(plan, prog, jobs, st, ls.now, run.equal_thr_floor, run.round_length)
    act = np.asarray(ls.active)
    st.config[act[~np.isin(act, plan.m)]] = -1  # not running this round
    for jid in plan.preempted:
        st.preemptions[run.index_of[jid]] += 1
    for jid in plan.migrated:
        st.migrations[run.index_of[jid]] += 1
    for i in np.flatnonzero(prog.run < run.round_length).tolist():
        allocator.record(jobs.job_ids[plan.m[i]], types[plan.col[i]], float(prog.run[i]))
    if done.size:
        allocator.remove([jobs.job_ids[m] for m in done])
        done_set = set(done.tolist())
        ls.active = [m for m in ls.active if m not in done_set]
        ls.view = None
        ls.demand -= float(jobs.scale_factor[done].sum())
        if ls.window_left >= 0:
            ls.window_left -= int(run.in_window[done].sum())
        ls.dirty = True
    return prog, duration, done


def simulate_jobs(
    jobs: JobArrays,
    cluster: Cluster,
    config: SimConfig,
    progress_rate: ProgressRate | None = None,
    on_round: Callable[[dict], None] | None = None,
    features=None,
    resources=None,
):
    """Run the loop on resolved jobs; returns (state, rounds list, info dict).
    ``features``: per-job predictor features aligned with ``jobs`` (stages.instance);
    ``resources``: jobs' CPU/memory profiles (stages.ResourceProfiles)."""
    from optsched.allocator import Allocator

    config.validate(jobs.any_elastic)
    check_job_rounds(jobs, cluster, config)  # before the first round: a run over the bound is refused, not started
    n = jobs.n
    window = _window(config, n)
    in_window = np.zeros(n, dtype=bool)
    if window is not None:
        in_window[window] = True
    run = _Run.of(jobs, cluster, config, in_window)
    allocator = Allocator(cluster, placement=config.placement, seed=config.seed, round_length=run.round_length,
                          **config.allocator_options)
    core = RoundCore(config.rules(jobs.any_elastic), allocator)
    total_gpus = run.capacity.sum()
    goodput_policy = core.rules.goodput_policy
    fixed_batch = core.rules.fixed_batch  # chooses GPU counts, keeps each job's batch size
    st = SimState.empty(jobs, goodput_policy and not fixed_batch)
    ls = LoopState(now=float(jobs.arrival[0]) if n else 0.0)
    ls.window_left = int(window.size) if window is not None else -1

    rounds: list[tuple] = []
    wall0 = _time.perf_counter()
    by_type = _packing_by_type(config, jobs, core.rules.options())  # max-min packing over every pair, per job type
    observe_fn = (lambda: observe(st, ls.active)) if jobs.any_elastic else None
    pair_fn = (lambda: by_type(ls.active)) if by_type is not None else None

    while True:
        # --- admission ---
        admit(ls, jobs, config.admission, 2.0 if config.load_factor is None else config.load_factor, total_gpus)
        if ls.window_left == 0 or (ls.next_arrival >= n and not ls.active and not ls.waiting):
            break
        if config.max_time is not None and ls.now >= config.max_time:
            break
        if not ls.active:
            ls.now = max(ls.now, float(jobs.arrival[ls.next_arrival]))  # skip the idle stretch
            continue
        if ls.stalled >= STALL_ROUNDS and ls.next_arrival >= n:  # nothing can change any more: say so now
            raise OptschedError(f"simulate: no job progressed in {ls.stalled:,} rounds (t = {ls.now:,.0f} s, "
                                f"{len(ls.active):,} job(s) unfinished, no arrivals left): {STOPPED}")
        if len(rounds) >= MAX_ROUNDS:  # the up-front bound assumes progress; a policy or rate giving none loops
            raise OptschedError(f"simulate: the run reached the limit of {MAX_ROUNDS:,} rounds at t = {ls.now:,.0f} s "
                                f"with {len(ls.active):,} job(s) unfinished: {STOPPED}")
        if ls.view is None:
            ls.view = ActiveSet.of(jobs, ls.active, config.packing, config.max_partners)

        # --- the core: observe (goodput refit), policy, allocator / placement ---
        inst, d = core.decide(
            ls, ls.now,
            lambda: instance(ls.view, jobs, st, run.capacity, ls.now, run.overhead, run.server, goodput_policy,
                             fixed_batch=fixed_batch, features=features, resources=resources, price=run.price),
            observe=observe_fn, pair_classes=pair_fn)
        if config.gavel_zero_reset and d.recomputed and ls.now == 0.0:
            ls.last_recompute = -np.inf

        # --- execution and completion ---
        plan = allocate(d.placement, ls.allocation, jobs, st, run.index_of, run.type_index)
        prog, duration, done = _execute(run, ls, st, allocator, plan, progress_rate, resources)
        ls.stalled = 0 if done.size or np.any(prog.gained > 0) else ls.stalled + 1

        # --- metrics ---
        rounds.append(round_record(ls, plan, prog, inst.n, duration, d.recomputed, d.solve_seconds, d.fit_seconds,
                                   int(done.size), run.capacity))
        if on_round is not None:
            # "live": the loop's state as it stands, for in-process look-ahead (optsched.sweep.auto's fork mode);
            # "decision": the core's (placement, started / preempted / migrated) for executors' comparisons
            on_round({"time": ls.now + duration, "completed": int(np.isfinite(st.completion).sum()),
                      "active": len(ls.active), "solver_seconds": ls.solver_seconds, "jobs": n,
                      "live": (run, st), "decision": d, "start": ls.now, "duration": duration})
        ls.now += duration

    info = {
        "wall_seconds": _time.perf_counter() - wall0,
        "solver_seconds": ls.solver_seconds,
        "fit_seconds": ls.fit_seconds,
        "recomputations": ls.recomputations,
        "solver": config.solver,  # "auto": optsched.policy picks the backend per problem
        "round_length": run.round_length,
        "end_time": ls.now,
        "unfinished": int(np.isnan(st.completion).sum()),
    }
    return st, rounds, info


# Consecutive rounds without any progress or completion, with no arrival left, after which a
# run is stuck for good (it used to take the 100,000-round limit, ~45 s, to say so).
STALL_ROUNDS = 1000
STOPPED = "they stopped progressing (a policy that leaves them without GPUs, or a progress_rate of 0)"

__all__ = ["ROUND_COLUMNS", "RunningJob", "SimConfig", "SimState", "simulate_jobs"]
