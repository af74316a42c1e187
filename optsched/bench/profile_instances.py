"""Realistic elastic instances from the peers' measured application profiles.

The configuration policies (``sia``, ``pollux``) are only as fast as their
instances are kind, so the bench also draws rounds the way the peers' own
simulators see them: jobs of Sia's profiled applications (bert, cifar10,
deepspeech2, imagenet, yolov3; per-GPU-type models fitted from
``sia/traces/<app>/placements-<gpu>.csv`` and ``scalability-<gpu>.csv``), their
batch-size and micro-batch limits, gradient statistics of a random epoch of the
application's validation curves, ages up to 20,000 s, restarts, Pollux's
exploration cap (at most twice the GPUs a job has run on), and a share of the
jobs running in a configuration that fits the cluster (the previous round's
choice). The cluster is Sia's default mix scaled up: 4-GPU T4 nodes (aws),
8-GPU A100 nodes (dgx-ext), 8-GPU RTX 2080Ti nodes (rtx), in the 24:16:24 GPU
ratio of its 64-GPU cluster. Pollux-profile jobs (``pollux_instances``) run
on one type of 4-GPU nodes, as in Pollux's artifact.

API (deterministic in ``seed``; every Instance is a plain ``optsched.model.Instance``):

- ``sia_instances(n_gpus, n_jobs, seed, count=1) -> list[Instance]``
- ``pollux_instances(n_gpus, n_jobs, seed, count=1) -> list[Instance]``
- ``sia_stream(n_gpus, n_jobs, rounds, churn=0.02, seed=0, decide=None)`` and
  ``pollux_stream(...)``: successive rounds; each round ages every job by
  ``ROUND_SECONDS``, ``churn``·n jobs finish and as many arrive, and the running
  configurations are the previous round's decision (``decide(inst) ->
  Allocation``, default the policy itself), with a restart counted for each job
  whose configuration changed. Yields Instances.
- ``Stream``: the same as an object, for callers that decide themselves
  (``stream.instance``, ``stream.advance(gpu_counts, nodes)``).

Needs the peer data (``$OPTSCHED_PEER_DATA``); an OptschedError names the folder when absent.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator

import numpy as np

from optsched.model import ElasticInfo, Instance

SIA_APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "yolov3")
POLLUX_APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "yolov3")  # ncf: fixed batch, not co-adapted
SIA_MIX = (("aws", 24, 4), ("dgx-ext", 16, 8), ("rtx", 24, 8))  # type, share of 64 GPUs, GPUs per node
MAX_AGE = 20_000.0
ROUND_SECONDS = 60.0  # Sia's and Pollux's scheduling interval
RUNNING = 0.7  # share of jobs running in the previous round's configuration (when it fits)
MAX_REPLICAS = 64  # Pollux's and Sia's cap on a job's GPUs


def sia_cluster(n_gpus: int) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    """(types sorted, GPUs per type, GPUs per node): Sia's 24:16:24 mix, whole nodes."""
    types, cap, per = [], [], []
    for name, share, node in sorted(SIA_MIX):
        types.append(name)
        cap.append(max(node, int(round(n_gpus * share / 64 / node)) * node))
        per.append(node)
    return tuple(types), np.array(cap, float), np.array(per, int)


def _apps(kind: str, types: tuple[str, ...], capacity: np.ndarray):
    from optsched.model import Cluster
    from optsched.sim.goodput_jobs import applications_for

    cluster = Cluster(gpus={t: int(w) for t, w in zip(types, capacity)})
    names = SIA_APPS if kind == "sia" else POLLUX_APPS
    apps = applications_for(cluster, names)
    return [apps[a] for a in names]


@dataclasses.dataclass
class _Job:
    jid: str
    app: int
    epoch: int
    age: float
    restarts: int
    profiled: int  # most GPUs it has run on (0: never ran)
    config: tuple[int, int, int] | None  # (type, GPUs, nodes) now


class Stream:
    """A sequence of rounds over one cluster (see the module docstring)."""

    def __init__(self, kind: str, n_gpus: int, n_jobs: int, seed: int = 0, churn: float = 0.02):
        if kind == "sia":
            self.types, self.capacity, self.server = sia_cluster(n_gpus)
        else:
            nodes = max(1, n_gpus // 4)
            self.types, self.capacity, self.server = ("t4",), np.array([4.0 * nodes]), np.array([4])
        self.kind, self.churn = kind, churn
        self.apps = _apps(kind, self.types, self.capacity)
        self._populate(seed, n_jobs)

    def _populate(self, seed: int, n_jobs: int) -> None:
        """The first round's jobs (ages up to MAX_AGE, some placed), once the cluster and apps are set."""
        self.rng = np.random.default_rng(seed)
        self.next_id = 0
        self.time = 0.0
        self.jobs = [self._new_job(self.rng.uniform(0, MAX_AGE)) for _ in range(n_jobs)]
        self._place_some()
        self.instance = self._instance()

    # -- jobs ---------------------------------------------------------------------------

    def _new_job(self, age: float) -> _Job:
        rng = self.rng
        a = int(rng.integers(len(self.apps)))
        app = self.apps[a]
        frac = min(age / MAX_AGE, 1.0)
        epoch = int(rng.integers(0, max(1, int(app.max_epochs * frac) + 1)))
        restarts = int(rng.poisson(age / 4000.0))
        profiled = 0 if age < ROUND_SECONDS else int(2 ** rng.integers(0, 6))  # 1 .. 32 GPUs seen
        jid = f"{app.name}-{self.next_id}"
        self.next_id += 1
        return _Job(jid, a, min(epoch, app.max_epochs - 1), float(age), restarts, profiled, None)

    def _cap(self, job: _Job) -> int:
        app = self.apps[job.app]
        return int(min(max(2 * job.profiled, 1), MAX_REPLICAS, app.max_batch_size // app.min_local_bsz))

    def _place_some(self) -> None:
        """A running configuration for about RUNNING of the jobs, within capacity."""
        free = self.capacity.copy()
        for job in self.jobs:
            if job.profiled == 0 or self.rng.random() > RUNNING:
                continue
            t = int(self.rng.integers(len(self.types)))
            g = int(min(job.profiled, self._cap(job)))
            if g <= free[t]:
                free[t] -= g
                job.config = (t, g, -(-g // int(self.server[t])))

    # -- rounds -------------------------------------------------------------------------

    def advance(self, gpu_counts: np.ndarray | None = None, nodes: np.ndarray | None = None) -> Instance:
        """The next round: the decision (gpu_counts, nodes: (n, k) of the current
        instance) becomes the running configuration, time passes, jobs come and go."""
        rng = self.rng
        for m, job in enumerate(self.jobs):
            if gpu_counts is not None:
                row = gpu_counts[m]
                if row.sum() > 0:
                    t = int(np.argmax(row))
                    new = (t, int(row[t]), int(max(nodes[m, t], 1)))
                    if job.config is not None and new != job.config:
                        job.restarts += 1
                    job.config = new
                    job.profiled = max(job.profiled, new[1])
                else:
                    job.config = None
            job.age += ROUND_SECONDS
            app = self.apps[job.app]
            if rng.random() < ROUND_SECONDS / 1200.0:  # an epoch every ~20 minutes
                job.epoch = min(job.epoch + 1, app.max_epochs - 1)
        self.time += ROUND_SECONDS
        n = len(self.jobs)
        leave = rng.choice(n, max(1, int(round(self.churn * n))), replace=False) if n else []
        keep = np.ones(n, dtype=bool)
        keep[leave] = False
        self.jobs = [j for j, k in zip(self.jobs, keep) if k] + [self._new_job(0.0) for _ in range(len(leave))]
        self.instance = self._instance()
        return self.instance

    def _instance(self) -> Instance:
        from optsched.sim.goodput_jobs import throughput_row

        n, k = len(self.jobs), len(self.types)
        T = np.zeros((n, k))
        params = np.full((n, k, 7), np.nan)
        cur_g = np.zeros((n, k), dtype=int)
        cur_n = np.zeros((n, k), dtype=int)
        grad = np.zeros((n, 2))
        fields = {f: np.zeros(n) for f in ("ibs", "mbs", "lo", "hi", "cap", "penalty")}
        rows = {}
        for m, job in enumerate(self.jobs):
            app = self.apps[job.app]
            if job.app not in rows:  # one throughput row per application (its 1-GPU profile)
                rows[job.app] = throughput_row(app, app.init_batch_size, 1, self.types, self.capacity, self.server, True)
            T[m] = rows[job.app]
            for j, gpu in enumerate(self.types):
                if gpu in app.params:
                    params[m, j] = app.params[gpu]
            grad[m] = app.grad_stats(app.init_batch_size, job.epoch)
            if job.config is not None:
                t, g, nn = job.config
                cur_g[m, t], cur_n[m, t] = g, nn
            fields["ibs"][m], fields["mbs"][m] = app.init_batch_size, app.max_batch_size
            fields["lo"][m], fields["hi"][m] = app.min_local_bsz, app.max_local_bsz
            fields["cap"][m] = self._cap(job)
            fields["penalty"][m] = getattr(app, "penalty_seconds", app.restart_seconds)
        el = ElasticInfo(
            is_elastic=np.ones(n, dtype=bool), params=params, grad_sqr=grad[:, 0], grad_var=grad[:, 1],
            init_batch_size=fields["ibs"], max_batch_size=fields["mbs"], min_local_bsz=fields["lo"],
            max_local_bsz=fields["hi"], min_gpus=np.ones(n), max_gpus=fields["cap"],
            num_restarts=np.array([j.restarts for j in self.jobs], float), restart_seconds=fields["penalty"],
            current_gpus=cur_g, current_nodes=cur_n, server_gpus=self.server.copy(),
        )
        ages = np.array([j.age for j in self.jobs])
        return Instance(
            job_ids=tuple(j.jid for j in self.jobs), gpu_types=self.types, throughput=T, scale_factor=np.ones(n),
            weight=np.ones(n), capacity=self.capacity.copy(), steps_remaining=np.full(n, np.nan),
            elapsed_time=ages, attained_service=np.zeros(n), arrival_time=self.time - ages, time=self.time,
            elastic=el,
        )

    def app_names(self) -> list[str]:
        """Each job's application name (the side-by-side script builds the peers' jobs from it)."""
        return [self.apps[j.app].name for j in self.jobs]

    def epochs(self) -> list[int]:
        return [j.epoch for j in self.jobs]


def sia_instances(n_gpus: int, n_jobs: int, seed: int = 0, count: int = 1) -> list[Instance]:
    """``count`` independent cold rounds on Sia's 3-type cluster (seeds seed, seed+1, ...)."""
    return [Stream("sia", n_gpus, n_jobs, seed + i).instance for i in range(count)]


def pollux_instances(n_gpus: int, n_jobs: int, seed: int = 0, count: int = 1) -> list[Instance]:
    """``count`` independent cold rounds of Pollux-profile jobs on 4-GPU T4 nodes."""
    return [Stream("pollux", n_gpus, n_jobs, seed + i).instance for i in range(count)]


def _stream(kind, n_gpus, n_jobs, rounds, churn, seed, decide) -> Iterator[Instance]:
    s = Stream(kind, n_gpus, n_jobs, seed, churn)
    if decide is None:
        from optsched.policy import solve_instance

        decide = lambda inst: solve_instance(inst, kind)  # noqa: E731
    for r in range(rounds):
        yield s.instance
        if r + 1 < rounds:
            alloc = decide(s.instance)
            s.advance(np.asarray(alloc.gpu_counts), np.asarray(alloc.nodes))


def sia_stream(n_gpus: int, n_jobs: int, rounds: int, churn: float = 0.02, seed: int = 0,
               decide: Callable[[Instance], object] | None = None) -> Iterator[Instance]:
    """``rounds`` successive rounds (see the module docstring)."""
    return _stream("sia", n_gpus, n_jobs, rounds, churn, seed, decide)


def pollux_stream(n_gpus: int, n_jobs: int, rounds: int, churn: float = 0.02, seed: int = 0,
                  decide: Callable[[Instance], object] | None = None) -> Iterator[Instance]:
    return _stream("pollux", n_gpus, n_jobs, rounds, churn, seed, decide)
