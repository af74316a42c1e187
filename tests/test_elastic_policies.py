"""pollux / sia / hadar: exact MILPs checked against brute-force enumeration,
the LP-relaxation bound, capacity invariants and clear errors."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optsched.model import Instance, OptschedError, parse_snapshot
from optsched.policy import solve_instance


def elastic_snapshot(seed: int, n: int, types=(("a", 8, 4), ("b", 8, 8)), rigid: int = 0, elapsed=None) -> dict:
    """n elastic jobs with random 7-parameter models; `rigid` more with a fixed scale factor."""
    rng = np.random.default_rng(seed)
    jobs = []
    for i in range(n):
        base = np.array([rng.uniform(0.01, 0.1), rng.uniform(1e-4, 2e-3), rng.uniform(0.05, 0.4), rng.uniform(1e-3, 0.02),
                         rng.uniform(0.01, 0.1), rng.uniform(1e-4, 5e-3), rng.uniform(1.0, 3.0)])
        perf = {t: (base * np.r_[[rng.uniform(0.5, 2.0)] * 6, 1.0]).tolist() for t, _, _ in types if rng.random() < 0.8}
        if not perf:
            perf = {types[0][0]: base.tolist()}
        M0 = float(rng.choice([32, 64, 128]))
        jobs.append({
            "id": f"e{i}", "throughput": {t: float(rng.uniform(0.5, 3)) for t, _, _ in types},
            "elapsed_time": float(rng.uniform(0, 3000) if elapsed is None else elapsed),
            "goodput": {"perf_params": perf, "grad_sqr": float(rng.uniform(0.5, 5)), "grad_var": float(rng.uniform(0, 50)),
                        "init_batch_size": M0, "max_batch_size": M0 * float(rng.choice([4, 16, 64])),
                        "local_bsz": [8, 256], "num_restarts": int(rng.integers(0, 3))},
        })
    for i in range(rigid):
        jobs.append({"id": f"r{i}", "scale_factor": int(rng.choice([1, 2, 4])),
                     "throughput": {t: float(rng.uniform(0.5, 3)) for t, _, _ in types}, "elapsed_time": 100.0})
    servers = [{"id": f"{t}{s}", "gpu_type": t, "gpus": per} for t, W, per in types for s in range(W // per)]
    return {"cluster": {"gpus": {t: W for t, W, _ in types}, "servers": servers}, "jobs": jobs}


def instance(snap: dict) -> Instance:
    return Instance.from_snapshot(parse_snapshot(snap))


def brute_force(U: np.ndarray, cfg, capacity) -> float:
    """Every job: no configuration or one with U > 0; keep those within capacity."""
    options = [[-1] + [c for c in range(U.shape[1]) if U[m, c] > 0] for m in range(U.shape[0])]
    best = 0.0
    for choice in itertools.product(*options):
        used = np.zeros(len(capacity))
        value = 0.0
        for m, c in enumerate(choice):
            if c >= 0:
                used[cfg.gpu_type[c]] += cfg.gpus[c]
                value += U[m, c]
        if (used <= capacity).all():
            best = max(best, value)
    return best


def _capacity_ok(alloc, inst):
    assert alloc.gpu_counts is not None
    assert (alloc.gpu_counts.sum(axis=0) <= inst.capacity + 1e-9).all()
    assert ((alloc.fractions > 0) == (alloc.gpu_counts > 0)).all()


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 4))
def test_pollux_milp_matches_brute_force(seed, n):
    from optsched.formulations import pollux
    from optsched.formulations.configurations import goodput_matrix, restart_factor

    inst = instance(elastic_snapshot(seed, n, types=(("a", 8, 4),)))
    alloc = solve_instance(inst, "pollux", solver="highs")
    _capacity_ok(alloc, inst)
    # Independent objective: the generalized mean of speedups over every feasible choice.
    gm = goodput_matrix(inst)
    base = pollux.fair_share_goodput(inst, gm)
    sp = gm.goodput / base[:, None] * (2 / 8)  # 2 servers of 4 GPUs
    change = np.arange(sp.shape[1])[None, :] != gm.current[:, None]
    sp = np.where(change, sp * restart_factor(inst)[:, None], sp)
    best = -np.inf
    options = [[-1] + list(np.flatnonzero(gm.goodput[m] > 0)) for m in range(inst.n)]
    for choice in itertools.product(*options):
        used = sum(gm.configs.gpus[c] for c in choice if c >= 0)
        if used <= 8:
            s = np.array([sp[m, c] if c >= 0 else 0.0 for m, c in enumerate(choice)])
            best = max(best, np.mean((s + 1e-3) ** -1.0) ** -1.0)
    assert alloc.status == "optimal"
    assert alloc.objective == pytest.approx(best, rel=1e-6)


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 4), st.integers(0, 1))
def test_sia_milp_matches_brute_force(seed, n, rigid):
    from optsched.formulations import sia
    from optsched.formulations.configurations import goodput_matrix

    inst = instance(elastic_snapshot(seed, n, types=(("a", 4, 4), ("b", 8, 8)), rigid=rigid))
    alloc = solve_instance(inst, "sia", solver="highs")
    _capacity_ok(alloc, inst)
    gm = goodput_matrix(inst)
    U, _ = sia.utilities(inst, gm.goodput, gm.current, -0.5, 1.1)
    chosen = [(m, np.flatnonzero(
        (gm.configs.gpu_type == np.argmax(alloc.gpu_counts[m])) & (gm.configs.gpus == alloc.gpu_counts[m].max())
        & (gm.configs.nodes == alloc.nodes[m].max()))) for m in range(inst.n) if alloc.gpu_counts[m].any()]
    value = sum(U[m, c[0]] for m, c in chosen)
    assert value == pytest.approx(brute_force(U, gm.configs, inst.capacity), rel=1e-9, abs=1e-9)


def hadar_brute_force(inst: Instance) -> float:
    best_T = inst.throughput.max(axis=1)
    per_job = []
    for m in range(inst.n):
        s = int(inst.scale_factor[m])
        opts = [np.zeros(inst.k, dtype=int)]
        for x in itertools.product(range(s + 1), repeat=inst.k):
            x = np.array(x)
            if x.sum() == s and (inst.throughput[m][x > 0] > 0).all():
                opts.append(x)
        per_job.append(opts)
    best = 0.0
    for choice in itertools.product(*per_job):
        X = np.array(choice)
        if (X.sum(axis=0) <= inst.capacity).all():
            used = X > 0
            thr = np.where(used.any(axis=1), np.where(used, inst.throughput, np.inf).min(axis=1), 0.0)
            best = max(best, float((inst.weight * thr / best_T).sum()))
    return best


def hadar_big_m(inst: Instance) -> float:
    """Hadar's program in its big-M form (u[m, j]: job m uses type j; its speed z_m is
    at most every used type's), solved with HiGHS through cvxpy: an independent model
    of the same optimum, for instances too large to enumerate."""
    import cvxpy as cp

    n, k = inst.n, inst.k
    best = inst.throughput.max(axis=1)
    v = inst.throughput / best[:, None]
    s = inst.scale_factor
    x = cp.Variable((n, k), integer=True)
    u = cp.Variable((n, k), boolean=True)
    a = cp.Variable(n, boolean=True)
    z = cp.Variable(n, nonneg=True)
    cons = [x >= 0, cp.sum(x, axis=1) == cp.multiply(s, a), x <= cp.multiply(s[:, None], u),
            u <= (inst.throughput > 0).astype(float), z[:, None] <= v + (1 - u), z <= a,
            cp.sum(x, axis=0) <= inst.capacity]
    prob = cp.Problem(cp.Maximize(inst.weight @ z), cons)
    prob.solve(solver=cp.HIGHS, highs_options={"mip_rel_gap": 1e-9})
    return float(prob.value)


@pytest.mark.parametrize("seed", range(4))
def test_hadar_matches_its_big_m_form_on_larger_instances(seed):
    """Up to 40 jobs on up to 4 types, scale factors 1–8, some types unusable."""
    rng = np.random.default_rng(100 + seed)
    n, k = int(rng.integers(20, 41)), int(rng.integers(2, 5))
    T = rng.uniform(0.2, 5.0, (n, k)) * (rng.random((n, k)) < 0.8)
    T[T.max(axis=1) == 0, 0] = 1.0
    sf = rng.choice([1, 2, 4, 8], n, p=[0.5, 0.2, 0.2, 0.1]).astype(float)
    inst = Instance(job_ids=tuple(f"j{i}" for i in range(n)), gpu_types=tuple("abcd"[:k]), throughput=T,
                    scale_factor=sf, weight=rng.choice([1.0, 2.0, 5.0], n),
                    capacity=np.full(k, float(max(8, int(sf.sum() / (1.5 * k))))), steps_remaining=np.full(n, 1e4),
                    elapsed_time=np.zeros(n), attained_service=np.zeros(n), arrival_time=np.zeros(n))
    alloc = solve_instance(inst, "hadar", solver="highs")
    assert alloc.status == "optimal"
    _capacity_ok(alloc, inst)
    assert alloc.objective == pytest.approx(hadar_big_m(inst), rel=1e-5)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000))
def test_hadar_milp_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, k = 4, 2
    T = rng.uniform(0.5, 3.0, (n, k))
    T[rng.random((n, k)) < 0.2] = 0.0
    T[T.sum(axis=1) == 0, 0] = 1.0
    inst = Instance(job_ids=tuple(f"j{i}" for i in range(n)), gpu_types=("a", "b"), throughput=T,
                    scale_factor=rng.choice([1, 2, 3], n).astype(float), weight=rng.choice([1.0, 2.0], n),
                    capacity=np.array([3.0, 2.0]), steps_remaining=np.full(n, 1e4), elapsed_time=np.zeros(n),
                    attained_service=np.zeros(n), arrival_time=np.zeros(n))
    alloc = solve_instance(inst, "hadar", solver="highs")
    _capacity_ok(alloc, inst)
    rows = alloc.gpu_counts.sum(axis=1)
    assert ((rows == 0) | (rows == inst.scale_factor)).all()  # gang: all workers or none
    assert alloc.objective == pytest.approx(hadar_brute_force(inst), rel=1e-6, abs=1e-9)


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([1e-9, 1e7, 1e12]))
def test_hadar_is_the_same_program_at_any_throughput_scale(seed, scale):
    """Steps/s of 1e7 and more (the snapshot allows 1e15) made the big-M rows' coefficients so large that
    HiGHS called "no job runs" optimal; the program is now solved in fractions of each job's best speed."""
    rng = np.random.default_rng(seed)
    n, k = 4, 2
    T = rng.uniform(0.5, 3.0, (n, k)) * scale
    inst = Instance(job_ids=tuple(f"j{i}" for i in range(n)), gpu_types=("a", "b"), throughput=T,
                    scale_factor=rng.choice([1, 2], n).astype(float), weight=np.ones(n),
                    capacity=np.array([2.0, 2.0]), steps_remaining=np.full(n, 1e4), elapsed_time=np.zeros(n),
                    attained_service=np.zeros(n), arrival_time=np.zeros(n))
    alloc = solve_instance(inst, "hadar", solver="highs")
    assert alloc.status == "optimal" and alloc.gpu_counts.sum() > 0
    assert alloc.objective == pytest.approx(hadar_brute_force(inst), rel=1e-6)


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([1e-9, 1e-6, 1e6, 1e9]))
def test_hadar_is_the_same_program_at_any_weight_scale(seed, scale):
    """A lone job of weight 1e-9 gained 1e-9 in the MILP, under its tolerance: it never ran and
    a simulation stalled. Weights × c give the same choice (objective × c)."""
    rng = np.random.default_rng(seed)
    n, k = 4, 2
    inst = Instance(job_ids=tuple(f"j{i}" for i in range(n)), gpu_types=("a", "b"), throughput=rng.uniform(0.5, 3.0, (n, k)),
                    scale_factor=rng.choice([1, 2], n).astype(float), weight=rng.choice([1.0, 2.0], n),
                    capacity=np.array([2.0, 2.0]), steps_remaining=np.full(n, 1e4), elapsed_time=np.zeros(n),
                    attained_service=np.zeros(n), arrival_time=np.zeros(n))
    scaled = dataclasses.replace(inst, weight=inst.weight * scale)
    alloc = solve_instance(scaled, "hadar", solver="highs")
    assert alloc.status == "optimal" and alloc.gpu_counts.sum() > 0
    assert alloc.objective == pytest.approx(hadar_brute_force(inst) * scale, rel=1e-6)


def test_hadar_lets_a_job_span_types_when_no_single_type_fits():
    inst = Instance(job_ids=("big",), gpu_types=("a", "b"), throughput=np.array([[2.0, 1.0]]),
                    scale_factor=np.array([4.0]), weight=np.ones(1), capacity=np.array([2.0, 2.0]),
                    steps_remaining=np.ones(1), elapsed_time=np.zeros(1), attained_service=np.zeros(1),
                    arrival_time=np.zeros(1))
    alloc = solve_instance(inst, "hadar", solver="highs")
    assert alloc.gpu_counts.tolist() == [[2, 2]]
    assert alloc.effective_throughput[0] == pytest.approx(1.0)  # the slower type sets the pace
    assert alloc.explanation["mixed_type_jobs"] == ["big"]


@pytest.mark.parametrize("policy", ["pollux", "sia", "hadar"])
def test_fallback_is_feasible_and_within_the_lp_bound(policy):
    inst = instance(elastic_snapshot(7, 40, types=(("a", 32, 4), ("b", 16, 8)), rigid=10))
    exact = solve_instance(inst, policy, solver="highs")
    fb = solve_instance(inst, policy, solver="highs", force_fallback=True)
    for alloc in (exact, fb):
        _capacity_ok(alloc, inst)
    assert fb.status.startswith("fallback") and "LP relaxation" in fb.status
    if policy == "hadar":
        assert fb.objective <= exact.objective + 1e-9
        assert fb.objective >= 0.8 * exact.objective
    else:
        assert fb.explanation["milp_value" if policy == "pollux" else "lambda_n"] is not None


@pytest.mark.parametrize("policy", ["pollux", "sia"])
def test_milp_value_between_fallback_and_lp_relaxation(policy):
    from optsched.formulations import pollux, sia
    from optsched.formulations.configurations import goodput_matrix, restart_factor, solve_assignment

    inst = instance(elastic_snapshot(11, 60, types=(("a", 32, 4), ("b", 16, 8), ("c", 24, 8)), rigid=10))
    gm = goodput_matrix(inst)
    if policy == "sia":
        U, _ = sia.utilities(inst, gm.goodput, gm.current, -0.5, 1.1)
    else:
        base = pollux.fair_share_goodput(inst, gm)
        U = np.where(gm.goodput > 0, pollux.utilities(gm.goodput / base[:, None] * restart_factor(inst)[:, None], -1.0), 0)
    exact = solve_assignment(U, gm.configs, inst.capacity)  # (the LP bound is always computed)
    rounded = solve_assignment(U, gm.configs, inst.capacity, force_fallback=True)
    assert rounded.objective <= exact.objective + 1e-7 <= exact.lp_bound + 2e-6
    assert exact.objective >= exact.lp_bound * (1 - 2e-2)  # nearly integral (gap < 1 % measured here)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["pollux", "sia", "hadar"]))
def test_allocation_never_exceeds_capacity(seed, policy):
    inst = instance(elastic_snapshot(seed, 12, types=(("a", 8, 4), ("b", 16, 8)), rigid=4))
    alloc = solve_instance(inst, policy, solver="highs")
    _capacity_ok(alloc, inst)
    el = inst.elastic
    rigid = ~el.is_elastic
    got = alloc.gpu_counts.sum(axis=1)
    assert ((got[rigid] == 0) | (got[rigid] == inst.scale_factor[rigid])).all()
    assert (alloc.effective_throughput >= 0).all()


def test_job_with_no_feasible_configuration_is_a_clear_error():
    snap = elastic_snapshot(0, 2, types=(("a", 8, 4),))
    snap["jobs"][0]["goodput"]["min_gpus"] = 16
    with pytest.raises(OptschedError, match=r"jobs\[0\]: job 'e0' has no feasible configuration"):
        solve_instance(instance(snap), "sia", solver="highs")


def test_chosen_batch_size_is_reported_and_consistent():
    inst = instance(elastic_snapshot(3, 3, types=(("a", 8, 4),)))
    alloc = solve_instance(inst, "pollux", solver="highs")
    for jid, b in alloc.explanation["batch_size"].items():
        m = inst.job_ids.index(jid)
        assert b["batch_size"] == b["atomic_bsz"] * (b["accum_steps"] + 1) * alloc.gpu_counts[m].sum()
        assert inst.elastic.init_batch_size[m] <= b["batch_size"] <= inst.elastic.max_batch_size[m] * 1.01 + 256


def test_restart_penalty_keeps_the_current_configuration_of_a_young_job():
    snap = elastic_snapshot(5, 1, types=(("a", 8, 4),), elapsed=40.0)
    snap["jobs"][0]["goodput"]["current"] = {"a": [1, 1]}
    inst = instance(snap)
    stay = solve_instance(inst, "sia", solver="highs")
    free = solve_instance(inst, "sia", solver="highs", restart_penalty=False)
    assert stay.gpu_counts.sum() <= free.gpu_counts.sum()


def test_hadar_with_a_job_that_runs_nowhere_solves_the_others():
    """A throughput row of zeros made T / T* (and the objective) NaN: the whole round fell back."""
    inst = Instance(job_ids=("a", "b"), gpu_types=("x", "y"), throughput=np.array([[1.0, 2.0], [0.0, 0.0]]),
                    scale_factor=np.ones(2), weight=np.ones(2), capacity=np.array([1.0, 1.0]),
                    steps_remaining=np.full(2, 1e4), elapsed_time=np.zeros(2), attained_service=np.zeros(2),
                    arrival_time=np.zeros(2))
    alloc = solve_instance(inst, "hadar", solver="highs")
    assert alloc.status == "optimal" and alloc.objective == pytest.approx(1.0)
    assert alloc.gpu_counts.tolist() == [[0, 1], [0, 0]]


def test_a_configuration_milps_fallback_is_a_logged_warning(caplog):
    """A program's fallback was logged as a warning, sia's and pollux's were not (status only)."""
    import logging

    from importlib import resources

    inst = instance(resources.files("optsched").joinpath("data/example_snapshot.json").read_text())
    with caplog.at_level(logging.WARNING, logger="optsched.policy"):
        alloc = solve_instance(inst, "sia", solver="highs", time_limit=1e-6)
    assert alloc.status.startswith("fallback")
    assert any(r.levelno == logging.WARNING and "sia: fallback" in r.getMessage() for r in caplog.records)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["pollux", "sia", "optimus"]))
def test_an_elastic_job_only_gets_types_it_can_run_on(seed, policy):
    """pollux is type-agnostic by default with several types, and gave a job measured and
    rated only on v100 four p100s (its reference model was copied onto every type). Here no
    job is measured on two types, so nothing bootstraps a model onto another type (the
    documented cross-job estimate needs one): each job runs only where it was measured."""
    snap = elastic_snapshot(seed, 6)
    rng = np.random.default_rng(seed + 1)
    for job in snap["jobs"]:  # each job keeps one type: throughput and model there only
        t = str(rng.choice(["a", "b"]))
        job["throughput"] = {t: job["throughput"][t]}
        perf = job["goodput"]["perf_params"]
        job["goodput"]["perf_params"] = {t: perf.get(t, next(iter(perf.values())))}
    inst = instance(snap)
    alloc = solve_instance(inst, policy, solver="highs")
    used = alloc.gpu_counts if alloc.gpu_counts is not None else alloc.fractions
    assert (np.asarray(used)[~inst.available] == 0).all(), (alloc.status, used)
