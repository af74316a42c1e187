"""Elastic jobs in simulation: Pollux/Sia workloads with the applications' goodput
models (DESIGN.md §7-8). Self-contained next to the round-based loop (loop.py),
whose jobs have fixed sizes; semantics follow the peers' simulators
(adaptdl/simulator/simulator.py, Sia's fork):

- every ``interval`` seconds (60) the policy re-decides every active job's
  configuration (type, GPUs, nodes) — pollux / sia: elastic, from each job's
  *fitted* goodput model; tiresias / fifo: rigid, the workload's num_replicas
  and batch size; max_min_fairness (Gavel): rigid, time-shared by rounds by the
  project's Allocator (optsched.allocator: Gavel's priorities, deficits, lease
  extension, placement), X re-solved when jobs arrive or leave; a job moved to
  other GPUs restarts;
- progress by goodput: per step the job gains ``gain = (var+sqr)/(var/k+sqr)``
  M0-steps (gradient statistics of the application's validation curves at its
  batch size and epoch), one step lasting the *measured* step time of its
  placement (profile interpolation; the fitted model off-profile) plus
  accumulation; a job finishes when its progress reaches that of
  ``max_epochs`` epochs; the batch size is re-chosen on every (re)allocation
  and epoch;
- restart overhead on every configuration change (Pollux: 30 s for all; Sia:
  per application), counted as GPU time but no progress;
- observations: each (nodes, GPUs, micro-batch) a job runs at is recorded, and
  the job's 7 parameters are refit (JAX) for every job with new observations,
  once per round; a job may grow to at most 2× the GPUs it has been observed on
  (Pollux's exploration rule; ncf stays on one GPU with batch 32,768, as the peer).
"""

from __future__ import annotations

import math
import time as _time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from optsched.goodput.fit import Observations, fit_params
from optsched.goodput.model import GoodputModel, statistical_gain
from optsched.goodput.profiles import Application
from optsched.allocator import Allocator
from optsched.model import Cluster, ElasticInfo, Instance, OptschedError, Server

ELASTIC_POLICIES = ("pollux", "sia")
RIGID_POLICIES = ("tiresias", "fifo", "max_min_fairness")
POLLUX_TIRESIAS_THRESHOLD = 16 * 3600.0  # GPU-seconds, the Pollux simulator's Tiresias (2 queues)


@dataclass
class ElasticJob:
    name: str
    app: Application
    submission: float
    target_replicas: int
    target_batch: float | None  # fixed batch size (rigid runs, ncf), None = co-adapted
    config: tuple[int, int, int] | None = None  # (type index, GPUs, nodes)
    atomic_bsz: int = 0
    accum_steps: int = 0
    epoch: int = 0
    progress: float = 0.0
    rescale: float = 0.0
    restarts: int | None = None
    attained: float = 0.0
    completion: float | None = None
    profile: dict = field(default_factory=dict)  # type -> {(nodes, gpus, bsz): (step, sync)}
    params: dict = field(default_factory=dict)  # type -> (7,) fitted
    dirty: set = field(default_factory=set)  # types with observations not yet fitted
    grad: tuple[float, float] | None = None

    @property
    def max_profiled(self) -> int:
        return max((g for prof in self.profile.values() for (_, g, _) in prof), default=0)


def placement_of(gpus: int, nodes: int, per_server: int) -> tuple[int, ...]:
    """GPUs per server: whole servers, the remainder on the last one."""
    out, left = [], gpus
    for _ in range(nodes):
        take = min(per_server, left)
        out.append(take)
        left -= take
    return tuple(x for x in out if x)


def fixed_batch_split(app: Application, batch: float, replicas: int) -> tuple[int, int]:
    """(micro-batch, accumulation) for a fixed global batch (the peers' rule)."""
    local = math.ceil(batch / replicas - 1e-8)
    accum = math.ceil(local / app.max_local_bsz - 1e-8) - 1
    if replicas == 1 and batch > app.init_batch_size:
        accum = max(1, accum)
    accum = max(accum, 0)
    atomic = math.ceil(local / (accum + 1) - 1e-8)
    atomic = min(atomic, int(app.max_batch_size / (replicas * (accum + 1))))
    return max(atomic, 1), accum


class ElasticSimulator:
    def __init__(self, workload: pd.DataFrame, apps: dict[str, Application], cluster: dict[str, tuple[int, int]],
                 policy: str, interval: float | None = None, restart_seconds: str | float = 30.0,
                 policy_options: dict | None = None, time_limit: float = 30.0):
        if policy not in ELASTIC_POLICIES + RIGID_POLICIES:
            raise OptschedError(f"policy: {policy!r} is not supported by the elastic simulator "
                                f"(choose from {', '.join(ELASTIC_POLICIES + RIGID_POLICIES)})")
        missing = sorted(set(workload.application) - set(apps))
        if missing:
            raise OptschedError(f"workload.application: no profile for {missing[0]!r}")
        self.policy = policy
        self.types = tuple(sorted(cluster))
        self.capacity = np.array([cluster[t][0] * cluster[t][1] for t in self.types], dtype=float)
        self.server = np.array([cluster[t][1] for t in self.types], dtype=int)
        self.interval = interval or (360.0 if policy == "max_min_fairness" else 60.0)
        self.restart_seconds = restart_seconds
        self.options = policy_options or {}
        self.time_limit = time_limit
        elastic = policy in ELASTIC_POLICIES
        self.jobs = []
        for row in workload.itertuples():
            app = apps[row.application]
            fixed = None if elastic else float(row.batch_size)
            if elastic and app.name == "ncf":
                fixed = 32768.0  # the Pollux simulator pins ncf's batch size
            self.jobs.append(ElasticJob(str(row.name), app, float(row.time), int(row.num_replicas), fixed))
        self._allocation = None  # max_min_fairness: the X in force
        self._moved: set[str] = set()
        self._allocator = None
        if policy == "max_min_fairness":
            servers = [Server(id=f"{t}-{i}", gpu_type=t, gpus=cluster[t][1]) for t in self.types for i in range(cluster[t][0])]
            self._allocator = Allocator(Cluster(gpus={t: int(c) for t, c in zip(self.types, self.capacity)}, servers=servers),
                                        round_length=self.interval)
        self.now = 0.0
        self.solve_seconds: list[float] = []
        self.fit_seconds: list[float] = []

    # -- progress -------------------------------------------------------------------------

    def _restart_seconds(self, job: ElasticJob) -> float:
        return job.app.restart_seconds if self.restart_seconds == "application" else float(self.restart_seconds)

    def _choose_batch(self, job: ElasticJob) -> None:
        t, g, nodes = job.config
        gpu = self.types[t]
        app = job.app
        if job.target_batch is not None:
            job.atomic_bsz, job.accum_steps = fixed_batch_split(app, min(job.target_batch, app.max_batch_size), g)
            return
        params = job.params.get(gpu)
        if params is None or job.grad is None:
            job.atomic_bsz, job.accum_steps = fixed_batch_split(app, max(app.init_batch_size, app.min_local_bsz * g), g)
            return
        model = GoodputModel.single(params, job.grad[0], job.grad[1], app.init_batch_size, app.max_batch_size,
                                    (app.min_local_bsz, app.max_local_bsz))
        gp, b, s = model.optimize(np.array([[nodes]]), np.array([[g]]))
        if gp[0, 0] <= 0:
            job.atomic_bsz, job.accum_steps = fixed_batch_split(app, max(app.init_batch_size, app.min_local_bsz * g), g)
        else:
            job.atomic_bsz, job.accum_steps = int(b[0, 0]), int(s[0, 0])

    def _step(self, job: ElasticJob, seconds: float) -> None:
        if job.config is None or job.completion is not None:
            return
        t, g, nodes = job.config
        gpu = self.types[t]
        delay = min(job.rescale, seconds)
        job.rescale -= delay
        job.attained += delay * g
        clock = self.now + delay
        seconds -= delay
        app = job.app
        placement = placement_of(g, nodes, int(self.server[t]))
        while seconds > 1e-9 and job.completion is None:
            batch = g * job.atomic_bsz * (job.accum_steps + 1)
            step, sync = app.step_sync(gpu, placement, job.atomic_bsz)
            t_iter = step + job.accum_steps * (step - sync)
            sqr, var = app.grad_stats(batch, job.epoch)
            gain = float(statistical_gain(sqr, var, app.init_batch_size, batch))
            job.grad = (sqr, var)
            key = (len(placement), g, job.atomic_bsz)
            prof = job.profile.setdefault(gpu, {})
            if key not in prof:
                prof[key] = (step, sync)
                job.dirty.add(gpu)
            rate = gain / t_iter
            target = app.progress_target(job.epoch + 1)
            if job.progress + rate * seconds < target:
                job.progress += rate * seconds
                job.attained += seconds * g
                clock += seconds
                seconds = 0.0
            else:
                dt = (target - job.progress) / rate
                job.progress = target
                job.epoch += 1
                job.attained += dt * g
                clock += dt
                seconds -= dt
                if job.epoch >= app.max_epochs:
                    job.completion = clock
                else:
                    self._choose_batch(job)  # re-scale the batch size between epochs

    # -- models ------------------------------------------------------------------------------

    def _refit(self, active: list[ElasticJob]) -> None:
        t0 = _time.perf_counter()
        for job in active:
            for gpu in sorted(job.dirty):
                rows = job.profile[gpu]
                keys = np.array(list(rows), dtype=float)
                vals = np.array(list(rows.values()), dtype=float)
                obs = Observations.from_arrays(keys[:, 0], keys[:, 1], keys[:, 2], vals[:, 0], vals[:, 1])
                job.params[gpu] = fit_params(obs).params
            job.dirty.clear()
        self.fit_seconds.append(_time.perf_counter() - t0)

    def _instance(self, active: list[ElasticJob]) -> Instance:
        n, k = len(active), len(self.types)
        T = np.zeros((n, k))
        for m, job in enumerate(active):
            for j, gpu in enumerate(self.types):
                if self.policy in ELASTIC_POLICIES:
                    # One GPU at the smallest micro-batch: Sia profiles every type on arrival.
                    step, _ = job.app.step_sync(gpu, (1,), job.app.min_local_bsz)
                    T[m, j] = job.app.min_local_bsz / step
                else:
                    g = job.target_replicas
                    if g > self.capacity[j]:
                        continue
                    nodes = -(-g // int(self.server[j]))
                    b, s = fixed_batch_split(job.app, job.target_batch, g)
                    step, sync = job.app.step_sync(gpu, placement_of(g, nodes, int(self.server[j])), b)
                    T[m, j] = 1.0 / (step + s * (step - sync))
        age = np.array([self.now - j.submission for j in active])
        sf = np.ones(n) if self.policy in ELASTIC_POLICIES else np.array([j.target_replicas for j in active], float)
        elastic = None
        if self.policy in ELASTIC_POLICIES:
            params = np.full((n, k, 7), np.nan)
            cur_g = np.zeros((n, k), dtype=int)
            cur_n = np.zeros((n, k), dtype=int)
            for m, job in enumerate(active):
                for j, gpu in enumerate(self.types):
                    if gpu in job.params:
                        params[m, j] = job.params[gpu]
                if job.config is not None:
                    cur_g[m, job.config[0]], cur_n[m, job.config[0]] = job.config[1], job.config[2]
            app = [j.app for j in active]
            grad = np.array([j.grad or a.grad_stats(a.init_batch_size, 0) for j, a in zip(active, app)])
            cap = np.array([min(max(2 * j.max_profiled, 1), 64, a.max_batch_size // a.min_local_bsz) for j, a in zip(active, app)], float)
            cap = np.where([a.name == "ncf" for a in app], 1.0, cap)
            elastic = ElasticInfo(
                is_elastic=np.ones(n, dtype=bool), params=params, grad_sqr=grad[:, 0], grad_var=grad[:, 1],
                init_batch_size=np.array([a.init_batch_size for a in app]),
                max_batch_size=np.array([a.max_batch_size for a in app]),
                min_local_bsz=np.array([a.min_local_bsz for a in app]),
                max_local_bsz=np.array([a.max_local_bsz for a in app]),
                min_gpus=np.ones(n), max_gpus=cap,
                num_restarts=np.array([j.restarts or 0 for j in active], float),
                restart_seconds=np.array([self._restart_seconds(j) for j in active]),
                current_gpus=cur_g, current_nodes=cur_n, server_gpus=self.server,
            )
        return Instance(
            job_ids=tuple(j.name for j in active), gpu_types=self.types, throughput=T, scale_factor=sf,
            weight=np.ones(n), capacity=self.capacity, steps_remaining=np.full(n, np.nan), elapsed_time=age,
            attained_service=np.array([j.attained for j in active]),
            arrival_time=np.array([j.submission for j in active]), time=self.now, elastic=elastic,
        )

    # -- policy ------------------------------------------------------------------------------

    def _decide(self, active: list[ElasticJob]) -> list[tuple[int, int, int] | None]:
        from optsched.policy import solve_instance

        if self.policy == "max_min_fairness" and any(j.target_replicas > self.capacity.max() for j in active):
            # A job wider than every type never runs (the Allocator rejects it): decide for the rest.
            fits = [j for j in active if j.target_replicas <= self.capacity.max()]
            cfg = dict(zip([j.name for j in fits], self._decide(fits) if fits else []))
            return [cfg.get(j.name) for j in active]
        inst = self._instance(active)
        if self._allocation is not None and self._allocation.job_ids == inst.job_ids:
            # Gavel re-solves when jobs arrive or leave; the same Allocation object
            # keeps the allocator's period (its counters reset when it changes).
            return self._gavel_round(active, inst, self._allocation)
        opts = dict(self.options)
        if self.policy == "tiresias":
            opts.setdefault("thresholds", (POLLUX_TIRESIAS_THRESHOLD,))
            opts.setdefault("starvation_factor", 0.0)
        t0 = _time.perf_counter()
        alloc = solve_instance(inst, self.policy, solver="highs" if self.policy in ELASTIC_POLICIES else "clarabel",
                               time_limit=self.time_limit, **opts)
        self.solve_seconds.append(_time.perf_counter() - t0)
        if alloc.gpu_counts is not None:
            out = []
            for m in range(inst.n):
                if alloc.gpu_counts[m].sum() == 0:
                    out.append(None)
                    continue
                j = int(np.argmax(alloc.gpu_counts[m]))
                g = int(alloc.gpu_counts[m, j])
                nodes = int(alloc.nodes[m, j]) if alloc.nodes is not None else -(-g // int(self.server[j]))
                out.append((j, g, nodes))
            return out
        if self.policy == "max_min_fairness":
            self._allocation = alloc
            return self._gavel_round(active, inst, alloc)
        out = []
        for m in range(inst.n):  # priority orders: a row of ones on one type, or waiting
            row = alloc.fractions[m]
            if row.max() <= 0:
                out.append(None)
            else:
                j = int(np.argmax(row))
                g = int(inst.scale_factor[m])
                out.append((j, g, -(-g // int(self.server[j]))))
        return out

    def _gavel_round(self, active, inst: Instance, alloc):
        """Gavel's mechanism for one round: the project's Allocator (priorities,
        deficits, lease extension, placement) turns X into this round's jobs and
        GPUs; a job's nodes are the servers its GPUs are on."""
        placement = self._allocator.next_round(inst, alloc)
        self._moved = set(placement.migrated)  # same shape on other GPUs: still a restart
        out = []
        for job in active:
            slots = placement.assignments.get(job.name)
            if not slots:
                out.append(None)
                continue
            out.append((self.types.index(placement.gpu_type(job.name)), len(slots), len({s.server for s in slots})))
        return out

    # -- loop --------------------------------------------------------------------------------

    def run(self, max_time: float = 30 * 86400.0) -> pd.DataFrame:
        jobs = sorted(self.jobs, key=lambda j: j.submission)
        while any(j.completion is None for j in jobs) and self.now < max_time:
            active = [j for j in jobs if j.submission <= self.now and j.completion is None]
            if not active:
                self.now = min(j.submission for j in jobs if j.completion is None)
                continue
            if self.policy in ELASTIC_POLICIES:
                self._refit(active)
            decision = self._decide(active)
            for job, cfg in zip(active, decision):
                if cfg != job.config or job.name in self._moved:
                    if cfg is None:
                        job.config = None
                    else:
                        job.config = cfg
                        job.rescale = self._restart_seconds(job)
                        job.restarts = 0 if job.restarts is None else job.restarts + 1
                        self._choose_batch(job)
            for job in active:
                self._step(job, self.interval)
            if self._allocator is not None:
                self._allocator.remove([j.name for j in active if j.completion is not None])
            self.now += self.interval
        return pd.DataFrame({
            "name": [j.name for j in jobs], "application": [j.app.name for j in jobs],
            "submission": [j.submission for j in jobs], "completion": [j.completion for j in jobs],
            "jct": [np.nan if j.completion is None else j.completion - j.submission for j in jobs],
            "restarts": [j.restarts or 0 for j in jobs], "gpu_seconds": [j.attained for j in jobs],
        })


def summarize(df: pd.DataFrame) -> dict:
    jct = df.jct.dropna()
    return {
        "jobs": int(len(df)), "finished": int(len(jct)),
        "avg_jct": float(jct.mean()) if len(jct) else float("nan"),
        "p99_jct": float(np.percentile(jct, 99)) if len(jct) else float("nan"),
        "makespan": float(df.completion.max() - df.submission.min()) if len(jct) == len(df) else float("nan"),
    }


def read_workload(path) -> pd.DataFrame:
    """Pollux/Sia workload CSV: name,time,application,num_replicas,batch_size."""
    df = pd.read_csv(path)
    need = {"name", "time", "application", "num_replicas", "batch_size"}
    if not need <= set(df.columns):
        raise OptschedError(f"workload: missing column {sorted(need - set(df.columns))[0]!r} in {path}")
    return df
