"""Finish-time fairness (Themis, NSDI'20), as Gavel makes it heterogeneity-aware.

    ρ_m(X) = (t_m^elapsed + R_m / thr_m(X)) / (t_m^iso + R_m / thr_m^iso)
    minimize max_m ρ_m(X)   subject to the base constraints,

with thr_m(X) = Σ_j T[m, j] X[m, j] (plus its pairs when packing), R_m the steps
left, thr_m^iso the throughput of the isolated share (W_j / n GPUs of every
usable type divided by s_m, rows normalized to ≤ 1: formulations.base), and
t_m^iso the cumulative time the job would have run in isolation
(``Job.isolated_time``; Gavel approximates it by the elapsed time, our
documented default when the snapshot lacks it). Write ρ_m = a_m + b_m / thr_m
with a_m = t^elapsed / D_m, b_m = R_m / D_m, D_m = t^iso + R_m / thr^iso.

Solved as a sequence of max-min block LPs, no conic program. For a fixed ρ
(above every a_m) the constraint ρ_m(X) ≤ ρ is linear, thr_m(X) ≥ b_m / (ρ − a_m),
so ρ is achievable exactly when

    v(ρ) = max_X min_m thr_m(X) · (ρ − a_m) / b_m  ≥ 1,

a max-min fairness LP (share rows A_m(ρ) = T_m (ρ − a_m) / b_m, g = 1,
c_z = 1; pairs as pair columns with the same row scaling). v is
nondecreasing in ρ, and the optimum is the smallest ρ with v(ρ) ≥ 1, found by
safeguarded root finding (Illinois regula falsi on v(ρ) − 1, bisection when
the secant leaves the bracket) on a bracket [lo, hi] that every solve also
tightens directly:
  * start: lo = max_m a_m + b_m / thr_m^max (each job alone with all it can
    use), hi = max_m ρ_m(X^iso) (the isolated share is feasible);
  * a solve with v(ρ) ≥ 1 returns X with max_m ρ_m(X) ≤ ρ: hi = max_m ρ_m(X);
  * a solve with v(ρ) < 1 proves v(ρ') ≤ v(ρ)(ρ' − a_max)/(ρ − a_max), so
    lo = a_max + (ρ − a_max)/v(ρ);
until hi − lo ≤ 1e-9 · hi or |v(ρ) − 1| ≤ 1e-8 (the LPs' own accuracy; at
most 30 solves; measured: 1 solve when the bound lo is feasible, else 6–10). The reported ρ is
max_m ρ_m of the returned X; GPU prices are the last LP's capacity duals
converted by the envelope theorem, dρ/dW_j = −price_j / Σ_m λ_m thr_m / b_m.
``agnostic=True`` uses each job's mean usable throughput on every type
(formulations.base.type_blind). A job with nothing left has b_m = 0: it has
no share row and ρ_m = a_m (0 without history).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from optsched.formulations.base import (
    Formulation,
    base_lp,
    isolated_share,
    isolated_throughput,
    job_share,
    packing_pairs,
    require_steps_remaining,
    type_blind,
)
from optsched.model import Instance
from optsched.checks import check_flag
from optsched.solvers import block_lp
from optsched.solvers.block_lp import BlockSolution

TOLERANCE = 1e-9  # stop when hi − lo ≤ TOLERANCE · hi ...
ROOT = 1e-8  # ... or when |v(ρ) − 1| ≤ ROOT: the LPs are solved to ~1e-8, ρ cannot be resolved further
FEASIBLE = 1e-6  # v(ρ) ≥ 1 − FEASIBLE counts as feasible: the IPM's z was seen 2e-7 low; hi is what X really achieves
MAX_SOLVES = 30
FLAT = 1e-9  # ρ − a_m below this fraction of ρ is rounding (cancellation in ρ − a_m: see rows_at)
MAX_COEF = 1e7  # a share row needs at least 1e-7 of the job's isolated throughput per unit of v


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


def build(inst: Instance, agnostic: bool = False, packing: bool = False, max_partners: int | None = 8) -> Formulation:
    agnostic = check_flag("agnostic", agnostic)
    T = type_blind(inst.throughput) if agnostic else inst.throughput
    a, b = rho_coefficients(inst, T, "finish_time_fairness_agnostic" if agnostic else "finish_time_fairness")
    # Rows in units of the isolated throughput (ρ is invariant): thr ~ 1.
    scale = isolated_throughput(inst, T)
    A = T / scale[:, None]
    b = b / scale
    pk = packing_pairs(inst, packing, max_partners)
    live = (b > 0) & (A.sum(axis=1) > 0)
    info: dict = {}

    def rows_at(rho: float):
        """The max-min block LP of v(ρ). A job whose ρ_m barely moves with its throughput
        (work left ~1e-19 of its history: a_m and ρ_m round to one float) would get a row
        of 0 and make every ρ look infeasible: ρ − a_m counts as at least FLAT · ρ (ρ_m
        within that of ρ, which the returned X's own ρ then reports), and its demand is at
        least 1 / MAX_COEF of its isolated throughput (a solver's tolerance cannot read it as 0)."""
        gap = np.maximum(rho - a, FLAT * abs(rho))
        coef = np.where(live, np.minimum(gap / np.where(live, b, 1.0), MAX_COEF), 0.0)
        return base_lp(inst, pk, A=A * coef[:, None], g=np.ones(inst.n), c_z=1.0, has_row=live)

    def rho_of(X, Y=None):
        return _rho(a, b, job_share(A, X, pk, Y))

    def solver(backend: str, time_limit: float) -> BlockSolution:
        return _root_find(inst, A, a, b, live, pk, rows_at, rho_of, backend, time_limit, info)

    return Formulation(
        lp=rows_at(1.0),
        # Share = -ρ, so the bottleneck jobs (lowest share) are those with the largest ρ.
        share=lambda X, Y=None: -rho_of(X, Y),
        objective=lambda sol: sol.value,
        info=info,
        packing=pk,
        solver=solver,
    )


def _root_find(inst, A, a, b, live, pk, rows_at, rho_of, backend, time_limit, info) -> BlockSolution:
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    n, k = inst.n, inst.k
    rest = float(np.max(a[~live], initial=0.0))  # ρ of jobs without a row: constant
    if not live.any():
        X = isolated_share(inst)
        Y = None if pk is None else np.zeros((len(pk.pairs), k))
        info["max_min_solves"] = 0
        return BlockSolution(True, "optimal", X, rest, Y, rest, np.zeros(n), np.zeros(k), time.perf_counter() - t0, backend)
    a_max = float(a[live].max())
    lo = float(np.max((a + b / np.maximum(_best_alone(inst, A, pk), 1e-300))[live]))
    hi = float(np.max(rho_of(isolated_share(inst))[live]))
    best: BlockSolution | None = None
    solves, seconds = 0, 0.0

    def value_at(rho: float):
        """Solve v(ρ); tighten lo or hi; return (solution, v(ρ) − 1 or None on failure)."""
        nonlocal solves, seconds, lo, hi, best
        sol = block_lp.solve(rows_at(rho), backend=backend, time_limit=max(deadline - time.perf_counter(), 1e-3))
        solves += 1
        seconds += sol.seconds
        if not sol.ok:
            return sol, None
        if sol.z >= 1.0 - FEASIBLE:  # (solver tolerance) hi is what the returned X achieves
            reached = float(np.max(rho_of(sol.X, sol.Y)[live]))
            if best is None or reached < hi:
                best, hi = sol, reached
        elif sol.z > 0:
            lo = max(lo, a_max + (rho - a_max) / sol.z)
        else:
            lo = max(lo, rho)
        return sol, sol.z - 1.0

    # Bracket: f(ρa) < 0 ≤ f(ρb), f = v − 1.
    sol, fa = value_at(lo)
    if fa is None:
        return _failed(sol, seconds, solves, info)
    ra = lo
    if best is not None:  # every job at its own best at once: lo is optimal
        return _finish(best, rest, live, b, A, pk, rho_of, seconds, solves, info)
    rb = hi
    sol, fb = value_at(hi)
    if fb is None or best is None:
        return _failed(dataclasses.replace(sol, status="error", message=sol.message or "max-min LP at the isolated share's ρ below 1"),
                       seconds, solves, info)
    fb = max(fb, 0.0)
    if fb <= ROOT:  # the isolated share's ρ is already optimal
        return _finish(best, rest, live, b, A, pk, rho_of, seconds, solves, info)
    side = 0
    while hi - lo > TOLERANCE * max(abs(hi), 1.0) and solves < MAX_SOLVES:
        if time.perf_counter() > deadline:
            return _failed(dataclasses.replace(sol, ok=False, status="time_limit",
                                               message=f"time limit of {time_limit:g}s reached"), seconds, solves, info)
        rc = (ra * fb - rb * fa) / (fb - fa) if fb != fa else 0.5 * (lo + hi)
        if not lo < rc < hi:
            rc = 0.5 * (lo + hi)
        sol, fc = value_at(rc)
        if fc is None:
            return _failed(sol, seconds, solves, info)
        if abs(fc) <= ROOT or abs(rc - (rb if fc >= 0 else ra)) <= 1e-12 * abs(rc):
            break  # v(ρ) = 1 to the LP's own accuracy (or no progress): ρ cannot be resolved further
        if fc >= 0:
            rb, fb = rc, fc
            if side == 1:
                fa /= 2  # Illinois: the other end has been kept twice
            side = 1
        else:
            ra, fa = rc, fc
            if side == -1:
                fb /= 2
            side = -1
    return _finish(best, rest, live, b, A, pk, rho_of, seconds, solves, info)


def _finish(best, rest, live, b, A, pk, rho_of, seconds, solves, info) -> BlockSolution:
    info["max_min_solves"] = solves
    rho = float(np.max(rho_of(best.X, best.Y)[live]))
    thr = job_share(A, best.X, pk, best.Y)
    slope = float(np.sum(np.where(live, best.share_dual * thr / np.where(live, b, 1.0), 0.0)))
    price = None if best.price is None or slope <= 0 else np.maximum(best.price, 0.0) / slope
    return dataclasses.replace(best, value=max(rho, rest), z=max(rho, rest), price=price, seconds=seconds)


def _failed(sol: BlockSolution, seconds: float, solves: int, info: dict) -> BlockSolution:
    info["max_min_solves"] = solves
    return dataclasses.replace(sol, ok=False, seconds=seconds)


def _best_alone(inst: Instance, A: np.ndarray, pk) -> np.ndarray:
    """An upper bound on job m's throughput (scaled units) in any allocation:
    its best rate per type (alone or packed), at most min(1, W_j / s_m) of
    the time on type j and at most all of the time in total."""
    best = A.copy()
    if pk is not None:
        coef = np.where(pk.admitted[:, :, None], pk.coefficients(A), 0.0)
        for role in (0, 1):
            np.maximum.at(best, pk.pairs[:, role], coef[:, :, role])
    best = np.where(inst.available, best, 0.0)
    reach = np.minimum(1.0, inst.capacity[None, :] / inst.scale_factor[:, None])  # time on j alone
    return np.minimum(best.max(axis=1), (best * reach).sum(axis=1))  # both bound Σ_j best_j x_j, Σ x ≤ 1, x_j ≤ reach_j


def _rho(a: np.ndarray, b: np.ndarray, thr: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):  # 0/0 for a finished job (b = 0, thr = 0) is masked
        return a + np.where(b > 0, b / np.maximum(thr, 0.0), 0.0)
