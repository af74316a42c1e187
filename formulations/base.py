"""What every fractional formulation shares: the Formulation a module's
``build(inst, **options)`` returns, the base constraints of docs/architecture.md §3, and
space sharing's pairs.

    X >= 0,   X[m, j] = 0 where job m cannot run on type j,
    Σ_j X[m, j] <= 1            (a job runs at most all of the time)
    Σ_m s_m X[m, j] <= W_j      (capacity of type j)

are exactly the time and capacity rows of a block LP (solvers/block_lp.py):
a formulation only chooses the share rows A, their right-hand sides, the
objective and (with packing) the pair columns. Nothing here imports cvxpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from optsched.model import Instance, OptschedError
from optsched.checks import check_flag, check_number
from optsched.solvers import block_lp
from optsched.solvers.block_lp import BlockLP, BlockSolution, PairBlock


@dataclass
class Formulation:
    """One policy's program in the form the solver eats, plus how to read it.

    ``lp`` is the block LP (for finish-time and proportional fairness, the
    linear part the custom ``solver`` starts from). ``share(X, Y)`` is the
    per-job metric of the explanation (lowest = bottleneck; Y = pair fractions
    or None); ``objective(sol)`` the reported objective of a solution;
    ``relaxed`` a builder of the documented fallback program when this one is
    infeasible (SLOs that cannot all be met)."""

    lp: BlockLP
    share: Callable[[np.ndarray, np.ndarray | None], np.ndarray]
    objective: Callable[[BlockSolution], float] = lambda sol: sol.value
    info: dict = field(default_factory=dict)
    packing: Packing | None = None
    relaxed: Callable[[], "Formulation"] | None = None
    relaxed_note: str = ""
    # A program that is not one block LP (a sequence of them, or conic rows):
    # solver(backend, time_limit) -> BlockSolution. None: block_lp.solve(lp).
    solver: Callable[[str, float], BlockSolution] | None = None
    # The program's level z and capacity prices are ``unit`` × the reported objective and prices
    # (max-min scales its weights so that z ~ 1 whatever their magnitude: see max_min_fairness).
    unit: float = 1.0
    # The reported GPU prices of a solution when they are not the program's duals / unit
    # (makespan: objective D / z, so prices are D / z² times the duals). None: sol.price / unit.
    prices: Callable[[BlockSolution], np.ndarray | None] | None = None

    def solve(self, backend: str, time_limit: float, warm=None) -> BlockSolution:
        """``warm``: (prices, level[, slacks]) of a similar program (block_lp.solve), in reported units."""
        if warm is not None and self.unit != 1.0:
            warm = (np.asarray(warm[0]) * self.unit, warm[1] * self.unit, *warm[2:])
        if self.solver is not None:
            return self.solver(backend, time_limit)
        if self.packing is not None and self.packing.candidates is not None and self.lp.pairs is not None:
            sol = solve_packed(self.lp, self.packing, backend, time_limit)
            # Column generation's certificate, for the explanation (policy.py merges self.info).
            self.info.update({key: sol.info[key] for key in ("pair_rounds", "pair_gap_bound") if key in sol.info})
            return sol
        return block_lp.solve(self.lp, backend=backend, time_limit=time_limit, warm=warm)


def base_lp(inst: Instance, packing: Packing | None = None, **arrays) -> BlockLP:
    """The block LP over ``inst``'s base constraints with the given share rows /
    objective (BlockLP fields) and, with packing, pair columns whose share-row
    coefficients follow ``arrays["A"]`` and whose objective is ``pair_C``."""
    pair_C = arrays.pop("pair_C", None)
    pairs = None if packing is None else packing.block(arrays["A"], pair_C)
    return BlockLP(S=inst.scale_factor.astype(float), W=inst.capacity.astype(float), allowed=inst.available,
                   pairs=pairs, **arrays)


def scale_unit(values: np.ndarray) -> float:
    """What a program's weights (or objective coefficients) are divided by: their largest when it
    lies outside [1e-3, 1e3] (weights of 1e9 put max-min's level at 1e-9, under the solvers'
    absolute tolerances: HiGHS returned an idle cluster, CLARABEL a distorted allocation, both
    "optimal"), else 1, so programs of ordinary magnitudes are the same numbers as ever."""
    top = float(np.max(values)) if len(values) else 1.0
    return top if top > 0 and not 1e-3 <= top <= 1e3 else 1.0


WEIGHT_SPREAD = 1e-12  # a weight below this fraction of the largest counts as that in a program


def program_weights(w: np.ndarray) -> tuple[np.ndarray, float]:
    """(the weights a max-min program uses, unit): divided by ``scale_unit`` and raised to at
    least WEIGHT_SPREAD of the largest. Weights of 1e9 and 1e-9 side by side put 1e18 in one
    matrix and every solver gave up; the raised weight only asks a tiny job for a 1e-12 share
    where 1e-18 would do, which no round can tell apart."""
    unit = scale_unit(w)
    return np.maximum(w, WEIGHT_SPREAD * float(np.max(w, initial=0.0))) / unit, unit


def at_minimum(values: np.ndarray, rel: float = 1e-5) -> tuple[float, np.ndarray]:
    """(the least finite-or-not value, mask of the values within ``rel`` of it). Relative to the
    least value (floored at 1e-6 of the largest magnitude): weight-1e9 shares are ~1e-9, and an
    absolute tolerance marked every job as a bottleneck."""
    low = float(np.min(values))
    finite = np.abs(values[np.isfinite(values)])
    tol = rel * max(abs(low), 1e-6 * float(np.max(finite, initial=0.0)))
    return low, values <= low + tol


def job_share(A: np.ndarray, X: np.ndarray, packing: Packing | None = None, Y: np.ndarray | None = None) -> np.ndarray:
    """Σ_j A[m, j] X[m, j] (+ every pair containing m, at its packed rate)."""
    thr = (A * X).sum(axis=1)
    if packing is not None and Y is not None:
        thr = thr + packing.throughput(A, Y)
    return thr


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
# No idle capacity: the second stage of every fractional policy
# --------------------------------------------------------------------------
#
# An LP's optimal set is often a face (makespan on an uncongested cluster: every
# job needs only the rate that finishes it by the makespan), and a vertex of it
# can leave most GPUs idle while jobs could run more. ``fill_idle`` gives that
# idle capacity to jobs with time left, without lowering any job's rate: it only
# raises entries of X. So every share row Σ_j A[m, j] X[m, j] ≥ g_m z + l_m stays
# satisfied at the same z (A ≥ 0), a sum Σ C∘X with C ≥ 0 does not fall, and a
# job's log, finish time or ρ does not get worse: the objective of each
# fractional policy (max-min, water filling, makespan, finish-time fairness,
# max throughput, cost, proportional fairness) is monotone in every job's rate,
# so the filled allocation is optimal whenever the unfilled one was (and it
# cannot be better than optimal). That is exact, and cheaper than a second LP
# with the objective held: at most k + 1 passes of O(n k) numpy.
#
# Each pass sends every job with time left to its fastest type that still has
# idle GPUs (ties: the type with the most idle GPUs, then the lowest index); a
# type asked for more than it has grants every asker the same fraction of its
# time left (a max-min split of the spare, in time) and is then full. A pass
# fills a type or every asker's time row, so after at most k + 1 passes no job
# with time left can use a type with idle GPUs. Pairs (space sharing) keep
# their fractions; their time and GPUs count as used. The result does not
# depend on the order of jobs or types beyond the documented ties.

FILL_TIME = 1e-9  # a job's time row within this of 1 is full
FILL_GPUS = 1e-9  # a type with fewer idle GPUs than this × max(W_j, 1) is full
FILL_SAFETY = 1.0 - 1e-12  # a split type's grants stay below its idle GPUs after rounding


def fill_idle(inst: Instance, X: np.ndarray, rate: np.ndarray | None = None, pair_time: np.ndarray | None = None,
              pair_gpus: np.ndarray | None = None) -> np.ndarray:
    """X with idle usable capacity given to jobs with time left (see above); ``rate``: how a
    job ranks its types (default its throughput); ``pair_time`` / ``pair_gpus``: the time
    (per job) and GPUs (per type) that space-shared pairs already take."""
    X = np.array(X, dtype=float)
    s = inst.scale_factor.astype(float)
    rate = inst.throughput if rate is None else np.asarray(rate, dtype=float)
    left = np.maximum(1.0 - X.sum(axis=1) - (0.0 if pair_time is None else pair_time), 0.0)
    spare = np.maximum(inst.capacity - s @ X - (0.0 if pair_gpus is None else pair_gpus), 0.0)
    full = FILL_GPUS * np.maximum(inst.capacity, 1.0)
    open_ = spare > full
    jobs = np.flatnonzero(left > FILL_TIME)  # the rows still in play, shrinking pass by pass
    usable = fill_usable(inst, jobs)
    for _ in range(inst.k + 1):
        ask = usable & open_[None, :]
        keep = ask.any(axis=1)
        if not keep.all():
            jobs, usable, ask = jobs[keep], usable[keep], ask[keep]
        if len(jobs) == 0:
            break
        to = _fill_choice(rate if len(jobs) == len(rate) else rate[jobs], ask, spare)
        want = s[jobs] * left[jobs]
        demand = np.bincount(to, weights=want, minlength=inst.k)
        split = demand > spare
        frac = np.where(split, FILL_SAFETY * spare / np.where(split, demand, 1.0), 1.0)
        grant = left[jobs] * frac[to]
        X[jobs, to] += grant
        left[jobs] -= grant
        spare = np.where(split, 0.0, np.maximum(spare - demand, 0.0))
        open_ &= ~split & (spare > full)
        still = split[to]  # a job granted all it asked for has no time left
        jobs, usable = jobs[still], usable[still]
    return X


def _fill_choice(rate: np.ndarray, ask: np.ndarray, spare: np.ndarray) -> np.ndarray:
    """Each row's fastest asked type; ties by the most idle GPUs, then the lowest index."""
    r = np.where(ask, rate, -np.inf)
    top = ask & (r == r.max(axis=1, keepdims=True))
    return np.where(top, spare[None, :], -np.inf).argmax(axis=1)


def fill_usable(inst: Instance, jobs: np.ndarray | None = None) -> np.ndarray:
    """(n, k) where a job could use more of a type (rows ``jobs`` only, when given): it
    runs there and has work left (a job known to have no steps left gets no idle GPUs)."""
    rows = slice(None) if jobs is None else jobs
    with np.errstate(invalid="ignore"):
        done = inst.steps_remaining[rows] <= 0  # (NaN, unknown: not done)
    return (inst.throughput[rows] > 0) & ~done[:, None]


def utilization(inst: Instance, X: np.ndarray, pair_time: np.ndarray | None = None,
                pair_gpus: np.ndarray | None = None) -> dict:
    """Utilization of usable capacity: per type, GPUs used / (GPUs used + idle GPUs that jobs
    with time left could run on: min(idle, Σ s_m × time left over those jobs)); total: the
    sums' ratio. 1.0 everywhere exactly when no job could run more within idle capacity
    (fill_idle's guarantee); None for a type no job can use."""
    s = inst.scale_factor.astype(float)
    used = s @ X + (0.0 if pair_gpus is None else pair_gpus)
    left = np.maximum(1.0 - X.sum(axis=1) - (0.0 if pair_time is None else pair_time), 0.0)
    left[left <= FILL_TIME] = 0.0
    spare = np.maximum(inst.capacity - used, 0.0)
    could = (s * left) @ fill_usable(inst)
    idle = np.minimum(spare, could)
    idle[idle <= FILL_GPUS * np.maximum(inst.capacity, 1.0)] = 0.0
    usable = used + idle
    frac = [float(u / v) if v > 0 else None for u, v in zip(used, usable)]
    total = float(used.sum() / usable.sum()) if usable.sum() > 0 else None
    return {"total": total, "by_type": dict(zip(inst.gpu_types, frac)),
            "usable_gpus": {t: float(v) for t, v in zip(inst.gpu_types, usable)},
            "of_capacity": float(used.sum() / inst.capacity.sum()) if inst.capacity.sum() > 0 else None}


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
# Space sharing (Gavel §3.1 "space sharing"): pair columns
# --------------------------------------------------------------------------
#
# A pair (m, m') packed on type j runs both jobs on the same s GPUs; they run
# at t_m and t_m' steps/s instead of T[m, j] and T[m', j]. Admission rule
# (documented in docs/guide/policies.md, space sharing): the pair is a variable
# on type j only if
#   * both jobs can run on j and have the same scale factor (Gavel packs only
#     equal-width jobs: the GPUs are shared one for one), and
#   * packing beats time slicing: t_m / T[m, j] + t_m' / T[m', j] > 1
#     (time slicing the same GPUs gives each job a fraction f and 1 - f of its
#     solo speed: the normalized sum is exactly 1);
# and, so that the program stays near-linear in n, the LP starts from each
# job's ``max_partners`` best partners (ranked by the best normalized sum over
# types, ties by partner index; a pair survives if either member ranks it that
# high) plus the pairs the pair-free program's duals price highest, and column
# generation (``solve_packed``) prices every other admitted pair in, until the
# duals certify the optimum within CG_GAP of the all-pairs one. The cap alone
# lost 0.85–1.7 % of the max-min objective; ``max_partners=None`` puts every
# admitted pair in the program at once.


@dataclass(frozen=True)
class Packing:
    """The admitted pairs: Y[p, j] = time fraction pair p runs packed on type j."""

    pairs: np.ndarray  # (p, 2) job indices
    rate: np.ndarray  # (p, k, 2) packed throughput / solo throughput of each member
    admitted: np.ndarray  # (p, k) bool
    scale_factor: np.ndarray  # (p,)
    n: int
    # The pairs the first restricted LP starts from (the top-d partner rule);
    # None: every admitted pair is a column from the start.
    candidates: np.ndarray | None = None

    def coefficients(self, T: np.ndarray) -> np.ndarray:
        """(p, k, 2): each member's packed throughput in the units of T (a policy's normalized matrix)."""
        return np.stack([T[self.pairs[:, 0]] * self.rate[:, :, 0], T[self.pairs[:, 1]] * self.rate[:, :, 1]], axis=2)

    def block(self, A: np.ndarray, C: np.ndarray | None = None) -> PairBlock:
        """Pair columns of a block LP whose share rows are A (objective C on Y, default 0)."""
        share = self.coefficients(A)
        return PairBlock(self.pairs, np.where(self.admitted[:, :, None], share, 0.0), self.admitted,
                         self.scale_factor.astype(float), np.zeros(self.admitted.shape) if C is None else C)

    def throughput(self, T: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Per-job packed throughput: Σ_{p ∋ m} Σ_j c[p, j, role(m)] Y[p, j]."""
        per_member = (self.coefficients(T) * Y[:, :, None]).sum(axis=1)  # (p, 2)
        return np.bincount(self.pairs.reshape(-1), weights=per_member.reshape(-1), minlength=self.n)

    def time(self, Y: np.ndarray) -> np.ndarray:
        """Per-job time in any pair: Σ_{p ∋ m} Σ_j Y[p, j]."""
        return np.bincount(self.pairs.reshape(-1), weights=np.repeat(Y.sum(axis=1), 2), minlength=self.n)

    def gpus(self, Y: np.ndarray) -> np.ndarray:
        """Per-type GPUs the pairs use: Σ_p s_p Y[p, j]."""
        return self.scale_factor @ Y


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


# The formulations' default ``max_partners`` (8) means "start from 8 partners per
# job and price the rest in" (column generation, below); any other number is a
# strict cap (the program over exactly those pairs, as before), None every
# admitted pair at once. (A distinct default value in the formulations'
# signatures, e.g. "priced", would be cleaner; they are not this module's.)
PRICED_PARTNERS = 8


def packing_pairs(inst: Instance, packing: bool = False, max_partners: int | None = 8) -> Packing | None:
    """The admitted pairs when ``packing`` is on and any pair is admitted, else None.
    With pairs, the time row of job m counts every pair containing m and a
    type's capacity counts the pairs' GPUs:

        Σ_j X[m, j] + Σ_{p ∋ m} Σ_j Y[p, j] <= 1,
        Σ_m s_m X[m, j] + Σ_p s_p Y[p, j] <= W_j,   Y[p, j] = 0 unless admitted.
    """
    packing = check_flag("packing", packing)
    max_partners = check_number("max_partners", max_partners, 0, whole=True, none=True)
    if not packing:
        return None
    if max_partners is not None and max_partners != PRICED_PARTNERS:
        pairs, rate, ok = admitted_pairs(inst, max_partners)  # an explicit cap: exactly those pairs
        return Packing(pairs, rate, ok, inst.scale_factor[pairs[:, 0]], inst.n) if len(pairs) else None
    pairs, rate, ok = admitted_pairs(inst, None)
    if len(pairs) == 0:
        return None
    cand = None
    if max_partners is not None:
        best = np.where(ok, rate.sum(axis=2), 0.0).max(axis=1)
        cand = _top_partners(np.arange(len(pairs)), pairs[:, 0], pairs[:, 1], best, inst.n, CG_START_PARTNERS)
        if cand.all():
            cand = None
    return Packing(pairs, rate, ok, inst.scale_factor[pairs[:, 0]], inst.n, cand)


# --------------------------------------------------------------------------
# Pair candidates without the cap's loss: column generation
# --------------------------------------------------------------------------
#
# The partner cap (``max_partners``) only chooses where to *start*: the LP is
# solved over the candidate pairs, then every other admitted pair is priced
# with that LP's duals (share rows λ, time rows μ, capacities π):
#
#     reduced cost of Y[p, j] = C[p, j] + λ_a c_a + λ_b c_b − μ_a − μ_b − s_p π_j
#
# Pairs with a positive reduced cost join the program and it is solved again.
# Each round ends in a certificate (``_dual_bound``): any multipliers λ, μ, π ≥ 0
# bound the all-pairs optimum from above by the Lagrangian over every admitted
# column, so the round's allocation (feasible for the all-pairs program) is
# within the bound's gap of the all-pairs optimum, whatever the solver's
# tolerance did to the duals. Pricing is O(pairs · k) numpy.

CG_MAX_ROUNDS = 12
CG_TOL = 1e-7  # a reduced cost this small (relative to the objective scale) cannot move the optimum
# Stop when the certified gap (the dual bound minus the allocation's objective,
# relative to the bound) is below this: the 0.1 % with a margin for the
# primal solution's own feasibility tolerance (1e-7 relative).
CG_GAP = 9e-4
CG_ADD_PER_JOB = 4  # per round, each job's most attractive priced-out pairs
CG_START_PER_JOB = 4  # from the pair-free program's duals
CG_START_WITH_CAP = True  # also start from the partner rule's pairs (one round fewer, measured)
CG_START_PARTNERS = PRICED_PARTNERS  # the partner rule's d for that start
# The bound's μ-raising LP (``_dual_bound``) is solved when at most this many
# columns price in; beyond it a closed-form (weaker) raise is used.
BOUND_LP_COLUMNS = 200_000


def _restrict(pb: PairBlock, keep: np.ndarray) -> PairBlock:
    return PairBlock(pb.pairs[keep], pb.share[keep], pb.allowed[keep], pb.S[keep], pb.C[keep])


def _pair_reduced_costs(pb: PairBlock, lam: np.ndarray, mu: np.ndarray, pi: np.ndarray, idx=slice(None)) -> np.ndarray:
    """(p, k) reduced costs of the pair columns ``idx`` (−inf where not admitted)."""
    a, b = pb.pairs[idx, 0], pb.pairs[idx, 1]
    rc = (pb.C[idx] + lam[a, None] * pb.share[idx, :, 0] + lam[b, None] * pb.share[idx, :, 1]
          - (mu[a] + mu[b])[:, None] - pb.S[idx, None] * pi[None, :])
    return np.where(pb.allowed[idx], rc, -np.inf)


def _dual_bound(lp: BlockLP, lam: np.ndarray, mu: np.ndarray, pi: np.ndarray) -> float:
    """An upper bound on the all-pairs optimum from any λ, μ, π ≥ 0 (weak duality).

    The Lagrangian of the program (every admitted pair a column, 0 ≤ X, Y ≤ 1 as
    in to_matrix, z free) is

        −Σ λ_m l_m + Σ μ_m + Σ π_j W_j + Σ_columns max(rc, 0) + z (c_z − Σ g_m λ_m),

    so with z's coefficient zero (λ, μ, π scaled together) it bounds the optimum.
    Raising μ_m by δ_m ≥ 0 trades the positive reduced costs for Σ δ: the best δ is
    a small LP over the columns that price in (a fractional vertex cover of them)."""
    n = lp.n
    rows = lp.rows()
    lam = np.where(rows, np.maximum(lam, 0.0), 0.0)
    mu, pi = np.maximum(mu, 0.0), np.maximum(pi, 0.0)
    if lp.has_z:
        weight = float(np.asarray(lp.g, float) @ lam)
        if weight <= 0:
            return np.inf if lp.c_z > 0 else (-np.inf if lp.c_z < 0 else np.nan)
        s = lp.c_z / weight
        lam, mu, pi = lam * s, mu * s, pi * s
    lower = np.zeros(n) if lp.lower is None else np.where(rows, np.asarray(lp.lower, float), 0.0)
    base = -float(lam @ lower) + float(mu.sum()) + float(pi @ lp.W)
    rx = np.where(lp.allowed, lp.objective_X() + lam[:, None] * lp.A - mu[:, None]
                  - np.asarray(lp.S, float)[:, None] * pi[None, :], -np.inf)
    ry = _pair_reduced_costs(lp.pairs, lam, mu, pi)
    xm, xj = np.nonzero(rx > 0)
    yp, yj = np.nonzero(ry > 0)
    vx, vy = rx[xm, xj], ry[yp, yj]
    plain = float(vx.sum() + vy.sum())  # every positive column at its bound 1
    if plain == 0.0:
        return base
    a, b = lp.pairs.pairs[yp, 0], lp.pairs.pairs[yp, 1]
    # Closed form: δ_m = the largest single column of m, or half the largest pair of m
    # (δ_a + δ_b ≥ rc then holds for every column).
    half = np.zeros(n)
    np.maximum.at(half, xm, vx)
    np.maximum.at(half, a, vy / 2)
    np.maximum.at(half, b, vy / 2)
    best = min(plain, float(half.sum()))
    if len(vx) + len(vy) <= BOUND_LP_COLUMNS:
        best = min(best, _cover_lp(n, xm, vx, a, b, vy))
    return base + best


def _cover_lp(n: int, xm, vx, a, b, vy) -> float:
    """min Σ δ + Σ ε  s.t.  δ_m + ε ≥ rc (single columns), δ_a + δ_b + ε ≥ rc (pairs),
    δ, ε ≥ 0: the cheapest raise of μ (and column bounds) pricing every column out."""
    import scipy.sparse as sp

    from optsched.solvers.lp import solve_lp

    jobs, inv = np.unique(np.concatenate([xm, a, b]), return_inverse=True)
    nx, ny, nj = len(vx), len(vy), len(jobs)
    m = nx + ny
    cols = np.arange(m)
    I = np.concatenate([cols[:nx], cols[nx:], cols[nx:], cols])
    J = np.concatenate([inv[:nx], inv[nx : nx + ny], inv[nx + ny :], nj + cols])
    A = sp.csc_matrix((-np.ones(len(I)), (I, J)), shape=(m, nj + m))
    sol = solve_lp(np.ones(nj + m), A, -np.concatenate([vx, vy]), backend="highs-simplex")
    if not sol.ok:
        return np.inf
    # The LP's own tolerance: δ, ε as returned, each column's shortfall added back.
    d = np.maximum(sol.x, 0.0)
    delta, eps = d[:nj], d[nj:]
    cover = np.concatenate([delta[inv[:nx]], delta[inv[nx : nx + ny]] + delta[inv[nx + ny :]]]) + eps
    return float(d.sum() + np.maximum(np.concatenate([vx, vy]) - cover, 0.0).sum())


def priced_start(lp: BlockLP, solo: BlockSolution, active: np.ndarray, scale: float) -> None:
    """Add to ``active`` each job's CG_START_PER_JOB pairs that the pair-free
    solution ``solo``'s duals price highest (μ: each job's best single column)."""
    if not (solo.ok and solo.share_dual is not None and solo.price is not None):
        return
    lam0, pi0, full = solo.share_dual, solo.price, lp.pairs
    mu0 = np.maximum(np.where(lp.allowed, lp.objective_X() + lam0[:, None] * lp.A
                              - np.asarray(lp.S, float)[:, None] * pi0[None, :], -np.inf).max(axis=1), 0.0)
    out = np.flatnonzero(~active)
    rc = _pair_reduced_costs(full, lam0, mu0, pi0, out).max(axis=1)
    good = rc > CG_TOL * scale
    if good.any():
        cand = out[good]
        active[cand[_top_partners(np.arange(len(cand)), full.pairs[cand, 0], full.pairs[cand, 1], rc[good], lp.n,
                                  CG_START_PER_JOB)]] = True


def solve_packed(lp: BlockLP, pk: Packing, backend: str, time_limit: float) -> BlockSolution:
    """Column generation from ``pk.candidates`` to within CG_GAP of the all-pairs optimum (see above)."""
    import dataclasses
    import time as _time

    from optsched.solvers.lp import solve_lp

    t0 = _time.perf_counter()
    full = lp.pairs
    active = pk.candidates.copy() if CG_START_WITH_CAP else np.zeros(len(pk.pairs), dtype=bool)
    n, k = lp.n, lp.k
    backend = backend if backend in ("highs-ipm", "highs-simplex", "clarabel") else "highs-ipm"
    scale = 1.0 + float(np.abs(lp.objective_X()).max()) + abs(lp.c_z)
    rounds, added_total, gap, masters = 0, 0, float("nan"), []
    # Round 0: the program without pairs (block IPM, fast) prices every pair; each
    # job's most attractive ones join the candidates.
    # (the whole time limit: a share of it could stop this solve alone, and the run end "optimal" on another path)
    solo = block_lp.solve(dataclasses.replace(lp, pairs=None), backend="auto", time_limit=time_limit)
    priced_start(lp, solo, active, scale)
    while True:
        rounds += 1
        sub = dataclasses.replace(lp, pairs=_restrict(full, active))
        c, A_ub, b_ub, lb, ub, rows = block_lp.to_matrix(sub)
        left = time_limit - (_time.perf_counter() - t0)
        t1 = _time.perf_counter()
        sol = solve_lp(c, A_ub, b_ub, lb=lb, ub=ub, backend=backend, time_limit=max(left, 1e-3))
        masters.append((int(active.sum()), round(_time.perf_counter() - t1, 3)))
        if not sol.ok:
            return BlockSolution(False, sol.status, None, float("nan"), None, float("nan"), None, None,
                                 _time.perf_counter() - t0, backend, message=sol.message)
        r = len(rows)
        lam = np.zeros(n)
        lam[rows] = sol.dual_ub[:r]
        mu = sol.dual_ub[r : r + n]
        pi = sol.dual_ub[r + n :]
        value = -sol.value
        bound = _dual_bound(lp, lam, mu, pi)
        gap = max(bound - value, 0.0) / max(abs(bound), 1e-12)
        out = np.flatnonzero(~active)
        if gap <= CG_GAP or len(out) == 0 or rounds >= CG_MAX_ROUNDS or left <= 0:
            break
        rc = _pair_reduced_costs(full, lam, mu, pi, out).max(axis=1)
        good = rc > CG_TOL * scale
        if not good.any():
            break  # nothing left to add: the restricted optimum is the all-pairs one (to tolerance)
        cand = out[good]
        pick = _top_partners(np.arange(len(cand)), full.pairs[cand, 0], full.pairs[cand, 1], rc[good], n,
                             CG_ADD_PER_JOB)
        active[cand[pick]] = True
        added_total += int(pick.sum())
    x = sol.x
    X = np.clip(x[: n * k].reshape(n, k), 0.0, None)
    na = int(active.sum())
    Y = np.zeros(full.allowed.shape)
    Y[active] = np.clip(x[n * k : n * k + na * k].reshape(na, k), 0.0, None)
    z = float(x[-1]) if lp.has_z else float("nan")
    status = "optimal"
    if left <= 0 and gap > CG_GAP:  # the user's time limit (the one clock-dependent path) cut the pricing short
        status = f"feasible: time limit of {time_limit:g}s reached (pairs certified within {gap:.2%} of the optimum)"
    return BlockSolution(True, status, X, z, Y, value, lam, pi, _time.perf_counter() - t0, backend,
                         info={"pair_rounds": rounds, "pairs_in_program": na, "pairs_priced_in": added_total,
                               "pair_gap_bound": gap, "pair_dual_bound": bound, "pair_masters": masters})
