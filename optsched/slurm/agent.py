"""``optsched slurm``: optsched deciding for the jobs users submit to Slurm.

Users submit as always, held, with a one-line contract in the comment::

    sbatch --hold --gres=gpu:2 --comment 'optsched: throughput=v100:2.1,k80:0.7 steps=5000 weight=1' train.sh
    sbatch --hold --gres=gpu:1 --comment 'optsched: model=resnet50' train.sh     (model keyed into --throughputs)

Every round (``round_length`` wall seconds) the agent

    observe   reads Slurm (``squeue``, machine-readable): jobs carrying an
              ``optsched:`` comment (or every job of ``--partition``) that it
              has not seen are *new*; jobs it manages that Slurm lists as ended
              (completed, failed, cancelled by their user) or no longer lists
              are *gone*. A job that breaks the contract gets one line naming
              it and is left to Slurm (held jobs stay held);
    record    writes those observed inputs to its SQLite file *before* using them;
    decide    feeds them to a ``Session`` (optsched.service.session: the
              core's external executor, durable in the same file): submit the
              new, remove the gone, ``next_round()`` — the round's placement,
              started, preempted, migrated;
    apply     makes Slurm match the placement with ``scontrol``: a placed job
              gets ``ReqNodeList=NODE`` and is released; a job no longer placed
              is requeued held (``requeuehold``: Slurm sends SIGTERM — the
              job library checkpoints on it inside a Slurm job — and the job is
              pending held again); a migrated job both. Applying is idempotent (it reads Slurm's state and issues
              only what differs), so doing it twice starts nothing twice.

Durability and determinism: a round's inputs are committed before they are fed,
its decision after; a restarted agent (after SIGKILL) finishes the round it was
in from the *recorded* inputs (never re-observing it), re-applies the last
decision against what ``squeue`` shows, and goes on. Decisions are a function
of the recorded inputs alone: the session clock advances ``round_length`` per
round, whatever the wall clock did, so ``replay(db)`` — a fresh in-memory
Session fed the recorded inputs — must give the very same decisions (the
tests check it after SIGKILLs and a slurmctld restart).

Progress: a running job that uses optsched's job library with
``OPTSCHED_JOB_DIR=$PWD`` leaves ``progress.json`` in its working directory;
its steps done (and, when fresh, its measured steps/s) are observed inputs of
the round like any other. Not observed (documented limits): the steps of other
jobs (a job ends when Slurm says it ended; the session counts attained service
in rounds), Slurm jobs outside the contract (the agent assumes the GPUs of its nodes are its own: give it a
partition). A job asking for a GPU type in ``--gres`` may run only on that type
(Slurm 22.05 cannot change a pending job's GPU type).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import sys
import time
from dataclasses import dataclass, field

from optsched.model import Cluster, OptschedError, Server
from optsched.slurm import cli as scli

log = logging.getLogger("optsched.slurm")

CONTRACT = "optsched:"
SESSION_ID = "slurm"
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
            "PREEMPTED", "SPECIAL_EXIT", "REVOKED"}
RUNNING = {"RUNNING", "CONFIGURING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}
CONTRACT_KEYS = ("throughput", "model", "steps", "weight")


class _Stopped(Exception):
    """stop() became true while the agent waited for Slurm."""


class ContractError(OptschedError):
    """A job that does not follow the contract (named in one line, left to Slurm)."""


@dataclass(frozen=True)
class AgentConfig:
    db: str
    policy: str = "max_min_fairness"
    round_length: float = 60.0  # wall seconds between rounds; also the session's round length
    partition: str | None = None
    throughputs: dict = field(default_factory=dict)  # model -> {gpu type: steps/s}
    env: dict = field(default_factory=dict)  # SLURM_CONF for the commands
    policy_options: dict = field(default_factory=dict)


# ---------------------------------------------------------------------- the contract


def job_id_of(slurm_id: str) -> str:
    return f"slurm-{slurm_id}"


def requested_gpus(tres: str) -> tuple[str | None, int] | None:
    """``gres:gpu:v100:2`` / ``gres/gpu=2`` / ``gres:gpu:2`` → (type or None, count); None without GPUs."""
    for part in (tres or "").split(","):
        p = part.replace("gres/", "gres:").replace("=", ":")
        bits = p.split(":")
        if bits and bits[0] == "gres":
            bits = bits[1:]
        if not bits or bits[0] != "gpu":
            continue
        if len(bits) == 2 and bits[1].isdigit():
            return None, int(bits[1])
        if len(bits) == 3 and bits[2].isdigit():
            return bits[1], int(bits[2])
    return None


def contract_fields(comment: str) -> dict[str, str]:
    """``optsched: throughput=v100:2,k80:1 steps=10`` → {"throughput": ..., "steps": ...}."""
    text = "" if comment in ("(null)", None) else comment.strip()
    if not text.startswith(CONTRACT):
        raise ContractError(f"no '{CONTRACT} ...' comment (throughput=TYPE:STEPS_PER_S,... or model=NAME)")
    fields: dict[str, str] = {}
    for tok in text[len(CONTRACT):].split():
        key, eq, value = tok.partition("=")
        if not eq or key not in CONTRACT_KEYS:
            raise ContractError(f"comment: {tok!r} is not one of {', '.join(k + '=' for k in CONTRACT_KEYS)}")
        fields[key] = value
    return fields


def contract_rates(fields: dict[str, str], table: dict) -> dict[str, float]:
    """Steps/s per GPU type: the comment's ``throughput=``, else the table's row for ``model=``."""
    if "throughput" in fields:
        thr = {}
        for part in fields["throughput"].split(","):
            t, colon, v = part.partition(":")
            try:
                rate = float(v)
            except ValueError:
                rate = float("nan")
            if not colon or not t or not math.isfinite(rate) or rate <= 0:
                raise ContractError(f"comment: throughput {part!r} is not TYPE:STEPS_PER_S with a positive rate")
            thr[t] = rate
        return thr
    if "model" in fields:
        if fields["model"] not in table:
            raise ContractError(f"comment: model {fields['model']!r} is not in the agent's throughput table")
        return {t: float(v) for t, v in table[fields["model"]].items()}
    raise ContractError("comment: give throughput=TYPE:STEPS_PER_S,... or model=NAME")


def parse_contract(row: dict, cluster: Cluster, table: dict) -> dict:
    """The session's JobSpec (as a dict) for a squeue row; ContractError naming what is wrong."""
    fields = contract_fields(row.get("comment") or "")
    req = requested_gpus(row.get("tres", ""))
    if req is None:
        raise ContractError("asks for no GPU (submit with --gres=gpu:N)")
    want_type, count = req
    if row.get("node_count", "1") not in ("1", ""):
        raise ContractError(f"asks for {row['node_count']} nodes; the agent places one-node jobs")
    thr = contract_rates(fields, table)
    if want_type is not None:  # a typed --gres: only that type (Slurm cannot change it)
        if want_type not in cluster.gpus:
            raise ContractError(f"asks for GPU type {want_type!r}, which no node has ({', '.join(cluster.gpus)})")
        if not thr.get(want_type):
            raise ContractError(f"asks for GPU type {want_type!r} but its throughput names no rate for it")
        thr = {want_type: thr[want_type]}
    usable = {t: v for t, v in thr.items() if t in cluster.gpus}
    if not usable:
        raise ContractError(f"names GPU types {', '.join(sorted(thr))}, which no node has ({', '.join(cluster.gpus)})")
    biggest = {t: max(s.gpus for s in cluster.servers if s.gpu_type == t) for t in usable}
    if all(count > b for b in biggest.values()):
        raise ContractError(f"asks for {count} GPUs on one node; its types' nodes have at most "
                            f"{max(biggest.values())}")
    spec = {"id": job_id_of(row["id"]), "model": fields.get("model", row.get("name", ""))[:256],
            "scale_factor": count, "throughput": usable}
    for key, name in (("steps", "steps_total"), ("weight", "weight")):
        if key in fields:
            try:
                spec[name] = float(fields[key])
            except ValueError:
                raise ContractError(f"comment: {key}={fields[key]!r} is not a number") from None
    return spec


def cluster_from_slurm(env: dict, partition: str | None = None) -> Cluster:
    """Servers = Slurm nodes with typed GPUs (``Gres=gpu:TYPE:N``), in ``partition`` when given."""
    nodes = scli.scontrol_nodes(env)
    if partition:
        nodes = [n for n in nodes if partition in n.get("Partitions", "").split(",")]
    servers, gpus = [], {}
    for n in nodes:
        g = scli.node_gres(n)
        if g is None:
            continue
        t, c = g
        servers.append(Server(id=n["NodeName"], gpu_type=t, gpus=c))
        gpus[t] = gpus.get(t, 0) + c
    if not servers:
        where = f"partition {partition!r}" if partition else "the cluster"
        raise OptschedError(f"slurm: no node of {where} has typed GPUs (Gres=gpu:TYPE:N in slurm.conf)")
    return Cluster(gpus=gpus, servers=servers)


# ---------------------------------------------------------------------- durable bookkeeping


class AgentDB:
    """The agent's own tables, in the session's SQLite file."""

    def __init__(self, path: str):
        self.db = sqlite3.connect(path, isolation_level=None, timeout=30.0)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript("""
            CREATE TABLE IF NOT EXISTS slurm_agent_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS slurm_agent_jobs (slurm_id TEXT PRIMARY KEY, job_id TEXT NOT NULL,
                status TEXT NOT NULL, seen_round INTEGER NOT NULL, end_state TEXT);
            CREATE TABLE IF NOT EXISTS slurm_agent_notes (slurm_id TEXT PRIMARY KEY, line TEXT NOT NULL,
                printed INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE IF NOT EXISTS slurm_agent_rounds (round INTEGER PRIMARY KEY, inputs TEXT NOT NULL,
                decision TEXT, applied INTEGER NOT NULL DEFAULT 0, observed_at REAL NOT NULL);
            CREATE TABLE IF NOT EXISTS slurm_agent_actions (n INTEGER PRIMARY KEY AUTOINCREMENT, round INTEGER,
                slurm_id TEXT, action TEXT, at REAL);
        """)

    def meta(self, key: str):
        r = self.db.execute("SELECT value FROM slurm_agent_meta WHERE key=?", (key,)).fetchone()
        return None if r is None else json.loads(r[0])

    def set_meta(self, key: str, value) -> None:
        self.db.execute("INSERT OR REPLACE INTO slurm_agent_meta VALUES (?, ?)", (key, json.dumps(value)))

    def jobs(self) -> dict[str, dict]:
        return {r[0]: {"job_id": r[1], "status": r[2], "seen_round": r[3], "end_state": r[4]}
                for r in self.db.execute("SELECT slurm_id, job_id, status, seen_round, end_state FROM slurm_agent_jobs")}

    def noted(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT slurm_id FROM slurm_agent_notes")}

    def last_round(self) -> dict | None:
        r = self.db.execute("SELECT round, inputs, decision, applied, observed_at FROM slurm_agent_rounds "
                            "ORDER BY round DESC LIMIT 1").fetchone()
        return None if r is None else self._round(r)

    def rounds(self) -> list[dict]:
        return [self._round(r) for r in self.db.execute(
            "SELECT round, inputs, decision, applied, observed_at FROM slurm_agent_rounds ORDER BY round")]

    @staticmethod
    def _round(r) -> dict:
        return {"round": r[0], "inputs": json.loads(r[1]), "decision": None if r[2] is None else json.loads(r[2]),
                "applied": bool(r[3]), "observed_at": r[4]}

    def record_inputs(self, k: int, inputs: dict) -> None:
        """The round's observed inputs and what they change in the job table, in one transaction."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("INSERT INTO slurm_agent_rounds (round, inputs, observed_at) VALUES (?, ?, ?)",
                       (k, json.dumps(inputs, sort_keys=True), time.time()))
            for n in inputs["new"]:
                db.execute("INSERT INTO slurm_agent_jobs VALUES (?, ?, 'active', ?, NULL)",
                           (n["slurm_id"], n["spec"]["id"], k))
            for g in inputs["gone"]:
                db.execute("UPDATE slurm_agent_jobs SET status='gone', end_state=? WHERE slurm_id=?",
                           (g["state"], g["slurm_id"]))
            for n in inputs["notes"]:
                db.execute("INSERT OR IGNORE INTO slurm_agent_notes (slurm_id, line) VALUES (?, ?)",
                           (n["slurm_id"], n["line"]))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def record_decision(self, k: int, decision: dict) -> None:
        self.db.execute("UPDATE slurm_agent_rounds SET decision=? WHERE round=?", (json.dumps(decision, sort_keys=True), k))

    def mark_applied(self, k: int) -> None:
        self.db.execute("UPDATE slurm_agent_rounds SET applied=1 WHERE round=?", (k,))

    def action(self, k: int, slurm_id: str, what: str) -> None:
        self.db.execute("INSERT INTO slurm_agent_actions (round, slurm_id, action, at) VALUES (?, ?, ?, ?)",
                        (k, slurm_id, what, time.time()))

    def actions(self) -> list[tuple]:
        return list(self.db.execute("SELECT round, slurm_id, action FROM slurm_agent_actions ORDER BY n"))

    def unprinted_notes(self) -> list[tuple[str, str]]:
        return list(self.db.execute("SELECT slurm_id, line FROM slurm_agent_notes WHERE printed=0 ORDER BY slurm_id"))

    def mark_printed(self, slurm_id: str) -> None:
        self.db.execute("UPDATE slurm_agent_notes SET printed=1 WHERE slurm_id=?", (slurm_id,))

    def close(self) -> None:
        self.db.close()


# ---------------------------------------------------------------------- the decision core's side


def session_config(cfg: AgentConfig, cluster: Cluster) -> dict:
    return {"session_id": SESSION_ID, "cluster": cluster.model_dump(mode="json", exclude_none=True),
            "policy": cfg.policy, "round_length": cfg.round_length}


def feed(session, inputs: dict) -> None:
    """Give a round's recorded inputs to the session. Idempotent: a job already
    submitted is not submitted again, one already finished is not removed again
    (a restart may feed a round twice)."""
    from optsched.service.session import NotFound

    new = []
    for n in inputs["new"]:
        try:
            session.job(n["spec"]["id"])
        except NotFound:
            new.append(n["spec"])
    if new:
        session.submit(new)
    gone = [g["job_id"] for g in inputs["gone"]]
    active = {j["id"] for j in session.state()["jobs"]}
    if any(j in active for j in gone):
        session.remove([j for j in gone if j in active])
    # Progress of jobs still in the session: absolute steps (idempotent), and the measured steps/s of a job
    # that ran in the last round (the session credits it to the GPU type it ran on).
    ran = (session.last_round() or {}).get("placement", {})
    reports = [{k: v for k, v in p.items() if k != "throughput" or p["job_id"] in ran}
               for p in inputs.get("progress", []) if p["job_id"] in active and p["job_id"] not in gone]
    if reports:
        session.report(reports)


def decision_of(last_round: dict) -> dict:
    return {k: last_round[k] for k in ("round", "time", "placement", "started", "preempted", "migrated", "queued")}


def replay(db_path: str) -> list[dict]:
    """The uninterrupted twin: a fresh in-memory Session with the agent's config,
    fed every recorded round's inputs; its decisions, round by round."""
    from optsched.service.session import Session

    adb = AgentDB(db_path)
    try:
        config = adb.meta("session_config")
        rounds = adb.rounds()
    finally:
        adb.close()
    twin = Session.create(config)
    out = []
    for r in rounds:
        if r["decision"] is None:
            break
        feed(twin, r["inputs"])
        out.append(decision_of(twin.next_round(expected_round=r["round"])))
    return out


# ---------------------------------------------------------------------- the agent


class Agent:
    """One agent process. ``run()`` loops; ``step()`` is one round (tests drive it)."""

    def __init__(self, cfg: AgentConfig, out=None):
        from optsched.service.store import Store

        self.cfg = cfg
        self.out = out or sys.stderr
        self.wait = 0.25  # seconds between retries while slurmctld does not answer
        self._stop = lambda: False
        self.store = Store(cfg.db)
        self.adb = AgentDB(cfg.db)
        try:
            self._open(cfg)
        except BaseException:
            self.close()
            raise

    def _open(self, cfg: AgentConfig) -> None:
        """The session and the cluster: created on first use, else loaded and checked."""
        from optsched.service.session import NotFound, Session

        config = self.adb.meta("session_config")
        if config is None:
            cluster = self._retry(lambda: cluster_from_slurm(cfg.env, cfg.partition))
            config = session_config(cfg, cluster)
            try:
                self.session = Session.load(SESSION_ID, self.store)
            except NotFound:
                self.session = Session.create(config, self.store)
            self.adb.set_meta("session_config", config)
            self.adb.set_meta("agent", {"partition": cfg.partition, "throughputs": cfg.throughputs})
        else:
            if config["policy"] != cfg.policy or config["round_length"] != cfg.round_length:
                raise OptschedError(f"--db {cfg.db}: this agent ran with --policy {config['policy']} and "
                                    f"--round-length {config['round_length']:g}; start a new database to change them")
            self.session = Session.load(SESSION_ID, self.store)
            now = self._retry(lambda: cluster_from_slurm(cfg.env, cfg.partition))
            if now.model_dump(mode="json", exclude_none=True) != config["cluster"]:
                print(f"optsched slurm: the cluster changed since {cfg.db} was created "
                      f"({', '.join(f'{t}={c}' for t, c in now.gpus.items())} now); decisions keep the recorded "
                      "one (start a new database to use the new one)", file=self.out, flush=True)
        self.cluster = Cluster.model_validate(config["cluster"])
        self._probe_config = {**config, "session_id": "probe"}

    # -- helpers ---------------------------------------------------------------
    def _retry(self, fn, patience: float = 300.0):
        """fn(), retried while Slurm's controller does not answer (a restart)."""
        deadline = time.monotonic() + patience
        while True:
            try:
                return fn()
            except scli.SlurmUnavailable as e:
                if time.monotonic() > deadline:
                    raise
                if self._stop():  # asked to stop (SIGTERM) while Slurm does not answer: the round resumes later
                    raise _Stopped() from None
                log.info("waiting for slurmctld: %s", e)
                time.sleep(self.wait)

    def _squeue(self) -> dict[str, dict]:
        rows = self._retry(lambda: scli.squeue(self.cfg.env))
        return {r["id"]: r for r in rows}

    def _mine(self, row: dict) -> bool:
        if self.cfg.partition:  # every job of its partition is the agent's
            return row.get("partition") == self.cfg.partition
        return (row.get("comment") or "").strip().startswith(CONTRACT)

    # -- observe -----------------------------------------------------------------
    def observe(self, k: int) -> dict:
        from optsched.service.session import Session

        rows = self._squeue()
        known, noted = self.adb.jobs(), self.adb.noted()
        new, notes, gone, progress = [], [], [], []
        probe = Session.create(self._probe_config)
        for sid in sorted(rows, key=_id_key):
            row = rows[sid]
            if sid in known or sid in noted or row["state"] in TERMINAL or not self._mine(row):
                continue
            try:
                spec = parse_contract(row, self.cluster, self.cfg.throughputs)
                probe.submit([spec])  # the session's own checks, on a throwaway session
            except OptschedError as e:
                held = row["state"] == "PENDING" and row.get("priority") == "0"
                notes.append({"slurm_id": sid, "line": f"optsched slurm: job {sid} ({row.get('name', '')}): "
                              f"{str(e).splitlines()[0]}; left to Slurm{' (held)' if held else ''}"})
                continue
            new.append({"slurm_id": sid, "spec": spec})
        for sid, j in sorted(known.items(), key=lambda kv: _id_key(kv[0])):
            if j["status"] != "active":
                continue
            row = rows.get(sid)
            if row is None or row["state"] in TERMINAL:
                gone.append({"slurm_id": sid, "job_id": j["job_id"], "state": row["state"] if row else "GONE"})
            elif row["state"] == "RUNNING":
                p = self._progress(row, j["job_id"])
                if p is not None:
                    progress.append(p)
        return {"new": new, "gone": gone, "notes": notes, "progress": progress}

    def _progress(self, row: dict, job_id: str) -> dict | None:
        """A running job's own report, when it uses optsched's job library with its
        job folder = its working directory (``OPTSCHED_JOB_DIR=$PWD``):
        steps done, and its measured steps/s when the report is fresh (written
        since the last round was observed)."""
        from optsched.runtime.job import PROGRESS_FILE, read_json

        data = read_json(os.path.join(row.get("workdir") or "", PROGRESS_FILE)) if row.get("workdir") else None
        if not data or not isinstance(data.get("steps_done"), (int, float)):
            return None
        out = {"job_id": job_id, "steps_done": float(data["steps_done"])}
        ema, last = data.get("iteration_ema"), self.adb.last_round()
        fresh = last is not None and float(data.get("updated_at") or 0) > last["observed_at"]
        if fresh and isinstance(ema, (int, float)) and ema > 0 and data.get("status") == "running":
            out["throughput"] = min(max(1.0 / float(ema), 1e-12), 1e12)
        return out

    # -- one round ---------------------------------------------------------------
    def step(self) -> dict:
        """Finish the round in progress (from its recorded inputs), or observe and
        decide a new one; then apply its decision. Returns the decision."""
        last = self.adb.last_round()
        if last is None or last["applied"]:
            k = 0 if last is None else last["round"] + 1
            inputs = self.observe(k)
            self.adb.record_inputs(k, inputs)
            last = {"round": k, "inputs": inputs, "decision": None, "applied": False}
        self._print_notes()
        k = last["round"]
        decision = last["decision"]
        if decision is None:
            if self.session.round == k:  # (after the session's round the inputs are in it: never twice)
                feed(self.session, last["inputs"])
                decision = decision_of(self.session.next_round(expected_round=k))
            else:  # killed after the session's round, before its record: the session has it
                decision = decision_of(self.session.last_round())
            if decision["round"] != k:
                raise RuntimeError(f"agent round {k} but session round {decision['round']}")  # an invariant
            self.adb.record_decision(k, decision)
        self.apply(k, decision)
        self.adb.mark_applied(k)
        return decision

    def _print_notes(self) -> None:
        for sid, line in self.adb.unprinted_notes():
            print(line, file=self.out, flush=True)
            self.adb.mark_printed(sid)

    # -- apply -------------------------------------------------------------------
    def apply(self, k: int, decision: dict, patience: int = 200) -> None:
        """Make Slurm match the decision (idempotent: only what differs is done)."""
        in_session = {j["id"] for j in self.session.state()["jobs"]}
        # A job the session finished (its steps reached) but Slurm still runs is left to end by itself.
        active = {sid: j for sid, j in self.adb.jobs().items() if j["status"] == "active" and j["job_id"] in in_session}
        by_job = {j["job_id"]: sid for sid, j in active.items()}
        want = {by_job[j]: slots[0]["server"] for j, slots in decision["placement"].items() if j in by_job}
        for _ in range(patience):
            if self._stop():
                raise _Stopped()  # not marked applied: a restart applies this decision again
            rows = self._squeue()
            todo = 0
            for sid in sorted(active, key=_id_key):
                row = rows.get(sid)
                if row is None or row["state"] in TERMINAL:
                    continue  # ended meanwhile: the next observation sees it gone
                todo += self._converge(k, sid, row, want.get(sid))
            if not todo:
                return
            time.sleep(0.1)
        log.warning("round %d: Slurm did not take every change after %d tries; the next round retries", k, patience)

    def _converge(self, k: int, sid: str, row: dict, node: str | None) -> int:
        """One command towards the wanted state of a job; 1 if one was needed."""
        state, held = row["state"], row.get("priority") == "0"
        running = state in RUNNING
        try:
            if node is None:
                if running and state != "COMPLETING":
                    self._scontrol(k, sid, ["requeuehold", sid], "requeuehold")
                    return 1
                if state == "COMPLETING":
                    return 1  # a requeue still ending: wait
                if state == "PENDING" and not held:
                    self._scontrol(k, sid, ["hold", sid], "hold")
                    return 1
                return 0
            if running:
                if row["nodes"] == node and state != "COMPLETING":
                    return 0
                if state == "COMPLETING":
                    return 1
                self._scontrol(k, sid, ["requeuehold", sid], "requeuehold")  # migration: stop here, start there
                return 1
            if state == "PENDING" and (held or row.get("req_nodes") != node or _in_future(row.get("start", ""))):
                # StartTime=now: Slurm makes a requeued job eligible only 2 minutes later (also when the
                # requeue completes after our release: then its start time is in the future again)
                self._scontrol(k, sid, ["update", f"JobId={sid}", f"ReqNodeList={node}", "StartTime=now"],
                               f"node={node}")
                if held:
                    self._scontrol(k, sid, ["release", sid], "release")
                return 1
            return 0
        except OptschedError as e:
            if isinstance(e, scli.SlurmUnavailable):
                time.sleep(self.wait)
                return 1
            log.info("job %s: %s (retrying)", sid, e)
            return 1

    def _scontrol(self, k: int, sid: str, argv: list[str], what: str) -> None:
        scli.run(["scontrol"] + argv, self.cfg.env)
        self.adb.action(k, sid, what)

    # -- the loop ----------------------------------------------------------------
    def run(self, rounds: int | None = None, stop=None, until_done: bool = False, on_round=None) -> None:
        """Rounds every ``round_length`` wall seconds (the last round's observation
        time is stored, so a restart keeps the pace), until ``rounds``, ``stop()``,
        or (``until_done``) a round after which no job it manages is left.
        ``on_round(decision)`` after each applied round (the dashboard's view)."""
        done = 0
        self._stop = stop or (lambda: False)
        while rounds is None or done < rounds:
            if until_done and self.adb.jobs() and not any(j["status"] == "active" for j in self.adb.jobs().values()):
                return
            last = self.adb.last_round()
            if last is not None and last["applied"]:
                wait = last["observed_at"] + self.cfg.round_length - time.time()
                if wait > 0:
                    time.sleep(min(wait, self.cfg.round_length))
            if self._stop():
                return
            try:
                decision = self.step()
            except _Stopped:
                return
            if on_round is not None:
                on_round(decision)
            done += 1

    def close(self) -> None:
        self.adb.close()
        self.store.close()


def results(db_path: str) -> tuple[list[dict], dict]:
    """The agent's jobs as rows (Slurm id, session status, GPUs, rounds run,
    preemptions, requeues it issued, JCT in session seconds) and a summary."""
    from optsched.service.session import NotFound, Session
    from optsched.service.store import Store

    if not os.path.isfile(db_path):
        raise OptschedError(f"--db: {db_path}: no such file")
    adb = AgentDB(db_path)
    store = Store(db_path)
    try:
        config = adb.meta("session_config")
        if config is None:
            raise OptschedError(f"--db: {db_path} holds no agent state")
        session = Session.load(SESSION_ID, store)
        requeues: dict[str, int] = {}
        for _, sid, what in adb.actions():
            if what == "requeuehold":
                requeues[sid] = requeues.get(sid, 0) + 1
        rows = []
        for sid, j in sorted(adb.jobs().items(), key=lambda kv: _id_key(kv[0])):
            try:
                rec = session.job(j["job_id"])
            except NotFound:
                continue
            done = rec["status"] == "finished"
            rows.append({"slurm_id": sid, "job_id": j["job_id"], "status": rec["status"] if not done else
                         (j["end_state"] or "finished").lower(), "gpus": rec["spec"]["scale_factor"],
                         "rounds_run": rec["rounds_run"], "preemptions": rec["preemptions"],
                         "requeues": requeues.get(sid, 0), "arrival_time": rec["arrival_time"],
                         "finish_time": rec["finish_time"], "jct": rec["elapsed_time"] if done else None})
        jcts = [r["jct"] for r in rows if r["jct"] is not None]
        summary = {"policy": config["policy"], "round_length": config["round_length"], "rounds": session.round,
                   "finished": len(jcts), "active": len(rows) - len(jcts), "noted": len(adb.noted()),
                   "avg_jct": sum(jcts) / len(jcts) if jcts else None}
        return rows, summary
    finally:
        adb.close()
        store.close()


def _in_future(stamp: str) -> bool:
    """A squeue time (local, ``2026-11-28T02:21:00``) later than now: a begin time to clear.
    (Applying reads the clock; deciding never does.)"""
    try:
        return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")) > time.time() + 1
    except (ValueError, OverflowError):
        return False  # N/A, Unknown


def _id_key(sid: str):
    head = sid.split("_")[0].split("+")[0]
    return (int(head) if head.isdigit() else math.inf, sid)


__all__ = ["Agent", "AgentConfig", "AgentDB", "ContractError", "cluster_from_slurm", "feed", "parse_contract",
           "replay", "requested_gpus", "results"]
