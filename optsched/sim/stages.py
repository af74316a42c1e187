"""The simulator's stages of one scheduling round (docs/architecture.md §1):
its job arrays, its progress model and its bookkeeping. The decision of a round
— admission, recomputation rules, the policy solve, the allocator — is the
scheduling core's (optsched/core.py), which the runtime and the service's
sessions call too; the stages here feed it the simulator's view:

    admit      arrivals join the active set (core.admit: accept-all, or
               load-based FIFO);
    observe    goodput models of elastic jobs are refit from what they ran at;
    instance   the round's Instance of the active jobs (arrays, built once
               per active set: ActiveSet);
    allocate   the core's Placement as this round's Plan: which jobs run, on
               which type, how many GPUs and servers, who shares GPUs
               (packed pairs), who (re)starts;
    progress   the execution stage — the only one that differs between
               simulated and real execution: ``simulated_progress`` advances
               rigid jobs by throughput × time (packed pairs at their pair
               throughputs) and elastic jobs by goodput, and says when each
               finished;
    complete / record
               bookkeeping and the round's metrics row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from optsched.core import DecisionState
from optsched.core import admit as admit_jobs
from optsched.model import Instance, OptschedError
from optsched.policy import PER_ROUND_POLICIES  # noqa: F401  (re-decided every round; one list for every executor)
from optsched.sim.jobs import JobArrays


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
    restarts: np.ndarray  # (re)starts after the first start
    overhead_left: np.ndarray  # restart seconds still to pay before progress
    config: np.ndarray  # (n, 3) int: (type column, GPUs, servers) it runs at; -1 when not running
    goodput: dict = field(default_factory=dict)  # job index -> GoodputJob (elastic jobs)
    progress_violation: float = 0.0  # max(steps gained − throughput·time) seen; 0 when consistent

    @classmethod
    def empty(cls, jobs: JobArrays, co_adapt: bool) -> "SimState":
        from optsched.sim.goodput_jobs import new_goodput_job

        n = jobs.n
        nan = np.full(n, np.nan)
        goodput = {}
        if jobs.any_elastic:
            for m in np.flatnonzero(jobs.is_elastic).tolist():
                goodput[m] = new_goodput_job(jobs.apps[m], jobs.batch_size[m], co_adapt)
        return cls(np.zeros(n), np.zeros(n), nan.copy(), nan.copy(), nan.copy(), np.zeros(n),
                   np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n),
                   np.full((n, 3), -1, dtype=np.int64), goodput)


@dataclass
class LoopState(DecisionState):
    """What the loop carries from round to round besides per-job progress (the
    core's DecisionState: allocation in force, recomputation bookkeeping)."""

    now: float = 0.0
    active: list = field(default_factory=list)
    waiting: list = field(default_factory=list)  # arrived, not admitted (load-based admission)
    next_arrival: int = 0
    demand: float = 0.0
    view: "ActiveSet | None" = None
    window_left: int = -1
    stalled: int = 0  # consecutive rounds in which no job progressed or finished


@dataclass(frozen=True)
class ActiveSet:
    """The active jobs' arrays that change only when the set does (admission or
    completion), built once per set instead of once per round. The allocator
    also sees the same ``job_ids`` tuple round after round."""

    index: np.ndarray
    job_ids: tuple[str, ...]
    throughput: np.ndarray
    scale_factor: np.ndarray
    weight: np.ndarray
    arrival: np.ndarray
    pairs: np.ndarray
    pair_throughput: np.ndarray

    @classmethod
    def of(cls, jobs: JobArrays, active: list[int], packing: bool, max_partners: int) -> "ActiveSet":
        from optsched.sim.packing import candidate_pairs

        act = np.asarray(active)
        if packing:
            pairs, rates = candidate_pairs(jobs, act, max_partners)
        else:
            pairs, rates = np.zeros((0, 2), dtype=int), np.zeros((0, len(jobs.gpu_types), 2))
        return cls(act, tuple(jobs.job_ids[m] for m in active), jobs.throughput[act], jobs.scale_factor[act],
                   jobs.weight[act], jobs.arrival[act], pairs, rates)


@dataclass(frozen=True)
class Plan:
    """This round's units, one row per (job, GPU type) it runs on."""

    m: np.ndarray  # job index
    col: np.ndarray  # GPU type column
    gpus: np.ndarray  # GPUs (float)
    servers: np.ndarray  # servers it spans (int)
    partner: np.ndarray  # job index of its packing partner, -1 when alone
    restarted: np.ndarray  # bool: pays the restart overhead this round
    running_jobs: int = 0  # distinct jobs placed
    started: tuple = ()
    preempted: tuple = ()
    migrated: tuple = ()


# ---------------------------------------------------------------- loss-based termination (Blox)


def termination_fractions(trace, threshold: float, elastic=None, where_flag: str = "--loss-threshold") -> dict:
    """Job id -> the fraction of its work after which its loss is within relative
    ``threshold`` of its final loss (optsched/predict/convergence.py; at least
    1e-6, never above 1), for the trace's jobs with a convergence profile. A trace
    without any profile, or a profile on an elastic job (``elastic``: job id ->
    bool), is refused, one line. Every executor ends jobs by this rule."""
    from optsched.predict.convergence import LOSS_COLUMNS, profiles_from_columns, termination_step

    where = f"{trace.format} trace {trace.source}".strip()
    if not all(c in trace.jobs for c in LOSS_COLUMNS):
        raise OptschedError(f"{where_flag}: the {where} has no convergence profiles (columns "
                            f"{', '.join(LOSS_COLUMNS)})")
    profiles = dict(zip(trace.jobs["job_id"], profiles_from_columns(trace.jobs, where)))
    out = {}
    for jid, prof in profiles.items():
        if prof is None:
            continue
        if elastic is not None and elastic.get(jid):
            raise OptschedError(f"{where_flag}: job {jid!r} is elastic (runs to an epoch count); loss-based "
                                "termination applies to jobs with a length")
        out[jid] = min(max(termination_step(prof, 1.0, threshold), 1e-6), 1.0)
    if not out:
        raise OptschedError(f"{where_flag}: no job of the {where} has a convergence profile")
    return out


def loss_termination(jobs: JobArrays, trace, threshold: float) -> tuple[JobArrays, dict]:
    """Jobs whose trace row carries a convergence profile (optsched/predict/
    convergence.py ``LOSS_COLUMNS``) end when their loss is within relative
    ``threshold`` of their final loss: their work becomes the termination step
    (a fraction of their requested work; a job is never lengthened, and keeps
    at least 1e-6 of its work). Other jobs run to their length. Returns the
    jobs and a report for the summary. Elastic jobs (no fixed length) and a
    trace without any profile are refused, one line."""
    from dataclasses import replace

    elastic = ({jid: bool(e) for jid, e in zip(jobs.job_ids, jobs.is_elastic)} if jobs.is_elastic is not None
               else None)
    frac = termination_fractions(trace, threshold, elastic)
    steps = jobs.steps_total.copy()
    cut = 0
    for m, jid in enumerate(jobs.job_ids):
        f = frac.get(jid)
        if f is not None and f < 1.0:
            steps[m] = jobs.steps_total[m] * f
            cut += 1
    total = float(jobs.steps_total.sum())
    report = {"loss_threshold": float(threshold), "loss_terminated_jobs": cut,
              "loss_work_fraction": float(steps.sum() / total) if total > 0 else 1.0}
    return replace(jobs, steps_total=steps), report


# ---------------------------------------------------------------- admit


def admit(ls: LoopState, jobs: JobArrays, admission: str, load_factor: float, total_gpus: float) -> None:
    while ls.next_arrival < jobs.n and jobs.arrival[ls.next_arrival] <= ls.now:
        ls.waiting.append(ls.next_arrival)
        ls.next_arrival += 1
    if not ls.waiting:
        return
    admitted, ls.demand = admit_jobs(ls.waiting, jobs.scale_factor, ls.demand, admission, load_factor * total_gpus,
                                     not ls.active)
    if admitted:
        ls.active.extend(admitted)
        ls.view = None
        ls.dirty = True


# ---------------------------------------------------------------- observe


def observe(st: SimState, active: list[int]) -> None:
    """Refit the goodput models of active elastic jobs with new observations."""
    from optsched.sim.goodput_jobs import refit

    refit([st.goodput[m] for m in active if m in st.goodput])


# ---------------------------------------------------------------- decide


# Policies that predict durations (optsched.predict): the simulator gives them the
# trace's per-job predictor features in Instance.extras["features"].
PREDICTION_POLICIES = ("lucid", "lucid_ageing", "qssf", "allox")


def instance(view: ActiveSet, jobs: JobArrays, st: SimState, capacity: np.ndarray, now: float,
             restart_seconds: np.ndarray, server: np.ndarray, goodput_policy: bool, *,
             fixed_batch: bool = False, features=None, resources: ResourceProfiles | None = None,
             price: np.ndarray | None = None) -> Instance:
    """The round's Instance of the active jobs. ``goodput_policy``: elastic
    jobs carry their goodput models (ElasticInfo); ``fixed_batch`` (optimus):
    also their fixed batch sizes and remaining iterations (``optimus_extras``);
    ``features``: every job's predictor features (a table aligned with
    ``jobs``), the active rows go to ``extras["features"]``."""
    act = view.index
    elastic = None
    extras: dict = {}
    if features is not None:
        extras["features"] = features.iloc[act].reset_index(drop=True)
    if resources is not None:
        extras.update(resources.extras(act))
    if goodput_policy and jobs.any_elastic:
        from optsched.sim.goodput_jobs import elastic_info

        ml = act.tolist()
        elastic = elastic_info([st.goodput.get(m) for m in ml], [jobs.apps[m] for m in ml], jobs.is_elastic[act],
                               [tuple(c) if c[0] >= 0 else None for c in st.config[act].tolist()],
                               np.maximum(st.restarts[act], 0), restart_seconds[act],
                               jobs.gpu_types, server)
        if fixed_batch:
            elastic, extras = optimus_extras(elastic, act, jobs, st)
    return Instance(
        job_ids=view.job_ids,
        gpu_types=jobs.gpu_types,
        throughput=view.throughput,
        scale_factor=view.scale_factor,
        weight=view.weight,
        capacity=capacity,
        steps_remaining=np.where(jobs.is_elastic[act], np.nan, jobs.steps_total[act] - st.steps_done[act])
        if jobs.any_elastic else jobs.steps_total[act] - st.steps_done[act],
        elapsed_time=now - view.arrival,
        attained_service=st.gpu_seconds[act],
        arrival_time=view.arrival,
        time=now,
        isolated_time=st.isolated_time[act],
        last_run_time=st.last_run[act],
        pairs=view.pairs,
        pair_throughput=view.pair_throughput,
        elastic=elastic,
        price=price,
        extras={"current_type": st.config[act, 0], **extras},  # the column each job runs on (-1: waiting); sticky fifo
    )


# (id(application), batch size) -> (the application, epoch progress targets, statistical gain per
# epoch). A cache across simulations in one process: it holds the application itself, so its id
# cannot be reused by another application while the entry lives (an id alone once returned
# another application's numbers), and it is cleared past MAX_GAINS entries.
_GAINS: dict = {}
MAX_GAINS = 4096


def remaining_iterations(job, app, batch: float) -> float:
    """Iterations an elastic job still needs at a fixed batch size: the
    progress left in each remaining epoch divided by the statistical gain per
    iteration at that batch size in that epoch (the application's gradient
    statistics) — the convergence model the Pollux simulator gives Optimus."""
    from optsched.goodput.model import statistical_gain

    key = (id(app), float(batch))
    hit = _GAINS.get(key)
    if hit is None or hit[0] is not app:
        E = app.max_epochs
        targets = np.array([app.progress_target(k) for k in range(E + 1)])
        stats = np.array([app.grad_stats(batch, k) for k in range(E)])
        if len(_GAINS) >= MAX_GAINS:
            _GAINS.clear()
        hit = _GAINS[key] = (app, targets, statistical_gain(stats[:, 0], stats[:, 1], app.init_batch_size, batch))
    _, targets, gain = hit
    e = min(int(job.epoch), app.max_epochs)
    need = targets[e + 1:] - np.maximum(targets[e:-1], job.progress)
    return float(np.sum(np.maximum(need, 0.0) / np.maximum(gain[e:], 1e-12)))


def optimus_extras(elastic, act: np.ndarray, jobs: JobArrays, st: SimState):
    """Optimus's inputs for elastic jobs (formulations/optimus.py): the fixed
    batch size, the iterations left at it, and the GPU limit of a fixed batch
    (batch / smallest micro-batch, at most 64; ncf one GPU, as the Pollux
    simulator) in place of Pollux's exploration limit."""
    from dataclasses import replace

    n = len(act)
    batch = np.full(n, np.nan)
    left = np.full(n, np.nan)
    cap = elastic.max_gpus.copy()
    for i, m in enumerate(act.tolist()):
        job = st.goodput.get(m)
        if job is None or job.target_batch is None:
            continue
        app = jobs.apps[m]
        b = min(job.target_batch, app.max_batch_size)
        batch[i] = b
        left[i] = remaining_iterations(job, app, b)
        cap[i] = 1.0 if app.name == "ncf" else float(min(max(b // app.min_local_bsz, 1), 64))
    return replace(elastic, max_gpus=cap), {"fixed_batch_size": batch, "remaining_iterations": left}


# ---------------------------------------------------------------- allocate


def allocate(placement, allocation, jobs: JobArrays, st: SimState, index_of: dict, type_index: dict) -> Plan:
    """The core's placement as a Plan. A job's servers are those its GPUs
    are on, or the policy's own node count (configuration policies choose
    nodes); a job restarts when it (re)starts, moves, or changes configuration."""
    nodes = getattr(allocation, "nodes", None)
    row_of = {jid: r for r, jid in enumerate(allocation.job_ids)} if nodes is not None else None
    ms, cols, gpus, servers, slots_of = [], [], [], [], []
    # servers spanned matter for elastic jobs (goodput) and for rigid jobs with spread rates
    count_servers = jobs.any_elastic or jobs.spread_throughput is not None
    for jid, slots in placement.assignments.items():
        m = index_of[jid]
        t0 = slots[0].gpu_type
        if len(slots) == 1 or all(s.gpu_type == t0 for s in slots):  # the common case: one type
            groups = ((t0, slots),)
        else:
            per_type: dict[str, list] = {}
            for s in slots:
                per_type.setdefault(s.gpu_type, []).append(s)
            groups = per_type.items()
        for t, ss in groups:
            c = type_index[t]
            ms.append(m)
            cols.append(c)
            gpus.append(len(ss))
            srv = len({s.server for s in ss}) if count_servers and len(ss) > 1 else 1
            if row_of is not None and jid in row_of and nodes[row_of[jid], c] > 0:
                srv = int(nodes[row_of[jid], c])
            servers.append(srv)
            slots_of.append(ss[0])
    m = np.asarray(ms, dtype=np.int64)
    partner = np.full(len(ms), -1, dtype=np.int64)
    if len(allocation.pairs):
        first: dict = {}
        for i, s in enumerate(slots_of):
            key = (s.server, s.gpu_type, s.gpu)
            if key in first:
                partner[i], partner[first[key]] = m[first[key]], m[i]
            else:
                first[key] = i
    col = np.asarray(cols, dtype=np.int64)
    srv = np.asarray(servers, dtype=np.int64)
    g = np.asarray(gpus, dtype=np.int64)
    prev = st.config[m]
    restarted = (prev[:, 0] >= 0) & ((prev[:, 0] != col) | (prev[:, 1] != g) | (prev[:, 2] != srv))
    moved = set(placement.started) | set(placement.migrated)
    if moved:
        restarted |= np.fromiter((jobs.job_ids[j] in moved for j in ms), dtype=bool, count=len(ms))
    return Plan(m, col, g.astype(float), srv, partner, restarted, len(placement.assignments), tuple(placement.started),
                tuple(placement.preempted), tuple(placement.migrated))


# ---------------------------------------------------------------- progress (execution)


@dataclass(frozen=True)
class Progress:
    run: np.ndarray  # seconds each unit ran this round (≤ round length)
    gained: np.ndarray  # steps (rigid) or statistical progress (elastic) gained
    finished: np.ndarray  # bool
    rate_bound: np.ndarray  # the rate gained may not exceed (rigid units; inf for elastic)


# ---------------------------------------------------------------- CPU and memory (Synergy)


@dataclass(frozen=True)
class ResourceProfiles:
    """Jobs' CPU/memory sensitivity (Synergy): per job a list of (CPUs per GPU,
    relative speed) points, or None; the same for GB of memory per GPU. A job
    with a profile runs at the speed its CPUs and memory give: the ``synergy``
    policy's ``speed_factor`` (its LP), under any other policy the
    GPU-proportional share (3 CPUs and 62.5 GB per GPU: formulations/synergy.py's
    defaults), f_cpu(3) and f_mem(62.5) on the profiles' concave envelopes,
    whichever is smaller. Jobs without profiles run at full speed."""

    cpu: tuple
    memory: tuple
    proportional: np.ndarray  # (n,) speed at the GPU-proportional share

    @classmethod
    def of(cls, cpu, memory) -> "ResourceProfiles":
        from optsched.formulations.synergy import DEFAULT_CPUS_PER_GPU, DEFAULT_MEMORY_PER_GPU, _value, envelope

        from optsched.model import OptschedError

        def clean(p, what, m):
            if not isinstance(p, (list, tuple)):  # None / NaN cell: no profile
                return None
            pts = np.asarray(p, dtype=float)
            if pts.ndim != 2 or pts.shape[1] != 2 or not len(pts) or not np.isfinite(pts).all() or (
                    pts[:, 0] < 0).any() or (pts[:, 1] <= 0).any() or (pts[:, 1] > 1).any():
                raise OptschedError(f"trace: job {m}: {what} needs [(amount per GPU >= 0, relative speed in (0, 1]), ...]")
            return [tuple(x) for x in pts.tolist()]

        cpu = [clean(p, "cpu_profile", m) for m, p in enumerate(cpu)]
        memory = [clean(p, "memory_profile", m) for m, p in enumerate(memory)]
        speed = np.ones(len(cpu))
        for m, (c, r) in enumerate(zip(cpu, memory)):
            vals = [_value(envelope(p), share) for p, share in ((c, DEFAULT_CPUS_PER_GPU), (r, DEFAULT_MEMORY_PER_GPU))
                    if p is not None]
            speed[m] = min(min(vals), 1.0) if vals else 1.0
        return cls(tuple(cpu), tuple(memory), speed)

    def extras(self, act: np.ndarray) -> dict:
        idx = act.tolist()
        return {"cpu_profile": [self.cpu[m] for m in idx], "memory_profile": [self.memory[m] for m in idx]}

    def speeds(self, plan: Plan, allocation, job_ids) -> np.ndarray:
        """(units,) speed factor of each unit of this round's plan."""
        out = self.proportional[plan.m].copy()
        given = (getattr(allocation, "explanation", None) or {}).get("speed_factor")
        if given:
            for i, m in enumerate(plan.m.tolist()):
                if job_ids[m] in given:
                    out[i] = given[job_ids[m]]
        return out


def simulated_progress(plan: Plan, jobs: JobArrays, st: SimState, round_length: float, restart_overhead: np.ndarray,
                       server: np.ndarray, progress_rate=None, speed: np.ndarray | None = None) -> Progress:
    """Simulated execution of one round. Rigid units advance rate × (run −
    overhead), rate = throughput × GPUs / scale factor (a packed unit: its pair
    throughput) × ``speed`` (per unit: the CPU/memory speed factor, default 1);
    elastic units run their goodput model; a unit that restarts first pays
    ``restart_overhead`` seconds (carried over rounds)."""
    from optsched.sim.goodput_jobs import advance, choose_batch

    sm, stype, sn = plan.m, plan.col, plan.gpus
    n_units = len(sm)
    overhead = st.overhead_left[sm].copy()
    if plan.restarted.any():
        overhead[plan.restarted] = restart_overhead[sm[plan.restarted]]
    thr = jobs.throughput[sm, stype]
    if jobs.spread_throughput is not None and n_units:
        spread = plan.servers > 1  # GPUs on more than one server: the unconsolidated rate
        if spread.any():
            thr = np.where(spread, jobs.spread_throughput[sm, stype], thr)
    solo = thr * sn / np.maximum(jobs.scale_factor[sm], 1e-300)
    rate = solo
    if (plan.partner >= 0).any():
        from optsched.sim.packing import packed_rate

        rate = solo.copy()
        packed = plan.partner >= 0
        rate[packed] = packed_rate(jobs, sm[packed], plan.partner[packed], stype[packed]) * sn[packed] / jobs.scale_factor[sm[packed]]
    if progress_rate is not None:
        from optsched.sim.loop import RunningJob

        rate = np.array([
            progress_rate(RunningJob(jobs.job_ids[m], str(jobs.models[m]), int(jobs.scale_factor[m]), jobs.gpu_types[t],
                                     int(c), float(jobs.throughput[m, t]), float(st.steps_done[m]),
                                     float(jobs.steps_total[m])))
            for m, t, c in zip(sm, stype, sn)
        ], dtype=float)
        bad = ~(np.isfinite(rate) & (rate >= 0))
        if bad.any():
            i = int(np.argmax(bad))
            raise OptschedError(f"progress_rate: must return a finite number of steps/s >= 0, got {float(rate[i])!r} "
                                f"for job {jobs.job_ids[sm[i]]!r}")
    if speed is not None:
        rate = rate * speed
    remaining = np.maximum(jobs.steps_total[sm] - st.steps_done[sm], 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        need = overhead + np.where(rate > 0, remaining / np.maximum(rate, 1e-300), np.inf)
    elastic = jobs.is_elastic[sm] if jobs.any_elastic else np.zeros(n_units, dtype=bool)
    need[elastic] = np.inf
    run = np.minimum(need, round_length)
    finished = need <= round_length
    gained = rate * np.maximum(run - overhead, 0.0)
    pay = np.minimum(overhead, round_length)
    for i in np.flatnonzero(elastic).tolist():
        m, c = int(sm[i]), int(stype[i])
        g, srv = int(sn[i]), int(plan.servers[i])
        job = st.goodput[m]
        if plan.restarted[i] or tuple(st.config[m]) != (c, g, srv):
            choose_batch(job, jobs.apps[m], jobs.gpu_types[c], g, srv)
        before = job.progress
        used, done = advance(job, jobs.apps[m], jobs.gpu_types[c], g, srv, int(server[c]), round_length - pay[i])
        run[i] = pay[i] + used
        finished[i] = done
        gained[i] = job.progress - before
    st.overhead_left[sm] = overhead - pay
    bound = np.where(elastic, np.inf, solo if progress_rate is None else np.inf)
    return Progress(run, gained, finished, bound)


def apply_progress(plan: Plan, prog: Progress, jobs: JobArrays, st: SimState, now: float, equal_thr_floor: np.ndarray,
                   round_length: float) -> np.ndarray:
    """Book a round's progress into the state; returns the jobs that finished."""
    sm, sn, run, gained, finished = plan.m, plan.gpus, prog.run, prog.gained, prog.finished
    unique = plan.running_jobs == len(sm)
    if sm.size and np.isfinite(prog.rate_bound).any():
        fin = np.isfinite(prog.rate_bound)
        st.progress_violation = max(st.progress_violation,
                                    float((gained[fin] - prog.rate_bound[fin] * run[fin]).max()))
    _add(st.steps_done, sm, gained, unique)
    if finished.any():
        st.steps_done[sm[finished]] = jobs.steps_total[sm[finished]]  # no float drift at completion
    _add(st.gpu_seconds, sm, sn * run, unique)
    _add(st.isolated_time, sm, gained / equal_thr_floor[sm], unique)
    first = np.isnan(st.first_start[sm])
    st.first_start[sm[first]] = now
    st.last_run[sm] = now + run
    st.restarts[sm[plan.restarted & ~first]] += 1
    st.config[sm] = np.column_stack([plan.col, sn.astype(np.int64), plan.servers]) if sm.size else st.config[sm]
    done = np.unique(sm[finished]) if finished.any() else sm[:0]
    for m, r in zip(sm[finished], run[finished]):
        st.completion[m] = now + r
    return done


def _add(target: np.ndarray, index: np.ndarray, values: np.ndarray, unique: bool) -> None:
    """target[index] += values, repeated indices accumulating (np.add.at); the
    plain fancy += when there are no repeats (the common case, ~5× cheaper)."""
    if unique:
        target[index] += values
    else:
        np.add.at(target, index, values)


# ---------------------------------------------------------------- record


ROUND_COLUMNS = ("time", "duration", "active_jobs", "running_jobs", "waiting_jobs", "recomputed", "solver_seconds",
                 "fit_seconds", "started", "preempted", "migrated", "completed", "packed_jobs")


def round_record(ls: LoopState, plan: Plan, prog: Progress, n_active: int, duration: float, recomputed: bool,
                 solve_s: float, fit_s: float, done: int, capacity: np.ndarray) -> tuple:
    """One row of the rounds table: counts and utilization per type (busy
    GPU-seconds / (GPUs × duration); a packed pair's GPUs count once)."""
    k = len(capacity)
    w = plan.gpus * prog.run
    packed = plan.partner >= 0
    if packed.any():
        # each pair's GPUs are busy while either member runs: split by halves of the longer run
        partner_run = dict(zip(plan.m[packed].tolist(), prog.run[packed].tolist()))
        w = w.copy()
        for i in np.flatnonzero(packed).tolist():
            other = partner_run.get(int(plan.partner[i]), prog.run[i])
            w[i] = plan.gpus[i] * max(prog.run[i], other) / 2
    busy = np.bincount(plan.col, weights=w, minlength=k)
    return (ls.now, duration, n_active, plan.running_jobs, len(ls.waiting), bool(recomputed), solve_s, fit_s,
            len(plan.started), len(plan.preempted), len(plan.migrated), int(done), int(packed.sum()),
            *(busy / np.maximum(capacity * duration, 1e-300)))
