"""`optsched serve` as a real subprocess on a free loopback port: solve and
session round trips, durability across SIGKILL, auth, limits and error codes."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

import optsched
from optsched.client import (Client, ConflictError, NotFoundError, ServiceError, UnauthorizedError,
                             UnreachableError)
from optsched.cli.solve import example_snapshot_text
from optsched.service import workload
from optsched.service.process import ServerProcess

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("serve") / "sessions.db") as srv:
        yield srv


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """A server with a token and a small body limit."""
    with ServerProcess(tmp_path_factory.mktemp("secure") / "sessions.db", token=TOKEN,
                       args=["--max-body-bytes", "20000", "--max-jobs", "50", "--log-format", "json"]) as srv:
        yield srv


def snapshot() -> dict:
    return json.loads(example_snapshot_text())


# ---------------------------------------------------------------- stateless


def test_healthz_policies_and_openapi_are_served(server):
    c = Client(server.url)
    assert c.healthz()["status"] == "ok"
    assert "max_min_fairness" in c.policies()
    spec = httpx.get(f"{server.url}/openapi.json").json()
    assert spec["openapi"].startswith("3.")
    for path in ("/v1/solve", "/v1/sessions", "/v1/sessions/{sid}/rounds", "/v1/sessions/{sid}/progress"):
        assert path in spec["paths"]
    # Units are documented in the schema.
    props = spec["components"]["schemas"]["JobOut"]["properties"]
    assert "GPU-seconds" in props["attained_service"]["description"]


def test_solve_over_http_with_partitions_is_pops_merged_solve(server):
    from optsched.pop import solve_partitioned

    snap = snapshot()
    remote = Client(server.url).solve(snap, policy="max_min_fairness", partitions=2)
    local = solve_partitioned(optsched.Instance.from_snapshot(optsched.parse_snapshot(snap)), "max_min_fairness", 2)
    assert remote.explanation["partitions"] == 2
    assert remote.objective == pytest.approx(local.objective, rel=1e-9)
    with pytest.raises(ServiceError) as e:
        Client(server.url).solve(snap, policy="fifo", partitions=2)
    assert e.value.status in (400, 422) and e.value.field == "partitions"


def test_solve_over_http_equals_the_in_process_solve(server):
    snap = snapshot()
    remote = Client(server.url).solve(snap, policy="max_min_fairness")
    local = optsched.solve(optsched.parse_snapshot(snap), policy="max_min_fairness")
    # The same type as in process, the same values (timings aside).
    assert isinstance(remote, optsched.Allocation)
    assert remote.status == local.status == "optimal"
    assert remote.job_ids == local.job_ids and remote.gpu_types == local.gpu_types
    assert remote.objective == pytest.approx(local.objective, rel=1e-6)
    assert remote.fractions == pytest.approx(local.fractions, abs=1e-6)
    assert remote.effective_throughput == pytest.approx(local.effective_throughput, rel=1e-6)
    assert set(remote.explanation["gpu_price"]) == {"v100", "p100", "k80"}
    raw = Client(server.url).solve_json(snap, policy="max_min_fairness")  # the server's JSON, unchanged
    assert {k: v for k, v in remote.to_dict().items() if not k.endswith("_seconds")} == \
        {k: v for k, v in raw.items() if not k.endswith("_seconds") and k in remote.to_dict()}
    with pytest.raises(TypeError, match="solve_json"):
        Client(server.url).solve(snap, placement=True)


def test_a_packed_solve_over_http_keeps_its_pairs(server):
    from optsched.client import allocation_from_json

    from pathlib import Path

    snap = json.loads((Path(__file__).parents[1] / "examples" / "packing.json").read_text())
    local = optsched.solve(optsched.parse_snapshot(snap), policy="max_min_fairness", packing=True)
    assert len(local.pairs) > 0
    back = allocation_from_json(json.loads(json.dumps(local.to_dict())), list(local.gpu_types))
    assert back.to_dict() == json.loads(json.dumps(local.to_dict()))
    assert (back.pairs == local.pairs).all() and back.pair_fractions == pytest.approx(local.pair_fractions)
    remote = Client(server.url).solve(snap, packing=True)
    assert (remote.pairs == local.pairs).all() and remote.pair_fractions == pytest.approx(local.pair_fractions, abs=1e-6)


def test_solve_with_placement_returns_gpus_and_allocator_state(server):
    out = Client(server.url).solve_json(snapshot(), placement=True)
    used = [(s["server"], s["gpu"]) for slots in out["placement"].values() for s in slots]
    assert len(used) == len(set(used)) <= 12
    assert set(out["started"]) == set(out["placement"])
    assert set(out["allocator_state"]) >= {"rounds_received", "placement"}


# ---------------------------------------------------------------- sessions


def test_session_round_trip_with_bookkeeping_in_documented_units(server):
    c = Client(server.url)
    s = c.session({"gpus": {"v100": 2, "k80": 2}}, round_length=100.0)
    s.submit([{"id": "a", "throughput": {"v100": 2.0, "k80": 1.0}, "steps_total": 1000},
              {"id": "b", "scale_factor": 2, "throughput": {"v100": 3.0, "k80": 1.0}}])
    r0 = s.next_round()
    assert r0["round"] == 0 and r0["time"] == 0.0 and r0["recomputed"]
    assert set(r0["started"]) == {"a", "b"} and set(r0["placement"]) == {"a", "b"}
    assert len(r0["placement"]["b"]) == 2
    s.report([{"job_id": "a", "steps": 150.0, "seconds": 75.0}, {"job_id": "b", "steps": 200.0}])
    r1 = s.next_round()
    assert r1["round"] == 1 and r1["time"] == 100.0 and not r1["recomputed"]
    a, b = s.job("a"), s.job("b")
    assert a["steps_done"] == 150.0 and a["attained_service"] == 75.0  # 1 GPU × 75 s reported
    assert b["attained_service"] == 200.0  # 2 GPUs × the whole round
    assert a["elapsed_time"] == 100.0 and a["status"] == "running"
    done = s.report([{"job_id": "a", "steps": 900.0, "seconds": 40.0}])[0]  # reaches steps_total
    assert done["status"] == "finished" and done["finish_time"] == 140.0 and done["attained_service"] == 115.0
    r2 = s.next_round()
    assert "a" not in r2["placement"] and r2["recomputed"]
    st = s.state()
    assert [j["id"] for j in st["jobs"]] == ["b"] and st["finished_jobs"] == 1 and st["round"] == 3
    kinds = [e["kind"] for e in s.events()]
    assert kinds == ["create", "submit", "round", "progress", "round", "progress", "round"]


def test_session_errors_name_the_field_and_change_nothing(server):
    c = Client(server.url)
    s = c.session({"gpus": {"v100": 2}}, round_length=60.0)
    s.submit([{"id": "a", "throughput": {"v100": 1.0}}, {"id": "q", "throughput": {"v100": 1.0}, "scale_factor": 2}])
    s.next_round()
    before = s.state()
    with pytest.raises(ServiceError) as e:  # did not run: nothing to credit
        s.report([{"job_id": "a", "steps": 5.0}, {"job_id": "q", "seconds": 10.0}])
    assert e.value.status == 422 and e.value.field == "reports[1].seconds" and "did not run" in e.value.detail
    with pytest.raises(ServiceError) as e:
        s.report([{"job_id": "a", "seconds": 61.0}])
    assert e.value.status == 422 and "within the round" in e.value.detail
    with pytest.raises(ServiceError) as e:
        s.submit([{"id": "z", "scale_factor": 4, "throughput": {"v100": 1.0}}])
    assert e.value.status == 422 and e.value.field == "jobs[0].scale_factor"
    with pytest.raises(ServiceError) as e:
        s.submit([{"id": "y", "throughput": {"h100": 1.0}}])
    assert e.value.status == 422 and e.value.field == "jobs[0].throughput"
    with pytest.raises(ConflictError):
        s.submit([{"id": "a", "throughput": {"v100": 1.0}}])
    with pytest.raises(NotFoundError):
        s.report([{"job_id": "nope", "steps": 1.0}])
    with pytest.raises(ConflictError):
        s.next_round(expected_round=5)
    assert s.state() == before


def test_stale_round_retry_is_a_conflict_not_a_second_round(server):
    s = Client(server.url).session({"gpus": {"v100": 1}})
    s.submit([{"id": "a", "throughput": {"v100": 1.0}}])
    assert s.next_round(expected_round=0)["round"] == 0
    with pytest.raises(ConflictError):
        s.next_round(expected_round=0)  # a retried request after a lost answer
    assert s.last_round()["round"] == 0


def test_sessions_are_isolated(server):
    c = Client(server.url)
    s1 = c.session({"gpus": {"v100": 1}}, session_id="iso-1")
    s2 = c.session({"gpus": {"k80": 3}}, session_id="iso-2")
    s1.submit([{"id": "a", "throughput": {"v100": 1.0}}])
    s2.submit([{"id": "a", "scale_factor": 3, "throughput": {"k80": 1.0}}])  # same job id, other session
    assert s1.next_round()["placement"]["a"][0]["gpu_type"] == "v100"
    assert len(s2.next_round()["placement"]["a"]) == 3
    with pytest.raises(ConflictError):
        c.session({"gpus": {"v100": 1}}, session_id="iso-1")
    s1.delete()
    with pytest.raises(NotFoundError):
        s1.state()
    assert s2.state()["round"] == 1


# ---------------------------------------------------------------- durability


def _try(fn, **kwargs):
    try:
        return fn(**kwargs)
    except Exception as e:  # the server died under the request
        return e


def _round_key(r: dict) -> tuple:
    return (r["round"], r["time"], json.dumps(r["placement"], sort_keys=True), tuple(r["started"]),
            tuple(r["preempted"]), tuple(r["migrated"]), r["recomputed"])


def _jobs_key(state: dict) -> list:
    keep = ("id", "status", "steps_done", "attained_service", "elapsed_time", "rounds_run", "preemptions", "gpus")
    return [{k: j[k] for k in keep} for j in state["jobs"]]


def test_sigkill_mid_session_then_restart_gives_the_same_rounds_as_an_uninterrupted_twin(tmp_path):
    """Twin servers get identical requests; one is SIGKILLed four times — twice
    after a progress report was answered and before the next round, once while a
    round request is in flight (the caller retries with expected_round), once
    between rounds — and restarted on its database. Every round and the final
    bookkeeping must match the uninterrupted twin's exactly."""
    cfg = {"cluster": workload.CLUSTER, "policy": "max_min_fairness", "recompute_every": 4, "session_id": "twin"}
    twin = ServerProcess(tmp_path / "twin.db").start()
    crash = ServerProcess(tmp_path / "crash.db").start()

    def restart():
        nonlocal crash
        crash.kill()
        crash = ServerProcess(tmp_path / "crash.db").start()
        return Client(crash.url).open_session("twin")

    try:
        st, sc = Client(twin.url).session(**cfg), Client(crash.url).session(**cfg)
        dt, dc = workload.Driver(7), workload.Driver(7)
        for r in range(28):
            dt.before_round(st)
            dc.before_round(sc)
            if r in (7, 17):
                sc = restart()
            if r == 12:  # killed while the round request is in flight: committed or not, never half
                lt, lc = dt.next_round(st), None
                box: dict = {}
                call = threading.Thread(target=lambda: box.setdefault("out", _try(sc.next_round, expected_round=r)))
                call.start()
                time.sleep(0.01)
                sc = restart()
                call.join(600)  # (a bound only a hang reaches)
                last = sc.last_round()
                lc = last if last and last["round"] == r else sc.next_round(expected_round=r)  # the retry
                dc.last = lc
            else:
                lt, lc = dt.next_round(st), dc.next_round(sc)
            if _round_key(lc) != _round_key(lt):
                diag = {k: (sc.state()[k], st.state()[k]) for k in ("allocation", "allocator_state")}
                pytest.fail(f"round {r} differs after a restart:\n{lc}\n{lt}\n{json.dumps(diag)[:20000]}")
            if r == 23:
                sc = restart()
        assert _jobs_key(sc.state()) == _jobs_key(st.state())
        assert sc.state()["allocator_state"] == st.state()["allocator_state"]
        assert sc.state()["finished_jobs"] == st.state()["finished_jobs"] > 0
        assert sc.state()["version"] == st.state()["version"]
    finally:
        twin.stop()
        crash.stop()


# ---------------------------------------------------------------- security and limits


def test_missing_or_wrong_token_is_401_and_healthz_stays_open(secure, monkeypatch):
    monkeypatch.delenv("OPTSCHED_TOKEN", raising=False)
    assert httpx.get(f"{secure.url}/healthz").status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
        r = httpx.post(f"{secure.url}/v1/solve", json={"snapshot": snapshot()}, headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert "Traceback" not in r.text and r.json()["field"] == "Authorization"
    with pytest.raises(UnauthorizedError):
        Client(secure.url).policies()
    assert "max_min_fairness" in Client(secure.url, token=TOKEN).policies()
    monkeypatch.setenv("OPTSCHED_TOKEN", TOKEN)  # the client reads the variable `optsched serve` reads
    assert "max_min_fairness" in Client(secure.url).policies()


def test_oversize_malformed_and_unknown_get_the_right_4xx(secure):
    h = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    big = {"snapshot": {**snapshot(), "jobs": snapshot()["jobs"] * 200}}
    r = httpx.post(f"{secure.url}/v1/solve", content=json.dumps(big), headers=h)
    assert r.status_code == 413 and r.json()["field"] == "body"

    def chunks():  # no Content-Length: counted while reading
        for _ in range(30):
            yield b" " * 1000

    r = httpx.post(f"{secure.url}/v1/solve", content=chunks(), headers=h)
    assert r.status_code == 413
    r = httpx.post(f"{secure.url}/v1/solve", content=b'{"snapshot": {', headers=h)
    assert r.status_code == 422 and r.json() == {"detail": "body: malformed JSON", "field": "body"}
    # A repeated key would be read last-wins by the app's parser: the second "policy" dropped the first.
    r = httpx.post(f"{secure.url}/v1/solve", headers=h,
                   content=b'{"snapshot": ' + json.dumps(snapshot()).encode() + b', "policy": "fifo", "policy": "max_min_fairness"}')
    assert r.status_code == 422 and r.json() == {"detail": "body: key 'policy' appears twice in one object", "field": "body"}
    r = httpx.post(f"{secure.url}/v1/solve", content=b'{"snapshot": {"cluster": {"gpus": {"v100": NaN}}}}', headers=h)
    assert r.status_code == 422
    r = httpx.post(f"{secure.url}/v1/solve", json={"snapshot": snapshot(), "policy": "nope"}, headers=h)
    assert r.status_code == 422 and r.json()["field"] == "policy"
    r = httpx.post(f"{secure.url}/v1/solve", json={"snapshot": snapshot(), "time_limit": -1}, headers=h)
    assert r.status_code == 422 and r.json()["field"] == "time_limit"
    # A policy's error about a job is located in the request body: under snapshot, like a parse error.
    no_steps = {"cluster": {"gpus": {"v100": 2}}, "jobs": [{"id": "a", "throughput": {"v100": 1.0}, "steps_total": 9},
                                                           {"id": "b", "throughput": {"v100": 1.0}}]}
    for partitions in (1, 2):
        r = httpx.post(f"{secure.url}/v1/solve", json={"snapshot": no_steps, "policy": "makespan",
                                                       "partitions": partitions}, headers=h)
        assert r.status_code == 422 and r.json()["field"] == "snapshot.jobs[1].steps_total", r.json()
    by_model = {"cluster": {"gpus": {"v100": 2}}, "jobs": [{"id": f"m{i}", "model": "x", "throughput": {"v100": 1.0}}
                                                          for i in range(3)],
                "colocation": {"x": {"x": {"v100": [0.7, 0.7]}}}}
    r = httpx.post(f"{secure.url}/v1/solve", json={"snapshot": by_model, "policy": "max_throughput", "packing": True},
                   headers=h)
    assert r.status_code == 200 and r.json()["explanation"]["colocation"].startswith("candidate"), r.json()
    r = httpx.post(f"{secure.url}/v1/solve", json={"snapshot": by_model, "packing": True}, headers=h)
    assert r.status_code == 200 and r.json()["packed_allocation"], r.json()
    r = httpx.post(f"{secure.url}/v1/sessions/unknown/rounds", json={}, headers=h)
    assert r.status_code == 404 and "unknown" in r.json()["detail"]
    r = httpx.get(f"{secure.url}/v1/sessions/unknown", headers=h)
    assert r.status_code == 404
    s = Client(secure.url, token=TOKEN).session({"gpus": {"v100": 4}})
    r = httpx.post(f"{secure.url}/v1/sessions/{s.id}/jobs", headers=h,
                   json={"jobs": [{"id": f"j{i}", "throughput": {"v100": 1.0}} for i in range(51)]})
    assert r.status_code == 422 and "limit of 50" in r.json()["detail"]
    r = httpx.post(f"{secure.url}/v1/sessions", headers=h, json={"cluster": {"gpus": {"v100": 4}}, "bogus": 1})
    assert r.status_code == 422 and r.json()["field"] == "bogus"
    # A flag or text where a number belongs is refused, not converted (true ran as 1 s, "4" as 4).
    r = httpx.post(f"{secure.url}/v1/sessions", headers=h, json={"cluster": {"gpus": {"v100": 4}}, "time_limit": True})
    assert r.status_code == 422 and r.json()["field"] == "time_limit", r.json()
    s.submit([{"id": "w", "throughput": {"v100": 1.0}}])
    for body in ({"weight": "4"}, {"steps_total": True}):
        r = httpx.patch(f"{secure.url}/v1/sessions/{s.id}/jobs/w", headers=h, json=body)
        assert r.status_code == 422 and r.json()["field"] == next(iter(body)), r.json()
    for r in (httpx.post(f"{secure.url}/v1/sessions/{s.id}/progress", headers=h, content=b"[]"),
              httpx.patch(f"{secure.url}/v1/sessions/{s.id}/jobs/x", headers=h, json={"weight": 0})):
        assert r.status_code in (404, 422) and "Traceback" not in r.text


def test_non_loopback_bind_without_token_is_refused(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).with_name("optsched")
    out = subprocess.run([str(exe), "serve", "--host", "0.0.0.0", "--db", str(tmp_path / "x.db")],
                         capture_output=True, text=True, timeout=600, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 2 and "--token" in out.stderr


def test_client_retries_a_lost_round_answer_without_taking_a_second_round():
    calls = []
    committed = {"round": 3, "time": 1080.0, "placement": {}}

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append((request.method, request.url.path))
        if request.method == "POST":
            raise httpx.ConnectError("server restarting")  # the answer is lost; the round was committed
        return httpx.Response(200, json=committed)

    s = Client("http://test", transport=httpx.MockTransport(handler)).open_session("x")
    assert s.next_round(expected_round=3, retries=2, backoff=0.0) == committed
    assert [m for m, _ in calls] == ["GET", "POST", "GET"]
    with pytest.raises(UnreachableError):
        s.next_round()  # without expected_round a retry could take a second round: no retry


def test_concurrent_requests_to_one_session_are_serialized(server):
    from concurrent.futures import ThreadPoolExecutor

    s = Client(server.url).session({"gpus": {"v100": 2}}, session_id="serial")
    s.submit([{"id": f"j{i}", "throughput": {"v100": 1.0}} for i in range(5)])

    def go(i):
        with Client(server.url) as c:
            c.open_session("serial").submit([{"id": f"k{i}", "throughput": {"v100": 1.0}}])
            return c.open_session("serial").next_round()["round"]

    with ThreadPoolExecutor(16) as pool:
        rounds = sorted(pool.map(go, range(16)))
    assert rounds == list(range(16))  # every request got its own round, none lost or doubled
    st = s.state()
    assert st["round"] == 16 and st["version"] == 1 + 16 + 16 and len(st["jobs"]) == 21
    assert [e["seq"] for e in s.events()] == list(range(34))
    assert len(s.jobs()) == 21 and s.jobs(finished=True) == []


def test_sessions_evicted_from_memory_load_again_from_the_database(tmp_path):
    import asyncio

    from optsched.service.app import create_app
    from optsched.service.models import Limits

    app = create_app(str(tmp_path / "db"), limits=Limits(max_sessions_cached=2))

    async def scenario():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:
            for i in range(5):
                r = await http.post("/v1/sessions", json={"cluster": {"gpus": {"v100": 1}}, "session_id": f"s{i}"})
                assert r.status_code == 201
                await http.post(f"/v1/sessions/s{i}/jobs", json={"jobs": [{"id": "a", "throughput": {"v100": 1.0}}]})
            assert len(app.state.registry.sessions) <= 2
            for i in range(5):
                r = await http.post(f"/v1/sessions/s{i}/rounds", json={})
                assert r.status_code == 200 and r.json()["placement"]["a"][0]["gpu_type"] == "v100"
            assert len(app.state.registry.sessions) <= 2
            assert (await http.get("/v1/sessions/none/jobs/a")).status_code == 404
            assert "none" not in app.state.registry.locks

    asyncio.run(scenario())


def test_every_request_is_one_structured_log_record(secure):
    import time

    httpx.get(f"{secure.url}/v1/sessions/nobody", headers={"Authorization": f"Bearer {TOKEN}"})
    deadline = time.monotonic() + 600  # (a bound only a hang reaches; 5 s could run out on a busy machine)
    while time.monotonic() < deadline:  # the record is written after the answer is sent: wait for it
        records = [json.loads(line) for line in secure.log().splitlines() if line.startswith("{")]
        access = [r for r in records if r["logger"] == "optsched.service.access"]
        hit = [r for r in access if r["path"] == "/v1/sessions/nobody"]
        if hit:
            break
        time.sleep(0.1)
    assert hit and hit[-1]["status"] == 404 and hit[-1]["method"] == "GET" and hit[-1]["ms"] >= 0
    assert all(r.get("client", "").startswith("127.0.0.1:") for r in access)
    assert not any("traceback" in r for r in records)


@pytest.mark.parametrize("msg,field", [
    ("jobs[3].throughput: unknown GPU type", "jobs[3].throughput"),
    ("placement['a'][0]: GPU v100-0:0 is not in the cluster", "placement['a'][0]"),  # quoted keys were null
    ("jobs[0].colocated['j:1']['v100']: rates must be finite", "jobs[0].colocated['j:1']['v100']"),
    ("no field in this message", None),
])
def test_an_error_names_its_field_also_with_quoted_keys(msg, field):
    from optsched.service.app import _field_of

    assert _field_of(msg) == field


def test_an_unreachable_server_is_a_service_error_with_status_0():
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ServiceError, match="^cannot reach http://127.0.0.1") as err:
        Client(f"http://127.0.0.1:{port}", timeout=5).policies()
    assert err.value.status == 0


def test_the_client_refuses_nan_and_an_empty_job_id_as_the_session_does():
    """NaN in a body raised httpx's ValueError (not JSON), and job("") followed no redirect and returned None;
    a loop written for the in-process Session expects OptschedErrors. Both are refused before any request."""
    from optsched.client import Client, NotFoundError, ServiceError
    from optsched.model import OptschedError

    with Client("http://127.0.0.1:9") as c:  # (nothing listens there: no request is sent)
        with pytest.raises(ServiceError) as e:
            c.solve(snapshot(), time_limit=float("nan"))
        assert e.value.status == 422 and isinstance(e.value, OptschedError) and "finite" in str(e.value)
        from optsched.client import RemoteSession

        with pytest.raises(NotFoundError):
            RemoteSession(c, "s1").job("")


def test_a_client_that_leaves_before_a_response_is_logged_499_not_500(caplog):
    """The access log said 500 when a client disconnected mid-body, though no 500 was sent."""
    import asyncio
    import logging

    from optsched.service.app import _AccessLog

    async def app(scope, receive, send):  # reads the body; the client is gone: returns without a response
        await receive()

    async def failing(scope, receive, send):
        raise RuntimeError("boom")

    async def receive():
        return {"type": "http.disconnect"}

    async def send(msg):
        pass

    scope = {"type": "http", "method": "POST", "path": "/v1/sessions", "client": ("127.0.0.1", 5)}
    with caplog.at_level(logging.INFO, logger="optsched.service.access"):
        asyncio.run(_AccessLog(app)(scope, receive, send))
        with pytest.raises(RuntimeError):
            asyncio.run(_AccessLog(failing)(scope, receive, send))
    codes = [r.getMessage().split()[2] for r in caplog.records if r.name == "optsched.service.access"]
    assert codes == ["499", "500"]


def test_session_ids_dot_and_dotdot_are_refused_and_other_dotted_ids_work_through_the_client(server):
    """'.' and '..' were created (201) but unusable: a URL's dot segments are resolved away by the client."""
    c = Client(server.url)
    for sid in (".", ".."):
        with pytest.raises(ServiceError) as e:
            c.session({"gpus": {"v100": 1}}, session_id=sid)
        assert e.value.status == 422 and e.value.field == "session_id", e.value
        assert "path segment" in str(e.value) and "[A-Za-z" not in str(e.value), e.value  # words, not the regex
    assert not {".", ".."} & set(c.sessions())
    for sid in ("...", ".a", "..b", "c.."):
        s = c.session({"gpus": {"v100": 1}}, session_id=sid)
        s.submit([{"id": "j", "throughput": {"v100": 1.0}}])
        assert s.next_round()["placement"]["j"][0]["gpu_type"] == "v100"
        assert c.open_session(sid).state()["session_id"] == sid
        s.delete()
