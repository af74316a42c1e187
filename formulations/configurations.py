"""What the configuration policies (pollux, sia) share: the configuration set,
the goodput matrix, and the assignment MILP with its fallback.

Configurations c = (type j, GPUs g, nodes): per type with S GPUs per server,
g ∈ {1, 2, 4, … < S} on one server, then whole servers g = S·q (q = 1 … W_j/S),
as Sia's CONFIGS_4GPU / CONFIGS_8GPU. Sizes dividing S pack servers perfectly, so
any choice within the per-type GPU count is placeable. Rigid jobs' scale factors
are added as extra sizes.

Assignment MILP over the feasible (job, configuration) pairs e = (m, c) with
value U[m, c] > 0:

    maximize   Σ_e U_e y_e
    subject to Σ_{e of job m} y_e ≤ 1                  (one configuration per job)
               Σ_{e on type j} g_e y_e ≤ W_j           (GPUs per type)
               y ∈ {0, 1}

built with two sparse incidence matrices (jobs × pairs, types × pairs); pairs
with U ≤ 0 are never worth choosing and are left out. On a time limit or solver
failure: the LP relaxation, rounded by a greedy repair (pairs by LP value, then
value per GPU), and HiGHS's incumbent if it has one — whichever is better, with
the status saying so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from optsched.goodput.bootstrap import fill_params
from optsched.goodput.model import GoodputModel
from optsched.model import Allocation, Instance, OptschedError


@dataclass(frozen=True)
class Configurations:
    gpu_type: np.ndarray  # (C,) type index
    gpus: np.ndarray  # (C,)
    nodes: np.ndarray  # (C,)


def configurations(capacity: np.ndarray, server_gpus: np.ndarray, extra_sizes=(), max_gpus: float = np.inf) -> Configurations:
    """The configuration set; sizes above ``max_gpus`` (no job may use them) are left out."""
    types, gpus, nodes = [], [], []
    for j, (W, S) in enumerate(zip(capacity.astype(int), server_gpus.astype(int))):
        W = int(min(W, max_gpus)) if np.isfinite(max_gpus) else W
        sizes = {1 << i for i in range(int(np.log2(max(S, 1))) + 1) if (1 << i) < S and (1 << i) <= W}
        sizes |= {S * q for q in range(1, W // S + 1)}
        sizes |= {int(s) for s in extra_sizes if 0 < s <= W}
        for g in sorted(sizes):
            types.append(j)
            gpus.append(g)
            nodes.append(-(-g // S))
    return Configurations(np.array(types, dtype=int), np.array(gpus, dtype=int), np.array(nodes, dtype=int))


@dataclass(frozen=True)
class GoodputMatrix:
    configs: Configurations
    goodput: np.ndarray  # (n, C) 0 where infeasible
    atomic_bsz: np.ndarray  # (n, C)
    accum_steps: np.ndarray  # (n, C)
    current: np.ndarray  # (n,) index of the current configuration, -1 if none / not in the set
    model: GoodputModel | None  # elastic jobs' models (rows of non-elastic jobs unused)
    params: np.ndarray | None  # (n, k, 7) after bootstrapping


def elastic_rows(inst: Instance) -> np.ndarray:
    return inst.elastic.is_elastic if inst.elastic is not None else np.zeros(inst.n, dtype=bool)


class GoodputCache:
    """Goodput rows of elastic jobs across rounds, keyed by job id + the exact
    inputs of the row (per-configuration parameters after bootstrapping, the
    gradient statistics, the batch-size limits, the configuration set). A hit
    returns the very arrays a cold ``GoodputModel.optimize`` would compute, so
    cached and cold rounds decide identically; a job whose model was refit (or
    whose configuration set changed) simply misses. One entry per job id (a
    refit replaces it); the least recently used ids go first beyond
    ``max_jobs``. Not thread-safe by design: one cache per scheduler (the
    module default serves a process's policy calls)."""

    def __init__(self, max_jobs: int = 200_000):
        from collections import OrderedDict

        self.max_jobs = max_jobs
        self._rows: "OrderedDict[str, tuple[bytes, np.ndarray, np.ndarray, np.ndarray]]" = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._rows)

    def clear(self) -> None:
        self._rows.clear()
        self.hits = self.misses = 0

    def forget(self, job_ids) -> None:
        """Drop jobs that left (optional: the LRU bound also retires them)."""
        for jid in job_ids:
            self._rows.pop(jid, None)

    def rows(self, job_ids, model: GoodputModel, cfg: Configurations, P: np.ndarray,
             elastic: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(goodput, atomic_bsz, accum_steps), each (n, C), for per-configuration
        parameters P (n, C, 7); rows of non-elastic jobs are left 0 (not theirs to use)."""
        n, C = P.shape[:2]
        scal = np.stack([model.grad_sqr, model.grad_var, model.init_batch_size, model.max_batch_size,
                         model.min_local_bsz, model.max_local_bsz, np.full(n, float(model.accumulation))], axis=1)
        sig = np.concatenate([cfg.gpus, cfg.nodes]).astype(float)
        keys = np.concatenate([P.reshape(n, -1), scal, np.broadcast_to(sig, (n, len(sig)))], axis=1)
        keys = np.ascontiguousarray(keys)
        G = np.zeros((n, C))
        B = np.zeros((n, C), dtype=int)
        S = np.zeros((n, C), dtype=int)
        todo = []
        rows = self._rows
        for m in np.flatnonzero(elastic):
            jid = job_ids[m]
            hit = rows.get(jid)
            if hit is not None and hit[0] == keys[m].tobytes():
                G[m], B[m], S[m] = hit[1], hit[2], hit[3]
                rows.move_to_end(jid)
            else:
                todo.append(m)
        self.hits += int(elastic.sum()) - len(todo)
        self.misses += len(todo)
        if todo:
            t = np.asarray(todo)
            sub = model.take(t)
            g, b, s = sub.optimize(np.broadcast_to(cfg.nodes, (len(t), C)), np.broadcast_to(cfg.gpus, (len(t), C)),
                                   params=P[t])
            G[t], B[t], S[t] = g, b, s
            for i, m in enumerate(todo):
                rows[job_ids[m]] = (keys[m].tobytes(), g[i], b[i], s[i])
                rows.move_to_end(job_ids[m])
            while len(rows) > self.max_jobs:
                rows.popitem(last=False)
        return G, B, S


GOODPUT_CACHE = GoodputCache()


def goodput_matrix(inst: Instance, agnostic: bool = False, cache: "GoodputCache | None" = None) -> GoodputMatrix:
    """G[m, c]: goodput of job m at configuration c (batch size chosen for it).

    Elastic jobs: the Pollux model (types without measurements bootstrapped;
    no measurements at all: linear speedup from the job's per-GPU throughput).
    Rigid jobs (no Job.goodput): only g = scale factor, G = throughput.
    ``agnostic``: every type gets the job's reference-type model (Pollux is
    heterogeneity-unaware).

    The batch-size search (``GoodputModel.optimize``, most of the time) runs only
    for jobs whose model row changed since a previous round: ``cache`` (default:
    the module's ``GOODPUT_CACHE``) keeps each job's goodput row keyed by its id
    and the exact inputs of that row.
    """
    el = inst.elastic
    server = el.server_gpus if el is not None else np.minimum(inst.capacity, 8).astype(int)
    rigid = ~elastic_rows(inst)
    limit = np.inf
    if el is not None and el.is_elastic.any():
        limit = max(float(np.max(el.max_gpus[el.is_elastic])), float(inst.scale_factor.max()))
    elif inst.n:
        limit = float(inst.scale_factor.max())
    cfg = configurations(inst.capacity, np.maximum(server, 1), np.unique(inst.scale_factor[rigid]), limit)
    n, C = inst.n, len(cfg.gpus)
    G = np.zeros((n, C))
    b = np.zeros((n, C), dtype=int)
    s = np.zeros((n, C), dtype=int)
    T = inst.throughput
    # Rigid jobs: their scale factor on any type they can run on.
    fit = (cfg.gpus[None, :] == inst.scale_factor[:, None]) & (T[:, cfg.gpu_type] > 0)
    G = np.where(rigid[:, None] & fit, T[:, cfg.gpu_type], G)
    model = params = None
    current = np.full(n, -1)
    if el is not None:
        params, _ = fill_params(el.params, T, el.init_batch_size)
        measured = np.isfinite(params).all(axis=2)  # (n, k): the types each job has a model for
        if agnostic:
            ref = np.argmax(np.where(np.isfinite(params).all(axis=2), T + 1e-12, -1), axis=1)
            params = np.repeat(params[np.arange(n), ref][:, None, :], inst.k, axis=1)
        model = GoodputModel(
            params=np.nan_to_num(params[:, 0, :], nan=1.0), grad_sqr=el.grad_sqr, grad_var=el.grad_var,
            init_batch_size=el.init_batch_size, max_batch_size=el.max_batch_size,
            min_local_bsz=el.min_local_bsz, max_local_bsz=el.max_local_bsz,
        )
        P = params[:, cfg.gpu_type, :]  # (n, C, 7)
        known = np.isfinite(P).all(axis=2)
        g_el, b_el, s_el = (cache if cache is not None else GOODPUT_CACHE).rows(
            inst.job_ids, model, cfg, np.nan_to_num(P, nan=1.0), el.is_elastic)
        g_el = np.where(known, g_el, 0.0)
        # No measurements anywhere: linear speedup prior from the per-GPU throughput.
        unprofiled = el.is_elastic & ~np.isfinite(params).all(axis=2).any(axis=1)
        per_gpu = T[:, cfg.gpu_type] / inst.scale_factor[:, None]
        g_el = np.where(unprofiled[:, None], per_gpu * cfg.gpus[None, :], g_el)
        within = (cfg.gpus[None, :] >= el.min_gpus[:, None]) & (cfg.gpus[None, :] <= el.max_gpus[:, None])
        # (agnostic copies the reference model onto every type: whether a job runs on one is still its own data)
        usable = (T[:, cfg.gpu_type] > 0) | measured[:, cfg.gpu_type]
        g_el = np.where(within & usable, g_el, 0.0)
        rows = el.is_elastic
        G[rows], b[rows], s[rows] = g_el[rows], b_el[rows], s_el[rows]
        # Current configuration: same type, GPU count and node count.
        cur_type = np.argmax(el.current_gpus, axis=1)
        cur_g = el.current_gpus[np.arange(n), cur_type]
        cur_n = np.maximum(el.current_nodes[np.arange(n), cur_type], 1)
        match = (cfg.gpu_type[None, :] == cur_type[:, None]) & (cfg.gpus[None, :] == cur_g[:, None]) & (
            (cfg.nodes[None, :] == cur_n[:, None]) | rigid[:, None])
        current = np.where((cur_g > 0) & match.any(axis=1), np.argmax(match, axis=1), -1)
    return GoodputMatrix(cfg, G, b, s, current, model, params)


def check_feasible(inst: Instance, G: np.ndarray) -> None:
    """Every job needs at least one configuration (else a one-line error naming it)."""
    bad = np.flatnonzero(~(G > 0).any(axis=1))
    if len(bad):
        m = int(bad[0])
        raise OptschedError(
            f"jobs[{m}]: job {inst.job_ids[m]!r} has no feasible configuration (GPU limits, batch-size limits "
            f"and GPU types exclude every one){f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''}"
        )


# -- the assignment MILP ------------------------------------------------------------------

# The MILP's tolerance. The LP relaxation of these assignment programs is nearly
# integral (a vertex has at most ~k fractional jobs: one per capacity row that
# binds), so the answer is the LP's integral jobs plus an exact small MILP over
# the fractional ones in the capacity they leave, certified against the LP
# bound. It is accepted when bound − value ≤ MIP_REL_GAP · |bound| (1e-4, the
# peers' and Sia's own gap; ours was 1e-6 and HiGHS then spent seconds in root
# cuts proving the last 1e-6). The goodput model behind U is a fit whose error
# is percents, so a choice within 1e-4 of the best total is not a different
# decision in any sense the data supports; measured, the objectives equal the
# 1e-6 solves' to ≤ 2e-6 relative (optsched bench, milp rows; tests).
# Otherwise HiGHS's branch-and-cut runs with the same gap, started from the best
# of that answer and the previous round's configurations (``start``).
MIP_REL_GAP = 1e-4



@dataclass(frozen=True)
class Assignment:
    choice: np.ndarray  # (n,) configuration index, -1 = none
    objective: float  # Σ U of the choice
    status: str
    solve_seconds: float
    lp_bound: float  # LP relaxation value (nan if not computed)


def _incidence(n: int, k: int, m, c, cfg: Configurations):
    import scipy.sparse as sp

    e = np.arange(len(m))
    jobs = sp.csr_matrix((np.ones(len(m)), (m, e)), shape=(n, len(m)))
    cap = sp.csr_matrix((cfg.gpus[c].astype(float), (cfg.gpu_type[c], e)), shape=(k, len(m)))
    return jobs, cap


def _highs_model(u: np.ndarray, A, row_upper: np.ndarray, integer: bool):
    import highspy

    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(u), A.shape[0]
    lp.col_cost_ = -u  # HiGHS minimizes
    lp.col_lower_, lp.col_upper_ = np.zeros(len(u)), np.ones(len(u))
    lp.row_lower_, lp.row_upper_ = np.full(A.shape[0], -highspy.kHighsInf), row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
    if integer:
        lp.integrality_ = [highspy.HighsVarType.kInteger] * len(u)
    return lp


def _run_highs(lp, time_limit: float, mip: bool, start: np.ndarray | None = None, rel_gap: float = MIP_REL_GAP):
    """(status, y or None, objective) — never raises for solver trouble."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", float(max(time_limit, 1e-3)))
    if mip:
        h.setOptionValue("mip_rel_gap", float(rel_gap))
    try:
        h.passModel(lp)
        if start is not None:  # a feasible incumbent (the rounded LP) prunes the search
            sol = highspy.HighsSolution()
            sol.col_value = list(start)
            h.setSolution(sol)
        h.run()
    except Exception as e:  # a backend crash must not take the scheduler down
        return f"error: {type(e).__name__}: {e}".splitlines()[0], None, float("nan")
    status = h.getModelStatus()
    sol = h.getSolution()
    y = np.asarray(sol.col_value) if sol.value_valid else None
    if not mip and sol.dual_valid:
        _run_highs.row_dual = np.asarray(sol.row_dual)
    name = {highspy.HighsModelStatus.kOptimal: "optimal", highspy.HighsModelStatus.kTimeLimit: "time_limit"}.get(status, str(status))
    return name, y, -float(h.getInfo().objective_function_value) if y is not None else float("nan")




def undominated(U: np.ndarray, cfg: Configurations) -> np.ndarray:
    """(n, C) mask: pairs with U > 0 that no configuration of the same type with
    fewer GPUs beats or ties. Dropping the others is exact: swapping a dominated
    configuration for its dominator frees GPUs and loses no value."""
    keep = U > 0
    for j in np.unique(cfg.gpu_type):
        cols = np.flatnonzero(cfg.gpu_type == j)
        cols = cols[np.argsort(cfg.gpus[cols], kind="stable")]
        V = np.where(U[:, cols] > 0, U[:, cols], -np.inf)
        best_before = np.maximum.accumulate(np.concatenate([np.full((len(U), 1), -np.inf), V[:, :-1]], axis=1), axis=1)
        keep[:, cols] &= V > best_before
    return keep


def solve_assignment(U: np.ndarray, cfg: Configurations, capacity: np.ndarray, time_limit: float = 60.0,
                     solver: str = "highs", force_fallback: bool = False,
                     start: np.ndarray | None = None, rel_gap: float = MIP_REL_GAP) -> Assignment:
    """The assignment MILP with HiGHS (highspy directly: 3× faster than through
    cvxpy), over undominated pairs only (exact, see ``undominated``): the LP
    relaxation first (an integral vertex is the MILP optimum), then its integral
    jobs fixed and a small exact MILP over the fractional ones, accepted within
    ``rel_gap`` of the LP bound; else full branch-and-cut with that gap, warm
    started from the best answer so far and ``start`` (a previous choice, (n,),
    -1 = none, used when it fits). Fallback on a time limit: LP + greedy
    rounding, or the best incumbent.

    ``time_limit`` is wall-clock seconds for each HiGHS call (HiGHS's own
    ``time_limit`` option counts elapsed time, not CPU time): on a loaded
    machine a round can reach it after a few CPU seconds and fall back (the
    status then says so). Raise it there rather than read a fallback as slow."""
    import scipy.sparse as sp

    n, k = U.shape[0], len(capacity)
    t0 = time.perf_counter()
    m, c = np.nonzero(undominated(U, cfg))
    u = U[m, c]
    if len(m) == 0:
        return Assignment(np.full(n, -1), 0.0, "optimal", 0.0, 0.0)
    jobs, cap = _incidence(n, k, m, c, cfg)
    A = sp.vstack([jobs, cap]).tocsc()
    A.sort_indices()
    upper = np.concatenate([np.ones(n), capacity.astype(float)])
    _run_highs.row_dual = None
    lp_status, lp, lp_bound = _run_highs(_highs_model(u, A, upper, False), time_limit, mip=False)
    row_dual = _run_highs.row_dual
    if lp is None or lp_status != "optimal":
        lp, lp_bound = np.zeros(len(m)), float("nan")
    frac = np.minimum(np.abs(lp), np.abs(1 - lp)) >= 1e-7
    integral = lp_status == "optimal" and not frac.any()
    if force_fallback:
        choice = greedy_round(lp, u, m, c, n, cfg, capacity)
        return Assignment(choice, _value(choice, U), "fallback: forced (LP relaxation + greedy rounding)",
                          time.perf_counter() - t0, lp_bound)
    if integral:
        choice = _decode(lp, m, c, n)
        return Assignment(choice, _value(choice, U), "optimal", time.perf_counter() - t0, lp_bound)
    candidates = []
    if lp_status == "optimal":
        free = _flexible_jobs(frac, u, m, c, n, cfg, row_dual)
        fixed = _fix_and_solve(lp, free, u, m, c, n, cfg, capacity, time_limit - (time.perf_counter() - t0))
        if fixed is not None:
            candidates.append(fixed)
    if not candidates:
        candidates.append(greedy_round(lp, u, m, c, n, cfg, capacity))
    if start is not None and len(start) == n:
        prev = np.where((start >= 0) & (U[np.arange(n), np.maximum(start, 0)] > 0), start, -1)
        if _fits(prev, cfg, capacity):
            candidates.append(_undominate(prev, U, cfg))
    best = max(candidates, key=lambda ch: _value(ch, U))
    value = _value(best, U)
    tol = rel_gap * max(abs(lp_bound), 1.0) if np.isfinite(lp_bound) else -np.inf
    if lp_bound - value <= tol:
        return Assignment(best, value, "optimal", time.perf_counter() - t0, lp_bound)
    left = time_limit - (time.perf_counter() - t0)
    start_y = (best[m] == c).astype(float)
    y = None
    status, y, _ = (_run_highs(_highs_model(u, A, upper, True), left, mip=True, start=start_y, rel_gap=rel_gap)
                    if left > 0 else ("time_limit", None, 0))
    if status == "optimal" and y is not None:
        choice = _decode(y, m, c, n)
        if _value(choice, U) >= value:
            best, value = choice, _value(choice, U)
        return Assignment(best, value, "optimal", time.perf_counter() - t0, lp_bound)
    msg = f"time limit of {time_limit:g}s reached" if status == "time_limit" else f"solver status {status}"
    how = "LP relaxation, fractional jobs solved exactly" if lp_status == "optimal" else "LP relaxation + greedy rounding"
    if y is not None:
        incumbent = _decode(y, m, c, n)
        if _fits(incumbent, cfg, capacity) and _value(incumbent, U) > value:
            best, how = incumbent, "HiGHS incumbent"
    return Assignment(best, _value(best, U), f"fallback: {msg} ({how})", time.perf_counter() - t0, lp_bound)


def _undominate(choice: np.ndarray, U: np.ndarray, cfg: Configurations) -> np.ndarray:
    """Each chosen configuration replaced by the best one of its type with no more GPUs."""
    out = choice.copy()
    for mm in np.flatnonzero(choice >= 0):
        cc = choice[mm]
        same = np.flatnonzero((cfg.gpu_type == cfg.gpu_type[cc]) & (cfg.gpus <= cfg.gpus[cc]) & (U[mm] > 0))
        out[mm] = same[np.argmax(U[mm, same])] if len(same) else cc
    return out


# Jobs re-decided exactly around the LP's fractional ones: the most flexible,
# by the LP reduced cost of their best alternative (a job that loses almost
# nothing by changing configuration can make room for a fractional one).
FREE_JOBS = 128
SUB_MILP_SECONDS = 0.5  # cap on that small MILP (its incumbent is used if it stops)


def _flexible_jobs(frac, u, m, c, n, cfg: Configurations, row_dual) -> np.ndarray:
    """The jobs with a fractional LP entry plus the FREE_JOBS most flexible others."""
    fjobs = np.unique(m[frac])
    if row_dual is None or len(row_dual) < n + 1:
        return fjobs
    mu = np.maximum(-row_dual[:n], 0.0)  # job rows (HiGHS: ≤ rows of a minimization have duals ≤ 0)
    pi = np.maximum(-row_dual[n:], 0.0)
    rc = mu[m] + cfg.gpus[c] * pi[cfg.gpu_type[c]] - u  # ≥ 0; 0 on the LP's support
    # second-smallest reduced cost per job among (its pairs, "no configuration" at rc = mu)
    order = np.lexsort((rc, m))
    ms, rs = m[order], rc[order]
    first = np.searchsorted(ms, np.arange(n))
    cnt = np.bincount(m, minlength=n)
    second = np.where(cnt >= 2, rs[np.minimum(first + 1, len(rs) - 1)], np.inf)
    alt = np.minimum(second, mu)
    pick = np.argsort(alt, kind="stable")[:FREE_JOBS]
    return np.union1d(fjobs, pick[np.isfinite(alt[pick])])


def _fix_and_solve(lp, fjobs, u, m, c, n, cfg: Configurations, capacity, time_limit: float):
    """The LP's choice for every job but ``fjobs`` (those with a fractional entry
    and the most flexible), those by an exact MILP over all their pairs in the
    capacity the others leave."""
    choice = _decode(np.where(np.isin(m, fjobs), 0.0, lp), m, c, n)
    on = choice >= 0
    used = np.bincount(cfg.gpu_type[choice[on]], weights=cfg.gpus[choice[on]], minlength=len(capacity))
    left = np.maximum(capacity - used, 0.0)
    if (used > capacity + 1e-9).any() or time_limit <= 0:
        return None
    sel = np.flatnonzero(np.isin(m, fjobs))
    local = np.searchsorted(fjobs, m[sel])
    jobs, cap = _incidence(len(fjobs), len(capacity), local, c[sel], cfg)
    import scipy.sparse as sp

    A = sp.vstack([jobs, cap]).tocsc()
    A.sort_indices()
    status, y, _ = _run_highs(_highs_model(u[sel], A, np.concatenate([np.ones(len(fjobs)), left]), True),
                              min(time_limit, SUB_MILP_SECONDS), mip=True, rel_gap=0.0)
    if y is None:
        return None
    on = y > 0.5
    choice[fjobs[local[on]]] = c[sel][on]
    return _fill(choice, u, m, c, cfg, capacity) if _fits(choice, cfg, capacity) else None


def _fill(choice, u, m, c, cfg: Configurations, capacity) -> np.ndarray:
    """Leftover GPUs: move jobs to a better configuration that fits, best gain first."""
    n = len(choice)
    cur = np.zeros(n)
    on = choice >= 0
    val = {}
    for e in range(len(m)):  # value of each job's current pair
        val[(m[e], c[e])] = u[e]
    cur[on] = [val.get((mm, choice[mm]), 0.0) for mm in np.flatnonzero(on)]
    used = np.bincount(cfg.gpu_type[choice[on]], weights=cfg.gpus[choice[on]], minlength=len(capacity))
    free = capacity - used
    held = np.where(on, cfg.gpus[np.maximum(choice, 0)], 0)
    htype = np.where(on, cfg.gpu_type[np.maximum(choice, 0)], -1)
    gain = u - cur[m]
    for e in np.argsort(-gain, kind="stable"):
        if gain[e] <= 1e-12:
            break
        mm, t, g = m[e], cfg.gpu_type[c[e]], cfg.gpus[c[e]]
        if u[e] - cur[mm] <= 1e-12:
            continue
        room = free[t] + (held[mm] if htype[mm] == t else 0)
        if g <= room + 1e-9:
            if htype[mm] >= 0:
                free[htype[mm]] += held[mm]
            free[t] -= g
            choice[mm], cur[mm], held[mm], htype[mm] = c[e], u[e], g, t
    return choice


def _decode(y: np.ndarray, m, c, n) -> np.ndarray:
    choice = np.full(n, -1)
    on = y > 0.5
    choice[m[on]] = c[on]
    return choice


def _value(choice: np.ndarray, U: np.ndarray) -> float:
    on = choice >= 0
    return float(U[np.flatnonzero(on), choice[on]].sum())


def _fits(choice: np.ndarray, cfg: Configurations, capacity: np.ndarray) -> bool:
    on = choice >= 0
    used = np.bincount(cfg.gpu_type[choice[on]], weights=cfg.gpus[choice[on]], minlength=len(capacity))
    return bool((used <= capacity + 1e-9).all())


def greedy_round(lp: np.ndarray, u: np.ndarray, m, c, n: int, cfg: Configurations, capacity: np.ndarray) -> np.ndarray:
    """Take pairs by LP value (then value), skipping a job already placed or a type
    without room; then fill leftover GPUs with the best value per GPU."""
    free = capacity.astype(float).copy()
    choice = np.full(n, -1)
    g, t = cfg.gpus[c], cfg.gpu_type[c]
    by_lp = [e for e in np.lexsort((-u, -np.round(lp, 6))) if lp[e] > 1e-6]
    by_value_per_gpu = np.argsort(-u / g, kind="stable")
    for order in (by_lp, by_value_per_gpu):
        for e in order:  # a pass over pairs: the fallback path only
            if choice[m[e]] < 0 and g[e] <= free[t[e]]:
                choice[m[e]] = c[e]
                free[t[e]] -= g[e]
    return choice


# -- shared decoding -----------------------------------------------------------------------


def restart_factor(inst: Instance, grace: bool = False) -> np.ndarray:
    """f_m = max(age − restarts·S, 0) / (age + S): the share of a job's life not lost
    to restarts if it restarts once more (Pollux; Sia with per-application S).
    ``grace``: Sia does not penalize jobs younger than S."""
    el = inst.elastic
    S = el.restart_seconds if el is not None else np.full(inst.n, 30.0)
    r = el.num_restarts if el is not None else np.zeros(inst.n)
    age = inst.elapsed_time
    f = np.maximum(age - r * S, 0.0) / np.maximum(age + S, 1e-12)
    return np.where(grace & (age < S), 1.0, f)


def allocation_from_choice(inst: Instance, policy: str, gm: GoodputMatrix, a: Assignment, objective: float,
                           extra: dict | None = None, share: np.ndarray | None = None) -> Allocation:
    """Decode a choice; ``share``: each job's goodput relative to its fair-share goodput."""
    n, k = inst.n, inst.k
    cfg = gm.configs
    on = a.choice >= 0
    idx = np.flatnonzero(on)
    c = a.choice[on]
    counts = np.zeros((n, k), dtype=int)
    nodes = np.zeros((n, k), dtype=int)
    counts[idx, cfg.gpu_type[c]] = cfg.gpus[c]
    nodes[idx, cfg.gpu_type[c]] = cfg.nodes[c]
    thr = np.zeros(n)
    thr[idx] = gm.goodput[idx, c]
    bsz = {}
    el = elastic_rows(inst)
    for m, cc in zip(idx, c):  # decoding the answer for the explanation (n entries, no model building)
        if el[m]:
            b, s = int(gm.atomic_bsz[m, cc]), int(gm.accum_steps[m, cc])
            bsz[inst.job_ids[m]] = {"atomic_bsz": b, "accum_steps": s, "batch_size": int(b * (s + 1) * cfg.gpus[cc])}
    used = counts.sum(axis=0)
    explanation = {
        "capacity_used": {t: float(u) for t, u in zip(inst.gpu_types, used)},
        "capacity": {t: float(w) for t, w in zip(inst.gpu_types, inst.capacity)},
        "configurations": int(len(cfg.gpus)),
        "jobs_without_gpus": [inst.job_ids[m] for m in np.flatnonzero(~on)],
        "batch_size": bsz,
        "share_vs_equal": {jid: float(v) for jid, v in zip(inst.job_ids, share if share is not None else np.zeros(n))},
    }
    if np.isfinite(a.lp_bound):
        explanation["lp_bound"] = a.lp_bound
    for key, val in (extra or {}).items():
        explanation[key] = ({jid: float(v) for jid, v in zip(inst.job_ids, val)} if isinstance(val, np.ndarray) else val)
    return Allocation.of(inst, policy, (counts > 0).astype(float), a.status, objective, a.solve_seconds, thr,
                         explanation, gpu_counts=counts, nodes=nodes)
