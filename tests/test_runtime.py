"""The real runtime (``optsched run``, local executor): real short jobs with
preemptions. Checks: every job finishes with its full step count after
resumes (no lost progress, the same weights as an uninterrupted run), no slot
is ever held by two jobs, a crashed job and a job that ignores its revoked
lease are reported failed while the others finish, and no process outlives
the run. The Ray executor's test is tests/test_runtime_ray.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from optsched.runtime.job import EXIT_PREEMPTED, write_json_atomic
from optsched.runtime.loop import run
from optsched.runtime.spec import EXAMPLE_CSV, RunJob, workload_command
from optsched.runtime.workloads.regression import digest, train

ROOT = Path(__file__).resolve().parents[1]
# Runs of real processes end when their jobs do; this bound (seconds of wall clock) is reached only by a
# hang, never by a slow or busy machine: no assertion here depends on how fast the machine is.
HANG = 600.0
# subprocess (fork + exec) after JAX was imported by another test module: exec follows at once.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")


# ---------------------------------------------------------------- helpers (the Ray test imports them)

def regression_job(job_id: str, steps: int, arrival: float = 0.0, scale_factor: int = 1, **knobs) -> RunJob:
    model = "regression" + "".join(f":{k}={v}" for k, v in knobs.items())
    return RunJob(job_id, arrival, steps, workload_command(model, steps), scale_factor, model)


def assert_no_slot_shared(result) -> None:
    """No slot is ever held by two job processes: per slot, the lifetimes the
    runtime saw (launch → exit observed, a superset of the real ones) are
    disjoint."""
    spans = defaultdict(list)
    for r in result.launches.itertuples(index=False):
        for slot in r.slots.split(","):
            spans[slot].append((r.launch_at, r.exit_at, r.job_id))
    for slot, xs in spans.items():
        xs.sort()
        for (a0, a1, ja), (b0, b1, jb) in zip(xs, xs[1:]):
            assert a1 is not None and a1 <= b0 + 1e-9, f"slot {slot}: {ja} [{a0:.3f}, {a1}] overlaps {jb} from {b0:.3f}"


def assert_full_progress(result, run_dir: str, ids) -> None:
    """Each job finished with its full step count, and the job itself says so."""
    jobs = result.jobs.set_index("job_id")
    for j in ids:
        row = jobs.loc[j]
        assert row["status"] == "finished", (j, row["status"], row["error"])
        assert row["steps_done"] == row["steps_total"], j
        res = json.load(open(os.path.join(run_dir, "jobs", j, "result.json")))
        assert res["steps"] == row["steps_total"], j


def processes_of_run(run_dir: str) -> list[int]:
    """Live processes whose environment names this run's directory (/proc)."""
    out = []
    needle = run_dir.encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"OPTSCHED_JOB_DIR=" + needle in env and state != "Z":
            out.append(int(pid))
    return out


def wait_gone(run_dir: str, timeout: float = HANG) -> list[int]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        left = processes_of_run(run_dir)
        if not left:
            return []
        time.sleep(0.1)
    return processes_of_run(run_dir)


def wait_stepping(run_dir: str, job_id: str, timeout: float = HANG) -> None:
    """Until the job's progress file says it has made a step (a start takes seconds on a busy machine)."""
    f = Path(run_dir, "jobs", job_id, "progress.json")
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if json.loads(f.read_text()).get("steps_done", 0) > 0:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.01)
    raise AssertionError(f"{job_id} never made a step")


# ---------------------------------------------------------------- the job library


def test_revoked_lease_checkpoints_and_resume_matches_uninterrupted_run(tmp_path):
    steps = 400
    # 5 ms of waiting per step (an accelerator's time): 400 steps take 2 s or more however fast the CPU is,
    # so the revocation after 20 steps lands mid-run (CPU-only steps could all end before it on a fast machine)
    cmd = workload_command("regression:sleep_ms=5", steps)
    env = {**os.environ, "OPTSCHED_JOB_DIR": str(tmp_path), "OPENBLAS_NUM_THREADS": "1", "OPTSCHED_INCARNATION": "0"}
    # leases that outlast any busy machine's run (an expiry is the next test's subject)
    write_json_atomic(str(tmp_path / "lease.json"), {"expires": time.time() + HANG, "revoked": False})
    p = subprocess.Popen(cmd, env=env)
    deadline = time.time() + HANG
    while time.time() < deadline:  # revoke once it has made some progress
        prog = json.loads((tmp_path / "progress.json").read_text()) if (tmp_path / "progress.json").exists() else {}
        if prog.get("steps_done", 0) >= 20:
            break
        time.sleep(0.01)
    write_json_atomic(str(tmp_path / "lease.json"), {"expires": time.time() + 60, "revoked": True})
    assert p.wait(timeout=HANG) == EXIT_PREEMPTED
    prog = json.loads((tmp_path / "progress.json").read_text())
    assert prog["status"] == "preempted" and 20 <= prog["steps_done"] < steps
    with np.load(tmp_path / "ckpt.npz") as z:
        assert int(z["__optsched_step__"]) == prog["steps_done"]
    # a resumed run continues from the checkpoint and ends with the uninterrupted run's weights
    write_json_atomic(str(tmp_path / "lease.json"), {"expires": time.time() + HANG, "revoked": False})
    assert subprocess.run(cmd, env={**env, "OPTSCHED_INCARNATION": "1"}, timeout=HANG).returncode == 0
    prog2 = json.loads((tmp_path / "progress.json").read_text())
    assert prog2["status"] == "finished" and prog2["restored_step"] == prog["steps_done"]
    res = json.loads((tmp_path / "result.json").read_text())
    assert res["steps"] == steps and res["digest"] == digest(train(steps))


def test_expired_lease_stops_the_job_with_a_checkpoint(tmp_path):
    """The runtime is gone (no renewal): the job stops by itself, nothing lost."""
    env = {**os.environ, "OPTSCHED_JOB_DIR": str(tmp_path), "OPENBLAS_NUM_THREADS": "1"}
    write_json_atomic(str(tmp_path / "lease.json"), {"expires": time.time() + HANG, "revoked": False})
    p = subprocess.Popen(workload_command("regression", 10**6), env=env)
    deadline = time.time() + HANG
    while time.time() < deadline:  # until it steps: a start may take seconds on a busy machine (a lease
        prog = json.loads((tmp_path / "progress.json").read_text()) if (tmp_path / "progress.json").exists() else {}
        if prog.get("steps_done", 0) > 0:  # of 1 s from the launch expired before the first step)
            break
        time.sleep(0.01)
    write_json_atomic(str(tmp_path / "lease.json"), {"expires": time.time() + 1.0, "revoked": False})  # the last renewal
    assert p.wait(timeout=HANG) == EXIT_PREEMPTED
    prog = json.loads((tmp_path / "progress.json").read_text())
    assert prog["stop_reason"] == "expired" and prog["steps_done"] > 0


# ---------------------------------------------------------------- the runtime, local executor


def test_local_run_preempts_and_resumes_without_lost_progress(tmp_path):
    run_dir = str(tmp_path / "run")
    steps = 500
    # work=4 and 5 ms of waiting per step (an accelerator's time): each job needs several 1 s rounds
    # however fast the machine's CPUs are, so the 4 jobs on 2 slots must rotate (preempt and resume).
    jobs = [regression_job(f"j{i}", steps, arrival=0.0 if i < 3 else 1.0, work=4, sleep_ms=5) for i in range(4)]
    # No wall-clock limit that a busy machine could reach (it stopped after 60 s): the run ends when the jobs do.
    res = run(jobs, "local", cluster="slot=2", round_length=1.0, grace=3.0, run_dir=run_dir, max_time=HANG)
    s = res.summary
    assert s["interrupted"] == "", s["interrupted"]
    assert s["jobs_completed"] == 4 and s["jobs_failed"] == 0, res.jobs[["job_id", "status", "error"]]
    assert s["preemptions"] >= 1 and s["launches"] > 4  # 4 jobs on 2 slots rotate
    assert_full_progress(res, run_dir, [j.job_id for j in jobs])
    want = digest(train(steps, work=4))
    for j in jobs:  # resumed from checkpoints: the same weights as without preemption
        assert json.load(open(os.path.join(run_dir, "jobs", j.job_id, "result.json")))["digest"] == want
    assert_no_slot_shared(res)
    assert (res.launches["restart_overhead"].dropna() > 0).all() and s["restart_overhead_mean"] > 0
    assert set(res.launches["reason"]) >= {"start", "resume"} and s["restart_overhead_by_reason"]["resume"] > 0
    assert res.rounds["busy_slots"].max() <= 2
    assert wait_gone(run_dir) == []


def test_crashed_and_lease_ignoring_jobs_fail_while_others_finish(tmp_path):
    run_dir = str(tmp_path / "run")
    jobs = [
        regression_job("stubborn", 10**6, ignore_lease=1),  # never honours a revoked lease
        regression_job("crash", 300, arrival=0.5, crash_at=40),
        regression_job("a", 400, arrival=0.5),
        regression_job("b", 400, arrival=0.5),
    ]
    # One slot: at the second round the new arrivals (never run) come first, so stubborn is preempted. The first
    # round ends only once stubborn steps: revoked before its first step it would be cancelled, not failed (a
    # start of over 1 s on a busy machine), and could then run alone, unpreempted, to the bound.
    res = run(jobs, "local", cluster="slot=1", round_length=1.0, grace=0.5, run_dir=run_dir, max_time=HANG,
              on_round=lambda info: info["round"] > 0 or wait_stepping(run_dir, "stubborn"))
    # the run ended because every job ended (stubborn killed after its grace), not at the bound
    assert res.summary["interrupted"] == "", res.jobs[["job_id", "status", "launches", "error"]]
    by = res.jobs.set_index("job_id")
    assert by.loc["stubborn", "status"] == "failed" and "grace" in by.loc["stubborn", "error"]
    assert by.loc["crash", "status"] == "failed" and "injected crash" in by.loc["crash", "error"]
    assert_full_progress(res, run_dir, ["a", "b"])
    assert res.summary["jobs_failed"] == 2 and res.summary["jobs_completed"] == 2
    killed = res.launches[res.launches["job_id"] == "stubborn"]
    assert (killed["outcome"] == "killed").any()
    assert_no_slot_shared(res)
    assert wait_gone(run_dir) == []


def test_run_writes_tables_and_a_measured_trace_the_simulator_reads(tmp_path):
    from optsched.traces.io import read_trace

    run_dir, out = str(tmp_path / "run"), tmp_path / "out"
    res = run([regression_job("x", 200), regression_job("y", 200, arrival=0.2)], "local", cluster="slot=1",
              round_length=1.0, run_dir=run_dir, max_time=HANG)
    res.write(out)
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert summary["jobs_completed"] == 2
    tr = read_trace(out / "measured_trace.csv")
    assert tr.format == "tiresias" and list(tr.jobs["steps_total"]) == [200, 200]
    assert (tr.jobs["duration"] > 0).all()


def test_example_trace_file_is_the_built_in_example():
    assert (ROOT / "examples" / "workloads" / "small.csv").read_text() == EXAMPLE_CSV


def test_cli_run_sigterm_stops_every_job_process(tmp_path):
    trace = tmp_path / "long.csv"
    trace.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                     "long0,1,0,1000000,regression,100,0\nlong1,1,0,1000000,regression,100,0\n")
    run_dir = str(tmp_path / "run")
    exe = Path(sys.executable).parent / "optsched"
    p = subprocess.Popen([str(exe), "run", str(trace), "--cluster", "slot=2", "--round-length", "1",
                          "--run-dir", run_dir, "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    def steps(j):
        f = Path(run_dir, "jobs", j, "progress.json")
        return json.loads(f.read_text()).get("steps_done", 0) if f.exists() else 0

    deadline = time.time() + HANG
    while time.time() < deadline and not (steps("long0") > 0 and steps("long1") > 0):
        time.sleep(0.1)
    assert len(processes_of_run(run_dir)) == 2
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=HANG)
    assert p.returncode != 0 or b"interrupted" in out + err
    assert wait_gone(run_dir, HANG) == []
    for j in ("long0", "long1"):  # stopped at an iteration boundary with a checkpoint
        prog = json.loads(Path(run_dir, "jobs", j, "progress.json").read_text())
        assert prog["status"] == "preempted" and Path(run_dir, "jobs", j, "ckpt.npz").exists()


def test_a_job_that_cannot_start_is_failed_and_the_others_go_on(tmp_path):
    run_dir = str(tmp_path / "run")
    jobs = [RunJob("missing", 0.0, 10, ("/nonexistent/optsched-no-such-binary",)), regression_job("ok", 200)]
    res = run(jobs, "local", cluster="slot=1", round_length=1.0, run_dir=run_dir, max_time=HANG)
    by = res.jobs.set_index("job_id")
    assert by.loc["missing", "status"] == "failed" and "cannot start" in by.loc["missing", "error"]
    assert_full_progress(res, run_dir, ["ok"])


def test_jobs_stop_by_themselves_when_the_runtime_is_killed(tmp_path):
    """SIGKILL leaves no chance to clean up: the jobs notice their parent is
    gone at the next iteration boundary, checkpoint and exit."""
    trace = tmp_path / "long.csv"
    trace.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                     "long0,1,0,1000000,regression,100,0\n")
    run_dir = str(tmp_path / "run")
    exe = Path(sys.executable).parent / "optsched"
    p = subprocess.Popen([str(exe), "run", str(trace), "--cluster", "slot=1", "--round-length", "1",
                          "--run-dir", run_dir, "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + HANG
    while time.time() < deadline and not processes_of_run(run_dir):
        time.sleep(0.1)
    assert processes_of_run(run_dir)
    time.sleep(0.5)
    p.kill()
    p.wait(timeout=HANG)
    assert wait_gone(run_dir, HANG) == []
    prog = json.loads(Path(run_dir, "jobs", "long0", "progress.json").read_text())
    assert prog["status"] == "preempted" and prog["stop_reason"] == "orphaned"


# ---------------------------------------------------------------- the same pipeline as the simulator


class VirtualClock:
    def __init__(self):
        self.t = 1.0e6

    def time(self) -> float:
        return self.t

    def sleep(self, seconds: float, stop) -> bool:
        self.t += seconds
        return stop.is_set()


class VirtualHandle:
    """A job process in virtual time: it pays ``overhead`` seconds, then runs
    at ``rate`` steps/s, honours a revoked lease at once (checkpointing the
    exact progress) and writes progress files like the job library."""

    def __init__(self, ex, launch):
        self.ex, self.launch = ex, launch
        self.total = int(launch.command[launch.command.index("--steps") + 1])
        self.start = ex.clock.time()
        self.first = self.start + ex.overhead
        self.base = ex.ckpt.get(launch.job_id, 0.0)
        self.rate = ex.rates[launch.job_id]
        self.finish_at = self.first + (self.total - self.base) / self.rate
        self.rc = None
        self.last_report = -1.0

    def _write(self, status: str, t: float, steps: float) -> None:
        ran = t >= self.first
        write_json_atomic(os.path.join(self.launch.job_dir, "progress.json"), {
            "incarnation": self.launch.env["OPTSCHED_INCARNATION"], "status": status, "steps_done": int(steps),
            "started_at": self.start, "first_step_at": self.first if ran else None,
            "last_step_end": min(t, self.finish_at) if ran else None})

    def poll(self):
        if self.rc is not None:
            return self.rc
        t = self.ex.clock.time()
        lease = json.loads(Path(self.launch.job_dir, "lease.json").read_text())
        if t >= self.finish_at:
            self._write("finished", self.finish_at, self.total)
            self.rc = 0
        elif lease["revoked"] and (t >= self.first or not self.ex.lease_from_first_step):
            steps = min(self.total, self.base + max(t - self.first, 0.0) * self.rate)
            self.ex.ckpt[self.launch.job_id] = steps
            self._write("preempted", t, steps)
            self.rc = EXIT_PREEMPTED
        elif t - self.last_report >= 0.05:  # like the job library's report interval
            self.last_report = t
            self._write("running", t, min(self.total, self.base + max(t - self.first, 0.0) * self.rate))
        return self.rc

    def kill(self):
        self.rc = -9


class VirtualExecutor:
    name = "virtual"

    def __init__(self, cluster: str, rates: dict, overhead: float, lease_from_first_step: bool = False):
        from optsched.runtime.executor import local_cluster

        self.cluster, _ = local_cluster(cluster)
        self.clock = VirtualClock()
        self.rates, self.overhead, self.ckpt = rates, overhead, {}
        # True: a job reads its lease only from its first step on (the job library checks it in steps()).
        self.lease_from_first_step = lease_from_first_step

    def start(self):
        pass

    def launch(self, launch):
        os.makedirs(launch.job_dir, exist_ok=True)
        return VirtualHandle(self, launch)

    def close(self):
        pass


def _virtual_run(tmp_path, name: str, overhead: float, round_length: float, poll: float = 0.005):
    from optsched.runtime.loop import RunConfig
    from optsched.traces.io import read_trace

    trace = read_trace(ROOT / "examples" / "workloads" / "small.csv")
    rates = {r.job_id: r.steps_total / r.duration for r in trace.jobs.itertuples()}
    ex = VirtualExecutor("slot=2", rates, overhead)
    cfg = RunConfig(round_length=round_length, poll_interval=poll, throughputs="trace")
    return trace, run(trace, ex, cfg, run_dir=str(tmp_path / name))


def test_runtime_with_virtual_jobs_reproduces_the_simulator(tmp_path):
    """The runtime's stages (admission, policy, allocator, record/remove, early
    round end) are the simulator's: with jobs that progress exactly as the
    simulator's model says, both give the same JCTs and preemptions."""
    from optsched.sim import simulate

    overhead, round_length = 0.4, 2.0
    trace, res = _virtual_run(tmp_path, "a", overhead, round_length)
    sim = simulate(trace, "slot=2", policy="max_min_fairness", round_length=round_length, restart_overhead=overhead)
    real = res.jobs.set_index("job_id")["jct"]
    simulated = sim.jobs.set_index("job_id")["jct"]
    assert res.summary["jobs_completed"] == len(trace)
    np.testing.assert_allclose(real[simulated.index].to_numpy(), simulated.to_numpy(), atol=1e-6)
    assert res.summary["preemptions"] == sim.summary["preemptions"]


def test_runtime_decisions_are_deterministic_given_the_same_progress(tmp_path):
    _, a = _virtual_run(tmp_path, "a", 0.3, 2.0, poll=0.02)
    _, b = _virtual_run(tmp_path, "b", 0.3, 2.0, poll=0.02)
    cols = ["job_id", "incarnation", "slots", "launch_at", "exit_at", "outcome"]
    pd_a, pd_b = a.launches[cols].round(6), b.launches[cols].round(6)
    assert pd_a.equals(pd_b)


def test_a_job_still_starting_when_the_run_stops_is_left_unfinished_not_failed(tmp_path):
    """At the run's end (max_time, Ctrl-C) a job revoked before its first step
    is killed at once and left unfinished (its checkpoint is intact), as within
    the run. It was waited for the grace period, killed and reported failed
    with 'signal 9' (a Ray run that reached max_time reported so a job that
    was still starting)."""
    from optsched.runtime.loop import RunConfig

    ex = VirtualExecutor("slot=1", {"slow": 1.0}, overhead=1000.0, lease_from_first_step=True)
    cfg = RunConfig(round_length=1.0, grace=3.0, max_time=5.0, poll_interval=0.05)
    res = run([regression_job("slow", 100)], ex, cfg, run_dir=str(tmp_path / "run"))
    assert res.summary["interrupted"] == "max_time"
    row = res.jobs.set_index("job_id").loc["slow"]
    assert (row["status"], row["error"]) == ("unfinished", ""), row["error"]
    assert list(res.launches["outcome"]) == ["cancelled"] and res.summary["jobs_failed"] == 0


def test_slot_speed_emulates_a_slower_type_and_the_runtime_measures_it(tmp_path):
    from optsched.runtime.loop import RunConfig

    # Steps that mostly wait (3 ms, an accelerator's time), on a type a quarter as fast: the measured ratio stays
    # far below 0.8 also when the CPU share of the job on the fast slot drops under load (the slow slot's
    # stretch multiplies the step as measured; 0.5 with CPU-only steps came within such noise of 0.8).
    jobs = [regression_job(j, 120, arrival=0.5 if j == "c" else 0.0, sleep_ms=3) for j in ("a", "b", "c")]
    cfg = RunConfig(round_length=1.0, slot_speed={"slow": 0.25}, max_time=HANG)
    res = run(jobs, "local", cfg, cluster="fast=1,slow=1", run_dir=str(tmp_path / "run"))
    assert res.summary["jobs_completed"] == 3
    thr = res.summary["throughput_by_type"]
    assert thr["slow"] < 0.8 * thr["fast"], thr  # 0.25 on an idle machine
    assert_no_slot_shared(res)


def test_a_job_that_exits_with_an_error_reports_its_last_output_line(tmp_path):
    """A workload that refused its arguments (exit code 2, no progress.json) was
    reported as just 'exit code 2'; the reason was only in a temporary folder."""
    import sys

    run_dir = str(tmp_path / "run")
    script = tmp_path / "refuse.py"
    script.write_text("import sys\nprint('starting')\nsys.exit('error: unrecognized arguments: --wrk 1')\n")
    jobs = [RunJob("bad", 0.0, 10, (sys.executable, str(script))), regression_job("ok", 200)]
    res = run(jobs, "local", cluster="slot=1", round_length=1.0, run_dir=run_dir, max_time=HANG)
    by = res.jobs.set_index("job_id")
    assert by.loc["bad", "status"] == "failed"
    assert by.loc["bad", "error"] == "exit code 1: error: unrecognized arguments: --wrk 1"
    assert_full_progress(res, run_dir, ["ok"])


def test_last_line_reads_only_this_incarnations_output(tmp_path):
    """Incarnations append to one output.log: a job killed before it printed anything was
    reported with the previous incarnation's last line."""
    from optsched.runtime.loop import last_line

    log = tmp_path / "output.log"
    log.write_text("step 50: checkpoint saved, stopping\n")
    start = log.stat().st_size
    assert last_line(str(log), start) == ""
    with log.open("a") as f:
        f.write("resuming\n\nerror: out of memory  \n\n")
    assert last_line(str(log), start) == "error: out of memory"
    assert last_line(str(log)) == "error: out of memory"
    assert last_line(str(tmp_path / "missing.log")) == ""


def test_optsched_run_exits_1_when_a_job_failed(tmp_path):
    """The failure was reported but the command exited 0: a script could not see it."""
    from typer.testing import CliRunner

    from optsched.cli import app

    trace = tmp_path / "t.csv"
    trace.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                     "bad,1,0,200,regression:no_such_knob=1,1,0\n")
    res = CliRunner().invoke(app, ["run", str(trace), "--cluster", "slot=1", "--quiet", "--json"])
    assert res.exit_code == 1, res.output
    assert "1 of 1 jobs failed — bad: exit code 2: " in res.output and "unrecognized arguments" in res.output


# ---------------------------------------------------------------- run folders (issue 30)


def test_a_used_run_dir_is_refused_unless_resume_and_resume_continues_from_the_checkpoints(tmp_path):
    """Re-running with the same --run-dir silently restored the killed run's checkpoints while
    reporting a fresh run. Now it is refused, one line, exit 2; --resume continues explicitly,
    from each job's checkpoint, and says so."""
    from typer.testing import CliRunner

    from optsched.cli import app
    from optsched.runtime.loop import RunConfig

    run_dir = tmp_path / "run"
    ex = VirtualExecutor("slot=1", {"a": 100.0}, overhead=0.0)
    cfg = RunConfig(round_length=1.0, max_time=2.0, poll_interval=0.05)
    first = run([regression_job("a", 1000)], ex, cfg, run_dir=str(run_dir))
    assert first.summary["interrupted"] == "max_time" and first.summary["resumed_jobs"] == 0
    done = int(first.jobs.set_index("job_id").loc["a", "steps_done"])
    assert 0 < done < 1000
    np.savez(run_dir / "jobs" / "a" / "ckpt.npz", __optsched_step__=np.int64(done))  # (the virtual job keeps it in memory)

    trace = tmp_path / "t.csv"
    trace.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\na,1,0,200,regression,1,0\n")
    res = CliRunner().invoke(app, ["run", str(trace), "--cluster", "slot=1", "--run-dir", str(run_dir), "--quiet"])
    assert res.exit_code == 2, res.output
    line = res.output.strip().splitlines()[-1]
    assert "--run-dir" in line and "--resume" in line and "earlier run" in line
    with pytest.raises(Exception, match="--resume"):
        run([regression_job("a", 1000)], VirtualExecutor("slot=1", {"a": 100.0}, 0.0), cfg, run_dir=str(run_dir))

    ex2 = VirtualExecutor("slot=1", {"a": 100.0}, overhead=0.0)
    ex2.ckpt["a"] = float(done)
    again = run([regression_job("a", 1000)], ex2, RunConfig(round_length=1.0, poll_interval=0.05),
                run_dir=str(run_dir), resume=True)
    row = again.jobs.set_index("job_id").loc["a"]
    assert again.summary["resumed_jobs"] == 1 and row["status"] == "finished"
    assert again.launches["steps_start"].iloc[0] == done  # it started from the checkpoint, not from 0


def test_the_temporary_run_folder_is_named_and_removed_unless_keep(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from optsched.cli import app

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # (re-read TMPDIR)
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\na,1,0,50,regression,1,0\n")
    res = CliRunner().invoke(app, ["run", str(trace), "--cluster", "slot=1", "--quiet", "--round-length", "1"])
    assert res.exit_code == 0, res.output
    named = [w for w in res.output.split() if "optsched-run-" in w]
    assert named and f"run folder {named[0]} removed" in res.output
    assert not Path(named[0]).exists() and not list(tmp_path.glob("optsched-run-*"))
    res = CliRunner().invoke(app, ["run", str(trace), "--cluster", "slot=1", "--quiet", "--keep"])
    assert res.exit_code == 0, res.output
    kept = [w for w in res.output.split() if "optsched-run-" in w]
    assert kept and Path(kept[0], "jobs", "a", "result.json").exists() and f"run folder {kept[0]} kept" in res.output
    res = CliRunner().invoke(app, ["run", str(trace), "--cluster", "slot=1", "--round-length", "1"])
    assert res.exit_code == 0 and "removed at the end; --keep keeps it" in res.output  # named at the start too


# ---------------------------------------------------------------- the core's options in optsched run


def test_run_refuses_packing_by_name_and_checks_the_cores_options(tmp_path):
    from typer.testing import CliRunner

    from optsched.cli import app

    trace = tmp_path / "t.csv"
    trace.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\na,1,0,50,regression,1,0\n")
    for args, field in ((["--packing"], "--packing"), (["--admission", "lifo"], "--admission"),
                        (["--load-factor", "2"], "--load-factor"), (["--partitions", "0"], "--partitions"),
                        (["--policy", "fifo", "--partitions", "2"], "--partitions"),
                        (["--loss-threshold", "0.1"], "--loss-threshold"),
                        (["--restart-overhead", "30"], "--restart-overhead"), (["--time-limit", "0"], "--time-limit")):
        res = CliRunner().invoke(app, ["run", str(trace), "--cluster", "slot=1", "--quiet", *args])
        assert res.exit_code == 2, (args, res.output)
        assert res.output.strip().splitlines()[-1].startswith(f"Error: {field}") or field in res.output, res.output
        assert "Traceback" not in res.output


def test_run_admits_by_load_and_recomputes_by_the_cores_rules(tmp_path):
    """--admission load (FIFO within load_factor × slots) and --min-recompute-interval in a
    real-executor run: the core's rules, in virtual time."""
    from optsched.runtime.loop import RunConfig

    rates = {f"j{i}": 100.0 for i in range(4)}
    jobs = [regression_job(f"j{i}", 300) for i in range(4)]
    ex = VirtualExecutor("slot=2", rates, overhead=0.0)
    res = run(jobs, ex, RunConfig(round_length=1.0, poll_interval=0.05, admission="load", load_factor=1.0),
              run_dir=str(tmp_path / "a"))
    assert res.summary["jobs_completed"] == 4
    # 2 slots × load factor 1: two jobs at a time, the others wait (never preempted, never more than 2 active)
    assert res.rounds["active"].max() == 2 and res.summary["preemptions"] == 0
    ex = VirtualExecutor("slot=2", rates, overhead=0.0)
    lazy = run(jobs, ex, RunConfig(round_length=1.0, poll_interval=0.05, min_recompute_interval=1e6),
               run_dir=str(tmp_path / "b"))
    assert lazy.summary["recomputations"] == 1 and lazy.summary["jobs_completed"] == 4


def test_run_ends_jobs_at_the_simulators_loss_termination_step(tmp_path):
    """--loss-threshold in optsched run: a job with a convergence profile runs to the step the
    simulator ends it at (the same rule, stages.termination_fractions); the other runs to its length."""
    from optsched.runtime.loop import RunConfig
    from optsched.sim import simulate

    trace = tmp_path / "t.csv"
    trace.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval,"
                     "loss_initial,loss_final,loss_tau,loss_alpha\n"
                     "conv,1,0,1000,regression,10,0,2.0,0.1,0.05,1.0\n"
                     "plain,1,0,500,regression,5,0,,,,\n")
    ex = VirtualExecutor("slot=2", {"conv": 100.0, "plain": 100.0}, overhead=0.0)
    res = run(str(trace), ex, RunConfig(round_length=1.0, poll_interval=0.05), run_dir=str(tmp_path / "run"),
              loss_threshold=0.1)
    by = res.jobs.set_index("job_id")
    sim = simulate(str(trace), "slot=2", policy="max_min_fairness", round_length=1.0, loss_threshold=0.1)
    assert sim.summary["loss_terminated_jobs"] == 1
    want = round(1000 * sim.summary["loss_work_fraction"] * 1.5 - 500)  # conv's steps in the simulation
    assert 0 < by.loc["conv", "steps_total"] < 1000 and abs(by.loc["conv", "steps_total"] - want) <= 1
    assert by.loc["plain", "steps_total"] == 500 and (by["status"] == "finished").all()
