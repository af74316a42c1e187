"""Hadar (task-level heterogeneity): a job's s_m workers may span GPU types; a
synchronous job then runs at the pace of its slowest worker. MILP form, by the
type that is slowest (job m's speed is v[m, j] = T[m, j] / T*_m when j is its
slowest type; T*_m = max_j T[m, j], its best single type):

    y[m, j] ∈ {0,1}  job m runs with j as its slowest type (j usable: T[m, j] > 0)
    x[m, i] ∈ ℤ≥0    workers of job m on type i

    maximize   Σ_m w_m Σ_j v[m, j] y[m, j]
    subject to Σ_j y[m, j] ≤ 1
               Σ_i x[m, i] = s_m Σ_j y[m, j]                   (gang: all workers or none)
               x[m, i] ≤ s_m Σ_{j: T[m, i] ≥ T[m, j]} y[m, j]  (only types at least that fast)
               Σ_m x[m, i] ≤ W_i                                (capacity)

A solution's slowest used type is at least as fast as the one it names, so the
optimum is Hadar's (max Σ w_m · speed_m / T*_m with speed_m the minimum over the
types it uses). The earlier big-M form (z_m ≤ v[m, j] + 1 − u[m, j] per used
type) had the same optimum but a weak relaxation: 8.3 s for one 52-job round
of the built-in example trace, 66 s for its 156 solves; this form takes 0.73 s
and 23 s (tests check it against brute force and against the big-M form).
Speeds are fractions of each job's best: steps/s span 1e-12..1e15, and raw
steps/s in big-M rows made HiGHS call "no job runs" optimal. Everything is
vectorized (n × k variables). Fallback on a time limit: the LP relaxation's
order (Σ_j y[m, j]), each job placed greedily on its fastest types with room.
"""

from __future__ import annotations

import time

import numpy as np

from optsched.formulations.base import scale_unit
from optsched.model import Allocation, Instance
from optsched.checks import check_flag


def build(inst: Instance, relax: bool = False):
    """The MILP (or its LP relaxation); returns (problem, x, a, z): a and z are expressions."""
    import cvxpy as cp

    n, k = inst.n, inst.k
    T = inst.throughput
    usable = T > 0
    speed_of = T / best_speed(inst)[:, None]  # v[m, j]: the job's speed when j is its slowest type
    # at_least[m, i, j]: type i is at least as fast as type j for job m (both usable), so a job
    # whose slowest type is j may place workers on i.
    at_least = (T[:, :, None] >= T[:, None, :]) & usable[:, :, None] & usable[:, None, :]
    s = inst.scale_factor
    x = cp.Variable((n, k), integer=not relax, name="x")
    y = cp.Variable((n, k), boolean=not relax, name="y")
    a = cp.sum(y, axis=1)
    z = cp.sum(cp.multiply(speed_of, y), axis=1)
    cons = [
        x >= 0,
        *([y >= 0, y <= 1] if relax else []),
        y <= usable.astype(float),
        a <= 1,
        cp.sum(x, axis=1) == cp.multiply(s, a),
        *(x[:, i] <= cp.multiply(s, cp.sum(cp.multiply(at_least[:, i, :].astype(float), y), axis=1)) for i in range(k)),
        cp.sum(x, axis=0) <= inst.capacity,
    ]
    # weights relative to the largest when it is outside [1e-3, 1e3]: a lone job of weight 1e-9
    # gained 1e-9, under the MILP's tolerance, and never ran
    objective = cp.Maximize((inst.weight / scale_unit(inst.weight)) @ z)
    return cp.Problem(objective, cons), x, a, z


def best_speed(inst: Instance) -> np.ndarray:
    """T*_m, each job's best single-type steps/s; 1 for a job that runs nowhere (it gets no GPUs,
    and 0/0 made the whole program NaN)."""
    best = inst.throughput.max(axis=1)
    return np.where(best > 0, best, 1.0)


def greedy(inst: Instance, order: np.ndarray) -> np.ndarray:
    """Jobs in order; each takes its fastest types first while room remains."""
    free = inst.capacity.astype(float).copy()
    x = np.zeros((inst.n, inst.k), dtype=int)
    for m in order:  # fallback path only
        need = int(inst.scale_factor[m])
        types = [j for j in np.argsort(-inst.throughput[m]) if inst.throughput[m, j] > 0]
        if sum(free[j] for j in types) < need:
            continue
        for j in types:
            take = int(min(need, free[j]))
            x[m, j] += take
            free[j] -= take
            need -= take
            if need == 0:
                break
    return x


def speed(inst: Instance, x: np.ndarray) -> np.ndarray:
    """Steps/s of each job: its slowest used type (0 if not running)."""
    used = x > 0
    return np.where(used.any(axis=1), np.where(used, inst.throughput, np.inf).min(axis=1), 0.0)


# What allocate() imports, loaded (and timed as import_seconds) before its timer: optsched/policy.py.
IMPORTS = ("cvxpy", "highspy")


def allocate(inst: Instance, policy: str = "hadar", solver: str = "highs", time_limit: float = 60.0,
             force_fallback: bool = False, **_) -> Allocation:
    from optsched.solvers import solve as run

    force_fallback = check_flag("force_fallback", force_fallback)
    t0 = time.perf_counter()
    prob, x, a, z = build(inst)
    sol = run(prob, solver="highs", time_limit=time_limit) if not force_fallback else None
    if sol is not None and sol.ok and x.value is not None:
        X = np.rint(np.asarray(x.value)).astype(int)
        status = sol.status
    else:
        msg = sol.message if sol is not None else "forced"
        # The LP relaxation's a_m says which jobs deserve GPUs first.
        relaxed, _, a_lp, _ = build(inst, relax=True)
        lp = run(relaxed, solver="highs", time_limit=max(time_limit, 1.0))
        key = np.asarray(a_lp.value) if lp.ok and a_lp.value is not None else inst.weight / inst.scale_factor
        X = greedy(inst, np.argsort(-key, kind="stable"))
        status = f"fallback: {msg} (LP relaxation + greedy rounding)"
    thr = speed(inst, X)
    best = best_speed(inst)
    objective = float((inst.weight * thr / best).sum())
    return Allocation.of(
        inst, policy, (X > 0).astype(float), status, objective, time.perf_counter() - t0, thr,
        explanation={
            "capacity_used": {t: float(v) for t, v in zip(inst.gpu_types, X.sum(axis=0))},
            "capacity": {t: float(v) for t, v in zip(inst.gpu_types, inst.capacity)},
            "share_vs_equal": {jid: float(v) for jid, v in zip(inst.job_ids, thr / best)},
            "mixed_type_jobs": [inst.job_ids[m] for m in np.flatnonzero((X > 0).sum(axis=1) > 1)],
            "jobs_without_gpus": [inst.job_ids[m] for m in np.flatnonzero(X.sum(axis=1) == 0)],
        },
        gpu_counts=X,
    )
