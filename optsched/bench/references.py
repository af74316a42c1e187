"""Reference formulations, written here the naive or peer-style way (our code,
not the peers'), so the bench reports speed-ups as ratios from one run on the
same instances. Each fractional reference returns (objective, X) so the bench
can report the reference allocation's utilization beside ours.

- max-min fairness: one vectorized cvxpy program, ECOS (as Gavel's
  ``MaxMinFairnessPolicyWithPerf``);
- finish-time fairness: a cvxpy expression per job with ``inv_pos`` built in a
  Python loop, ECOS (as Gavel's ``FinishTimeFairnessPolicyWithPerf``);
- makespan: bisection over the makespan with a feasibility LP per step (as
  Gavel's ``MinTotalDurationPolicyWithPerf``);
- water filling: per level one LP for the level and one MILP that finds the
  jobs that can still rise (as Gavel's ``MaxMinFairnessWaterFillingPolicyWithPerf``);
- sia: the configuration MILP without our shortcuts (goodput table rebuilt, every
  positive pair, branch-and-cut to a 1e-6 gap on HiGHS), as Sia solves it;
- pollux: a genetic algorithm over each job's configuration (population,
  crossover, mutation, repair to capacity), the search Pollux runs instead of a MILP.
"""

from __future__ import annotations

import numpy as np

from optsched.model import Instance


def _normalized(inst: Instance) -> np.ndarray:
    from optsched.formulations.base import equal_share_throughput

    T = inst.throughput
    return T * (inst.scale_factor / (inst.weight * equal_share_throughput(inst, T)))[:, None]


def _base(cp, inst: Instance):
    X = cp.Variable((inst.n, inst.k), nonneg=True)
    return X, [cp.sum(X, axis=1) <= 1, X <= inst.available.astype(float), inst.scale_factor @ X <= inst.capacity]


def _value(X) -> np.ndarray | None:
    return None if X.value is None else np.clip(np.asarray(X.value), 0.0, 1.0)


def max_min(inst: Instance) -> tuple[float, np.ndarray | None]:
    import cvxpy as cp

    X, cons = _base(cp, inst)
    p = cp.Problem(cp.Maximize(cp.min(cp.sum(cp.multiply(_normalized(inst), X), axis=1))), cons)
    p.solve(solver=cp.ECOS)
    return float(p.value), _value(X)


def max_min_cvxpy(inst: Instance) -> float:
    """Gavel-style max-min fairness (objective only)."""
    return max_min(inst)[0]


def finish_time_fairness(inst: Instance) -> tuple[float, np.ndarray | None]:
    import cvxpy as cp

    from optsched.formulations.base import isolated_throughput

    X, cons = _base(cp, inst)
    T, R = inst.throughput, inst.steps_remaining
    iso = isolated_throughput(inst, T)
    rhos = []
    for m in range(inst.n):  # Gavel's loop: one expression per job
        D = inst.elapsed_time[m] + R[m] / iso[m]
        rhos.append((inst.elapsed_time[m] + R[m] * cp.inv_pos(cp.sum(cp.multiply(T[m], X[m])))) / D)
    p = cp.Problem(cp.Minimize(cp.maximum(*rhos)), cons)
    p.solve(solver=cp.ECOS)
    return float(p.value), _value(X)


def makespan(inst: Instance, tol: float = 1e-3) -> tuple[float, np.ndarray | None]:
    import cvxpy as cp

    T, R = inst.throughput, inst.steps_remaining
    lo, hi = 0.0, float((R / T.max(axis=1)).sum())  # everything one after another
    best = None
    while hi - lo > tol * hi:
        mid = (lo + hi) / 2
        X, cons = _base(cp, inst)
        p = cp.Problem(cp.Minimize(0), cons + [cp.sum(cp.multiply(T, X), axis=1) >= R / mid])
        p.solve(solver=cp.ECOS)
        if p.status == "optimal":
            hi, best = mid, _value(X)
        else:
            lo = mid
    return hi, best


def water_filling(inst: Instance, eps: float = 1e-4) -> tuple[float, np.ndarray | None]:
    """The first (lowest) level, and the last level's allocation."""
    import cvxpy as cp

    A, w = _normalized(inst) * inst.weight[:, None], inst.weight
    frozen, level, first, X = np.zeros(inst.n, bool), np.zeros(inst.n), None, None
    while not frozen.all():
        U, F = np.flatnonzero(~frozen), np.flatnonzero(frozen)
        X, cons = _base(cp, inst)
        t = cp.Variable()
        share = cp.sum(cp.multiply(A, X), axis=1)
        cons += [share[F] >= level[F]] if len(F) else []
        cp.Problem(cp.Maximize(t), cons + [share[U] >= cp.multiply(w[U], t)]).solve(solver=cp.ECOS)
        t_r = float(t.value)
        first = t_r if first is None else first
        # Which unfrozen jobs can rise above the level? One MILP (Gavel's approach).
        X2, cons2 = _base(cp, inst)
        b = cp.Variable(len(U), boolean=True)
        share2 = cp.sum(cp.multiply(A, X2), axis=1)
        cons2 += [share2[F] >= level[F]] if len(F) else []
        cons2 += [share2[U] >= cp.multiply(w[U] * t_r, 1 + eps * b)]
        cp.Problem(cp.Maximize(cp.sum(b)), cons2).solve(solver=cp.HIGHS)
        stuck = U[np.round(b.value) < 0.5] if b.value is not None else U
        stuck = stuck if len(stuck) else U
        level[stuck], frozen[stuck] = t_r * w[stuck], True
    return first, _value(X)


def packing_all_pairs(inst: Instance) -> float:
    """Max-min with every admissible pair a column (no candidate rule): the exact packed optimum."""
    from optsched.policy import solve_instance

    return solve_instance(inst, "max_min_fairness", packing=True, max_partners=None, time_limit=600.0).objective


def milp_before(inst: Instance, policy: str) -> float:
    """The configuration MILP as it ran before (and as Sia solves it): goodput table rebuilt
    (no cache), every positive pair, LP then branch-and-cut to a 1e-6 relative gap."""
    import scipy.sparse as sp

    from optsched.formulations import configurations as C
    from optsched.formulations import pollux, sia

    gm = C.goodput_matrix(inst, agnostic=(policy == "pollux" and inst.k > 1), cache=C.GoodputCache())
    if policy == "sia":
        U, _ = sia.utilities(inst, gm.goodput, gm.current, -0.5, 1.1)
    else:
        U, _, _ = pollux.utility_matrix(inst, gm)
    m, c = np.nonzero(U > 0)
    u = U[m, c]
    n, k = U.shape[0], inst.k
    jobs, cap = C._incidence(n, k, m, c, gm.configs)
    A = sp.vstack([jobs, cap]).tocsc()
    A.sort_indices()
    upper = np.concatenate([np.ones(n), inst.capacity.astype(float)])
    _, lp, _ = C._run_highs(C._highs_model(u, A, upper, False), 60.0, mip=False)
    if lp is not None and np.all(np.minimum(np.abs(lp), np.abs(1 - lp)) < 1e-7):
        return float(u @ lp)
    _, y, value = C._run_highs(C._highs_model(u, A, upper, True), 60.0, mip=True, rel_gap=1e-6)
    return value


# Pollux's search settings (its scheduler runs a population of 100 for about 100 generations).
GA_POPULATION = 100
GA_GENERATIONS = 100


def pollux_ga(inst: Instance, seed: int = 0, population: int = GA_POPULATION,
              generations: int = GA_GENERATIONS) -> float:
    """Pollux's objective (Σ U of the MILP, ``milp_value``) maximized the way Pollux does it:
    a genetic algorithm over each job's configuration (uniform crossover, mutation to a random
    configuration or none, repair by dropping the least useful job per GPU on an over-full
    type, elitist selection), seeded with the running configurations. Returns the best Σ U."""
    from optsched.formulations import configurations as C
    from optsched.formulations import pollux

    gm = C.goodput_matrix(inst, agnostic=inst.k > 1, cache=C.GoodputCache())
    U, _, _ = pollux.utility_matrix(inst, gm)
    cfg, cap = gm.configs, inst.capacity.astype(float)
    rng = np.random.default_rng(seed)
    n, ncfg = U.shape
    options = [np.flatnonzero(U[m] > 0) for m in range(n)]

    def mutate(choice, rate):
        for m in np.flatnonzero(rng.random(n) < rate):
            choice[m] = rng.choice(options[m]) if len(options[m]) and rng.random() < 0.8 else -1
        return choice

    def repair(choice):
        while True:
            on = np.flatnonzero(choice >= 0)
            used = np.bincount(cfg.gpu_type[choice[on]], weights=cfg.gpus[choice[on]], minlength=len(cap))
            over = np.flatnonzero(used > cap + 1e-9)
            if not len(over):
                return choice
            mine = on[cfg.gpu_type[choice[on]] == over[0]]
            per_gpu = U[mine, choice[mine]] / cfg.gpus[choice[mine]]
            choice[mine[np.argmin(per_gpu + 1e-12 * rng.random(len(mine)))]] = -1

    def fitness(choice):
        on = choice >= 0
        return float(U[np.flatnonzero(on), choice[on]].sum())

    start = np.where(gm.current < ncfg, gm.current, -1)
    pop = [repair(start.copy())] + [repair(mutate(start.copy(), 0.5)) for _ in range(population - 1)]
    score = np.array([fitness(c) for c in pop])
    for _ in range(generations):
        children = []
        for _ in range(population):
            a, b = rng.choice(population, 2), rng.choice(population, 2)
            pa, pb = pop[a[np.argmax(score[a])]], pop[b[np.argmax(score[b])]]  # tournaments of two
            child = np.where(rng.random(n) < 0.5, pa, pb)
            children.append(repair(mutate(child, 1.0 / max(n, 1))))
        both = pop + children
        s = np.concatenate([score, [fitness(c) for c in children]])
        keep = np.argsort(-s, kind="stable")[:population]
        pop, score = [both[i] for i in keep], s[keep]
    return float(score.max())
