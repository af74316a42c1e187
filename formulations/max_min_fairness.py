"""Heterogeneity-aware max-min fairness (Gavel's LAS).

    maximize   min_m  Σ_j T[m, j] X[m, j] · s_m / (w_m · thr_equal_m)
    subject to the base constraints (formulations.base),

with thr_equal_m = Σ_j T[m, j] W_j / Σ_j W_j, the throughput job m would get from
an equal share of every type. ``agnostic=True`` replaces every usable T[m, j]
by 1: the heterogeneity-agnostic LAS baseline. ``packing=True`` adds the
admitted pair variables (formulations.base, space sharing): job m's throughput
then also counts every pair containing it, at its packed rate.
"""

from __future__ import annotations

import cvxpy as cp
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
