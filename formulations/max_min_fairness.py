"""Heterogeneity-aware max-min fairness (Gavel's LAS).

    maximize   min_m  Σ_j T[m, j] X[m, j] · s_m / (w_m · thr_equal_m)
    subject to the base constraints (formulations.base),

with thr_equal_m = Σ_j T[m, j] W_j / Σ_j W_j, the throughput job m would get from
an equal share of every type. ``agnostic=True`` replaces every usable T[m, j]
by 1: the heterogeneity-agnostic LAS baseline.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np

from optsched.formulations.base import (
    Program,
    allocation_variable,
    equal_share_throughput,
    heterogeneity_agnostic,
)
from optsched.model import Instance


def normalized_throughput(inst: Instance, agnostic: bool = False) -> np.ndarray:
    """Rows of T scaled so that X's row-product is job m's share relative to its equal share."""
    T = heterogeneity_agnostic(inst.throughput) if agnostic else inst.throughput
    coef = inst.scale_factor / (inst.weight * equal_share_throughput(inst, T))
    return T * coef[:, None]


def build(inst: Instance, agnostic: bool = False) -> Program:
    X, constraints, capacity = allocation_variable(inst)
    A = normalized_throughput(inst, agnostic)
    objective = cp.Maximize(cp.min(cp.sum(cp.multiply(A, X), axis=1)))
    return Program(
        problem=cp.Problem(objective, constraints),
        fractions=X,
        capacity=capacity,
        share=lambda x: (A * x).sum(axis=1),
    )


def build_lp(inst: Instance, agnostic: bool = False):
    """The same program in matrix form for the direct (cvxpy-free) path.

    Variables x = [vec(X) row-major (n·k), z]; minimize -z subject to

        z - Σ_j A[m, j] X[m, j] <= 0     (n rows: z is the minimum share)
        Σ_j X[m, j]             <= 1     (n rows)
        Σ_m s_m X[m, j]         <= W_j   (k rows: capacity, duals = prices)
        0 <= X[m, j] <= 1[job m can run on type j],   z free.
    """
    import scipy.sparse as sp

    from optsched.solvers.lp import MatrixProgram

    n, k = inst.n, inst.k
    A = normalized_throughput(inst, agnostic)
    nk = n * k
    rows = np.repeat(np.arange(n), k)  # row m of the share and time blocks
    cols = np.arange(nk)
    share_block = sp.csr_matrix((-A.reshape(-1), (rows, cols)), shape=(n, nk + 1))
    share_block = share_block + sp.csr_matrix((np.ones(n), (np.arange(n), np.full(n, nk))), shape=(n, nk + 1))
    time_block = sp.csr_matrix((np.ones(nk), (rows, cols)), shape=(n, nk + 1))
    cap_block = sp.csr_matrix((np.repeat(inst.scale_factor, k), (np.tile(np.arange(k), n), cols)), shape=(k, nk + 1))
    c = np.zeros(nk + 1)
    c[-1] = -1.0
    return MatrixProgram(
        c=c,
        A_ub=sp.vstack([share_block, time_block, cap_block]).tocsr(),
        b_ub=np.concatenate([np.zeros(n), np.ones(n), inst.capacity]),
        lb=np.concatenate([np.zeros(nk), [-np.inf]]),
        ub=np.concatenate([inst.available.astype(float).reshape(-1), [np.inf]]),
        fractions_shape=(n, k),
        capacity_rows=(2 * n, 2 * n + k),
        share=lambda x: (A * x).sum(axis=1),
        objective=lambda v: -v,
    )
