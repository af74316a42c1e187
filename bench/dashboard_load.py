"""The dashboard's cost under load (issue 32): bench/service_load.py's clients
(100 × S seconds, each on its own session) against a fresh `optsched serve`,
without a dashboard and with D dashboards open (server-sent-event streams on the
first D sessions, read as a browser would), phases alternated in one run.
Prints p50/p99 per phase, the server's CPU seconds and the load average.

    python bench/dashboard_load.py                       # 100 clients × 15 s, phases off,1,10,off,1,10
    python bench/dashboard_load.py --clients 20 --seconds 3 --dashboards 0 1
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from optsched.service.process import ServerProcess

HERE = Path(__file__).resolve().parent


def _load_bench():
    spec = importlib.util.spec_from_file_location("service_load", HERE / "service_load.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


async def watch(url: str, sid: str, deadline: float, counts: list) -> None:
    """One open dashboard: its event stream, read to the end of the phase (reconnecting until the session exists)."""
    u = urlsplit(url)
    while time.perf_counter() < deadline:
        reader, writer = await asyncio.open_connection(u.hostname, u.port)
        writer.write(f"GET /dashboard/{sid}/events HTTP/1.1\r\nHost: {u.hostname}\r\nAccept: text/event-stream\r\n\r\n".encode())
        await writer.drain()
        status = (await reader.readline()).split()
        if len(status) > 1 and status[1] == b"200":
            try:
                while time.perf_counter() < deadline:
                    line = await asyncio.wait_for(reader.readline(), max(deadline - time.perf_counter(), 0.01))
                    if not line:
                        break
                    if line.startswith(b"data: "):
                        counts.append(len(line))
            except asyncio.TimeoutError:
                pass
        writer.close()
        await asyncio.sleep(0.05)


async def phase(bench, url: str, clients: int, seconds: float, dashboards: int) -> dict:
    counts: list = []
    deadline = time.perf_counter() + seconds + 0.5
    watchers = [asyncio.create_task(watch(url, f"load-{i}", deadline, counts)) for i in range(dashboards)]
    result = await bench.run(url, clients, seconds, None)
    await asyncio.gather(*watchers)
    result["views_received"] = len(counts)
    return result


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--dashboards", type=int, nargs="+", default=[0, 1, 10, 0, 1, 10],
                    help="Dashboards open in each phase, in order (0: none).")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not (0 < args.clients <= 1000 and 0 < args.seconds <= 600 and all(0 <= d <= args.clients for d in args.dashboards)):
        ap.error("--clients in 1..1000, --seconds in (0, 600], --dashboards in 0..clients")
    bench, rows = _load_bench(), []
    for d in args.dashboards:
        with tempfile.TemporaryDirectory() as tmp:
            with ServerProcess(Path(tmp) / "load.db", args=["--no-access-log"]) as srv:
                cpu0 = cpu_seconds(srv.proc.pid)
                r = asyncio.run(phase(bench, srv.url, args.clients, args.seconds, d))
                r["server_cpu_seconds"] = cpu_seconds(srv.proc.pid) - cpu0
        r["dashboards"], r["loadavg"] = d, os.getloadavg()[0]
        rows.append(r)
        if not args.json:
            print(f"dashboards {d:>3}: {r['requests']} requests ({r['requests_per_second']:.0f}/s), errors {r['errors']}, "
                  f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, server CPU {r['server_cpu_seconds']:.1f} s, "
                  f"views pushed {r['views_received']}, load {r['loadavg']:.1f}", flush=True)
    if args.json:
        print(json.dumps(rows))
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
