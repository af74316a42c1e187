"""``--dashboard PORT`` of ``optsched run`` and ``optsched slurm``: the live page of
``optsched serve`` for the run / the agent (optsched/service/dashboard/live.py)."""

from __future__ import annotations

import logging
from typing import Optional

import typer

from optsched.model import OptschedError

log = logging.getLogger("optsched.dashboard")

OPTIONS = {
    "port": typer.Option(None, "--dashboard", help="Serve the live dashboard on this port (0: any free one; the "
                         "address is printed): the page of `optsched serve`, read-only."),
    "host": typer.Option("127.0.0.1", "--dashboard-host", help="The dashboard's bind address (a non-loopback "
                         "address needs a token)."),
    "token": typer.Option(None, "--dashboard-token", envvar="OPTSCHED_TOKEN", help="Token the dashboard asks for, as "
                          "the API's (env OPTSCHED_TOKEN)."),
}


def check(port: Optional[int], host: str, token: Optional[str]) -> None:
    """The options, before any work: a port in range, a token off the loopback."""
    from optsched.cli.serve import is_loopback

    if port is None:
        return
    if not 0 <= port <= 65535:
        raise OptschedError(f"--dashboard: port {port} is not in 0..65535")
    if not is_loopback(host) and not token:
        raise OptschedError(f"--dashboard-token: required when the dashboard binds to a non-loopback address "
                            f"({host}); or set OPTSCHED_TOKEN")


def start(sid: str, port: int, host: str, token: Optional[str], say) -> tuple:
    """(feed, server): the socket bound first (a port in use is one line, exit 2), then the server.
    ``say(line)`` prints where the page is."""
    from optsched.cli.serve import listening_socket

    try:
        from optsched.service.dashboard.live import Feed, serve
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in ("fastapi", "starlette", "uvicorn"):
            from optsched.extras import message

            raise OptschedError(f"--dashboard: {message('the dashboard', 'service')}") from None
        raise
    try:
        sock = listening_socket(host, port)
    except OptschedError as e:  # (serve's words name serve's flags)
        msg = str(e)
        for flag, ours in (("--port:", "--dashboard:"), ("--host:", "--dashboard-host:")):
            msg = msg.replace(flag, ours, 1) if msg.startswith(flag) else msg
        raise OptschedError(msg.replace("choose another --port", "choose another port")) from None
    port = sock.getsockname()[1]
    where = f"http://[{host.strip('[]')}]:{port}" if ":" in host else f"http://{host}:{port}"
    feed = Feed(sid)
    server = serve(feed, sock, token)
    say(f"dashboard {where}/dashboard/{sid}" + ("?token=<token>" if token else ""))
    return feed, server


def guarded(fn):
    """A view builder that never stops the scheduler: a failure is logged, the page keeps its last view."""

    def call(*args):
        try:
            fn(*args)
        except Exception:  # noqa: BLE001
            log.exception("dashboard view failed")

    return call


class PlacementLog:
    """Where every job ran, as changes per round, for the replay's cluster map: ``placements.csv``
    (round, job_id, action, server, gpu_type, gpu: a ``place`` row per GPU of a job that started
    or moved that round, one ``release`` row for a job that stopped holding GPUs: preempted,
    finished) and ``servers.csv`` (server, gpu_type, gpus: the allocator's layout). Rows only where
    the placement changed: what the allocator's diff already lists, plus a set difference of job ids."""

    def __init__(self):
        self.changes: list[tuple] = []  # (round, released job ids, ((job, its GpuSlots), ...)); rows at write()
        self._held: set = set()

    def add(self, k: int, assignments: dict, started, migrated) -> None:
        """Round ``k``'s placement (job -> GpuSlots) and the jobs it started or moved. (A copy of the
        job ids: the allocator may later drop jobs from the dict it shares.)"""
        held = set(assignments)
        gone = self._held - held
        moved = [(j, assignments[j]) for j in dict.fromkeys((*started, *migrated)) if j in held]
        if gone or moved:
            self.changes.append((k, sorted(gone), moved))
        self._held = held

    @property
    def rows(self):
        for k, gone, moved in self.changes:
            for j in gone:
                yield k, j, "release", "", "", ""
            for j, slots in moved:
                for g in slots:
                    yield k, j, "place", g.server, g.gpu_type, g.gpu

    def write(self, out, cluster=None, gpus_per_server: int | None = None, layout=None) -> list[str]:
        """Into folder ``out``; the servers from ``layout`` (the allocator's) or as the allocator lays out ``cluster``."""
        import csv
        from pathlib import Path

        from optsched.placement import DEFAULT_GPUS_PER_SERVER, Layout

        layout = layout or Layout.from_cluster(cluster, gpus_per_server or DEFAULT_GPUS_PER_SERVER)
        out = Path(out)
        with open(out / "placements.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(("round", "job_id", "action", "server", "gpu_type", "gpu"))
            w.writerows(self.rows)
        with open(out / "servers.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(("server", "gpu_type", "gpus"))
            w.writerows((sid, t, int(cap)) for t, tl in layout.types.items()
                        for sid, cap in zip(tl.server_ids, tl.server_capacity))
        return ["placements.csv", "servers.csv"]
