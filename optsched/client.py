"""Python client of `optsched serve`, with the names of the in-process API.

    from optsched.client import Client
    with Client("http://127.0.0.1:8470", token=None) as c:
        c.solve(snapshot, policy="max_min_fairness")   # an Allocation, like optsched.solve
        c.solve_json(snapshot, placement=True)         # the server's JSON, with placement and allocator state
        s = c.session({"gpus": {"v100": 4}}, policy="max_min_fairness", round_length=360)
        s.submit([{"id": "j0", "throughput": {"v100": 1.5}, "steps_total": 1e4}])
        r = s.next_round()          # {"placement", "started", "preempted", "migrated", ...}
        s.report([{"job_id": "j0", "steps": 540}])
        s.record("j0", "v100", 90)  # like Allocator.record: it ran only 90 s of the round
        s.remove(["j0"])            # like Allocator.remove: finished
        s.state()

``RemoteSession`` has the methods of ``optsched.service.Session`` (the
in-process session) with the same arguments and the same JSON results, so a
scheduler loop can run against either. Errors raise ``ServiceError`` (an
``OptschedError``) carrying the HTTP status and the offending field; 404 and
409 raise ``NotFoundError`` / ``ConflictError``, subclasses of the in-process
``NotFound`` / ``Conflict``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Iterable

import httpx

from optsched.model import Allocation, OptschedError, Snapshot
from optsched.service.session import Conflict, NotFound

DEFAULT_URL = "http://127.0.0.1:8470"


def _seg(job_id: str) -> str:
    """A job id as one URL path segment (ids may hold ':', '@', '+')."""
    from urllib.parse import quote

    return quote(str(job_id), safe="")


class ServiceError(OptschedError):
    def __init__(self, status: int, detail: str, field: str | None = None):
        super().__init__(detail)
        self.status, self.detail, self.field = status, detail, field


class NotFoundError(ServiceError, NotFound):
    pass


class ConflictError(ServiceError, Conflict):
    pass


class UnauthorizedError(ServiceError):
    pass


class UnreachableError(ServiceError):
    """No answer (no server, a refused or dropped connection, a timeout): status 0."""


class Client:
    """A connection to `optsched serve` at ``url`` (``token``: its bearer token, default
    ``$OPTSCHED_TOKEN``; ``transport``: an httpx transport, e.g. for tests)."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, timeout: float = 300.0,
                 transport: httpx.BaseTransport | None = None):
        token = token if token is not None else os.environ.get("OPTSCHED_TOKEN")  # as `optsched serve` reads it
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout, transport=transport)

    # ------------------------------------------------------------------ plumbing

    def request(self, method: str, path: str, json: Any = None, params: dict | None = None) -> Any:
        """One HTTP request; the decoded JSON answer, or ServiceError (and subclasses) for 4xx/5xx."""
        try:
            r = self._http.request(method, path, json=json, params=params)
        except ValueError as e:  # NaN or inf in the body: not JSON; the in-process Session refuses them too
            if "JSON" not in str(e):
                raise
            raise ServiceError(422, "body: NaN and infinity are not numbers JSON can carry "
                                    "(Input should be a finite number)", "body") from None
        except httpx.TransportError as e:  # no server, a refused connection, a timeout: status 0
            raise UnreachableError(0, f"cannot reach {self._http.base_url}: {e or type(e).__name__}") from None
        if r.status_code >= 400:
            try:
                body = r.json()
                detail, field = body.get("detail", r.text), body.get("field")
            except ValueError:
                detail, field = r.text, None
            cls = {401: UnauthorizedError, 404: NotFoundError, 409: ConflictError}.get(r.status_code, ServiceError)
            raise cls(r.status_code, f"{detail}", field)
        return None if r.status_code == 204 or not r.content else r.json()

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ stateless

    def healthz(self) -> dict:
        """``GET /healthz``: status, version, database, commit statistics."""
        return self.request("GET", "/healthz")

    def policies(self) -> list[str]:
        """The server's policy names."""
        return self.request("GET", "/v1/policies")["policies"]

    def solve(self, snapshot: Snapshot | dict | str, policy: str = "max_min_fairness", solver: str = "auto",
              time_limit: float = 60.0, packing: bool = False, partitions: int = 1,
              placement: bool = False) -> Allocation:
        """``optsched.solve`` over HTTP: the same :class:`~optsched.Allocation` (its
        ``to_dict()`` is the server's answer). ``partitions`` > 1: POP's partitioned solve.
        For the next round's placement and the allocator state as well, use
        :meth:`solve_json` with ``placement=True``."""
        if placement:
            raise TypeError("Client.solve returns an Allocation; for the placement and the allocator state "
                            "call Client.solve_json(..., placement=True)")
        snapshot = _snapshot_json(snapshot)
        out = self.solve_json(snapshot, policy, solver, time_limit, packing, partitions=partitions)
        return allocation_from_json(out, sorted(snapshot.get("cluster", {}).get("gpus", {})))

    def solve_json(self, snapshot: Snapshot | dict | str, policy: str = "max_min_fairness", solver: str = "auto",
                   time_limit: float = 60.0, packing: bool = False, placement: bool = False,
                   placement_policy: str = "consolidated", partitions: int = 1) -> dict:
        """The server's JSON answer to ``POST /v1/solve``: ``Allocation.to_dict()``, plus
        ``placement``, ``started``/``preempted``/``migrated`` and ``allocator_state`` with
        ``placement=True``, and ``total_seconds``."""
        body = {"snapshot": _snapshot_json(snapshot), "policy": policy, "solver": solver, "time_limit": time_limit,
                "packing": packing, "placement": placement, "placement_policy": placement_policy}
        if partitions != 1:
            body["partitions"] = partitions
        return self.request("POST", "/v1/solve", body)

    # ------------------------------------------------------------------ sessions

    def session(self, cluster: dict | Any, policy: str = "max_min_fairness", **options) -> "RemoteSession":
        """Create a session (options: SessionConfig fields — round_length,
        recompute_every, min_recompute_interval, placement, allocator, session_id, ...)."""
        if hasattr(cluster, "model_dump"):
            cluster = cluster.model_dump(mode="json", exclude_none=True)
        out = self.request("POST", "/v1/sessions", {"cluster": cluster, "policy": policy, **options})
        return RemoteSession(self, out["session_id"])

    def open_session(self, session_id: str) -> "RemoteSession":
        """An existing session (404 if unknown)."""
        s = RemoteSession(self, session_id)
        s.last_round()
        return s

    def sessions(self) -> list[str]:
        """The ids of the server's sessions."""
        return self.request("GET", "/v1/sessions")["sessions"]


class RemoteSession:
    """A session on the server; methods as ``optsched.service.Session``."""

    def __init__(self, client: Client, session_id: str):
        self.client, self.id = client, session_id
        self._base = f"/v1/sessions/{session_id}"
        self._last_seq = 0
        self._unanswered: dict[str, int] = {}  # a report's JSON -> its seq, while its call got no answer

    def submit(self, jobs: Iterable[dict] | dict) -> list[dict]:
        """Submit jobs (dicts or JobSpec models); their new state."""
        jobs = [jobs] if isinstance(jobs, dict) else [_plain(j) for j in jobs]
        return self.client.request("POST", f"{self._base}/jobs", {"jobs": jobs})["jobs"]

    def update(self, job_id: str, changes: dict | None = None, **fields) -> dict:
        """Change a job's fields (weight, throughput, ...); its new state."""
        return self.client.request("PATCH", f"{self._base}/jobs/{_seg(job_id)}", {**(changes or {}), **fields})

    def finish(self, job_id: str, seconds: float | None = None) -> dict:
        """Mark a job finished (``seconds``: how long it ran in the current round)."""
        body = {} if seconds is None else {"seconds": seconds}
        return self.client.request("POST", f"{self._base}/jobs/{_seg(job_id)}/finish", body)

    def remove(self, job_ids: str | Iterable[str]) -> list[dict]:
        """Allocator.remove's name: finish these jobs (already finished: skipped)."""
        ids = [job_ids] if isinstance(job_ids, str) else list(job_ids)
        out = []
        for j in ids:
            try:
                out.append(self.finish(j))
            except NotFoundError:
                if self.job(j)["status"] != "finished":
                    raise
        return out

    def report(self, reports: Iterable[dict] | dict) -> list[dict]:
        """Progress reports (``{"job_id", "steps", "seconds"?}``); the jobs' new state.

        Each report gets a per-job ``seq`` unless it has one, so it counts once:
        if a call gets no answer (``UnreachableError``: the server may or may not
        have applied it), calling again with the same report re-sends the same
        ``seq`` and the server skips it if it was applied. A new report (other
        content, or after an answered call) gets a new, larger ``seq``."""
        reports = [reports] if isinstance(reports, dict) else [_plain(r) for r in reports]
        reports = [self._sequenced(dict(r)) for r in reports]
        try:
            out = self.client.request("POST", f"{self._base}/progress", {"reports": reports})["jobs"]
        except UnreachableError:
            raise  # outcome unknown: keep the seqs for the caller's retry
        except ServiceError:
            self._unanswered.clear()  # refused as a whole: nothing was applied
            raise
        self._unanswered.clear()
        return out

    def _sequenced(self, r: dict) -> dict:
        """``r`` with a seq: the one of the same unanswered report (a retry), else a
        new one above every seq this client sent. New seqs start at the clock's
        nanoseconds so a restarted client's reports stay above the ones before
        (a seq only tells a retry from a new report; it decides nothing else)."""
        if r.get("seq") is not None or not isinstance(r.get("job_id"), str):
            return r
        key = json.dumps(r, sort_keys=True, default=str)
        seq = self._unanswered.get(key)
        if seq is None:
            seq = self._last_seq = max(self._last_seq + 1, time.time_ns())
            self._unanswered[key] = seq
        return {**r, "seq": seq}

    def record(self, job_id: str, gpu_type: str, seconds: float) -> dict:
        """Allocator.record's name: the job ran only ``seconds`` in the last round."""
        last = self.last_round() or {}
        ran = {g["gpu_type"] for g in last.get("placement", {}).get(job_id, [])}
        if ran and gpu_type not in ran:
            raise ServiceError(422, f"record: job {job_id!r} did not run on {gpu_type} in the last round", "gpu_type")
        return self.report({"job_id": job_id, "seconds": seconds})[0]

    def next_round(self, now: float | None = None, expected_round: int | None = None, retries: int = 0,
                   backoff: float = 0.5) -> dict:
        """The next round. With ``expected_round`` and ``retries``, a lost answer
        (connection error, server restart) is retried exactly once-safe: if the
        server committed the round, that round is returned, never a second one."""
        body = {k: v for k, v in (("now", now), ("expected_round", expected_round)) if v is not None}
        for attempt in range(retries + 1):
            try:
                if attempt:
                    last = self.last_round()
                    if last is not None and last["round"] == expected_round:
                        return last
                return self.client.request("POST", f"{self._base}/rounds", body)
            except UnreachableError:
                if expected_round is None or attempt == retries:
                    raise
                time.sleep(backoff * 2**attempt)
        raise AssertionError("unreachable")

    def last_round(self) -> dict | None:
        """The last committed round (None before the first)."""
        return self.client.request("GET", f"{self._base}/rounds/last")

    def state(self) -> dict:
        """The session's state: time, round, jobs, allocator state."""
        return self.client.request("GET", self._base)

    def job(self, job_id: str) -> dict:
        """One job's state (NotFoundError if unknown)."""
        if not str(job_id):  # ".../jobs/" is the list's address (a redirect, not a job)
            raise NotFoundError(404, f"job {job_id!r} not found in session {self.id!r}", "job_id")
        return self.client.request("GET", f"{self._base}/jobs/{_seg(job_id)}")

    def jobs(self, finished: bool = False, limit: int = 1000, offset: int = 0) -> list[dict]:
        """Active jobs (or finished ones), a page of ``limit`` from ``offset``."""
        params = {"finished": str(finished).lower(), "limit": limit, "offset": offset}
        return self.client.request("GET", f"{self._base}/jobs", params=params)["jobs"]

    def events(self, after: int = -1, limit: int = 1000) -> list[dict]:
        """The session's committed changes after sequence number ``after``."""
        return self.client.request("GET", f"{self._base}/events", params={"after": after, "limit": limit})["events"]

    def delete(self) -> None:
        """Delete the session."""
        self.client.request("DELETE", self._base)


def _plain(x):
    return x.model_dump(mode="json", exclude_none=True) if hasattr(x, "model_dump") else x


def _snapshot_json(snapshot: Snapshot | dict | str) -> dict:
    """A snapshot as the JSON object the server reads (a Snapshot, a dict, or JSON text)."""
    if isinstance(snapshot, (str, bytes)):
        from optsched.model import loads_unique

        return loads_unique(snapshot)
    return _plain(snapshot)


def allocation_from_json(out: dict, gpu_types: list[str]) -> Allocation:
    """The :class:`~optsched.Allocation` whose ``to_dict()`` is ``out`` (the server's answer),
    over ``gpu_types`` in the Instance's order (sorted type names)."""
    import numpy as np

    job_ids = tuple(out["effective_throughput"])  # every job, in the snapshot's order
    types = tuple(gpu_types)
    col = {t: j for j, t in enumerate(types)}
    row = {jid: m for m, jid in enumerate(job_ids)}

    def matrix(table: dict, dtype=float) -> np.ndarray:
        x = np.zeros((len(job_ids), len(types)), dtype=dtype)
        for jid, entries in table.items():
            for t, v in entries.items():
                x[row[jid], col[t]] = v
        return x

    pairs, pair_fractions = np.zeros((0, 2), dtype=int), np.zeros((0, 0))
    packed = out.get("packed_allocation") or {}
    if packed:
        keys = [json.loads(k) if k.startswith("[") else k.split("+") for k in packed]
        pairs = np.array([[row[a], row[b]] for a, b in keys], dtype=int)
        pair_fractions = np.zeros((len(keys), len(types)))
        for p, entries in enumerate(packed.values()):
            for t, v in entries.items():
                pair_fractions[p, col[t]] = v
    objective = out.get("objective")
    return Allocation(
        policy=out["policy"], status=out["status"], objective=float("nan") if objective is None else float(objective),
        solve_seconds=float(out.get("solve_seconds", 0.0)), job_ids=job_ids, gpu_types=types,
        fractions=matrix(out.get("allocation", {})),
        effective_throughput=np.array([out["effective_throughput"][j] for j in job_ids], dtype=float),
        explanation=out.get("explanation") or {}, build_seconds=float(out.get("build_seconds", 0.0)),
        solver_seconds=float(out.get("solver_seconds", 0.0)), decode_seconds=float(out.get("decode_seconds", 0.0)),
        import_seconds=float(out.get("import_seconds", 0.0)), pairs=pairs, pair_fractions=pair_fractions,
        gpu_counts=matrix(out["gpu_counts"], int) if "gpu_counts" in out else None,
        nodes=matrix(out["nodes"], int) if "nodes" in out else None,
    )


__all__ = ["Client", "RemoteSession", "allocation_from_json", "ServiceError", "NotFoundError", "ConflictError", "UnauthorizedError"]
