"""``optsched slurm`` (the agent) on a real local Slurm cluster: jobs submitted
with ``sbatch --hold`` while it runs, one cancelled by its user, two that break
the contract; the agent SIGKILLed and restarted twice, slurmctld restarted once.
No job lost or started twice, every GPU held by one job at a time, decisions
equal to a fresh session fed the recorded inputs, each bad job named once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

import pytest
from _slurm_private import private_cluster

from optsched.model import Cluster, OptschedError, Server
from optsched.runtime.workloads.regression import digest, train
from optsched.slurm import cli as scli
from optsched.slurm.agent import (AgentDB, ContractError, decision_of, parse_contract, replay, requested_gpus,
                                  results)
from optsched.slurm.localcluster import unavailable_reason

REASON = unavailable_reason()
REGRESSION = os.path.join(os.path.dirname(os.path.abspath(train.__code__.co_filename)), "regression.py")
needs_slurm = pytest.mark.skipif(REASON is not None, reason=REASON or "")

CLUSTER = Cluster(gpus={"v100": 8, "k80": 8}, servers=[Server(id=f"n{i}", gpu_type=t, gpus=4)
                                                      for i, t in enumerate(("v100", "v100", "k80", "k80"))])


def _row(comment, tres="gres:gpu:2", nodes="1"):
    return {"id": "7", "name": "train", "comment": comment, "tres": tres, "node_count": nodes}


def test_the_contract_is_parsed_and_every_breach_is_named():
    spec = parse_contract(_row("optsched: throughput=v100:2.5,k80:1 steps=100 weight=2"), CLUSTER, {})
    assert spec == {"id": "slurm-7", "model": "train", "scale_factor": 2, "throughput": {"v100": 2.5, "k80": 1.0},
                    "steps_total": 100.0, "weight": 2.0}
    # a model keyed into the agent's table; a typed --gres pins the type
    spec = parse_contract(_row("optsched: model=bert", "gres:gpu:k80:4"), CLUSTER, {"bert": {"v100": 3, "k80": 1}})
    assert spec["throughput"] == {"k80": 1.0} and spec["scale_factor"] == 4
    bad = {
        "no 'optsched:": _row("(null)"),
        "'thr=3' is not one of": _row("optsched: thr=3"),
        "throughput 'v100' is not TYPE:STEPS_PER_S": _row("optsched: throughput=v100"),
        "throughput 'v100:-1'": _row("optsched: throughput=v100:-1"),
        "model 'gpt' is not in": _row("optsched: model=gpt"),
        "give throughput=": _row("optsched: steps=4"),
        "asks for no GPU": _row("optsched: throughput=v100:1", tres=""),
        "asks for GPU type 'a100', which no node has": _row("optsched: throughput=a100:1", "gres:gpu:a100:1"),
        "names GPU types a100, which no node has": _row("optsched: throughput=a100:1"),
        "asks for 8 GPUs on one node": _row("optsched: throughput=v100:1", "gres:gpu:8"),
        "asks for 2 nodes": _row("optsched: throughput=v100:1", nodes="2"),
        "steps='x' is not a number": _row("optsched: throughput=v100:1 steps=x"),
    }
    for message, row in bad.items():
        with pytest.raises(ContractError, match=message.replace("(", r"\(")):
            parse_contract(row, CLUSTER, {"bert": {"v100": 1}})
    assert requested_gpus("gres/gpu:v100=2") == ("v100", 2) and requested_gpus("gres:gpu:3") == (None, 3)


# ---------------------------------------------------------------------- the acceptance run

def script(ticks: int) -> str:
    """A job's work: ``ticks`` ticks of 0.2 s, checkpointed after every tick (a requeued job resumes)."""
    return ("echo start >> starts; n=$(cat ckpt 2>/dev/null || echo 0); "
            f"while [ $n -lt {ticks} ]; do sleep 0.2; n=$((n+1)); echo $n > ckpt.tmp && mv ckpt.tmp ckpt; done; "
            "echo done >> starts")


@pytest.fixture(scope="module")
def cluster():
    c = private_cluster("agent")  # 2 v100 + 2 k80 nodes, 4 GPUs each
    yield c
    c.remove()


def _sbatch(c, work: str, name: str, gpus: str, comment: str | None, ticks: int = 10) -> str:
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    argv = ["sbatch", "--parsable", "--hold", f"--gres=gpu:{gpus}", "-J", name, "-D", d, "-o", "out.log"]
    if comment:
        argv += ["--comment", comment]
    return scli.run(argv + ["--wrap", script(ticks)], c.env).stdout.strip().split(";")[0]


class GpuWatch(threading.Thread):
    """Every 0.2 s: the GPU indices each running job holds, per node, from
    ``scontrol -d show jobs``; two jobs on one GPU (or more GPUs than the node has) is a violation."""

    def __init__(self, c):
        super().__init__(daemon=True)
        self.c, self.stop, self.samples, self.violations = c, threading.Event(), 0, []

    def run(self):
        while not self.stop.is_set():
            try:
                jobs = scli.scontrol_jobs_detail(self.c.env)
            except Exception:  # noqa: BLE001 — slurmctld restarting
                time.sleep(0.2)
                continue
            held: dict[tuple[str, int], str] = {}
            for jid, rec in jobs.items():
                if rec.get("JobState") not in ("RUNNING", "COMPLETING"):
                    continue
                for node, idx in scli.gpu_indices(rec).items():
                    for g in idx:
                        if g >= 4 or (node, g) in held:
                            self.violations.append((node, g, held.get((node, g)), jid))
                        held[(node, g)] = jid
            self.samples += 1
            time.sleep(0.2)


def _agent(c, db: str, log: str) -> subprocess.Popen:
    code = "from optsched.cli import main; main()"
    return subprocess.Popen([sys.executable, "-c", code, "slurm", "--db", db, "--round-length", "2",
                             "--slurm-conf", c.conf], stdout=open(log, "a"), stderr=subprocess.STDOUT,
                            env={**os.environ, **c.env})


def _rounds(db: str) -> int:
    """Rounds the agent has applied (0 before its first)."""
    if not os.path.exists(db):
        return 0
    try:
        adb = AgentDB(db)
        try:
            return sum(r["applied"] for r in adb.rounds())
        finally:
            adb.close()
    except Exception:  # noqa: BLE001 — the agent creating its tables right now
        return 0


def _state(c, sid: str) -> str | None:
    try:
        return (scli.scontrol_job(sid, c.env) or {}).get("JobState")
    except scli.SlurmUnavailable:
        return None


def _wait(cond, timeout: float = 600.0) -> None:  # (a bound only a hang reaches)
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.1)


def _decided_starts(decisions: list[dict], job: str) -> int:
    n, before = 0, False
    for d in decisions:
        now = job in d["placement"]
        n += (now and not before) or job in d["migrated"]
        before = now
    return n


@needs_slurm
def test_agent_survives_sigkill_and_a_controller_restart(cluster):
    c = cluster
    work = tempfile.mkdtemp(prefix="optsched-agent-", dir="/tmp")
    db, logs = os.path.join(work, "agent.db"), [os.path.join(work, f"agent{i}.log") for i in range(3)]
    thr = "optsched: throughput=v100:2,k80:1"
    watch = GpuWatch(c)
    watch.start()
    agent = _agent(c, db, logs[0])
    good: dict[str, str] = {}
    ticks = {"a1": 30, "a2": 30, "a5": 30}  # 20 GPUs asked of 16 from the start: the policy time-shares
    try:
        for name, g in (("a1", 4), ("a2", 4), ("a3", 2), ("a4", 2), ("a5", 4)):
            good[name] = _sbatch(c, work, name, str(g), thr, ticks.get(name, 10))
        bad_type = _sbatch(c, work, "badtype", "a100:1", "optsched: throughput=a100:3")
        bad_contract = _sbatch(c, work, "nothroughput", "1", "optsched: steps=10")
        _wait(lambda: _rounds(db) >= 2)  # (the agent's start takes seconds on a loaded machine)
        agent.send_signal(signal.SIGKILL)  # 1st kill, mid-run
        agent.wait()
        agent = _agent(c, db, logs[1])
        for name, g in (("b1", 4), ("b2", 4), ("b3", 1), ("b4", 2)):
            good[name] = _sbatch(c, work, name, str(g), f"{thr} weight=2" if name == "b1" else thr)
        # a job using optsched's job library: its progress file is in its working directory; each step waits
    # 25 ms (an accelerator's time), so it runs for several rounds however fast the machine's CPUs are
        d = os.path.join(work, "p1")
        os.makedirs(d)
        good["p1"] = scli.run(["sbatch", "--parsable", "--hold", "--gres=gpu:2", "-J", "p1", "-D", d, "-o", "out.log",
                               "--comment", "optsched: throughput=v100:300,k80:150 steps=400", "--wrap",
                               f"export OPTSCHED_JOB_DIR=$PWD; exec {sys.executable} {REGRESSION} --steps 400 --work 2 --sleep-ms 25"],
                              c.env).stdout.strip()
        _wait(lambda: _state(c, good["a4"]) in ("RUNNING", "COMPLETED"))
        scli.run(["scancel", good["a4"]], c.env)  # cancelled by its user (if it has not finished already)
        seen = _rounds(db)
        _wait(lambda: _rounds(db) >= seen + 1)
        c.restart_controller()
        seen = _rounds(db)
        _wait(lambda: _rounds(db) >= seen + 1)
        agent.send_signal(signal.SIGKILL)  # 2nd kill
        agent.wait()
        agent = _agent(c, db, logs[2])
        good["c1"] = _sbatch(c, work, "c1", "4", thr)
        deadline = time.monotonic() + 600  # (a bound only a hang reaches)
        leak_since, repairs = None, 0
        while time.monotonic() < deadline:
            time.sleep(0.5)
            # Slurm 22.05 can leak the GPUs of a job it allocated just before the restart above (the job
            # ends, its GPUs stay used; a job placed there pends forever): a leak that lasts is repaired
            # by one more controller restart, which recounts them (LocalCluster.leaked_gpus).
            try:
                leak = c.leaked_gpus() if repairs < 3 else {}
            except OptschedError:  # (the controller not answering this instant)
                leak = {}
            if not leak:
                leak_since = None
            elif leak_since is None or leak != leak_since[0]:
                leak_since = (leak, time.monotonic())
            elif time.monotonic() - leak_since[1] > 5:
                c.restart_controller()
                leak_since, repairs = None, repairs + 1
            states = {n: _state(c, j) for n, j in good.items()}
            if all(s in ("COMPLETED", "CANCELLED") for s in states.values()):
                rows, summary = results(db)
                # ... and the agent has observed each end: a job-library job can finish in the session (its
                # steps observed) a round before the agent sees Slurm list it as ended ("finished" until then)
                if summary["active"] == 0 and len(rows) == len(good) and all(r["status"] != "finished" for r in rows):
                    break
        else:
            pytest.fail(f"jobs not done: {states}, agent: {[(r['slurm_id'], r['status']) for r in results(db)[0]]}")
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=600)  # (a bound only a hang reaches: it may be mid-round on a busy machine)
        except subprocess.TimeoutExpired:  # never leave an agent behind to act on a later run's jobs
            agent.kill()
            agent.wait()
            raise
        watch.stop.set()
        watch.join()
    # every GPU held by at most one job at every sample
    assert watch.samples > 20 and watch.violations == []
    # the decisions equal the uninterrupted twin's: a fresh session fed the recorded inputs
    adb = AgentDB(db)
    adb_rounds = adb.rounds()
    recorded = [r["decision"] for r in adb_rounds if r["decision"] is not None]
    actions = adb.actions()
    adb.close()
    assert len(recorded) > 5 and replay(db) == recorded
    # no job lost: every good job is known and finished; the user's cancel is a cancel
    rows, summary = results(db)
    by_slurm = {r["slurm_id"]: r for r in rows}
    assert set(by_slurm) == set(good.values())
    cancelled = _state(c, good["a4"]) == "CANCELLED"
    assert all(r["status"] == ("cancelled" if s == good["a4"] and cancelled else "completed")
               for s, r in by_slurm.items())
    # no job started twice: the script's own start lines = Slurm's restarts + 1, at most the decided starts,
    # and each finished its work once
    requeues = Counter(sid for _, sid, what in actions if what == "requeuehold")
    for name, sid in good.items():
        if (name == "a4" and cancelled) or name == "p1":
            continue
        lines = open(os.path.join(work, name, "starts")).read().split()
        restarts = int(scli.scontrol_job(sid, c.env)["Restarts"])
        assert lines.count("start") == restarts + 1 <= _decided_starts(recorded, f"slurm-{sid}"), name
        # A requeue racing with the job's own end makes Slurm run it again (its semantics): it then starts
        # from its final checkpoint and ends at once, never redoing work.
        first = lines.index("done")
        assert lines[-1] == "done" and lines[first + 1:] == ["start", "done"] * ((len(lines) - first - 1) // 2), name
        assert open(os.path.join(work, name, "ckpt")).read().strip() == str(ticks.get(name, 10)), name
        assert restarts == requeues[sid], name  # every requeue Slurm counted is one the agent issued
    assert sum(requeues.values()) > 0  # the fairness policy preempted
    # the job-library job: its steps were observed while it ran, and it ended with an uninterrupted run's weights
    seen = [p["steps_done"] for r in adb_rounds for p in r["inputs"].get("progress", [])
            if p["job_id"] == f"slurm-{good['p1']}"]
    assert seen and max(seen) > 0
    result = json.load(open(os.path.join(work, "p1", "result.json")))
    assert result["steps"] == 400 and result["digest"] == digest(train(400, work=2))
    # each bad job named in one line across the three agent runs, and left held to Slurm
    text = "".join(open(p).read() for p in logs)
    for sid, why in ((bad_type, "asks for GPU type 'a100', which no node has"),
                     (bad_contract, "give throughput=TYPE:STEPS_PER_S")):
        lines = [ln for ln in text.splitlines() if f"job {sid} " in ln]
        assert len(lines) == 1 and why in lines[0] and "left to Slurm (held)" in lines[0], lines
        rec = scli.scontrol_job(sid, c.env)
        assert rec["JobState"] == "PENDING" and rec["Priority"] == "0"
    assert "Traceback" not in text
    # the result table
    r = subprocess.run([sys.executable, "-c", "from optsched.cli import main; main()", "slurm", "status", "--db", db],
                       capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0 and "11 finished" in r.stdout and "2 left to Slurm" in r.stdout, r.stdout + r.stderr
    shutil.rmtree(work, ignore_errors=True)


def test_decision_of_keeps_what_the_twin_compares():
    d = {"round": 1, "time": 2.0, "placement": {}, "started": [], "preempted": [], "migrated": [], "queued": [],
         "recomputed": True, "solve_seconds": 0.01, "note": ""}
    assert set(decision_of(d)) == {"round", "time", "placement", "started", "preempted", "migrated", "queued"}


@needs_slurm
def test_a_restart_on_a_changed_cluster_says_so_and_keeps_the_recorded_one(cluster, tmp_path):
    import io

    from optsched.service.session import Session
    from optsched.service.store import Store
    from optsched.slurm.agent import Agent, AgentConfig, session_config

    db = str(tmp_path / "agent.db")
    cfg = AgentConfig(db=db, round_length=5.0, env=cluster.env)
    small = Cluster(gpus={"v100": 4}, servers=[Server(id="n0", gpu_type="v100", gpus=4)])
    store = Store(db)
    Session.create(session_config(cfg, small), store)
    store.close()
    adb = AgentDB(db)
    adb.set_meta("session_config", session_config(cfg, small))
    adb.close()
    out = io.StringIO()
    agent = Agent(cfg, out=out)
    agent.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and "the cluster changed since" in lines[0] and "v100=8, k80=8 now" in lines[0]
    assert agent.cluster == small
    with pytest.raises(OptschedError, match="this agent ran with --policy max_min_fairness"):
        Agent(AgentConfig(db=db, policy="las", round_length=5.0, env=cluster.env))


def test_inside_a_slurm_job_sigterm_checkpoints_like_a_revoked_lease(tmp_path):
    """The agent preempts with requeuehold (SIGTERM, then SIGKILL KillWait later): a job-library job
    checkpoints at its next step and exits 75, and its next incarnation ends with an uninterrupted
    run's weights. No Slurm needed: SLURM_JOB_ID is what the library looks at."""
    job_dir = tmp_path / "job"
    env = {**os.environ, "SLURM_JOB_ID": "1", "OPTSCHED_JOB_DIR": str(job_dir)}
    argv = [sys.executable, REGRESSION, "--steps", "600", "--dim", "8", "--batch", "8", "--sleep-ms", "5"]
    p = subprocess.Popen(argv, env=env)
    deadline = time.monotonic() + 600  # (a bound only a hang reaches)
    while time.monotonic() < deadline:  # until it has made progress (its report says so)
        try:
            if json.load(open(job_dir / "progress.json"))["steps_done"] > 0:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=600) == 75  # (a bound only a hang reaches)
    prog = json.load(open(job_dir / "progress.json"))
    assert prog["status"] == "preempted" and prog["stop_reason"] == "sigterm" and 0 < prog["steps_done"] < 600
    assert subprocess.run(argv, env=env).returncode == 0  # resumed from the checkpoint
    result = json.load(open(job_dir / "result.json"))
    assert json.load(open(job_dir / "progress.json"))["restored_step"] == prog["steps_done"]
    assert result["steps"] == 600 and result["digest"] == digest(train(600, dim=8, batch=8))
