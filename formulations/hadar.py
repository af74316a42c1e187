"""Hadar (task-level heterogeneity): a job's s_m workers may span GPU types; a
synchronous job then runs at the pace of its slowest worker. MILP form:

    x[m, j] ∈ ℤ≥0   workers of job m on type j        a_m ∈ {0,1}  job runs
    u[m, j] ∈ {0,1} job m uses type j                  z_m ≥ 0       its steps/s

    maximize   Σ_m w_m z_m / T*_m                      (T*_m = max_j T[m, j]: best single type)
    subject to Σ_j x[m, j] = s_m a_m                   (gang: all workers or none)
               x[m, j] ≤ s_m u[m, j],  u[m, j] = 0 where T[m, j] = 0
               z_m ≤ T[m, j] + T*_m (1 − u[m, j])     (slowest type used decides)
               z_m ≤ T*_m a_m
               Σ_m x[m, j] ≤ W_j                       (capacity)

T[m, j] are the job's steps/s at its scale factor on type j (the snapshot's
throughput), so a job entirely on type j runs at T[m, j] and a mixed job at the
minimum over the types it uses. The program is solved in z_m / T*_m (each job's
speed as a fraction of its best): steps/s span 1e-12..1e15, and a coefficient of
1e7 in a big-M row made HiGHS call "no job runs" optimal. Everything is vectorized (n × k variables).
Fallback on a time limit: the LP relaxation's a_m order, each job placed
greedily on its fastest types with room.
"""

from __future__ import annotations

import time

import numpy as np

from optsched.formulations.base import scale_unit
from optsched.model import Allocation, Instance
from optsched.checks import check_flag


def build(inst: Instance, relax: bool = False):
    """The MILP (or its LP relaxation); returns (problem, x, a, z)."""
    import cvxpy as cp

    n, k = inst.n, inst.k
    T = inst.throughput
    best = best_speed(inst)
    s = inst.scale_factor
    usable = (T > 0).astype(float)
    x = cp.Variable((n, k), integer=not relax, name="x")
    u = cp.Variable((n, k), boolean=not relax, name="u")
    a = cp.Variable(n, boolean=not relax, name="a")
    z = cp.Variable(n, nonneg=True, name="z")  # z_m / T*_m: the job's speed as a fraction of its best
    cons = [
        x >= 0,
        *([u >= 0, u <= 1, a >= 0, a <= 1] if relax else []),
        cp.sum(x, axis=1) == cp.multiply(s, a),
        x <= cp.multiply(s[:, None], u),
        u <= usable,
        z[:, None] <= T / best[:, None] + (1 - u),
        z <= a,
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
