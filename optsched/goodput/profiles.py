"""Per-application goodput models built from the peers' measured profiles.

Pollux (`pollux/profiles/<app>/`): `placements.csv` (placement digit string =
GPUs per node, local_bsz, step_time, sync_time), `scalability.csv` (num_nodes,
num_replicas, local_bsz, step_time, sync_time) and `validation-<M>.csv` (one row
per epoch: progress, iteration, metric, grad_sqr, grad_var) at batch size M.
Sia (`sia/traces/<app>/`): the same per GPU type, `placements-<gpu>.csv`,
`scalability-<gpu>.csv` (aws = nodes of 4 T4, dgx-ext = 8 A100, rtx = 8 RTX 2080Ti).

An Application holds, per GPU type, the fitted 7 parameters (optsched.goodput.fit)
and the raw measurements (the "true" step times the simulator interpolates, as the
peers' simulators do), plus the efficiency curves. Settings as in Pollux's
simulator (`applications.py`): M0 = smallest validated batch size, M_max = the
largest, micro-batch limits from the profiles (yolov3: at most 8), and the epochs
after which a job finishes (bert 2, cifar10 100, ncf 10, imagenet 90,
deepspeech2 80, yolov3 50). Restart seconds per application as measured by Sia
(`get_restart_penalty`: deepspeech2 25, imagenet 250, cifar10 30, bert 120,
yolov3 45, others 30).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from optsched.goodput.fit import FitResult, Observations, fit_params
from optsched.goodput.model import GoodputModel, iteration_time
from optsched.model import OptschedError

MAX_EPOCHS = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80, "yolov3": 50}
MAX_LOCAL_BSZ = {"yolov3": 8}
RESTART_SECONDS = {"deepspeech2": 25.0, "imagenet": 250.0, "cifar10": 30.0, "bert": 120.0, "yolov3": 45.0}
SIA_GPU_TYPES = {"aws": 4, "dgx-ext": 8, "rtx": 8}  # GPUs per node of Sia's default cluster


def peer_data_dir() -> Path:
    return Path(os.environ.get("OPTSCHED_PEER_DATA", Path(__file__).resolve().parents[2].parent / "shared" / "data"))


@dataclass(frozen=True)
class Profile:
    """Measured step times of one application on one GPU type."""

    nodes: np.ndarray
    replicas: np.ndarray
    local_bsz: np.ndarray
    step_time: np.ndarray
    sync_time: np.ndarray
    placement: tuple[str, ...]  # "" for scalability rows (placement unknown)

    def observations(self) -> Observations:
        return Observations.from_arrays(self.nodes, self.replicas, self.local_bsz, self.step_time, self.sync_time)


@dataclass(frozen=True)
class Application:
    name: str
    init_batch_size: float
    max_batch_size: float
    min_local_bsz: float
    max_local_bsz: float
    max_epochs: int
    restart_seconds: float
    batch_sizes: np.ndarray  # (B,) validated batch sizes, ascending
    progress: np.ndarray  # (B, E) statistical progress after each epoch
    grad_sqr: np.ndarray  # (B, E)
    grad_var: np.ndarray  # (B, E)
    params: dict[str, np.ndarray] = field(default_factory=dict)  # gpu type -> (7,)
    profiles: dict[str, Profile] = field(default_factory=dict)
    fits: dict[str, FitResult] = field(default_factory=dict)

    # -- efficiency curves -------------------------------------------------------------

    def grad_stats(self, batch_size: float, epoch: int) -> tuple[float, float]:
        """(grad_sqr, grad_var) during `epoch`, linear in the batch size between the
        validated ones (clamped outside), as the peers' simulators interpolate."""
        e = int(min(max(epoch, 0), self.progress.shape[1] - 1))
        sqr = float(np.interp(batch_size, self.batch_sizes, self.grad_sqr[:, e]))
        var = float(np.interp(batch_size, self.batch_sizes, self.grad_var[:, e]))
        return sqr, var

    def progress_target(self, epoch: int) -> float:
        """Progress needed to finish `epoch` epochs (min over batch sizes, as the peers)."""
        if epoch <= 0:
            return 0.0
        return float(self.progress[:, min(epoch, self.progress.shape[1]) - 1].min())

    @property
    def total_progress(self) -> float:
        return self.progress_target(self.max_epochs)

    # -- models --------------------------------------------------------------------------

    def goodput_model(self, gpu_type: str, epoch: int = 0, batch_size: float | None = None) -> GoodputModel:
        sqr, var = self.grad_stats(batch_size or self.init_batch_size, epoch)
        return GoodputModel.single(self.params[gpu_type], sqr, var, self.init_batch_size, self.max_batch_size,
                                   (self.min_local_bsz, self.max_local_bsz))

    def step_time(self, gpu_type: str, placement: tuple[int, ...], local_bsz: float, accum_steps: int = 0) -> float:
        step, sync = self.step_sync(gpu_type, placement, local_bsz)
        return step + accum_steps * (step - sync)

    def step_sync(self, gpu_type: str, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        """(step, sync) seconds of one micro-batch step: measured placement interpolated
        in the micro-batch when profiled (the peers' rule), else the fitted model."""
        from optsched.goodput.model import accum_time

        prof = self.profiles.get(gpu_type)
        placement = tuple(int(p) for p in placement if p)
        nodes, replicas = len(placement), sum(placement)
        if prof is not None:
            key = "".join(map(str, min(placement[i:] + placement[:i] for i in range(len(placement)))))
            rows = np.flatnonzero(np.asarray(prof.placement) == key)
            if len(rows) >= 1:
                order = rows[np.argsort(prof.local_bsz[rows])]
                x = prof.local_bsz[order]
                if x[0] <= local_bsz <= x[-1]:
                    return (float(np.interp(local_bsz, x, prof.step_time[order])),
                            float(np.interp(local_bsz, x, prof.sync_time[order])))
        step = float(iteration_time(self.params[gpu_type], nodes, replicas, local_bsz, 0))
        return step, max(step - float(accum_time(self.params[gpu_type], local_bsz)), 0.0)


def _read_profile(app_dir: Path, gpu: str | None) -> Profile | None:
    import pandas as pd

    suffix = f"-{gpu}" if gpu else ""
    pl_path, sc_path = app_dir / f"placements{suffix}.csv", app_dir / f"scalability{suffix}.csv"
    if not pl_path.exists():
        return None
    pl = pd.read_csv(pl_path, dtype={"placement": str})
    parts = [(
        pl.placement.str.len().to_numpy(float),
        pl.placement.map(lambda p: sum(map(int, p))).to_numpy(float),
        pl.local_bsz.to_numpy(float), pl.step_time.to_numpy(float), pl.sync_time.to_numpy(float),
        tuple(pl.placement),
    )]
    if sc_path.exists():
        sc = pd.read_csv(sc_path)
        parts.append((sc.num_nodes.to_numpy(float), sc.num_replicas.to_numpy(float), sc.local_bsz.to_numpy(float),
                      sc.step_time.to_numpy(float), sc.sync_time.to_numpy(float), ("",) * len(sc)))
    cat = [np.concatenate([p[i] for p in parts]) for i in range(5)]
    return Profile(*cat, placement=sum((p[5] for p in parts), ()))


def _read_validation(app_dir: Path):
    import pandas as pd

    curves = {}
    for path in app_dir.glob("validation-*.csv"):
        curves[int(path.stem.split("-")[-1])] = pd.read_csv(path)
    if not curves:
        raise OptschedError(f"profiles: no validation-*.csv efficiency curves in {app_dir}")
    sizes = sorted(curves)
    E = min(len(df) for df in curves.values())
    stack = lambda col: np.array([curves[b][col].to_numpy(float)[:E] for b in sizes])  # noqa: E731
    return np.array(sizes, float), stack("progress"), stack("grad_sqr"), stack("grad_var")


def load_application(app_dir: Path, gpu_types: dict[str | None, str] | None = None, fit: bool = True) -> Application:
    """One application; gpu_types maps file suffix (None = Pollux's unsuffixed files)
    to the GPU type name used in the cluster."""
    app_dir = Path(app_dir)
    name = app_dir.name
    gpu_types = gpu_types or {None: "gpu"}
    sizes, progress, sqr, var = _read_validation(app_dir)
    profiles: dict[str, Profile] = {}
    for suffix, gpu in gpu_types.items():
        prof = _read_profile(app_dir, suffix)
        if prof is not None:
            profiles[gpu] = prof
    if not profiles:
        raise OptschedError(f"profiles: no placements CSV for {name} in {app_dir}")
    fits = {gpu: fit_params(p.observations()) for gpu, p in profiles.items()} if fit else {}
    any_prof = next(iter(profiles.values()))
    return Application(
        name=name,
        init_batch_size=float(sizes[0]),
        max_batch_size=float(sizes[-1]),
        min_local_bsz=float(min(p.local_bsz.min() for p in profiles.values())),
        max_local_bsz=float(MAX_LOCAL_BSZ.get(name, max(p.local_bsz.max() for p in profiles.values()))),
        max_epochs=int(min(MAX_EPOCHS.get(name, progress.shape[1]), progress.shape[1])),
        restart_seconds=RESTART_SECONDS.get(name, 30.0),
        batch_sizes=sizes, progress=progress, grad_sqr=sqr, grad_var=var,
        params={g: f.params for g, f in fits.items()},
        profiles=profiles, fits=fits,
    ) if any_prof is not None else None


def pollux_applications(root: Path | None = None, gpu_type: str = "gpu") -> dict[str, Application]:
    """Pollux's six applications (one GPU type: T4 nodes of 4)."""
    base = Path(root or peer_data_dir()) / "pollux" / "profiles"
    if not base.is_dir():
        raise OptschedError(f"profiles: Pollux profiles not found at {base} (set OPTSCHED_PEER_DATA)")
    return {d.name: load_application(d, {None: gpu_type}) for d in sorted(base.iterdir()) if d.is_dir()}


def sia_applications(root: Path | None = None, gpu_types=tuple(SIA_GPU_TYPES)) -> dict[str, Application]:
    """Sia's applications with one fitted model per GPU type (gpt_pmp skipped: pipeline-parallel)."""
    base = Path(root or peer_data_dir()) / "sia" / "traces"
    if not base.is_dir():
        raise OptschedError(f"profiles: Sia traces not found at {base} (set OPTSCHED_PEER_DATA)")
    return {
        d.name: load_application(d, {g: g for g in gpu_types})
        for d in sorted(base.iterdir()) if d.is_dir() and d.name != "gpt_pmp"
    }


def fit_error(app: Application, gpu_type: str) -> float:
    """Mean relative error of the fitted model's step time over the profile rows."""
    p = app.profiles[gpu_type]
    pred = iteration_time(app.params[gpu_type], p.nodes, p.replicas, p.local_bsz, 0)
    return float(np.mean(np.abs(pred - p.step_time) / p.step_time))
