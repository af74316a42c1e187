"""qssf (Horus/QSSF) and tiresias_gittins: known answers and invariants."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from optsched.formulations.priority import gittins_index, gittins_thresholds, gpu_time_prior
from optsched.model import Instance
from optsched.policy import solve_instance
from tests.conftest import random_instance


def _inst(n, gpus=4, sf=None, **kw):
    sf = np.ones(n) if sf is None else np.asarray(sf, float)
    return Instance(job_ids=tuple(f"j{i}" for i in range(n)), gpu_types=("v100",), throughput=np.ones((n, 1)),
                    scale_factor=sf, weight=np.ones(n), capacity=np.array([float(gpus)]),
                    steps_remaining=np.full(n, 100.0), elapsed_time=np.zeros(n), attained_service=np.zeros(n),
                    arrival_time=np.arange(n, dtype=float), **kw)


def test_qssf_runs_shortest_predicted_service_first():
    inst = _inst(4, gpus=2, sf=[1, 1, 2, 1], extras={"predicted_duration": np.array([100.0, 10.0, 20.0, 50.0])})
    a = solve_instance(inst, "qssf")
    # services: 100, 10, 40, 50 -> j1 then j2 (needs 2, only 1 left: waits), backfill j3
    assert a.explanation["priority_order"] == ["j1", "j2", "j3", "j0"]
    assert a.fractions[:, 0].tolist() == [0.0, 1.0, 0.0, 1.0]


def test_qssf_does_not_preempt_running_jobs():
    inst = _inst(3, gpus=1, extras={"predicted_duration": np.array([1000.0, 10.0, 20.0])},
                 time=50.0, last_run_time=np.array([50.0, np.nan, np.nan]))
    inst = replace(inst, attained_service=np.array([50.0, 0.0, 0.0]))
    assert solve_instance(inst, "qssf").fractions[:, 0].tolist() == [1.0, 0.0, 0.0]
    assert solve_instance(inst, "qssf", preemptive=True).fractions[:, 0].tolist() == [0.0, 1.0, 0.0]


def test_qssf_never_exceeds_capacity_on_random_instances():
    for seed in range(5):
        inst = random_instance(np.random.default_rng(seed), 40)
        X = solve_instance(inst, "qssf").fractions
        assert np.all(inst.scale_factor @ X <= inst.capacity + 1e-9)
        assert np.all(X.sum(axis=1) <= 1 + 1e-9) and np.all(X[~inst.available] == 0)


def test_gittins_index_matches_definition():
    S = np.array([1.0, 2.0, 4.0, 10.0])
    # a = 1.5, Δ = 3: alive {2, 4, 10}, remaining {0.5, 2.5, 8.5}; P(≤3) = 2/3; E[min] = (0.5+2.5+3)/3 = 2
    assert gittins_index(S, np.array([1.5]), np.array([3.0]))[0] == pytest.approx((2 / 3) / 2.0)
    assert gittins_index(S, np.array([20.0]), np.array([3.0]))[0] == 0.0


def test_gittins_thresholds_from_the_tiresias_prior(peer_data):
    S = gpu_time_prior(str(peer_data / "tiresias" / "yarn-gput1000.csv"))
    th = gittins_thresholds(S)
    assert th == pytest.approx((2519.0, 5356.0))


def test_tiresias_gittins_orders_queues_then_index():
    inst = _inst(4, gpus=1)
    inst = replace(inst, attained_service=np.array([10000.0, 100.0, 3000.0, 0.0]))
    a = solve_instance(inst, "tiresias_gittins", prior=[50.0, 200.0, 3000.0, 20000.0], starvation_factor=0)
    q = a.explanation["tiresias_queue"]
    order = a.explanation["priority_order"]
    assert [q[j] for j in order] == sorted(q[j] for j in order)
