"""The plain-Python Session (no HTTP): it decides exactly like a live in-process
Allocator fed the same calls, a session restored from its database decides
exactly like one that never stopped, and a failed call changes nothing."""

from __future__ import annotations

import json
import re

import pytest

from optsched.allocator import Allocator
from optsched.model import OptschedError
from optsched.service import Conflict, NotFound, Session, Store
from optsched.service import session as session_module
from optsched.service import workload


TIMINGS = {"solve_seconds", "build_seconds", "solver_seconds", "decode_seconds", "total_seconds"}


def decisions(x):
    """``x`` without wall-clock timings (the only thing allowed to differ)."""
    if isinstance(x, str) and x.startswith("{"):
        x = json.loads(x)
    if isinstance(x, dict):
        return {k: decisions(v) for k, v in x.items() if k not in TIMINGS}
    if isinstance(x, list):
        return [decisions(v) for v in x]
    return x


class _Tee:
    """The session's allocator (reloaded from stored state every call) next to
    one live Allocator that is never reloaded: every decision must agree."""

    def __init__(self, loaded: Allocator, live: Allocator):
        self.loaded, self.live = loaded, live
        self.rounds = 0

    def record(self, *a):
        self.live.record(*a)
        return self.loaded.record(*a)

    def remove(self, ids):
        self.live.remove(ids)
        return self.loaded.remove(ids)

    def next_round(self, inst, alloc):
        a, b = self.loaded.next_round(inst, alloc), self.live.next_round(inst, alloc)
        assert a.assignments == b.assignments, f"round {self.rounds}: restored allocator differs from the live one"
        assert (a.started, a.preempted, a.migrated) == (b.started, b.preempted, b.migrated)
        self.rounds += 1
        return a

    def state(self):
        s = self.loaded.state()
        assert s == self.live.state()
        return s


@pytest.mark.parametrize("policy,seed", [("max_min_fairness", 1), ("max_min_fairness", 2), ("fifo", 3),
                                         ("las", 4)])
def test_session_decides_like_a_live_allocator_given_the_same_calls(monkeypatch, policy, seed):
    s = Session.create({"cluster": workload.CLUSTER, "policy": policy, "recompute_every": 3})
    original = Session._allocator_loaded
    live: dict = {}

    def tee(self):
        loaded = original(self)
        if "a" not in live:
            cfg = self.config
            live["a"] = Allocator(self.cluster, placement=cfg.placement, seed=cfg.allocator.seed,
                                  round_length=cfg.round_length, migration_cost=cfg.allocator.migration_cost)
            live["a"].load_state(self._s["allocator"])
        t = live.setdefault("tee", _Tee(loaded, live["a"]))
        t.loaded = loaded
        return t

    monkeypatch.setattr(Session, "_allocator_loaded", tee)
    workload.run(s, 40, seed=seed)
    assert live["tee"].rounds >= 35  # rounds with active jobs
    assert s.state()["finished_jobs"] > 0


@pytest.mark.parametrize("seed,cfg", [
    (11, {"recompute_every": 4}),
    (12, {"min_recompute_interval": 1000.0}),
    (13, {"policy": "tiresias", "placement": "first_fit"}),
    (14, {"allocator": {"queue": "gavel", "type_order": "shuffle", "seed": 5}}),
])
def test_a_session_reloaded_from_its_database_decides_like_one_that_never_stopped(tmp_path, seed, cfg):
    cfg = {"cluster": workload.CLUSTER, **cfg}
    twin = Session.create({**cfg, "session_id": "s"}, store=Store(tmp_path / "twin.db"))
    db = tmp_path / "reload.db"
    s = Session.create({**cfg, "session_id": "s"}, store=Store(db))
    dt, ds = workload.Driver(seed), workload.Driver(seed)
    for r in range(30):
        dt.before_round(twin)
        ds.before_round(s)
        if r % 4 == 1:  # a new process: a new connection, the session loaded lazily from disk
            s = Session.load("s", Store(db))
        a, b = dt.next_round(twin), ds.next_round(s)
        assert decisions(a) == decisions(b), f"round {r}"
    assert decisions(twin.state_document()) == decisions(s.state_document())
    assert twin.version == s.version


def test_a_failed_call_changes_nothing():
    s = Session.create({"cluster": {"gpus": {"v100": 2}}, "round_length": 60.0})
    s.submit([{"id": "a", "throughput": {"v100": 1.0}}, {"id": "big", "scale_factor": 2, "throughput": {"v100": 1.0}}])
    s.next_round()
    doc = s.state_document()
    bad = [
        lambda: s.report([{"job_id": "a", "steps": 3.0}, {"job_id": "ghost", "steps": 1.0}]),
        lambda: s.report([{"job_id": "a", "steps": 3.0, "steps_done": 4.0}]),
        lambda: s.record("a", "k80", 10.0),
        lambda: s.submit([{"id": "c", "throughput": {"v100": 1.0}}, {"id": "c", "throughput": {"v100": 1.0}}]),
        lambda: s.submit([{"id": "d", "throughput": {"v100": 1.0}, "colocated": {"nobody": {"v100": [1, 1]}}}]),
        lambda: s.update("a", throughput={"v100": 0.0}),
        lambda: s.finish("a", seconds=100.0),
        lambda: s.next_round(now=-1.0),
        lambda: s.next_round(expected_round=0),
    ]
    for call in bad:
        with pytest.raises((OptschedError, ValueError)):
            call()
        assert s.state_document() == doc


def test_record_and_report_refuse_jobs_that_did_not_run():
    s = Session.create({"cluster": {"gpus": {"v100": 1}}, "round_length": 60.0})
    s.submit([{"id": "a", "throughput": {"v100": 1.0}}, {"id": "b", "throughput": {"v100": 1.0}}])
    r = s.next_round()
    (ran,), (waiting,) = list(r["placement"]), r["queued"]
    with pytest.raises(OptschedError, match="did not run"):
        s.record(waiting, "v100", 10.0)
    with pytest.raises(OptschedError, match="did not run"):
        s.report({"job_id": waiting, "throughput": 3.0})
    s.record(ran, "v100", 10.0)
    s.next_round()
    assert s.job(ran)["attained_service"] == 10.0 and s.job(waiting)["attained_service"] == 0.0
    # The allocator was credited 10 s of a 60 s round, not a full round.
    assert s.state()["allocator_state"]["rounds_received"][ran]["v100"] == pytest.approx(0.5 + 10 / 60)


def test_finished_jobs_leave_the_allocator_and_their_ids_stay_taken(tmp_path):
    s = Session.create({"cluster": {"gpus": {"v100": 2}}}, store=Store(tmp_path / "db"))
    s.submit([{"id": "a", "throughput": {"v100": 1.0}, "steps_total": 10}, {"id": "b", "throughput": {"v100": 1.0}}])
    s.next_round()
    assert s.report({"job_id": "a", "steps": 10})[0]["status"] == "finished"
    st = s.state()
    assert "a" not in st["allocator_state"]["placement"] and "a" not in st["allocator_state"]["rounds_present"]
    assert s.job("a")["status"] == "finished" and [j["id"] for j in s.finished_jobs()] == ["a"]
    with pytest.raises(Conflict):
        s.submit({"id": "a", "throughput": {"v100": 1.0}})
    with pytest.raises(Conflict, match="finished"):  # 409: a known job whose state forbids it
        s.report({"job_id": "a", "steps": 1})
    with pytest.raises(Conflict, match="already finished"):
        s.finish("a")
    with pytest.raises(NotFound):
        s.report({"job_id": "nobody", "steps": 1})
    assert s.remove(["a", "b"])[0]["id"] == "b"  # "a" already finished: skipped
    assert s.next_round()["placement"] == {}


def test_throughput_reports_and_updates_reach_the_next_recomputation():
    s = Session.create({"cluster": {"gpus": {"v100": 1, "k80": 1}}, "recompute_every": 1})
    s.submit([{"id": "a", "throughput": {"v100": 2.0, "k80": 1.0}}])
    r = s.next_round()
    gtype = r["placement"]["a"][0]["gpu_type"]
    s.report({"job_id": "a", "throughput": 7.5})
    assert s.job("a")["spec"]["throughput"][gtype] == 7.5
    s.update("a", weight=3.0)
    s.next_round()
    assert s.allocation().effective_throughput[0] > 0
    assert s.job("a")["spec"]["weight"] == 3.0


def test_session_clock_units_and_explicit_time():
    s = Session.create({"cluster": {"gpus": {"v100": 1}}, "round_length": 100.0, "start_time": 1000.0})
    s.submit({"id": "a", "throughput": {"v100": 1.0}})
    assert s.next_round()["time"] == 1000.0
    r = s.next_round(now=1050.0)  # the caller's clock: the last round was cut short at 50 s
    assert r["time"] == 1050.0
    assert s.job("a")["attained_service"] == 50.0 and s.job("a")["elapsed_time"] == 50.0
    assert s.next_round()["time"] == 1150.0


def test_per_round_policies_match_the_simulators():
    from optsched.policy import PER_ROUND_POLICIES, policy_names
    from optsched.sim.stages import PER_ROUND_POLICIES as SIM_LIST

    assert session_module.per_round_policies() == PER_ROUND_POLICIES == SIM_LIST
    assert PER_ROUND_POLICIES <= set(policy_names())  # no stale names


def test_elastic_jobs_get_configurations_and_iteration_times_refit_their_model():
    cluster = {"gpus": {"t4": 8}, "servers": [{"id": "n0", "gpu_type": "t4", "gpus": 4},
                                              {"id": "n1", "gpu_type": "t4", "gpus": 4}]}
    gp = {"perf_params": {"t4": [0.05, 0.001, 0.2, 0.01, 0.05, 0.002, 2.0]}, "grad_sqr": 2.0, "grad_var": 30.0,
          "init_batch_size": 64, "max_batch_size": 2048, "local_bsz": [8, 256], "max_gpus": 8}
    s = Session.create({"cluster": cluster, "policy": "sia", "round_length": 60.0, "start_time": 600.0})
    s.submit([{"id": "e0", "throughput": {"t4": 1.0}, "goodput": gp, "arrival_time": 0.0},
              {"id": "e1", "throughput": {"t4": 1.0}, "goodput": gp, "arrival_time": 0.0}])
    r = s.next_round()
    assert r["recomputed"] and sum(len(g) for g in r["placement"].values()) <= 8 and r["placement"]
    assert s.allocation().gpu_counts is not None
    ran = next(iter(r["placement"]))
    s.report({"job_id": ran, "steps": 10.0, "grad_sqr": 1.5, "iterations": [
        {"gpu_type": "t4", "nodes": 1, "replicas": 4, "local_bsz": 32, "step_time": 0.2, "sync_time": 0.05},
        {"gpu_type": "t4", "nodes": 1, "replicas": 2, "local_bsz": 64, "step_time": 0.3, "sync_time": 0.04},
        {"gpu_type": "t4", "nodes": 2, "replicas": 8, "local_bsz": 16, "step_time": 0.25, "sync_time": 0.12}]})
    assert s.next_round()["recomputed"]  # sia is re-decided every round, after the refit
    spec = s.job(ran)["spec"]["goodput"]
    assert spec["grad_sqr"] == 1.5 and spec["perf_params"]["t4"] != gp["perf_params"]["t4"]
    assert 1.0 <= spec["perf_params"]["t4"][6] <= 10.0


ELASTIC_CLUSTER = {"gpus": {"t4": 8}, "servers": [{"id": "n0", "gpu_type": "t4", "gpus": 4},
                                                  {"id": "n1", "gpu_type": "t4", "gpus": 4}]}
ELASTIC_GP = {"perf_params": {"t4": [0.05, 0.001, 0.2, 0.01, 0.05, 0.002, 2.0]}, "grad_sqr": 2.0, "grad_var": 30.0,
              "init_batch_size": 128, "max_batch_size": 2048, "local_bsz": [8, 256], "max_gpus": 8}
ITERATIONS = [{"gpu_type": "t4", "nodes": 1, "replicas": 4, "local_bsz": 32, "step_time": 0.2, "sync_time": 0.05},
              {"gpu_type": "t4", "nodes": 1, "replicas": 2, "local_bsz": 64, "step_time": 0.3, "sync_time": 0.04},
              {"gpu_type": "t4", "nodes": 2, "replicas": 8, "local_bsz": 16, "step_time": 0.25, "sync_time": 0.12}]


def _batch_sizes(s):
    return {j: b["batch_size"] for j, b in s.allocation().explanation["batch_size"].items()}


def test_optimus_sessions_keep_each_jobs_batch_size_and_refit_like_the_simulator():
    """optimus chooses GPU counts only: every elastic job runs at the batch size it was submitted
    with (init_batch_size) whatever its GPUs, while pollux on the same jobs grows the batch; the
    reported iterations refit its model, as in the simulator."""
    jobs = [{"id": "e0", "throughput": {"t4": 1.0}, "goodput": ELASTIC_GP, "steps_total": 1000.0, "arrival_time": 0.0},
            {"id": "e1", "throughput": {"t4": 1.0}, "goodput": {**ELASTIC_GP, "init_batch_size": 64},
             "steps_total": 5000.0, "arrival_time": 0.0},
            {"id": "r0", "throughput": {"t4": 2.0}, "steps_total": 500.0, "arrival_time": 0.0}]
    pollux = Session.create({"cluster": ELASTIC_CLUSTER, "policy": "pollux", "round_length": 60.0})
    pollux.submit(jobs)
    pollux.next_round()
    assert any(b > {"e0": 128, "e1": 64}[j] for j, b in _batch_sizes(pollux).items())  # pollux adapts batch sizes

    s = Session.create({"cluster": ELASTIC_CLUSTER, "policy": "optimus", "round_length": 60.0})
    s.submit(jobs)
    r = s.next_round()
    assert {"e0", "e1"} <= set(r["placement"])
    gpus = {j: len(r["placement"][j]) for j in ("e0", "e1")}
    # the fixed batch split over the job's GPUs (micro-batch rounded up): B <= batch < B + GPUs
    fixed = {"e0": 128, "e1": 64}
    for j, b in _batch_sizes(s).items():
        assert fixed[j] <= b < fixed[j] + gpus[j], (j, b, gpus[j])
    s.report({"job_id": "e0", "steps": 10.0, "iterations": ITERATIONS})
    assert s.next_round()["recomputed"]  # optimus is re-decided every round, after the refit
    spec = s.job("e0")["spec"]["goodput"]
    assert spec["perf_params"]["t4"] != ELASTIC_GP["perf_params"]["t4"]  # refit from the reported iterations
    assert s.job("e1")["spec"]["goodput"]["perf_params"]["t4"] == ELASTIC_GP["perf_params"]["t4"]  # nothing reported
    for j, b in _batch_sizes(s).items():
        assert fixed[j] <= b < fixed[j] + len(s.last_round()["placement"][j])


def test_optimus_sessions_run_the_job_with_fewer_iterations_left_first():
    """The convergence model's input is the iterations left at the fixed batch (steps_total - steps_done)."""
    cluster = {"gpus": {"t4": 1}}
    s = Session.create({"cluster": cluster, "policy": "optimus", "round_length": 60.0})
    s.submit([{"id": "long", "throughput": {"t4": 1.0}, "goodput": ELASTIC_GP, "steps_total": 5000.0},
              {"id": "short", "throughput": {"t4": 1.0}, "goodput": ELASTIC_GP, "steps_total": 100.0}])
    assert list(s.next_round()["placement"]) == ["short"]
    s.update("long", steps_total=50.0)
    assert list(s.next_round()["placement"]) == ["long"]


# --------------------------------------------------------------------------
# Stored in pieces: every call writes only what it touched, and loses nothing
# --------------------------------------------------------------------------


def _memory_equals_store(s: Session, store: Store) -> None:
    reloaded = Session.load(s.id, store)
    assert json.loads(reloaded.state_document()) == json.loads(s.state_document())
    assert reloaded.version == s.version
    assert list(reloaded._s["jobs"]) == list(s._s["jobs"])  # arrival order survives


@pytest.mark.parametrize("seed,cfg", [
    (21, {}),
    (22, {"policy": "tiresias", "recompute_every": 2}),
    (23, {"allocator": {"queue": "gavel", "type_order": "shuffle", "seed": 3}}),
])
def test_after_every_call_and_every_failed_call_the_memory_is_the_database(tmp_path, seed, cfg):
    """A mutation that forgot to mark a job or part it changed would leave the
    memory ahead of the database: a reload after each call catches it."""
    import random

    store = Store(tmp_path / "s.db")
    s = Session.create({"cluster": workload.CLUSTER, **cfg}, store=store)
    d, rng = workload.Driver(seed), random.Random(seed)
    for r in range(25):
        d.before_round(s)
        _memory_equals_store(s, store)
        active = [j["id"] for j in s.state()["jobs"]]
        if active and rng.random() < 0.3:
            s.update(rng.choice(active), weight=rng.choice([1.0, 2.0, 3.0]))
            _memory_equals_store(s, store)
        if active and rng.random() < 0.2:
            s.remove([rng.choice(active)])
            _memory_equals_store(s, store)
        for bad in (lambda: s.report([{"job_id": active[0] if active else "x", "steps": 1.0},
                                      {"job_id": "ghost", "steps": 1.0}]),
                    lambda: s.submit([{"id": "n1", "throughput": {"v100": 1.0}},
                                      {"id": "n2", "throughput": {"v100": 1.0}, "colocated": {"nobody": {"v100": [1, 1]}}}])):
            with pytest.raises(OptschedError):
                bad()
            _memory_equals_store(s, store)
        d.next_round(s)
        _memory_equals_store(s, store)
    assert s.state()["finished_jobs"] > 0


def test_a_submit_or_a_report_writes_only_its_jobs(tmp_path, monkeypatch):
    store = Store(tmp_path / "s.db")
    s = Session.create({"cluster": workload.CLUSTER}, store=store)
    s.submit([{"id": f"a{i}", "throughput": {"v100": 1.0}} for i in range(50)])
    s.next_round()
    writes = []
    original = Store.commit

    def spy(self, sid, state, version, kind, event, finished=(), parts=None, jobs=(), removed=()):
        writes.append((kind, sorted(parts or {}), [j for j, _, _ in jobs], list(removed)))
        return original(self, sid, state, version, kind, event, finished, parts, jobs, removed)

    monkeypatch.setattr(Store, "commit", spy)
    s.submit({"id": "late", "throughput": {"k80": 1.0}})
    ran = sorted(s.last_round()["placement"])[:2]
    s.report([{"job_id": j, "steps": 5.0} for j in ran])
    s.finish(ran[0])
    assert writes[0] == ("submit", [], ["late"], [])
    assert writes[1] == ("progress", [], ran, [])
    assert writes[2] == ("finish", ["allocator"], [], [ran[0]])
    _memory_equals_store(s, store)


def test_a_schema_1_database_is_upgraded_in_place_and_decides_on(tmp_path):
    """Schema 1 stored each session as one document; opening it splits the
    document into pieces, and the session goes on deciding as one that never stopped."""
    import sqlite3

    cfg = {"cluster": workload.CLUSTER, "session_id": "s", "recompute_every": 3}
    live, other = Session.create(cfg), Session.create(cfg, store=Store(tmp_path / "other.db"))
    d_live, d_old = workload.Driver(31), workload.Driver(31)
    for _ in range(8):
        d_live.step(live)
        d_old.step(other)
    # other's state written the old way: one document, jobs and parts inside it.
    doc = json.loads(other.state_document())
    doc["format"] = 1
    del doc["next_ord"]
    old = sqlite3.connect(tmp_path / "old.db")
    old.executescript("""
        CREATE TABLE sessions (id TEXT PRIMARY KEY, state TEXT NOT NULL, version INTEGER NOT NULL,
                               created REAL NOT NULL, updated REAL NOT NULL);
        CREATE TABLE finished_jobs (session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                                    job_id TEXT NOT NULL, record TEXT NOT NULL, PRIMARY KEY (session_id, job_id));
        CREATE TABLE events (session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
                             seq INTEGER NOT NULL, at REAL NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,
                             PRIMARY KEY (session_id, seq));
        PRAGMA user_version = 1;
    """)
    old.execute("INSERT INTO sessions VALUES ('s', ?, ?, 0, 0)", (json.dumps(doc), other.version))
    for rec in other._store._query("SELECT job_id, record FROM finished_jobs"):
        old.execute("INSERT INTO finished_jobs VALUES ('s', ?, ?)", rec)
    old.commit()
    old.close()
    s = Session.load("s", Store(tmp_path / "old.db"))
    assert list(s._s["jobs"]) == list(live._s["jobs"]) and len(live._s["jobs"]) > 0
    assert decisions(s.state()) == decisions(live.state())
    for r in range(12):
        assert decisions(d_live.step(live)) == decisions(d_old.step(s)), f"round {r}"
    assert decisions(s.state()) == decisions(live.state())
    _memory_equals_store(s, s._store)


def test_in_process_bad_input_is_an_optsched_error_like_the_service():
    """The in-process Session raised pydantic's ValidationError where the service answers
    422 (a ServiceError, an OptschedError): a loop catching OptschedError behaved differently."""
    s = Session.create({"cluster": {"gpus": {"v100": 2}}})
    for jobs, where in (([{"id": "a b", "throughput": {"v100": 1.0}}], "jobs[0].id"),
                        ([{"id": "ok", "throughput": {"v100": 1.0}}, {"id": "w", "throughput": {"v100": 1.0},
                                                                      "weight": -1}], "jobs[1].weight"),
                        ([{"id": "..", "throughput": {"v100": 1.0}}], "jobs[0].id: '..' is a path segment")):
        with pytest.raises(OptschedError, match=re.escape(where)):
            s.submit(jobs)
    with pytest.raises(OptschedError, match=r"^reports\[0\]\.steps: "):
        s.report([{"job_id": "x", "steps": -1}])
    with pytest.raises(OptschedError, match=r"^time_limit: must be a number"):
        Session.create({"cluster": {"gpus": {"v100": 2}}, "time_limit": "x"})


@pytest.mark.parametrize("policy", ["fifo", "allox", "max_min_fairness_water_filling"])
def test_packing_with_a_policy_without_space_sharing_is_refused_at_creation(policy):
    """It was accepted (201) and then every round failed (fifo), or packing was silently
    ignored (allox); solve_instance refuses it the same way for the CLI and POST /v1/solve."""
    with pytest.raises(OptschedError, match=rf"^packing: policy {policy} has no space sharing"):
        Session.create({"cluster": {"gpus": {"v100": 2}}, "policy": policy, "packing": True})
    from optsched.model import Instance, parse_snapshot
    from optsched.policy import solve_instance

    inst = Instance.from_snapshot(parse_snapshot({"cluster": {"gpus": {"v100": 2}},
                                                  "jobs": [{"id": "a", "throughput": {"v100": 1.0}}]}))
    with pytest.raises(OptschedError, match=f"^packing: policy {policy} has no space sharing"):
        solve_instance(inst, policy, packing=True)
    Session.create({"cluster": {"gpus": {"v100": 2}}, "policy": "max_min_fairness", "packing": True})


def test_steps_past_the_total_are_refused_or_finish_the_job():
    """PATCH steps_total below steps_done used to be accepted and the job kept its GPU; a report
    past the total stored steps_done > steps_total."""
    s = Session.create({"cluster": {"gpus": {"v100": 1}}}, Store(":memory:"))
    s.submit([{"id": "a", "throughput": {"v100": 1.0}, "steps_total": 1000},
              {"id": "b", "throughput": {"v100": 1.0}, "steps_total": 2000}])
    s.next_round()
    s.report([{"job_id": "a", "steps": 500}])
    before = s.state()
    for total in (100, 500):
        with pytest.raises(OptschedError, match=rf"^steps_total: {total} is not above the 500 steps the job has done"):
            s.update("a", {"steps_total": total})
    assert s.state() == before  # nothing changed
    assert s.update("a", {"steps_total": 501})["spec"]["steps_total"] == 501
    out = s.report([{"job_id": "b", "steps_done": 5000}])[0]
    assert out["status"] == "finished" and out["steps_done"] == 2000


def test_update_errors_name_the_field_of_the_patch_body():
    s = Session.create({"cluster": {"gpus": {"v100": 1}}}, Store(":memory:"))
    s.submit([{"id": "a", "throughput": {"v100": 1.0}}])
    for change in ({"throughput": {"zz": 1.0}}, {"throughput": {"v100": -1.0}}):
        with pytest.raises(OptschedError, match=r"^throughput"):
            s.update("a", change)


@pytest.mark.parametrize("length", [1e-300, 1e-4, 0.0])
def test_round_length_below_a_millisecond_is_refused(length):
    """1e-300 s rounds left the clock at its start (1e12 + 1e-300 == 1e12): no service was ever counted."""
    with pytest.raises(OptschedError, match="round_length"):
        Session.create({"cluster": {"gpus": {"v100": 1}}, "round_length": length, "start_time": 1e12},
                       Store(":memory:"))


def test_finishing_a_job_keeps_the_seconds_it_reported():
    """finish/remove after a report (or record) of 90 s credited the whole 360 s round."""
    def session():
        s = Session.create({"cluster": {"gpus": {"v100": 2, "k80": 2}}, "round_length": 360}, Store(":memory:"))
        s.submit([{"id": "a", "throughput": {"v100": 1.0, "k80": 0.5}}])
        return s

    s = session()
    s.next_round()
    s.report([{"job_id": "a", "steps": 10, "seconds": 90}])
    out = s.finish("a")
    assert (out["attained_service"], out["finish_time"]) == (90.0, 90.0)
    s = session()
    s.next_round()
    s.report([{"job_id": "a", "seconds": 90}])
    assert s.remove("a")[0]["attained_service"] == 90.0
    s = session()
    s.next_round()
    s.next_round()
    s.record("a", s.state()["jobs"][0]["gpus"][0]["gpu_type"], 90.0)
    assert s.finish("a")["attained_service"] == 360.0 + 90.0
    s = session()
    s.next_round()
    s.report([{"job_id": "a", "seconds": 90}])
    assert s.finish("a", 30)["attained_service"] == 30.0  # the finish's own seconds win


def _one_job_session():
    s = Session.create({"cluster": {"gpus": {"v100": 2, "k80": 2}}, "policy": "max_min_fairness"}, Store(":memory:"))
    s.submit([{"id": "a", "throughput": {"v100": 2.0, "k80": 1.0}, "steps_total": 2000}])
    s.next_round()
    return s


def test_reported_seconds_are_cut_at_the_next_round_and_one_report_per_job():
    """300 reported seconds were credited though the next round started 10 s later; two reports
    of one job in a batch finished it with steps_done 0 of 2000."""
    s = _one_job_session()
    s.report([{"job_id": "a", "seconds": 300}])
    s.next_round(now=10.0)
    assert s.job("a")["attained_service"] == 10.0
    before = s.state()
    with pytest.raises(OptschedError, match=r"^reports\[1\]\.job_id: job 'a' is reported twice"):
        s.report([{"job_id": "a", "steps": 5000}, {"job_id": "a", "steps_done": 0}])
    assert s.state() == before


@pytest.mark.parametrize("call", [lambda s: s.next_round(now=-1), lambda s: s.next_round(expected_round=-1),
                                  lambda s: s.finish("a", -1), lambda s: s.finish("a", float("nan"))])
def test_bad_round_and_finish_arguments_are_one_line_optsched_errors(call):
    s = _one_job_session()
    before = s.state()
    with pytest.raises(OptschedError) as err:
        call(s)
    assert type(err.value) is OptschedError and "\n" not in str(err.value)
    assert s.state() == before


# ---------------------------------------------------------------- what a policy needs, checked on arrival


@pytest.mark.parametrize("policy", ["makespan", "finish_time_fairness", "srtf", "makespan_agnostic"])
def test_a_job_without_steps_is_refused_at_submit_when_the_policy_reads_them(policy):
    """Accepted, it made every later round fail (422) until a client finished the job."""
    s = Session.create({"cluster": {"gpus": {"v100": 2}}, "policy": policy})
    with pytest.raises(OptschedError, match=rf"^jobs\[1\]\.steps_total: policy {policy} needs the total steps"):
        s.submit({"jobs": [{"id": "a", "throughput": {"v100": 1.0}, "steps_total": 100},
                           {"id": "b", "throughput": {"v100": 1.0}}]})
    s.submit({"jobs": [{"id": "a", "throughput": {"v100": 1.0}, "steps_total": 100}]})  # the refusal kept nothing
    with pytest.raises(OptschedError, match=r"^steps_total: policy"):  # nor may a PATCH remove them
        s.update("a", {"steps_total": None})
    assert s.next_round()["started"] == ["a"]


def test_min_cost_slo_needs_steps_only_of_jobs_with_an_slo():
    s = Session.create({"cluster": {"gpus": {"v100": 2}, "price_per_hour": {"v100": 3.0}}, "policy": "min_cost_slo"})
    s.submit({"jobs": [{"id": "a", "throughput": {"v100": 1.0}}]})  # no SLO: no length needed
    with pytest.raises(OptschedError, match=r"^jobs\[0\]\.steps_total: job 'b' has an SLO"):
        s.submit({"jobs": [{"id": "b", "throughput": {"v100": 1.0}, "slo": 1000.0}]})
    with pytest.raises(OptschedError, match=r"^steps_total: job 'a' has an SLO"):
        s.update("a", {"slo": 1000.0})
    assert s.next_round()["started"] == ["a"]


@pytest.mark.parametrize("prices, missing", [(None, "v100"), ({"v100": 3.0}, "k80")])
def test_a_cost_policy_session_needs_every_price_at_creation(prices, missing):
    """A min_cost session without prices was created and could never run a round
    (a session's cluster cannot change)."""
    cluster = {"gpus": {"v100": 2, "k80": 2}, **({"price_per_hour": prices} if prices else {})}
    for policy in ("min_cost", "min_cost_slo"):
        with pytest.raises(OptschedError, match=rf"^cluster\.price_per_hour\['{missing}'\]: cost-aware policies need a price for every GPU type \(is missing\)$"):
            Session.create({"cluster": cluster, "policy": policy})
    Session.create({"cluster": cluster, "policy": "max_min_fairness"})  # other policies ignore prices


def test_a_cost_policy_session_refuses_a_zero_price():
    with pytest.raises(OptschedError, match=r"^cluster\.price_per_hour\['v100'\]: cost-aware policies need a price for every GPU type \(must be > 0, got 0\)$"):
        Session.create({"cluster": {"gpus": {"v100": 2}, "price_per_hour": {"v100": 0.0}}, "policy": "min_cost"})


def test_two_views_of_one_pair_that_disagree_are_refused_at_submit():
    """Each job of a pair may list it; in one request they disagreed and every round then failed."""
    s = Session.create({"cluster": {"gpus": {"v100": 1}}, "packing": True})
    with pytest.raises(OptschedError, match=r"^jobs\[1\]\.colocated\['a'\]\['v100'\]: \[0\.9, 0\.9\] disagrees"):
        s.submit({"jobs": [{"id": "a", "throughput": {"v100": 1}, "colocated": {"b": {"v100": [0.5, 0.5]}}},
                           {"id": "b", "throughput": {"v100": 1}, "colocated": {"a": {"v100": [0.9, 0.9]}}}]})
    s.submit({"jobs": [{"id": "a", "throughput": {"v100": 1}, "colocated": {"b": {"v100": [0.8, 0.7]}}},
                       {"id": "b", "throughput": {"v100": 1}, "colocated": {"a": {"v100": [0.7, 0.8]}}}]})
    assert sorted(s.next_round()["started"]) == ["a", "b"]  # packed together on the one GPU


def test_pair_rates_with_an_active_partner_are_checked_at_submit():
    """Only pairs inside one request were checked: a -1 rate with a job submitted
    earlier was stored and packed on, 1e300 made every solve fall back."""
    s = Session.create({"cluster": {"gpus": {"v100": 1}}, "packing": True})
    s.submit({"jobs": [{"id": "a", "throughput": {"v100": 1.0}}]})
    for bad in ([-1.0, 5.0], [1e300, 1e300]):
        with pytest.raises(OptschedError, match=r"^jobs\[0\]\.colocated\['a'\]\['v100'\]: rates must be finite"):
            s.submit({"jobs": [{"id": "b", "throughput": {"v100": 1.0}, "colocated": {"a": {"v100": bad}}}]})
    s.submit({"jobs": [{"id": "b", "throughput": {"v100": 1.0}, "colocated": {"a": {"v100": [0.8, 0.7]}}}]})
    out = s.next_round()
    assert sorted(out["started"]) == ["a", "b"]


def test_a_cluster_type_name_that_is_not_unicode_is_refused_at_creation():
    with pytest.raises(OptschedError, match=r"^cluster\.gpus: not valid Unicode text"):
        Session.create({"cluster": {"gpus": {"\ud800": 1}}})


# ---------------------------------------------------------------- the scheduling core's options (issue 28)


@pytest.mark.parametrize("key, value, says", [
    ("admission", "load", "admits every submitted job"),
    ("load_factor", 2.0, "admits every submitted job"),
    ("loss_threshold", 0.1, "the caller ends its jobs"),
    ("restart_overhead", 30.0, "allocator.migration_cost"),
    ("migration_cost", 30.0, "allocator.migration_cost"),
    ("window", [0, 5], "stop asking for rounds"),
])
def test_simulation_options_without_meaning_for_a_session_are_refused_by_name(key, value, says):
    with pytest.raises(OptschedError) as e:
        Session.create({"cluster": {"gpus": {"v100": 2}}, key: value})
    msg = str(e.value)
    assert msg.startswith(f"{key}: not a session option") and says in msg and "\n" not in msg


def test_a_sessions_rounds_are_the_cores_recompute_rules_partitions_and_hysteresis():
    """min_recompute_interval, recompute_every, POP partitions and the allocator's hysteresis
    reach the core: a session decides as the core does with the same rules."""
    s = Session.create({"cluster": {"gpus": {"v100": 2, "k80": 2}}, "min_recompute_interval": 1000.0,
                        "round_length": 100.0, "partitions": 2, "allocator": {"hysteresis": 3.0}})
    assert s._allocator_loaded().hysteresis == 3.0
    s.submit([{"id": f"j{i}", "throughput": {"v100": 2.0, "k80": 1.0}} for i in range(4)])
    rounds = [s.next_round() for _ in range(3)]
    assert [r["recomputed"] for r in rounds] == [True, False, False]
    assert s.allocation().explanation["partitions"] == 2  # POP's merged solve
    s.submit([{"id": "late", "throughput": {"v100": 2.0, "k80": 1.0}}])  # arrived: due, but not before 1000 s
    assert [s.next_round()["recomputed"] for _ in range(8)] == [False] * 7 + [True]


# ---------------------------------------------------------------- embedding (issue 30)


def test_a_retried_report_counts_once_also_after_a_reload_and_for_a_finished_job(tmp_path):
    """Two deliveries of one report of 100 steps gave steps_done 200. With a sequence number
    per job the retry changes nothing (the store keeps the last seq), and retrying the report
    that finished the job answers the finished job instead of a conflict."""
    db = tmp_path / "s.db"
    s = Session.create({"cluster": {"gpus": {"v100": 2}}, "session_id": "s"}, store=Store(db))
    s.submit([{"id": "a", "throughput": {"v100": 1.0}, "steps_total": 1000}, {"id": "b", "throughput": {"v100": 1.0}}])
    s.next_round()
    assert s.report({"job_id": "a", "seq": 1, "steps": 100})[0]["steps_done"] == 100
    assert s.report({"job_id": "a", "seq": 1, "steps": 100})[0]["steps_done"] == 100
    v = s.version
    s = Session.load("s", Store(db))
    out = s.report([{"job_id": "a", "seq": 1, "steps": 100}, {"job_id": "b", "seq": 7, "steps": 5}])
    assert [r["steps_done"] for r in out] == [100, 5] and s.version == v + 1  # b's report applied, a's not
    assert s.report({"job_id": "a", "seq": 0, "steps": 100})[0]["steps_done"] == 100  # an older one: a retry too
    assert s.report({"job_id": "a", "seq": 2, "steps": 900})[0]["status"] == "finished"
    again = s.report({"job_id": "a", "seq": 2, "steps": 900})[0]
    assert again["status"] == "finished" and again["steps_done"] == 1000
    with pytest.raises(Conflict):  # a new report for a finished job is still a conflict
        s.report({"job_id": "a", "seq": 3, "steps": 1})
    s.next_round()
    assert s.report({"job_id": "b", "steps": 5})[0]["steps_done"] == 10  # without seq: adds, as documented


def test_a_throughput_table_by_model_gives_jobs_their_rows():
    s = Session.create({"cluster": {"gpus": {"v100": 2, "k80": 2}},
                        "throughputs": {"resnet50": {"v100": 10.0, "k80": 3.0}}})
    out = s.submit([{"id": "a", "model": "resnet50"}, {"id": "b", "model": "x", "throughput": {"k80": 1.0}}])
    assert out[0]["spec"]["throughput"] == {"v100": 10.0, "k80": 3.0} and out[1]["spec"]["throughput"] == {"k80": 1.0}
    with pytest.raises(OptschedError, match=r"^jobs\[0\]\.throughput: missing, and the session's throughputs table "
                                            r"has no model 'bert'$"):
        s.submit([{"id": "c", "model": "bert"}])
    with pytest.raises(OptschedError, match=r"^jobs\[0\]\.throughput: missing \(the session has no throughputs"):
        Session.create({"cluster": {"gpus": {"v100": 2}}}).submit([{"id": "c"}])
    with pytest.raises(OptschedError, match=r"^throughputs\['m'\]: unknown GPU type 'p100'"):
        Session.create({"cluster": {"gpus": {"v100": 2}}, "throughputs": {"m": {"p100": 1.0}}})


def test_the_default_migration_cost_is_the_peers_restart_penalty_and_it_moves_jobs_less():
    from optsched.service.models import DEFAULT_MIGRATION_COST

    s = Session.create({"cluster": workload.CLUSTER})
    assert s.config.allocator.migration_cost == DEFAULT_MIGRATION_COST == 30.0
    moves = {}
    for cost in (0.0, 30.0):
        s = Session.create({"cluster": workload.CLUSTER, "allocator": {"migration_cost": cost}})
        rounds, _ = workload.run(s, 60, seed=1)
        moves[cost] = sum(len(r["migrated"]) + len(r["preempted"]) for r in rounds)
    assert moves[30.0] < moves[0.0]
