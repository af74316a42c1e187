"""The dashboard's cost under load (issue 32): bench/service_load.py's clients
(100 × S seconds, each on its own session) against a fresh `optsched serve`,
without a dashboard and with D dashboards open (server-sent-event streams on the
first D sessions, read as a browser would), phases alternated in one run.
Prints p50/p99 per phase, the server's CPU seconds and the load average, then
per arm (dashboards open): the median over its phases of p50 and p99, the
range of its phases' p99, and the server's CPU milliseconds per request
(the measure the other work on a shared machine disturbs least), and each
arm's ratio to the arm without a dashboard.

    python bench/dashboard_load.py                       # 100 clients × 15 s, arms 0, 1, 10 interleaved, 2 repeats
    python bench/dashboard_load.py --repeat 4 --json     # 12 phases: 0,1,10,0,1,10,...
    python bench/dashboard_load.py --clients 20 --seconds 3 --dashboards 0 1 --repeat 1
    python bench/dashboard_load.py --watched 300 --dashboards 1 10 --repeat 3   # a watched commit's cost, isolated
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


async def watched(bench, url: str, requests: int, listeners: int) -> dict:
    """The worst case, isolated: one client's ``requests`` rounds on one session that ``listeners``
    pages watch, so every commit builds a view and writes it to every stream (no queueing: one
    request at a time). The server's CPU per request, with and without the pages, is what a
    watched commit costs."""
    u = urlsplit(url)
    conn = bench.Conn(u.hostname, u.port, {})
    await conn.request("POST", "/v1/sessions", {"cluster": bench.CLUSTER, "round_length": 60.0, "session_id": "w"})
    jobs = [{"id": f"j{i}", "throughput": bench.THROUGHPUT, "steps_total": 1e9} for i in range(12)]
    await conn.request("POST", "/v1/sessions/w/jobs", {"jobs": jobs})
    counts: list = []
    deadline = time.perf_counter() + 3600
    streams = [asyncio.create_task(watch(url, "w", deadline, counts)) for _ in range(listeners)]
    while len(counts) < listeners:  # every page has its first view: the streams are open
        await asyncio.sleep(0.01)
    t0 = time.perf_counter()
    for _ in range(requests):
        status, _ = await conn.request("POST", "/v1/sessions/w/rounds", {})
        assert status == 200, status
    wall = time.perf_counter() - t0
    for t in streams:
        t.cancel()
    await asyncio.gather(*streams, return_exceptions=True)
    await conn.close()
    return {"wall_seconds": wall, "views_received": len(counts)}


def watched_main(args) -> int:
    """--watched N: arms of 0 and each --dashboards count, interleaved, N rounds each."""
    import numpy as np

    bench, rows = _load_bench(), []
    arms = list(dict.fromkeys([0, *args.dashboards]))
    for d in arms * args.repeat:
        with tempfile.TemporaryDirectory() as tmp:
            with ServerProcess(Path(tmp) / "w.db", args=["--no-access-log"]) as srv:
                cpu0 = cpu_seconds(srv.proc.pid)
                r = asyncio.run(watched(bench, srv.url, args.watched, d))
                r["server_cpu_seconds"] = cpu_seconds(srv.proc.pid) - cpu0
                r.update(dashboard_metrics(srv.url))
        r.update(dashboards=d, loadavg=os.getloadavg()[0], cpu_ms_per_request=1000 * r["server_cpu_seconds"] / args.watched)
        rows.append(r)
        print(f"pages {d:>3}: {args.watched} rounds, server CPU {r['cpu_ms_per_request']:.2f} ms a round, views built "
              f"{r['views_built']:.0f} ({1000 * r['view_cpu_seconds'] / max(r['views_built'], 1):.2f} ms each), "
              f"load {r['loadavg']:.1f}", flush=True)
    base = float(np.median([r["cpu_ms_per_request"] for r in rows if r["dashboards"] == 0]))
    for d in arms[1:]:
        mine = [r["cpu_ms_per_request"] for r in rows if r["dashboards"] == d]
        extra = float(np.median(mine)) - base
        print(f"{d} pages watching: +{extra:.2f} ms of server CPU per watched commit (median {np.median(mine):.2f} vs "
              f"{base:.2f} ms without), i.e. {extra / max(d, 1):.3f} ms per page")
    return 0


def dashboard_metrics(url: str) -> dict:
    """The server's own count of dashboard views built and their CPU seconds (/metrics)."""
    import httpx

    out = {"views_built": 0.0, "view_cpu_seconds": 0.0}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        name, _, value = line.partition(" ")
        if name == "optsched_dashboard_views_total":
            out["views_built"] = float(value)
        elif name == "optsched_dashboard_view_cpu_seconds_total":
            out["view_cpu_seconds"] = float(value)
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summary(rows: list[dict]) -> list[dict]:
    """Per arm: medians over its phases, the range of p99, CPU per request, ratios to the arm without dashboards."""
    import numpy as np

    arms = []
    for d in dict.fromkeys(r["dashboards"] for r in rows):
        mine = [r for r in rows if r["dashboards"] == d]
        arms.append({"dashboards": d, "phases": len(mine),
                     "p50_ms": float(np.median([r["p50_ms"] for r in mine])),
                     "p99_ms": float(np.median([r["p99_ms"] for r in mine])),
                     "p99_range_ms": [float(min(r["p99_ms"] for r in mine)), float(max(r["p99_ms"] for r in mine))],
                     "server_cpu_ms_per_request": float(np.median([r["server_cpu_ms_per_request"] for r in mine])),
                     "requests_per_second": float(np.median([r["requests_per_second"] for r in mine])),
                     "view_cpu_share": float(np.median([r["view_cpu_share"] for r in mine])),
                     "view_cpu_ms_per_view": 1000 * sum(r["view_cpu_seconds"] for r in mine)
                     / max(sum(r["views_built"] for r in mine), 1),
                     "loadavg": float(np.mean([r["loadavg"] for r in mine]))})
    base = next((a for a in arms if a["dashboards"] == 0), None)
    if base is not None:
        none = [r for r in rows if r["dashboards"] == 0]
        for a in arms:
            a["p99_ratio"] = a["p99_ms"] / base["p99_ms"]
            a["cpu_ratio"] = a["server_cpu_ms_per_request"] / base["server_cpu_ms_per_request"]
            # Paired by repetition (phases run next to each other see about the same outside load).
            mine = [r for r in rows if r["dashboards"] == a["dashboards"]]
            pairs = [(m["p99_ms"] / n["p99_ms"], m["server_cpu_ms_per_request"] / n["server_cpu_ms_per_request"])
                     for m, n in zip(mine, none)]
            a["paired_p99_ratio"] = float(np.median([p[0] for p in pairs]))
            a["paired_p99_ratio_range"] = [float(min(p[0] for p in pairs)), float(max(p[0] for p in pairs))]
            a["paired_cpu_ratio"] = float(np.median([p[1] for p in pairs]))
    return arms


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--dashboards", type=int, nargs="+", default=[0, 1, 10],
                    help="The arms: dashboards open in a phase (0: none), run in this order each repeat.")
    ap.add_argument("--repeat", type=int, default=2, help="Times the arms are run, interleaved.")
    ap.add_argument("--watched", type=int, default=0, help="Instead: N rounds of one client on one session "
                    "watched by each --dashboards count of pages (the cost of a watched commit, isolated).")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not (0 < args.clients <= 1000 and 0 < args.seconds <= 600 and all(0 <= d <= args.clients for d in args.dashboards)
            and 1 <= args.repeat <= 100):
        ap.error("--clients in 1..1000, --seconds in (0, 600], --dashboards in 0..clients, --repeat in 1..100")
    if args.watched:
        return watched_main(args)
    bench, rows = _load_bench(), []
    for d in args.dashboards * args.repeat:
        with tempfile.TemporaryDirectory() as tmp:
            with ServerProcess(Path(tmp) / "load.db", args=["--no-access-log"]) as srv:
                cpu0 = cpu_seconds(srv.proc.pid)
                r = asyncio.run(phase(bench, srv.url, args.clients, args.seconds, d))
                r["server_cpu_seconds"] = cpu_seconds(srv.proc.pid) - cpu0
                r.update(dashboard_metrics(srv.url))
        r["dashboards"], r["loadavg"] = d, os.getloadavg()[0]
        r["server_cpu_ms_per_request"] = 1000 * r["server_cpu_seconds"] / max(r["requests"], 1)
        r["view_cpu_share"] = r["view_cpu_seconds"] / max(r["server_cpu_seconds"], 1e-9)
        rows.append(r)
        if not args.json:
            print(f"dashboards {d:>3}: {r['requests']} requests ({r['requests_per_second']:.0f}/s), errors {r['errors']}, "
                  f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, server CPU {r['server_cpu_seconds']:.1f} s, "
                  f"views pushed {r['views_received']}, views built {r['views_built']:.0f} "
                  f"({1000 * r['view_cpu_seconds']:.0f} ms CPU, {100 * r['view_cpu_share']:.2f} % of the server's), "
                  f"load {r['loadavg']:.1f}", flush=True)
    arms = summary(rows)
    if args.json:
        print(json.dumps({"phases": rows, "arms": arms}))
    else:
        print(f"{'arm':>10} {'phases':>6} {'p50 ms':>8} {'p99 ms':>8} {'p99 range':>15} {'CPU ms/req':>10} "
              f"{'p99 / none':>10} {'CPU / none':>10} {'load':>5}")
        for a in arms:
            print(f"{a['dashboards']:>10} {a['phases']:>6} {a['p50_ms']:>8.1f} {a['p99_ms']:>8.1f} {a['p99_range_ms'][0]:>7.0f}-{a['p99_range_ms'][1]:<7.0f} "
                  f"{a['server_cpu_ms_per_request']:>10.2f} {a.get('p99_ratio', float('nan')):>10.3f} "
                  f"{a.get('cpu_ratio', float('nan')):>10.3f} {a['loadavg']:>5.1f}")
        for a in arms:
            if a["dashboards"] and "paired_p99_ratio" in a:
                lo, hi = a["paired_p99_ratio_range"]
                print(f"{a['dashboards']} dashboards vs none, paired by repetition: p99 ratio median "
                      f"{a['paired_p99_ratio']:.3f} (range {lo:.3f}-{hi:.3f}), CPU per request {a['paired_cpu_ratio']:.3f}; "
                      f"building views: {100 * a['view_cpu_share']:.2f} % of the server's CPU "
                      f"({a['view_cpu_ms_per_view']:.2f} ms a view)")
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
