"""Minimum makespan: finish all remaining work as early as possible.

    minimize max_m R_m / thr_m(X)
      ⇔  maximize z  s.t.  thr_m(X) ≥ R_m z  for every job with R_m > 0

(one LP, not Gavel's bisection over the makespan), makespan = 1 / z seconds.
As a block LP, each row in its own job's units so that its coefficients are
at most 1 whatever the steps and rates (1e15 steps beside 100 made a single
scale put 2e-10 and 1e5 in one program, and solvers dropped the small one):
with D_m = R_m / max_j T[m, j] the job's solo time on its best type and
D = max_m D_m, share rows A[m] = T[m] / max_j T[m, j], g_m = D_m / D,
c_z = 1; z' = z D ≤ 1, makespan = D / z'. A job whose solo time is under
G_FLOOR · D gets g_m = G_FLOOR (at least that fraction of its full speed
times z'): it still finishes by the makespan, and a solver's tolerance can
no longer read its row as empty and leave it with nothing. GPU prices are in
seconds of makespan saved per GPU (−dM/dW_j = D / z'² × z''s dual). ``agnostic=True`` uses each job's mean usable throughput on
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

G_FLOOR = 1e-6


def build(inst: Instance, agnostic: bool = False, packing: bool = False, max_partners: int | None = 8) -> Formulation:
    R = require_steps_remaining(inst, "makespan_agnostic" if agnostic else "makespan")
    agnostic = check_flag("agnostic", agnostic)
    T = type_blind(inst.throughput) if agnostic else inst.throughput
    pk = packing_pairs(inst, packing, max_partners)
    # a job that runs nowhere has no row (a snapshot refuses one; a hand-built Instance may hold it)
    live = (R > 0) & (T.max(axis=1, initial=0.0) > 0)
    if not live.any():
        return Formulation(lp=base_lp(inst, pk, A=np.zeros_like(T)), share=lambda X, Y=None: np.zeros(inst.n),
                           objective=lambda sol: 0.0, packing=pk)
    best = np.where(live, T.max(axis=1), 1.0)  # > 0 for a live job (see live)
    solo = np.where(live, R / best, 0.0)  # D_m
    D = float(solo.max())
    A = np.where(live[:, None], T / best[:, None], 0.0)  # fractions of the job's full speed
    ratio = solo / D
    g = np.where(live, np.maximum(ratio, G_FLOOR), 1.0)
    return Formulation(
        lp=base_lp(inst, pk, A=A, g=g, c_z=1.0, has_row=live),
        # Share = progress rate relative to finishing by the makespan: the bottleneck jobs finish last.
        share=lambda X, Y=None: np.where(live, job_share(A, X, pk, Y) / np.where(live, ratio, 1.0), np.inf),
        objective=lambda sol: D / sol.z if sol.z > 0 else float("inf"),
        # makespan = D / z: one GPU more shortens it by D / z² × z's dual (seconds per GPU)
        prices=lambda sol: None if sol.price is None or not sol.z > 0 else sol.price * D / sol.z ** 2,
        packing=pk,
    )
