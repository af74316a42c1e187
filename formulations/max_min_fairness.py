"""Heterogeneity-aware max-min fairness (Gavel's LAS).

    maximize   min_m  Σ_j T[m, j] X[m, j] · s_m / (w_m · thr_equal_m)
    subject to the base constraints (formulations.base),

with thr_equal_m = Σ_j T[m, j] W_j / Σ_j W_j, the throughput job m would get from
an equal share of every type. ``agnostic=True`` replaces every usable T[m, j]
by 1: the heterogeneity-agnostic LAS baseline. ``packing=True`` adds the
admitted pair variables (formulations.base, space sharing): job m's throughput
then also counts every pair containing it, at its packed rate.

``build`` is the cvxpy program; ``build_lp`` the same LP in matrix form for the
simulator's direct path, which never imports cvxpy (~1.7 s per process).
"""

from __future__ import annotations

import numpy as np

from optsched.formulations.base import (
    Program,
    allocation_variable,
    equal_share_throughput,
    heterogeneity_agnostic,
    job_throughput,
    job_throughput_value,
    packed_allocation_variable,
)
from optsched.model import Instance


def normalized_throughput(inst: Instance, agnostic: bool = False) -> np.ndarray:
    """Rows of T scaled so that X's row-product is job m's share relative to its equal share."""
    T = heterogeneity_agnostic(inst.throughput) if agnostic else inst.throughput
    coef = inst.scale_factor / (inst.weight * equal_share_throughput(inst, T))
    return T * coef[:, None]


def build(inst: Instance, agnostic: bool = False, packing: bool = False, max_partners: int | None = 8) -> Program:
    import cvxpy as cp

    A = normalized_throughput(inst, agnostic)
    if packing:
        X, pv, constraints, capacity = packed_allocation_variable(inst, True, max_partners)
    else:
        (X, constraints, capacity), pv = allocation_variable(inst), None
    objective = cp.Maximize(cp.min(job_throughput(A, X, pv)))
    return Program(
        problem=cp.Problem(objective, constraints),
        fractions=X,
        capacity=capacity,
        share=lambda x, y=None: job_throughput_value(A, x, pv, y),
        pairs=pv,
    )


def build_lp(inst: Instance, agnostic: bool = False, packing: bool = False, **_):
    """The same program (without packing) in matrix form for the direct,
    cvxpy-free path (solvers/lp.py; the simulator recomputes thousands of times).

    Variables x = [vec(X) row-major (n·k), z]; minimize -z subject to

        z - Σ_j A[m, j] X[m, j] <= 0     (rows 0..n-1: z is the minimum share)
        Σ_j X[m, j]             <= 1     (rows n..2n-1)
        Σ_m s_m X[m, j]         <= W_j   (rows 2n..2n+k-1: capacity, duals = prices)
        0 <= X[m, j] <= 1[job m can run on type j],   z free.

    A_ub is written column by column straight into CSC arrays: scipy's
    constructors and vstack cost ~0.5 ms per call on these ≤ 30-row LPs, more
    than the solve itself.
    """
    from optsched.solvers.lp import CscArrays, MatrixProgram

    if packing:
        raise NotImplementedError("build_lp: packing has no matrix form yet; use build()")
    n, k = inst.n, inst.k
    A = normalized_throughput(inst, agnostic)
    nk = n * k
    job = np.repeat(np.arange(n), k)  # column m·k+j holds X[m, j]
    gpu_type = np.tile(np.arange(k), n)
    # Column X[m, j], rows in increasing order: share row m (-A[m, j]; no entry
    # where A is 0), time row n+m (1), capacity row 2n+j (s_m). Column z: 1 in
    # every share row.
    a = A.reshape(-1)
    present = np.column_stack([a != 0, np.ones((nk, 2), dtype=bool)])
    row = np.column_stack([job, n + job, 2 * n + gpu_type])
    value = np.column_stack([-a, np.ones(nk), np.repeat(inst.scale_factor.astype(float), k)])
    per_column = np.append(present.sum(axis=1), n)
    indptr = np.concatenate([[0], np.cumsum(per_column)])
    indices = np.concatenate([row[present], np.arange(n)])
    data = np.concatenate([value[present], np.ones(n)])
    c = np.zeros(nk + 1)
    c[-1] = -1.0
    return MatrixProgram(
        c=c,
        A_ub=CscArrays(indptr, indices, data, 2 * n + k),
        b_ub=np.concatenate([np.zeros(n), np.ones(n), inst.capacity]),
        lb=np.concatenate([np.zeros(nk), [-np.inf]]),
        ub=np.concatenate([inst.available.astype(float).reshape(-1), [np.inf]]),
        fractions_shape=(n, k),
        capacity_rows=(2 * n, 2 * n + k),
        share=lambda x: (A * x).sum(axis=1),
        objective=lambda v: -v,
    )
