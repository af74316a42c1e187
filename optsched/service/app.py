"""The HTTP layer: a thin FastAPI shell over ``Session`` and the policy entry point.

    GET  /healthz                                  liveness (no token needed)
    GET  /readyz                                   readiness: the database answers, not shutting down (503 if not)
    GET  /metrics                                  Prometheus metrics (no token needed)
    GET  /docs                                     the API as one self-contained page (no CDN)
    GET  /v1/policies                              policy names
    POST /v1/solve                                 snapshot → allocation, explanation (, placement)
    POST /v1/sessions                              create a scheduling session
    GET  /v1/sessions                              session ids
    GET  /v1/sessions/{sid}                        the session's state
    DELETE /v1/sessions/{sid}
    POST /v1/sessions/{sid}/jobs                   submit jobs
    GET  /v1/sessions/{sid}/jobs                   active (or ?finished=true) jobs
    GET  /v1/sessions/{sid}/jobs/{job_id}
    PATCH /v1/sessions/{sid}/jobs/{job_id}         update a job
    POST /v1/sessions/{sid}/jobs/{job_id}/finish
    POST /v1/sessions/{sid}/progress               progress reports
    POST /v1/sessions/{sid}/rounds                 the next round
    GET  /v1/sessions/{sid}/rounds/last
    GET  /v1/sessions/{sid}/events                 the session's committed changes
    GET  /dashboard/{sid}[/events]                 the live page (server-sent events; optsched/service/dashboard)

Requests to one session are serialized (an asyncio lock per session) and run
in worker threads (solves with the session's time limit), so the event loop
keeps serving other sessions. Errors are JSON ``{"detail", "field"}``: 422
for invalid input (naming the field), 401 without the right bearer token, 404
for an unknown session or job, 409 for a conflict, 413 for an oversize body;
an unexpected error is logged with its traceback and answered 500 without one.
Every answer carries an ``X-Request-ID`` (the caller's, when it sent a valid
one, else a new one); the request's log records carry it too (``REQUEST_ID``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hmac
import json
import logging
import re
import time
import uuid
import weakref
from collections import OrderedDict
from typing import Any

import anyio
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from optsched import __version__
from optsched.model import DuplicateKeyError, Instance, OptschedError, check_unique_keys
from optsched.pop import check_partitions
from optsched.service.models import (SESSION_ID_PATTERN, ErrorBody, FinishRequest, Health, JobOut, JobsOut,
                                     JobUpdate, Limits, PoliciesOut, ReportProgress, RoundOut, RoundRequest,
                                     SessionConfig, SessionCreated, SessionOut, SolveRequest, SolveResponse,
                                     SubmitJobs)
from optsched.service.dashboard import Hub, add_dashboard_routes, publish_after
from optsched.service.metrics import Metrics
from optsched.service.session import Conflict, NotFound, Session, jsonable, per_round_policies
from optsched.service.store import Store

WORKER_THREADS = 16  # `optsched serve --threads`

log = logging.getLogger("optsched.service")
access_log = logging.getLogger("optsched.service.access")

ERRORS = {
    401: {"model": ErrorBody, "description": "Missing or wrong bearer token."},
    404: {"model": ErrorBody, "description": "Unknown session or job."},
    409: {"model": ErrorBody, "description": "Conflict: duplicate id, stale round."},
    413: {"model": ErrorBody, "description": "Request body larger than the server's limit."},
    422: {"model": ErrorBody, "description": "Invalid input; `field` names it."},
}
# The id of the request being served, for log records (serve's log filter reads it); worker
# threads see it too (anyio copies the context into them).
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("optsched_request_id", default=None)
# A caller's X-Request-ID is kept when it is this plain (no spaces or control characters to forge log lines).
_REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._:@+/=-]{1,128}$")
SID = Path(pattern=SESSION_ID_PATTERN, description="Session id.")
JOB_ID = Path(pattern=r"^[A-Za-z0-9_.:@+\-]{1,128}$", description="Job id.")


class Registry:
    """Sessions in memory (an LRU of at most ``limit``), loaded lazily from the
    store; one asyncio lock per session id serializes its requests."""

    def __init__(self, store: Store, limits: Limits):
        self.store, self.limits = store, limits
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self.locks: dict[str, asyncio.Lock] = {}

    def lock(self, sid: str) -> asyncio.Lock:
        lk = self.locks.get(sid)
        if lk is None:
            lk = self.locks[sid] = asyncio.Lock()
        return lk

    async def get(self, sid: str) -> Session:
        """The session (call with its lock held)."""
        s = self.sessions.get(sid)
        if s is None:
            s = await _in_thread(Session.load, sid, self.store, self.limits)
            self.sessions[sid] = s
            self._evict()
        self.sessions.move_to_end(sid)
        return s

    def put(self, s: Session) -> None:
        self.sessions[s.id] = s
        self._evict()

    def drop(self, sid: str) -> None:
        self.sessions.pop(sid, None)

    def _evict(self) -> None:
        # Safe at any time: a session's memory is exactly its committed row.
        while len(self.sessions) > self.limits.max_sessions_cached:
            for sid in self.sessions:
                if not self.lock(sid).locked():
                    del self.sessions[sid]
                    self.locks.pop(sid, None)
                    break
            else:
                return


def create_app(db: str | Store = ":memory:", token: str | None = None, limits: Limits = Limits(),
               synchronous: str = "FULL") -> FastAPI:
    store = db if isinstance(db, Store) else Store(db, synchronous=synchronous)
    registry = Registry(store, limits)
    bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <token>` (required when the server has a token).")

    def authorize(cred: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if token is None:
            return
        if cred is None or not hmac.compare_digest(cred.credentials.encode(), token.encode()):
            raise _Unauthorized()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        app.state.ready = False  # shutting down: /readyz says so while requests drain

    app = FastAPI(
        title="optsched", version=__version__,
        description="Optimization-based GPU cluster scheduling as a service: stateless solves and durable "
        "scheduling sessions (docs/guide/embedding.md).",
        docs_url=None, redoc_url=None, lifespan=lifespan,  # /docs is our own page: Swagger's loads from a CDN
    )
    app.state.store, app.state.registry, app.state.limits = store, registry, limits
    app.state.metrics, app.state.ready = Metrics(), True
    app.state.hub, app.state.token = Hub(), token  # the dashboard's live listeners (optsched/service/dashboard)
    v1: list[Any] = [Depends(authorize)]
    _add_error_handlers(app)
    _add_operator_routes(app, registry)
    _add_stateless_routes(app, registry, limits, v1)
    _add_session_routes(app, registry, limits, v1)
    app.add_middleware(_BodyLimit, max_bytes=limits.max_body_bytes)
    app.add_middleware(_AccessLog)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as JSON ``{"detail", "field"}`` with its status (module docstring)."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        return _error(422, *_describe_validation(exc))

    @app.exception_handler(OptschedError)
    async def _optsched_error(request: Request, exc: OptschedError):
        from optsched.suggest import with_suggestion

        status = 404 if isinstance(exc, NotFound) else 409 if isinstance(exc, Conflict) else 422
        msg = with_suggestion(str(exc))
        return _error(status, msg, _field_of(msg))

    @app.exception_handler(_Unauthorized)
    async def _unauthorized(request: Request, exc: _Unauthorized):
        return _error(401, "missing or wrong bearer token (Authorization: Bearer <token>)", "Authorization",
                      headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):  # a body that is not JSON
            return _error(422, "body: cannot be parsed as JSON (malformed or nested too deeply; send JSON with "
                          "Content-Type: application/json)", "body")
        return _error(exc.status_code, str(exc.detail), None, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.error("unexpected error in %s %s", request.method, request.url.path, exc_info=exc)
        return _error(500, "internal error (logged on the server)", None)


def _add_operator_routes(app: FastAPI, registry: Registry) -> None:
    """/readyz, /metrics, /docs: for operators and their tools (no token: they reveal no session data
    beyond ids in metric labels; bind to a private address or put them behind the proxy's rules)."""
    from starlette.responses import HTMLResponse, PlainTextResponse

    store, metrics = registry.store, app.state.metrics

    @app.get("/readyz", tags=["service"], responses={503: {"model": ErrorBody, "description": "Not ready."}})
    async def readyz() -> dict[str, str]:
        """Ready to serve: the database answers a query and the server is not shutting down."""
        if not app.state.ready:
            return _error(503, "shutting down", None)
        try:
            await _in_thread(store.session_ids, 1)
        except Exception as e:  # a database that cannot be read: not ready, say why
            return _error(503, f"database: {type(e).__name__}: {e}", "database")
        return _json({"status": "ready"})

    @app.get("/metrics", tags=["service"], response_class=PlainTextResponse)
    async def prometheus_metrics():
        """Prometheus text exposition: requests and their latency, rounds, solve seconds, jobs and GPUs in use."""
        st = store.stats
        extra = {
            "optsched_sessions_cached": ("gauge", "Sessions held in memory.", len(registry.sessions)),
            "optsched_commit_groups_total": ("counter", "Database transactions (group commits).", st["groups"]),
            "optsched_commits_total": ("counter", "State changes committed.", st["changes"]),
            "optsched_commit_seconds_total": ("counter", "Seconds spent committing (fsync included).",
                                              float(st["commit_seconds"])),
            **app.state.hub.metrics(),  # the dashboard's pages: listeners, views built and their CPU
        }
        return PlainTextResponse(metrics.render(extra), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/docs", include_in_schema=False)
    async def docs():
        from optsched.service.apidocs import render

        return HTMLResponse(render(app.openapi()))


def _add_stateless_routes(app: FastAPI, registry: Registry, limits: Limits, v1: list[Any]) -> None:
    """/healthz, /v1/policies, /v1/solve."""
    store = registry.store

    @app.get("/healthz", response_model=Health, tags=["service"])
    async def healthz():
        st = store.stats
        return _json({"status": "ok", "version": __version__, "sessions_cached": len(registry.sessions),
                      "database": store.path, "commit_groups": st["groups"], "commits": st["changes"],
                      "commit_seconds": st["commit_seconds"]})

    @app.get("/v1/policies", response_model=PoliciesOut, dependencies=v1, responses=ERRORS, tags=["service"])
    async def policies():
        from optsched.policy import policy_names

        return _json({"policies": policy_names(), "per_round": sorted(per_round_policies())})

    @app.post("/v1/solve", response_model=SolveResponse, dependencies=v1, responses=ERRORS, tags=["solve"])
    async def solve(req: SolveRequest):
        """Stateless: solve a policy on a snapshot; with ``placement`` also the
        next round's placement and the allocator state to merge into the next snapshot."""
        snap = req.snapshot
        _check_policy(req.policy)
        check_partitions(req.policy, req.partitions, req.packing)
        _check_finite(snap.model_dump(), "snapshot")
        if len(snap.jobs) > limits.max_jobs:
            raise OptschedError(f"snapshot.jobs: {len(snap.jobs)} jobs exceed the server's limit of {limits.max_jobs}")
        total = sum(snap.cluster.gpus.values())
        if total > limits.max_gpus:
            raise OptschedError(f"snapshot.cluster.gpus: {total} GPUs exceed the server's limit of {limits.max_gpus}")
        out = await _in_thread(_solve, req, limits)
        app.state.metrics.observe_solve("solve", float(out.get("solve_seconds") or 0.0))
        return _json(out)


def _add_session_routes(app: FastAPI, registry: Registry, limits: Limits, v1: list[Any]) -> None:
    """/v1/sessions/...: each request holds its session's lock and runs in a worker thread."""
    store = registry.store

    @app.post("/v1/sessions", status_code=201, response_model=SessionCreated, dependencies=v1, responses=ERRORS,
              tags=["sessions"])
    async def create_session(cfg: SessionConfig):
        _check_finite(cfg.cluster.model_dump(), "cluster")
        s = await _in_thread(Session.create, cfg, store, limits)
        registry.put(s)
        log.info("session %s created (policy %s, %d GPUs)", s.id, cfg.policy, sum(cfg.cluster.gpus.values()))
        return _json({"session_id": s.id, "time": s.time, "round": s.round}, 201)

    @app.get("/v1/sessions", dependencies=v1, responses=ERRORS, tags=["sessions"])
    async def list_sessions(limit: int = Query(1000, ge=1, le=100_000)) -> dict[str, list[str]]:
        return _json({"sessions": await _in_thread(store.session_ids, limit)})

    async def run(sid: str, fn, *args):
        lock = registry.lock(sid)
        try:
            async with lock:
                s = await registry.get(sid)
                version = s.version
                out = await _in_thread(fn, s, *args)
                if s.version != version:  # a committed change: to the open dashboards
                    await publish_after(app, s, getattr(fn, "__name__", ""))
                return out
        except NotFound:
            if sid not in registry.sessions and not lock.locked():
                registry.locks.pop(sid, None)  # unknown ids leave nothing behind
            raise

    add_dashboard_routes(app, registry, app.state.token, run)

    @app.get("/v1/sessions/{sid}", response_model=SessionOut, dependencies=v1, responses=ERRORS, tags=["sessions"])
    async def get_session(sid: str = SID):
        return _json(await run(sid, Session.state))

    @app.delete("/v1/sessions/{sid}", status_code=204, dependencies=v1, responses=ERRORS, tags=["sessions"])
    async def delete_session(sid: str = SID):
        async with registry.lock(sid):
            if not await _in_thread(store.delete, sid):
                raise NotFound(f"session {sid!r} not found")
            registry.drop(sid)
            registry.locks.pop(sid, None)
            app.state.hub.end(sid, "deleted")  # its open dashboards say so and close
        app.state.metrics.forget(sid)
        log.info("session %s deleted", sid)
        return _no_content()

    @app.post("/v1/sessions/{sid}/jobs", response_model=JobsOut, dependencies=v1, responses=ERRORS, tags=["sessions"])
    async def submit(body: SubmitJobs, sid: str = SID):
        if len(body.jobs) > limits.max_jobs:
            raise OptschedError(f"jobs: {len(body.jobs)} jobs exceed the server's limit of {limits.max_jobs}")
        return _json({"jobs": await run(sid, Session.submit, body)})

    @app.get("/v1/sessions/{sid}/jobs", response_model=JobsOut, dependencies=v1, responses=ERRORS, tags=["sessions"])
    async def list_jobs(sid: str = SID, finished: bool = Query(False, description="Finished jobs instead of active ones."),
                        limit: int = Query(1000, ge=1, le=100_000), offset: int = Query(0, ge=0, le=2**62)):
        if finished:
            return _json({"jobs": await run(sid, Session.finished_jobs, limit, offset)})
        return _json({"jobs": (await run(sid, Session.state))["jobs"][offset:offset + limit]})

    @app.get("/v1/sessions/{sid}/jobs/{job_id}", response_model=JobOut, dependencies=v1, responses=ERRORS,
             tags=["sessions"])
    async def get_job(sid: str = SID, job_id: str = JOB_ID):
        return _json(await run(sid, Session.job, job_id))

    @app.patch("/v1/sessions/{sid}/jobs/{job_id}", response_model=JobOut, dependencies=v1, responses=ERRORS,
               tags=["sessions"])
    async def update_job(body: JobUpdate, sid: str = SID, job_id: str = JOB_ID):
        return _json(await run(sid, Session.update, job_id, body))

    @app.post("/v1/sessions/{sid}/jobs/{job_id}/finish", response_model=JobOut, dependencies=v1, responses=ERRORS,
              tags=["sessions"])
    async def finish_job(body: FinishRequest | None = None, sid: str = SID, job_id: str = JOB_ID):
        return _json(await run(sid, Session.finish, job_id, body.seconds if body else None))

    @app.post("/v1/sessions/{sid}/progress", response_model=JobsOut, dependencies=v1, responses=ERRORS,
              tags=["sessions"])
    async def progress(body: ReportProgress, sid: str = SID):
        return _json({"jobs": await run(sid, Session.report, body.reports)})

    @app.post("/v1/sessions/{sid}/rounds", response_model=RoundOut, dependencies=v1, responses=ERRORS,
              tags=["sessions"])
    async def next_round(body: RoundRequest | None = None, sid: str = SID):
        body = body or RoundRequest()
        out = await run(sid, Session.next_round, body.now, body.expected_round)
        app.state.metrics.observe_round(sid, out)
        return _json(out)

    @app.get("/v1/sessions/{sid}/rounds/last", response_model=RoundOut | None, dependencies=v1, responses=ERRORS,
             tags=["sessions"])
    async def last_round(sid: str = SID):
        return _json(await run(sid, Session.last_round))

    @app.get("/v1/sessions/{sid}/events", dependencies=v1, responses=ERRORS, tags=["sessions"])
    async def events(sid: str = SID, after: int = Query(-1, ge=-1, le=2**62), limit: int = Query(1000, ge=1, le=10_000)
                     ) -> dict[str, list[dict]]:
        async with registry.lock(sid):
            await registry.get(sid)  # 404 for an unknown session
            return _json({"events": await _in_thread(store.events, sid, after, limit)})


# ---------------------------------------------------------------------- work in threads

_LIMITERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # per event loop


async def _in_thread(fn, *args):
    """Run blocking work (solves, SQLite) in one of WORKER_THREADS threads
    (`optsched serve --threads`). A thread waits for its change's group commit,
    so enough threads let commits group; the work itself holds the GIL
    (bench/service_load.py, 100 clients: 4 threads 158 req/s, 16 threads 198)."""
    loop = asyncio.get_running_loop()
    limiter = _LIMITERS.get(loop)
    if limiter is None:
        limiter = _LIMITERS[loop] = anyio.CapacityLimiter(WORKER_THREADS)
    return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)



def _solve(req: SolveRequest, limits: Limits) -> dict:
    from optsched.core import RoundRules, decide_once

    t0 = time.perf_counter()
    # One decision by the scheduling core (POP in-process: no process pool forked from the server's threads).
    rules = RoundRules(req.policy, req.solver, min(req.time_limit, limits.max_time_limit), aggregate=False,
                       packing=req.packing, partitions=req.partitions)
    allocator = None
    if req.placement:
        from optsched.allocator import Allocator

        allocator = Allocator.from_snapshot(req.snapshot, placement=req.placement_policy)
    try:
        alloc, placement = decide_once(Instance.from_snapshot(req.snapshot), rules, allocator, req.snapshot)
    except OptschedError as e:  # a policy names jobs[i] / cluster...: in this body they are under snapshot
        if str(e).startswith(("jobs", "cluster", "colocation")):
            e.args = (f"snapshot.{e}", *e.args[1:])
        raise
    out = alloc.to_dict()
    if placement is not None:
        out.update(placement.to_dict())
        out["allocator_state"] = allocator.state()
    out["total_seconds"] = time.perf_counter() - t0
    return out


def _check_policy(name: str) -> None:
    from optsched.policy import POLICIES, policy_names

    if name not in POLICIES and name not in policy_names():  # built-ins fast; plugins (entry points) too
        raise OptschedError(f"policy: unknown policy {name!r} (choose from {', '.join(policy_names())})")


def _check_finite(x, path: str) -> None:
    """JSON has no NaN/Infinity, but Python's parser accepts the tokens: reject them."""
    if isinstance(x, float):
        if x != x or x in (float("inf"), float("-inf")):
            raise OptschedError(f"{path}: not a finite number")
    elif isinstance(x, dict):
        for k, v in x.items():
            _check_finite(v, f"{path}.{k}")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            _check_finite(v, f"{path}[{i}]")


# ---------------------------------------------------------------------- responses and errors


class _Unauthorized(Exception):
    pass


def _json(content, status: int = 200) -> JSONResponse:
    return JSONResponse(jsonable(content), status)


def _no_content():
    from starlette.responses import Response

    return Response(status_code=204)


def _error(status: int, detail: str, field: str | None, headers=None) -> JSONResponse:
    detail = " ".join(str(detail).split())[:2000]  # one line, bounded
    return JSONResponse({"detail": detail, "field": field}, status, headers=headers)


def _loc(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _describe_validation(exc: RequestValidationError) -> tuple[str, str | None]:
    errs = exc.errors()
    if not errs:
        return "invalid request", None
    e = errs[0]
    loc = list(e.get("loc", ()))
    if loc and loc[0] in ("body", "query", "path", "header"):
        where = loc[0]
        loc = loc[1:]
        if where == "body" and e.get("type") == "json_invalid":
            return "body: malformed JSON", "body"
    field = _loc(loc) or "body"
    msg = str(e.get("msg", "invalid"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if e.get("type") == "missing" and not loc:
        msg = "a JSON body is required"
    inner = _FIELD.match(msg)  # a model validator names the field inside its message: "jobs[0].x: ..."
    if inner and loc:
        field = f"{field}.{inner.group(1)}" if not inner.group(1).startswith("[") else field + inner.group(1)
        msg = msg[inner.end():].lstrip()
    elif inner and not loc:
        field, msg = inner.group(1), msg[inner.end():].lstrip()
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    return f"{field}: {msg}{more}", field


# A field path: name, .name, [index] or a quoted key (['job:1']), then a colon.
_FIELD = re.compile(r"""^([A-Za-z_]\w*(?:\.\w+|\[(?:\d+|'[^']*'|"[^"]*")\])*):""")


def _field_of(msg: str) -> str | None:
    m = _FIELD.match(msg)
    return m.group(1) if m else None


# ---------------------------------------------------------------------- middleware (pure ASGI)


class _BodyLimit:
    """Reject bodies over ``max_bytes`` with 413 before the app parses them
    (Content-Length, or counted while reading a chunked body), and JSON that
    repeats a key in one object with 422; a body is read as JSON whatever its
    Content-Type."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > self.max
            except ValueError:
                return await _send_error(send, 400, "Content-Length: not a number", "Content-Length")
            if too_big:
                return await _send_error(send, 413, f"body: larger than the server's limit of {self.max} bytes", "body")
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body = msg.get("body", b"")
            size += len(body)
            if size > self.max:
                return await _send_error(send, 413, f"body: larger than the server's limit of {self.max} bytes", "body")
            chunks.append(body)
            if not msg.get("more_body"):
                break
        whole, sent = b"".join(chunks), False
        if whole:  # every body is JSON, whatever Content-Type says (curl -d sends form-urlencoded)
            try:  # the app's JSON parse keeps a repeated key's last value (not JSON: its parse names it)
                check_unique_keys(whole)
            except DuplicateKeyError as e:
                return await _send_error(send, 422, f"body: {e}", "body")
            headers = [(k, v) for k, v in scope.get("headers") or [] if k != b"content-type"]
            # (in place: the router records the matched route in this same scope, which the access log reads)
            scope["headers"] = headers + [(b"content-type", b"application/json")]

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": whole, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


async def _send_error(send, status: int, detail: str, field: str | None) -> None:
    body = json.dumps({"detail": detail, "field": field}, separators=(",", ":"), ensure_ascii=False).encode()  # as JSONResponse
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def request_id_of(scope) -> str:
    """The caller's X-Request-ID when it is plain (``_REQUEST_ID_OK``), else a new random one."""
    given = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
    return given if _REQUEST_ID_OK.match(given) else uuid.uuid4().hex


class _AccessLog:
    """Per request: its id (X-Request-ID in and out, ``REQUEST_ID`` while it is served), one
    structured log record (logger ``optsched.service.access``: method, path, status,
    milliseconds, client, request id) and its count and latency in the app's metrics."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = {"code": None, "failed": False}
        rid = request_id_of(scope)
        token = REQUEST_ID.set(rid)

        async def send_wrapper(msg):
            if msg["type"] == "http.response.start":
                status["code"] = msg["status"]
                msg = {**msg, "headers": [*msg.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(msg)

        try:
            await self.app(scope, receive, send_wrapper)
        except BaseException:
            status["failed"] = True
            raise
        finally:
            # No response started: 500 if the app raised, else the client left first (499, nginx's code).
            code = status["code"] or (500 if status["failed"] else 499)
            seconds = time.perf_counter() - t0
            client = scope.get("client")
            where = f"{client[0]}:{client[1]}" if client else "-"
            fields = {"method": scope["method"], "path": scope["path"], "status": code, "ms": round(seconds * 1000, 3),
                      "client": where if client else None, "request_id": rid}
            access_log.info("%s %s %d %.1fms %s", scope["method"], scope["path"], code, seconds * 1000, where,
                            extra={"fields": fields})
            metrics = getattr(getattr(scope.get("app"), "state", None), "metrics", None)
            if metrics is not None:
                route = getattr(scope.get("route"), "path", None) or "unmatched"
                metrics.observe_request(scope["method"], route, code, seconds)
            REQUEST_ID.reset(token)
