"""Bounded load test of `optsched serve`: N concurrent clients for S seconds,
each running a scheduler loop on its own session (progress reports, arrivals,
next rounds, a state read and a stateless solve now and then). Starts its own
server on a free loopback port (or uses --url), stops by itself, prints
p50/p99 latency per request kind and the error count; exit 1 on any error.

    python bench/service_load.py                      # 100 clients × 30 s
    python bench/service_load.py --clients 20 --seconds 3 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from optsched.service.process import ServerProcess

CLUSTER = {"gpus": {"v100": 4, "k80": 4}}
THROUGHPUT = {"v100": 2.0, "k80": 1.0}
ROUND = 60.0


class Conn:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams: one connection
    per simulated scheduler. (httpx's async client cost ~7 ms of client CPU per
    request here — more than the server's work — and its CPU then showed up
    as server latency on a 2-core machine.)"""

    def __init__(self, host: str, port: int, headers: dict):
        self.host, self.port = host, port
        self.extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.reader = self.writer = None

    async def request(self, method: str, path: str, body=None) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        data = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n{self.extra}\r\n")
        self.writer.write(head.encode() + data)
        await self.writer.drain()
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("connection closed by the server")
        status = int(status_line.split()[1])
        length, close = 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "connection" and value.strip().lower() == "close":
                close = True
        payload = await self.reader.readexactly(length) if length else b""
        if close:
            await self.close()
        return status, payload

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None


async def client_loop(i: int, conn: Conn, deadline: float, samples: list, errors: list, snapshot: dict):
    rng = random.Random(i)

    async def call(kind: str, method: str, path: str, body=None):
        t0 = time.perf_counter()
        try:
            status, payload = await conn.request(method, path, body)
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError) as e:
            errors.append((kind, repr(e)))
            await conn.close()
            return None
        samples.append((kind, time.perf_counter() - t0))
        if status >= 400:
            errors.append((kind, f"{status} {payload[:200]!r}"))
            return None
        return json.loads(payload) if payload else {}

    created = await call("create", "POST", "/v1/sessions",
                         {"cluster": CLUSTER, "round_length": ROUND, "recompute_every": 5, "session_id": f"load-{i}"})
    if created is None:
        return
    base = f"/v1/sessions/load-{i}"
    n = 0

    def job():
        nonlocal n
        n += 1
        return {"id": f"c{i}-j{n}", "throughput": THROUGHPUT, "scale_factor": rng.choice((1, 1, 2)),
                "steps_total": ROUND * rng.uniform(2, 8)}

    await call("submit", "POST", f"{base}/jobs", {"jobs": [job() for _ in range(4)]})
    last, it = None, 0
    while it == 0 or time.perf_counter() < deadline:  # one round at least, however slow the machine
        if last and last["placement"]:
            reports = [{"job_id": j, "steps": THROUGHPUT[s[0]["gpu_type"]] * ROUND} for j, s in last["placement"].items()]
            await call("progress", "POST", f"{base}/progress", {"reports": reports})
        if rng.random() < 0.4:
            await call("submit", "POST", f"{base}/jobs", {"jobs": [job()]})
        out = await call("round", "POST", f"{base}/rounds", {})
        last = out or last
        it += 1
        if it % 10 == 0:
            await call("state", "GET", base)
            await call("solve", "POST", "/v1/solve", {"snapshot": snapshot})


async def run(url: str, clients: int, seconds: float, token: str | None) -> dict:
    from optsched.cli.solve import example_snapshot_text

    snapshot = json.loads(example_snapshot_text())
    samples: list = []
    errors: list = []
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    u = urlsplit(url)
    conns = [Conn(u.hostname, u.port or 80, headers) for _ in range(clients)]
    t0 = time.perf_counter()
    deadline = t0 + seconds
    await asyncio.gather(*(client_loop(i, c, deadline, samples, errors, snapshot) for i, c in enumerate(conns)))
    wall = time.perf_counter() - t0
    for c in conns:
        await c.close()
    by_kind: dict = {}
    for kind, dt in samples:
        by_kind.setdefault(kind, []).append(dt)
    lat = np.array([dt for _, dt in samples]) * 1000 if samples else np.zeros(1)

    def pct(a):
        a = np.asarray(a) * 1000
        return {"n": int(len(a)), "p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99))}

    return {"clients": clients, "seconds": seconds, "wall_seconds": wall, "requests": len(samples),
            "requests_per_second": len(samples) / wall, "errors": len(errors), "error_samples": errors[:5],
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "by_kind": {k: pct(v) for k, v in sorted(by_kind.items())}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--url", default=None, help="An already running server (default: start one on a free port).")
    ap.add_argument("--token", default=None)
    ap.add_argument("--sync", default="full", help="SQLite synchronous mode of the started server (full | normal).")
    ap.add_argument("--json", action="store_true", help="Print the result as one JSON object.")
    args = ap.parse_args(argv)
    if not (0 < args.clients <= 1000 and 0 < args.seconds <= 600):
        ap.error("--clients must be in 1..1000 and --seconds in (0, 600]")
    with tempfile.TemporaryDirectory() as tmp:
        if args.url:
            result = asyncio.run(run(args.url, args.clients, args.seconds, args.token))
        else:
            with ServerProcess(Path(tmp) / "load.db", args=["--no-access-log", "--sync", args.sync]) as srv:
                result = asyncio.run(run(srv.url, args.clients, args.seconds, args.token))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['clients']} clients × {result['seconds']:g} s: {result['requests']} requests "
              f"({result['requests_per_second']:.0f}/s), errors {result['errors']}, "
              f"p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms")
        print(f"{'request':<10} {'n':>7} {'p50 ms':>8} {'p99 ms':>8}")
        for k, v in result["by_kind"].items():
            print(f"{k:<10} {v['n']:>7} {v['p50_ms']:>8.1f} {v['p99_ms']:>8.1f}")
        for e in result["error_samples"]:
            print("error:", e)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
