"""Embedding, the last items of issue 30: ties broken by arrival then job id
(not by a hash of the id), idempotent progress from the client, job ids
``.``/``..`` refused at submit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from optsched.allocator import Allocator
from optsched.model import Allocation, Cluster, Instance


def _instance(ids, arrival, gpus=2) -> Instance:
    n = len(ids)
    return Instance(job_ids=tuple(ids), gpu_types=("v100",), throughput=np.ones((n, 1)),
                    scale_factor=np.ones(n), weight=np.ones(n), capacity=np.array([float(gpus)]),
                    steps_remaining=np.full(n, 1e6), elapsed_time=np.zeros(n), attained_service=np.zeros(n),
                    arrival_time=np.asarray(arrival, float))


def _equal_share(inst: Instance) -> Allocation:
    X = np.full((inst.n, 1), float(inst.capacity[0]) / inst.n)
    return Allocation("test", "optimal", 0.0, 0.0, inst.job_ids, inst.gpu_types, X, np.zeros(inst.n))


def test_equal_priority_jobs_go_by_arrival_then_id():
    inst = _instance(["z", "m", "a", "b"], [0.0, 1.0, 1.0, 2.0])
    for seed in (0, 1, 7):  # the rule does not depend on the seed
        p = Allocator(Cluster(gpus={"v100": 2}), seed=seed).next_round(inst, _equal_share(inst))
        assert sorted(p.assignments) == ["a", "z"]  # z arrived first; a before m by id; b last


def test_a_callers_own_ids_give_the_same_schedule():
    """Distinct arrivals: renaming every job (which reorders any hash of the
    ids) leaves the rounds unchanged, job for job."""
    rng = np.random.default_rng(3)
    n = 12
    arrival = rng.permutation(n).astype(float)
    ours = [f"job-{m}" for m in range(n)]
    theirs = [f"{rng.integers(10**6):06d}-{m}" for m in range(n)]
    rename = dict(zip(ours, theirs))
    a, b = _instance(ours, arrival, gpus=5), _instance(theirs, arrival, gpus=5)
    alloc_a, alloc_b = _equal_share(a), _equal_share(b)
    A, B = Allocator(Cluster(gpus={"v100": 5})), Allocator(Cluster(gpus={"v100": 5}))
    for _ in range(20):
        pa, pb = A.next_round(a, alloc_a), B.next_round(b, alloc_b)
        assert sorted(rename[j] for j in pa.assignments) == sorted(pb.assignments)


# ---------------------------------------------------------------- idempotent progress from the client


def _client_losing_answers(lose: set[int]):
    """A Client on the real app in process; the answers of the POST /progress
    calls numbered in ``lose`` are lost after the server applied them."""
    import httpx
    from fastapi.testclient import TestClient

    from optsched.client import Client
    from optsched.service import create_app

    app = TestClient(create_app(":memory:"))
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        r = app.request(request.method, request.url.path, content=request.content,
                        headers={"content-type": "application/json"}, params=dict(request.url.params))
        if request.url.path.endswith("/progress"):
            calls.append(json.loads(request.content))
            if len(calls) - 1 in lose:
                raise httpx.ReadTimeout("the answer was lost")
        return httpx.Response(r.status_code, content=r.content, headers=r.headers)

    return Client("http://test", transport=httpx.MockTransport(handler)), calls


def test_a_retried_report_counts_once():
    from optsched.client import UnreachableError

    c, calls = _client_losing_answers({0})
    s = c.session({"gpus": {"v100": 2}}, round_length=360)
    s.submit([{"id": "a", "throughput": {"v100": 1.0}, "steps_total": 10_000}])
    s.next_round()
    with pytest.raises(UnreachableError):
        s.report([{"job_id": "a", "steps": 100}])  # applied, answer lost
    assert s.job("a")["steps_done"] == 100
    (out,) = s.report([{"job_id": "a", "steps": 100}])  # the caller's retry
    assert out["steps_done"] == 100 and s.job("a")["steps_done"] == 100
    assert calls[0]["reports"][0]["seq"] == calls[1]["reports"][0]["seq"]  # the same seq went twice
    # A new report after an answered call counts, with a larger seq.
    (out,) = s.report([{"job_id": "a", "steps": 100}])
    assert out["steps_done"] == 200 and calls[2]["reports"][0]["seq"] > calls[1]["reports"][0]["seq"]
    # The same report sent twice with the same seq (a retry the caller makes itself) counts once.
    s.report([{"job_id": "a", "steps": 50, "seq": calls[2]["reports"][0]["seq"] + 1}])
    s.report([{"job_id": "a", "steps": 50, "seq": calls[2]["reports"][0]["seq"] + 1}])
    assert s.job("a")["steps_done"] == 250


# ---------------------------------------------------------------- job ids "." and ".."


@pytest.mark.parametrize("job_id", [".", ".."])
def test_dot_job_ids_are_refused_at_submit(job_id):
    from fastapi.testclient import TestClient

    from optsched.model import OptschedError
    from optsched.service import Session, create_app

    app = TestClient(create_app(":memory:"))
    assert app.post("/v1/sessions", json={"cluster": {"gpus": {"v100": 2}}, "session_id": "s"}).status_code == 201
    r = app.post("/v1/sessions/s/jobs", json={"jobs": [{"id": job_id, "throughput": {"v100": 1.0}}]})
    assert r.status_code == 422 and r.json()["field"] == "jobs[0].id", r.text
    assert app.get("/v1/sessions/s/jobs").json()["jobs"] == []
    ok = app.post("/v1/sessions/s/jobs", json={"jobs": [{"id": "..x", "throughput": {"v100": 1.0}}]})
    assert ok.status_code in (200, 201), ok.text  # dots inside an id are fine
    s = Session.create({"cluster": {"gpus": {"v100": 2}}})
    with pytest.raises(OptschedError, match=r"jobs\[0\]\.id"):
        s.submit([{"id": job_id, "throughput": {"v100": 1.0}}])


# ---------------------------------------------------------------- the sweep's bar says what runs


def test_sweep_concurrency_and_the_bar_shows_runs_in_flight(monkeypatch):
    import io

    from rich.console import Console

    import optsched.cli.sweep as cli
    import optsched.sweep as sweep
    from optsched.sweep.executors import concurrency
    from optsched.sweep.spec import SweepSpec

    local = SweepSpec("t", ["fifo"], executor="local", workers=4)
    assert [concurrency(local, left) for left in (30, 4, 3, 1, 0)] == [4, 4, 3, 1, 0]
    assert concurrency(SweepSpec("t", ["fifo"], executor="serial", workers=4), 30) == 1

    seen = io.StringIO()
    monkeypatch.setattr(cli, "err_console", Console(file=seen, force_terminal=True, width=120))

    def fake(spec, out, progress=None, **_):
        progress(0, 30, None)  # nothing finished yet: the bar must still say something moves
        return "result"

    monkeypatch.setattr(sweep, "run_sweep", fake)
    assert cli._run(local, "out", show=True, keep_failed=False) == "result"
    assert "0/30 runs" in seen.getvalue() and "running 4" in seen.getvalue()
