"""Proportional fairness.

    maximize Σ_m w_m log(thr_m(X) / thr_m^iso)   subject to the base constraints,

with thr_m^iso the throughput of job m's isolated share (formulations.base);
the normalization only adds a constant, it makes the objective read as the
weighted sum of log speedups over the isolated share (0 = everyone gets
exactly their isolated share). ``agnostic=True`` replaces every usable
T[m, j] by 1.

The only non-linear policy. The linear part is the block LP's matrix form
(block_lp.to_matrix: time and capacity rows, X on allowed entries only); the
logarithms are n exponential cones handed to CLARABEL directly, built in one
vectorized step: with an epigraph variable u_m,

    maximize Σ_m w_m u_m   s.t.  (u_m, 1, Σ_j A[m, j] X[m, j]) ∈ K_exp,
    K_exp = {(x, y, z): y e^{x / y} ≤ z},   i.e.  u_m ≤ log thr_m,   A = T / thr^iso.

Every solver name solves it with CLARABEL (the only exponential-cone backend).
"""

from __future__ import annotations

import time

import numpy as np

from optsched.formulations.base import (
    Formulation,
    base_lp,
    heterogeneity_agnostic,
    isolated_throughput,
    no_packing,
    scale_unit,
)
from optsched.model import Instance
from optsched.checks import check_flag
from optsched.solvers.block_lp import BlockLP, BlockSolution, to_matrix


# What its solve imports (its own conic solve, whatever the solver option), loaded and timed
# as import_seconds before any timer: optsched/policy.py.
IMPORTS = ("clarabel", "scipy.sparse")


def build(inst: Instance, agnostic: bool = False, packing: bool = False) -> Formulation:
    no_packing("proportional_fairness", packing)
    agnostic = check_flag("agnostic", agnostic)
    T = heterogeneity_agnostic(inst.throughput) if agnostic else inst.throughput
    A = T / isolated_throughput(inst, T)[:, None]
    lp = base_lp(inst, A=A)
    return Formulation(
        lp=lp,
        share=lambda X, Y=None: np.log(np.maximum((A * X).sum(axis=1), 1e-300)),
        solver=lambda backend, time_limit: solve_log(lp, inst.weight.astype(float), time_limit),
    )


def solve_log(lp: BlockLP, w: np.ndarray, time_limit: float) -> BlockSolution:
    """maximize Σ_m w_m log(Σ_j A[m, j] X[m, j]) over the block LP's feasible set, with CLARABEL."""
    import clarabel
    import scipy.sparse as sp

    t0 = time.perf_counter()
    n, k = lp.n, lp.k
    _, A_ub, b_ub, _, ub, _ = to_matrix(lp)  # rows: time (n), capacity (k); columns vec(X)
    cols = np.flatnonzero(ub > 0)  # X on allowed entries only
    nx = len(cols)
    m_idx, j_idx = np.divmod(cols, k)
    G = A_ub[:, cols].tocoo()
    rows_lin = n + k
    # Variables v = [x (nx), u (n)]. Rows, as s = b − M v:
    #   linear:    s = b_ub − G x ≥ 0;   −x ≤ 0
    #   cone m:    s = (u_m, 1, Σ_j A[m, j] x_mj) ∈ K_exp  (rows r0 + 3m, +1, +2)
    r0 = rows_lin + nx
    I = np.concatenate([G.row, rows_lin + np.arange(nx), r0 + 3 * np.arange(n), r0 + 3 * m_idx + 2])
    J = np.concatenate([G.col, np.arange(nx), nx + np.arange(n), np.arange(nx)])
    V = np.concatenate([G.data, -np.ones(nx), -np.ones(n), -lp.A[m_idx, j_idx]])
    M = sp.csc_matrix((V, (I, J)), shape=(r0 + 3 * n, nx + n))
    b = np.concatenate([b_ub, np.zeros(nx), np.tile([0.0, 1.0, 0.0], n)])
    unit = scale_unit(w)  # weights of 1e9 (or 1e-9) left the gap test meaningless: 13.4 reported for 0
    q = np.concatenate([np.zeros(nx), -w / unit])
    cones = [clarabel.NonnegativeConeT(rows_lin + nx)] + [clarabel.ExponentialConeT()] * n
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.time_limit = float(time_limit)
    # The objective is flat at the optimum (X is accurate to ~√gap): close the gap further
    # than the default 1e-8 (measured on two jobs: X within 2e-5 at the default, 2e-8 here).
    settings.tol_gap_abs = settings.tol_gap_rel = 1e-12
    P = sp.csc_matrix((nx + n, nx + n))
    try:
        res = clarabel.DefaultSolver(P, q, M, b, cones, settings).solve()
        status = str(res.status)
    except Exception as e:  # a backend crash must not take the scheduler down
        res, status = None, f"{type(e).__name__}: {e}".splitlines()[0]
    seconds = time.perf_counter() - t0
    if status not in ("Solved", "AlmostSolved"):
        name = {"PrimalInfeasible": "infeasible", "MaxTime": "time_limit"}.get(status, "error")
        return BlockSolution(False, name, None, float("nan"), None, float("nan"), None, None, seconds, "clarabel",
                             message=f"CLARABEL: {status}")
    x = np.asarray(res.x)
    X = np.zeros((n, k))
    X[m_idx, j_idx] = np.clip(x[:nx], 0.0, None)
    value = float(w @ np.log(np.maximum((lp.A * X).sum(axis=1), 1e-300)))
    price = np.maximum(np.asarray(res.z)[n:rows_lin], 0.0) * unit  # Σ w log gained per GPU of each type
    return BlockSolution(True, "optimal", X, float("nan"), None, value, np.zeros(n), price, seconds, "clarabel")
