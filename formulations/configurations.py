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
    """Goodput rows of elastic jobs across rounds and across jobs, keyed by the exact inputs
    of a row (per-configuration parameters after bootstrapping, the gradient statistics,
    the batch-size limits, the configuration set). A hit returns the very arrays a cold
    ``GoodputModel.optimize`` would compute, so cached and cold rounds decide identically;
    a job whose model was refit (or whose configuration set changed) simply misses. Jobs
    of one application at the same epoch share their inputs, so one batch-size search
    serves all of them, in a round and in the rounds after (a realistic mix has a few
    hundred distinct rows among thousands of jobs). The least recently used rows go first
    beyond ``max_rows``. Not thread-safe by design: one cache per scheduler (the module
    default serves a process's policy calls)."""

    def __init__(self, max_rows: int = 200_000):
        from collections import OrderedDict

        self.max_rows = max_rows
        self._rows: "OrderedDict[bytes, tuple[float, np.ndarray, np.ndarray, np.ndarray]]" = OrderedDict()
        self.hits = 0  # job rows found
        self.misses = 0  # job rows computed (or shared with another job's computation this call)

    def __len__(self) -> int:
        return len(self._rows)

    def clear(self) -> None:
        self._rows.clear()
        self.hits = self.misses = 0

    def rows(self, job_ids, model: GoodputModel, cfg: Configurations, P: np.ndarray,
             elastic: np.ndarray, max_gpus: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(goodput, atomic_bsz, accum_steps), each (n, C), for per-configuration
        parameters P (n, C, 7); rows of non-elastic jobs are left 0 (not theirs to use).
        ``max_gpus`` (n,): a job's row is 0 beyond its GPU limit. The limit is not part of
        the key: each configuration's search is independent of the others, so jobs of one
        application and epoch with different limits share one row, searched up to the
        largest limit asked (a row cached for a smaller limit is searched again)."""
        n, C = P.shape[:2]
        cap = np.full(n, np.inf) if max_gpus is None else np.asarray(max_gpus, float)
        limit = np.minimum(cap, float(cfg.gpus.max()))
        scal = np.stack([model.grad_sqr, model.grad_var, model.init_batch_size, model.max_batch_size,
                         model.min_local_bsz, model.max_local_bsz, np.full(n, float(model.accumulation))], axis=1)
        sig = np.concatenate([cfg.gpus, cfg.nodes]).astype(float)
        keys = np.ascontiguousarray(np.concatenate([P.reshape(n, -1), scal, np.broadcast_to(sig, (n, len(sig)))],
                                                   axis=1))
        found: dict[int, tuple] = {}
        todo: dict[bytes, list[int]] = {}
        for m in np.flatnonzero(elastic):
            key = keys[m].tobytes()
            hit = self._rows.get(key)
            if hit is not None and hit[0] >= limit[m]:
                found[int(m)] = hit
                self._rows.move_to_end(key)
            else:
                todo.setdefault(key, []).append(int(m))
        self.misses += sum(len(v) for v in todo.values())
        self.hits += len(found)
        for key, row in zip(todo, self._search(model, cfg, P, limit, todo)):
            self._rows[key] = row
            found.update((m, row) for m in todo[key])
        while len(self._rows) > self.max_rows:
            self._rows.popitem(last=False)
        G, B, S = np.zeros((n, C)), np.zeros((n, C), dtype=int), np.zeros((n, C), dtype=int)
        if found:
            ms = np.fromiter(found, dtype=int, count=len(found))
            G[ms], B[ms], S[ms] = (np.stack([found[m][i] for m in ms]) for i in (1, 2, 3))
            beyond = cfg.gpus[None, :] > limit[:, None]
            G[beyond], B[beyond], S[beyond] = 0.0, 0, 0
        return G, B, S

    def _search(self, model: GoodputModel, cfg: Configurations, P: np.ndarray, limit: np.ndarray,
                todo: dict[bytes, list[int]]) -> list[tuple]:
        """(limit, goodput, atomic_bsz, accum_steps) of each missing row: one job's search per
        row, up to the largest limit of the jobs that share it (and of its cached version)."""
        C = len(cfg.gpus)
        if not todo:
            return []
        t = np.array([v[0] for v in todo.values()], dtype=int)
        lim = np.array([max(float(limit[v].max()), self._rows[key][0] if key in self._rows else 0.0)
                        for key, v in todo.items()])
        # one search for every row, each over its own configurations: rows of one application
        # share the throughput half of the search whatever their limits (GoodputModel.optimize)
        cols = cfg.gpus[None, :] <= lim[:, None]
        g, b, s = model.take(t).optimize(np.broadcast_to(cfg.nodes, (len(t), C)), np.broadcast_to(cfg.gpus, (len(t), C)),
                                         params=P[t], columns=cols)
        return [(float(lim[i]), g[i], b[i], s[i]) for i in range(len(t))]


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
            inst.job_ids, model, cfg, np.nan_to_num(P, nan=1.0), el.is_elastic, el.max_gpus)
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
    certificate: dict | None = None  # how the bound was found (dual evaluations, dual gap)


def _incidence(n: int, k: int, m, c, cfg: Configurations):
    import scipy.sparse as sp

    e = np.arange(len(m))
    jobs = sp.csr_matrix((np.ones(len(m)), (m, e)), shape=(n, len(m)))
    cap = sp.csr_matrix((cfg.gpus[c].astype(float), (cfg.gpu_type[c], e)), shape=(k, len(m)))
    return jobs, cap


def _highs_model(u: np.ndarray, A, row_upper: np.ndarray, integer: bool, col_upper: np.ndarray | None = None):
    import highspy

    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(u), A.shape[0]
    lp.col_cost_ = -u  # HiGHS minimizes
    lp.col_lower_, lp.col_upper_ = np.zeros(len(u)), np.ones(len(u)) if col_upper is None else col_upper
    lp.row_lower_, lp.row_upper_ = np.full(A.shape[0], -highspy.kHighsInf), row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
    if integer:
        lp.integrality_ = [highspy.HighsVarType.kInteger] * len(u)
    return lp


def _run_highs(lp, time_limit: float, mip: bool, start: np.ndarray | None = None, rel_gap: float = MIP_REL_GAP,
               nodes: int | None = None, target: float | None = None, presolve: bool = True):
    """(status, y or None, objective) — never raises for solver trouble. Deterministic: one
    thread, a fixed seed, and work limits (``nodes``); ``time_limit`` (wall clock) is the
    caller's safety net only, and the status says when it fired."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("time_limit", float(max(time_limit, 1e-3)))
    if mip:
        h.setOptionValue("mip_rel_gap", float(rel_gap))
        if nodes is not None:
            h.setOptionValue("mip_max_nodes", int(nodes))
        if not presolve:  # a quick probe for a target answer: presolve can cost more than the probe
            h.setOptionValue("presolve", "off")
        if target is not None:  # stop at the first answer worth this much (HiGHS minimizes −u)
            h.setOptionValue("objective_target", -float(target))
    try:
        h.passModel(lp)
        if start is not None:  # a feasible incumbent prunes the search
            sol = highspy.HighsSolution()
            sol.col_value = list(start)
            h.setSolution(sol)
        h.run()
    except Exception as e:  # a backend crash must not take the scheduler down
        return f"error: {type(e).__name__}: {e}".splitlines()[0], None, float("nan")
    status = h.getModelStatus()
    sol = h.getSolution()
    y = np.asarray(sol.col_value) if sol.value_valid else None
    S = highspy.HighsModelStatus
    name = {S.kOptimal: "optimal", S.kTimeLimit: "time_limit", S.kSolutionLimit: "node_limit"}.get(status, str(status))
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
                     start: np.ndarray | None = None, rel_gap: float = MIP_REL_GAP,
                     type_blind: bool = False) -> Assignment:
    """The assignment MILP over undominated pairs only (exact, see ``undominated``): the
    Lagrangian dual over the k capacity rows (``lagrangian_prices``; its minimum is the LP
    bound), the jobs' best responses at its prices with the tied jobs decided by a small
    MILP (``_class_milp``), the GPUs that leaves idle filled by an exchange over all types
    (``_fill_joint``), accepted when within ``rel_gap`` of the bound; else exact reduced-cost
    fixing (``LADDER``); else HiGHS's
    branch-and-cut over every pair with that gap, started from the best answer so far and
    ``start`` (a previous choice, (n,), -1 = none, used when it fits), capped at
    FULL_MILP_NODES nodes. ``type_blind``: values that ignore the GPU type (Pollux's), so the
    greedy tie placement is refilled per type (``_fill_exact``) before the joint exchange.
    Every cap counts work, so the answer is the same on an idle and a
    loaded machine. ``time_limit`` (wall-clock seconds for the whole call) is the caller's
    safety net, the one path whose answer can depend on load: when it fires the best answer
    found is returned and the status says so. ``force_fallback``: the LP relaxation rounded
    greedily (the fallback's own path, for tests)."""
    import scipy.sparse as sp

    n, k = U.shape[0], len(capacity)
    t0 = time.perf_counter()
    left = lambda: time_limit - (time.perf_counter() - t0)  # noqa: E731 (the safety net)
    m, c = np.nonzero(undominated(U, cfg))
    u = U[m, c]
    if len(m) == 0:
        return Assignment(np.full(n, -1), 0.0, "optimal", 0.0, 0.0)
    if force_fallback:
        return _rounded_lp(U, u, m, c, n, cfg, capacity, time_limit, t0)
    p = Pairs.of(m, c, u, cfg, n, capacity)
    candidates = []
    first_cut = None
    if start is not None and len(start) == n:
        prev = np.where((start >= 0) & (U[np.arange(n), np.maximum(start, 0)] > 0), start, -1)
        if _fits(prev, cfg, capacity):
            prev = _undominate(prev, U, cfg)
            candidates.append(prev)
            on = prev >= 0
            first_cut = (_value(prev, U), np.bincount(cfg.gpu_type[prev[on]], weights=cfg.gpus[prev[on]], minlength=k))
    pi, bound, lower, evals = lagrangian_prices(p, first_cut)
    tol = rel_gap * max(abs(bound), 1.0)
    timed_out = proved = False
    _, _, _, val, best_rc, _ = p.respond(pi)
    loss = best_rc[p.m] - val  # each pair's loss at the prices (its reduced cost), ≥ 0
    # 1) best responses, exact ties decided by the class MILP (the tie widened while the prices'
    #    last digits leave the forced best responses overfilling a type), then the GPUs left idle
    #    filled by a joint exchange over all types (the moves that can be in a certified answer)
    tie = TIE * float(np.max(np.abs(u)))
    ch = certified = None
    while ch is None and certified is None and tie <= TIE_MAX * float(np.max(np.abs(u))):
        # a greedy placement of the tied jobs first, kept only if the exchange certifies it (ties
        # of one configuration on many GPU types at one price make the class MILP a bin packing)
        certified = _certified_greedy(p, loss <= tie, best_rc <= tie, cfg, pi, bound, U, tol, type_blind)
        if certified is None:
            ch, _ = _class_milp(p, loss <= tie, best_rc <= tie, cfg, left(), force=False)
        tie *= 100.0
    if certified is not None:
        candidates.append(certified)
    elif ch is not None:
        candidates += [ch, _fill_joint(ch, p, pi, bound, U, cfg, tol)]
        for _ in range(JOINT_PASSES):  # an integrality gap above tol: exchanges of moves losing more
            if bound - _value(candidates[-1], U) <= tol:
                break
            candidates.append(_fill_joint(candidates[-1], p, pi, bound, U, cfg, np.inf))
        if bound - _value(candidates[-1], U) > LADDER_DIRECT * tol:  # per type, with the large moves
            candidates.append(_fill_exact(ch, p, pi, bound, U, cfg))  # the joint box leaves out
    # 2) a certified answer loses at most tol at the prices, so no pair losing more is in one:
    #    MILPs over the pairs losing at most tol/4, then tol (each stopped at the first certified
    #    answer or after LADDER_NODES nodes), then exact reduced-cost fixing: a pair losing more than
    #    bound − incumbent is in no better answer, so that MILP solved to optimality proves
    #    its answer optimal even where an integrality gap exceeds tol.
    for frac in LADDER:
        inc = max(candidates, key=lambda ch: _value(ch, U)) if candidates else np.full(n, -1)
        gap = bound - _value(inc, U)
        if gap <= tol or left() <= 0:
            break
        if frac is not None and gap <= LADDER_DIRECT * tol:
            continue
        budget = min(frac * tol, gap) if frac is not None else gap
        allowed = loss <= budget + 1e-12
        within = np.all((inc < 0) | np.isin(inc * n + np.arange(n), (p.c * n + p.m)[allowed]))
        ch, status = _class_milp(p, allowed, best_rc <= budget + 1e-12, cfg, left(), target=bound - tol,
                                 start=inc if within else None,
                                 nodes=LADDER_NODES if frac is not None else RC_MILP_NODES,
                                 rel_gap=0.0 if frac is not None else rel_gap, presolve=frac is None or frac >= 1)
        if ch is not None and _fits(ch, cfg, capacity):
            candidates.append(ch)
        timed_out = status == "time_limit"
        # the last rung is exact: solved to within rel_gap of its own bound (HiGHS; the fixed
        # jobs' values are positive, so that is within rel_gap of the optimum), its answer or the
        # incumbent is that close to the optimum even when an integrality gap keeps it farther
        # than tol from the LP bound
        proved = frac is None and status == "optimal" and ch is not None
    best = max(candidates, key=lambda ch: _value(ch, U)) if candidates else np.full(n, -1)
    value = _value(best, U)
    extra = {"dual_evaluations": evals, "dual_gap": bound - lower,
             "proof": "within the gap of the bound" if bound - value <= tol else
             "reduced-cost fixing solved within the gap" if proved else None}
    if bound - value <= tol or proved:
        return Assignment(best, value, "optimal", time.perf_counter() - t0, bound, extra)
    if not timed_out and left() > 0:
        jobs, cap = _incidence(n, k, m, c, cfg)
        A = sp.vstack([jobs, cap]).tocsc()
        A.sort_indices()
        upper = np.concatenate([np.ones(n), capacity.astype(float)])
        status, y, _ = _run_highs(_highs_model(u, A, upper, True), left(), mip=True,
                                  start=(best[m] == c).astype(float), rel_gap=rel_gap, nodes=FULL_MILP_NODES)
        if y is not None:
            ch = _decode(y, m, c, n)
            if _fits(ch, cfg, capacity) and _value(ch, U) > value:
                best, value = ch, _value(ch, U)
        if status == "optimal":
            return Assignment(best, value, "optimal", time.perf_counter() - t0, bound, extra)
        timed_out = status == "time_limit"
        why = (f"time limit of {time_limit:g}s reached" if timed_out else
               f"node limit of {FULL_MILP_NODES} reached" if status == "node_limit" else f"solver status {status}")
    else:
        why = f"time limit of {time_limit:g}s reached"
    gap = (bound - value) / max(abs(bound), 1.0)
    return Assignment(best, value, f"fallback: {why} (best answer found, {gap:.2g} below the bound)",
                      time.perf_counter() - t0, bound, extra)


def _rounded_lp(U, u, m, c, n, cfg, capacity, time_limit, t0) -> Assignment:
    """The LP relaxation (HiGHS) rounded greedily: the forced fallback."""
    import scipy.sparse as sp

    jobs, cap = _incidence(n, len(capacity), m, c, cfg)
    A = sp.vstack([jobs, cap]).tocsc()
    A.sort_indices()
    upper = np.concatenate([np.ones(n), capacity.astype(float)])
    status, lp, bound = _run_highs(_highs_model(u, A, upper, False), time_limit, mip=False)
    if lp is None or status != "optimal":
        lp, bound = np.zeros(len(m)), float("nan")
    choice = greedy_round(lp, u, m, c, n, cfg, capacity)
    return Assignment(choice, _value(choice, U), "fallback: forced (LP relaxation + greedy rounding)",
                      time.perf_counter() - t0, bound)


def _undominate(choice: np.ndarray, U: np.ndarray, cfg: Configurations) -> np.ndarray:
    """Each chosen configuration replaced by the best one of its type with no more GPUs."""
    out = choice.copy()
    for mm in np.flatnonzero(choice >= 0):
        cc = choice[mm]
        same = np.flatnonzero((cfg.gpu_type == cfg.gpu_type[cc]) & (cfg.gpus <= cfg.gpus[cc]) & (U[mm] > 0))
        out[mm] = same[np.argmax(U[mm, same])] if len(same) else cc
    return out


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


# -- the Lagrangian dual over the k capacity rows ---------------------------------------
#
# The relaxation max Σ u_e y_e, Σ_{e of m} y_e ≤ 1, Σ_{e on j} g_e y_e ≤ W_j, y ≥ 0 has one
# simplex per job (integral polytopes) and k coupling rows, so its value is the Lagrangian
# dual  D(π) = Σ_m max(0, max_{e of m} u_e − π_{t(e)} g_e) + π·W  minimized over π ≥ 0 (k
# prices): every π gives an upper bound D(π) on the MILP, and each job's best response at π
# is exact and O(its pairs). D is convex and piecewise linear in k variables (k = the few
# GPU types); Kelley's cutting planes (a master LP in k+1 variables that grows one row per
# evaluation) find its minimum in a few dozen evaluations. Jobs with a unique best response
# at the optimal prices keep it (complementary slackness); the jobs tied between options —
# the LP's fractional ones and the interchangeable copies of one application — are decided
# by a small MILP over their tied options only, identical jobs merged into one integer count
# per option (no symmetric branching), in the GPUs the others leave. The answer carries its
# certificate: D(π) − value bounds its distance to the optimum. Every limit below counts
# work (evaluations, branch-and-bound nodes), never seconds, so the answer does not depend
# on the machine's load; only the caller's time_limit (a safety net) can cut a solve short.

DUAL_EVALUATIONS = 300  # Kelley evaluations (each O(pairs))
DUAL_TOL = 1e-10  # relative: stop once min D − the master's bound is below this
TIE = 1e-9  # pairs within this (relative to the largest utility) of a job's best response are tied
TIE_MAX = 1e-5  # ... widened ×100 up to this while the forced best responses overfill a type
TIE_MILP_NODES = 2_000  # branch-and-bound nodes of the tie MILP
LADDER = (1 / 4, 1.0, None)  # loss budgets (× tol; None: the incumbent's gap, exact)
LADDER_DIRECT = 4.0  # an incumbent this close (× tol) goes to the exact rung at once: the joint
# exchange already searched the budgeted rungs' neighbourhood (every answer is one move per job away)
LADDER_NODES = 50  # nodes of each budgeted MILP
RC_MILP_NODES = 5_000  # nodes of the MILP over the pairs reduced-cost fixing leaves
FULL_MILP_NODES = 20_000  # nodes of the last-resort full MILP


@dataclass(frozen=True)
class Pairs:
    """The undominated (job, configuration) pairs, sorted by job, and the capacities."""

    m: np.ndarray
    c: np.ndarray
    u: np.ndarray
    g: np.ndarray  # GPUs (float)
    t: np.ndarray  # type
    starts: np.ndarray  # first pair of each job that has pairs
    owners: np.ndarray  # those jobs
    n: int
    W: np.ndarray  # (k,) capacities

    @classmethod
    def of(cls, m, c, u, cfg: Configurations, n: int, capacity: np.ndarray) -> "Pairs":
        owners, starts = np.unique(m, return_index=True)
        return cls(m, c, u, cfg.gpus[c].astype(float), cfg.gpu_type[c], starts, owners, n,
                   np.asarray(capacity, float))

    def respond(self, pi: np.ndarray):
        """Best responses at prices pi: (D(pi), their value, their usage (k,), reduced values (P,),
        each job's best reduced value (n,), the chosen pairs)."""
        val = self.u - pi[self.t] * self.g
        best = np.zeros(self.n)
        best[self.owners] = np.maximum(np.maximum.reduceat(val, self.starts), 0.0)
        first = np.flatnonzero((val >= best[self.m]) & (best[self.m] > 0))
        if len(first):  # the first pair of each job that attains its best (sorted by job, then configuration)
            first = first[np.r_[True, self.m[first][1:] != self.m[first][:-1]]]
        usage = np.bincount(self.t[first], weights=self.g[first], minlength=len(self.W))
        return float(best.sum() + pi @ self.W), float(self.u[first].sum()), usage, val, best, first


def lagrangian_prices(p: Pairs, start=None, evaluations: int = DUAL_EVALUATIONS, tol: float = DUAL_TOL):
    """(π, D(π), the master's lower bound on min D, evaluations): Kelley's method on
    0 ≤ π ≤ π_max (π_max_j: the largest u/g on type j — above it no job wants the type, so
    the box holds a minimizer). ``start``: (value, usage) of a feasible choice (the running
    configurations), the first cut."""
    import highspy

    k = len(p.W)
    pmax = np.zeros(k)
    np.maximum.at(pmax, p.t, p.u / p.g)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", 0)
    inf = highspy.kHighsInf
    idx = np.arange(k + 1, dtype=np.int32)
    # columns θ, π_1..π_k; minimize θ subject to θ ≥ value_i + (W − usage_i)·π for every cut i
    for lo, hi, cost in zip(np.r_[-inf, np.zeros(k)], np.r_[inf, pmax], np.r_[1.0, np.zeros(k)]):
        h.addVar(float(lo), float(hi))
        h.changeColCost(h.getNumCol() - 1, float(cost))

    def cut(value, usage):
        h.addRow(float(value), inf, k + 1, idx, np.r_[1.0, -(p.W - usage)])

    if start is not None:
        cut(*start)
    pi = np.zeros(k)
    best_pi, best_D, lower, e = pi, np.inf, -np.inf, 0
    for e in range(1, evaluations + 1):
        D, value, usage, *_ = p.respond(pi)
        if D < best_D:
            best_pi, best_D = pi, D
        cut(value, usage)
        h.run()
        sol = np.asarray(h.getSolution().col_value)
        lower = float(sol[0])
        if best_D - lower <= tol * max(abs(best_D), 1.0):
            break
        pi = np.clip(sol[1:], 0.0, pmax)
    return best_pi, best_D, lower, e


def _class_milp(p: Pairs, allowed: np.ndarray, none_ok: np.ndarray, cfg: Configurations, time_limit: float,
                target: float | None = None, start: np.ndarray | None = None, nodes: int = TIE_MILP_NODES,
                force: bool = True, rel_gap: float = 0.0, presolve: bool = True):
    """max Σ u over the ``allowed`` pairs (each job one of them, or none where ``none_ok``),
    within the capacities: jobs with one allowed pair and no 'none' keep it; the others are
    a MILP in which identical jobs (same allowed pairs at the same values, same 'none')
    form one class with an integer count per configuration, so copies of one application
    cost no symmetric branching. ``target``: stop at the first answer worth that much
    (HiGHS's objective target — the certificate's level); ``start``: a feasible choice
    within ``allowed``. ``force``: a class without 'none' must place every job (exact under
    reduced-cost fixing); else any job may stay out. (choice, status), choice None if the
    forced pairs overfill a type."""
    import scipy.sparse as sp

    n, k = p.n, len(p.W)
    choice, free, forced, left = _forced_pairs(p, allowed, none_ok, cfg)
    if (left < -1e-9).any():
        return None, "infeasible"
    sel = np.flatnonzero(allowed & free[p.m])
    if len(sel) == 0:
        return choice, "optimal"
    placed = _all_at_best(p, sel, left, cfg)
    if placed is not None:  # every job at its best value: no answer is worth more, so this is the optimum
        choice[placed[0]] = placed[1]
        return choice, "optimal"
    jobs = np.unique(p.m[sel])
    C = len(cfg.gpus)
    row = np.searchsorted(jobs, p.m[sel])
    sig = np.full((len(jobs), C + 1), -1.0)
    sig[row, p.c[sel]] = p.u[sel]
    sig[:, C] = none_ok[jobs]
    classes, inv, count = np.unique(sig, axis=0, return_inverse=True, return_counts=True)
    inv = inv.ravel()
    var, first = np.unique(inv[row] * C + p.c[sel], return_index=True)
    vc, vu, vcls = p.c[sel][first], p.u[sel][first], var // C
    nv = len(var)
    A = sp.vstack([
        sp.csr_matrix((np.ones(nv), (vcls, np.arange(nv))), shape=(len(classes), nv)),
        sp.csr_matrix((cfg.gpus[vc].astype(float), (cfg.gpu_type[vc], np.arange(nv))), shape=(k, nv)),
    ]).tocsc()
    A.sort_indices()
    lower_rows = np.where((classes[:, C] > 0) | (not force), 0.0, count)  # a class that may not stay out takes all its jobs
    lp = _highs_model(vu, A, np.r_[count.astype(float), np.maximum(left, 0.0)], True,
                      col_upper=count[vcls].astype(float))
    lp.row_lower_ = np.r_[lower_rows, np.full(k, -np.inf)]
    x0 = None
    if start is not None:
        x0 = np.zeros(nv)
        pos = {int(v): i for i, v in enumerate(var)}
        for mm in jobs[start[jobs] >= 0]:
            x0[pos[int(inv[np.searchsorted(jobs, mm)] * C + start[mm])]] += 1
    fixed_value = float(p.u[forced].sum())
    status, x, _ = _run_highs(lp, time_limit, mip=True, rel_gap=rel_gap, nodes=nodes, start=x0, presolve=presolve,
                              target=None if target is None else target - fixed_value)
    if x is None:
        return None, status
    take = np.round(x).astype(int)
    # counts back to jobs: within a class, jobs in index order take the configurations in order
    members = [list(jobs[inv == q]) for q in range(len(classes))]
    for v in np.lexsort((vc, vcls)):
        for _ in range(take[v]):
            choice[members[vcls[v]].pop(0)] = vc[v]
    return choice, status


def _forced_pairs(p: Pairs, allowed: np.ndarray, none_ok: np.ndarray, cfg: Configurations):
    """(choice of the jobs with one allowed pair and no 'none', jobs with a choice to make (n,),
    the forced pairs' mask, GPUs per type they leave)."""
    free = np.bincount(p.m[allowed], minlength=p.n) + none_ok >= 2
    choice = np.full(p.n, -1)
    forced = allowed & ~free[p.m]
    choice[p.m[forced]] = p.c[forced]
    on = choice >= 0
    left = p.W - np.bincount(cfg.gpu_type[choice[on]], weights=cfg.gpus[choice[on]], minlength=len(p.W))
    return choice, free, forced, left


def _certified_greedy(p: Pairs, allowed: np.ndarray, none_ok: np.ndarray, cfg: Configurations, pi: np.ndarray,
                      bound: float, U: np.ndarray, tol: float, per_type: bool = False) -> np.ndarray | None:
    """The tied jobs placed greedily (largest first, each on its most valuable allowed pair
    that fits, on the type with the most room; else none), then (``per_type``: after the exact
    per-type fill, which packs what type-blind ties leave idle on each type) the joint
    exchange; returned only if that answer is within ``tol`` of the bound (certified), else None."""
    choice, free, forced, left = _forced_pairs(p, allowed, none_ok, cfg)
    room = np.floor(left + 1e-9)
    if (room < 0).any():
        return None
    sel = np.flatnonzero(allowed & free[p.m])
    if len(sel):
        sel = sel[np.lexsort((-p.u[sel], p.m[sel]))]  # per job, most valuable first
        jobs, starts = np.unique(p.m[sel], return_index=True)
        ends = np.r_[starts[1:], len(sel)]
        for i in np.argsort(-np.maximum.reduceat(p.g[sel], starts), kind="stable"):
            es = sel[starts[i]:ends[i]]
            fits = np.flatnonzero(room[p.t[es]] >= p.g[es])
            if len(fits) == 0:
                continue
            top = fits[p.u[es[fits]] == p.u[es[fits[0]]]]  # the most valuable that fit: most room
            e = es[top[int(np.argmax(room[p.t[es[top]]] - p.g[es[top]]))]]
            room[p.t[e]] -= p.g[e]
            choice[jobs[i]] = p.c[e]
    if per_type:
        choice = _fill_exact(choice, p, pi, bound, U, cfg)
    filled = _fill_joint(choice, p, pi, bound, U, cfg, tol)
    return filled if bound - _value(filled, U) <= tol else None


def _all_at_best(p: Pairs, sel: np.ndarray, left: np.ndarray, cfg: Configurations):
    """(jobs, configurations) placing every job of the pairs ``sel`` on one of its best-valued
    pairs within ``left`` GPUs per type (largest first, each on the type with the most room),
    or None if that fails. Such a placement attains Σ of each job's best value, which bounds
    every answer of the class MILP, so it is that MILP's optimum; it is found where the ties are
    the same configuration on several types at one price (Pollux's heterogeneity-unaware rows)."""
    m, u = p.m[sel], p.u[sel]
    best = np.full(p.n, -np.inf)
    np.maximum.at(best, m, u)
    top = sel[u == best[m]]
    jobs, starts = np.unique(p.m[top], return_index=True)
    ends = np.r_[starts[1:], len(top)]
    size = np.maximum.reduceat(p.g[top], starts)
    room = np.floor(np.asarray(left, float) + 1e-9)
    out = np.empty(len(jobs), dtype=int)
    for i in np.argsort(-size, kind="stable"):  # one pass over the tied jobs (~n), few options each
        es = top[starts[i]:ends[i]]
        after = room[p.t[es]] - p.g[es]
        if not (after >= 0).any():
            return None
        e = es[int(np.argmax(after))]
        room[p.t[e]] -= p.g[e]
        out[i] = p.c[e]
    return jobs, out


FILL_SPAN = 64  # GPUs a type's exchange may free to make room (the DP's negative states)


def _fill_exact(choice: np.ndarray, p: Pairs, pi: np.ndarray, bound: float, U: np.ndarray,
                cfg: Configurations) -> np.ndarray:
    """Per GPU type, the best exchange among the jobs on it and the jobs without GPUs: each
    such job keeps its configuration, moves to another one of that type, or stops, so that
    the type's GPUs are used best (a multiple-choice knapsack over the type's free GPUs,
    solved exactly by dynamic programming). At the dual prices π the gap left by the tie
    repair is mostly π·(GPUs left idle); only moves whose loss at π is below that gap can
    close it, which keeps the DP small."""
    choice = choice.copy()
    _, _, _, val, best, _ = p.respond(pi)
    n = p.n
    cur_u = np.zeros(n)
    cur_g = np.zeros(n)
    cur_t = np.full(n, -1)
    on = choice >= 0
    cur_u[on] = U[np.flatnonzero(on), choice[on]]
    cur_g[on] = cfg.gpus[choice[on]]
    cur_t[on] = cfg.gpu_type[choice[on]]
    for t in np.argsort(-pi, kind="stable"):
        gap = bound - float(cur_u.sum())
        used = np.bincount(cur_t[cur_t >= 0], weights=cur_g[cur_t >= 0], minlength=len(p.W))
        slack = int(np.floor(p.W[t] - used[t] + 1e-9))
        if gap <= 0:
            break
        mine = (cur_t[p.m] == t) | (cur_t[p.m] < 0)
        ok = mine & (p.t == t) & (best[p.m] - val <= gap) & (p.c != choice[p.m])
        jobs = np.unique(p.m[ok])
        if len(jobs) == 0:
            continue
        lo, size = -FILL_SPAN, FILL_SPAN + slack + 1  # state s = GPUs taken from the slack, in [lo, slack]
        dp = np.full(size, -np.inf)
        dp[-lo] = 0.0
        back = []
        sel = np.flatnonzero(ok)
        starts = np.searchsorted(p.m[sel], jobs)
        ends = np.r_[starts[1:], len(sel)]
        for j, m in enumerate(jobs):
            es = sel[starts[j]:ends[j]]
            moves = [(0, 0.0, -1)]  # keep
            if cur_t[m] == t:
                moves.append((-int(cur_g[m]), -cur_u[m], -2))  # stop
            base_g = cur_g[m] if cur_t[m] == t else 0.0
            moves += [(int(p.g[e] - base_g), float(p.u[e] - cur_u[m]), int(p.c[e])) for e in es]
            new = np.full(size, -np.inf)
            arg = np.zeros(size, dtype=np.int16)
            for i, (dg, du, _) in enumerate(moves):
                shifted = np.full(size, -np.inf)
                if dg >= 0:
                    shifted[dg:] = dp[:size - dg] if dg else dp
                else:
                    shifted[:dg] = dp[-dg:]
                shifted += du
                better = shifted > new + 1e-12
                new = np.where(better, shifted, new)
                arg = np.where(better, i, arg)
            dp = new
            back.append((m, moves, arg))
        s = int(np.argmax(dp))
        if not dp[s] > 1e-12:
            continue
        for m, moves, arg in reversed(back):
            dg, du, target = moves[arg[s]]
            s -= dg
            if target == -1:
                continue
            if target == -2:
                choice[m], cur_u[m], cur_g[m], cur_t[m] = -1, 0.0, 0.0, -1
            else:
                choice[m], cur_u[m], cur_g[m], cur_t[m] = target, U[m, target], cfg.gpus[target], t
    return choice


JOINT_SPAN = 8  # GPUs per type the joint exchange may free or take beyond the idle ones
JOINT_STATES = 40_000  # the joint DP's states at most (the span shrinks for many types)
JOINT_PER_KIND = 8  # moves kept per kind (same GPU change on every type): the best-valued ones
JOINT_PASSES = 2  # exchanges from the last answer, each within its own gap to the bound


def _joint_moves(choice, p: Pairs, pi: np.ndarray, U: np.ndarray, cfg: Configurations, budget: float):
    """The moves that can be in an answer within ``budget`` of the bound: a job to another of its
    configurations, or a running job stopped, whose loss at the prices π is at most the budget
    (an answer's distance to the bound is the sum of its pairs' losses plus π · its idle GPUs,
    so no pair losing more is in it). (job, GPU change (P, k), value change, target (−2: stop))."""
    n, k = p.n, len(p.W)
    on = choice >= 0
    idx = np.flatnonzero(on)
    cur_u, cur_g, cur_t = np.zeros(n), np.zeros(n, dtype=int), np.full(n, -1)
    cur_u[idx], cur_g[idx], cur_t[idx] = U[idx, choice[on]], cfg.gpus[choice[on]], cfg.gpu_type[choice[on]]
    _, _, _, val, best, _ = p.respond(pi)
    e = np.flatnonzero((best[p.m] - val <= budget) & (p.c != choice[p.m]))
    st = np.flatnonzero(on & (best <= budget))
    job = np.r_[p.m[e], st]
    D = np.zeros((len(job), k), dtype=int)
    run = np.flatnonzero(cur_t[job] >= 0)
    D[run, cur_t[job[run]]] -= cur_g[job[run]]
    D[np.arange(len(e)), p.t[e]] += p.g[e].astype(int)
    return job, D, np.r_[p.u[e] - cur_u[p.m[e]], -cur_u[st]], np.r_[p.c[e], np.full(len(st), -2)]


def _fill_joint(choice: np.ndarray, p: Pairs, pi: np.ndarray, bound: float, U: np.ndarray,
                cfg: Configurations, tol: float, certify: bool = True) -> np.ndarray:
    """The best exchange over all GPU types at once: each job keeps its configuration or makes
    one move (``_joint_moves``, within the budget a certified answer allows), so that the GPU
    change per type stays within that type's idle GPUs — a multiple-choice knapsack in k
    dimensions, solved exactly by dynamic programming over the change vectors in a box
    [−JOINT_SPAN, idle] per type. Moves of one kind (the same change vector) are
    interchangeable but for their value, so only the JOINT_PER_KIND best of each are kept: a
    realistic round has a few dozen kinds among ~1,500 cheap moves. Restricted, so a heuristic:
    its answer is certified (or not) against the bound by the caller. ``certify``: the MILP form
    (many types) may stop at the first exchange that brings the answer within ``tol``."""
    k = len(p.W)
    on = choice >= 0
    gap = bound - _value(choice, U)
    if gap <= 0:
        return choice
    used = np.bincount(cfg.gpu_type[choice[on]], weights=cfg.gpus[choice[on]], minlength=k)
    idle = np.floor(p.W - used + 1e-9).astype(int)
    job, D, du, target = _joint_moves(choice, p, pi, U, cfg, min(gap, tol))
    if len(job) == 0:
        return choice
    kinds, kind = np.unique(D, axis=0, return_inverse=True)
    kind = kind.ravel()
    order = np.lexsort((-du, kind))  # per kind, best value first
    starts = np.r_[0, np.flatnonzero(np.diff(kind[order])) + 1]
    rank = np.empty(len(order), dtype=int)
    rank[order] = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    top = rank < JOINT_PER_KIND
    # A type on which even every job's largest gain of GPUs fits in its idle GPUs cannot be
    # overfilled by any exchange of these moves: it needs no dimension (exact). The others are the
    # DP's dimensions, as many as JOINT_STATES allows with a span of at least 1 — those holding the
    # gap (price × idle GPUs) first; moves on a type left out are dropped (many GPU types).
    most = np.zeros((p.n, k))
    np.maximum.at(most, job[top], np.maximum(D[top], 0))
    tight = np.flatnonzero(most.sum(axis=0) > idle)
    tight = tight[np.lexsort((-(D[top][:, tight] != 0).sum(axis=0), -(pi[tight] * idle[tight])))]
    states = lambda q, span: float(np.prod(np.minimum(idle[tight[:q]], span) + 2 * span + 1.0))  # noqa: E731
    q, span = len(tight), JOINT_SPAN
    while span > 1 and states(q, span) > JOINT_STATES:
        span -= 1
    while q > 0 and states(q, span) > JOINT_STATES:
        q -= 1
    if span < JOINT_SPAN or q < len(tight):  # many GPU types: the box would cut most moves out
        return _exchange_milp(choice, job, D, du, target, top, tight, idle, gap - tol if certify else None)
    dims, out_dims = tight[:q], tight[q:]
    shape = np.minimum(idle[dims], span) + 2 * span + 1
    keep = np.flatnonzero(top & (D[:, out_dims] == 0).all(axis=1) & (np.abs(D[:, dims]) < shape).all(axis=1))
    keep = keep[np.argsort(job[keep], kind="stable")]
    if len(keep) == 0:
        return choice
    if q == 0:  # no type binds: each job its best move
        best = {}
        for pos, i in enumerate(keep):
            if du[i] > 1e-12 and (job[i] not in best or du[i] > du[keep[best[job[i]]]]):
                best[job[i]] = pos
        moves = list(best.values())
    else:
        kinds, kind_of = np.unique(D[keep][:, dims], axis=0, return_inverse=True)
        moves = _exchange_dp(job[keep], kinds, kind_of.ravel(), du[keep], tuple(int(x) for x in shape), span,
                             np.minimum(idle[dims], span) + span)
    out = choice.copy()
    for i in moves:
        out[job[keep][i]] = -1 if target[keep][i] == -2 else target[keep][i]
    return out


JOINT_MILP_NODES = 1_000  # branch-and-bound nodes of the exchange MILP (many GPU types)


def _exchange_milp(choice, job, D, du, target, top, tight, idle, need=None) -> np.ndarray:
    """The joint exchange where the DP's box would be too small (many GPU types): the same
    moves (``top``; each job at most one) and the same limit (the change on every type binding
    at most its idle GPUs) as a small MILP — a few hundred to a few thousand binaries, one row
    per job with several moves and one per such type — solved by HiGHS to its optimum or
    JOINT_MILP_NODES nodes (a work limit), or stopped at the first exchange gaining ``need``
    (what certifies the answer). A heuristic to the caller, which certifies it."""
    import scipy.sparse as sp

    sel = np.flatnonzero(top)
    owners, row = np.unique(job[sel], return_inverse=True)
    cols = np.arange(len(sel))
    Dt = D[sel][:, tight].astype(float)
    nz = np.nonzero(Dt)
    A = sp.vstack([sp.csr_matrix((np.ones(len(sel)), (row.ravel(), cols)), shape=(len(owners), len(sel))),
                   sp.csr_matrix((Dt[nz], (nz[1], nz[0])), shape=(len(tight), len(sel)))]).tocsc()
    A.sort_indices()
    lp = _highs_model(du[sel], A, np.r_[np.ones(len(owners)), idle[tight].astype(float)], True)
    status, x, value = _run_highs(lp, 60.0, mip=True, rel_gap=0.0, nodes=JOINT_MILP_NODES,
                                  target=need if need is not None and np.isfinite(need) and need > 0 else None)
    out = choice.copy()
    if x is None or not value > 1e-12:
        return out
    for i in sel[x > 0.5]:
        out[job[i]] = -1 if target[i] == -2 else target[i]
    return out


def _exchange_dp(job, kinds, kind, du, shape, span, last) -> list[int]:
    """The moves (indices, ≤ one per job; ``job`` sorted) of the largest total value change
    whose GPU change vectors sum to a state at most ``last`` (per dimension; the origin is at
    ``span`` in every dimension), every partial sum within the box ``shape``."""
    k = len(shape)
    cut = {}
    for q in np.unique(kind):  # source and destination slices of each change vector
        src, dst = [], []
        for t in range(k):
            d, L = int(kinds[q][t]), shape[t]
            src.append(slice(0, L - d) if d >= 0 else slice(-d, L))
            dst.append(slice(d, L) if d >= 0 else slice(0, L + d))
        cut[int(q)] = (tuple(src), tuple(dst))
    dp = np.full(shape, -np.inf)
    dp[(span,) * k] = 0.0
    back = []
    bounds = np.r_[0, np.flatnonzero(np.diff(job)) + 1, len(job)]
    for a, z in zip(bounds[:-1], bounds[1:]):  # one stage per job: keep, or one of its moves
        new = dp.copy()
        arg = np.zeros(shape, dtype=np.int32)
        for i in range(a, z):
            src, dst = cut[int(kind[i])]
            cand = dp[src] + du[i]
            region = new[dst]
            better = cand > region + 1e-12
            region[better] = cand[better]
            arg[dst][better] = i + 1
        dp = new
        back.append(arg)
    ends = dp[tuple(slice(0, int(x) + 1) for x in last)]
    s = np.array(np.unravel_index(int(np.argmax(ends)), ends.shape))
    if not dp[tuple(s)] > 1e-12:
        return []
    chosen = []
    for arg in reversed(back):
        i = int(arg[tuple(s)]) - 1
        if i >= 0:
            chosen.append(i)
            s = s - kinds[kind[i]]
    return chosen


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
    if a.certificate:  # how lp_bound was found and what proves the answer
        explanation["certificate"] = {k: (float(v) if isinstance(v, (float, np.floating)) else v)
                                      for k, v in a.certificate.items()}
    for key, val in (extra or {}).items():
        explanation[key] = ({jid: float(v) for jid, v in zip(inst.job_ids, val)} if isinstance(val, np.ndarray) else val)
    return Allocation.of(inst, policy, (counts > 0).astype(float), a.status, objective, a.solve_seconds, thr,
                         explanation, gpu_counts=counts, nodes=nodes)
