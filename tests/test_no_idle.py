"""No idle capacity (formulations/base.fill_idle, the fractional policies' second stage).

On many seeded random instances, for every fractional policy: the allocation
leaves no GPU idle that a job with time left could use, it only raises the raw
optimum's entries (every job's rate is at least the raw one), it stays feasible,
and the policy's objective, evaluated here independently of the formulations,
is the stage-1 optimum's. A control checks the detector: the raw vertex of
makespan on an uncongested cluster does leave usable GPUs idle."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import optsched
from conftest import random_instance
from optsched.formulations.base import fill_idle, isolated_throughput, type_blind, utilization
from optsched.formulations.finish_time_fairness import rho_coefficients
from optsched.formulations.max_min_fairness import normalized_throughput
from optsched.model import Instance
from optsched.policy import solve_instance

LP_POLICIES = [
    "max_min_fairness", "max_min_fairness_agnostic", "finish_time_fairness", "finish_time_fairness_agnostic",
    "makespan", "makespan_agnostic", "max_throughput", "max_throughput_agnostic", "proportional_fairness",
    "proportional_fairness_agnostic", "min_cost", "min_cost_slo",
]
PROCEDURES = ["max_min_fairness_water_filling", "max_min_fairness_water_filling_agnostic",
              "max_min_fairness_hierarchical"]
PACKING = ["max_min_fairness", "makespan", "max_throughput", "finish_time_fairness"]
TIME, GPUS = 1e-6, 1e-6  # a violation: a job with this much time left, a type with this many idle GPUs


def instances(count: int, seed: int) -> list[Instance]:
    """Small instances in three regimes: tight (capacity binds), loose (few jobs per GPU:
    optimal faces are wide, as makespan's on an uncongested cluster), and single-type."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n, k = int(rng.integers(2, 16)), int(rng.integers(1, 4))
        inst = random_instance(rng, n, k)
        if i % 3 == 1:  # loose: several times the GPUs the jobs ask for
            inst = dataclasses.replace(inst, capacity=inst.capacity * rng.uniform(2, 6))
        slo = np.where(rng.random(n) < 0.3, rng.uniform(-1e3, 1e6, n), np.nan)
        if i % 4 == 2:  # a job with nothing left, which gets no idle GPUs
            inst = dataclasses.replace(inst, steps_remaining=np.where(np.arange(n) == 0, 0.0, inst.steps_remaining))
        out.append(dataclasses.replace(inst, price=rng.uniform(0.3, 3.0, k), slo=slo, time=0.0,
                                       entity=tuple(f"t{e}" for e in rng.integers(0, 3, n))))
    return out


def pair_use(inst: Instance, alloc) -> tuple[np.ndarray, np.ndarray]:
    """(time per job, GPUs per type) of the allocation's space-shared pairs, counted here."""
    time_, gpus = np.zeros(inst.n), np.zeros(inst.k)
    for (a, b), y in zip(alloc.pairs, alloc.pair_fractions):
        time_[a] += y.sum()
        time_[b] += y.sum()
        gpus += inst.scale_factor[a] * y
    return time_, gpus


def violations(inst: Instance, alloc) -> list[tuple[str, str]]:
    """(job, type) where the job has time left, runs on the type, has work left, and the
    type has idle GPUs."""
    X = alloc.fractions
    pt, pg = pair_use(inst, alloc)
    left = 1.0 - X.sum(axis=1) - pt
    idle = inst.capacity - inst.scale_factor @ X - pg
    done = np.nan_to_num(inst.steps_remaining, nan=1.0) <= 0
    bad = (left > TIME)[:, None] & (idle > GPUS * np.maximum(inst.capacity, 1.0))[None, :] & inst.available \
        & ~done[:, None]
    return [(inst.job_ids[m], inst.gpu_types[j]) for m, j in zip(*np.nonzero(bad))]


def check_feasible(inst: Instance, alloc) -> None:
    X = alloc.fractions
    pt, pg = pair_use(inst, alloc)
    assert (X >= 0).all() and (X[~inst.available] == 0).all()
    assert (X.sum(axis=1) + pt <= 1 + 1e-9).all()
    assert (inst.scale_factor @ X + pg <= inst.capacity * (1 + 1e-9) + 1e-9).all()


def objective(policy: str, inst: Instance, X: np.ndarray) -> float:
    """The policy's objective (to maximize), written from its math, not from the formulation modules' builds."""
    agnostic = policy.endswith("_agnostic")
    T = inst.throughput
    if policy.startswith("max_min_fairness"):
        return float((normalized_throughput(inst, agnostic) * X).sum(axis=1).min())
    if policy.startswith("makespan"):
        thr = ((type_blind(T) if agnostic else T) * X).sum(axis=1)
        live = inst.steps_remaining > 0
        return -float(np.max(inst.steps_remaining[live] / thr[live], initial=0.0))
    if policy.startswith("finish_time_fairness"):
        Tm = type_blind(T) if agnostic else T
        a, b = rho_coefficients(inst, Tm)
        thr = (Tm * X).sum(axis=1)
        return -float(np.max(np.where(b > 0, a + b / np.maximum(thr, 1e-300), a)))
    Tm = (T > 0).astype(float) if agnostic else T
    A = Tm / isolated_throughput(inst, Tm)[:, None]
    if policy.startswith("max_throughput"):
        return float((A * X).sum())
    if policy.startswith("proportional_fairness"):
        return float(inst.weight @ np.log((A * X).sum(axis=1)))
    if policy.startswith("min_cost"):
        return float((A / (inst.scale_factor[:, None] * inst.price[None, :]) * X).sum())
    raise AssertionError(policy)


def solve_twice(policy: str, inst: Instance, **options):
    """(the raw optimum, the filled allocation), both checked; the same solve underneath."""
    raw = solve_instance(inst, policy, fill_idle=False, **options)
    filled = solve_instance(inst, policy, **options)
    check_second_stage(inst, raw, filled)
    return raw, filled


def check_second_stage(inst: Instance, raw, filled) -> None:
    check_feasible(inst, filled)
    assert violations(inst, filled) == []
    u = filled.explanation["utilization"]
    assert u["total"] is None or u["total"] == pytest.approx(1.0, abs=1e-6)
    # Stage 1 is the same solve: the fill only raises its entries.
    assert (filled.fractions >= raw.fractions - 1e-12).all()
    assert np.array_equal(filled.pair_fractions, raw.pair_fractions)
    assert (filled.effective_throughput >= raw.effective_throughput * (1 - 1e-12) - 1e-12).all()
    assert filled.objective == raw.objective or (np.isnan(filled.objective) and np.isnan(raw.objective))


@pytest.mark.parametrize("policy", LP_POLICIES)
def test_lp_policies_leave_no_usable_gpu_idle_at_the_same_optimum(policy):
    for inst in instances(24, seed=7):
        raw, filled = solve_twice(policy, inst)
        if raw.status.startswith("optimal") and "slo_dropped" not in raw.explanation:
            before, after = objective(policy, inst, raw.fractions), objective(policy, inst, filled.fractions)
            # Never worse (and an optimum cannot become better beyond the solver's tolerance).
            assert after >= before - 1e-7 * max(1.0, abs(before)), (policy, before, after)
            assert after <= before + 1e-5 * max(1.0, abs(before)), (policy, before, after)


@pytest.mark.parametrize("policy", PROCEDURES)
def test_water_filling_family_leaves_no_usable_gpu_idle(policy):
    for inst in instances(12, seed=11):
        raw, filled = solve_twice(policy, inst)
        # Leximin: the sorted normalized shares do not fall.
        A = normalized_throughput(inst, policy.endswith("_agnostic"))
        s0, s1 = np.sort((A * raw.fractions).sum(axis=1)), np.sort((A * filled.fractions).sum(axis=1))
        assert (s1 >= s0 - 1e-9 * np.maximum(s0, 1.0)).all()


@pytest.mark.parametrize("policy", PACKING)
def test_space_sharing_pairs_keep_their_fractions_and_count_as_used(policy):
    from optsched.bench.instances import packing

    for seed in range(4):
        inst = packing(12, seed=seed, pairs_per_job=4, k=2)
        inst = dataclasses.replace(inst, capacity=inst.capacity * (1 + 3 * (seed % 2)))
        solve_twice(policy, inst, packing=True)


def test_pop_fills_idle_gpus_across_groups():
    from optsched.pop import solve_maybe_partitioned

    for inst in instances(6, seed=5)[1::3]:  # the loose ones
        for policy in ("makespan", "max_min_fairness"):
            alloc = solve_maybe_partitioned(inst, policy, 2, workers=1)
            check_feasible(inst, alloc)
            assert violations(inst, alloc) == []


def test_the_raw_vertex_of_makespan_on_an_uncongested_cluster_leaves_gpus_idle():
    """The issue's case in small: the detector above finds idle usable GPUs in the raw optimum
    (so the tests above can fail) and utilization reports them; the fill removes them."""
    from optsched.bench.instances import rigid

    inst = rigid(200, 3, seed=1)  # 0.5 GPUs per job: capacity does not bind
    raw = solve_instance(inst, "makespan", "ipm", fill_idle=False)  # the exact uncongested shortcut: a vertex
    filled = solve_instance(inst, "makespan", "ipm")
    assert raw.explanation["backend"] == "uncongested"
    assert violations(inst, raw) and raw.explanation["utilization"]["total"] < 0.9
    assert violations(inst, filled) == [] and filled.explanation["utilization"]["total"] == pytest.approx(1.0)
    assert objective("makespan", inst, filled.fractions) == pytest.approx(objective("makespan", inst, raw.fractions),
                                                                          rel=1e-9)


@pytest.mark.parametrize("seed", range(40))
def test_fill_idle_on_arbitrary_partial_allocations(seed):
    """The fill itself, from any feasible X (not an optimum): it only raises entries, stays
    feasible, leaves no violation, and does not depend on the order of the jobs."""
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, int(rng.integers(1, 40)), int(rng.integers(1, 5)))
    X = rng.random((inst.n, inst.k)) * inst.available * rng.uniform(0, 1.5)
    X /= np.maximum(X.sum(axis=1), 1.0)[:, None]
    X *= np.minimum(1.0, inst.capacity / np.maximum(inst.scale_factor @ X, 1e-12))[None, :]
    F = fill_idle(inst, X)
    alloc = type("A", (), {"fractions": F, "pairs": np.zeros((0, 2), int), "pair_fractions": np.zeros((0, inst.k))})
    check_feasible(inst, alloc)
    assert violations(inst, alloc) == [] and (F >= X).all()
    assert utilization(inst, F)["total"] in (None, 1.0)
    perm = rng.permutation(inst.n)
    shuffled = dataclasses.replace(inst, job_ids=tuple(np.array(inst.job_ids)[perm]), throughput=inst.throughput[perm],
                                   scale_factor=inst.scale_factor[perm], steps_remaining=inst.steps_remaining[perm])
    np.testing.assert_allclose(fill_idle(shuffled, X[perm]), F[perm], rtol=1e-9, atol=1e-12)


def test_fill_idle_is_a_flag_and_the_cli_reports_utilization():
    from typer.testing import CliRunner

    from optsched.cli import app
    from optsched.model import OptschedError

    snap = (Path(__file__).resolve().parents[1] / "examples" / "snapshot.json").read_text()
    with pytest.raises(OptschedError, match=r"^fill_idle: "):
        optsched.solve(snap, "makespan", fill_idle="no")
    runner = CliRunner()
    raw = json.loads(runner.invoke(app, ["solve", "--policy", "makespan", "--no-fill-idle", "--json"]).output)
    filled = json.loads(runner.invoke(app, ["solve", "--policy", "makespan", "--json"]).output)
    assert raw["objective"] == filled["objective"]
    assert raw["explanation"]["utilization"]["total"] < 1.0 == filled["explanation"]["utilization"]["total"]
    assert set(filled["explanation"]["utilization"]["by_type"]) == {"v100", "p100", "k80"}
    out = runner.invoke(app, ["solve", "--policy", "makespan"]).output
    assert "utilization of usable GPUs: 100.0 %" in out


def test_packing_by_model_class_program_is_filled():
    """The colocation-by-model path (packed_classes: a class program turned back into job pairs)."""
    from optsched.model import parse_snapshot
    from test_colocation_by_model import by_model

    for seed in range(3):
        snap = by_model(seed, 30, 4)
        snap["cluster"] = {"gpus": {t: 5 * w for t, w in snap["cluster"]["gpus"].items()}}  # room to spare
        inst = Instance.from_snapshot(parse_snapshot(json.dumps(snap)))
        raw, filled = solve_twice("max_min_fairness", inst, packing=True)
        assert filled.explanation["colocation"].startswith("every pair of jobs")
        assert seed == 2 or violations(inst, raw)  # (the raw class vertex leaves GPUs idle)
