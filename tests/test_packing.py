"""Space sharing: pair throughputs in the snapshot, the admission rule, pair
variables in max_min_fairness / finish_time_fairness / makespan /
max_throughput checked against a naive loop model over every combination, and
packing never doing worse than time slicing alone."""

from __future__ import annotations

import dataclasses
import json

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import random_instance
from optsched.formulations.base import admitted_pairs
from optsched.model import Instance, OptschedError, parse_snapshot
from optsched.policy import solve_instance

PACKING = ["max_min_fairness", "finish_time_fairness", "makespan", "max_throughput"]
HIGHER_IS_BETTER = {"max_min_fairness": True, "max_throughput": True, "finish_time_fairness": False, "makespan": False}


def with_pairs(inst: Instance, rng: np.random.Generator, per_job: float = 2.0) -> Instance:
    """Random pairs (about ``per_job`` per job), packed rates 30–95 % of solo."""
    n, k = inst.n, inst.k
    m = max(int(n * per_job), 1)
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = a != b
    pairs = np.unique(np.sort(np.stack([a[keep], b[keep]], axis=1), axis=1), axis=0).reshape(-1, 2)
    frac = rng.uniform(0.3, 0.95, (len(pairs), k, 2))
    rates = frac * np.stack([inst.throughput[pairs[:, 0]], inst.throughput[pairs[:, 1]]], axis=2)
    return dataclasses.replace(inst, pairs=pairs, pair_throughput=rates)


def packed_instance(seed: int, n: int = 8, k: int = 2) -> Instance:
    rng = np.random.default_rng(seed)
    # Single-GPU jobs so that most pairs have equal widths and get admitted.
    return with_pairs(random_instance(rng, n, k, multi_gpu=False), rng)


# --------------------------------------------------------------------------
# Snapshot → Instance
# --------------------------------------------------------------------------


def snap(jobs_colocated: dict[str, dict], **extra) -> dict:
    jobs = [
        {"id": jid, "throughput": {"v100": 10.0, "k80": 4.0}, "steps_total": 1000, **({"colocated": c} if c else {})}
        for jid, c in jobs_colocated.items()
    ]
    return {"cluster": {"gpus": {"v100": 2, "k80": 2}}, "jobs": jobs, **extra}


def test_pairs_merge_both_jobs_views_in_index_order():
    data = snap({"a": {}, "b": {"a": {"v100": [7.0, 6.0]}}, "c": {"a": {"k80": [3.0, 2.5]}}})
    data["jobs"][0]["colocated"] = {"b": {"k80": [2.0, 3.0]}}
    inst = Instance.from_snapshot(parse_snapshot(data))
    assert inst.pairs.tolist() == [[0, 1], [0, 2]]
    k80, v100 = inst.gpu_types.index("k80"), inst.gpu_types.index("v100")
    assert inst.pair_throughput[0, v100].tolist() == [6.0, 7.0]  # b listed (t_b, t_a)
    assert inst.pair_throughput[0, k80].tolist() == [2.0, 3.0]  # a listed (t_a, t_b)
    assert inst.pair_throughput[1, k80].tolist() == [2.5, 3.0]


def test_conflicting_pair_views_are_rejected():
    data = snap({"a": {"b": {"v100": [7.0, 6.0]}}, "b": {"a": {"v100": [6.0, 9.0]}}})
    with pytest.raises(OptschedError, match=r"jobs\[1\]\.colocated\['a'\]\['v100'\]: \[6\.0, 9\.0\] disagrees"):
        Instance.from_snapshot(parse_snapshot(data))  # the job's own values, as written (no numpy reprs)


@pytest.mark.parametrize(
    "colocated, message",
    [
        ({"ghost": {"v100": [1.0, 1.0]}}, r"jobs\[0\]\.colocated: unknown job id 'ghost'"),
        ({"a": {"v100": [1.0, 1.0]}}, r"jobs\[0\]\.colocated: job 'a' cannot be packed with itself"),
        ({"b": {"a100": [1.0, 1.0]}}, r"jobs\[0\]\.colocated\['b'\]: unknown GPU type 'a100'"),
        ({"b": {"v100": [-1.0, 1.0]}}, r"jobs\[0\]\.colocated\['b'\]\['v100'\]: rates must be finite"),
        # A tiny positive rate is outside the documented range, like a throughput (5e-324 was solved).
        ({"b": {"v100": [5e-324, 1.0]}}, r"jobs\[0\]\.colocated\['b'\]\['v100'\]: rates must be finite: 0 or between"),
    ],
)
def test_pair_throughput_for_unknown_jobs_or_types_is_a_one_line_error(colocated, message):
    with pytest.raises(OptschedError, match=message):
        parse_snapshot(snap({"a": colocated, "b": {}}))


# --------------------------------------------------------------------------
# Admission rule
# --------------------------------------------------------------------------


def two_jobs(rates, scale_factors=(1.0, 1.0), capacity=(1.0,)) -> Instance:
    k = len(capacity)
    return Instance(
        job_ids=("a", "b"),
        gpu_types=tuple(f"t{j}" for j in range(k)),
        throughput=np.full((2, k), 10.0),
        scale_factor=np.array(scale_factors),
        weight=np.ones(2),
        capacity=np.array(capacity),
        steps_remaining=np.array([1000.0, 1000.0]),
        elapsed_time=np.zeros(2),
        attained_service=np.zeros(2),
        arrival_time=np.zeros(2),
        pairs=np.array([[0, 1]]),
        pair_throughput=np.array(rates, dtype=float).reshape(1, k, 2),
    )


def test_pair_is_admitted_only_when_packing_beats_time_slicing():
    assert len(admitted_pairs(two_jobs([[6.0, 5.0]]))[0]) == 1  # 0.6 + 0.5 > 1
    assert len(admitted_pairs(two_jobs([[5.0, 5.0]]))[0]) == 0  # exactly time slicing
    assert len(admitted_pairs(two_jobs([[6.0, 5.0]], scale_factors=(1.0, 2.0), capacity=(2.0,)))[0]) == 0  # unequal widths


def test_each_job_keeps_only_its_best_partners():
    n = 6  # job 0 pairs with everyone, gains rising with the partner index
    pairs = np.array([[0, m] for m in range(1, n)])
    gain = np.linspace(0.55, 0.95, n - 1)
    inst = dataclasses.replace(
        random_instance(np.random.default_rng(0), n, 1, multi_gpu=False), pairs=pairs, pair_throughput=np.zeros((n - 1, 1, 2))
    )
    inst.pair_throughput[:, 0, 0] = gain * inst.throughput[0, 0]
    inst.pair_throughput[:, 0, 1] = gain * inst.throughput[pairs[:, 1], 0]
    assert len(admitted_pairs(inst, max_partners=None)[0]) == n - 1
    # Each partner ranks its only pair first, so every pair survives the cap via the partner.
    assert len(admitted_pairs(inst, max_partners=1)[0]) == n - 1
    # Job 0's own top-2 are the two best; with a cap of 0 on partners nothing survives.
    assert len(admitted_pairs(inst, max_partners=0)[0]) == 0


# --------------------------------------------------------------------------
# Known answer, naive model, packing ≥ no packing
# --------------------------------------------------------------------------


def test_two_jobs_on_one_gpu_pack_instead_of_time_slicing():
    inst = two_jobs([[8.0, 8.0]])
    alone = solve_instance(inst, "max_min_fairness")
    packed = solve_instance(inst, "max_min_fairness", packing=True)
    assert alone.objective == pytest.approx(0.5, rel=1e-6)  # half the time each
    assert packed.objective == pytest.approx(0.8, rel=1e-6)  # both at 8 of 10 steps/s
    assert packed.pairs.tolist() == [[0, 1]]
    np.testing.assert_allclose(packed.pair_fractions, [[1.0]], atol=1e-6)
    np.testing.assert_allclose(packed.effective_throughput, [8.0, 8.0], rtol=1e-6)
    assert packed.to_dict()["packed_allocation"] == {"a+b": {"t0": pytest.approx(1.0, abs=1e-6)}}


def naive_packed_value(inst: Instance, policy: str) -> float:
    """Every single (m, j) and admitted pair (p, j) as its own scalar variable, constraints by loops."""
    n, k, T, s = inst.n, inst.k, inst.throughput, inst.scale_factor
    combos = []  # (members, type, packed rates or None)
    for m in range(n):
        for j in range(k):
            if T[m, j] > 0:
                combos.append(((m,), j, None))
    for p, (a, b) in enumerate(inst.pairs):
        for j in range(k):
            if T[a, j] > 0 and T[b, j] > 0 and s[a] == s[b]:
                ta, tb = inst.pair_throughput[p, j]
                if ta / T[a, j] + tb / T[b, j] > 1:
                    combos.append(((a, b), j, (ta, tb)))
    x = [cp.Variable(nonneg=True) for _ in combos]
    cons = []
    for m in range(n):
        cons.append(sum(x[c] for c, (mem, _, _) in enumerate(combos) if m in mem) <= 1)
    for j in range(k):
        cons.append(sum(s[mem[0]] * x[c] for c, (mem, jj, _) in enumerate(combos) if jj == j) <= inst.capacity[j])

    def thr(m):
        total = 0
        for c, (mem, j, rates) in enumerate(combos):
            if m in mem:
                total += x[c] * (T[m, j] if rates is None else rates[mem.index(m)])
        return total

    if policy == "max_min_fairness":
        equal = T @ inst.capacity / inst.capacity.sum()
        t = cp.Variable()
        cons += [thr(m) * s[m] / (inst.weight[m] * equal[m]) >= t for m in range(n)]
        return cp.Problem(cp.Maximize(t), cons).solve(solver=cp.HIGHS)
    iso = []
    for m in range(n):
        share = [inst.capacity[j] / n / s[m] if T[m, j] > 0 else 0.0 for j in range(k)]
        total = max(sum(share), 1.0)
        iso.append(sum(T[m, j] * share[j] / total for j in range(k)))
    if policy == "max_throughput":
        return cp.Problem(cp.Maximize(sum(thr(m) / iso[m] for m in range(n))), cons).solve(solver=cp.HIGHS)
    if policy == "makespan":
        z = cp.Variable()
        cons += [thr(m) >= inst.steps_remaining[m] * z for m in range(n)]
        return 1.0 / cp.Problem(cp.Maximize(z), cons).solve(solver=cp.HIGHS)
    if policy == "finish_time_fairness":
        rho = cp.Variable()
        for m in range(n):
            R, el = inst.steps_remaining[m], inst.elapsed_time[m]
            cons.append((el + R * cp.inv_pos(thr(m))) / (el + R / iso[m]) <= rho)
        return cp.Problem(cp.Minimize(rho), cons).solve(solver=cp.CLARABEL)
    raise AssertionError(policy)


@pytest.mark.parametrize("policy", PACKING)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_packed_optimum_matches_naive_combination_model(policy, seed):
    inst = packed_instance(seed)
    ours = solve_instance(inst, policy, packing=True, max_partners=None)
    assert ours.status.startswith("optimal"), ours.status
    assert ours.objective == pytest.approx(naive_packed_value(inst, policy), rel=1e-6)


@pytest.mark.parametrize("policy", PACKING)
def test_packing_never_does_worse_than_time_slicing(policy):
    for seed in range(6):
        inst = packed_instance(100 + seed, n=20, k=3)
        assert len(admitted_pairs(inst)[0]) > 0
        plain = solve_instance(inst, policy).objective
        packed = solve_instance(inst, policy, packing=True).objective
        if HIGHER_IS_BETTER[policy]:
            assert packed >= plain * (1 - 1e-6)
        else:
            assert packed <= plain * (1 + 1e-6)


@pytest.mark.parametrize("policy", PACKING)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 14), k=st.integers(1, 3))
def test_packed_allocation_respects_rows_and_capacity_with_pairs(policy, seed, n, k):
    rng = np.random.default_rng(seed)
    inst = with_pairs(random_instance(rng, n, k, multi_gpu=bool(seed % 2)), rng)
    alloc = solve_instance(inst, policy, packing=True)
    assert not alloc.status.startswith("fallback"), alloc.status
    X, P, Y = alloc.fractions, alloc.pairs, alloc.pair_fractions
    tol = 1e-7
    rows = X.sum(axis=1)
    for p, (a, b) in enumerate(P):
        rows[a] += Y[p].sum()
        rows[b] += Y[p].sum()
    assert (rows <= 1 + tol).all()
    used = inst.scale_factor @ X + (inst.scale_factor[P[:, 0]] @ Y if len(P) else 0.0)
    assert (used <= inst.capacity * (1 + tol) + tol).all()
    assert (X[~inst.available] == 0).all() and (Y >= 0).all()
    pairs_ok, _, ok = admitted_pairs(inst)
    admitted = {tuple(pq): ok[i] for i, pq in enumerate(pairs_ok)}
    for p, pq in enumerate(P):
        assert not (Y[p][~admitted[tuple(pq)]] > 0).any(), "time on a type where the pair is not admitted"


# --------------------------------------------------------------------------
# Gandiva-style packing baseline and the CLI
# --------------------------------------------------------------------------


def test_gandiva_packs_a_waiting_job_onto_a_running_one():
    inst = two_jobs([[8.0, 7.0]])  # one GPU: b waits under FIFO, then joins a
    alloc = solve_instance(inst, "gandiva")
    assert alloc.pairs.tolist() == [[0, 1]]
    np.testing.assert_allclose(alloc.fractions, [[0.0], [0.0]])
    np.testing.assert_allclose(alloc.pair_fractions, [[1.0]])
    np.testing.assert_allclose(alloc.effective_throughput, [8.0, 7.0])
    assert solve_instance(two_jobs([[5.0, 4.0]]), "gandiva").pairs.shape == (0, 2)  # not admitted: b waits


def test_cli_solve_with_packing_prints_packed_allocation(tmp_path):
    from typer.testing import CliRunner

    from optsched.cli import app

    data = snap({"a": {"b": {"v100": [8.0, 8.0], "k80": [3.0, 3.0]}}, "b": {}, "c": {}})
    data["cluster"]["gpus"] = {"v100": 1, "k80": 1}
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(app, ["solve", str(path), "--policy", "max_min_fairness", "--packing", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert "a+b" in out["packed_allocation"]
    assert out["explanation"]["pairs_admitted"] == 1
    bad = CliRunner().invoke(app, ["solve", str(path), "--policy", "proportional_fairness", "--packing"])
    assert bad.exit_code == 2 and "packing" in bad.output


# --------------------------------------------------------------------------
# Column generation's certificate (formulations.base.solve_packed)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_column_generation_certifies_its_gap_to_the_all_pairs_optimum(seed, monkeypatch):
    import optsched.formulations.base as B
    from optsched.bench import instances
    from optsched.formulations import max_min_fairness as mmf

    inst = instances.packing(24 + 6 * seed, seed, pairs_per_job=6, k=2 + seed % 2)
    exact = naive_packed_value(inst, "max_min_fairness")  # every combination its own variable, HiGHS via cvxpy
    # A start far from the optimum (one pair per job, one added per job and round):
    # the certificate, not the start, must decide when to stop.
    monkeypatch.setattr(B, "CG_START_WITH_CAP", False)
    monkeypatch.setattr(B, "CG_START_PER_JOB", 1)
    monkeypatch.setattr(B, "CG_ADD_PER_JOB", 1)
    form = mmf.build(inst, packing=True)
    assert form.packing.candidates is not None and not form.packing.candidates.all()
    sol = form.solve("highs-ipm", 60.0)
    assert sol.info["pair_rounds"] >= 2  # pricing added columns before the bound closed
    bound, gap = sol.info["pair_dual_bound"], sol.info["pair_gap_bound"]
    assert bound >= exact * (1 - 1e-7)  # a valid upper bound on the all-pairs optimum
    assert sol.value <= exact * (1 + 1e-7)
    assert gap <= B.CG_GAP and sol.value >= bound * (1 - gap) - 1e-9
    assert sol.value >= exact * (1 - B.CG_GAP)
    # Driven to zero gap, the certificate meets the all-pairs optimum.
    monkeypatch.setattr(B, "CG_GAP", 0.0)
    tight = mmf.build(inst, packing=True).solve("highs-ipm", 60.0)
    assert tight.value == pytest.approx(exact, rel=1e-6)
    assert tight.info["pair_dual_bound"] == pytest.approx(exact, rel=1e-5)


def test_dual_bound_holds_for_any_multipliers():
    import optsched.formulations.base as B
    from optsched.bench import instances
    from optsched.formulations import max_min_fairness as mmf

    inst = instances.packing(20, 5, pairs_per_job=5, k=2)
    exact = naive_packed_value(inst, "max_min_fairness")
    lp = mmf.build(inst, packing=True, max_partners=None).lp
    rng = np.random.default_rng(0)
    for scale in (1e-3, 1e-2, 1e-1, 1.0):  # weak duality: no multipliers ≥ 0 bound below the optimum
        lam, mu, pi = rng.random(inst.n) * scale, rng.random(inst.n) * scale, rng.random(inst.k) * scale
        assert B._dual_bound(lp, lam, mu, pi) >= exact * (1 - 1e-9)
    # The closed-form raise alone (no cover LP) is a bound too.
    B_cols = B.BOUND_LP_COLUMNS
    try:
        B.BOUND_LP_COLUMNS = 0
        assert B._dual_bound(lp, rng.random(inst.n), rng.random(inst.n), rng.random(inst.k)) >= exact * (1 - 1e-9)
    finally:
        B.BOUND_LP_COLUMNS = B_cols
