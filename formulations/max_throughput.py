"""Maximum total (normalized) throughput.

    maximize Σ_m thr_m(X) / thr_m^iso   subject to the base constraints,

thr_m^iso being the throughput of job m's isolated share (formulations.base:
W_j / n GPUs of every usable type over s_m), so a job counts by its speedup
over its isolated share and fast models do not dominate the sum. The objective
is "how many isolated shares' worth of progress the cluster makes". As a block
LP: objective C = A = T / thr^iso, no share rows. ``agnostic=True`` replaces
every usable T[m, j] by 1. ``packing=True`` adds the admitted pairs
(formulations.base) with objective c[p, j] = both members' normalized packed
throughputs: the LP then trades time slicing for packing.
"""

from __future__ import annotations

from optsched.formulations.base import (
    Formulation,
    base_lp,
    heterogeneity_agnostic,
    isolated_throughput,
    job_share,
    packing_pairs,
)
from optsched.model import Instance
from optsched.checks import check_flag


def build(inst: Instance, agnostic: bool = False, packing: bool = False, max_partners: int | None = 8) -> Formulation:
    agnostic = check_flag("agnostic", agnostic)
    T = heterogeneity_agnostic(inst.throughput) if agnostic else inst.throughput
    A = T / isolated_throughput(inst, T)[:, None]
    pk = packing_pairs(inst, packing, max_partners)
    pair_C = None if pk is None else pk.coefficients(A).sum(axis=2)
    return Formulation(
        lp=base_lp(inst, pk, A=A, C=A, has_row=None, pair_C=pair_C),
        share=lambda X, Y=None: job_share(A, X, pk, Y),
        packing=pk,
    )
