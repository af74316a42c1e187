"""The runtime loop: the scheduling core (optsched/core.py) with real execution.

Every round (``round_length`` seconds of the executor's clock):

    observe     poll the running processes; read their progress files
                (steps done, iteration times, finish time); a process that
                exited 0 has finished, 75 was preempted (checkpoint saved),
                anything else failed (its slots are freed, the others go on);
    admission   jobs whose arrival time has passed join the active set
                (``core.admit``: all of them, or FIFO under ``--admission
                load``; arrivals wait for the round boundary; JCT counts from
                arrival);
    decide      the core's round (``RoundCore.decide``) on the Instance of the
                active jobs (throughput = the measured steps/s per slot type,
                else the trace's estimate): the recomputation rules, the
                policy's solve (POP partitions, job classes), and
                ``Allocator.next_round`` → Placement (migration cost and the
                placement policy are allocator options) — the very code the
                simulator and the service's sessions run;
    execution   the diff against what really runs: jobs not placed, or placed
                on other slots (migrated), get their lease revoked and stop at
                the next iteration boundary with a checkpoint; one still alive
                after ``grace`` seconds is killed and reported failed; then
                placed jobs that do not run are launched on their slots (after
                the stopped ones exited: no slot is ever held by two
                processes); the others' leases are renewed;
    progress    wait for the round's end, polling; a job finishing mid-round
                completes then and its slots stay idle; the round ends early
                when every placed job has exited (as the simulator);
    metrics     ``Allocator.record`` for jobs that ran less than the round,
                ``remove`` for finished and failed jobs; per-round and per-job
                rows; the restart overhead of every launch (launch → first
                step after the restore) and the throughput per slot type.

Deterministic decisions given the same measured progress: the policy and the
allocator see only the trace, the measured throughputs and steps done.
"""

from __future__ import annotations

from optsched.model import json_default

import json
import logging
import os
import signal
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from optsched.core import DEFAULT_LOAD_FACTOR, DecisionState, RoundCore, RoundRules, check_admission
from optsched.model import Cluster, GpuSlot, Instance, Job, OptschedError, Snapshot
from optsched.runtime.executor import Launch, slot_names
from optsched.runtime.job import (EXIT_PREEMPTED, LEASE_FILE, PROGRESS_FILE, checkpoint_step, read_json,
                                  write_json_atomic)
from optsched.runtime.spec import RunJob

log = logging.getLogger("optsched.runtime")

SCHEMA_VERSION = 1


def last_line(path: str, start: int = 0, tail: int = 4096) -> str:
    """The last non-empty line a job wrote to ``path`` from byte ``start`` on (its incarnation's
    output; earlier ones append to the same file), at most 300 characters, or ''."""
    try:
        with open(path, "rb") as f:
            f.seek(max(os.path.getsize(path) - tail, start, 0))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    said = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
    return said[:300]


@dataclass(frozen=True)
class RunConfig:
    policy: str = "max_min_fairness"
    round_length: float = 2.0
    grace: float = 5.0  # seconds a revoked job may take to stop before it is killed
    placement: str = "consolidated"
    solver: str = "auto"
    time_limit: float = 60.0
    seed: int = 0
    recompute_every: int | None = None
    min_recompute_interval: float = 0.0  # seconds: no recomputation sooner after the last (Gavel: 1920)
    partitions: int = 1  # POP: each recomputation solves this many job groups and merges them
    admission: str = "accept-all"  # or "load": FIFO while the active jobs' slots stay within load_factor × slots
    load_factor: float | None = None  # None: 2.0 (with admission="load")
    packing: bool = False  # space sharing: refused (each slot runs one process)
    max_time: float | None = None  # stop (every job) after this many seconds
    poll_interval: float = 0.02
    lease_slack: float | None = None  # lease lifetime beyond the round (default max(2 rounds, 10 s))
    allocator_options: dict = field(default_factory=dict)
    policy_options: dict = field(default_factory=dict)
    # What the policy sees as a job's steps/s: "measured" (per slot type, as soon as the job has run; the
    # trace's estimate until then) or "trace" (the trace's estimate only, as the simulator: for comparisons).
    throughputs: str = "measured"
    # Emulated speeds of slot types on identical hardware ({"slow": 0.5}: its steps take twice as long);
    # the job library stretches each step (OPTSCHED_SLOT_SLOWDOWN). Types not named run at 1.
    slot_speed: dict = field(default_factory=dict)

    def validate(self) -> None:
        for t, v in self.slot_speed.items():
            if not 0 < v <= 1:
                raise OptschedError(f"--slot-speed: {t}={v:g} must be in (0, 1] (a slower type than the hardware)")
        if self.throughputs not in ("measured", "trace"):
            raise OptschedError(f"--throughputs: {self.throughputs!r} is not measured or trace")
        if not self.round_length > 0:
            raise OptschedError(f"--round-length: must be positive, got {self.round_length:g}")
        if not self.grace >= 0:
            raise OptschedError(f"--grace: must be >= 0, got {self.grace:g}")
        if self.max_time is not None and not self.max_time > 0:
            raise OptschedError(f"--max-time: must be positive, got {self.max_time:g}")
        if self.recompute_every is not None and self.recompute_every < 1:
            raise OptschedError(f"--recompute-every: must be >= 1, got {self.recompute_every}")
        if not 0 <= self.min_recompute_interval < float("inf"):
            raise OptschedError(f"--min-recompute-interval: must be >= 0 seconds, got {self.min_recompute_interval:g}")
        check_admission(self.admission, self.load_factor)
        if self.load_factor is not None and not 0 < self.load_factor < float("inf"):
            raise OptschedError(f"--load-factor: must be positive, got {self.load_factor:g}")
        if self.packing:
            raise OptschedError("--packing: the local, Ray and Slurm executors give each slot to one process; space "
                                "sharing runs in optsched simulate and in sessions (the caller runs both jobs)")
        from optsched.policy import policy_names

        if self.policy not in policy_names():
            raise OptschedError(f"--policy: unknown policy {self.policy!r} (choose from {', '.join(policy_names())})")
        if self.policy in ("pollux", "sia", "hadar"):
            raise OptschedError(f"--policy: {self.policy} chooses GPU counts for elastic jobs; the runtime runs rigid jobs")
        self.rules().check()

    def rules(self) -> RoundRules:
        """The core's rules of a round under this configuration (every job is rigid)."""
        return RoundRules(self.policy, self.solver, self.time_limit, True, self.packing, self.partitions,
                          self.min_recompute_interval, self.recompute_every, dict(self.policy_options))


@dataclass
class _Incarnation:
    n: int
    slots: tuple[GpuSlot, ...]
    handle: object
    launch_at: float  # relative seconds
    steps_start: int
    exit_at: float | None = None
    exit_code: int | None = None
    outcome: str = ""  # finished | preempted | failed | killed | stopped
    revoked_at: float | None = None
    progress: dict | None = None
    decided_at: float = 0.0  # start of the round that placed it
    cancelled: bool = False  # stopped before its first step (killed: nothing to lose)
    reason: str = "start"  # start (first launch) | resume (after a preemption) | migration
    log_offset: int = 0  # output.log's size at launch: this incarnation's output starts there


@dataclass
class _JobState:
    job: RunJob
    status: str = "waiting"  # waiting | queued | running | finished | failed
    steps_done: int = 0
    first_start: float | None = None
    finish: float | None = None
    error: str = ""
    preemptions: int = 0
    migrations: int = 0
    attained: float = 0.0  # slot-seconds
    runs: list = field(default_factory=list)  # _Incarnation
    steps_by_type: dict = field(default_factory=dict)  # type -> [steps, seconds]
    removed: bool = False  # gone from the allocator
    migrating: bool = False  # its next launch is a migration

    @property
    def current(self) -> _Incarnation | None:
        r = self.runs[-1] if self.runs else None
        return r if r is not None and r.exit_at is None else None


@dataclass(frozen=True)
class RunResult:
    jobs: pd.DataFrame
    rounds: pd.DataFrame
    launches: pd.DataFrame
    summary: dict
    config: dict

    def write(self, out_dir: str | os.PathLike) -> list[Path]:
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, frame in (("jobs", self.jobs), ("rounds", self.rounds), ("launches", self.launches)):
            p = d / f"{name}.csv"
            frame.to_csv(p, index=False)
            paths.append(p)
        p = d / "summary.json"
        p.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "summary": self.summary, "config": self.config},
                                indent=2, default=_plain) + "\n")
        paths.append(p)
        p = d / "measured_trace.csv"
        self.measured_trace(p)
        paths.append(p)
        return paths

    def measured_trace(self, path: str | os.PathLike) -> None:
        """The run as a Tiresias trace for ``optsched simulate``: each job's
        duration = its steps / its measured throughput (its first slot type)."""
        rows = []
        prev = 0.0
        for r in self.jobs.sort_values("arrival_time", kind="stable").itertuples(index=False):
            thr = r.measured_throughput
            duration = r.steps_total / thr if thr and thr > 0 else float("nan")
            rows.append({"job_id": r.job_id, "num_gpu": r.scale_factor, "submit_time": r.arrival_time,
                         "iterations": r.steps_total, "model_name": r.model, "duration": duration,
                         "interval": r.arrival_time - prev})
            prev = r.arrival_time
        pd.DataFrame(rows).to_csv(path, index=False, float_format="%.6g")


_plain = json_default  # one converter for every executor (optsched.model)


class _Stop(Exception):
    pass


class WallClock:
    """The runtime's clock: wall-clock seconds, shared with the jobs' reports."""

    @staticmethod
    def time() -> float:
        return time.time()

    @staticmethod
    def sleep(seconds: float, stop: threading.Event) -> bool:
        """Sleep; True when ``stop`` was set meanwhile."""
        return stop.wait(seconds)


class Runtime:
    """One run of jobs on an executor (``run()`` below is the one-call form)."""

    def __init__(self, jobs: list[RunJob], executor, config: RunConfig = RunConfig(), run_dir: str | None = None,
                 on_round=None, resume: bool = False, observer=None):
        config.validate()
        if not jobs:
            raise OptschedError("run: no jobs")
        ids = [j.job_id for j in jobs]
        if len(set(ids)) != len(ids):
            raise OptschedError("run: duplicate job ids")
        self.cfg = config
        self.executor = executor
        self.cluster: Cluster = executor.cluster
        self.types = list(self.cluster.gpus)
        unknown = sorted(set(config.slot_speed) - set(self.types))
        if unknown:
            raise OptschedError(f"--slot-speed: unknown slot type {unknown[0]!r} (cluster has {', '.join(self.types)})")
        for j in jobs:
            if not any(j.scale_factor <= c for c in self.cluster.gpus.values()):
                raise OptschedError(f"job {j.job_id}: needs {j.scale_factor} slot{'s' if j.scale_factor != 1 else ''}, more than any type has "
                                    f"({', '.join(f'{t}={c}' for t, c in self.cluster.gpus.items())})")
        self.jobs = sorted(jobs, key=lambda j: j.arrival_time)
        self.state = {j.job_id: _JobState(j) for j in self.jobs}
        self.temporary = run_dir is None  # a folder of our own: the caller may remove it after the run
        self.resumed = self._prepare_run_dir(run_dir, resume)
        self.run_dir = run_dir or tempfile.mkdtemp(prefix="optsched-run-")
        os.makedirs(self.run_dir, exist_ok=True)
        self.on_round = on_round
        # observer(runtime, "decided" | "round_end", the round's decision): after each round's decision
        # and at its end (the dashboard of `optsched run --dashboard`); it must not change the run.
        self.observer = observer
        self.rounds: list[dict] = []
        self.slot_log: list[tuple] = []  # (slot name, job, from, to) process lifetimes as the runtime saw them
        self._holder: dict[str, str] = {}  # slot name -> job holding it now
        self._t0 = 0.0
        self._stopping = threading.Event()
        self.decisions = DecisionState()  # the core's memory: allocation in force, recomputation bookkeeping
        self._arrived: list[str] = []  # arrived, not admitted (load-based admission)
        self._demand = 0.0  # slots of admitted, unfinished jobs
        # The executor may bring its own clock (a virtual one in tests); else wall-clock time.
        self.clock = getattr(executor, "clock", None) or WallClock()

    # ------------------------------------------------------------------ time
    def now(self) -> float:
        return self.clock.time() - self._t0

    def _sleep(self, seconds: float) -> None:
        if seconds > 0 and self.clock.sleep(seconds, self._stopping):
            raise _Stop()

    def _wait_all(self, handles, timeout: float, poll: float = 0.005) -> None:
        deadline = self.clock.time() + timeout
        while self.clock.time() < deadline and any(h.poll() is None for h in handles):
            self.clock.sleep(poll, threading.Event())

    def stop(self) -> None:
        """Ask the loop to stop (thread-safe; signal handlers call this)."""
        self._stopping.set()

    # ------------------------------------------------------------------ run
    @property
    def solver_seconds(self) -> float:
        return self.decisions.solver_seconds

    @property
    def recomputations(self) -> int:
        return self.decisions.recomputations

    def _prepare_run_dir(self, run_dir: str | None, resume: bool) -> list[str]:
        """A used folder (an earlier run's job folders) is refused unless ``resume``: its
        checkpoints would be restored while the run reports a fresh start. Resumed, each job
        starts from its checkpoint's step (its stale lease and progress files removed).
        Returns the jobs resumed from a checkpoint."""
        jobs_dir = os.path.join(run_dir, "jobs") if run_dir else None
        used = jobs_dir is not None and os.path.isdir(jobs_dir) and bool(os.listdir(jobs_dir))
        if not used:
            return []
        if not resume:
            raise OptschedError(f"--run-dir: {run_dir} holds an earlier run's jobs (their checkpoints would be "
                                "restored); pass --resume to continue from them, or choose a new folder")
        resumed = []
        for j, s in self.state.items():
            d = os.path.join(jobs_dir, j)
            for name in (LEASE_FILE, PROGRESS_FILE):
                try:
                    os.remove(os.path.join(d, name))
                except FileNotFoundError:
                    pass
            step = checkpoint_step(d)
            if step:
                s.steps_done = min(step, s.job.steps)
                resumed.append(j)
        return resumed

    def run(self) -> RunResult:
        from optsched.allocator import Allocator

        cfg = self.cfg
        self.allocator = Allocator(self.cluster, placement=cfg.placement, seed=cfg.seed,
                                   round_length=cfg.round_length, **cfg.allocator_options)
        self.core = RoundCore(cfg.rules(), self.allocator)
        self._warm_up()
        self.executor.start()
        self._t0 = self.clock.time()
        wall0 = time.perf_counter()
        interrupted = ""
        ds = self.decisions
        try:
            k = 0
            while True:
                now = self.now()
                self._observe(now)
                if self._stopping.is_set():
                    raise _Stop()
                ds.dirty |= self._admit(now)
                ds.dirty |= bool(self._remove_departed())  # exited between rounds
                active = [s for s in self.state.values() if s.status in ("queued", "running")]
                if not active:
                    waiting = [s for s in self.state.values() if s.status == "waiting"]
                    if not waiting:
                        break
                    self._sleep(min(s.job.arrival_time for s in waiting) - self.now())
                    continue
                if cfg.max_time is not None and now >= cfg.max_time:
                    interrupted = "max_time"
                    break
                # --- the core: policy (when due), allocator / placement ---
                _, d = self.core.decide(ds, now, lambda: self._instance(active, now))
                recompute, solve_s, placement = d.recomputed, d.solve_seconds, d.placement
                # A copy: Allocator.remove() drops jobs from the dict the Placement shares with its lease.
                assignments = {j: tuple(v) for j, v in placement.assignments.items()}
                # --- execution ---
                stopped, started, migrated, preempted = self._apply(assignments, now)
                decided = {"round": k, "time": now, "placement": assignments, "started": started,
                           "preempted": preempted, "migrated": migrated, "recomputed": bool(recompute),
                           "solve_seconds": solve_s, "note": placement.note}
                if self.observer is not None:
                    self.observer(self, "decided", decided)
                # --- progress: wait for the round's end ---
                end = now + cfg.round_length
                placed = [j for j in assignments if self.state[j].current is not None]
                while True:
                    left = end - self.now()
                    if left <= 0:
                        break
                    self._sleep(min(cfg.poll_interval, left))
                    self._observe(self.now())
                    if all(self.state[j].current is None for j in placed):
                        break
                round_end = min(self.now(), end) if placed and all(self.state[j].current is None for j in placed) else end
                if not placed:
                    round_end = end
                # --- metrics ---
                left_jobs = self._account(assignments, now, round_end)
                ds.dirty |= bool(left_jobs)
                self.rounds.append({
                    "round": k, "start": now, "end": round_end, "active": len(active),
                    "running": len(placed), "started": len(started), "preempted": len(preempted),
                    "migrated": len(migrated), "finished_or_failed": len(left_jobs), "recomputed": bool(recompute),
                    "solve_seconds": solve_s,
                    "busy_slots": sum(len(assignments[j]) for j in placed),
                    "note": placement.note,
                })
                if self.on_round is not None:
                    self.on_round({"round": k, "time": round_end, "jobs": len(self.jobs),
                                   "done": sum(s.status in ("finished", "failed") for s in self.state.values()),
                                   "running": len(placed)})
                if self.observer is not None:
                    self.observer(self, "round_end", decided)
                k += 1
                # the next round starts at this one's end (early when every placed job exited)
                self._sleep(round_end - self.now())
        except (_Stop, KeyboardInterrupt):
            interrupted = "interrupted"
        finally:
            self._shutdown()
        return self._result(time.perf_counter() - wall0, interrupted)

    def _warm_up(self) -> None:
        """Import and run the policy once before the clock starts (imports of
        the solver stack would otherwise count in the first jobs' JCT)."""
        from optsched.core import warm_up

        t = self.types[0]
        snap = Snapshot(cluster=self.cluster, jobs=[Job(id="warm-up", throughput={t: 1.0}, steps_total=1.0)])
        warm_up(self.core.rules, Instance.from_snapshot(snap))

    # ------------------------------------------------------------------ stages
    def _admit(self, now: float) -> bool:
        """Arrivals join the active set by the core's admission rule; True when any did."""
        from optsched.core import admit

        for j, s in self.state.items():  # (arrival order)
            if s.status == "waiting" and s.job.arrival_time <= now + 1e-9 and j not in self._arrived:
                self._arrived.append(j)
        if not self._arrived:
            return False
        cfg = self.cfg
        limit = (DEFAULT_LOAD_FACTOR if cfg.load_factor is None else cfg.load_factor) * sum(self.cluster.gpus.values())
        idle = not any(s.status in ("queued", "running") for s in self.state.values())
        admitted, self._demand = admit(self._arrived, lambda j: self.state[j].job.scale_factor, self._demand,
                                       cfg.admission, limit, idle)
        for j in admitted:
            self.state[j].status = "queued"
        return bool(admitted)

    def _throughput(self, s: _JobState) -> dict[str, float]:
        if self.cfg.throughputs == "trace":
            return {t: float(s.job.throughput or 1.0) for t in self.types}
        acc = {t: list(v) for t, v in s.steps_by_type.items()}
        inc = s.current
        p = inc.progress if inc is not None else None
        if p and p.get("first_step_at") and p.get("last_step_end") and p["last_step_end"] > p["first_step_at"]:
            a = acc.setdefault(inc.slots[0].gpu_type, [0, 0.0])
            a[0] += int(p.get("steps_done", inc.steps_start)) - inc.steps_start
            a[1] += p["last_step_end"] - p["first_step_at"]
        measured = {t: v[0] / v[1] for t, v in acc.items() if v[1] > 0 and v[0] > 0}
        fallback = (np.mean(list(measured.values())) if measured else s.job.throughput) or 1.0
        return {t: float(measured.get(t, fallback)) for t in self.types}

    def _instance(self, active: list[_JobState], now: float) -> Instance:
        """The round's Instance of the active jobs (the runtime's view, for the core)."""
        jobs = [Job(id=s.job.job_id, model=s.job.model, scale_factor=s.job.scale_factor, weight=s.job.weight,
                    throughput=self._throughput(s), steps_total=float(s.job.steps),
                    steps_done=float(min(s.steps_done, s.job.steps)),  # a job may report past its end
                    arrival_time=s.job.arrival_time, elapsed_time=max(now - s.job.arrival_time, 0.0),
                    attained_service=s.attained)
                for s in active]
        return Instance.from_snapshot(Snapshot(time=now, cluster=self.cluster, jobs=jobs))

    def _observe(self, now: float) -> None:
        for s in self.state.values():
            inc = s.current
            if inc is None:
                continue
            rc = inc.handle.poll()
            prog = read_json(os.path.join(self._job_dir(s.job.job_id), PROGRESS_FILE))
            if prog is not None and prog.get("incarnation") == str(inc.n):
                inc.progress = prog
                s.steps_done = max(s.steps_done, int(prog.get("steps_done", 0)))
            if rc is None:
                continue
            self._exited(s, inc, rc, self.now())

    def _exited(self, s: _JobState, inc: _Incarnation, rc: int, t: float, killed_after: float | None = None) -> None:
        """Record an incarnation's exit; ``killed_after``: the runtime killed it after that grace period."""
        killed = killed_after is not None
        inc.exit_at, inc.exit_code = t, rc
        for slot in inc.slots:
            name = slot_names([slot])
            if self._holder.get(name) == s.job.job_id:
                del self._holder[name]
            self.slot_log.append((name, s.job.job_id, inc.launch_at, t))
        prog = read_json(os.path.join(self._job_dir(s.job.job_id), PROGRESS_FILE)) or {}
        if prog.get("incarnation") == str(inc.n):
            inc.progress = prog
        p = inc.progress or {}
        if rc in (0, EXIT_PREEMPTED) and not killed and p:
            s.steps_done = int(p.get("steps_done", s.steps_done))  # what its checkpoint holds
        self._credit(s, inc)
        if killed:
            inc.outcome = "killed"
            s.status, s.error = "failed", f"killed: did not stop within the {killed_after:g} s grace period"
            s.finish = t
        elif rc == 0:
            steps = int(p.get("steps_done", s.steps_done))
            s.steps_done = max(s.steps_done, steps)
            inc.outcome = "finished"
            s.status = "finished"
            end = p.get("last_step_end")
            s.finish = min(t, end - self._t0) if end else t
            if s.steps_done < s.job.steps:
                s.status, s.error = "failed", f"exited 0 after {s.steps_done} of {s.job.steps} steps"
        elif rc == EXIT_PREEMPTED:
            inc.outcome = "preempted" if inc.revoked_at is not None else "stopped"
            s.status = "queued"
            if inc.revoked_at is None:
                log.warning("job %s stopped by itself (%s); it restarts when placed again", s.job.job_id,
                            p.get("stop_reason", "?"))
        else:
            inc.outcome = "failed"
            s.status = "failed"
            s.finish = t
            s.error = p.get("error") or getattr(inc.handle, "error", None)  # the executor's word (a Ray task's error)
            if not s.error:  # the exit status, and the job's last word (a workload's argparse refusal, say)
                said = last_line(os.path.join(self._job_dir(s.job.job_id), "output.log"), inc.log_offset)
                s.error = (f"exit code {rc}" if rc > 0 else f"signal {-rc}") + (f": {said}" if said else "")

    def _credit(self, s: _JobState, inc: _Incarnation) -> None:
        p = inc.progress or {}
        steps = int(p.get("steps_done", inc.steps_start)) - inc.steps_start
        first, last = p.get("first_step_at"), p.get("last_step_end")
        if steps > 0 and first and last and last > first:
            t = inc.slots[0].gpu_type
            acc = s.steps_by_type.setdefault(t, [0, 0.0])
            acc[0] += steps
            acc[1] += last - first
        s.attained += len(inc.slots) * max((inc.exit_at or self.now()) - inc.launch_at, 0.0)

    def _apply(self, assignments: dict, now: float):
        """Make the processes match the placement: stop, then launch."""
        stop, migrated, preempted = [], [], []
        for s in self.state.values():
            inc = s.current
            if inc is None:
                continue
            want = assignments.get(s.job.job_id)
            if want is None:
                stop.append(s)
                preempted.append(s.job.job_id)
            elif tuple(want) != inc.slots:
                stop.append(s)
                migrated.append(s.job.job_id)
        for s in stop:
            s.current.revoked_at = self.now()
            self._write_lease(s.job.job_id, revoked=True)
        self._stop_revoked(stop, self.cfg.grace)
        for j in preempted:
            self.state[j].preemptions += 1
        for j in migrated:
            self.state[j].migrations += 1
            self.state[j].migrating = True
        started = []
        for j, slots in assignments.items():
            s = self.state[j]
            if s.status in ("finished", "failed"):
                continue
            if s.current is not None:
                self._write_lease(j, revoked=False)  # renew
                continue
            if self._launch(s, tuple(slots), now):
                started.append(j)
        return stop, started, migrated, preempted

    def _stop_revoked(self, stop: list[_JobState], grace: float) -> None:
        """Stop the incarnations whose lease was just revoked. One that has not
        reached its first step has nothing to save (its previous checkpoint is
        intact): it is killed at once and requeued, not waited for. The others
        get ``grace`` seconds to checkpoint and exit; one still alive then is
        killed and reported failed."""
        if not stop:
            return
        for s in stop:
            p = s.current.progress
            if not (p and p.get("first_step_at")) and s.current.handle.poll() is None:
                s.current.handle.kill()
                s.current.cancelled = True
        self._wait_all([s.current.handle for s in stop], grace)
        for s in stop:
            inc = s.current
            rc = inc.handle.poll()
            if inc.cancelled and rc != 0:
                self._exited(s, inc, EXIT_PREEMPTED, self.now())
                inc.outcome = "cancelled"
                s.steps_done = inc.steps_start  # its last checkpoint (it wrote none)
            elif rc is None:
                inc.handle.kill()
                rc = inc.handle.poll()
                self._exited(s, inc, -9 if rc is None else rc, self.now(), killed_after=grace)
            else:
                self._exited(s, inc, rc, self.now())

    def _launch(self, s: _JobState, slots: tuple[GpuSlot, ...], decided_at: float) -> bool:
        """Start an incarnation; a job that cannot start is reported failed (the others go on)."""
        j = s.job.job_id
        for slot in slots:
            name = slot_names([slot])
            holder = self._holder.get(name)
            if holder is not None:
                raise RuntimeError(f"slot {name} is still held by {holder} (launching {j})")  # an invariant
            self._holder[name] = j
        self._write_lease(j, revoked=False)
        launch_at = self.now()
        n = len(s.runs)
        env = {**s.job.env, "OPTSCHED_INCARNATION": str(n)}
        speed = self.cfg.slot_speed.get(slots[0].gpu_type)
        if speed is not None and speed < 1:
            env["OPTSCHED_SLOT_SLOWDOWN"] = f"{1.0 / speed:.6g}"
        log_path = os.path.join(self._job_dir(j), "output.log")
        log_offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        try:
            handle = self.executor.launch(Launch(j, s.job.command, slots, self._job_dir(j), env))
        except (OptschedError, OSError) as e:
            for slot in slots:
                self._holder.pop(slot_names([slot]), None)
            s.status, s.error, s.finish = "failed", f"cannot start: {e}", launch_at
            log.warning("job %s: cannot start: %s", j, e)
            return False
        reason = "migration" if s.migrating else ("resume" if s.runs else "start")
        s.migrating = False
        s.runs.append(_Incarnation(n, slots, handle, launch_at, s.steps_done, decided_at=decided_at, reason=reason,
                                   log_offset=log_offset))
        s.status = "running"
        if s.first_start is None:
            s.first_start = launch_at
        return True

    def _account(self, assignments: dict, start: float, end: float) -> list[str]:
        """record() for jobs that ran less than the round; remove() for jobs that left."""
        for j, slots in assignments.items():
            s = self.state[j]
            runs = [r for r in s.runs if r.exit_at is not None and start - 1e-9 <= r.exit_at <= end + 1e-9]
            if s.status in ("finished", "failed") or (runs and s.current is None):
                ran = min(max((runs[-1].exit_at if runs else end) - start, 0.0), self.cfg.round_length)
                try:
                    self.allocator.record(j, slots[0].gpu_type, ran)
                except OptschedError:
                    pass
        return self._remove_departed()

    def _remove_departed(self) -> list[str]:
        """Finished and failed jobs leave the allocator (their slots are free)."""
        left = []
        for s in self.state.values():
            if s.status in ("finished", "failed") and not s.removed:
                try:
                    self.allocator.remove(s.job.job_id)
                except OptschedError:
                    pass  # never placed: unknown to the allocator
                s.removed = True
                self._demand -= s.job.scale_factor
                left.append(s.job.job_id)
        return left

    # ------------------------------------------------------------------ files
    def _job_dir(self, job_id: str) -> str:
        return os.path.join(self.run_dir, "jobs", job_id)

    def _write_lease(self, job_id: str, revoked: bool) -> None:
        d = self._job_dir(job_id)
        os.makedirs(d, exist_ok=True)
        slack = self.cfg.lease_slack if self.cfg.lease_slack is not None else max(2 * self.cfg.round_length, 10.0)
        write_json_atomic(os.path.join(d, LEASE_FILE),
                          {"expires": self.clock.time() + self.cfg.round_length + slack, "revoked": revoked})

    def _shutdown(self) -> None:
        """Revoke every lease, give the jobs the grace period, kill the rest."""
        try:
            self._observe(self.now())  # fresh progress: which jobs have reached their first step
        except Exception as e:  # noqa: BLE001
            log.warning("observe at shutdown: %s", e)
        live = [s for s in self.state.values() if s.current is not None]
        for s in live:
            s.current.revoked_at = self.now()
            try:
                self._write_lease(s.job.job_id, revoked=True)
            except OSError:
                pass
        # As a revocation within the run: a job still starting is killed at once and stays unfinished (not
        # a failure: its checkpoint is intact); one that ignores the revoked lease past the grace is failed.
        self._stop_revoked(live, min(self.cfg.grace, 10.0))
        for s in live:
            if s.status == "queued" or s.status == "running":
                s.status = "queued"
        try:
            self.executor.close()
        except Exception as e:  # noqa: BLE001
            log.warning("executor close: %s", e)

    # ------------------------------------------------------------------ result
    def _result(self, wall: float, interrupted: str) -> RunResult:
        rows, launches = [], []
        for s in self.state.values():
            j = s.job
            overheads = [r.progress["first_step_at"] - self._t0 - r.decided_at for r in s.runs
                         if r.progress and r.progress.get("first_step_at")]
            thr = {t: v[0] / v[1] for t, v in s.steps_by_type.items() if v[1] > 0}
            total_steps, total_secs = sum(v[0] for v in s.steps_by_type.values()), sum(v[1] for v in s.steps_by_type.values())
            rows.append({
                "job_id": j.job_id, "model": j.model, "scale_factor": j.scale_factor, "arrival_time": j.arrival_time,
                "steps_total": j.steps, "steps_done": s.steps_done,
                "status": s.status if s.status in ("finished", "failed") else "unfinished",
                "first_start": s.first_start, "finish_time": s.finish,
                "jct": (s.finish - j.arrival_time) if s.finish is not None and s.status == "finished" else float("nan"),
                "launches": len(s.runs), "preemptions": s.preemptions, "migrations": s.migrations,
                "restart_overhead_mean": float(np.mean(overheads)) if overheads else float("nan"),
                "measured_throughput": total_steps / total_secs if total_secs > 0 else float("nan"),
                "throughput_by_type": json.dumps({t: round(v, 4) for t, v in thr.items()}),
                "error": s.error,
            })
            for r in s.runs:
                p = r.progress or {}
                first = p.get("first_step_at")
                launches.append({
                    "job_id": j.job_id, "incarnation": r.n, "reason": r.reason, "slots": slot_names(r.slots),
                    "gpu_type": r.slots[0].gpu_type, "launch_at": r.launch_at,
                    "first_step_at": (first - self._t0) if first else float("nan"),
                    "exit_at": r.exit_at, "exit_code": r.exit_code, "outcome": r.outcome,
                    "revoked_at": r.revoked_at, "steps_start": r.steps_start,
                    "steps_end": int(p.get("steps_done", r.steps_start)),
                    "launch_overhead": (first - self._t0 - r.launch_at) if first else float("nan"),
                    "restart_overhead": (first - self._t0 - r.decided_at) if first else float("nan"),
                    "stop_latency": (r.exit_at - r.revoked_at) if r.revoked_at is not None and r.exit_at is not None
                    else float("nan"),
                    "iteration_seconds_mean": (p["iteration_seconds"] / p["iterations"]) if p.get("iterations") else float("nan"),
                })
        jobs = pd.DataFrame(rows)
        ldf = pd.DataFrame(launches)
        rdf = pd.DataFrame(self.rounds)
        done = jobs[jobs["status"] == "finished"]
        jct = done["jct"].to_numpy(dtype=float)
        ro = ldf["restart_overhead"].dropna().to_numpy(dtype=float) if len(ldf) else np.array([])
        lo = ldf["launch_overhead"].dropna().to_numpy(dtype=float) if len(ldf) else np.array([])
        stop_lat = ldf["stop_latency"].dropna().to_numpy(dtype=float) if len(ldf) else np.array([])
        by_type: dict[str, list] = {}
        for s in self.state.values():
            for t, (n, sec) in s.steps_by_type.items():
                by_type.setdefault(t, []).append(n / sec if sec > 0 else float("nan"))
        makespan = float(jobs["finish_time"].max() - jobs["arrival_time"].min()) if jobs["finish_time"].notna().any() else float("nan")
        summary = {
            "schema_version": SCHEMA_VERSION,
            "executor": self.executor.name, "policy": self.cfg.policy, "round_length": self.cfg.round_length,
            "cluster": dict(self.cluster.gpus),
            "jobs": len(jobs), "jobs_completed": int(len(done)), "jobs_failed": int((jobs["status"] == "failed").sum()),
            "jobs_unfinished": int((jobs["status"] == "unfinished").sum()),
            "avg_jct": float(jct.mean()) if jct.size else float("nan"),
            "median_jct": float(np.median(jct)) if jct.size else float("nan"),
            "p99_jct": float(np.percentile(jct, 99)) if jct.size else float("nan"),
            "makespan": makespan,
            "launches": int(len(ldf)),
            "preemptions": int(jobs["preemptions"].sum()), "migrations": int(jobs["migrations"].sum()),
            "restart_overhead_mean": float(ro.mean()) if ro.size else float("nan"),
            "restart_overhead_p95": float(np.percentile(ro, 95)) if ro.size else float("nan"),
            "restart_overhead_by_reason": ({k: float(v) for k, v in
                                            ldf.groupby("reason")["restart_overhead"].mean().dropna().items()}
                                           if len(ldf) else {}),
            "launch_overhead_mean": float(lo.mean()) if lo.size else float("nan"),
            "stop_latency_mean": float(stop_lat.mean()) if stop_lat.size else float("nan"),
            "throughput_by_type": {t: float(np.nanmean(v)) for t, v in by_type.items()},
            "rounds": len(rdf), "recomputations": self.recomputations, "solver_seconds": self.solver_seconds,
            "wall_seconds": wall, "interrupted": interrupted, "run_dir": self.run_dir,
            "resumed_jobs": len(self.resumed),
        }
        config = {"executor": self.executor.name, "cluster": dict(self.cluster.gpus),
                  **{k: v for k, v in self.cfg.__dict__.items()}}
        return RunResult(jobs, rdf, ldf, summary, config)


def run(jobs, executor: str | object = "local", config: RunConfig | None = None, cluster: str | None = None,
        address: str | None = None, run_dir: str | None = None, on_round=None, step_scale: float = 1.0,
        handle_signals: bool = False, resume: bool = False, keep: bool = False, loss_threshold: float | None = None,
        observer=None, **options) -> RunResult:
    """Run ``jobs`` (RunJobs, a Trace, or a trace path) under the pipeline on
    ``executor`` ("local", "ray", or an executor object). ``options``: RunConfig
    fields. ``handle_signals``: SIGTERM/SIGINT stop the run cleanly (main thread).
    ``run_dir``: the jobs' folders (a used one only with ``resume``: the jobs
    continue from its checkpoints); None: a temporary folder, removed after the
    run unless ``keep``. ``loss_threshold``: a trace's jobs with convergence
    profiles end at their loss-based termination step (as in the simulator). ``observer``: see
    ``Runtime`` (called after each round's decision and at its end)."""
    from optsched.runtime.executor import make_executor
    from optsched.runtime.spec import jobs_from_trace

    if isinstance(jobs, (str, os.PathLike)):
        from optsched.traces.io import FORMAT_HINT, read_trace

        try:
            jobs = read_trace(jobs)
        except OptschedError as e:  # (run has no format option)
            raise OptschedError(str(e).replace(FORMAT_HINT, "convert it with optsched trace convert --format, or pass "
                                                            "read_trace(path, format=...) in Python")) from None
    if loss_threshold is not None:
        from optsched.checks import check_number

        check_number("--loss-threshold", loss_threshold, 0.0)
        if isinstance(jobs, (list, tuple)):
            raise OptschedError("--loss-threshold: needs a trace whose jobs carry convergence profiles, not RunJobs")
    if not isinstance(jobs, (list, tuple)):
        trace = jobs
        jobs = jobs_from_trace(trace, step_scale)
        if loss_threshold is not None:
            jobs = _loss_terminated(jobs, trace, loss_threshold)
    cfg = config or RunConfig(**options)
    run_id = uuid.uuid4().hex[:12]
    ex = make_executor(executor, cluster, address, run_id) if isinstance(executor, str) else executor
    rt = Runtime(list(jobs), ex, cfg, run_dir, on_round, resume=resume, observer=observer)
    old = {}
    if handle_signals and threading.current_thread() is threading.main_thread():
        def _handler(signum, frame):
            rt.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, _handler)
    try:
        return rt.run()
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        if rt.temporary and not keep:
            import shutil

            shutil.rmtree(rt.run_dir, ignore_errors=True)


def _loss_terminated(jobs: list[RunJob], trace, threshold: float) -> list[RunJob]:
    """The simulator's loss-based termination (stages.termination_fractions) on real jobs: a
    job with a convergence profile runs to its termination step (its command's --steps too)."""
    from dataclasses import replace

    from optsched.runtime.spec import workload_command
    from optsched.sim.stages import termination_fractions

    frac = termination_fractions(trace, threshold)
    out = []
    for j in jobs:
        f = frac.get(j.job_id)
        if f is not None and f < 1.0:
            steps = max(int(round(j.steps * f)), 1)
            j = replace(j, steps=steps, command=workload_command(j.model, steps, j.command[0]))
        out.append(j)
    return out


__all__ = ["RunConfig", "RunResult", "Runtime", "run"]
