"""Pollux's goodput model, vectorized over jobs and configurations (docs/architecture.md §7).

Throughput (7 parameters θ = α_c, β_c, α_n, β_n, α_r, β_r, γ) for r replicas on
n nodes, per-GPU micro-batch b and s gradient-accumulation steps:

    T_acc  = α_c + β_c · b                              (one micro-batch, fwd+bwd)
    T_net  = α_n + β_n · max(r − 2, ε)   if n > 1       (inter-node all-reduce)
           = α_r + β_r · max(r − 2, ε)   if n = 1, r > 1 (intra-node)
           ≈ 0                            if r = 1
    T_sync = (T_acc^γ + T_net^γ)^(1/γ)                  (γ ∈ [1, 10]: overlap)
    T_iter = s · T_acc + T_sync,     M = r · b · (s + 1),     throughput = M / T_iter

Statistical efficiency from the gradient noise (|g|² = grad_sqr, tr Σ = grad_var,
measured at the initial batch size M0), k = M / M0:

    gain = (var + sqr) / (var / k + sqr),     E = gain / k,     goodput = throughput · E

goodput is in "useful samples per second"; goodput / M0 = gain / T_iter is the
training progress per second in units of M0-sized steps (what the peers'
simulators integrate). The batch size is chosen per configuration to maximize
goodput: M ∈ geomspace(max(M0, b_min · r), M_max, 50), s = ceil(M/r / b_max) − 1,
b = ceil(M/r / (s+1)) — exactly the candidate set of Pollux's `optimize`.

Pure numpy; imports nothing from optsched, so formulations may use it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

PARAM_NAMES = ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma")
N_BATCH_CANDIDATES = 50  # Pollux samples 50 batch sizes in geometric space
_EPS = 1e-8  # floor/ceil tolerance and the "no network" time, as in the peers' code


def accum_time(params: np.ndarray, atomic_bsz) -> np.ndarray:
    """T_acc = α_c + β_c·b; params (..., 7) broadcast against b."""
    params = np.asarray(params, dtype=float)
    return params[..., 0] + params[..., 1] * np.asarray(atomic_bsz, dtype=float)


def network_time(params: np.ndarray, nodes, replicas) -> np.ndarray:
    """The slowest link decides: inter-node if n > 1, intra-node if r > 1, else ε."""
    params = np.asarray(params, dtype=float)
    nodes, replicas = np.asarray(nodes, dtype=float), np.asarray(replicas, dtype=float)
    inter, intra = nodes > 1, replicas > 1
    alpha = np.where(inter, params[..., 2], np.where(intra, params[..., 4], _EPS))
    beta = np.where(inter, params[..., 3], np.where(intra, params[..., 5], _EPS))
    return alpha + beta * np.maximum(replicas - 2, _EPS)


def sync_step_time(params: np.ndarray, t_acc, t_net) -> np.ndarray:
    """T_sync = (T_acc^γ + T_net^γ)^(1/γ), computed in log space (γ up to 10)."""
    gamma = np.asarray(params, dtype=float)[..., 6]
    return np.exp(np.logaddexp(gamma * np.log(t_acc), gamma * np.log(t_net)) / gamma)


def iteration_time(params, nodes, replicas, atomic_bsz, accum_steps) -> np.ndarray:
    """T_iter = s·T_acc + T_sync (seconds per optimizer step)."""
    t_acc = accum_time(params, atomic_bsz)
    t_net = network_time(params, nodes, replicas)
    return np.asarray(accum_steps, dtype=float) * t_acc + sync_step_time(params, t_acc, t_net)


def statistical_gain(grad_sqr, grad_var, init_batch_size, batch_size) -> np.ndarray:
    """gain = (var + sqr)/(var/k + sqr), k = M/M0: progress per step in M0-steps."""
    k = np.asarray(batch_size, dtype=float) / np.asarray(init_batch_size, dtype=float)
    sqr, var = np.asarray(grad_sqr, dtype=float), np.asarray(grad_var, dtype=float)
    denom = var / k + sqr
    safe = np.where(denom > 0, denom, 1.0)
    return np.where(denom > 0, (var + sqr) / safe, 1.0)


def efficiency(grad_sqr, grad_var, init_batch_size, batch_size) -> np.ndarray:
    """E = gain / k = (φ + M0)/(φ + M) with φ = M0·var/sqr (the gradient noise scale)."""
    k = np.asarray(batch_size, dtype=float) / np.asarray(init_batch_size, dtype=float)
    return statistical_gain(grad_sqr, grad_var, init_batch_size, batch_size) / k


@dataclass(frozen=True)
class GoodputModel:
    """Goodput models of n jobs (arrays of length n; params (n, 7)).

    Batch-size limits per job: init_batch_size M0 ≤ M ≤ max_batch_size, per-GPU
    micro-batch in [min_local_bsz, max_local_bsz]; accumulation allows local
    batches above max_local_bsz via s accumulation steps.
    """

    params: np.ndarray  # (n, 7)
    grad_sqr: np.ndarray  # (n,)
    grad_var: np.ndarray  # (n,)
    init_batch_size: np.ndarray  # (n,)
    max_batch_size: np.ndarray  # (n,)
    min_local_bsz: np.ndarray  # (n,)
    max_local_bsz: np.ndarray  # (n,)
    accumulation: bool = True

    @classmethod
    def single(cls, params, grad_sqr, grad_var, init_batch_size, max_batch_size=None,
               local_bsz=(1, None), accumulation: bool = True) -> "GoodputModel":
        max_bs = init_batch_size if max_batch_size is None else max_batch_size
        lo, hi = local_bsz
        return cls(
            params=np.asarray(params, dtype=float).reshape(1, 7),
            grad_sqr=np.array([grad_sqr], dtype=float),
            grad_var=np.array([grad_var], dtype=float),
            init_batch_size=np.array([init_batch_size], dtype=float),
            max_batch_size=np.array([max_bs], dtype=float),
            min_local_bsz=np.array([lo or 1], dtype=float),
            max_local_bsz=np.array([hi or max_bs], dtype=float),
            accumulation=accumulation,
        )

    @property
    def n(self) -> int:
        return len(self.grad_sqr)

    def take(self, index) -> "GoodputModel":
        """The models of a subset of jobs."""
        return replace(
            self,
            params=self.params[index], grad_sqr=self.grad_sqr[index], grad_var=self.grad_var[index],
            init_batch_size=self.init_batch_size[index], max_batch_size=self.max_batch_size[index],
            min_local_bsz=self.min_local_bsz[index], max_local_bsz=self.max_local_bsz[index],
        )

    def with_params(self, params: np.ndarray) -> "GoodputModel":
        return replace(self, params=np.asarray(params, dtype=float).reshape(self.n, 7))

    # -- evaluation at a given batch configuration --------------------------------

    def throughput(self, nodes, replicas, atomic_bsz, accum_steps) -> np.ndarray:
        """Samples/s; arguments broadcast against (n, ...)."""
        nodes, replicas, atomic_bsz, accum_steps = (np.asarray(a, dtype=float) for a in (nodes, replicas, atomic_bsz, accum_steps))
        extra = max(nodes.ndim, replicas.ndim, atomic_bsz.ndim, accum_steps.ndim, 1) - 1
        P = self.params.reshape((self.n,) + (1,) * extra + (7,))
        t = iteration_time(P, nodes, replicas, atomic_bsz, accum_steps)
        return replicas * atomic_bsz * (accum_steps + 1) / t

    def goodput(self, nodes, replicas, atomic_bsz, accum_steps) -> np.ndarray:
        """throughput × efficiency (samples/s of M0-equivalent progress)."""
        nodes, replicas, atomic_bsz, accum_steps = (np.asarray(a, dtype=float) for a in (nodes, replicas, atomic_bsz, accum_steps))
        extra = max(nodes.ndim, replicas.ndim, atomic_bsz.ndim, accum_steps.ndim, 1) - 1
        col = lambda a: a.reshape((self.n,) + (1,) * extra)  # noqa: E731
        M = replicas * atomic_bsz * (accum_steps + 1)
        E = efficiency(col(self.grad_sqr), col(self.grad_var), col(self.init_batch_size), M)
        return self.throughput(nodes, replicas, atomic_bsz, accum_steps) * E

    # -- batch-size choice ----------------------------------------------------------

    def optimize(self, nodes, replicas, params: np.ndarray | None = None,
                 columns: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Best goodput per configuration with the batch size chosen for it.

        nodes, replicas: (n, C) (or broadcastable); params: (n, C, 7) per configuration
        (default each job's own); columns: (n, C) bool, the configurations to search for
        each job (default all; the others are returned as 0). Returns (goodput, atomic_bsz,
        accum_steps), each (n, C); goodput is 0 where the job's batch-size limits exclude
        the configuration (b_min·r > M_max, or a micro-batch above b_max without
        accumulation) or where replicas < 1.

        The search's candidates and their throughput depend on the job only through its
        parameters and batch limits, never on its gradient statistics (the epoch): jobs of
        one application on one configuration ("units") share that half, searched once; only
        the efficiency, the choice among candidates and the refinement windows it picks are
        per job (the windows, too, once per unit and window). Every number is the same
        elementwise arithmetic as a search per job (tests/test_goodput_shared.py compares
        them bit for bit).
        """
        n = self.n
        shape = np.broadcast_shapes(np.shape(nodes), np.shape(replicas))
        nodes = np.broadcast_to(np.asarray(nodes, dtype=float), shape)
        replicas = np.broadcast_to(np.asarray(replicas, dtype=float), shape)
        if nodes.ndim == 1:
            nodes, replicas = np.broadcast_to(nodes, (n, nodes.shape[0])), np.broadcast_to(replicas, (n, replicas.shape[0]))
        C = nodes.shape[1]
        P = (np.broadcast_to(self.params[:, None, :], (n, C, 7)) if params is None
             else np.broadcast_to(np.asarray(params, dtype=float), (n, C, 7)))
        cols = np.ones((n, C), dtype=bool) if columns is None else np.broadcast_to(np.asarray(columns, dtype=bool), (n, C))
        G, B, S = np.zeros((n, C)), np.zeros((n, C), dtype=int), np.zeros((n, C), dtype=int)
        row, c = np.nonzero(cols)
        if len(row) == 0:
            return G, B, S
        # units: (job inputs but the gradient statistics, configuration), grouped by their bits
        limits = np.stack([self.init_batch_size, self.max_batch_size, self.min_local_bsz, self.max_local_bsz], axis=1)
        key = np.ascontiguousarray(np.concatenate([P.reshape(n, -1), limits, nodes, replicas], axis=1)).view(np.int64)
        _, first, group = np.unique(key, axis=0, return_index=True, return_inverse=True)
        unit_id, pair_unit = np.unique(group.ravel()[row] * C + c, return_inverse=True)
        pair_unit = pair_unit.ravel()
        shared = _Units(self, first[unit_id // C], unit_id % C, nodes, replicas, P)
        # The candidates' batch sizes depend on the job's limits and the replicas only (not on the
        # type's parameters), so the efficiency is computed once per (job, replicas, candidates).
        _, rep = np.unique(replicas[row, c], return_inverse=True)
        e_id, e_first, pair_e = np.unique(row * (rep.max() + 1) + rep.ravel(), return_index=True, return_inverse=True)
        pair_e = pair_e.ravel()
        e_row = row[e_first]
        sqr, var, m0 = (a[e_row][:, None] for a in (self.grad_sqr, self.grad_var, self.init_batch_size))

        def goodput(part, units, eff):  # per job: the unit's throughput × the efficiency, (pairs, candidates)
            thr, ok = (x[units].reshape(len(row), -1) for x in (part[0], part[2]))
            g = thr * eff
            return np.where(ok & np.isfinite(g), g, 0.0)

        def eff_of(part, units):  # efficiency at a part's candidates, per (job, replicas)
            return efficiency(sqr, var, m0, part[1][units[e_first]])[pair_e]

        # Pollux's 50 geometric candidates in [lo, hi], then 20 more between the
        # neighbours of each of the 3 best: goodput is a sawtooth in M (the
        # accumulation steps jump), and the coarse grid's 10 % steps can miss the
        # top of a tooth, or the tooth itself, by a few % of goodput.
        g1 = goodput(shared.grid, pair_unit, eff_of(shared.grid, pair_unit))
        top = _top3(g1)
        windows, which = np.unique(pair_unit[:, None] * N_BATCH_CANDIDATES + top, return_inverse=True)
        which = which.reshape(top.shape)
        refine = shared.windows(windows)
        # a window's candidates, too, depend on the replicas and the grid index only
        w_id, w_first, pair_w = np.unique(pair_e[:, None] * N_BATCH_CANDIDATES + top, return_index=True,
                                          return_inverse=True)
        w_pair, w_j = np.divmod(w_first, top.shape[1])
        e_w = pair_e[w_pair]
        eff2 = efficiency(sqr[e_w], var[e_w], m0[e_w], refine[1][which[w_pair, w_j]])[pair_w.reshape(top.shape)]
        g2 = goodput(refine, which, eff2.reshape(len(row), -1))  # (pairs, 60): the 3 windows in the order of the 3 best
        # The right end of the first 16 teeth exactly: r·b_max·(s+1), where the
        # micro-batch is full (a window of < 0.5 % in M that the grids can miss).
        g3 = goodput(shared.ends, pair_unit, eff_of(shared.ends, pair_unit))
        g = np.concatenate([g1, g2, g3], axis=1)
        best = np.argmax(g, axis=1)
        b, s = np.zeros(len(row)), np.zeros(len(row))
        K1, K2 = g1.shape[1], g2.shape[1]
        w = K2 // top.shape[1]
        for lo, hi, part, units, at in (
            (0, K1, shared.grid, pair_unit, best),
            (K1, K1 + K2, refine, which[np.arange(len(row)), np.clip(best - K1, 0, K2 - 1) // w], (best - K1) % w),
            (K1 + K2, g.shape[1], shared.ends, pair_unit, best - K1 - K2),
        ):
            sel = (best >= lo) & (best < hi)
            b[sel], s[sel] = part[3][units[sel], at[sel]], part[4][units[sel], at[sel]]
        G[row, c] = g[np.arange(len(row)), best]
        B[row, c], S[row, c] = b.astype(int), s.astype(int)
        return G, B, S


def _top3(g: np.ndarray) -> np.ndarray:
    """Each row's 3 largest entries' indices, ties to the lower index (a stable sort's first 3;
    entries are finite): three first-maximum passes, cheaper than sorting 50 candidates."""
    g = g.copy()
    rows = np.arange(len(g))
    top = np.empty((len(g), 3), dtype=np.intp)
    for j in range(3):
        top[:, j] = np.argmax(g, axis=1)
        g[rows, top[:, j]] = -np.inf
    return top


class _Units:
    """The job-independent half of the batch-size search for each unit (a job's parameters and
    batch limits on one configuration): candidates, micro-batches, accumulation steps and
    throughput; ``grid`` (the 50 geometric candidates), ``ends`` (the 16 tooth ends) and, on
    demand, ``windows`` (the 20 candidates between a grid point's neighbours)."""

    def __init__(self, model: GoodputModel, rows, cols, nodes, replicas, P):
        self.model = model
        col = lambda a: np.asarray(a, dtype=float)[rows][:, None]  # noqa: E731
        raw = replicas[rows, cols][:, None]
        self.r = np.maximum(raw, 1.0)
        self.nodes = nodes[rows, cols][:, None]
        self.P = np.ascontiguousarray(P[rows, cols])[:, None, :]
        self.m0, self.bmin, self.bmax = col(model.init_batch_size), col(model.min_local_bsz), col(model.max_local_bsz)
        lo = np.maximum(self.m0, self.bmin * self.r)
        hi = col(model.max_batch_size)
        self.feasible = (raw >= 1) & (lo <= hi * (1 + 1e-9))
        hi = np.maximum(hi, lo)
        u = np.linspace(0.0, 1.0, N_BATCH_CANDIDATES)
        log_lo, log_hi = np.log(lo), np.log(hi)
        self.M = np.exp(log_lo + (log_hi - log_lo) * u)  # (U, 50)
        self.grid = self.evaluate(self.M)
        ends = self.r * self.bmax * np.arange(1, 17)
        self.ends = self.evaluate(np.clip(ends, lo, hi))

    def evaluate(self, M: np.ndarray, units=None):
        """(throughput, global batch, usable, micro-batch, accumulation steps) at batches M."""
        at = slice(None) if units is None else units
        r3, bmax, m0 = self.r[at], self.bmax[at], self.m0[at]
        local = M / r3
        if self.model.accumulation:
            s = np.ceil(local / bmax - _EPS) - 1
            # One replica above M0: at least one accumulation step (the gradient
            # statistics need two micro-batches), as in Pollux's optimize.
            single = (r3 == 1) & (local > m0 + _EPS)
            s = np.maximum(np.where(single, np.maximum(s, 1), s), 0)
        else:
            s = np.zeros_like(local)
        b = np.ceil(local / (s + 1) - _EPS)
        batch = r3 * b * (s + 1)
        thr = batch / iteration_time(self.P[at], self.nodes[at], r3, b, s)
        ok = (b >= self.bmin[at]) & (b <= bmax) & self.feasible[at]
        return thr, batch, ok, b, s

    def windows(self, ids: np.ndarray):
        """The refinement candidates of windows ``ids`` = unit · 50 + grid index (between the
        index's neighbours on the grid), evaluated: each (len(ids), 20)."""
        unit, i = ids // N_BATCH_CANDIDATES, ids % N_BATCH_CANDIDATES
        v = np.linspace(0.0, 1.0, 20)
        near_lo = np.log(self.M[unit, np.maximum(i - 1, 0)])[:, None]
        near_hi = np.log(self.M[unit, np.minimum(i + 1, N_BATCH_CANDIDATES - 1)])[:, None]
        return self.evaluate(np.exp(near_lo + (near_hi - near_lo) * v), unit)
