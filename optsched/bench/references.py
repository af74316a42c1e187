"""Reference formulations, written here the naive or peer-style way (our code,
not the peers'), so the bench reports speed-ups as ratios from one run."""

from __future__ import annotations

import numpy as np

from optsched.model import Instance


def _normalized(inst: Instance) -> np.ndarray:
    from optsched.formulations.base import equal_share_throughput

    T = inst.throughput
    return T * (inst.scale_factor / (inst.weight * equal_share_throughput(inst, T)))[:, None]


def max_min_cvxpy(inst: Instance) -> float:
    """Gavel's MaxMinFairnessPolicyWithPerf: one vectorized cvxpy program, ECOS."""
    import cvxpy as cp

    X = cp.Variable((inst.n, inst.k), nonneg=True)
    cons = [cp.sum(X, axis=1) <= 1, X <= inst.available.astype(float), inst.scale_factor @ X <= inst.capacity]
    p = cp.Problem(cp.Maximize(cp.min(cp.sum(cp.multiply(_normalized(inst), X), axis=1))), cons)
    p.solve(solver=cp.ECOS)
    return float(p.value)


def packing_all_pairs(inst: Instance) -> float:
    """Max-min with every admissible pair a column (no candidate rule): the exact packed optimum."""
    from optsched.policy import solve_instance

    return solve_instance(inst, "max_min_fairness", packing=True, max_partners=None, time_limit=600.0).objective


def milp_before(inst: Instance, policy: str) -> float:
    """The configuration MILP as it ran before: goodput table rebuilt (no cache),
    every positive pair, LP then branch-and-cut to a 1e-6 relative gap."""
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
