"""What every fractional formulation shares: the Program a formulation returns
and the base constraints of DESIGN.md §4.

    X >= 0,   X[m, j] = 0 where job m cannot run on type j,
    Σ_j X[m, j] <= 1            (a job runs at most all of the time)
    Σ_m s_m X[m, j] <= W_j      (capacity of type j)

cvxpy is imported inside the functions that build cvxpy expressions: the
simulator's direct LP path (build_lp) uses only the numpy helpers here, and
importing cvxpy costs ~1.7 s per process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from optsched.model import Instance, OptschedError

if TYPE_CHECKING:
    import cvxpy as cp


@dataclass
class Program:
    problem: cp.Problem
    fractions: cp.Expression  # (n, k) time fractions of each job alone on each type
    capacity: cp.Constraint | None  # its dual is the price of a GPU of each type
    share: Callable[[np.ndarray], np.ndarray]  # per-job fairness metric of an allocation
    objective: Callable[[float], float] = lambda v: v  # problem value -> reported objective
    effective_throughput: Callable[[np.ndarray], np.ndarray] | None = None
    info: dict = field(default_factory=dict)
    # Space sharing: pair variables (then ``share`` is called as share(X, Y)).
    pairs: PairVariables | None = None
    # Documented fallback when the program is infeasible (e.g. SLOs that cannot
    # all be met): a builder of the relaxed program and a note for the status.
    relaxed: Callable[[], "Program"] | None = None
    relaxed_note: str = ""


def allocation_variable(inst: Instance) -> tuple[cp.Variable, list[cp.Constraint], cp.Constraint]:
    """X with the base constraints; returns (X, constraints, capacity constraint)."""
    import cvxpy as cp

    X = cp.Variable((inst.n, inst.k), nonneg=True, name="X")
    capacity = inst.scale_factor @ X <= inst.capacity
    constraints = [
        cp.sum(X, axis=1) <= 1,
        X <= inst.available.astype(float),
        capacity,
    ]
    return X, constraints, capacity


def heterogeneity_agnostic(throughput: np.ndarray) -> np.ndarray:
    """Every type a job can run on counts as throughput 1 (LAS without heterogeneity)."""
    return (throughput > 0).astype(float)


def equal_share_throughput(inst: Instance, throughput: np.ndarray) -> np.ndarray:
    """thr_equal_m = Σ_j T[m, j] W_j / Σ_j' W_j' (Gavel's proportional share)."""
    return throughput @ inst.capacity / max(inst.capacity.sum(), 1e-12)


def fallback_allocation(inst: Instance) -> np.ndarray:
    """Equal share of every usable type, then each type's column scaled down to
    fit its capacity. Always feasible; used when a solver fails or times out."""
    X = inst.equal_share()
    demand = inst.scale_factor @ X
    scale = np.where(demand > inst.capacity, inst.capacity / np.maximum(demand, 1e-12), 1.0)
    return X * scale[None, :]


# --------------------------------------------------------------------------
# Shared pieces of the policy family
# --------------------------------------------------------------------------


def type_blind(throughput: np.ndarray) -> np.ndarray:
    """Every usable type gets the job's mean usable throughput: the scheduler
    knows how fast a job is, but not that types differ. Used by the agnostic
    twins of policies whose objective is in seconds (finish-time fairness,
    makespan), where Gavel's all-ones matrix would mix steps with seconds."""
    usable = throughput > 0
    mean = throughput.sum(axis=1) / np.maximum(usable.sum(axis=1), 1)
    return np.where(usable, mean[:, None], 0.0)


def isolated_share(inst: Instance) -> np.ndarray:
    """Themis/Gavel isolated share: W_j / n GPUs of every usable type for each
    job, divided by its scale factor; rows scaled down to sum to at most 1."""
    X = np.where(inst.available, (inst.capacity / max(inst.n, 1))[None, :] / inst.scale_factor[:, None], 0.0)
    return X / np.maximum(X.sum(axis=1), 1.0)[:, None]


def isolated_throughput(inst: Instance, throughput: np.ndarray) -> np.ndarray:
    """thr_iso_m = Σ_j T[m, j] X^iso[m, j]."""
    return (throughput * isolated_share(inst)).sum(axis=1)


def require_steps_remaining(inst: Instance, policy: str) -> np.ndarray:
    """R_m for every job, or an OptschedError naming the first job without ``steps_total``."""
    missing = np.flatnonzero(np.isnan(inst.steps_remaining))
    if len(missing):
        m = int(missing[0])
        raise OptschedError(
            f"jobs[{m}].steps_total: policy {policy} needs the total steps of every job "
            f"(job {inst.job_ids[m]!r} has none)"
        )
    return inst.steps_remaining


def no_packing(policy: str, packing: bool) -> None:
    if packing:
        raise OptschedError(
            f"packing: policy {policy} does not support space sharing "
            "(use max_min_fairness, finish_time_fairness, makespan or max_throughput)"
        )


# --------------------------------------------------------------------------
# Space sharing (Gavel §3.1 "space sharing"): pair variables
# --------------------------------------------------------------------------
#
# A pair (m, m') packed on type j runs both jobs on the same s GPUs; they run
# at t_m and t_m' steps/s instead of T[m, j] and T[m', j]. Admission rule
# (documented in the README): the pair is a variable on type j only if
#   * both jobs can run on j and have the same scale factor (Gavel packs only
#     equal-width jobs: the GPUs are shared one for one), and
#   * packing beats time slicing: t_m / T[m, j] + t_m' / T[m', j] > 1
#     (time slicing the same GPUs gives each job a fraction f and 1 - f of its
#     solo speed: the normalized sum is exactly 1);
# and, so that the program stays near-linear in n, each job keeps only its
# ``max_partners`` best partners (ranked by the best normalized sum over types,
# ties by partner index); a pair survives if either member ranks it that high.


@dataclass
class PairVariables:
    """Y[p, j]: time fraction pair p runs packed on type j (0 where not admitted)."""

    pairs: np.ndarray  # (p, 2) job indices
    rate: np.ndarray  # (p, k, 2) packed throughput / solo throughput of each member
    admitted: np.ndarray  # (p, k) bool
    scale_factor: np.ndarray  # (p,)
    Y: cp.Variable
    first: object  # scipy.sparse (n, p): job m is pairs[p, 0]
    second: object  # scipy.sparse (n, p): job m is pairs[p, 1]

    def time(self) -> cp.Expression:
        """Per-job time in any pair: Σ_{p ∋ m} Σ_j Y[p, j]."""
        import cvxpy as cp

        per_pair = cp.sum(self.Y, axis=1)
        return (self.first + self.second) @ per_pair

    def gpus(self) -> cp.Expression:
        """Per-type GPUs the pairs use: Σ_p s_p Y[p, j]."""
        return self.scale_factor @ self.Y

    def coefficients(self, T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each member's packed throughput in the units of T (a policy's normalized matrix)."""
        a, b = self.pairs[:, 0], self.pairs[:, 1]
        return T[a] * self.rate[:, :, 0], T[b] * self.rate[:, :, 1]

    def throughput(self, T: np.ndarray) -> cp.Expression:
        """Per-job packed throughput: Σ_{p ∋ m} Σ_j c[p, j, role(m)] Y[p, j]."""
        import cvxpy as cp

        c0, c1 = self.coefficients(T)
        return self.first @ cp.sum(cp.multiply(c0, self.Y), axis=1) + self.second @ cp.sum(
            cp.multiply(c1, self.Y), axis=1
        )

    def throughput_value(self, T: np.ndarray, Y: np.ndarray) -> np.ndarray:
        c0, c1 = self.coefficients(T)
        return self.first @ (c0 * Y).sum(axis=1) + self.second @ (c1 * Y).sum(axis=1)


def admitted_pairs(inst: Instance, max_partners: int | None = 8) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Apply the admission rule; returns (pairs (p,2), rate (p,k,2), admitted (p,k))."""
    k = inst.k
    if len(inst.pairs) == 0 or inst.pair_throughput.size == 0:
        return np.zeros((0, 2), dtype=int), np.zeros((0, k, 2)), np.zeros((0, k), dtype=bool)
    a, b = inst.pairs[:, 0], inst.pairs[:, 1]
    Ta, Tb = inst.throughput[a], inst.throughput[b]
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.stack(
            [np.where(Ta > 0, inst.pair_throughput[:, :, 0] / Ta, 0.0), np.where(Tb > 0, inst.pair_throughput[:, :, 1] / Tb, 0.0)],
            axis=2,
        )
    gain = rate.sum(axis=2)
    ok = (Ta > 0) & (Tb > 0) & (inst.scale_factor[a] == inst.scale_factor[b])[:, None] & (gain > 1.0)
    keep = ok.any(axis=1)
    if max_partners is not None and keep.any():
        best = np.where(ok, gain, 0.0).max(axis=1)
        keep &= _top_partners(np.flatnonzero(keep), a, b, best, inst.n, max_partners)
    return inst.pairs[keep], np.where(ok[keep, :, None], rate[keep], 0.0), ok[keep]


def _top_partners(cand: np.ndarray, a: np.ndarray, b: np.ndarray, gain: np.ndarray, n: int, d: int) -> np.ndarray:
    """Mask over all pairs: candidate pairs ranked within the top d of either member."""
    job = np.concatenate([a[cand], b[cand]])
    other = np.concatenate([b[cand], a[cand]])
    pid = np.concatenate([cand, cand])
    order = np.lexsort((other, -gain[pid], job))  # by job, then gain desc, then partner
    job_sorted = job[order]
    start = np.searchsorted(job_sorted, np.arange(n))
    rank = np.arange(len(order)) - start[job_sorted]
    mask = np.zeros(len(a), dtype=bool)
    mask[pid[order][rank < d]] = True
    return mask


def pair_variables(inst: Instance, max_partners: int | None = 8) -> PairVariables | None:
    """Pair variables for the admitted pairs, or None when no pair is admitted."""
    import cvxpy as cp
    import scipy.sparse as sp

    pairs, rate, ok = admitted_pairs(inst, max_partners)
    p = len(pairs)
    if p == 0:
        return None
    cols = np.arange(p)
    first = sp.csr_matrix((np.ones(p), (pairs[:, 0], cols)), shape=(inst.n, p))
    second = sp.csr_matrix((np.ones(p), (pairs[:, 1], cols)), shape=(inst.n, p))
    Y = cp.Variable((p, inst.k), nonneg=True, name="Y")
    return PairVariables(pairs, rate, ok, inst.scale_factor[pairs[:, 0]], Y, first, second)


def packed_allocation_variable(
    inst: Instance, packing: bool = False, max_partners: int | None = 8
) -> tuple[cp.Variable, PairVariables | None, list[cp.Constraint], cp.Constraint]:
    """X (and pair variables Y when ``packing`` admits any pair) with the base
    constraints counting every combination containing m:

        Σ_j X[m, j] + Σ_{p ∋ m} Σ_j Y[p, j] <= 1,
        Σ_m s_m X[m, j] + Σ_p s_p Y[p, j] <= W_j,   Y[p, j] = 0 unless admitted.
    """
    import cvxpy as cp

    pv = pair_variables(inst, max_partners) if packing else None
    if pv is None:
        X, constraints, capacity = allocation_variable(inst)
        return X, None, constraints, capacity
    X = cp.Variable((inst.n, inst.k), nonneg=True, name="X")
    capacity = inst.scale_factor @ X + pv.gpus() <= inst.capacity
    constraints = [
        cp.sum(X, axis=1) + pv.time() <= 1,
        X <= inst.available.astype(float),
        pv.Y <= pv.admitted.astype(float),
        capacity,
    ]
    return X, pv, constraints, capacity


def job_throughput(A: np.ndarray, X: cp.Variable, pv: PairVariables | None = None) -> cp.Expression:
    """thr_m = Σ_j A[m, j] X[m, j] (+ every pair containing m), vectorized."""
    import cvxpy as cp

    thr = cp.sum(cp.multiply(A, X), axis=1)
    return thr if pv is None else thr + pv.throughput(A)


def job_throughput_value(A: np.ndarray, X: np.ndarray, pv: PairVariables | None = None, Y: np.ndarray | None = None) -> np.ndarray:
    thr = (A * X).sum(axis=1)
    if pv is not None and Y is not None:
        thr = thr + pv.throughput_value(A, Y)
    return thr
