"""Executors: where a placed job's process runs.

An executor launches one job incarnation on its slots and returns a handle the
runtime polls and, if it must, kills. The lease, progress and checkpoint
travel through files in the job's directory (optsched/runtime/job.py), so
the executors only start and stop processes.

- ``LocalExecutor``: subprocesses on this machine, each in its own process
  group (a kill takes its children too). A slot is a GPU when the machine has
  GPUs (``CUDA_VISIBLE_DEVICES`` is set to the slots' indices), otherwise a
  logical slot.
- ``RayExecutor`` (optsched/runtime/ray_executor.py): one Ray actor per
  incarnation holding the slots' resources on the chosen node.
- ``SlurmExecutor`` (optsched/runtime/slurm_executor.py): one ``sbatch`` per
  incarnation on the chosen node with typed GPUs (``--gres=gpu:TYPE:N``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

from optsched.model import Cluster, GpuSlot, OptschedError, Server


@dataclass(frozen=True)
class Launch:
    """One incarnation of a job: its command, slots and environment."""

    job_id: str
    command: tuple[str, ...]
    slots: tuple[GpuSlot, ...]
    job_dir: str
    env: dict = field(default_factory=dict)  # added to the inherited environment


def slot_names(slots) -> str:
    return ",".join(f"{s.server}/{s.gpu_type}/{s.gpu}" for s in slots)


def job_env(launch: Launch, run_id: str, parent_pid: int, real_gpus: bool) -> dict:
    env = {
        "OPTSCHED_JOB_ID": launch.job_id,
        "OPTSCHED_JOB_DIR": launch.job_dir,
        "OPTSCHED_SLOTS": slot_names(launch.slots),
        "OPTSCHED_RUN_ID": run_id,
        "OPTSCHED_PARENT_PID": str(parent_pid),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PYTHONUNBUFFERED": "1",
    }
    if real_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(s.gpu) for s in launch.slots)
    env.update(launch.env)
    return env


def detect_gpus() -> list[str]:
    """GPU names on this machine (``nvidia-smi -L``), [] when there are none."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split(":", 1)[1].split("(")[0].strip() for line in out.splitlines() if line.startswith("GPU ")]


def local_cluster(spec: str | None = None) -> tuple[Cluster, bool]:
    """The cluster of this machine: ``spec`` (``TYPE=COUNT,...``, one server per
    type, ``local-<type>``) when given; else its GPUs (type from their name),
    else one slot per CPU core (``slot=<cores>``). Returns (cluster, real GPUs)."""
    if spec:
        gpus = parse_types(spec)
        return Cluster(gpus=gpus, servers=[Server(id=f"local-{t}", gpu_type=t, gpus=c) for t, c in gpus.items()]), False
    names = detect_gpus()
    if names:
        t = names[0].lower().replace("nvidia", "").strip().split()[0] if names[0] else "gpu"
        if any(n != names[0] for n in names):
            t = "gpu"
        return Cluster(gpus={t: len(names)}, servers=[Server(id="local", gpu_type=t, gpus=len(names))]), True
    n = os.cpu_count() or 1
    return Cluster(gpus={"slot": n}, servers=[Server(id="local-slot", gpu_type="slot", gpus=n)]), False


def parse_types(spec: str) -> dict[str, int]:
    gpus: dict[str, int] = {}
    for part in spec.split(","):
        name, eq, count = part.partition("=")
        name = name.strip()
        if not eq or not name:
            raise OptschedError(f"--cluster: {part!r} is not TYPE=COUNT (e.g. slot=4)")
        try:
            c = int(count)
        except ValueError:
            raise OptschedError(f"--cluster: count {count!r} for {name!r} is not an integer") from None
        if c <= 0:
            raise OptschedError(f"--cluster: count for {name!r} must be positive, got {c}")
        gpus[name] = c
    return gpus


class LocalHandle:
    def __init__(self, proc: subprocess.Popen, log):
        self.proc = proc
        self.pid = proc.pid
        self._log = log

    def poll(self) -> int | None:
        rc = self.proc.poll()
        if rc is not None and self._log is not None:
            self._log.close()
            self._log = None
        return rc

    def kill(self) -> None:
        """SIGKILL the job's process group (its children too) and reap it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.poll()


class LocalExecutor:
    """Subprocesses on this machine."""

    name = "local"

    def __init__(self, cluster_spec: str | None = None, run_id: str = ""):
        self.cluster, self.real_gpus = local_cluster(cluster_spec)
        self.run_id = run_id

    def start(self) -> None:
        pass

    def launch(self, launch: Launch) -> LocalHandle:
        os.makedirs(launch.job_dir, exist_ok=True)
        log = open(os.path.join(launch.job_dir, "output.log"), "ab")
        env = {**os.environ, **job_env(launch, self.run_id, os.getpid(), self.real_gpus)}
        try:
            proc = subprocess.Popen(list(launch.command), env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=launch.job_dir, start_new_session=True)
        except OSError as e:
            log.close()
            raise OptschedError(f"job {launch.job_id}: cannot start {launch.command[0]!r}: {e.strerror}") from None
        return LocalHandle(proc, log)

    def close(self) -> None:
        pass


def wait_all(handles, timeout: float, poll: float = 0.005) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and any(h.poll() is None for h in handles):
        time.sleep(poll)


def make_executor(name: str, cluster_spec: str | None = None, address: str | None = None, run_id: str = ""):
    if name == "local":
        if address:
            raise OptschedError("--address: only the ray executor joins a cluster")
        return LocalExecutor(cluster_spec, run_id)
    if name == "ray":
        from optsched.runtime.ray_executor import RayExecutor

        return RayExecutor(cluster_spec, address, run_id)
    if name == "slurm":
        from optsched.runtime.slurm_executor import SlurmExecutor

        return SlurmExecutor(cluster_spec, address, run_id)
    raise OptschedError(f"--executor: unknown executor {name!r} (choose from local, ray, slurm)")


__all__ = ["Launch", "LocalExecutor", "LocalHandle", "detect_gpus", "job_env", "local_cluster", "make_executor",
           "parse_types", "slot_names", "wait_all"]
