"""Heterogeneity-aware max-min fairness (Gavel's LAS).

    maximize   z
    subject to Σ_j A[m, j] X[m, j] ≥ z      for every job m,   A[m, j] = T[m, j] · s_m / (w_m · thr_equal_m)
               the base constraints (formulations.base),

i.e. maximize min_m thr_m(X) · s_m / (w_m · thr_equal_m), with
thr_equal_m = Σ_j T[m, j] W_j / Σ_j W_j the throughput job m would get from an
equal share of every type. As a block LP: share rows A = normalized_throughput,
g = 1, c_z = 1. ``agnostic=True`` replaces every usable T[m, j] by 1: the
heterogeneity-agnostic LAS baseline. ``packing=True`` adds the admitted pairs
(formulations.base, space sharing) as pair columns: job m's share then also
counts every pair containing it, at its packed rate.
"""

from __future__ import annotations

import numpy as np

from optsched.formulations.base import (
    Formulation,
    base_lp,
    equal_share_throughput,
    heterogeneity_agnostic,
    job_share,
    packing_pairs,
    program_weights,
)
from optsched.model import Instance
from optsched.checks import check_flag


def normalized_throughput(inst: Instance, agnostic: bool = False) -> np.ndarray:
    """Rows of T scaled so that X's row-product is job m's share relative to its equal share."""
    agnostic = check_flag("agnostic", agnostic)
    T = heterogeneity_agnostic(inst.throughput) if agnostic else inst.throughput
    coef = inst.scale_factor / (inst.weight * equal_share_throughput(inst, T))
    return T * coef[:, None]


def build(inst: Instance, agnostic: bool = False, packing: bool = False, max_partners: int | None = 8) -> Formulation:
    w, unit = program_weights(inst.weight)  # the program's level z is unit × the reported one
    A = normalized_throughput(inst, agnostic) * (inst.weight / w)[:, None]
    pk = packing_pairs(inst, packing, max_partners)
    return Formulation(
        lp=base_lp(inst, pk, A=A, g=np.ones(inst.n), c_z=1.0),
        share=lambda X, Y=None: job_share(A, X, pk, Y) * (w / inst.weight),  # in the jobs' own weights
        packing=pk,
        unit=unit,
    )
