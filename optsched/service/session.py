"""A scheduling session: the bookkeeping a scheduler's loop needs, in plain
Python (the HTTP layer in ``optsched.service.app`` is a thin shell over it).

A session holds a cluster, a policy and options; jobs are submitted, updated
and finished; the caller reports progress; ``next_round()`` returns which jobs
run where. The round is decided by the scheduling core (optsched/core.py),
the simulator's and the runtime's too; the session is the *external*
executor: the caller runs the jobs (docs/architecture.md §1):

    admission     submit() — every submitted job is active at the next round;
    decide        ``RoundCore.decide``: goodput refit (goodput policies), the
                  recomputation rules (arrivals, departures, changes; not
                  sooner than ``min_recompute_interval``; every
                  ``recompute_every`` rounds, every round for per-round
                  policies), the policy's solve (job classes, POP partitions,
                  packing, Optimus's fixed batch), and the allocator's
                  placement → started, preempted, migrated;
    progress      report(): steps, seconds run (→ ``Allocator.record``),
                  observed throughput, iteration times (goodput refits);
    bookkeeping   steps_done (steps), elapsed_time (seconds since arrival),
                  attained_service (GPU-seconds), status.

**Durability and determinism.** The session's state is one JSON document
(``state_document()``), stored in pieces (optsched.service.store): a small
head, the large parts (allocator state, allocation in force, last round) and
one record per active job. Every change is written to the store before the
method returns, and only the pieces it touched: a submit or a progress report
costs O(jobs in it), not O(active jobs). Each mutation marks what it touches
(``_touch``, ``_touch_part``) before changing it; the written pieces are then
re-read from their very JSON text, and a failed change restores exactly the
touched pieces (tests compare the memory with a reload after every call). Every decision is computed from that document alone: the allocator
holds exactly its stored ``state()`` (reloaded from it whenever its memory
might differ: after a restart, a failure, or in another process) and the
allocation in force is rebuilt from its stored arrays each round, so a
session restored from the database decides exactly as one that never
stopped (tests: live vs reloaded vs SIGKILLed and restarted). No wall clock enters a
decision: the session clock is ``time`` (seconds), advanced by rounds.

Units: times are session seconds; ``steps_done`` in steps (the unit of the
job's ``throughput``, steps/s at its scale factor); ``attained_service`` in
GPU-seconds, counted when a round closes (at the next round, or when the job
finishes) from the seconds the job ran (reported, else the whole round).
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import threading
from typing import Any, Iterable

import numpy as np

from optsched.core import DecisionState, RoundCore, RoundRules
from optsched.core import fixed_batch_instance as fixed_batch_instance  # (its old import path)
from optsched.model import Allocation, Cluster, Instance, Job, OptschedError, Snapshot
from optsched.policy import GOODPUT_POLICIES
from optsched.service.models import (FinishRequest, JobSpec, JobUpdate, Limits, ProgressReport, RoundRequest,
                                     SessionConfig, SubmitJobs)
from optsched.service.store import PARTS, Store, StoreConflict, StoredSession

log = logging.getLogger("optsched.service")

FORMAT = 2  # 1: one document (store schema 1), split on upgrade
MAX_OBSERVATIONS = 4096  # per job and GPU type, the newest kept


def per_round_policies() -> frozenset[str]:
    """Policies whose allocation reads per-round state (one list for every executor)."""
    from optsched.policy import PER_ROUND_POLICIES

    return PER_ROUND_POLICIES


class NotFound(OptschedError):
    """An unknown session or job (HTTP 404)."""


class Conflict(OptschedError):
    """The request contradicts the state: a duplicate id, a stale round (HTTP 409)."""


class Session:
    """One scheduling session. Methods are named like the in-process
    ``Allocator``'s where they do the same thing (``next_round``, ``record``,
    ``remove``, ``state``); each is atomic (an error changes nothing) and
    durable (committed to the store, when there is one, before it returns).
    Thread-safe: calls are serialized by a lock."""

    def __init__(self, stored: StoredSession, store: Store | None = None, limits: Limits = Limits()):
        self._store = store
        self._limits = limits
        self._lock = threading.RLock()
        self._finished_mem: dict[str, dict] = {}  # finished jobs when there is no store
        self._load(stored)
        self.config = SessionConfig.model_validate(self._s["config"])
        self.cluster: Cluster = self.config.cluster
        self._allocator = None  # built on first use (see _allocator_loaded)
        cfg = self.config
        self._core = RoundCore(RoundRules(
            cfg.policy, cfg.solver, min(cfg.time_limit, limits.max_time_limit), True, cfg.packing, cfg.partitions,
            cfg.min_recompute_interval, cfg.recompute_every))  # (its allocator: the loaded one, each round)
        self._allocator_synced = False  # its memory is exactly the committed allocator state
        self._allocator_pending = False  # used by the change being made (synced once it commits)

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(cls, config: SessionConfig | dict, store: Store | None = None, limits: Limits = Limits()) -> "Session":
        cfg = config if isinstance(config, SessionConfig) else _validated(SessionConfig, config)
        _check_config(cfg, limits)
        sid = cfg.session_id or secrets.token_hex(8)
        doc = {
            "format": FORMAT, "session_id": sid, "config": cfg.model_dump(mode="json", exclude={"session_id"}),
            "time": float(cfg.start_time), "round": 0, "finished_count": 0, "next_ord": 0,
            "dirty": True, "rounds_since": 0, "last_recompute": None, "pending": {},
        }
        head = _dumps(doc)
        parts = {"allocator": "{}", "allocation": "null", "last_round": "null"}
        if store is not None:
            try:
                store.create(sid, head, {"config": doc["config"]}, parts)
            except StoreConflict as e:
                raise Conflict(f"session_id: {e}") from None
        return cls(StoredSession(head, 0, parts, []), store, limits)

    @classmethod
    def load(cls, session_id: str, store: Store, limits: Limits = Limits()) -> "Session":
        stored = store.load(session_id)
        if stored is None:
            raise NotFound(f"session {session_id!r} not found")
        return cls(stored, store, limits)

    def _load(self, stored: StoredSession) -> None:
        self._version = stored.version
        self._head_text = stored.head
        self._part_text = dict(stored.parts)
        self._job_text = {j: r for j, _, r in stored.jobs}  # committed records, for a rollback
        self._job_ord = {j: o for j, o, _ in stored.jobs}  # arrival order (the store's ord)
        self._touched_jobs: set[str] = set()
        self._touched_parts: set[str] = set()
        s = json.loads(stored.head)
        for p in PARTS:
            s[p] = json.loads(self._part_text[p])
        s["jobs"] = {j: json.loads(r) for j, _, r in stored.jobs}
        self._s: dict = s

    def _touch(self, *job_ids: str) -> None:
        """Mark active jobs this change adds, alters or removes (before altering them)."""
        self._touched_jobs.update(job_ids)

    def _touch_part(self, *names: str) -> None:
        self._touched_parts.update(names)

    @property
    def id(self) -> str:
        return self._s["session_id"]

    @property
    def version(self) -> int:
        return self._version

    @property
    def time(self) -> float:
        return self._s["time"]

    @property
    def round(self) -> int:
        return self._s["round"]

    def state_document(self) -> str:
        """The committed state as one JSON document (the memory, which is
        exactly the stored pieces after every call)."""
        return _dumps(self._s)

    # ------------------------------------------------------------------ the commit

    def _commit(self, kind: str, event: dict, finished: list[tuple[str, dict]] = ()) -> None:
        """Persist the mutated state; on any failure roll the memory back to the
        last committed document. Afterwards the memory is the stored JSON."""
        s = self._s
        try:
            head = _dumps({k: v for k, v in s.items() if k != "jobs" and k not in PARTS})
            parts = {p: _dumps(s[p]) for p in sorted(self._touched_parts)}
            active = s["jobs"]
            jobs = [(j, self._job_ord[j], _dumps(active[j])) for j in sorted(self._touched_jobs) if j in active]
            removed = [j for j in sorted(self._touched_jobs) if j not in active and j in self._job_text]
            version = self._version + 1
            fin = [(j, _dumps(r)) for j, r in finished]
            if self._store is not None:
                self._store.commit(self.id, head, version, kind, _jsonable(event), fin, parts, jobs, removed)
            else:
                for j, r in finished:
                    self._finished_mem[j] = json.loads(_dumps(r))
        except StoreConflict as e:
            self._rollback()
            raise Conflict(str(e)) from None
        except BaseException:
            self._rollback()
            raise
        # The memory becomes the stored JSON (tuples to lists, float reprs, ...).
        self._version, self._head_text = version, head
        s.update(json.loads(head))
        for p, text in parts.items():
            s[p] = json.loads(text)
            self._part_text[p] = text
        if jobs:  # one parse for all of them
            for (j, _, text), rec in zip(jobs, json.loads("[" + ",".join(text for _, _, text in jobs) + "]")):
                active[j] = rec
                self._job_text[j] = text
        for j in removed:
            del self._job_text[j], self._job_ord[j]
        self._touched_jobs.clear()
        self._touched_parts.clear()
        if self._allocator_pending:
            self._allocator_synced, self._allocator_pending = True, False

    def _rollback(self) -> None:
        """Restore the touched pieces (and the head) as last committed."""
        s = self._s
        head = json.loads(self._head_text)
        for key in [k for k in s if k != "jobs" and k not in PARTS and k not in head]:
            del s[key]
        s.update(head)
        for p in self._touched_parts:
            s[p] = json.loads(self._part_text[p])
        active = s["jobs"]
        reorder = False
        for j in self._touched_jobs:
            text = self._job_text.get(j)
            if text is None:  # added by the failed change
                active.pop(j, None)
                self._job_ord.pop(j, None)
            else:
                reorder |= j not in active
                active[j] = json.loads(text)
        if reorder:  # a removed job is back: in its arrival place
            s["jobs"] = dict(sorted(active.items(), key=lambda item: self._job_ord[item[0]]))
        self._touched_jobs.clear()
        self._touched_parts.clear()
        self._allocator_synced = self._allocator_pending = False

    def _atomic(self, fn, *args):
        """Run a mutation; an exception leaves the memory as last committed."""
        with self._lock:
            try:
                return fn(*args)
            except BaseException:
                self._rollback()
                raise

    # ------------------------------------------------------------------ jobs

    def submit(self, jobs: SubmitJobs | list | dict | JobSpec) -> list[dict]:
        """New jobs arrive (they take part from the next round). Validated
        together against the cluster and the active jobs; a duplicate id (also
        of a finished job) is a Conflict."""
        req = _submit_request(jobs)
        return self._atomic(self._submit, req)

    def _submit(self, req: SubmitJobs) -> list[dict]:
        s = self._s
        active = s["jobs"]
        limit = min(self.config.max_jobs or self._limits.max_jobs, self._limits.max_jobs)
        if len(active) + len(req.jobs) > limit:
            raise OptschedError(f"jobs: {len(active)} active + {len(req.jobs)} new jobs exceed the session's limit of {limit}")
        req = self._with_table_throughputs(req)
        new_ids = [j.id for j in req.jobs]
        seen: set[str] = set()
        for i, jid in enumerate(new_ids):
            if jid in seen:
                raise Conflict(f"jobs[{i}].id: duplicate job id {jid!r} in the request")
            seen.add(jid)
            if jid in active or self._finished_record(jid) is not None:
                raise Conflict(f"jobs[{i}].id: job {jid!r} already exists in session {self.id!r}")
        known = set(active) | seen
        for i, j in enumerate(req.jobs):
            if j.colocated and s["config"].get("colocation") is not None:
                raise OptschedError(f"jobs[{i}].colocated: this session gives pair throughputs by model "
                                    "(colocation), not per job pair")
            for other in j.colocated or {}:
                if other not in known:
                    raise OptschedError(f"jobs[{i}].colocated: unknown job id {other!r}")
        from optsched.policy import check_job_inputs

        check_job_inputs(s["config"]["policy"], req.jobs)  # what the policy reads of each job, now, not every round
        # The snapshot contract's checks (types, fits somewhere, pair rates) on the new jobs.
        # Pairs with an active job are checked too: that job joins the probe after the new ones
        # (their indices stay the request's), without its own pairs.
        partners = sorted({o for j in req.jobs for o in (j.colocated or {}) if o in active})
        probe = [_snapshot_job(j.model_dump(exclude_none=True), keep=seen | set(partners)) for j in req.jobs]
        probe += [_snapshot_job(active[o]["spec"], keep=set()) for o in partners]
        _validate_snapshot({"cluster": s["config"]["cluster"], "jobs": probe, **_colocation(s["config"])},
                           arrays=True)
        self._touch(*new_ids)
        for j in req.jobs:
            spec = j.model_dump(mode="json", exclude_none=True)
            arrival = spec.pop("arrival_time", None)
            active[j.id] = _new_record(spec, float(s["time"] if arrival is None else arrival))
            self._job_ord[j.id] = s["next_ord"]
            s["next_ord"] += 1
        s["dirty"] = True
        self._commit("submit", {"jobs": new_ids})
        return [self._job_out(self._s["jobs"][j]) for j in new_ids]

    def _with_table_throughputs(self, req: SubmitJobs) -> SubmitJobs:
        """Jobs without ``throughput`` get their model's row of the session's table."""
        if all(j.throughput is not None for j in req.jobs):
            return req
        table = self.config.throughputs or {}
        jobs = []
        for i, j in enumerate(req.jobs):
            if j.throughput is None:
                row = table.get(j.model)
                if row is None:
                    raise OptschedError(f"jobs[{i}].throughput: missing, and the session's throughputs table has no "
                                        f"model {j.model!r}" if table else
                                        f"jobs[{i}].throughput: missing (the session has no throughputs table by model)")
                j = j.model_copy(update={"throughput": dict(row)})
            jobs.append(j)
        return SubmitJobs.model_construct(jobs=jobs)

    def update(self, job_id: str, changes: JobUpdate | dict | None = None, **fields) -> dict:
        """Change a job's weight, throughput, steps_total, entity, slo or model;
        the allocation is recomputed at the next allowed round."""
        upd = changes if isinstance(changes, JobUpdate) else _validated(JobUpdate, {**(changes or {}), **fields})
        return self._atomic(self._update, job_id, upd)

    def _update(self, job_id: str, upd: JobUpdate) -> dict:
        rec = self._active(job_id)
        changes = upd.model_dump(mode="json", exclude_unset=True)
        spec = {**rec["spec"], **{k: v for k, v in changes.items() if v is not None}}
        for k, v in changes.items():
            if v is None:
                spec.pop(k, None)
        _validate_snapshot({"cluster": self._s["config"]["cluster"], "jobs": [_snapshot_job(spec, keep={job_id})],
                            **_colocation(self._s["config"])},
                           prefix="", strip="jobs[0].")  # the PATCH body is the job itself
        from optsched.policy import check_job_inputs

        check_job_inputs(self._s["config"]["policy"], [{**spec, "id": job_id}], where="")
        total = changes.get("steps_total")
        if total is not None and rec["steps_done"] > 0 and total <= rec["steps_done"]:  # it would keep its GPUs
            raise OptschedError(f"steps_total: {total:g} is not above the {rec['steps_done']:g} steps the job has "
                                "done (finish the job instead)")
        self._touch(job_id)
        rec["spec"] = spec
        self._s["dirty"] = True
        self._commit("update", {"job_id": job_id, "changes": changes})
        return self._job_out(self._s["jobs"][job_id])

    def finish(self, job_id: str, seconds: float | None = None) -> dict:
        """The job is done and leaves: its GPUs are free from the next round.
        ``seconds``: how long it ran in the last round (default the whole round)."""
        req = _validated(FinishRequest, {"seconds": seconds})
        return self._atomic(self._finish_many, [job_id], {job_id: req.seconds})[0]

    def remove(self, job_ids: str | Iterable[str]) -> list[dict]:
        """Allocator.remove's name: finish these jobs (a job already finished is a no-op)."""
        ids = [job_ids] if isinstance(job_ids, str) else list(job_ids)
        todo = [j for j in dict.fromkeys(ids) if not (j not in self._s["jobs"] and self._finished_record(j))]
        return self._atomic(self._finish_many, todo, {})

    def _finish_many(self, ids: list[str], seconds: dict) -> list[dict]:
        for j in ids:
            self._active(j)
            if seconds.get(j) is not None:
                self._check_seconds(j, seconds[j])
        if not ids:
            return []
        done = self._close_jobs(ids, seconds)
        self._commit("finish", {"jobs": ids, "seconds": {j: seconds.get(j) for j in ids}}, done)
        return [self._job_out(r) for _, r in done]

    def _close_jobs(self, ids: list[str], seconds: dict) -> list[tuple[str, dict]]:
        """Move jobs to finished (mutates the state; the caller commits)."""
        s = self._s
        last = s["last_round"] or {}
        ran = last.get("placement", {})
        self._touch(*ids)
        self._touch_part("allocator")
        allocator = self._allocator_loaded()
        allocator.remove([j for j in ids if j in _allocator_jobs(s["allocator"])])
        s["allocator"] = allocator.state()
        done = []
        for j in ids:
            rec = s["jobs"].pop(j)
            reported = s["pending"].pop(j, None)  # seconds reported (or recorded) for the last round
            run = seconds.get(j) if seconds.get(j) is not None else reported
            if j in ran:
                run = self._round_seconds(j, run)
                rec["attained_service"] += len(ran[j]) * run
                rec["finish_time"] = last["time"] + run
            else:
                rec["finish_time"] = s["time"]
            rec["status"] = "finished"
            rec["gpus"] = []
            rec["elapsed_time"] = max(rec["finish_time"] - rec["arrival_time"], 0.0)
            done.append((j, rec))
        s["finished_count"] += len(done)
        s["dirty"] = True
        return done

    # ------------------------------------------------------------------ progress

    def report(self, reports: Iterable[ProgressReport | dict] | ProgressReport | dict) -> list[dict]:
        """Progress of jobs since the last report: steps made (or absolute
        steps_done), seconds run in the last round, observed throughput,
        iteration times and gradient statistics (elastic jobs), finished."""
        if isinstance(reports, (ProgressReport, dict)):
            reports = [reports]
        reqs = [r if isinstance(r, ProgressReport) else _validated(ProgressReport, r, f"reports[{i}]")
                for i, r in enumerate(reports)]
        if not reqs:
            return []
        return self._atomic(self._report, reqs)

    def record(self, job_id: str, gpu_type: str, seconds: float) -> dict:
        """Allocator.record's name: the job ran only ``seconds`` on ``gpu_type`` in the last round."""
        with self._lock:
            ran = (self._s["last_round"] or {}).get("placement", {}).get(job_id, [])
            if job_id in self._s["jobs"] and ran and gpu_type not in {g["gpu_type"] for g in ran}:
                raise OptschedError(f"record: job {job_id!r} did not run on {gpu_type} in the last round")
            return self.report({"job_id": job_id, "seconds": seconds})[0]

    def _retried(self, r: ProgressReport) -> dict | None:
        """The job's record when ``r`` is a retry: its seq is not above the last one applied."""
        if r.seq is None:
            return None
        rec = self._s["jobs"].get(r.job_id) or self._finished_record(r.job_id)
        last = None if rec is None else rec.get("report_seq")
        return rec if last is not None and r.seq <= last else None

    def _report(self, reqs: list[ProgressReport]) -> list[dict]:
        s = self._s
        ran = (s["last_round"] or {}).get("placement", {})
        # Retries (seq already applied) change nothing; their answer is the job as it stands.
        retried = {i: rec for i, r in enumerate(reqs) if (rec := self._retried(r)) is not None}
        # Validate everything first.
        seen: set[str] = set()
        for i, r in enumerate(reqs):
            if r.job_id in seen:  # (which report would count? the finish and credit rules read one per job)
                raise OptschedError(f"reports[{i}].job_id: job {r.job_id!r} is reported twice in this batch")
            seen.add(r.job_id)
            if i in retried:
                continue
            if r.job_id not in s["jobs"]:
                if self._finished_record(r.job_id):  # known, but the request contradicts its state
                    raise Conflict(f"reports[{i}].job_id: job {r.job_id!r} is finished")
                raise NotFound(f"reports[{i}].job_id: job {r.job_id!r} is not in the session")
            if r.steps is not None and r.steps_done is not None:
                raise OptschedError(f"reports[{i}]: give steps or steps_done, not both")
            if (r.seconds is not None or r.throughput is not None) and r.job_id not in ran:
                field = "seconds" if r.seconds is not None else "throughput"
                raise OptschedError(f"reports[{i}].{field}: job {r.job_id!r} did not run in the last round")
            if r.seconds is not None:
                self._check_seconds(r.job_id, r.seconds, f"reports[{i}].seconds")
            spec = s["jobs"][r.job_id]["spec"]
            if (r.iterations or r.grad_sqr is not None or r.grad_var is not None) and "goodput" not in spec:
                raise OptschedError(f"reports[{i}]: job {r.job_id!r} has no goodput model (iterations, grad_sqr, grad_var)")
            for q, it in enumerate(r.iterations or []):
                if it.gpu_type not in self.cluster.gpus:
                    raise OptschedError(f"reports[{i}].iterations[{q}].gpu_type: unknown GPU type {it.gpu_type!r}")
                if it.nodes > it.replicas or it.sync_time > it.step_time:
                    raise OptschedError(f"reports[{i}].iterations[{q}]: need nodes <= replicas and sync_time <= step_time")
        if len(retried) == len(reqs):
            return [self._job_out(rec) for rec in retried.values()]
        finishing: dict[str, float | None] = {}
        touched = []
        for i, r in enumerate(reqs):
            if i in retried:
                continue
            self._touch(r.job_id)
            rec = s["jobs"][r.job_id]
            spec = rec["spec"]
            if r.seq is not None:
                rec["report_seq"] = r.seq
            if r.steps is not None:
                rec["steps_done"] += r.steps
            if r.steps_done is not None:
                rec["steps_done"] = r.steps_done
            if r.seconds is not None:
                s["pending"][r.job_id] = r.seconds
            if r.throughput is not None:
                gtype = _main_type(ran[r.job_id])
                spec["throughput"] = {**spec["throughput"], gtype: r.throughput}
            if r.iterations:
                obs = rec.setdefault("observations", {})
                for it in r.iterations:
                    rows = obs.setdefault(it.gpu_type, [])
                    rows.append([it.nodes, it.replicas, it.local_bsz, it.step_time, it.sync_time])
                    del rows[:-MAX_OBSERVATIONS]
                rec["refit"] = True
            if r.grad_sqr is not None or r.grad_var is not None:
                gp = dict(spec["goodput"])
                gp.update({k: v for k, v in (("grad_sqr", r.grad_sqr), ("grad_var", r.grad_var)) if v is not None})
                spec["goodput"] = gp
            total = spec.get("steps_total")
            reached = total is not None and rec["steps_done"] >= total
            if reached:
                rec["steps_done"] = float(total)  # a report past the end finishes the job at its total
            if r.finished or reached:
                finishing[r.job_id] = s["pending"].get(r.job_id)
            if r.job_id not in touched:
                touched.append(r.job_id)
        done = self._close_jobs(list(finishing), finishing) if finishing else []
        self._commit("progress", {"reports": [r.model_dump(exclude_none=True) for i, r in enumerate(reqs)
                                              if i not in retried]}, done)
        finished = dict(done)
        return [self._job_out(retried[i]) if i in retried else
                self._job_out(finished.get(r.job_id) or self._s["jobs"][r.job_id]) for i, r in enumerate(reqs)]

    # ------------------------------------------------------------------ the round

    def next_round(self, now: float | None = None, expected_round: int | None = None) -> dict:
        """Close the last round (bookkeeping, credits) and decide the next one:
        the placement, which jobs start, are preempted or migrate."""
        req = _validated(RoundRequest, {"now": now, "expected_round": expected_round})
        return self._atomic(self._next_round, req)

    def _next_round(self, req: RoundRequest) -> dict:
        s, cfg = self._s, self.config
        if req.expected_round is not None and req.expected_round != s["round"]:
            raise Conflict(f"expected_round: the next round is {s['round']}, not {req.expected_round}")
        last = s["last_round"]
        t = float(s["time"]) if last is None else float(last["time"]) + cfg.round_length
        if req.now is not None:
            if req.now < s["time"]:
                raise OptschedError(f"now: {req.now:g} is before the session clock {s['time']:g}")
            t = float(req.now)
        allocator = self._allocator_loaded()
        # Close the last round: credits for jobs that ran less than a round, service, status.
        ran = (last or {}).get("placement", {})
        for j, slots in ran.items():
            rec = s["jobs"].get(j)
            if rec is None:
                continue
            self._touch(j)
            run = self._round_seconds(j, s["pending"].get(j), t)
            rec["attained_service"] += len(slots) * run
            if run != cfg.round_length:
                for gtype in dict.fromkeys(g["gpu_type"] for g in slots):
                    allocator.record(j, gtype, run)
        s["pending"] = {}
        active = s["jobs"]
        # The core: goodput refit, recomputation when due, the allocator's placement.
        alloc = s["allocation"]
        ds = DecisionState(None if alloc is None else allocation_from_state(alloc), s["dirty"],
                           -math.inf if s["last_recompute"] is None else s["last_recompute"], s["rounds_since"])
        self._core.allocator = allocator
        _, d = self._core.decide(ds, t, lambda: Instance.from_snapshot(self._snapshot(t)), observe=self._refit_goodput,
                                 place=bool(active))
        recomputed, solve_seconds = d.recomputed, d.solve_seconds
        if recomputed:
            self._touch_part("allocation")
            s["allocation"] = allocation_to_state(d.allocation)
            s["last_recompute"], s["dirty"] = t, False
        s["rounds_since"] = ds.rounds_since
        if active:
            p = d.placement
            self._touch_part("allocator")
            s["allocator"] = allocator.state()
            placement = {j: [{"server": g.server, "gpu_type": g.gpu_type, "gpu": g.gpu} for g in slots]
                         for j, slots in p.assignments.items()}
            started, preempted, migrated = list(p.started), list(p.preempted), list(p.migrated)
            continued, note = list(p.continued), p.note
        else:
            placement, started, preempted, migrated, continued, note = {}, [], [], [], [], ""
        for j, rec in active.items():
            slots = placement.get(j)
            if slots or rec["status"] != "queued" or rec["gpus"] or j in preempted:  # else nothing changes
                self._touch(j)
            if slots:
                if rec["first_start"] is None:
                    rec["first_start"] = t
                elif j in started or j in migrated:
                    rec["restarts"] += 1
                rec["status"], rec["gpus"], rec["last_run_time"] = "running", slots, t
                rec["rounds_run"] += 1
            else:
                rec["status"], rec["gpus"] = "queued", []
            if j in preempted:
                rec["preemptions"] += 1
        result = {
            "round": s["round"], "time": t, "round_length": cfg.round_length, "placement": placement,
            "started": started, "preempted": preempted, "migrated": migrated, "continued": continued,
            "recomputed": recomputed, "allocation_status": (s["allocation"] or {}).get("status", ""),
            "solve_seconds": solve_seconds, "note": note,
            "queued": [j for j in active if j not in placement],
        }
        self._touch_part("last_round")
        s["last_round"] = result
        s["time"], s["round"] = t, s["round"] + 1
        summary = {k: result[k] for k in ("round", "time", "started", "preempted", "migrated", "recomputed")}
        self._commit("round", {"request": req.model_dump(exclude_none=True), "result": summary})
        return self._s["last_round"]

    def _refit_goodput(self) -> None:
        """Refit elastic jobs' throughput parameters from new iteration times
        (goodput policies only; the fit is deterministic given the data). The
        session's observe stage: the core calls it before each round's decision."""
        if self.config.policy not in GOODPUT_POLICIES:
            return
        todo = [rec for rec in self._s["jobs"].values() if rec.get("refit") and "goodput" in rec["spec"]]
        if not todo:
            return
        from optsched.goodput.fit import Observations, fit_params

        self._touch(*(rec["spec"]["id"] for rec in todo))
        for rec in todo:
            gp = dict(rec["spec"]["goodput"])
            params = dict(gp.get("perf_params", {}))
            for gtype, rows in rec.get("observations", {}).items():
                a = np.asarray(rows, dtype=float)
                obs = Observations.from_arrays(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4])
                try:
                    fit = fit_params(obs, prior=params.get(gtype))
                except OptschedError as e:
                    log.warning("session %s: goodput refit of %s on %s skipped: %s", self.id, rec["spec"]["id"], gtype, e)
                    continue
                p = [float(x) for x in fit.params]
                p[6] = min(max(p[6], 1.0), 10.0)
                params[gtype] = p
            gp["perf_params"] = params
            rec["spec"]["goodput"] = gp
            rec["refit"] = False

    def _snapshot(self, t: float) -> Snapshot:
        s = self._s
        keep = set(s["jobs"])
        jobs = []
        for rec in s["jobs"].values():
            j = _snapshot_job(rec["spec"], keep=keep)
            total = j.get("steps_total")
            j["steps_done"] = rec["steps_done"] if total is None else min(rec["steps_done"], total)
            j["arrival_time"] = rec["arrival_time"]
            j["elapsed_time"] = max(t - rec["arrival_time"], 0.0)
            j["attained_service"] = rec["attained_service"]
            if rec["last_run_time"] is not None:
                j["last_run_time"] = rec["last_run_time"]
            if "goodput" in j and rec["restarts"]:
                j["goodput"] = {**j["goodput"], "num_restarts": j["goodput"].get("num_restarts", 0) + rec["restarts"]}
            jobs.append(j)
        doc: dict[str, Any] = {"time": t, "cluster": s["config"]["cluster"], "jobs": jobs, **_colocation(s["config"])}
        if any("goodput" in j for j in jobs):
            doc["placement"] = {j: slots for j, slots in s["allocator"].get("placement", {}).items() if j in keep}
            return _validate_snapshot(doc)
        # Rigid jobs only: every spec was validated against the cluster when it was
        # submitted or changed, and the bookkeeping is the session's own numbers,
        # so the snapshot is assembled without validating it again (a third of a
        # round's time at 2,000 jobs).
        return Snapshot.model_construct(time=t, cluster=self.cluster, jobs=[Job.model_construct(**j) for j in jobs],
                                        colocation=self.config.colocation)

    # ------------------------------------------------------------------ reads

    def state(self) -> dict:
        """The session as GET /v1/sessions/{id} shows it."""
        with self._lock:
            s = self._s
            alloc = s["allocation"]
            return {
                "session_id": s["session_id"], "config": s["config"], "time": s["time"], "round": s["round"],
                "version": self._version, "jobs": [self._job_out(r) for r in s["jobs"].values()],
                "finished_jobs": s["finished_count"],
                "allocation": None if alloc is None else _jsonable(allocation_from_state(alloc).to_dict()),
                "allocator_state": s["allocator"], "last_round": s["last_round"],
            }

    def job(self, job_id: str) -> dict:
        """One job's record, active or finished (NotFound if unknown)."""
        with self._lock:
            rec = self._s["jobs"].get(job_id) or self._finished_record(job_id)
            if rec is None:
                raise NotFound(f"job {job_id!r} not found in session {self.id!r}")
            return self._job_out(rec)

    def finished_jobs(self, limit: int = 1000, offset: int = 0) -> list[dict]:
        """Finished jobs' records, a page of ``limit`` from ``offset``."""
        if self._store is not None:
            recs = self._store.finished_jobs(self.id, limit, offset)
        else:
            recs = list(self._finished_mem.values())[offset:offset + limit]
        return [self._job_out(r) for r in recs]

    def last_round(self) -> dict | None:
        """The last committed round (None before the first)."""
        return self._s["last_round"]

    def allocation(self) -> Allocation | None:
        """The allocation in force (None before the first solve)."""
        a = self._s["allocation"]
        return None if a is None else allocation_from_state(a)

    # ------------------------------------------------------------------ helpers

    def _active(self, job_id: str) -> dict:
        rec = self._s["jobs"].get(job_id)
        if rec is None:
            if self._finished_record(job_id):  # known, but the request contradicts its state
                raise Conflict(f"job {job_id!r} is already finished")
            raise NotFound(f"job {job_id!r} is not in the session")
        return rec

    def _finished_record(self, job_id: str) -> dict | None:
        if self._store is not None:
            return self._store.finished_job(self.id, job_id)
        return self._finished_mem.get(job_id)

    def _check_seconds(self, job_id: str, seconds: float, field: str = "seconds") -> None:
        if not (math.isfinite(seconds) and 0 <= seconds <= self.config.round_length):
            raise OptschedError(f"{field}: {seconds:g} is not within the round (0 to {self.config.round_length:g} s)")
        if job_id not in (self._s["last_round"] or {}).get("placement", {}):
            raise OptschedError(f"{field}: job {job_id!r} did not run in the last round")

    def _round_seconds(self, job_id: str, reported: float | None, until: float | None = None) -> float:
        """Seconds a job ran in the last round: reported, else the whole round
        (cut short when the next round starts earlier)."""
        length = self.config.round_length if reported is None else float(reported)
        if until is not None:  # (a report cannot outlast the round either)
            length = min(length, max(until - self._s["last_round"]["time"], 0.0))
        return length

    def _allocator_loaded(self):
        """The Allocator, holding exactly the committed allocator state: loaded
        from it, unless this object's memory already is that state (it made the
        last committed change to it and nothing failed since). Reusing it is a
        saving, not a decision: ``Allocator.load_state`` restores exactly, which
        the tests check by comparing live, reloaded and restarted sessions."""
        from optsched.allocator import Allocator

        if self._allocator is None:
            cfg, a = self.config, self.config.allocator
            self._allocator = Allocator(
                self.cluster, placement=cfg.placement, seed=a.seed, round_length=cfg.round_length,
                placement_time_limit=cfg.placement_time_limit, gpus_per_server=a.gpus_per_server,
                type_order=a.type_order, work_conserving=a.work_conserving, queue=a.queue,
                migration_cost=a.migration_cost, **({} if a.hysteresis is None else {"hysteresis": a.hysteresis}))
        if not self._allocator_synced:
            self._allocator.load_state(self._s["allocator"])
        self._allocator_synced, self._allocator_pending = False, True
        return self._allocator

    def _job_out(self, rec: dict) -> dict:
        end = rec["finish_time"] if rec["finish_time"] is not None else self._s["time"]
        return {
            "id": rec["spec"]["id"], "status": rec["status"], "spec": rec["spec"], "arrival_time": rec["arrival_time"],
            "steps_done": rec["steps_done"], "elapsed_time": max(end - rec["arrival_time"], 0.0),
            "attained_service": rec["attained_service"], "rounds_run": rec["rounds_run"],
            "preemptions": rec["preemptions"], "first_start": rec["first_start"], "finish_time": rec["finish_time"],
            "gpus": rec["gpus"],
        }


# ---------------------------------------------------------------------- helpers


def _validated(model, data, where: str = ""):
    """``model.model_validate(data)``, a bad value as the one-line OptschedError the
    service would answer with (in-process callers catch the same exception)."""
    from pydantic import ValidationError

    from optsched.model import describe_validation_error

    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise OptschedError(describe_validation_error(e, where)) from None


def _check_config(cfg: SessionConfig, limits: Limits) -> None:
    from optsched.policy import POLICIES, policy_names

    total = sum(cfg.cluster.gpus.values())
    if total > limits.max_gpus:
        raise OptschedError(f"cluster.gpus: {total} GPUs exceed the server's limit of {limits.max_gpus}")
    if total == 0:
        raise OptschedError("cluster.gpus: the cluster has no GPUs")
    if cfg.policy not in POLICIES and cfg.policy not in policy_names():  # plugins (entry points) too
        from optsched.suggest import with_suggestion  # in process too, not only in the service's 4xx

        raise OptschedError(with_suggestion(f"policy: unknown policy {cfg.policy!r} (choose from "
                                            f"{', '.join(policy_names())})"))
    # time_limit and max_jobs above the server's limits are capped where they are used.
    # The core's own checks of its rules (POP, packing), at creation, not as a failure of every round.
    RoundRules(cfg.policy, packing=cfg.packing, partitions=cfg.partitions).check("")
    from optsched.policy import check_prices_for

    check_prices_for(cfg.policy, cfg.cluster.gpus, cfg.cluster.price_per_hour)  # (the same)
    # The snapshot's checks of the cluster (names are valid Unicode, ...) and of the pair table.
    _validate_snapshot({"cluster": cfg.cluster.model_dump(exclude_none=True), "jobs": [],
                        **({"colocation": cfg.colocation} if cfg.colocation is not None else {})})
    for model, row in (cfg.throughputs or {}).items():  # each row is a job's throughput table
        _validate_snapshot({"cluster": cfg.cluster.model_dump(exclude_none=True), "jobs": [{"id": "row", "throughput": row}]},
                           prefix=f"throughputs[{model!r}]", strip="jobs[0].throughput")
    to = cfg.allocator.type_order
    if not isinstance(to, str) and sorted(to) != sorted(cfg.cluster.gpus):
        raise OptschedError(f"allocator.type_order: must list each GPU type once ({', '.join(cfg.cluster.gpus)})")


def _submit_request(jobs) -> SubmitJobs:
    if isinstance(jobs, SubmitJobs):
        return jobs
    if isinstance(jobs, (JobSpec, dict)) and not (isinstance(jobs, dict) and "jobs" in jobs):
        jobs = [jobs]
    if isinstance(jobs, dict):
        return _validated(SubmitJobs, jobs)
    return SubmitJobs(jobs=[j if isinstance(j, JobSpec) else _validated(JobSpec, j, f"jobs[{i}]") for i, j in enumerate(jobs)])


def _new_record(spec: dict, arrival: float) -> dict:
    return {"spec": spec, "status": "queued", "arrival_time": arrival, "steps_done": 0.0, "attained_service": 0.0,
            "last_run_time": None, "first_start": None, "finish_time": None, "rounds_run": 0, "preemptions": 0,
            "restarts": 0, "gpus": []}


_SPEC_FIELDS = ("id", "model", "scale_factor", "weight", "throughput", "steps_total", "entity", "slo", "colocated",
                "goodput")


def _snapshot_job(spec: dict, keep: set[str]) -> dict:
    """A snapshot job from a spec: pair throughputs only with jobs in ``keep``."""
    j = {k: spec[k] for k in _SPEC_FIELDS if k in spec and spec[k] is not None}
    if "colocated" in j:
        col = {o: v for o, v in j["colocated"].items() if o in keep}
        if col:
            j["colocated"] = col
        else:
            del j["colocated"]
    return j


def _colocation(config: dict) -> dict:
    """The session's pair throughputs by model, as a snapshot field (empty when it has none)."""
    return {"colocation": config["colocation"]} if config.get("colocation") is not None else {}


def _validate_snapshot(doc: dict, prefix: str = "", strip: str = "", arrays: bool = False) -> Snapshot:
    """parse_snapshot, its error located by ``prefix`` (where ``strip``, the snapshot's own
    path to the request's object, is replaced by it). ``arrays``: also build the Instance,
    whose checks span jobs (two views of one pair that disagree)."""
    from optsched.model import Instance, parse_snapshot

    try:
        snap = parse_snapshot(doc)
        if arrays:
            Instance.from_snapshot(snap)
        return snap
    except OptschedError as e:
        msg = str(e)
        if msg.startswith("invalid snapshot: "):
            msg = msg[len("invalid snapshot: "):]
        if strip and msg.startswith(strip):
            msg = msg[len(strip):]
        raise OptschedError(prefix + msg) from None


def _allocator_jobs(state: dict) -> set[str]:
    return set(state.get("rounds_present", {}) or {}) | set(state.get("placement", {}) or {})


def _main_type(slots: list[dict]) -> str:
    types = [g["gpu_type"] for g in slots]
    return max(dict.fromkeys(types), key=types.count)


def allocation_to_state(a: Allocation) -> dict:
    """An Allocation as JSON, exactly (floats keep their repr)."""
    return {
        "policy": a.policy, "status": a.status, "objective": _finite(a.objective), "solve_seconds": float(a.solve_seconds),
        "job_ids": list(a.job_ids), "gpu_types": list(a.gpu_types), "fractions": np.asarray(a.fractions, float).tolist(),
        "effective_throughput": np.asarray(a.effective_throughput, float).tolist(),
        "explanation": _jsonable(a.explanation),
        "pairs": np.asarray(a.pairs, int).tolist() if len(a.pairs) else None,
        "pair_fractions": np.asarray(a.pair_fractions, float).tolist() if len(a.pairs) else None,
        "gpu_counts": None if a.gpu_counts is None else np.asarray(a.gpu_counts).astype(int).tolist(),
        "nodes": None if a.nodes is None else np.asarray(a.nodes).astype(int).tolist(),
    }


def allocation_from_state(d: dict) -> Allocation:
    n, k = len(d["job_ids"]), len(d["gpu_types"])
    extra: dict = {}
    if d.get("pairs"):
        extra["pairs"] = np.asarray(d["pairs"], dtype=int).reshape(-1, 2)
        extra["pair_fractions"] = np.asarray(d["pair_fractions"], dtype=float).reshape(-1, k)
    if d.get("gpu_counts") is not None:
        extra["gpu_counts"] = np.asarray(d["gpu_counts"], dtype=int).reshape(n, k)
    if d.get("nodes") is not None:
        extra["nodes"] = np.asarray(d["nodes"], dtype=int).reshape(n, k)
    obj = d["objective"]
    return Allocation(d["policy"], d["status"], float("nan") if obj is None else obj, d["solve_seconds"],
                      tuple(d["job_ids"]), tuple(d["gpu_types"]), np.asarray(d["fractions"], float).reshape(n, k),
                      np.asarray(d["effective_throughput"], float).reshape(n), d["explanation"], **extra)


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def _jsonable(x):
    """JSON-safe copy: numpy to Python, non-finite floats to None, tuples to lists."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return _finite(x)
    if x is None or isinstance(x, str):
        return x
    return str(x)


def _np_default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serializable: {type(x).__name__}")


# One encoder for every call: a round writes a record per running job, and
# json.dumps would build a new encoder for each.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_np_default)


def _dumps(x) -> str:
    """Compact JSON; the fast path when ``x`` is already JSON-clean (the state
    always is), else a cleaned copy (numpy, non-finite floats)."""
    try:
        return _ENCODER.encode(x)
    except (ValueError, TypeError):
        return json.dumps(_jsonable(x), separators=(",", ":"), allow_nan=False)


jsonable = _jsonable

__all__ = ["Session", "NotFound", "Conflict", "allocation_to_state", "allocation_from_state", "jsonable"]
