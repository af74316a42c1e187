"""The service's Prometheus metrics (``GET /metrics``, text exposition format 0.0.4).

Written here rather than with a client library: a dozen series, one lock, no
process-wide registry (each app has its own ``Metrics``, so two apps in one
process — tests — do not mix their counts)::

    optsched_http_requests_total{method,route,status}           counter
    optsched_http_request_duration_seconds{method,route}        histogram
    optsched_rounds_total{recomputed}                           counter
    optsched_solve_seconds{source}                              histogram (source: round | solve)
    optsched_session_jobs{session,state}                        gauge (running | queued, as of its last round)
    optsched_session_gpus_used{session,gpu_type}                gauge (as of its last round)
    optsched_jobs{state}, optsched_gpus_used{gpu_type}          gauges: the sums over sessions
    optsched_sessions_cached, optsched_commits_total, ...       from the registry and the store

``route`` is the path template (``/v1/sessions/{sid}/rounds``), never the raw
path, so the series stay few; a request that matches no route is ``unmatched``.
"""

from __future__ import annotations

import threading
from collections import defaultdict

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SOLVE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0)


class Histogram:
    """Cumulative buckets, sum and count of one labelled series."""

    def __init__(self, buckets: tuple[float, ...]):
        self.buckets, self.counts, self.sum, self.count = buckets, [0] * len(buckets), 0.0, 0

    def observe(self, value: float) -> None:
        for i, upper in enumerate(self.buckets):
            if value <= upper:
                self.counts[i] += 1
        self.sum += value
        self.count += 1


class Metrics:
    """Counters, histograms and per-session gauges of one app; ``render()`` is the exposition."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: dict[tuple, int] = defaultdict(int)
        self.latency: dict[tuple, Histogram] = {}
        self.rounds: dict[bool, int] = defaultdict(int)
        self.solve: dict[str, Histogram] = {}
        self.sessions: dict[str, tuple[int, int, dict[str, int]]] = {}  # sid -> (running, queued, GPUs by type)

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(method, route, str(status))] += 1
            self.latency.setdefault((method, route), Histogram(LATENCY_BUCKETS)).observe(seconds)

    def observe_solve(self, source: str, seconds: float) -> None:
        with self._lock:
            self.solve.setdefault(source, Histogram(SOLVE_BUCKETS)).observe(seconds)

    def observe_round(self, sid: str, out: dict) -> None:
        """A round answered (RoundOut's JSON): counts, its solve time, the session's jobs and GPUs."""
        gpus: dict[str, int] = defaultdict(int)
        for slots in out.get("placement", {}).values():
            for slot in slots:
                gpus[slot["gpu_type"]] += 1
        with self._lock:
            self.rounds[bool(out.get("recomputed"))] += 1
            self.sessions[sid] = (len(out.get("placement", {})), len(out.get("queued", [])), dict(gpus))
        if out.get("recomputed"):
            self.observe_solve("round", float(out.get("solve_seconds") or 0.0))

    def forget(self, sid: str) -> None:
        """A deleted session's gauges go away."""
        with self._lock:
            self.sessions.pop(sid, None)

    def render(self, extra: dict[str, tuple[str, str, float]] | None = None) -> str:
        """The exposition; ``extra``: {name: (type, help, value)} of unlabelled series (store, registry)."""
        out: list[str] = []
        with self._lock:
            _family(out, "optsched_http_requests_total", "counter", "HTTP requests answered.",
                    [(dict(zip(("method", "route", "status"), k)), v) for k, v in sorted(self.requests.items())])
            _histograms(out, "optsched_http_request_duration_seconds", "Seconds from request to the end of its answer.",
                        [(dict(zip(("method", "route"), k)), h) for k, h in sorted(self.latency.items())])
            _family(out, "optsched_rounds_total", "counter", "Rounds answered (POST /v1/sessions/{sid}/rounds).",
                    [({"recomputed": str(k).lower()}, v) for k, v in sorted(self.rounds.items())])
            _histograms(out, "optsched_solve_seconds", "Seconds solving a policy: a round's recomputation or POST /v1/solve.",
                        [({"source": k}, h) for k, h in sorted(self.solve.items())])
            sessions = sorted(self.sessions.items())
            _family(out, "optsched_session_jobs", "gauge", "Active jobs of a session as of its last round.",
                    [({"session": s, "state": st}, n) for s, (run, queued, _) in sessions
                     for st, n in (("running", run), ("queued", queued))])
            _family(out, "optsched_session_gpus_used", "gauge", "GPUs a session's last round placed jobs on, by type.",
                    [({"session": s, "gpu_type": t}, n) for s, (_, _, g) in sessions for t, n in sorted(g.items())])
            total: dict[str, int] = defaultdict(int)
            for _, _, g in self.sessions.values():
                for t, n in g.items():
                    total[t] += n
            _family(out, "optsched_jobs", "gauge", "Active jobs over all sessions as of their last rounds.",
                    [({"state": "running"}, sum(r for r, _, _ in self.sessions.values())),
                     ({"state": "queued"}, sum(q for _, q, _ in self.sessions.values()))])
            _family(out, "optsched_gpus_used", "gauge", "GPUs in use over all sessions as of their last rounds, by type.",
                    [({"gpu_type": t}, n) for t, n in sorted(total.items())])
        for name, (kind, text, value) in sorted((extra or {}).items()):
            _family(out, name, kind, text, [({}, value)])
        return "\n".join(out) + "\n"


def _family(out: list[str], name: str, kind: str, text: str, samples) -> None:
    out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
    out += [f"{name}{_labels(labels)} {_number(value)}" for labels, value in samples]


def _histograms(out: list[str], name: str, text: str, series) -> None:
    out += [f"# HELP {name} {text}", f"# TYPE {name} histogram"]
    for labels, h in series:
        for upper, n in zip(h.buckets, h.counts):
            out.append(f"{name}_bucket{_labels({**labels, 'le': _number(upper)})} {n}")
        out.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {h.count}")
        out.append(f"{name}_sum{_labels(labels)} {_number(h.sum)}")
        out.append(f"{name}_count{_labels(labels)} {h.count}")


def _labels(labels: dict) -> str:
    if not labels:
        return ""
    body = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return "{" + body + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(x: float) -> str:
    return repr(float(x)) if isinstance(x, float) else str(x)


__all__ = ["Metrics"]
