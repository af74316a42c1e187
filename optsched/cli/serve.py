"""`optsched serve`: the HTTP service (FastAPI + uvicorn) over durable sessions."""

from __future__ import annotations

import ipaddress
import json
import logging
import sys
from pathlib import Path
from typing import Optional

import typer

from optsched.cli.common import app, err_console, user_errors

DEFAULT_PORT = 8470


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the record's ``fields``."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"), "level": record.levelname,
               "logger": record.name, "message": record.getMessage()}
        out.update(getattr(record, "fields", {}) or {})
        if getattr(record, "request_id", "-") != "-":
            out.setdefault("request_id", record.request_id)
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class RequestIdFilter(logging.Filter):
    """Stamps each record with the id of the request being served (``-`` outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from optsched.service.app import REQUEST_ID

        record.request_id = REQUEST_ID.get() or "-"
        return True


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@app.command()
@user_errors
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Bind address (a non-loopback address needs --token)."),
    port: int = typer.Option(DEFAULT_PORT, "--port", help="TCP port."),
    db: str = typer.Option("optsched-sessions.db", "--db", envvar="OPTSCHED_DB",
                           help="SQLite database of the sessions (created if missing; env OPTSCHED_DB)."),
    token: Optional[str] = typer.Option(None, "--token", envvar="OPTSCHED_TOKEN",
                                        help="Bearer token required on /v1 (env OPTSCHED_TOKEN)."),
    max_body_bytes: int = typer.Option(32 * 2**20, "--max-body-bytes", help="Largest request body, bytes."),
    max_jobs: int = typer.Option(10_000, "--max-jobs", help="Jobs per snapshot / active jobs per session."),
    max_gpus: int = typer.Option(100_000, "--max-gpus", help="GPUs per cluster."),
    max_time_limit: float = typer.Option(600.0, "--max-time-limit", help="Cap on any solver time limit, seconds."),
    sessions_cached: int = typer.Option(256, "--sessions-cached", help="Sessions kept in memory (others load on use)."),
    sync: str = typer.Option("full", "--sync", help="SQLite synchronous: full (survives power loss) | normal (survives a killed process)."),
    log_format: str = typer.Option("text", "--log-format", help="text | json (one object per line)."),
    access_log: bool = typer.Option(True, "--access-log/--no-access-log", help="Log every request (INFO)."),
    threads: int = typer.Option(16, "--threads", help="Worker threads for solves and database commits."),
):
    """Serve stateless solves and durable scheduling sessions over HTTP."""
    from optsched.cli.limits import check_serve
    from optsched.service.models import Limits

    check_serve(port, max_body_bytes, max_jobs, max_gpus, max_time_limit, sessions_cached, threads)

    if not is_loopback(host) and not token:
        err_console.print(f"[bold red]error:[/] --token: required when binding to a non-loopback address ({host}); "
                          "or set OPTSCHED_TOKEN", highlight=False)
        raise typer.Exit(2)
    if log_format not in ("text", "json"):
        err_console.print(f"[bold red]error:[/] --log-format: choose text or json (got {log_format!r})")
        raise typer.Exit(2)
    if sync.lower() not in ("full", "normal"):
        err_console.print(f"[bold red]error:[/] --sync: choose full or normal (got {sync!r})")
        raise typer.Exit(2)
    try:
        import uvicorn

        from optsched.service import app as service_app
        from optsched.service.app import create_app
    except ModuleNotFoundError as e:
        from optsched.extras import message

        if e.name and e.name.split(".")[0] not in ("fastapi", "starlette", "uvicorn"):
            raise  # another extra's module: the root command names its extra
        from rich.markup import escape

        err_console.print(f"[bold red]error:[/] {escape(message('optsched serve', 'service'))}", highlight=False)
        raise typer.Exit(2)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(RequestIdFilter())
    svc = logging.getLogger("optsched.service")
    svc.handlers[:] = [handler]
    svc.propagate = False
    svc.setLevel(min(logging.getLogger().level or logging.WARNING, logging.INFO))
    logging.getLogger("optsched.service.access").setLevel(logging.INFO if access_log else logging.WARNING)
    service_app.WORKER_THREADS = threads
    limits = Limits(max_body_bytes=max_body_bytes, max_jobs=max_jobs, max_gpus=max_gpus,
                    max_time_limit=max_time_limit, max_sessions_cached=sessions_cached)
    if db != ":memory:":
        db = str(Path(db).expanduser())  # the path checked is the path opened (--db '~/s.db', OPTSCHED_DB=~/s.db)
    folder = Path(db).parent
    if db != ":memory:" and not folder.is_dir():  # a mistyped path would otherwise grow folders and a new database
        err_console.print(f"[bold red]error:[/] --db {db}: folder {folder} does not exist", highlight=False)
        raise typer.Exit(2)
    try:
        application = create_app(db, token=token, limits=limits, synchronous=sync.upper())
    except Exception as e:  # an unreadable database path or a newer schema: one line, exit 2
        err_console.print(f"[bold red]error:[/] --db {db}: {e}", highlight=False)
        raise typer.Exit(2)
    _warm_up()
    sock = listening_socket(host, port)
    port = sock.getsockname()[1]  # --port 0: the port the system chose
    where = f"http://[{host.strip('[]')}]:{port}" if ":" in host else f"http://{host}:{port}"
    svc.info("optsched serve %s: listening on %s (database %s, token %s)", _version(), where, db,
             "required" if token else "not required")
    try:
        _serve_on(sock, uvicorn.Config(application, host=host, port=port, log_level="warning", access_log=False,
                                       timeout_graceful_shutdown=5))
    finally:
        sock.close()


def listening_socket(host: str, port: int):
    """A socket bound to (host, port) and listening, or one line naming --port or --host
    (exit 2): uvicorn's own bind failure would come after the "listening" line and
    exit 3, the code of a --strict fallback."""
    import errno
    import socket

    from optsched.model import OptschedError

    addr = host.strip("[]")
    sock = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a restart reuses a TIME_WAIT port
    try:
        sock.bind((addr, port))
        sock.listen(2048)  # uvicorn's default backlog
    except OSError as e:
        sock.close()
        if isinstance(e, socket.gaierror):
            raise OptschedError(f"--host: cannot resolve {host!r} ({e.strerror})") from None
        if e.errno == errno.EADDRINUSE:
            raise OptschedError(f"--port: {port} is already in use on {host} (stop the process using it, "
                                "or choose another --port)") from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise OptschedError(f"--host: {host} is not an address of this machine ({e.strerror})") from None
        if e.errno == errno.EACCES:
            raise OptschedError(f"--port: not allowed to listen on port {port} of {host} ({e.strerror}; "
                                "ports below 1024 need privileges)") from None
        raise OptschedError(f"--port: cannot listen on {host}:{port} ({e.strerror or e})") from None
    return sock


def _serve_on(sock, config) -> None:
    """Serve until stopped, on the socket already listening."""
    import uvicorn

    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # Ctrl-C is a normal stop (uvicorn re-raises the signal after shutting down)
        pass
    if not server.started:  # the application's startup failed (uvicorn logged why)
        err_console.print("[bold red]error:[/] the service did not start (see the log above)", highlight=False)
        raise typer.Exit(1)


def _warm_up() -> None:
    """Import what the first requests need, so they are not seconds slower."""
    import optsched.allocator  # noqa: F401
    import optsched.policy  # noqa: F401
    from optsched.policy import _module
    from optsched.service.session import per_round_policies

    per_round_policies()
    try:
        _module("max_min_fairness")
    except Exception:  # a build without the formulation still serves the rest
        pass


def _version() -> str:
    from optsched import __version__

    return __version__
