"""The dashboard of one run (``optsched run --dashboard PORT``) or of the Slurm
agent (``optsched slurm --dashboard PORT``): the page and assets of ``optsched
serve``, served read-only by a small in-process server (uvicorn in a thread)
from the views the scheduler publishes — after each round's decision and at
its end. Nothing on the page can change the run; the scheduler never waits
for a page (a view is handed to the server's event loop and the loop goes on).

    feed = Feed("run")
    server = serve(feed, sock, token)          # sock: listening (optsched.cli.serve.listening_socket)
    feed.publish(run_view(runtime, ...))       # from the scheduler's thread, each round
    feed.end("finished"); server.stop()
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict

from optsched.service.dashboard import RECENT_ROUNDS, Hub, compose, servers_of

ROUND_KEYS = ("round", "time", "started", "preempted", "migrated", "recomputed", "solve_seconds")


class Feed:
    """The latest view of one scheduler and its recent rounds; thread-safe. Views are
    built by the scheduler's thread; the server's loop reads them and pushes them."""

    def __init__(self, sid: str):
        self.sid = sid
        self._lock = threading.Lock()
        self._view: dict | None = None
        self._rounds: OrderedDict[int, dict] = OrderedDict()  # round -> its summary (the page's rounds table)
        self._version = 0
        self._loop = self._hub = None
        self.ended: dict | None = None

    def attach(self, loop, hub: Hub) -> None:
        """The server's event loop and hub (called on the loop when it starts)."""
        with self._lock:
            self._loop, self._hub = loop, hub

    def publish(self, view: dict) -> None:
        """A new whole view (any thread): kept as the latest, pushed to the open pages."""
        with self._lock:
            self._version += 1
            view = {**view, "session_id": self.sid, "version": self._version}
            last = view.get("last_round")
            if last is not None:
                self._rounds[last["round"]] = {k: last.get(k) for k in ROUND_KEYS}
                while len(self._rounds) > RECENT_ROUNDS:
                    self._rounds.popitem(last=False)
            self._view = view
            text = json.dumps(view, separators=(",", ":"), allow_nan=False, default=_plain)
            self._push("publish", text)

    def end(self, reason: str, **extra) -> None:
        """The scheduler stopped (``finished``, ``interrupted``, ``stopped``): the pages say so."""
        with self._lock:
            self.ended = {"reason": reason, **extra}
            self._push("end", reason, **extra)

    def _push(self, what: str, *args, **kwargs) -> None:
        if self._loop is not None and not self._loop.is_closed():
            fn = getattr(self._hub, what)
            self._loop.call_soon_threadsafe(lambda: fn(self.sid, *args, **kwargs))

    def seed(self, rounds: list[dict]) -> None:
        """Rounds decided before this process started (a restarted agent's), oldest first."""
        with self._lock:
            for r in rounds[-RECENT_ROUNDS:]:
                self._rounds[r["round"]] = {k: r.get(k) for k in ROUND_KEYS}

    def snapshot(self) -> dict | None:
        """The latest view with the recent rounds (and ``ended``, once it has), or None before the first."""
        with self._lock:
            if self._view is None:
                return None
            return {**self._view, "kind": "snapshot", "rounds": list(self._rounds.values()), "ended": self.ended}


def _plain(v):
    from optsched.model import json_default

    return json_default(v)


def create_feed_app(feed: Feed, token: str | None):
    """A FastAPI app with the dashboard's routes over ``feed`` (one page: ``/dashboard/{feed.sid}``)."""
    import asyncio
    import contextlib

    from fastapi import FastAPI
    from fastapi.responses import RedirectResponse

    from optsched.service.app import _add_error_handlers
    from optsched.service.dashboard import add_routes
    from optsched.service.session import NotFound

    @contextlib.asynccontextmanager
    async def lifespan(app):
        feed.attach(asyncio.get_running_loop(), app.state.hub)
        yield

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.hub = Hub()
    _add_error_handlers(app)

    async def exists(sid: str) -> None:
        if sid != feed.sid:
            raise NotFound(f"session {sid!r} not found (this server shows {feed.sid!r})")

    async def snapshot(sid: str) -> dict:
        await exists(sid)
        out = feed.snapshot()
        if out is None:  # the scheduler has not decided yet: an empty page that fills at the first round
            out = {"session_id": sid, "version": 0, "kind": "snapshot", "round": 0, "time": 0.0, "policy": "",
                   "round_length": None, "servers": [], "jobs": [], "finished_jobs": 0, "last_round": None,
                   "allocation": None, "rounds": []}
        return out

    @app.get("/", include_in_schema=False)
    async def root():
        return RedirectResponse(f"/dashboard/{feed.sid}", status_code=307)

    # (the feed's id is a path word, "run" or "slurm": the heading says what the page shows instead)
    what = {"run": "run", "slurm": "Slurm agent"}.get(feed.sid, feed.sid)
    add_routes(app, token, exists, snapshot, heading=lambda sid: (what, ""))
    return app


class Server:
    """uvicorn serving an app on a listening socket, in a daemon thread."""

    def __init__(self, app, sock):
        import uvicorn

        self.sock = sock
        self.port = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                                    timeout_graceful_shutdown=2, lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True,
                                       name="optsched-dashboard")

    def start(self, patience: float = 60.0) -> "Server":
        import time

        self.thread.start()
        deadline = time.monotonic() + patience  # (a bound only a broken start reaches)
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the dashboard's server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Let the pages read what is queued (the ``ended`` event), then stop."""
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def serve(feed: Feed, sock, token: str | None) -> Server:
    """The dashboard of ``feed`` on ``sock`` (listening), started."""
    return Server(create_feed_app(feed, token), sock).start()


# ---------------------------------------------------------------------- views of the executors


def run_view(rt, kind: str, info: dict) -> dict:
    """The page's view of an ``optsched run`` (``optsched.runtime.loop.Runtime``) after round
    ``info["round"]`` was decided (``kind`` "decided") or ended ("round_end"): the runtime's
    own job states, the allocator's layout, the allocation in force and the round's decision."""
    from optsched.service.session import allocation_to_state

    ds = rt.decisions
    now = rt.now() if kind != "decided" else info["time"]
    jobs, finished = [], 0
    for j, s in rt.state.items():
        if s.status in ("finished", "failed"):
            finished += 1
            continue
        if s.status == "waiting":
            continue  # not arrived (or not admitted): the page lists the active jobs, as a session's
        inc = s.current  # (None between incarnations)
        gpus = [{"server": g.server, "gpu_type": g.gpu_type, "gpu": g.gpu} for g in inc.slots] if inc else []
        running = max(now - inc.launch_at, 0.0) if inc is not None else 0.0  # credited at its exit
        jobs.append({"id": j, "status": "running" if inc is not None else "queued",
                     "spec": {"model": s.job.model, "scale_factor": s.job.scale_factor, "weight": s.job.weight,
                              "steps_total": float(s.job.steps)},
                     "steps_done": float(s.steps_done),
                     "attained_service": s.attained + len(gpus) * running,  # slot-seconds, the running part too
                     "arrival_time": s.job.arrival_time, "first_start": s.first_start,
                     "preemptions": s.preemptions, "gpus": gpus})
    last = {"round": info["round"], "time": info["time"],
            "placement": {j: [{"server": g.server, "gpu_type": g.gpu_type, "gpu": g.gpu} for g in slots]
                          for j, slots in info["placement"].items()},
            "started": list(info["started"]), "preempted": list(info["preempted"]),
            "migrated": list(info["migrated"]), "recomputed": bool(info["recomputed"]),
            "solve_seconds": info["solve_seconds"], "note": info.get("note", "")}
    return compose(sid="run", version=0, kind=kind, round_=info["round"] + 1, now=now, policy=rt.cfg.policy,
                   round_length=rt.cfg.round_length, servers=servers_of(rt.allocator.layout), jobs=jobs,
                   total_gpus=sum(rt.cluster.gpus.values()), finished=finished, last_round=last,
                   allocation=None if ds.allocation is None else allocation_to_state(ds.allocation))


def session_feed_view(session, kind: str = "next_round") -> dict:
    """The view of a ``Session`` driven in-process (the Slurm agent's), as the service's page shows it."""
    from optsched.service.dashboard import view
    from optsched.service.session import jsonable

    return jsonable(view(session, kind))


__all__ = ["Feed", "Server", "create_feed_app", "run_view", "serve", "session_feed_view"]
