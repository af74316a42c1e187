"""Proportional fairness.

    maximize Σ_m w_m log(thr_m(X) / thr_m^iso)   subject to the base constraints,

with thr_m^iso the throughput of job m's isolated share (formulations.base);
the normalization only adds a constant, it makes the objective read as the
weighted sum of log speedups over the isolated share (0 = everyone gets
exactly their isolated share). ``agnostic=True`` replaces every usable
T[m, j] by 1. Vectorized: one cp.log over the vector of throughputs.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np

from optsched.formulations.base import (
    Program,
    allocation_variable,
    heterogeneity_agnostic,
    isolated_throughput,
    no_packing,
)
from optsched.model import Instance


def build(inst: Instance, agnostic: bool = False, packing: bool = False) -> Program:
    no_packing("proportional_fairness", packing)
    T = heterogeneity_agnostic(inst.throughput) if agnostic else inst.throughput
    A = T / isolated_throughput(inst, T)[:, None]
    X, constraints, capacity = allocation_variable(inst)
    thr = cp.sum(cp.multiply(A, X), axis=1)
    return Program(
        problem=cp.Problem(cp.Maximize(inst.weight @ cp.log(thr)), constraints),
        fractions=X,
        capacity=capacity,
        share=lambda x: np.log(np.maximum((A * x).sum(axis=1), 1e-300)),
    )
