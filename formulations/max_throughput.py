"""Maximum total (normalized) throughput.

    maximize Σ_m thr_m(X) / thr_m^iso   subject to the base constraints,

thr_m^iso being the throughput of job m's isolated share (formulations.base:
W_j / n GPUs of every usable type over s_m), so a job counts by its speedup
over its isolated share and fast models do not dominate the sum. The objective
is "how many isolated shares' worth of progress the cluster makes".
``agnostic=True`` replaces every usable T[m, j] by 1. ``packing=True`` adds the
admitted pairs (formulations.base): the LP then trades time slicing for packing.
"""

from __future__ import annotations

import cvxpy as cp

from optsched.formulations.base import (
    Program,
    heterogeneity_agnostic,
    isolated_throughput,
    job_throughput,
    job_throughput_value,
    packed_allocation_variable,
)
from optsched.model import Instance


def build(inst: Instance, agnostic: bool = False, packing: bool = False, max_partners: int | None = 8) -> Program:
    T = heterogeneity_agnostic(inst.throughput) if agnostic else inst.throughput
    A = T / isolated_throughput(inst, T)[:, None]
    X, pv, constraints, capacity = packed_allocation_variable(inst, packing, max_partners)
    return Program(
        problem=cp.Problem(cp.Maximize(cp.sum(job_throughput(A, X, pv))), constraints),
        fractions=X,
        capacity=capacity,
        share=lambda x, y=None: job_throughput_value(A, x, pv, y),
        pairs=pv,
    )
