"""Elastic jobs in the simulator: the goodput side of the stages (docs/architecture.md §7).

A job is elastic by its data: it names an application with a goodput profile
(Pollux/Sia workloads: ``name,time,application,num_replicas,batch_size``) and
has no fixed length — it runs its application's epochs. Semantics follow the
peers' simulators (adaptdl/simulator/simulator.py, Sia's fork):

- under a goodput policy (``pollux``, ``sia``; ``optimus`` chooses GPU
  counts the same way but keeps the workload's batch size) the job is co-adapted: the
  policy chooses its configuration (type, GPUs, nodes) every round from the
  job's *fitted* goodput model, and its batch size is re-chosen on every
  (re)allocation and epoch (ncf keeps its batch of 32,768, as the peer);
  under any other policy it is rigid: the workload's ``num_replicas`` GPUs and
  ``batch_size``, its throughput row the measured step time at that size;
- progress by goodput: per step the job gains ``gain = (var+sqr)/(var/k+sqr)``
  M0-steps (gradient statistics of the application's validation curves at its
  batch size and epoch), one step lasting the *measured* step time of its
  placement (profile interpolation; the fitted model off-profile) plus
  accumulation; the job finishes when its progress reaches that of
  ``max_epochs`` epochs;
- observations: each (nodes, GPUs, micro-batch) a job runs at is recorded, and
  its 7 parameters are refit (JAX) once per round for every job with new
  observations; a job may grow to at most 2× the GPUs it has been observed on
  (Pollux's exploration rule).

With Sia's per-GPU-type profiles (``applications_for`` on Sia's types) the jobs
follow Sia's simulator (SOSP'23 artifact, ``sia-simulator/``) where it differs
from Pollux's (``SiaApplication``):

- calibration: every job's simulated progress rate is divided by a
  per-application slowdown that Sia fitted to its real-cluster runs (cifar10
  1.8, ncf 1.5, the others 1.2), whatever the policy;
- restarts: a (re)start costs the simulator's checkpoint-restore seconds
  (cifar10 50, deepspeech2 25, bert 120, yolov3 80, imagenet 250, ncf 15,
  others 30), while the ``sia`` policy's restart penalty keeps the per-job
  figures Sia's policy uses (``Application.restart_seconds`` of the profiles);
- micro-batch limits: the largest micro-batch profiled for the job's placement
  on that GPU type (T4 and RTX 2080Ti hold far smaller micro-batches than an
  A100: bert 12 vs 48), else of the profiled multi-node shapes at least as
  large, and a micro-batch no larger than any profiled at that GPU count; a
  rigid job's fixed batch size is split with gradient accumulation accordingly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from optsched.goodput.profiles import Application
from optsched.model import ElasticInfo

NCF_BATCH = 32768.0  # the Pollux simulator pins ncf's batch size
# Sia's simulator (sia-simulator/simulator_config.py, SLOWDOWNS): goodput of every
# job is multiplied by 1/slowdown, calibrating the simulator to the real cluster.
SIA_SLOWDOWN = {"cifar10": 1.8, "imagenet": 1.2, "yolov3": 1.2, "bert": 1.2, "deepspeech2": 1.2, "ncf": 1.5}
# Sia's simulator (sia-simulator/applications.py, rescale_time): seconds without
# progress after every (re)allocation; 30 for other applications.
SIA_RESCALE_SECONDS = {"cifar10": 50.0, "deepspeech2": 25.0, "bert": 120.0, "yolov3": 80.0, "imagenet": 250.0,
                       "ncf": 15.0}


@dataclass(frozen=True)
class SiaApplication(Application):
    """An application as Sia's simulator runs it (see the module docstring):
    ``restart_seconds`` is what a restart costs in the simulation,
    ``penalty_seconds`` what the policy assumes; progress × ``calibration``;
    micro-batch limits per placement on each GPU type."""

    calibration: float = 1.0
    penalty_seconds: float = 30.0
    server_gpus: dict = field(default_factory=dict)  # GPU type -> GPUs per server (the placement shape)

    @classmethod
    def of(cls, app: Application, server_gpus: dict) -> "SiaApplication":
        base = {f.name: getattr(app, f.name) for f in fields(Application)}
        base["restart_seconds"] = SIA_RESCALE_SECONDS.get(app.name, 30.0)
        return cls(**base, calibration=1.0 / SIA_SLOWDOWN.get(app.name, 1.0), penalty_seconds=app.restart_seconds,
                   server_gpus=dict(server_gpus))

    def placement(self, gpu: str, gpus: int, nodes: int) -> tuple[int, ...]:
        return placement_of(gpus, nodes, int(self.server_gpus.get(gpu, gpus)))

    def local_bsz_limits(self, gpu: str, placement: tuple[int, ...]) -> tuple[float, float]:
        """(largest micro-batch for this placement, largest profiled at this GPU
        count on any placement or inf): Sia's ``get_max_local_bsz`` and its
        memory correction in ``update_local_bsz``."""
        prof = self.profiles.get(gpu)
        if prof is None:
            return self.max_local_bsz, np.inf
        placement = tuple(int(p) for p in placement if p)
        key = "".join(map(str, min(placement[i:] + placement[:i] for i in range(len(placement)))))
        names = np.asarray(prof.placement)
        same = names == key
        if same.any():
            hi = float(prof.local_bsz[same].max())
        else:
            wider = (names == "") & (prof.nodes >= len(placement)) & (prof.replicas >= sum(placement))
            hi = float(prof.local_bsz[wider].max()) if wider.any() else self.max_local_bsz
        at_count = (names != "") & (prof.replicas == sum(placement))
        return hi, float(prof.local_bsz[at_count].max()) if at_count.any() else np.inf


def calibration(app) -> float:
    """Multiplier of the simulated progress rate (1 outside Sia's profiles)."""
    return getattr(app, "calibration", 1.0)


@dataclass
class GoodputJob:
    """Mutable goodput state of one elastic job."""

    target_batch: float | None  # fixed batch size (rigid runs, ncf), None = co-adapted
    atomic_bsz: int = 0
    accum_steps: int = 0
    epoch: int = 0
    progress: float = 0.0
    profile: dict = field(default_factory=dict)  # type -> {(nodes, gpus, bsz): (step, sync)}
    params: dict = field(default_factory=dict)  # type -> (7,) fitted
    dirty: set = field(default_factory=set)  # types with observations not yet fitted
    grad: tuple[float, float] | None = None

    @property
    def max_profiled(self) -> int:
        return max((g for prof in self.profile.values() for (_, g, _) in prof), default=0)


def new_goodput_job(app, batch_size: float, co_adapt: bool) -> GoodputJob:
    fixed = None if co_adapt else float(batch_size)
    if co_adapt and app.name == "ncf":
        fixed = NCF_BATCH
    return GoodputJob(fixed)


def placement_of(gpus: int, nodes: int, per_server: int) -> tuple[int, ...]:
    """GPUs per server: whole servers, the remainder on the last one."""
    out, left = [], gpus
    for _ in range(nodes):
        take = min(per_server, left)
        out.append(take)
        left -= take
    return tuple(x for x in out if x)


def fixed_batch_split(app, batch: float, replicas: int, gpu: str | None = None,
                      placement: tuple[int, ...] | None = None) -> tuple[int, int]:
    """(micro-batch, accumulation) for a fixed global batch (the peers' rule);
    a SiaApplication's micro-batch limit is that of the placement on ``gpu``."""
    hi, cap = app.max_local_bsz, np.inf
    if isinstance(app, SiaApplication) and gpu is not None and placement:
        hi, cap = app.local_bsz_limits(gpu, placement)
    local = math.ceil(batch / replicas - 1e-8)
    accum = math.ceil(local / hi - 1e-8) - 1
    if replicas == 1 and batch > app.init_batch_size:
        accum = max(1, accum)
    accum = max(accum, 0)
    atomic = math.ceil(local / (accum + 1) - 1e-8)
    atomic = int(min(atomic, cap))
    atomic = min(atomic, int(app.max_batch_size / (replicas * (accum + 1))))
    return max(atomic, 1), accum


def throughput_row(app, batch_size: float, replicas: int, gpu_types, capacity, server_gpus, co_adapt: bool) -> np.ndarray:
    """The job's throughput row for the policy: co-adapted, one GPU at the
    smallest micro-batch (Sia profiles every type on arrival); rigid, iterations/s
    at its replicas and batch size (0 where the type has too few GPUs), at the
    rate the simulation runs it (× the application's calibration)."""
    T = np.zeros(len(gpu_types))
    for j, gpu in enumerate(gpu_types):
        if co_adapt:
            step, _ = app.step_sync(gpu, (1,), app.min_local_bsz)
            T[j] = app.min_local_bsz / step
            continue
        if replicas > capacity[j]:
            continue
        per = int(server_gpus[j])
        nodes = -(-replicas // per)
        placement = placement_of(replicas, nodes, per)
        b, s = fixed_batch_split(app, batch_size, replicas, gpu, placement)
        step, sync = app.step_sync(gpu, placement, b)
        T[j] = calibration(app) / (step + s * (step - sync))
    return T


def choose_batch(job: GoodputJob, app, gpu: str, gpus: int, nodes: int) -> None:
    """Batch size and accumulation for a (re)allocation or a new epoch."""
    from optsched.goodput.model import GoodputModel

    placement = app.placement(gpu, gpus, nodes) if isinstance(app, SiaApplication) else None
    if job.target_batch is not None:
        job.atomic_bsz, job.accum_steps = fixed_batch_split(app, min(job.target_batch, app.max_batch_size), gpus,
                                                            gpu, placement)
        return
    params = job.params.get(gpu)
    if params is not None and job.grad is not None:
        hi, cap = app.local_bsz_limits(gpu, placement) if placement else (app.max_local_bsz, np.inf)
        model = GoodputModel.single(params, job.grad[0], job.grad[1], app.init_batch_size, app.max_batch_size,
                                    (app.min_local_bsz, hi))
        gp, b, s = model.optimize(np.array([[nodes]]), np.array([[gpus]]))
        if gp[0, 0] > 0:
            atomic, accum = int(b[0, 0]), int(s[0, 0])
            atomic = int(min(atomic, cap, app.max_batch_size // (gpus * (accum + 1))))
            job.atomic_bsz, job.accum_steps = max(atomic, 1), accum
            return
    job.atomic_bsz, job.accum_steps = fixed_batch_split(app, max(app.init_batch_size, app.min_local_bsz * gpus), gpus,
                                                        gpu, placement)


def advance(job: GoodputJob, app, gpu: str, gpus: int, nodes: int, per_server: int, seconds: float) -> tuple[float, bool]:
    """Run ``seconds`` of training at the configuration; returns (seconds used,
    finished). Records the step times it sees (the observations)."""
    from optsched.goodput.model import statistical_gain

    placement = placement_of(gpus, nodes, per_server)
    used = 0.0
    while seconds - used > 1e-9:
        batch = gpus * job.atomic_bsz * (job.accum_steps + 1)
        step, sync = app.step_sync(gpu, placement, job.atomic_bsz)
        t_iter = step + job.accum_steps * (step - sync)
        sqr, var = app.grad_stats(batch, job.epoch)
        gain = float(statistical_gain(sqr, var, app.init_batch_size, batch))
        job.grad = (sqr, var)
        key = (len(placement), gpus, job.atomic_bsz)
        prof = job.profile.setdefault(gpu, {})
        if key not in prof:
            prof[key] = (step, sync)
            job.dirty.add(gpu)
        rate = gain / t_iter * calibration(app)
        target = app.progress_target(job.epoch + 1)
        left = seconds - used
        if job.progress + rate * left < target:
            job.progress += rate * left
            return seconds, False
        dt = (target - job.progress) / rate
        job.progress = target
        job.epoch += 1
        used += dt
        if job.epoch >= app.max_epochs:
            return used, True
        choose_batch(job, app, gpu, gpus, nodes)  # re-scale the batch size between epochs
    return seconds, False


def refit(jobs) -> None:
    """Refit the throughput parameters of every job with new observations (JAX)."""
    from optsched.goodput.fit import Observations, fit_params

    for job in jobs:
        for gpu in sorted(job.dirty):
            rows = job.profile[gpu]
            keys = np.array(list(rows), dtype=float)
            vals = np.array(list(rows.values()), dtype=float)
            obs = Observations.from_arrays(keys[:, 0], keys[:, 1], keys[:, 2], vals[:, 0], vals[:, 1])
            job.params[gpu] = fit_params(obs).params
        job.dirty.clear()


def elastic_info(gjobs, apps, is_elastic: np.ndarray, configs, restarts: np.ndarray, restart_seconds: np.ndarray,
                 gpu_types, server_gpus: np.ndarray) -> ElasticInfo:
    """ElasticInfo for the active jobs (rows of rigid jobs: is_elastic False)."""
    n, k = len(gjobs), len(gpu_types)
    params = np.full((n, k, 7), np.nan)
    cur_g = np.zeros((n, k), dtype=int)
    cur_n = np.zeros((n, k), dtype=int)
    grad = np.ones((n, 2))
    ibs, mbs, lo, hi, cap = (np.ones(n) for _ in range(5))
    penalty = np.array(restart_seconds, dtype=float)
    for m, (job, app) in enumerate(zip(gjobs, apps)):
        if isinstance(app, SiaApplication) and penalty[m] == app.restart_seconds:
            penalty[m] = app.penalty_seconds  # the policy's figure, not the simulated checkpoint-restore
        if configs[m] is not None:
            t, g, nodes = configs[m]
            cur_g[m, t], cur_n[m, t] = g, nodes
        if job is None:
            continue
        for j, gpu in enumerate(gpu_types):
            if gpu in job.params:
                params[m, j] = job.params[gpu]
        grad[m] = job.grad or app.grad_stats(app.init_batch_size, 0)
        ibs[m], mbs[m], lo[m], hi[m] = app.init_batch_size, app.max_batch_size, app.min_local_bsz, app.max_local_bsz
        cap[m] = 1.0 if app.name == "ncf" else min(max(2 * job.max_profiled, 1), 64, app.max_batch_size // app.min_local_bsz)
    return ElasticInfo(
        is_elastic=np.asarray(is_elastic, dtype=bool), params=params, grad_sqr=grad[:, 0], grad_var=grad[:, 1],
        init_batch_size=ibs, max_batch_size=mbs, min_local_bsz=lo, max_local_bsz=hi,
        min_gpus=np.ones(n), max_gpus=cap, num_restarts=np.asarray(restarts, float),
        restart_seconds=penalty, current_gpus=cur_g, current_nodes=cur_n,
        server_gpus=np.asarray(server_gpus, dtype=int),
    )


_APPS: dict = {}


def applications_for(cluster, names, root=None) -> dict:
    """The profiled applications ``names`` for a cluster's GPU types (fitted
    once per process): Sia's per-type profiles when every type is one of
    Sia's, else Pollux's on one type. Unknown names are left out (the caller
    names the row that uses one; ``available_applications`` lists them all)."""
    from optsched.goodput.profiles import load_application

    folder, suffixes, skip, sia = _profiles(cluster, root)
    types = tuple(sorted(cluster.gpus))
    out = {}
    if sia:
        from optsched.sim.jobs import server_gpus

        per_server = dict(zip(types, server_gpus(cluster, types).tolist()))
    for name in sorted(set(names)):
        # a name is one folder of the profiles ("" or "../x" would load the root or outside it)
        if name in skip or not name or name in (".", "..") or Path(name).name != name or not (folder / name).is_dir():
            continue
        key = (str(folder), types, name)
        if key not in _APPS:
            _APPS[key] = load_application(folder / name, suffixes)
        out[name] = SiaApplication.of(_APPS[key], per_server) if sia else _APPS[key]
    return out


def available_applications(cluster, root=None) -> list[str]:
    """Every application with profiles for the cluster's GPU types (``applications_for``'s folder)."""
    folder, _, skip, _ = _profiles(cluster, root)
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name not in skip)


def _profiles(cluster, root=None):
    """(profile folder, file suffix per type, applications to skip, Sia's layout?) for a cluster."""
    from pathlib import Path

    from optsched.goodput.profiles import SIA_GPU_TYPES, peer_data_dir
    from optsched.model import OptschedError

    types = tuple(sorted(cluster.gpus))
    base = Path(root or peer_data_dir())
    if set(types) <= set(SIA_GPU_TYPES):
        folder, suffixes = base / "sia" / "traces", {t: t for t in types}
        skip = {"gpt_pmp"}  # pipeline-parallel: not modelled
        sia = True
    elif len(types) == 1:
        folder, suffixes, skip, sia = base / "pollux" / "profiles", {None: types[0]}, set(), False
    else:
        raise OptschedError(f"--cluster: elastic jobs run on one GPU type or on Sia's types "
                            f"({', '.join(SIA_GPU_TYPES)}); got {', '.join(types)}")
    if not folder.is_dir():
        raise OptschedError(f"profiles: application profiles not found at {folder} (set OPTSCHED_PEER_DATA)")
    return folder, suffixes, skip, sia
