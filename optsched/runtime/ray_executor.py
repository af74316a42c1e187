"""The Ray executor: every job incarnation is a Ray task pinned to its slots.

``pip install 'optsched[ray]'``. Two modes:

- **local** (no ``--address``): starts a Ray instance on this machine with
  logical GPU resources, one per slot of ``--cluster`` (default one slot per
  CPU core), plus one custom resource per slot
  (``optsched_slot_<server>_<gpu>``). An incarnation's task requests exactly
  the custom resources of the slots the allocator chose and as many logical
  GPUs, so Ray itself refuses to put two jobs on one slot.
- **joined** (``--address HOST:PORT`` or ``auto``): the cluster is read from
  Ray: every alive node with GPUs is a server (its type from Ray's
  ``accelerator_type:*`` resource, else ``gpu``); when no node has GPUs, each
  node's CPUs are slots of type ``slot``. A task requests ``num_gpus`` (or
  ``num_cpus``) = its slot count with a hard node-affinity to the chosen
  node; Ray picks the device indices and sets ``CUDA_VISIBLE_DEVICES``.

The task (in Ray's pooled workers, warmed at start with tasks of the jobs'
resource shape — Ray keeps the workers of GPU tasks apart — so a launch costs
milliseconds) starts the job's command as a subprocess in its own process
group with the same environment as the local executor and waits for it; the
runtime polls the task's result and, to kill a job, runs a small task on the
job's node that kills its process group. A task that has not started its job
yet is cancelled without ``force``: a queued one never runs, a starting one
kills the job it started, and the pooled worker lives on. (A forced cancel
kills the worker, after Ray has already reported the task cancelled: the next
task of the same slots could be handed to the dying worker and fail with it —
a job reported failed, 'signal 9', that never ran — and every later launch
waited for a cold worker, longer than a round on a loaded machine.) The
lease, progress and checkpoint files live in the run directory: in joined
mode it must be on a filesystem every node sees (NFS), or the job cannot
find its lease — this is the documented limitation.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time

from optsched.model import Cluster, GpuSlot, OptschedError, Server
from optsched.runtime.executor import Launch, job_env, parse_types

log = logging.getLogger("optsched.runtime")


def _ray():
    try:
        import ray  # noqa: F401
    except ImportError:
        raise OptschedError("--executor ray: Ray is not installed (pip install 'optsched[ray]')") from None
    return ray


# Ray's raylet gives its own agents (Python processes) a fixed time to start (about 15 s), whatever the
# machine's load; on a busy machine they can take longer and the start fails with this (seen at load 21 on
# 2 cores). The start is then tried again, afresh.
STARTUP_TIMED_OUT = "timed out during startup"
START_ATTEMPTS = 3


def start_local(ray, **options) -> None:
    """``ray.init(address="local", **options)``, started again (up to START_ATTEMPTS times) when
    Ray's node timed out during startup; then an OptschedError says why in one line."""
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            ray.init(address="local", **options)
            return
        except Exception as e:  # noqa: BLE001 — Ray raises a bare Exception for it
            if STARTUP_TIMED_OUT not in str(e):
                raise
            ray.shutdown()
            if attempt == START_ATTEMPTS:
                raise OptschedError(f"--executor ray: the local Ray did not start in {START_ATTEMPTS} attempts (its "
                                    "node timed out during startup: a machine this busy gives its agents too little "
                                    "CPU)") from None
            log.warning("local Ray timed out during startup (a busy machine); starting it again")


def slot_resource(server: str, gpu: int) -> str:
    return "optsched_slot_" + re.sub(r"[^A-Za-z0-9_]", "_", server) + f"_{gpu}"


LAUNCHER_FILE = "launcher.json"


def _run_job(command, env, cwd, log_path, real_gpus: bool, incarnation: str = ""):
    """A Ray task: run the job's command in its own process group and wait for
    it. Its pid (= process group), node, incarnation and Ray worker go to
    ``launcher.json`` so the runtime can kill it through ``_kill_group`` on the
    same node.

    A (non-forced) ``ray.cancel`` interrupts the task (a KeyboardInterrupt in
    its main thread): the task then kills the job it started. The interrupt is
    held off from the job's start to ``launcher.json``, so it never lands
    between the fork and ``proc`` (a job started and left behind)."""
    import json
    import threading

    import ray

    full = dict(os.environ)
    if not real_gpus:
        full.pop("CUDA_VISIBLE_DEVICES", None)  # logical GPUs: nothing to see
    full.update(env)
    full["OPTSCHED_PARENT_PID"] = str(os.getpid())
    os.makedirs(cwd, exist_ok=True)
    interrupted = []
    held = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.append(True)) if held else None
    proc = None
    try:
        try:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(list(command), env=full, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
            info = {"pid": proc.pid, "node": ray.get_runtime_context().get_node_id(), "incarnation": incarnation,
                    "worker": os.getpid(), "gpu_ids": [str(i) for i in ray.get_gpu_ids()] if real_gpus else []}
            tmp = os.path.join(cwd, ".launcher.tmp")
            with open(tmp, "w") as f:
                json.dump(info, f)
            os.replace(tmp, os.path.join(cwd, LAUNCHER_FILE))
        finally:
            if held:
                signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)
        if interrupted:
            raise KeyboardInterrupt("cancelled while starting the job")
        return proc.wait()
    finally:
        if proc is not None and proc.poll() is None:  # the task is being cancelled: take the job with it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()


def _kill_group(pid: int) -> bool:
    try:
        os.killpg(pid, signal.SIGKILL)
        return True
    except (ProcessLookupError, PermissionError):
        return False


class RayHandle:
    def __init__(self, executor: "RayExecutor", ref, job_dir: str, incarnation: str = ""):
        self._ex = executor
        self.ref = ref
        self.job_dir = job_dir
        self.incarnation = incarnation
        self._rc = None
        self.error: str | None = None  # why the task itself failed (its worker died, ...): not the job's exit

    def poll(self) -> int | None:
        if self._rc is not None:
            return self._rc
        ray = self._ex.ray
        ready, _ = ray.wait([self.ref], timeout=0)
        if not ready:
            return None
        try:
            self._rc = int(ray.get(self.ref))
        except Exception as e:  # noqa: BLE001 — the task failed or was cancelled
            self._rc = -9
            self.error = f"ray task: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
        return self._rc

    def _launcher(self) -> dict | None:
        """This incarnation's ``launcher.json`` (None before its task started the job)."""
        import json

        try:
            with open(os.path.join(self.job_dir, LAUNCHER_FILE)) as f:
                info = json.load(f)
        except (OSError, ValueError):
            return None
        return info if str(info.get("incarnation", "")) == self.incarnation else None

    def kill(self, timeout: float = 30.0) -> None:
        """SIGKILL the job's process group on its node, then wait for the task.
        A task that has not started the job yet is cancelled without force (a
        queued one never runs; a starting one kills what it started), so its
        pooled worker survives for the next launch."""
        ray = self._ex.ray
        if self.poll() is not None:
            return
        deadline = time.monotonic() + timeout
        info = self._launcher()
        if info is None:
            ray.cancel(self.ref, force=False)
            while info is None and self.poll() is None and time.monotonic() < deadline:
                ray.wait([self.ref], timeout=0.02)
                info = self._launcher()  # it started the job meanwhile: kill that below
        if info is not None and self.poll() is None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            killer = self._ex.kill_task.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(info["node"], soft=False))
            try:
                ray.get(killer.remote(int(info["pid"])), timeout=max(deadline - time.monotonic(), 1.0))
            except Exception:  # noqa: BLE001
                pass
        try:
            ray.wait([self.ref], timeout=max(deadline - time.monotonic(), 1.0))
        except Exception:  # noqa: BLE001
            pass
        if self.poll() is None:  # a task stuck past every other way (Ray broken): its worker goes, the job with it
            ray.cancel(self.ref, force=True)
            try:
                ray.wait([self.ref], timeout=10)
            except Exception:  # noqa: BLE001
                pass
        if self.poll() is None:
            self._rc = -9


def _warm(seconds: float) -> int:
    import time

    time.sleep(seconds)
    return os.getpid()


class RayExecutor:
    name = "ray"

    def __init__(self, cluster_spec: str | None = None, address: str | None = None, run_id: str = ""):
        self.ray = _ray()
        self.address = address
        self.run_id = run_id
        self.real_gpus = False
        self._started = False
        self._node_of: dict[str, str] = {}  # server -> Ray node id (joined mode)
        self._use_cpus = False
        self._handles: list[RayHandle] = []
        self.warm_workers: set[int] = set()
        if address:
            self._init()
            self.cluster = self._cluster_from_ray(cluster_spec)
        else:
            gpus = parse_types(cluster_spec) if cluster_spec else {"slot": os.cpu_count() or 1}
            self.cluster = Cluster(gpus=gpus, servers=[Server(id=f"local-{t}", gpu_type=t, gpus=c)
                                                       for t, c in gpus.items()])

    def _init(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        opts = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
        if self.address:
            try:
                ray.init(address=self.address, **opts)
            except (ConnectionError, RuntimeError) as e:
                hint = ("; a cluster started with token authentication needs RAY_AUTH_MODE=token here"
                        if os.environ.get("RAY_AUTH_MODE") != "token" else "")
                raise OptschedError(f"--address {self.address}: cannot join the Ray cluster "
                                    f"({str(e).splitlines()[0][:200]}){hint}") from None
        else:
            resources = {slot_resource(s.id, g): 1.0 for s in self.cluster.servers for g in range(s.gpus)}
            start_local(ray, num_cpus=os.cpu_count() or 1, num_gpus=sum(self.cluster.gpus.values()),
                        resources=resources, **opts)
        self._started = True

    def _cluster_from_ray(self, cluster_spec: str | None) -> Cluster:
        if cluster_spec:
            raise OptschedError("--cluster: with --address the cluster is read from Ray's nodes")
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        servers, gpus = [], {}
        with_gpus = [n for n in nodes if n["Resources"].get("GPU", 0) >= 1]
        self._use_cpus = not with_gpus
        for i, n in enumerate(with_gpus or nodes):
            res = n["Resources"]
            count = int(res.get("GPU", 0) if with_gpus else res.get("CPU", 0))
            if count < 1:
                continue
            acc = [k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")]
            t = acc[0].lower() if acc and with_gpus else ("gpu" if with_gpus else "slot")
            sid = f"{n.get('NodeManagerHostname', 'node')}-{i}"
            servers.append(Server(id=sid, gpu_type=t, gpus=count))
            gpus[t] = gpus.get(t, 0) + count
            self._node_of[sid] = n["NodeID"]
        if not servers:
            raise OptschedError(f"--address {self.address}: the Ray cluster has no node with GPUs or CPUs")
        self.real_gpus = bool(with_gpus)
        return Cluster(gpus=gpus, servers=servers)

    def start(self) -> None:
        """Start Ray and warm its worker pool: one worker per slot (up to 16),
        warmed by a task of a one-slot job's resource shape on that slot — Ray
        keeps the workers of GPU tasks apart, so a warm-up without GPUs would
        leave the first launches a cold worker start (≈1 s idle, seconds on a
        loaded machine: longer than a round) — and one for the kill task. A
        launch then costs milliseconds, not a Python start."""
        self._init()
        ray = self.ray
        self.run_task = ray.remote(max_retries=0)(_run_job)
        self.kill_task = ray.remote(num_cpus=0, max_retries=0)(_kill_group)
        warm = ray.remote(max_retries=0)(_warm)
        slots = [GpuSlot(server=s.id, gpu_type=s.gpu_type, gpu=g) for s in self.cluster.servers for g in range(s.gpus)]
        slots = slots[:16]
        kill_ref = warm.options(num_cpus=0).remote(0.2)
        seconds, deadline = 0.2, time.monotonic() + 120
        while True:  # longer, until the slots' tasks overlap: one worker each (a cold start can outlast 0.2 s)
            refs = [warm.options(**self._task_options((slot,))).remote(seconds) for slot in slots]
            ready, pending = ray.wait(refs, num_returns=len(refs), timeout=max(deadline - time.monotonic(), 1.0))
            for ref in pending:  # a joined cluster's busy slots: those launches start cold
                ray.cancel(ref)
            self.warm_workers = set(ray.get(ready))  # pids of the slots' warm workers
            # (tasks of 0.2, 0.8, 3.2 and 12.8 s: cold worker starts take seconds on a busy machine — the whole
            # warm-up took 20-33 s at load 11-13 on 2 cores — and a slot left without a warm worker starts its
            # jobs cold, longer than a round)
            if pending or len(self.warm_workers) >= len(slots) or seconds > 12:
                break
            seconds *= 4
        ray.wait([kill_ref], timeout=max(deadline - time.monotonic(), 1.0))

    def _task_options(self, slots) -> dict:
        """Ray options of a task holding ``slots`` (all on one server)."""
        n = len(slots)
        if self.address:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            strategy = NodeAffinitySchedulingStrategy(self._node_of[slots[0].server], soft=False)
            res = {"num_cpus": n, "num_gpus": 0} if self._use_cpus else {"num_cpus": 0, "num_gpus": n}
            return dict(scheduling_strategy=strategy, **res)
        return dict(num_cpus=0, num_gpus=n, resources={slot_resource(s.server, s.gpu): 1.0 for s in slots})

    def launch(self, launch: Launch) -> RayHandle:
        opts = self._task_options(launch.slots)
        os.makedirs(launch.job_dir, exist_ok=True)
        try:
            os.unlink(os.path.join(launch.job_dir, LAUNCHER_FILE))
        except FileNotFoundError:
            pass
        env = job_env(launch, self.run_id, 0, False)
        env.pop("OPTSCHED_PARENT_PID", None)
        incarnation = str(launch.env.get("OPTSCHED_INCARNATION", ""))
        ref = self.run_task.options(**opts).remote(launch.command, env, launch.job_dir,
                                                  os.path.join(launch.job_dir, "output.log"), self.real_gpus,
                                                  incarnation)
        h = RayHandle(self, ref, launch.job_dir, incarnation)
        self._handles.append(h)
        return h

    def close(self) -> None:
        for h in self._handles:
            if h.poll() is None:
                h.kill()
        self._handles = []
        if self._started and not self.address:
            self.ray.shutdown()


__all__ = ["RayExecutor", "RayHandle", "slot_resource", "start_local"]
