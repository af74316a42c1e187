"""Finish-time fairness (Themis, NSDI'20), as Gavel makes it heterogeneity-aware.

    ρ_m(X) = (t_m^elapsed + R_m / thr_m(X)) / (t_m^iso + R_m / thr_m^iso)
    minimize max_m ρ_m(X)   subject to the base constraints,

with thr_m(X) = Σ_j T[m, j] X[m, j] (plus its pairs when packing), R_m the steps
left, thr_m^iso the throughput of the isolated share (W_j / n GPUs of every
usable type divided by s_m, rows normalized to ≤ 1: formulations.base), and
t_m^iso the cumulative time the job would have run in isolation
(``Job.isolated_time``; Gavel approximates it by the elapsed time, our
documented default when the snapshot lacks it). Writing ρ_m = a_m + b_m / thr_m
with a_m = t^elapsed / D_m, b_m = R_m / D_m, D_m = t^iso + R_m / thr^iso, the
program is one vectorized convex expression (inv_pos), no loop over jobs.
``agnostic=True`` uses each job's mean usable throughput on every type
(formulations.base.type_blind). A job with nothing left and no history has
D_m = 0: it does not constrain the program (a_m = b_m = 0).
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np

from optsched.formulations.base import (
    Program,
    isolated_throughput,
    job_throughput,
    job_throughput_value,
    packed_allocation_variable,
    require_steps_remaining,
    type_blind,
)
from optsched.model import Instance


def rho_coefficients(inst: Instance, T: np.ndarray, policy: str = "finish_time_fairness") -> tuple[np.ndarray, np.ndarray]:
    """(a, b) with ρ_m = a_m + b_m / thr_m."""
    R = require_steps_remaining(inst, policy)
    iso_time = inst.elapsed_time if inst.isolated_time is None else np.where(
        np.isnan(inst.isolated_time), inst.elapsed_time, inst.isolated_time
    )
    D = iso_time + R / isolated_throughput(inst, T)
    a = np.divide(inst.elapsed_time, D, out=np.zeros(inst.n), where=D > 0)
    b = np.divide(R, D, out=np.zeros(inst.n), where=D > 0)
    return a, b


def build(inst: Instance, agnostic: bool = False, packing: bool = False, max_partners: int | None = 8) -> Program:
    T = type_blind(inst.throughput) if agnostic else inst.throughput
    a, b = rho_coefficients(inst, T)
    # Scale rows so thr ~ 1 where the isolated share gives 1: ρ is invariant,
    # and the conic program stays well conditioned (T spans 1e-2..1e3 steps/s).
    scale = isolated_throughput(inst, T)
    A = T / scale[:, None]
    X, pv, constraints, capacity = packed_allocation_variable(inst, packing, max_partners)
    thr = job_throughput(A, X, pv)
    rho = a + cp.multiply(b / scale, cp.inv_pos(thr))
    return Program(
        problem=cp.Problem(cp.Minimize(cp.max(rho)), constraints),
        fractions=X,
        capacity=capacity,
        # Share = -ρ, so the bottleneck jobs (lowest share) are those with the largest ρ.
        share=lambda x, y=None: -_rho(a, b / scale, job_throughput_value(A, x, pv, y)),
        pairs=pv,
    )


def _rho(a: np.ndarray, b: np.ndarray, thr: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return a + np.where(b > 0, b / np.maximum(thr, 0.0), 0.0)
