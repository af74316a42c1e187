"""simulate --packing: space sharing with the Gavel table's pair throughputs."""

from __future__ import annotations

import numpy as np
import pytest

from optsched.sim import simulate
from optsched.traces.generate import generate_gavel


@pytest.fixture(scope="module")
def table(peer_data_module):
    from optsched.traces.throughputs import gavel_throughputs

    return gavel_throughputs(peer_data_module)


@pytest.fixture(scope="module")
def peer_data_module():
    from conftest import peer_data_dir

    d = peer_data_dir()
    if not d.is_dir():
        pytest.skip(f"peer data not found at {d} (set OPTSCHED_PEER_DATA)")
    return d


def test_pair_throughputs_are_read_from_the_table(table):
    a, b = ("ResNet-18 (batch size 16)", 1), ("ResNet-18 (batch size 32)", 1)
    ab, ba = table.pair(a, b), table.pair(b, a)
    assert set(ab) == {"k80", "p100", "v100"}
    assert ab["v100"] == pytest.approx(ba["v100"][::-1])
    assert all(x > 0 for x in ab["v100"])
    assert table.pair(a, ("No such model", 1)) == {}


def test_packing_changes_the_result_and_never_exceeds_capacity(table):
    trace = generate_gavel(table, 14, 60.0, seed=1)
    seen = []

    def check_round(info):
        seen.append(info["active"])

    plain = simulate(trace, "v100=1,p100=1,k80=1", throughputs=table)
    packed = simulate(trace, "v100=1,p100=1,k80=1", throughputs=table, packing=True, on_round=check_round)
    assert packed.summary["jobs_completed"] == plain.summary["jobs_completed"] == 14
    assert packed.rounds["packed_jobs"].sum() > 0
    assert packed.summary["avg_jct"] != plain.summary["avg_jct"]
    util = packed.rounds[[c for c in packed.rounds if c.startswith("util_")]].to_numpy()
    assert (util <= 1 + 1e-9).all()  # a packed pair's GPUs count once
    # at most two jobs per GPU: running jobs <= 2 x GPUs, and progress never beats
    # the packed or solo throughput × time
    assert (packed.rounds["running_jobs"] <= 2 * 3).all()
    assert packed.summary["progress_violation_steps"] <= 1e-6
    assert np.isfinite(packed.jobs["completion_time"]).all()


def test_candidate_pairs_are_bounded_per_job(table):
    from optsched.model import Cluster
    from optsched.sim.jobs import resolve_jobs
    from optsched.sim.packing import candidate_pairs

    trace = generate_gavel(table, 400, 30.0, seed=2)
    jobs = resolve_jobs(trace, Cluster(gpus={"v100": 8, "p100": 8, "k80": 8}), table, pair_table=table)
    pairs, rates = candidate_pairs(jobs, np.arange(jobs.n), max_partners=4)
    assert len(pairs) <= 4 * jobs.n and len(pairs) > 0
    assert (pairs[:, 0] < pairs[:, 1]).all() and len(np.unique(pairs, axis=0)) == len(pairs)
    assert rates.shape == (len(pairs), 3, 2) and (rates >= 0).all()


def test_packing_is_deterministic(table):
    trace = generate_gavel(table, 8, 60.0, seed=4)
    a = simulate(trace, "v100=1,p100=1,k80=1", throughputs=table, packing=True, seed=3)
    b = simulate(trace, "v100=1,p100=1,k80=1", throughputs=table, packing=True, seed=3)
    assert a.jobs["completion_time"].equals(b.jobs["completion_time"])
