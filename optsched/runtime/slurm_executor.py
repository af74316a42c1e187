"""The Slurm executor: every job incarnation is a Slurm batch job on the chosen node.

``optsched run TRACE --executor slurm`` (Slurm's commands on PATH, ``$SLURM_CONF``
pointing at the cluster; ``optsched slurm cluster up`` starts a local one).

- **The cluster** is read from ``scontrol show nodes``: every node with typed
  GPUs (``Gres=gpu:TYPE:N``) is a server of that type and count.
- **A launch** is ``sbatch`` of a small script with ``--nodes=1
  --nodelist=NODE --gres=gpu:TYPE:N`` that runs the job's command in its job
  directory, with the job's environment (lease, slots, incarnation) exported;
  a placement spanning nodes is a heterogeneous job, one component per node
  with its exact GPU count. Slurm chooses the GPU indices on each node and
  counts them, so two jobs never hold one GPU (``scontrol -d show jobs``
  shows it; the tests check it every round).
- **Preemption and migration** go through the lease, as for the other
  executors: the runtime revokes it, the job library checkpoints at the next
  iteration boundary and exits 75; the batch job ends with it, and the next
  incarnation is a new ``sbatch`` (on the new node for a migration) that
  restores the checkpoint. A kill is ``scancel --signal=KILL`` then ``scancel``.
- **Progress** comes from the job library's files in the job directory: the
  run folder must be on a filesystem the nodes share (the local cluster is one
  host, so any folder is).
- **Exit status**: a handle polls Slurm (one ``squeue`` for every handle, at
  most every ``poll_every`` seconds); once Slurm lists the job as ended, the
  exit code comes from the script's own exit file, else ``scontrol show job``'s
  ``ExitCode``. A job Slurm cancelled or lost is -9. The slots are free for the
  runtime only once Slurm has released them (not while the job is completing).
"""

from __future__ import annotations

import os
import shlex
import time
from collections import Counter

from optsched.model import Cluster, OptschedError
from optsched.runtime.executor import Launch, job_env

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
         "PREEMPTED", "SPECIAL_EXIT", "REVOKED"}


class SlurmHandle:
    def __init__(self, ex: "SlurmExecutor", slurm_id: str, job_dir: str, incarnation: str):
        self._ex = ex
        self.slurm_id = slurm_id
        self.job_dir = job_dir
        self.incarnation = incarnation
        self._rc: int | None = None
        self.pid = slurm_id  # what the runtime's records call the process

    def _exit_file(self) -> str:
        return os.path.join(self.job_dir, f".slurm-exit-{self.incarnation}")

    def poll(self) -> int | None:
        if self._rc is not None:
            return self._rc
        state = self._ex.state(self.slurm_id)
        if state is not None and state not in ENDED:
            return None
        self._rc = self._exit_code(state)
        return self._rc

    def _exit_code(self, state: str | None) -> int:
        try:
            with open(self._exit_file()) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            pass
        if state == "CANCELLED" or state is None:
            return -9
        from optsched.slurm import cli as scli

        try:
            rec = scli.scontrol_job(self.slurm_id, self._ex.env) or {}
        except OptschedError:
            rec = {}
        code, _, sig = rec.get("ExitCode", "").partition(":")
        if sig.strip() not in ("", "0"):
            return -int(sig)
        return int(code) if code.strip().isdigit() else -9

    def kill(self, timeout: float = 30.0) -> None:
        """SIGKILL the batch job's processes, cancel it, wait until Slurm has ended it."""
        from optsched.slurm import cli as scli

        if self.poll() is not None:
            return
        for argv in (["scancel", "--signal=KILL", "--full", self.slurm_id], ["scancel", self.slurm_id]):
            try:
                scli.run(argv, self._ex.env, check=False)
            except OptschedError:
                pass
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            self._ex.refresh(force=True)
            time.sleep(0.05)
        if self._rc is None:
            self._rc = -9


class SlurmExecutor:
    """Batch jobs on a Slurm cluster (see the module docstring)."""

    name = "slurm"

    def __init__(self, cluster_spec: str | None = None, address: str | None = None, run_id: str = "",
                 env: dict | None = None, poll_every: float = 0.1, partition: str | None = None):
        from optsched.slurm.agent import cluster_from_slurm
        from optsched.slurm.localcluster import require_slurm

        if cluster_spec:
            raise OptschedError("--cluster: the slurm executor reads the cluster from scontrol show nodes")
        if address:
            raise OptschedError("--address: the slurm executor reaches Slurm through $SLURM_CONF, not an address")
        require_slurm(env)
        self.env = dict(env or {})
        self.run_id = run_id
        self.real_gpus = False
        self.partition = partition
        self.poll_every = poll_every
        self.cluster: Cluster = cluster_from_slurm(self.env, partition)
        self._states: dict[str, str] = {}
        self._seen_at = 0.0
        self._handles: list[SlurmHandle] = []

    # -- Slurm's view, shared by every handle -------------------------------------
    def refresh(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._seen_at < self.poll_every:
            return
        from optsched.slurm import cli as scli

        ids = [h.slurm_id for h in self._handles if h._rc is None]
        if not ids:
            return
        try:
            out = scli.run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i %T"], self.env, check=False)
        except scli.SlurmUnavailable:
            return  # the controller restarting: keep the last view
        if out.returncode != 0:
            if "invalid job id" not in (out.stderr or "").lower():
                return
        states = {}
        for line in out.stdout.splitlines():
            jid, _, st = line.strip().partition(" ")
            jid, plus, part = jid.partition("+")  # a heterogeneous job's components: 12+0, 12+1
            if not plus or part == "0":  # the batch script runs in component 0
                states[jid] = st.strip()
        for jid in ids:  # no longer listed: Slurm forgot an ended job
            states.setdefault(jid, "GONE")
        self._states.update(states)
        self._seen_at = time.monotonic()

    def state(self, slurm_id: str) -> str | None:
        """Slurm's state of the job (None once Slurm no longer lists it)."""
        self.refresh()
        st = self._states.get(slurm_id, "PENDING")  # just submitted: not yet seen
        return None if st == "GONE" else st

    # -- the executor interface -----------------------------------------------------
    def start(self) -> None:
        from optsched.slurm import cli as scli

        scli.squeue(self.env, states="running")  # the controller answers (else one clear line)

    def launch(self, launch: Launch) -> SlurmHandle:
        from optsched.slurm import cli as scli

        slots = launch.slots
        gtype = slots[0].gpu_type
        per_node = Counter(s.server for s in slots)  # first node first: the batch script runs there
        os.makedirs(launch.job_dir, exist_ok=True)
        inc = str(launch.env.get("OPTSCHED_INCARNATION", "0"))
        env = job_env(launch, self.run_id, 0, False)
        env.pop("OPTSCHED_PARENT_PID", None)  # the batch step is the job's parent, not the runtime
        script = os.path.join(launch.job_dir, f".slurm-{inc}.sh")
        exit_file = os.path.join(launch.job_dir, f".slurm-exit-{inc}")
        try:
            os.unlink(exit_file)
        except FileNotFoundError:
            pass
        # One node: plain options. Several (the placement spans servers): a heterogeneous job, one component
        # per node with exactly its GPU count there (--gpus=N over several nodes lets Slurm split N its own way).
        components = [f"#SBATCH --nodes=1 --nodelist={n} --gres=gpu:{gtype}:{c}\n" for n, c in per_node.items()]
        with open(script, "w") as f:
            f.write("#!/bin/sh\n" + "#SBATCH hetjob\n".join(components)
                    + "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in sorted(env.items()))
                    + f"cd {shlex.quote(launch.job_dir)}\n"
                    + " ".join(shlex.quote(c) for c in launch.command) + "\n"
                    + f"rc=$?\necho $rc > {shlex.quote(exit_file)}\nexit $rc\n")
        argv = ["sbatch", "--parsable", "-J", f"optsched-{launch.job_id}", "-D", launch.job_dir, "-o",
                os.path.join(launch.job_dir, "output.log"), "--open-mode=append", "--comment",
                f"optsched run {self.run_id} job {launch.job_id} incarnation {inc}"]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        out = scli.run(argv + [script], self.env)
        sid = out.stdout.strip().split(";")[0]
        h = SlurmHandle(self, sid, launch.job_dir, inc)
        self._handles.append(h)
        return h

    def close(self) -> None:
        for h in self._handles:
            if h._rc is None and h.poll() is None:
                h.kill()
        self._handles = []


__all__ = ["SlurmExecutor", "SlurmHandle"]
