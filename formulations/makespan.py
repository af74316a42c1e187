"""Minimum makespan: finish all remaining work as early as possible.

    minimize max_m R_m / thr_m(X)
      ⇔  maximize z  s.t.  thr_m(X) ≥ R_m z  for every job with R_m > 0

(one LP, not Gavel's bisection over the makespan), makespan = 1 / z seconds.
For conditioning the rows are divided by R_m and z is measured in units of
a typical job's solo time S (median over jobs of R_m / max_j T[m, j]):
z' = z S ≈ 1, makespan = S / z'. ``agnostic=True`` uses each job's mean usable
throughput on every type (formulations.base.type_blind); its objective is then
the makespan under that type-blind model. ``packing=True`` counts pairs.
Jobs with nothing left do not constrain the program; with none left the
makespan is 0.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np

from optsched.formulations.base import (
    Program,
    job_throughput,
    job_throughput_value,
    packed_allocation_variable,
    require_steps_remaining,
    type_blind,
)
from optsched.model import Instance


def build(inst: Instance, agnostic: bool = False, packing: bool = False, max_partners: int | None = 8) -> Program:
    R = require_steps_remaining(inst, "makespan")
    T = type_blind(inst.throughput) if agnostic else inst.throughput
    X, pv, constraints, capacity = packed_allocation_variable(inst, packing, max_partners)
    live = R > 0
    if not live.any():
        return Program(
            problem=cp.Problem(cp.Maximize(0), constraints),
            fractions=X,
            capacity=capacity,
            share=lambda x, y=None: np.zeros(inst.n),
            objective=lambda v: 0.0,
            pairs=pv,
        )
    S = float(np.median(R[live] / T[live].max(axis=1)))
    A = np.where(live[:, None], T * S / np.where(live, R, 1.0)[:, None], 0.0)  # row m: S / (time to finish at full speed)
    z = cp.Variable(name="z")
    thr = job_throughput(A, X, pv)
    constraints = constraints + [thr[np.flatnonzero(live)] >= z]
    return Program(
        problem=cp.Problem(cp.Maximize(z), constraints),
        fractions=X,
        capacity=capacity,
        # Share = progress rate relative to finishing by the makespan: the bottleneck jobs finish last.
        share=lambda x, y=None: np.where(live, job_throughput_value(A, x, pv, y), np.inf),
        objective=lambda v: S / v if v > 0 else float("inf"),
        pairs=pv,
    )
