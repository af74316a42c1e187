"""Minimum makespan: finish all remaining work as early as possible.

    minimize max_m R_m / thr_m(X)
      ⇔  maximize z  s.t.  thr_m(X) ≥ R_m z  for every job with R_m > 0

(one LP, not Gavel's bisection over the makespan), makespan = 1 / z seconds.
As a block LP: share rows A[m] = T[m] · S / R_m on the jobs with work left,
g = 1, c_z = 1, where for conditioning z is measured in units of a typical
job's solo time S (median over jobs of R_m / max_j T[m, j]): z' = z S ≈ 1,
makespan = S / z'. ``agnostic=True`` uses each job's mean usable throughput on
every type (formulations.base.type_blind); its objective is then the makespan
under that type-blind model. ``packing=True`` adds the pair columns. Jobs with
nothing left do not constrain the program (no share row); with none left the
makespan is 0.
"""

from __future__ import annotations

import numpy as np

from optsched.formulations.base import Formulation, base_lp, job_share, packing_pairs, require_steps_remaining, type_blind
from optsched.model import Instance
from optsched.checks import check_flag


def build(inst: Instance, agnostic: bool = False, packing: bool = False, max_partners: int | None = 8) -> Formulation:
    R = require_steps_remaining(inst, "makespan")
    agnostic = check_flag("agnostic", agnostic)
    T = type_blind(inst.throughput) if agnostic else inst.throughput
    pk = packing_pairs(inst, packing, max_partners)
    live = R > 0
    if not live.any():
        return Formulation(lp=base_lp(inst, pk, A=np.zeros_like(T)), share=lambda X, Y=None: np.zeros(inst.n),
                           objective=lambda sol: 0.0, packing=pk)
    S = float(np.median(R[live] / T[live].max(axis=1)))
    A = np.where(live[:, None], T * S / np.where(live, R, 1.0)[:, None], 0.0)  # row m: S / (time to finish at full speed)
    return Formulation(
        lp=base_lp(inst, pk, A=A, g=np.ones(inst.n), c_z=1.0, has_row=live),
        # Share = progress rate relative to finishing by the makespan: the bottleneck jobs finish last.
        share=lambda X, Y=None: np.where(live, job_share(A, X, pk, Y), np.inf),
        objective=lambda sol: S / sol.z if sol.z > 0 else float("inf"),
        packing=pk,
    )
