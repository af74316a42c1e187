"""The service for operators: Prometheus /metrics, /readyz, request ids in and
out and in the logs, the start line at INFO, the client's address in the text
access log, and /docs that works offline (no CDN)."""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import pytest

from optsched.service.app import create_app
from optsched.service.process import ServerProcess

CLUSTER = {"gpus": {"v100": 2, "k80": 2}}
JOBS = [{"id": "a", "throughput": {"v100": 2.0, "k80": 1.0}, "steps_total": 1000},
        {"id": "b", "scale_factor": 2, "throughput": {"v100": 3.0, "k80": 1.0}, "steps_total": 900},
        {"id": "c", "scale_factor": 2, "throughput": {"v100": 1.0, "k80": 0.5}, "steps_total": 500}]


def _call(app, steps):
    """Run ``steps(http)`` against the app in process; its return value."""
    async def scenario():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:
            return await steps(http)

    return asyncio.run(scenario())


def parse_metrics(text: str) -> dict[tuple, float]:
    """{(name, frozenset(labels)): value} of a text exposition; checks every line's syntax."""
    out = {}
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'
                        r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*)\})? (\S+)$')
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        m = sample.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = frozenset(re.findall(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def test_metrics_count_rounds_jobs_gpus_solves_and_request_latency():
    app = create_app(":memory:")

    async def steps(http):
        sid = (await http.post("/v1/sessions", json={"cluster": CLUSTER, "round_length": 100.0,
                                                     "session_id": "s1"})).json()["session_id"]
        await http.post(f"/v1/sessions/{sid}/jobs", json={"jobs": JOBS})
        rounds = [(await http.post(f"/v1/sessions/{sid}/rounds", json={})).json() for _ in range(3)]
        await http.get("/v1/sessions/nobody")  # a 404, counted under its route template
        await http.get("/no/such/path")
        return rounds, (await http.get("/metrics"))

    rounds, r = _call(app, steps)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    m = parse_metrics(r.text)
    recomputed = sum(x["recomputed"] for x in rounds)
    assert m[("optsched_rounds_total", frozenset({("recomputed", "true")}))] == recomputed
    assert m.get(("optsched_rounds_total", frozenset({("recomputed", "false")})), 0) == 3 - recomputed
    assert m[("optsched_solve_seconds_count", frozenset({("source", "round")}))] == recomputed
    last = rounds[-1]
    gpus = {}
    for slots in last["placement"].values():
        for s in slots:
            gpus[s["gpu_type"]] = gpus.get(s["gpu_type"], 0) + 1
    for t, n in gpus.items():
        assert m[("optsched_session_gpus_used", frozenset({("session", "s1"), ("gpu_type", t)}))] == n
        assert m[("optsched_gpus_used", frozenset({("gpu_type", t)}))] == n
    assert m[("optsched_jobs", frozenset({("state", "running")}))] == len(last["placement"])
    assert m[("optsched_jobs", frozenset({("state", "queued")}))] == len(last["queued"])
    assert len(last["placement"]) + len(last["queued"]) == 3
    route = frozenset({("method", "POST"), ("route", "/v1/sessions/{sid}/rounds")})
    assert m[("optsched_http_request_duration_seconds_count", route)] == 3
    assert m[("optsched_http_request_duration_seconds_bucket", route | {("le", "+Inf")})] == 3
    assert m[("optsched_http_requests_total", frozenset({("method", "GET"), ("route", "/v1/sessions/{sid}"),
                                                         ("status", "404")}))] == 1
    assert m[("optsched_http_requests_total", frozenset({("method", "GET"), ("route", "unmatched"),
                                                         ("status", "404")}))] == 1
    # Buckets are cumulative.
    buckets = sorted((float(dict(k[1])["le"]), v) for k, v in m.items()
                     if k[0] == "optsched_http_request_duration_seconds_bucket" and route <= k[1]
                     and dict(k[1])["le"] != "+Inf")
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:]))


def test_a_deleted_session_leaves_the_gauges_and_a_stateless_solve_is_counted():
    from optsched.cli.solve import example_snapshot_text

    app = create_app(":memory:")

    async def steps(http):
        await http.post("/v1/sessions", json={"cluster": CLUSTER, "session_id": "gone"})
        await http.post("/v1/sessions/gone/jobs", json={"jobs": JOBS[:1]})
        await http.post("/v1/sessions/gone/rounds", json={})
        before = parse_metrics((await http.get("/metrics")).text)
        await http.delete("/v1/sessions/gone")
        await http.post("/v1/solve", json={"snapshot": __import__("json").loads(example_snapshot_text())})
        return before, parse_metrics((await http.get("/metrics")).text)

    before, after = _call(app, steps)
    assert any(k[0] == "optsched_session_jobs" and ("session", "gone") in k[1] for k in before)
    assert not any(("session", "gone") in k[1] for k in after)
    assert after[("optsched_solve_seconds_count", frozenset({("source", "solve")}))] == 1


def test_readyz_is_ready_then_not_while_shutting_down_or_without_a_database():
    app = create_app(":memory:")

    async def steps(http):
        ok = await http.get("/readyz")
        app.state.ready = False
        draining = await http.get("/readyz")
        app.state.ready = True
        app.state.store.session_ids = lambda limit: (_ for _ in ()).throw(OSError("disk gone"))
        broken = await http.get("/readyz")
        health = await http.get("/healthz")
        return ok, draining, broken, health

    ok, draining, broken, health = _call(app, steps)
    assert ok.status_code == 200 and ok.json() == {"status": "ready"}
    assert draining.status_code == 503 and draining.json()["detail"] == "shutting down"
    assert broken.status_code == 503 and "disk gone" in broken.json()["detail"]
    assert health.status_code == 200  # liveness is not readiness


def test_request_ids_in_and_out():
    app = create_app(":memory:")

    async def steps(http):
        given = await http.get("/healthz", headers={"X-Request-ID": "trace-42.a:b"})
        fresh = [await http.get("/healthz") for _ in range(2)]
        forged = await http.get("/healthz", headers={"X-Request-ID": "x" * 200})
        too_big = await http.post("/v1/sessions", content=b"{" * 10, headers={"X-Request-ID": "r-413",
                                                                              "Content-Length": str(2**40)})
        return given, fresh, forged, too_big

    given, fresh, forged, too_big = _call(app, steps)
    assert given.headers["x-request-id"] == "trace-42.a:b"
    a, b = (r.headers["x-request-id"] for r in fresh)
    assert a != b and re.fullmatch(r"[0-9a-f]{32}", a)
    assert forged.headers["x-request-id"] != "x" * 200  # not echoed: a new id
    assert too_big.status_code == 413 and too_big.headers["x-request-id"] == "r-413"


def test_docs_page_is_self_contained_and_lists_every_endpoint():
    app = create_app(":memory:")

    async def steps(http):
        return await http.get("/docs"), (await http.get("/openapi.json")).json()

    page, spec = _call(app, steps)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    # No script, and no reference to another host: nothing to fetch from a CDN.
    assert "<script" not in html.lower()
    refs = re.findall(r"""(?:href|src)\s*=\s*['"]([^'"]*)['"]""", html, flags=re.I)
    assert refs and not [u for u in refs if re.match(r"^(?:[a-z]+:)?//", u, flags=re.I)]
    assert not re.search(r"https?://", html)
    assert "cdn" not in html.lower()
    for path, item in spec["paths"].items():
        assert path in html, path
    for name in spec["components"]["schemas"]:
        assert f"id='schema-{name}'" in html, name
    assert "GPU-seconds" in html  # field descriptions (units) are on the page


def test_server_logs_start_at_info_with_request_ids_and_client_address(tmp_path):
    with ServerProcess(tmp_path / "s.db") as srv:
        r = httpx.get(f"{srv.url}/v1/sessions/nobody", headers={"X-Request-ID": "req-777"})
        assert r.status_code == 404 and r.headers["x-request-id"] == "req-777"
        deadline = time.monotonic() + 600  # (a bound only a hang reaches; 5 s could run out on a busy machine)
        while time.monotonic() < deadline:  # the record is written after the answer is sent: wait for it
            log = srv.log()
            if "/v1/sessions/nobody" in log:
                break
            time.sleep(0.1)
    start = [ln for ln in log.splitlines() if "listening on" in ln]
    assert start and " INFO optsched.service " in start[0] and "WARNING" not in start[0]
    hit = [ln for ln in log.splitlines() if "/v1/sessions/nobody" in ln and "optsched.service.access" in ln]
    assert hit, log
    assert "[req-777]" in hit[0] and re.search(r"GET /v1/sessions/nobody 404 [\d.]+ms 127\.0\.0\.1:\d+$", hit[0])
