"""lucid (profiling, orchestration, pair binding as a matching) and gandiva
(packing, time slicing): known answers, brute force, invariants."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from optsched.formulations.lucid import bind_pairs
from optsched.model import Instance
from optsched.policy import solve_instance
from tests.conftest import random_instance


def _brute_matching(W):
    h, g = W.shape
    best = 0.0
    for perm in itertools.permutations(range(max(h, g)), h):
        best = max(best, sum(W[i, j] for i, j in enumerate(perm) if j < g and W[i, j] > 0))
    return best


@pytest.mark.parametrize("seed", range(10))
def test_pair_binding_is_a_maximum_weight_matching(seed):
    rng = np.random.default_rng(seed)
    W = rng.uniform(-0.5, 1.0, (rng.integers(1, 5), rng.integers(1, 5)))
    chosen = bind_pairs(W)
    assert len({h for h, _ in chosen}) == len(chosen) == len({g for _, g in chosen})
    assert sum(W[h, g] for h, g in chosen) == pytest.approx(_brute_matching(W))


def _inst(n, gpus, sf=None, executed=None, running=None, **kw):
    sf = np.ones(n) if sf is None else np.asarray(sf, float)
    executed = np.zeros(n) if executed is None else np.asarray(executed, float)
    lr = np.where(np.asarray(running if running is not None else [False] * n), 1000.0, np.nan)
    return Instance(job_ids=tuple(f"j{i}" for i in range(n)), gpu_types=("v100",), throughput=np.ones((n, 1)),
                    scale_factor=sf, weight=np.ones(n), capacity=np.array([float(gpus)]),
                    steps_remaining=np.full(n, 1e4), elapsed_time=np.full(n, 1000.0),
                    attained_service=executed * sf, arrival_time=np.arange(n, dtype=float), time=1000.0,
                    last_run_time=lr, **kw)


def test_lucid_profiles_new_jobs_then_orders_by_predicted_gpu_service():
    pred = np.array([5000.0, 100.0, 900.0, 50.0])
    inst = _inst(4, 4, executed=[600, 600, 600, 0], extras={"predicted_duration": pred})
    a = solve_instance(inst, "lucid", profile_gpus=1)
    assert a.explanation["profiling"] == ["j3"]  # the new job runs on the profiling GPU
    assert a.explanation["priority_order"] == ["j1", "j2", "j0"]
    assert a.fractions[:, 0].tolist() == [1.0, 1.0, 1.0, 1.0]  # 3 main GPUs + 1 profiling GPU
    assert a.explanation["waiting_for_profiling"] == []


def test_lucid_says_which_new_jobs_wait_for_the_profiling_partition():
    """Two new jobs, one profiling GPU: the second waits although the main cluster is idle."""
    inst = _inst(3, 5, executed=[600, 0, 0], extras={"predicted_duration": np.array([100.0, 100.0, 100.0])})
    a = solve_instance(inst, "lucid", profile_gpus=1)
    assert a.explanation["profiling"] == ["j1"]
    assert a.explanation["waiting_for_profiling"] == ["j2"]
    assert a.fractions[2].sum() == 0.0 and a.fractions.sum() == 2.0


def test_lucid_does_not_preempt_and_ageing_lifts_long_waiters():
    pred = np.array([5000.0, 100.0, 900.0])
    inst = _inst(3, 2, executed=[600, 600, 600], running=[True, False, False], extras={"predicted_duration": pred})
    a = solve_instance(inst, "lucid", profile_gpus=1)
    assert a.fractions[0, 0] == 1.0 and a.fractions[1, 0] == 0.0  # j0 keeps its GPU; the 1 main GPU is taken
    waited = replace(inst, elapsed_time=np.array([1000.0, 600.0, 1e6]))
    b = solve_instance(waited, "lucid", profile_gpus=1, ageing=True, age_seconds=3600.0)
    assert b.explanation["priority_order"].index("j2") < b.explanation["priority_order"].index("j1")


def test_lucid_binds_the_best_partner_only_when_loaded():
    # 2 main GPUs (+1 profiling), j0 j1 run, j2 waits; pairs: (j0, j2) gain 0.3, (j1, j2) gain 0.6
    inst = _inst(3, 3, executed=[600, 600, 600], running=[True, True, False],
                 extras={"predicted_duration": np.array([100.0, 200.0, 300.0])},
                 pairs=np.array([[0, 2], [1, 2]]), pair_throughput=np.array([[[0.65, 0.65]], [[0.8, 0.8]]]))
    a = solve_instance(inst, "lucid", profile_gpus=1)
    assert a.explanation["bound_pairs"] == ["j1+j2"]
    assert a.pairs.tolist() == [[1, 2]] and a.pair_fractions.tolist() == [[1.0]]
    light = replace(inst, capacity=np.array([4.0]))  # not loaded: every job has a GPU, no binding
    assert solve_instance(light, "lucid", profile_gpus=1).explanation["bound_pairs"] == []


def test_gandiva_time_slices_when_over_subscribed():
    inst = _inst(4, 2)
    a = solve_instance(inst, "gandiva")
    np.testing.assert_allclose(a.fractions[:, 0], [0.5] * 4)
    assert sorted(a.explanation["time_sliced"]) == ["j0", "j1", "j2", "j3"]
    b = solve_instance(inst, "gandiva", time_slicing=False)
    assert b.fractions[:, 0].tolist() == [1.0, 1.0, 0.0, 0.0]


def test_gandiva_packs_before_slicing():
    inst = _inst(3, 1, pairs=np.array([[0, 1]]), pair_throughput=np.array([[[0.8, 0.7]]]))
    a = solve_instance(inst, "gandiva")
    assert a.pairs.tolist() == [[0, 1]]
    assert a.fractions[2, 0] == 0.0  # the type is held by the pair; j2 waits


@pytest.mark.parametrize("policy", ["lucid", "lucid_ageing", "gandiva", "qssf", "tiresias_gittins"])
def test_seed_policies_respect_capacity_on_random_instances(policy):
    for seed in range(4):
        rng = np.random.default_rng(seed)
        inst = random_instance(rng, 25)
        inst = replace(inst, time=100.0, last_run_time=np.where(rng.random(25) < 0.3, 100.0, np.nan),
                       attained_service=rng.uniform(0, 2000, 25) * (rng.random(25) < 0.6))
        a = solve_instance(inst, policy)
        P, Y = a.pairs, a.pair_fractions
        used = inst.scale_factor @ a.fractions + (inst.scale_factor[P[:, 0]] @ Y if len(P) else 0.0)
        assert np.all(used <= inst.capacity + 1e-9)
        assert np.all(a.fractions[~inst.available] == 0)
        assert np.all(a.fractions.sum(axis=1) <= 1 + 1e-9)


# --- Lucid's pair binding in the simulator (--packing) -------------------------------------


def test_lucid_binds_pairs_in_the_simulator_when_loaded():
    from conftest import peer_data_dir

    from optsched.sim import simulate, supports_packing
    from optsched.traces.generate import generate_gavel
    from optsched.traces.throughputs import gavel_throughputs

    peer = peer_data_dir()
    if not peer.is_dir():
        pytest.skip(f"peer data not found at {peer} (set OPTSCHED_PEER_DATA)")
    assert supports_packing("lucid") and supports_packing("lucid_ageing")
    table = gavel_throughputs(peer)
    trace = generate_gavel(table, 16, 120.0, seed=5)  # arrivals far faster than 3 GPUs serve: loaded
    rounds = []

    def spy(info):
        rounds.append(info)

    opts = {"profile_minutes": 0.0}
    plain = simulate(trace, "v100=1,p100=1,k80=1", policy="lucid", throughputs=table, policy_options=opts)
    packed = simulate(trace, "v100=1,p100=1,k80=1", policy="lucid", throughputs=table, packing=True,
                      policy_options=opts, on_round=spy)
    assert plain.rounds["packed_jobs"].sum() == 0
    assert packed.rounds["packed_jobs"].sum() > 0  # bound pairs ran
    assert packed.summary["jobs_completed"] == plain.summary["jobs_completed"] == 16
    util = packed.rounds[[c for c in packed.rounds if c.startswith("util_")]].to_numpy()
    assert (util <= 1 + 1e-9).all()
    assert (packed.rounds["running_jobs"] <= 2 * 3).all()  # at most two jobs share a GPU
    assert packed.summary["progress_violation_steps"] <= 1e-6  # packed rates never beat the table
    again = simulate(trace, "v100=1,p100=1,k80=1", policy="lucid", throughputs=table, packing=True,
                     policy_options=opts)
    assert again.jobs["completion_time"].equals(packed.jobs["completion_time"])
