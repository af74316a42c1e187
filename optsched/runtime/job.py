"""The job side of ``optsched run``: a lease, progress reports, checkpoints.

Standard library + NumPy only, and nothing else from optsched, so a training
script can import it (or copy this one file) at no cost::

    from optsched.runtime.job import Lease

    with Lease.from_env() as lease:
        state = lease.restore() or {"w": np.zeros(d)}
        w = state["w"]
        for step in lease.steps(total, checkpoint=lambda: {"w": w}):
            w = train_one_step(w, step)

The runtime talks to the job through files in the job's run directory
(``$OPTSCHED_JOB_DIR``), each replaced atomically (write a temporary file, then
``os.replace``), so a reader never sees half a file:

``lease.json`` (runtime → job)
    ``{"expires": <unix time>, "revoked": false}``. The runtime renews the
    lease every round (Blox's lease). At each iteration boundary the job
    checks it: when it is revoked, or has expired (the runtime is gone), the
    job saves a checkpoint, reports ``"preempted"`` and exits with
    ``EXIT_PREEMPTED`` (75). It also stops when its parent process changes
    (``$OPTSCHED_PARENT_PID``: the runtime or the Ray actor died), so a job
    never outlives its scheduler by more than one iteration. Inside a Slurm
    job (``$SLURM_JOB_ID``) SIGTERM counts as a revocation too: Slurm's
    preemption (``optsched slurm`` requeues a job it preempts).
``progress.json`` (job → runtime)
    steps done, status (``running | preempted | finished | failed``), the
    time of the process start, of the first step after the restore, of the
    last step's end, and the iteration times of this run (count, sum, EMA).
    Written at most every ``report_interval`` seconds and at every exit.
``ckpt.npz`` (job → its next incarnation)
    the arrays ``checkpoint()`` returned, plus the step count; written
    atomically, so a kill during the write leaves the previous checkpoint.

Exit codes: 0 finished, 75 preempted (checkpoint saved), anything else failed.

``$OPTSCHED_SLOT_SLOWDOWN`` (set by ``optsched run --slot-speed``) emulates a
slower slot type on identical hardware: ``steps()`` stretches every step to
that many times its duration (a sleep, so the CPU stays free).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Callable, Iterator, Mapping

import numpy as np

EXIT_PREEMPTED = 75  # EX_TEMPFAIL: stopped at an iteration boundary, checkpoint saved

LEASE_FILE = "lease.json"
PROGRESS_FILE = "progress.json"
CHECKPOINT_FILE = "ckpt.npz"
_STEP_KEY = "__optsched_step__"


def checkpoint_step(job_dir: str) -> int | None:
    """The step count of the checkpoint in ``job_dir`` (None: there is none, or it is unreadable)."""
    try:
        with np.load(os.path.join(job_dir, CHECKPOINT_FILE), allow_pickle=False) as z:
            return int(z[_STEP_KEY]) if _STEP_KEY in z.files else 0
    except (OSError, ValueError, KeyError):
        return None


class Preempted(SystemExit):
    """Raised at an iteration boundary once the lease is revoked or expired and
    the checkpoint is saved. A SystemExit: an uncaught one ends the process with
    exit code 75 and no traceback."""

    def __init__(self, reason: str = "revoked"):
        super().__init__(EXIT_PREEMPTED)
        self.reason = reason


def write_json_atomic(path: str, data: Mapping) -> None:
    d = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path: str) -> dict | None:
    """The file's JSON, or None when it does not exist (yet)."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, OSError):
        return None  # never happens with atomic writers; tolerate a foreign writer


class Lease:
    """A job's lease on its slots, its progress reports and its checkpoint.

    Outside ``optsched run`` (no ``$OPTSCHED_JOB_DIR``) it works in a private
    temporary directory and never expires, so the same script runs by hand.
    """

    def __init__(self, job_dir: str, slots: str = "", parent_pid: int | None = None,
                 report_interval: float = 0.05):
        self.job_dir = job_dir
        os.makedirs(job_dir, exist_ok=True)
        self.slots = [s for s in slots.split(",") if s]
        self.parent_pid = parent_pid
        self.slowdown = max(float(os.environ.get("OPTSCHED_SLOT_SLOWDOWN", "1") or 1), 1.0)
        self.report_interval = report_interval
        self.started_at = time.time()
        self.incarnation = os.environ.get("OPTSCHED_INCARNATION")
        self.steps_done = 0
        self.steps_total: int | None = None
        self.restored_step = 0
        self.stop_reason: str | None = None
        self._lease_path = os.path.join(job_dir, LEASE_FILE)
        self._progress_path = os.path.join(job_dir, PROGRESS_FILE)
        self._ckpt_path = os.path.join(job_dir, CHECKPOINT_FILE)
        self._lease_mtime = None
        self._expires = float("inf")
        self._revoked = False
        self._terminated = False  # SIGTERM received (stop_on_sigterm)
        self._first_step_at: float | None = None
        self._last_step_end: float | None = None
        self._iters = 0
        self._iter_sum = 0.0
        self._iter_ema: float | None = None
        self._last_report = 0.0
        self._status = "running"

    @classmethod
    def from_env(cls, **options) -> "Lease":
        job_dir = os.environ.get("OPTSCHED_JOB_DIR")
        if not job_dir:
            job_dir = tempfile.mkdtemp(prefix="optsched-job-")
        ppid = os.environ.get("OPTSCHED_PARENT_PID")
        lease = cls(job_dir, os.environ.get("OPTSCHED_SLOTS", ""), int(ppid) if ppid else None, **options)
        if os.environ.get("SLURM_JOB_ID"):
            lease.stop_on_sigterm()
        return lease

    def stop_on_sigterm(self) -> None:
        """SIGTERM stops the job like a revoked lease: a checkpoint at the next
        iteration boundary, then exit 75. Slurm preempts this way (``scontrol
        requeuehold``, ``scancel``: SIGTERM, SIGKILL ``KillWait`` seconds later),
        so ``Lease.from_env`` sets it inside a Slurm job. Main thread only."""
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return

        def _terminated(signum, frame):
            self._terminated = True

        signal.signal(signal.SIGTERM, _terminated)

    # -- context manager: a crash is reported as failed -----------------
    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            if self._status == "running":
                self._status = "finished"
            self.report(force=True)
        elif isinstance(exc, Preempted):
            pass  # reported already
        elif issubclass(exc_type, SystemExit) and exc.code in (0, None):
            self._status = "finished"
            self.report(force=True)
        else:
            self._status = "failed"
            self.report(force=True, error=f"{exc_type.__name__}: {exc}")
        return False

    # -- checkpoints ------------------------------------------------------
    def restore(self) -> dict | None:
        """The last checkpoint's arrays (None on a first start); the step
        count continues from it."""
        try:
            with np.load(self._ckpt_path, allow_pickle=False) as z:
                state = {k: z[k] for k in z.files if k != _STEP_KEY}
                self.restored_step = self.steps_done = int(z[_STEP_KEY]) if _STEP_KEY in z.files else 0
        except FileNotFoundError:
            return None
        return state

    def checkpoint(self, state: Mapping[str, np.ndarray]) -> None:
        """Save ``state`` (name → array) with the step count, atomically."""
        fd, tmp = tempfile.mkstemp(dir=self.job_dir, prefix=".tmp-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **{k: np.asarray(v) for k, v in state.items()}, **{_STEP_KEY: np.int64(self.steps_done)})
            os.replace(tmp, self._ckpt_path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    # -- the lease --------------------------------------------------------
    def should_stop(self) -> bool:
        """True once the lease is revoked or expired, or the parent is gone.
        Cheap: the lease file is re-read only when its mtime changes."""
        try:
            st = os.stat(self._lease_path)
            if st.st_mtime_ns != self._lease_mtime:
                self._lease_mtime = st.st_mtime_ns
                data = read_json(self._lease_path)
                if data is not None:
                    self._expires = float(data.get("expires") or float("inf"))
                    self._revoked = bool(data.get("revoked", False))
        except FileNotFoundError:
            pass
        if self._revoked:
            self.stop_reason = "revoked"
        elif self._terminated:
            self.stop_reason = "sigterm"
        elif time.time() > self._expires:
            self.stop_reason = "expired"
        elif self.parent_pid is not None and os.getppid() != self.parent_pid:
            self.stop_reason = "orphaned"
        else:
            return False
        return True

    def steps(self, total: int, checkpoint: Callable[[], Mapping[str, np.ndarray]] | None = None) -> Iterator[int]:
        """Yield step indices from the restored step to ``total - 1``. At every
        iteration boundary: report progress, and honour the lease (checkpoint
        via ``checkpoint()``, report preempted, raise Preempted). After the last
        step the checkpoint is saved too (a finished job's final state)."""
        self.steps_total = int(total)
        if self.steps_done < total and self.should_stop():  # revoked before it began: nothing new to save
            self._status = "preempted"
            self.report(force=True)
            raise Preempted(self.stop_reason or "revoked")
        while self.steps_done < total:
            t = time.time()
            if self._first_step_at is None:
                self._first_step_at = t
                self.report(force=True)
            yield self.steps_done
            if self.slowdown > 1.0:  # an emulated slower slot type: the step takes `slowdown` times as long
                time.sleep((time.time() - t) * (self.slowdown - 1.0))
            end = time.time()
            self.step_done(end - t, end)
            if self.steps_done < total and self.should_stop():
                if checkpoint is not None:
                    self.checkpoint(checkpoint())
                self._status = "preempted"
                self.report(force=True)
                raise Preempted(self.stop_reason or "revoked")
        if checkpoint is not None:
            self.checkpoint(checkpoint())

    def step_done(self, seconds: float, end: float | None = None) -> None:
        """Count one iteration of ``seconds`` (for loops that do not use steps())."""
        end = end if end is not None else time.time()
        if self._first_step_at is None:
            self._first_step_at = end - seconds
        self.steps_done += 1
        self._iters += 1
        self._iter_sum += seconds
        self._iter_ema = seconds if self._iter_ema is None else 0.9 * self._iter_ema + 0.1 * seconds
        self._last_step_end = end
        self.report()

    # -- progress reports -------------------------------------------------
    def report(self, force: bool = False, error: str | None = None) -> None:
        now = time.time()
        if not force and now - self._last_report < self.report_interval:
            return
        self._last_report = now
        data = {
            "pid": os.getpid(),
            "incarnation": self.incarnation,
            "status": self._status,
            "steps_done": self.steps_done,
            "steps_total": self.steps_total,
            "restored_step": self.restored_step,
            "started_at": self.started_at,
            "first_step_at": self._first_step_at,
            "last_step_end": self._last_step_end,
            "iterations": self._iters,
            "iteration_seconds": self._iter_sum,
            "iteration_ema": self._iter_ema,
            "slots": self.slots,
            "updated_at": now,
        }
        if self.stop_reason:
            data["stop_reason"] = self.stop_reason
        if error:
            data["error"] = error[:500]
        write_json_atomic(self._progress_path, data)


__all__ = ["CHECKPOINT_FILE", "EXIT_PREEMPTED", "LEASE_FILE", "PROGRESS_FILE", "Lease", "Preempted", "checkpoint_step", "read_json",
           "write_json_atomic"]
