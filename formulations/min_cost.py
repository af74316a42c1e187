"""Cost-aware allocation (Gavel's "minimize cost" and "cost with SLOs").

    maximize Σ_m Σ_j (T[m, j] / thr_m^iso) X[m, j] / (s_m · p_j)
    subject to the base constraints
    (slo=True)   thr_m(X) ≥ R_m / (slo_m − now)   for every job with a future deadline

p_j is the $/GPU-hour of type j (``cluster.price_per_hour``, required and > 0),
thr_m^iso the throughput of job m's isolated share (formulations.base), so the
objective is normalized progress bought per dollar-hour, summed over jobs
(Gavel's implementation divides T by the instance price the same way).
Documented behaviour with SLOs: a deadline already passed cannot be met, so
that job is scheduled without an SLO constraint and listed in
``explanation.slo_missed``; if the remaining SLOs cannot all be met together,
the program is solved without SLO constraints (as Gavel does) and the status
says so. A job with a deadline needs ``steps_total``.

As a block LP: objective C[m, j] = T[m, j] / (thr_m^iso s_m p_j) (divided by
its largest entry when that lies outside [1e-3, 1e3], as formulations.base's
scale_unit: prices of 1e4 $/h left a 1e-4 objective that CLARABEL stopped 30 %
short of), no z; each live SLO is a share row in fractions of the job's full
speed, Σ_j (T[m, j] / max_j T[m, j]) X[m, j] ≥ max(rate_m / max_j T[m, j],
SLO_FLOOR) with rate_m = R_m / (slo_m − now) the required steps/s: coefficients
at most 1 (T / rate reached 4e16 and HiGHS gave up), and a deadline needing
less than SLO_FLOOR of full speed still gets that much, which a solver's
tolerance cannot read as nothing.
"""

from __future__ import annotations

import numpy as np

from optsched.formulations.base import Formulation, base_lp, isolated_throughput, no_packing, scale_unit
from optsched.model import Instance, OptschedError
from optsched.checks import check_flag


SLO_FLOOR = 1e-6  # an SLO row asks at least this fraction of the job's full speed


def check_prices(gpu_types, price, hint: str = "; simulate, compare and sweep: --prices") -> None:
    """Cost-aware policies need a price > 0 for every GPU type (``price``: one per type,
    NaN where missing): one line naming the first that has none."""
    for t, p in zip(gpu_types, price):
        if not np.isfinite(p) or p <= 0:
            what = "is missing" if not np.isfinite(p) else f"must be > 0, got {p:g}"
            raise OptschedError(f"cluster.price_per_hour[{t!r}]: cost-aware policies need a price for every GPU type "
                                f"({what}{hint})")


def prices(inst: Instance) -> np.ndarray:
    price = np.full(inst.k, np.nan) if inst.price is None else inst.price
    check_prices(inst.gpu_types, price)
    return price


def slo_rates(inst: Instance) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(jobs with a live SLO, required steps/s for each, ids of jobs whose deadline passed)."""
    slo = np.full(inst.n, np.nan) if inst.slo is None else inst.slo
    has = np.isfinite(slo)
    missing = np.flatnonzero(has & np.isnan(inst.steps_remaining))
    if len(missing):
        m = int(missing[0])
        raise OptschedError(f"jobs[{m}].steps_total: job {inst.job_ids[m]!r} has an SLO, which needs its total steps")
    time_left = slo - inst.time
    live = has & (time_left > 0) & (np.nan_to_num(inst.steps_remaining) > 0)
    missed = [inst.job_ids[m] for m in np.flatnonzero(has & (time_left <= 0))]
    idx = np.flatnonzero(live)
    return idx, inst.steps_remaining[idx] / time_left[idx], missed


def build(inst: Instance, slo: bool = False, packing: bool = False, with_slos: bool = True) -> Formulation:
    no_packing("min_cost", packing)
    slo, with_slos = check_flag("slo", slo), check_flag("with_slos", with_slos)
    price = prices(inst)
    A = inst.throughput / isolated_throughput(inst, inst.throughput)[:, None]
    C = A / (inst.scale_factor[:, None] * price[None, :])
    unit = scale_unit(C.ravel())  # (the program's objective and prices are 1 / unit × the reported ones)
    B, lower, has_row = np.zeros_like(A), np.zeros(inst.n), np.zeros(inst.n, dtype=bool)
    info: dict = {}
    relaxed = None
    if slo:
        idx, rate, missed = slo_rates(inst)
        info["slo_missed"] = missed
        if with_slos and len(idx):
            best = inst.throughput[idx].max(axis=1)  # > 0: every job runs somewhere
            B[idx] = inst.throughput[idx] / best[:, None]
            lower[idx], has_row[idx] = np.maximum(rate / best, SLO_FLOOR), True
            relaxed = lambda: build(inst, slo=True, with_slos=False)  # noqa: E731
        if not with_slos:
            info["slo_dropped"] = True
    return Formulation(
        lp=base_lp(inst, A=B, C=C / unit, lower=lower, has_row=has_row),
        share=lambda X, Y=None: (A * X).sum(axis=1),
        info=info,
        unit=1.0 / unit,
        relaxed=relaxed,
        relaxed_note="SLOs cannot all be met: solved without SLO constraints",
    )
