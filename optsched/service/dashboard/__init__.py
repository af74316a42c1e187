"""The operator's dashboard: one live page per session (docs/guide/dashboard.md).

    GET /dashboard/{sid}              the page (HTML; its JS and CSS are package files, no CDN)
    GET /dashboard/static/{name}      common.js, dashboard.js, replay.js, dashboard.css
    GET /dashboard/{sid}/view         the page's data now (JSON, ``view``)
    GET /dashboard/{sid}/events       server-sent events: the view after every committed change; ``ended``
                                      (the session deleted) as the last event
    GET /dashboard/replay             a recorded run (`--out` folder's rounds.csv, jobs.csv) with a time slider

The token is the API's: a bearer header, a ``?token=`` query parameter (the page
then keeps it in an HttpOnly cookie, so the browser's EventSource, which cannot
send headers, carries it) or that cookie. Live updates are pushed: the request
that commits a change builds the view once, only when a page is listening, and
hands it to each listener's bounded queue; a listener that does not keep up
loses its oldest views (each carries the whole state, so the newest suffices),
never slowing the API. ``live.py`` serves the same page read-only for
``optsched run --dashboard`` and ``optsched slurm --dashboard``.
"""

# (no `from __future__ import annotations`: FastAPI reads the routes' annotations, imported locally)

import asyncio
import functools
import hmac
import json
import logging
from html import escape as html_escape
from importlib import resources
from typing import Any

QUEUE_SIZE = 8  # views kept per listener before the oldest is dropped
KEEPALIVE_SECONDS = 15.0  # an SSE comment this often keeps proxies from closing an idle stream
RECENT_ROUNDS = 50  # rounds the page lists at first (later ones arrive live)
COOKIE = "optsched_token"
log = logging.getLogger("optsched.service.dashboard")
STATIC = {"common.js": "text/javascript; charset=utf-8",
          "dashboard.js": "text/javascript; charset=utf-8", "dashboard.css": "text/css; charset=utf-8",
          "replay.js": "text/javascript; charset=utf-8"}


class Hub:
    """Listeners per session: a bounded asyncio queue each (event-loop thread only)."""

    def __init__(self, size: int = QUEUE_SIZE):
        self.size = size
        self.listeners: dict[str, set[asyncio.Queue]] = {}
        self.dropped = 0  # views a slow listener lost (newer ones replaced them)
        self.built = 0  # views built for listeners (one per committed change of a watched session)
        self.build_cpu_seconds = 0.0  # their CPU (the building thread's), for /metrics and the load bench

    def metrics(self) -> dict:
        """Prometheus entries (name: (type, help, value)) for the service's /metrics."""
        return {
            "optsched_dashboard_listeners": ("gauge", "Dashboard pages listening (event streams open).",
                                             sum(len(q) for q in self.listeners.values())),
            "optsched_dashboard_views_total": ("counter", "Dashboard views built for listening pages.", self.built),
            "optsched_dashboard_view_cpu_seconds_total": ("counter", "CPU seconds spent building dashboard views.",
                                                          self.build_cpu_seconds),
            "optsched_dashboard_views_dropped_total": ("counter", "Views a slow page lost (a newer one replaced "
                                                       "them).", self.dropped),
        }

    def wants(self, sid: str) -> bool:
        return bool(self.listeners.get(sid))

    def listen(self, sid: str) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue(self.size)
        self.listeners.setdefault(sid, set()).add(q)
        return q

    def leave(self, sid: str, q: asyncio.Queue) -> None:
        qs = self.listeners.get(sid)
        if qs is not None:
            qs.discard(q)
            if not qs:
                del self.listeners[sid]

    def publish(self, sid: str, message) -> None:
        for q in self.listeners.get(sid, ()):
            while q.full():  # a slow page: its oldest view goes (each view is whole)
                q.get_nowait()
                self.dropped += 1
            q.put_nowait(message)

    def end(self, sid: str, reason: str, **extra) -> None:
        """The session's pages learn that it ended (deleted; the run over) and their streams close.
        The last message of a stream, so a full queue loses a view, never this."""
        self.publish(sid, Ended(json.dumps({"session_id": sid, "reason": reason, **extra}, separators=(",", ":"))))


class Ended:
    """A stream's last message: its text is the ``ended`` event's data."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def view(session, kind: str = "") -> dict:
    """What the page shows, from the session's committed state: the cluster's
    servers and GPUs, the jobs (share against an equal share), the last round
    and the allocation's explanation. Read from the committed JSON memory (plain
    values: no conversion walk), built once per commit while a page listens."""
    with session._lock:  # (the caller holds the session's request lock too)
        s = session._s
        cfg = session.config
        jobs = [session._job_out(r) for r in s["jobs"].values()]
        rows = [{"id": j["id"], "status": j["status"], "spec": j["spec"], "steps_done": j["steps_done"],
                 "attained_service": j["attained_service"], "arrival_time": j["arrival_time"],
                 "first_start": j["first_start"], "preemptions": j["preemptions"], "gpus": j["gpus"]} for j in jobs]
        return compose(sid=s["session_id"], version=session.version, kind=kind, round_=s["round"], now=float(s["time"]),
                       policy=cfg.policy, round_length=cfg.round_length,
                       servers=_servers(json.dumps(s["config"]["cluster"]), cfg.allocator.gpus_per_server),
                       jobs=rows, total_gpus=sum(session.cluster.gpus.values()), finished=s["finished_count"],
                       last_round=s["last_round"], allocation=s["allocation"])


def compose(*, sid: str, version: int, kind: str, round_: int, now: float, policy: str, round_length: float,
            servers: list[dict], jobs: list[dict], total_gpus: int, finished: int, last_round: dict | None,
            allocation: dict | None) -> dict:
    """The page's view from plain values, whoever holds them (a session, a run, the Slurm agent).
    ``jobs``: dicts of id, status, spec (model, scale_factor, weight, steps_total), steps_done,
    attained_service (GPU-seconds), arrival_time, first_start, preemptions, gpus (server, gpu_type,
    gpu); ``allocation``: the allocation in force as ``session.allocation_to_state`` writes it."""
    alloc = allocation or {}
    shares = {j: float(sum(row)) for j, row in zip(alloc.get("job_ids", ()), alloc.get("fractions", ()))}
    demand = sum(float(j["spec"].get("weight", 1.0)) * int(j["spec"].get("scale_factor", 1)) for j in jobs)
    out_jobs = []
    for j in jobs:
        spec = j["spec"]
        w, sf = float(spec.get("weight", 1.0)), int(spec.get("scale_factor", 1))
        # The equal (weighted) share of time: each job's weight of the cluster, at most all of the time.
        fair = min(1.0, total_gpus * w / demand) if demand else None
        start = j["first_start"] if j["first_start"] is not None else now  # not started: waiting until now
        out_jobs.append({
            "id": j["id"], "status": j["status"], "model": spec.get("model"), "scale_factor": sf, "weight": w,
            "steps_done": j["steps_done"], "steps_total": spec.get("steps_total"),
            "attained_service": j["attained_service"], "waiting": max(start - j["arrival_time"], 0.0),
            "share": shares.get(j["id"]), "fair_share": fair, "preemptions": j["preemptions"], "gpus": j["gpus"],
        })
    return {
        "session_id": sid, "version": version, "kind": kind, "round": round_, "time": now,
        "policy": policy, "round_length": round_length, "servers": servers,
        "jobs": out_jobs, "finished_jobs": finished, "last_round": last_round,
        "allocation": {k: alloc.get(k) for k in ("policy", "status", "objective", "solve_seconds", "explanation")}
        if alloc else None,
    }


@functools.lru_cache(maxsize=64)
def _servers(cluster_json: str, gpus_per_server: int) -> list[dict]:
    """The servers and their GPUs as placement lays them out (a session's cluster never changes)."""
    from optsched.model import Cluster
    from optsched.placement import Layout

    return servers_of(Layout.from_cluster(Cluster.model_validate(json.loads(cluster_json)), gpus_per_server))


def servers_of(layout) -> list[dict]:
    """An ``optsched.placement.Layout``'s servers, in the cluster's own type order."""
    return [{"id": sid, "gpu_type": t, "gpus": int(cap)}
            for t, tl in layout.types.items() for sid, cap in zip(tl.server_ids, tl.server_capacity)]


def recent_rounds(store, sid: str, limit: int = RECENT_ROUNDS) -> list[dict]:
    """The last rounds' summaries from the session's event log (oldest first)."""
    if store is None:
        return []
    out: list[dict] = []
    after = -1
    while True:  # the log is paged by seq; keep only the tail
        page = store.events(sid, after, 1000)
        out.extend(e["body"]["result"] for e in page if e.get("kind") == "round" and "result" in (e.get("body") or {}))
        out = out[-limit:]
        if len(page) < 1000:
            return out
        after = page[-1]["seq"]


def _asset(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def add_dashboard_routes(app, registry, token: str | None, run_locked) -> None:
    """Register the dashboard's routes over the service's sessions. ``run_locked(sid, fn, *args)``
    runs ``fn(session, *args)`` in a worker thread with the session's lock held (app.py's ``run``)."""
    from optsched.service.app import _in_thread
    from optsched.service.session import jsonable

    async def exists(sid: str) -> None:
        await run_locked(sid, lambda s: None)  # NotFound (404) for an unknown session

    async def snapshot(sid: str) -> dict:
        out = await run_locked(sid, view, "snapshot")
        out["rounds"] = await _in_thread(recent_rounds, registry.store, sid)
        return jsonable(out)

    add_routes(app, token, exists, snapshot)


def session_heading(sid: str) -> tuple[str, str]:
    """(what the page shows, its name): a service session by its id."""
    return "session", sid


def add_routes(app, token: str | None, exists, snapshot, heading=session_heading) -> None:
    """The page, its assets, its view and its event stream, for any source of views:
    ``await exists(sid)`` raises ``session.NotFound`` for an unknown id; ``await snapshot(sid)``
    is the whole view now (with ``rounds``, the recent rounds); ``heading(sid)`` is the page's
    (kind, name): ("session", id), ("run", ""), ("Slurm agent", ""). Live views come from
    ``app.state.hub``; an ``ended`` event (``Hub.end``) closes a page's stream."""
    from fastapi import Path, Request
    from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

    from optsched.service.app import SESSION_ID_PATTERN, _Unauthorized

    hub: Hub = app.state.hub
    sid_path = Path(pattern=SESSION_ID_PATTERN, description="Session id.")

    def authorized(request: Request) -> str | None:
        """The token the request carries, checked (raises 401); None when the server has none."""
        if token is None:
            return None
        auth = request.headers.get("authorization", "")
        given = auth[7:] if auth.lower().startswith("bearer ") else None
        given = given or request.query_params.get("token") or request.cookies.get(COOKIE)
        if not given or not hmac.compare_digest(given.encode(), token.encode()):
            raise _Unauthorized()
        return given

    def with_cookie(resp, given: str | None):
        if given is not None:  # the page's requests (its EventSource included) carry it as a cookie
            resp.set_cookie(COOKIE, given, httponly=True, samesite="strict", path="/dashboard")
        return resp

    @app.get("/dashboard/static/{name}", include_in_schema=False)
    async def static(request: Request, name: str):
        authorized(request)
        if name not in STATIC:
            return JSONResponse({"detail": f"no dashboard file {name!r}", "field": "name"}, 404)
        return Response(_asset(name), media_type=STATIC[name], headers={"Cache-Control": "no-cache"})

    @app.get("/dashboard/replay", include_in_schema=False)
    async def replay_page(request: Request):
        """A recorded run's rounds.csv / jobs.csv, read by the browser from files the user picks."""
        given = authorized(request)
        return with_cookie(HTMLResponse(_asset("replay.html"), headers={"Cache-Control": "no-store"}), given)

    @app.get("/dashboard/{sid}", include_in_schema=False)
    async def page(request: Request, sid: str = sid_path):
        given = authorized(request)
        await exists(sid)
        kind, name = heading(sid)
        html = (_asset("index.html").replace("{{TITLE}}", html_escape(f"{kind} {name}".strip()))
                .replace("{{KIND}}", html_escape(kind)).replace("{{NAME}}", html_escape(name))
                .replace("{{SESSION_ID}}", sid))
        return with_cookie(HTMLResponse(html, headers={"Cache-Control": "no-store"}), given)

    @app.get("/dashboard/{sid}/view", include_in_schema=False)
    async def current(request: Request, sid: str = sid_path):
        authorized(request)
        return JSONResponse(await snapshot(sid))

    @app.get("/dashboard/{sid}/events", include_in_schema=False)
    async def events(request: Request, sid: str = sid_path):
        authorized(request)
        q = hub.listen(sid)  # before the first view: no change is missed between the two
        try:
            first = json.dumps(await snapshot(sid), separators=(",", ":"))
        except BaseException:
            hub.leave(sid, q)
            raise

        async def stream():
            try:
                yield f"event: view\ndata: {first}\n\n"
                while True:
                    try:
                        msg = await asyncio.wait_for(q.get(), KEEPALIVE_SECONDS)
                    except asyncio.TimeoutError:
                        yield ": keepalive\n\n"
                        continue
                    if isinstance(msg, Ended):  # the session is gone (or the run over): say so, then close
                        yield f"event: ended\ndata: {msg.text}\n\n"
                        return
                    yield f"event: view\ndata: {msg}\n\n"
            finally:
                hub.leave(sid, q)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _view_text(session, kind: str) -> tuple[str, float]:
    """The view as JSON text (committed JSON: no NaN) and the CPU seconds it took this thread."""
    import time

    t0 = time.thread_time()
    text = json.dumps(view(session, kind), separators=(",", ":"), allow_nan=False)
    return text, time.thread_time() - t0


async def publish_after(app, session, kind: Any = "") -> None:
    """After a committed change to ``session`` (lock held): its view to the page's listeners, if any."""
    from optsched.service.app import _in_thread

    hub: Hub = app.state.hub
    if hub.wants(session.id):
        try:
            text, cpu = await _in_thread(_view_text, session, kind)
        except Exception:  # the change is committed and answered whatever the page's view does
            log.exception("dashboard view of session %s failed", session.id)
            return
        hub.built += 1
        hub.build_cpu_seconds += cpu
        hub.publish(session.id, text)
