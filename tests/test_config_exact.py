"""The configuration MILP's shortcuts against an independent solve (formulations/configurations.py).

The Lagrangian bound must be the LP relaxation's value (HiGHS on the whole LP), the answer
within MIP_REL_GAP of the true optimum (HiGHS branch-and-cut to a zero gap on every pair),
never above it, and feasible; identical jobs merged into classes and the exact fill must
not lose the optimum.
"""

from __future__ import annotations

import numpy as np
import pytest

from optsched.formulations import configurations as C


def _problem(seed: int, n: int, k: int, copies: int = 1):
    rng = np.random.default_rng(seed)
    server = rng.choice([4, 8], k)
    capacity = np.array([float(s * rng.integers(1, 4)) for s in server])
    cfg = C.configurations(capacity, server)
    base = n // copies
    U = np.where(rng.random((base, len(cfg.gpus))) < 0.8, 0.0, 0.0)
    # concave-ish value in the GPU count, a speed per type, some pairs infeasible
    speed = rng.uniform(0.5, 2.0, (base, k))
    scal = rng.uniform(0.3, 0.95, base)
    U = speed[:, cfg.gpu_type] * cfg.gpus[None, :] ** scal[:, None] - rng.uniform(0.2, 1.5, (base, 1))
    U = np.where(rng.random(U.shape) < 0.15, 0.0, np.maximum(U, 0.0))
    U = np.repeat(U, copies, axis=0)[:n]
    return U, cfg, capacity


def _exact(U, cfg, capacity):
    import scipy.sparse as sp

    m, c = np.nonzero(U > 0)
    u = U[m, c]
    n, k = U.shape[0], len(capacity)
    jobs, cap = C._incidence(n, k, m, c, cfg)
    A = sp.vstack([jobs, cap]).tocsc()
    A.sort_indices()
    upper = np.concatenate([np.ones(n), capacity])
    _, _, lp = C._run_highs(C._highs_model(u, A, upper, False), 60.0, mip=False)
    status, y, best = C._run_highs(C._highs_model(u, A, upper, True), 60.0, mip=True, rel_gap=0.0)
    assert status == "optimal"
    return lp, best


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("copies", [1, 6])
def test_assignment_matches_the_full_milp_and_its_certificate(seed, copies):
    U, cfg, capacity = _problem(seed, 30, 2 + seed % 2, copies)
    lp, best = _exact(U, cfg, capacity)
    a = C.solve_assignment(U, cfg, capacity)
    assert a.status == "optimal"
    assert C._fits(a.choice, cfg, capacity)
    assert a.objective == pytest.approx(C._value(a.choice, U), rel=1e-12)
    # the Lagrangian bound is the LP relaxation's value, and it certifies the answer
    assert a.lp_bound == pytest.approx(lp, rel=1e-7, abs=1e-9)
    assert a.objective <= best + 1e-9
    # within the gap of the optimum (certified by the LP bound, or by branch-and-cut's own bound
    # when small instances have an integrality gap above it)
    assert a.objective >= best - C.MIP_REL_GAP * max(abs(best), 1.0) - 1e-9
    # zero gap asked: the optimum itself
    z = C.solve_assignment(U, cfg, capacity, rel_gap=0.0)
    assert z.objective == pytest.approx(best, rel=1e-9, abs=1e-9)


def test_prices_bound_every_choice_and_best_responses_are_exact():
    U, cfg, capacity = _problem(3, 40, 3)
    m, c = np.nonzero(C.undominated(U, cfg))
    p = C.Pairs.of(m, c, U[m, c], cfg, U.shape[0], capacity)
    rng = np.random.default_rng(0)
    lp, best = _exact(U, cfg, capacity)
    for _ in range(20):
        pi = rng.uniform(0, 1.0, len(capacity))
        D, value, usage, val, br, first = p.respond(pi)
        assert D >= lp - 1e-9  # weak duality at any prices
        # each job's best response by brute force
        for job in range(U.shape[0]):
            opts = [U[job, cc] - pi[cfg.gpu_type[cc]] * cfg.gpus[cc] for cc in range(len(cfg.gpus)) if U[job, cc] > 0]
            assert br[job] == pytest.approx(max([0.0] + opts), abs=1e-12)
    pi, D, lower, _ = C.lagrangian_prices(p)
    assert lower <= D + 1e-12 and D == pytest.approx(lp, rel=1e-7)


@pytest.mark.parametrize("seed", range(4))
def test_fill_and_class_milp_keep_choices_feasible(seed):
    U, cfg, capacity = _problem(seed, 30, 2, copies=5)
    m, c = np.nonzero(C.undominated(U, cfg))
    p = C.Pairs.of(m, c, U[m, c], cfg, U.shape[0], capacity)
    pi, D, _, _ = C.lagrangian_prices(p)
    _, _, _, val, br, _ = p.respond(pi)
    loss = br[p.m] - val
    ch, status = C._class_milp(p, loss <= 1e-9, br <= 1e-9, cfg, 60.0, force=False)
    assert ch is not None and C._fits(ch, cfg, capacity)
    filled = C._fill_exact(ch, p, pi, D, U, cfg)
    assert C._fits(filled, cfg, capacity) and C._value(filled, U) >= C._value(ch, U) - 1e-12
    # every pair allowed: the class MILP is the full MILP with copies merged
    every, _ = C._class_milp(p, np.ones(len(p.m), dtype=bool), np.ones(U.shape[0], dtype=bool), cfg, 60.0)
    assert C._value(every, U) == pytest.approx(_exact(U, cfg, capacity)[1], rel=1e-9, abs=1e-9)


def test_goodput_rows_up_to_each_jobs_limit_equal_the_full_search():
    """Rows are searched only up to the job's GPU limit (shared by identical jobs); every
    configuration a job may use has the full search's goodput and batch size."""
    import dataclasses

    from optsched.bench import instances
    from optsched.model import Instance, parse_snapshot

    inst = Instance.from_snapshot(parse_snapshot(instances.elastic_snapshot(4, 80, (("a", 64, 4), ("b", 64, 8)))))
    el = inst.elastic
    caps = np.random.default_rng(0).choice([1, 2, 4, 8, 16, 32], inst.n).astype(float)
    inst = dataclasses.replace(inst, elastic=dataclasses.replace(el, max_gpus=caps))
    gm = C.goodput_matrix(inst, cache=C.GoodputCache())
    cfg = gm.configs
    P = np.nan_to_num(gm.params[:, cfg.gpu_type, :], nan=1.0)
    shape = (inst.n, len(cfg.gpus))
    g, b, s = gm.model.optimize(np.broadcast_to(cfg.nodes, shape), np.broadcast_to(cfg.gpus, shape), params=P)
    use = gm.goodput > 0
    assert use.any() and not (use & (cfg.gpus[None, :] > caps[:, None])).any()
    np.testing.assert_array_equal(gm.goodput[use], g[use])
    np.testing.assert_array_equal(gm.atomic_bsz[use], b[use])
    np.testing.assert_array_equal(gm.accum_steps[use], s[use])
    # a job allowed more than its row-mates gets its own row, not theirs
    known = np.isfinite(P).all(axis=2) & (inst.throughput[:, cfg.gpu_type] > 0)
    within = (cfg.gpus[None, :] <= caps[:, None]) & known & (g > 0)
    assert (use == within).all()


def _neighbourhood_best(choice, U, cfg, capacity, job, D, du, target):
    """Brute force: every job keeps its configuration or makes one of its moves."""
    import itertools

    options = {int(m): [None] + list(np.flatnonzero(job == m)) for m in np.unique(job)}
    used = np.bincount(cfg.gpu_type[choice[choice >= 0]], weights=cfg.gpus[choice[choice >= 0]],
                       minlength=len(capacity))
    best = 0.0
    for combo in itertools.product(*options.values()):
        picked = [i for i in combo if i is not None]
        if picked and (used + D[picked].sum(axis=0) <= capacity + 1e-9).all():
            best = max(best, float(du[picked].sum()))
    return best


def _start_and_budget(U, cfg, capacity, p, pi, D, seed):
    """A feasible start that leaves room to exchange (greedy on a random order) and the largest
    loss budget whose neighbourhood brute force can enumerate."""
    rng = np.random.default_rng(seed)
    start = np.full(U.shape[0], -1)
    for job in rng.permutation(U.shape[0]):
        opts = np.flatnonzero(U[job] > 0)
        if len(opts):
            start[job] = rng.choice(opts)
            if not C._fits(start, cfg, capacity):
                start[job] = -1
    losses = np.sort(np.unique(p.respond(pi)[4][p.m] - p.respond(pi)[3]))
    budget = D - C._value(start, U)
    for b in losses[::-1]:
        job = C._joint_moves(start, p, pi, U, cfg, min(b, budget))[0]
        if np.prod(np.bincount(job) + 1.0) <= 20_000:
            return start, min(b, budget)
    return start, budget


@pytest.mark.parametrize("seed", range(6))
def test_joint_exchange_is_the_optimum_of_its_neighbourhood(seed, monkeypatch):
    """With a box as large as the cluster and every move kept, the exchange DP over all
    GPU types finds the best set of one-move-per-job changes (brute force over them);
    with the default box and pruning its answer is feasible and never worse than its input."""
    U, cfg, capacity = _problem(100 + seed, 6, 2 + seed % 2)
    m, c = np.nonzero(C.undominated(U, cfg))
    p = C.Pairs.of(m, c, U[m, c], cfg, U.shape[0], capacity)
    pi, D, _, _ = C.lagrangian_prices(p)
    start, budget = _start_and_budget(U, cfg, capacity, p, pi, D, seed)
    default = C._fill_joint(start, p, pi, D, U, cfg, budget)
    assert C._fits(default, cfg, capacity) and C._value(default, U) >= C._value(start, U) - 1e-12
    monkeypatch.setattr(C, "JOINT_SPAN", int(capacity.max()))
    monkeypatch.setattr(C, "JOINT_PER_KIND", 10**6)
    monkeypatch.setattr(C, "JOINT_STATES", 10**7)
    got = C._fill_joint(start, p, pi, D, U, cfg, budget)
    assert C._fits(got, cfg, capacity)
    moves = C._joint_moves(start, p, pi, U, cfg, budget)
    want = _neighbourhood_best(start, U, cfg, capacity, *moves)
    assert len(moves[0]) > 0
    assert C._value(got, U) - C._value(start, U) == pytest.approx(max(want, 0.0), abs=1e-9)


def _agnostic_problem(seed: int, n: int, k: int, copies: int = 1, limit: float = np.inf):
    """Values that depend on the GPU count only, the same on every type of one node size (Pollux's
    heterogeneity-unaware rows), many types: ties across types at one price."""
    rng = np.random.default_rng(seed)
    server = rng.choice([4, 8], k)
    capacity = np.array([float(s * rng.integers(1, 4)) for s in server])
    cfg = C.configurations(capacity, server)
    base = n // copies
    scal = rng.uniform(0.3, 0.95, base)
    U = rng.uniform(0.5, 2.0, (base, 1)) * cfg.gpus[None, :] ** scal[:, None] - rng.uniform(0.2, 1.0, (base, 1))
    U = np.where(rng.random((base, 1)) < 0.1, 0.0, np.maximum(U, 0.0))  # a few jobs that cannot run
    U[:, cfg.gpus > limit] = 0.0  # the jobs' GPU limit
    return np.repeat(U, copies, axis=0)[:n], cfg, capacity


@pytest.mark.parametrize("seed", range(12))
def test_many_types_assignment_is_within_the_gap_of_the_full_milp(seed):
    """8-10 GPU types (the greedy tie placement, the dimension-free and MILP exchanges, and the
    class MILP's all-at-best shortcut all in play): certified and within the gap of HiGHS's optimum."""
    make = _agnostic_problem if seed % 2 else _problem
    U, cfg, capacity = make(seed, 16, 8 + seed % 3, 1 + seed % 3)
    lp, best = _exact(U, cfg, capacity)
    a = C.solve_assignment(U, cfg, capacity, type_blind=make is _agnostic_problem)
    assert a.status == "optimal" and C._fits(a.choice, cfg, capacity)
    assert a.lp_bound == pytest.approx(lp, rel=1e-7, abs=1e-9)
    assert best - C.MIP_REL_GAP * max(abs(best), 1.0) - 1e-9 <= a.objective <= best + 1e-9


@pytest.mark.parametrize("seed", range(20))
def test_class_milp_all_at_best_is_its_optimum(seed, monkeypatch):
    """Where every tied job can have its best value, the class MILP skips HiGHS; the value is
    HiGHS's optimum of the same MILP (the shortcut switched off)."""
    U, cfg, capacity = _agnostic_problem(200 + seed, 20, 6 + seed % 4, 1 + seed % 3, limit=4)
    capacity = capacity * (1 + seed % 3)  # some rounds roomy enough for every job's best
    m, c = np.nonzero(C.undominated(U, cfg))
    p = C.Pairs.of(m, c, U[m, c], cfg, U.shape[0], capacity)
    pi, _, _, _ = C.lagrangian_prices(p)
    _, _, _, val, br, _ = p.respond(pi)
    allowed, none_ok = (br[p.m] - val <= 1e-2), (br <= 1e-2)
    fired, shortcut = [], C._all_at_best
    monkeypatch.setattr(C, "_all_at_best", lambda *a: fired.append(shortcut(*a)) or fired[-1])
    got, status = C._class_milp(p, allowed, none_ok, cfg, 60.0, force=False)
    monkeypatch.setattr(C, "_all_at_best", lambda *a: None)
    want, _ = C._class_milp(p, allowed, none_ok, cfg, 60.0, force=False, rel_gap=0.0, nodes=10**6)
    monkeypatch.undo()
    assert got is not None and C._fits(got, cfg, capacity)
    assert C._value(got, U) == pytest.approx(C._value(want, U), rel=1e-9, abs=1e-12)
    if seed % 3 == 2:  # three times the capacity: every tied job fits at its best
        assert not fired or fired[0] is not None


@pytest.mark.parametrize("seed", range(10))
def test_exchange_without_box_is_the_optimum_of_its_neighbourhood(seed, monkeypatch):
    """Many types: the exchange drops the types no set of moves can overfill and solves the
    rest as a MILP (JOINT_STATES too small for the DP's box forces it); with every move kept it
    is the best one-move-per-job exchange (brute force)."""
    U, cfg, capacity = (_agnostic_problem if seed % 2 else _problem)(300 + seed, 6, 8 + seed % 3)
    m, c = np.nonzero(C.undominated(U, cfg))
    p = C.Pairs.of(m, c, U[m, c], cfg, U.shape[0], capacity)
    pi, D, _, _ = C.lagrangian_prices(p)
    start, budget = _start_and_budget(U, cfg, capacity, p, pi, D, seed)
    monkeypatch.setattr(C, "JOINT_PER_KIND", 10**6)
    monkeypatch.setattr(C, "JOINT_STATES", 1)
    got = C._fill_joint(start, p, pi, D, U, cfg, budget, certify=False)
    assert C._fits(got, cfg, capacity)
    moves = C._joint_moves(start, p, pi, U, cfg, budget)
    want = _neighbourhood_best(start, U, cfg, capacity, *moves)
    assert C._value(got, U) - C._value(start, U) == pytest.approx(max(want, 0.0), abs=1e-9)


@pytest.mark.parametrize("seed", range(10))
def test_certified_greedy_answers_are_certified(seed):
    """The greedy tie placement is kept only within the gap of the bound, so of the optimum."""
    U, cfg, capacity = (_agnostic_problem if seed % 2 else _problem)(400 + seed, 30, 8 + seed % 3, 1 + seed % 4)
    m, c = np.nonzero(C.undominated(U, cfg))
    p = C.Pairs.of(m, c, U[m, c], cfg, U.shape[0], capacity)
    pi, D, _, _ = C.lagrangian_prices(p)
    _, _, _, val, br, _ = p.respond(pi)
    tol = C.MIP_REL_GAP * max(abs(D), 1.0)
    _, best = _exact(U, cfg, capacity)
    for per_type in (False, True):  # with the per-type exact fill first (Pollux's type-blind values)
        got = C._certified_greedy(p, br[p.m] - val <= 1e-9 * U.max(), br <= 1e-9 * U.max(), cfg, pi, D, U, tol,
                                  per_type)
        if got is not None:
            assert C._fits(got, cfg, capacity)
            assert best - tol - 1e-9 <= C._value(got, U) <= best + 1e-9
