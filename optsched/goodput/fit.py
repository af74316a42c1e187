"""Fit the 7 throughput parameters from observed iteration times (docs/architecture.md §7).

Objective (the peers' one, Pollux `fit_perf_params`):

    L(θ) = RMSE(log T̂_acc, log t_acc) + RMSE(log T̂_sync, log t_step)
           + 1e-3 (γ − 1)² + 1e-2 [(β_n/α_n)² + (β_r/α_r)²]

over observations (nodes, replicas, micro-batch b, t_acc = step − sync time,
t_step). Parameters the data cannot identify are frozen: one micro-batch size
seen → α_c = mean(t_acc)/2; no multi-node rows → α_n, β_n at the lower bound;
no single-node multi-replica rows → α_r, β_r at the lower bound; no r > 2 →
β_n, β_r at the lower bound. Without multi-node data the prior α_n ≥ 1.1 α_r,
β_n ≥ 1.1 β_r is enforced after the fit.

Ours: the same objective in JAX, one jitted BFGS (jax.scipy.optimize.minimize)
over an unconstrained parametrization (α, β = 1e-8 + exp(u), γ = 1 + 9 σ(u)),
observations padded to fixed bucket sizes with a mask so a new observation
count does not recompile. ``fit_reference`` solves the same problem with
``scipy.optimize.least_squares`` (sum of squared log-residuals instead of the sum
of RMSEs — identical minimizer on noise-free data); it is the check in tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from optsched.model import OptschedError

LOWER = 1e-8
GAMMA_MAX = 10.0
BUCKETS = (16, 64, 256, 1024, 4096)
OUTER_ITERATIONS = 8


@dataclass(frozen=True)
class Observations:
    """Measured iterations: one row per (nodes, replicas, micro-batch)."""

    nodes: np.ndarray
    replicas: np.ndarray
    atomic_bsz: np.ndarray
    accum_time: np.ndarray  # step − sync: compute of one micro-batch
    step_time: np.ndarray  # one full step (compute + synchronization)

    @classmethod
    def from_arrays(cls, nodes, replicas, atomic_bsz, step_time, sync_time) -> "Observations":
        step = np.asarray(step_time, dtype=float)
        return cls(np.asarray(nodes, float), np.asarray(replicas, float), np.asarray(atomic_bsz, float),
                   step - np.asarray(sync_time, dtype=float), step)

    def __len__(self) -> int:
        return len(self.step_time)

    def valid(self) -> "Observations":
        """Rows usable for a log-space fit (positive, finite, consistent)."""
        ok = (
            np.isfinite(self.accum_time) & np.isfinite(self.step_time) & (self.accum_time > 0)
            & (self.step_time >= self.accum_time) & (self.atomic_bsz >= 1) & (self.replicas >= 1)
            & (self.nodes >= 1) & (self.nodes <= self.replicas)
        )
        return Observations(*(a[ok] for a in (self.nodes, self.replicas, self.atomic_bsz, self.accum_time, self.step_time)))


@dataclass(frozen=True)
class FitResult:
    params: np.ndarray  # (7,)
    loss: float
    used_prior: bool = False
    message: str = ""


def frozen_parameters(obs: Observations) -> tuple[np.ndarray, np.ndarray]:
    """(free mask (7,), values of frozen parameters (7,)) — the peers' identifiability rules."""
    free = np.ones(7, dtype=bool)
    fixed = np.full(7, LOWER)
    fixed[6] = 1.0
    if len(np.unique(obs.atomic_bsz)) == 1:
        free[0] = False
        fixed[0] = float(np.mean(obs.accum_time)) / 2
    multi_node = obs.nodes > 1
    intra = (obs.nodes == 1) & (obs.replicas > 1)
    if not multi_node.any():
        free[2] = free[3] = False
    if not intra.any():
        free[4] = free[5] = False
    if not (obs.replicas > 2).any():
        free[3] = free[5] = False
    return free, fixed


def enforce_prior(params: np.ndarray, obs: Observations) -> np.ndarray:
    """Without multi-node data: inter-node links are at least 10 % slower than intra-node."""
    p = np.array(params, dtype=float)
    if not (obs.nodes > 1).any():
        p[2] = max(p[2], 1.1 * p[4])
        p[3] = max(p[3], 1.1 * p[5])
    return p


def initial_params(obs: Observations) -> np.ndarray:
    """A data-driven start: compute split half constant, half linear; each
    network term from the rows that measure it (inter-node rows for α_n, β_n;
    single-node multi-GPU rows for α_r, β_r), a tenth of it as the slope."""
    t = float(np.mean(obs.accum_time))
    b = float(np.mean(obs.atomic_bsz))
    gap = obs.step_time - obs.accum_time
    net = max(float(np.median(gap)), 1e-4)
    inter, intra = obs.nodes > 1, (obs.nodes == 1) & (obs.replicas > 1)
    net_n = max(float(np.median(gap[inter])), 1e-4) if inter.any() else net
    net_r = max(float(np.median(gap[intra])), 1e-4) if intra.any() else net
    return np.array([t / 2, t / 2 / b, net_n, net_n / 10, net_r, net_r / 10, 2.0])


# Multi-start: (γ, factor on the network slopes β_n, β_r). The loss surface is
# multimodal where network terms are small next to compute (found by hypothesis:
# single starts stopped at 4–7× the reference loss with β or γ collapsed to a
# bound). Each start reuses the same compiled function.
STARTS = ((None, 1.0), (5.0, 1.0), (3.0, 10.0))


# -- JAX ------------------------------------------------------------------------------


def _jax():
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


def _to_unconstrained(p: np.ndarray) -> np.ndarray:
    u = np.log(np.maximum(np.asarray(p[:6], float) - LOWER, 1e-12))
    g = np.clip((float(p[6]) - 1.0) / (GAMMA_MAX - 1.0), 1e-6, 1 - 1e-6)
    return np.append(u, math.log(g / (1 - g)))


@lru_cache(maxsize=None)
def _compiled_fit():
    """The jitted BFGS fit; compiled once per bucket shape (jit caches by shape)."""
    jax = _jax()
    import jax.numpy as jnp
    from jax.scipy.optimize import minimize

    def params_of(u, free, fixed):
        ab = LOWER + jnp.exp(u[:6])
        gamma = 1.0 + (GAMMA_MAX - 1.0) * jax.nn.sigmoid(u[6])
        return jnp.where(free, jnp.append(ab, gamma), fixed)

    def terms(u, free, fixed, nodes, replicas, bsz, log_acc, log_step, mask):
        p = params_of(u, free, fixed)
        t_acc = p[0] + p[1] * bsz
        inter, intra = nodes > 1, replicas > 1
        alpha = jnp.where(inter, p[2], jnp.where(intra, p[4], LOWER))
        beta = jnp.where(inter, p[3], jnp.where(intra, p[5], LOWER))
        t_net = alpha + beta * jnp.maximum(replicas - 2, LOWER)
        g = p[6]
        log_sync = jnp.logaddexp(g * jnp.log(t_acc), g * jnp.log(t_net)) / g
        count = jnp.maximum(mask.sum(), 1.0)
        r1 = jnp.where(mask > 0, jnp.log(t_acc) - log_acc, 0.0)
        r2 = jnp.where(mask > 0, log_sync - log_step, 0.0)
        reg = 1e-3 * (g - 1.0) ** 2 + 1e-2 * ((p[3] / p[2]) ** 2 + (p[5] / p[4]) ** 2)
        return (r1 ** 2).sum() / count, (r2 ** 2).sum() / count, reg

    def peers_loss(u, *args):
        mse1, mse2, reg = terms(u, *args)
        return jnp.sqrt(mse1) + jnp.sqrt(mse2) + reg

    def weighted_loss(u, w1, w2, *args):
        mse1, mse2, reg = terms(u, *args)
        return w1 * mse1 + w2 * mse2 + reg

    def weights(u, *args):
        # d sqrt(mse) = d mse / (2 sqrt(mse)): at a fixed point of this reweighting
        # the weighted problem's stationary point is the RMSE objective's.
        mse1, mse2, _ = terms(u, *args)
        return 0.5 / jnp.sqrt(jnp.maximum(mse1, 1e-10)), 0.5 / jnp.sqrt(jnp.maximum(mse2, 1e-10))

    @jax.jit
    def fit(u0, *args):
        # The sum of RMSEs has a kink at an exact fit that makes BFGS's line search
        # fail (measured: status 3 after one step), so BFGS runs on the smooth
        # weighted sum of MSEs, re-weighted a few times (iteratively reweighted
        # least squares) to converge to the peers' objective.
        def outer(_, u):
            w1, w2 = weights(u, *args)
            res = minimize(weighted_loss, u, args=(w1, w2) + args, method="BFGS", options={"maxiter": 200})
            ok = jnp.all(jnp.isfinite(res.x)) & (peers_loss(res.x, *args) <= peers_loss(u, *args))
            return jnp.where(ok, res.x, u)

        u = jax.lax.fori_loop(0, OUTER_ITERATIONS, outer, u0)
        return params_of(u, *args[:2]), peers_loss(u, *args)

    return fit


def bucket_size(count: int) -> int:
    for b in BUCKETS:
        if count <= b:
            return b
    return int(2 ** math.ceil(math.log2(count)))


def _padded(obs: Observations, size: int) -> tuple[np.ndarray, ...]:
    pad = size - len(obs)

    def p(a, fill):
        return np.concatenate([np.asarray(a, float), np.full(pad, fill)])

    mask = np.concatenate([np.ones(len(obs)), np.zeros(pad)])
    return (p(obs.nodes, 1.0), p(obs.replicas, 1.0), p(obs.atomic_bsz, 1.0),
            p(np.log(obs.accum_time), 0.0), p(np.log(obs.step_time), 0.0), mask)


def fit_params(obs: Observations, prior: np.ndarray | None = None, min_observations: int = 1) -> FitResult:
    """Fit θ with the jitted JAX BFGS. Too few usable observations: return the
    prior (the application's profile) and say so; without a prior, an OptschedError."""
    clean = obs.valid()
    dropped = len(obs) - len(clean)
    if len(clean) < min_observations:
        msg = f"only {len(clean)} usable observations ({dropped} invalid), need {min_observations}"
        if prior is None:
            raise OptschedError(f"goodput.observations: {msg} and no profile prior to fall back on")
        return FitResult(np.asarray(prior, float), float("nan"), True, f"{msg}: using the profile prior")
    free, fixed = frozen_parameters(clean)
    start = initial_params(clean) if prior is None else np.where(np.asarray(prior) > LOWER * 10, prior, initial_params(clean))
    start = np.where(free, start, fixed)
    fit = _compiled_fit()
    data = (free, fixed, *_padded(clean, bucket_size(len(clean))))
    params, loss = None, np.inf
    for gamma, slope in STARTS if free[6] else STARTS[:1]:
        x0 = start.copy()
        if gamma is not None:
            x0[6] = gamma
        x0[[3, 5]] *= slope
        p, value = fit(_to_unconstrained(np.where(free, x0, fixed)), *data)
        if float(value) < loss:
            params, loss = p, float(value)
    params = enforce_prior(np.asarray(params), clean)
    message = f"dropped {dropped} invalid observations" if dropped else ""
    return FitResult(params, float(loss), False, message)


def fit_many(observations: list[Observations], priors: list | None = None) -> list[FitResult]:
    """Refit every running job's model for one round (a loop of jitted fits:
    measured faster than vmap of BFGS here, see docs/architecture.md §7 and bench/goodput_fit_bench.py)."""
    priors = priors or [None] * len(observations)
    return [fit_params(o, p) for o, p in zip(observations, priors)]


# -- reference: scipy least_squares --------------------------------------------------


def fit_reference(obs: Observations) -> FitResult:
    """Same model, bounds and freezing rules, solved with scipy.optimize.least_squares
    (trust-region reflective) on squared log residuals + the two regularizers."""
    from scipy.optimize import least_squares

    clean = obs.valid()
    free, fixed = frozen_parameters(clean)
    x0 = initial_params(clean)[free]
    lo = np.full(7, LOWER * 1.0001)
    lo[6] = 1.0
    hi = np.full(7, np.inf)
    hi[6] = GAMMA_MAX
    n = len(clean)
    from optsched.goodput.model import accum_time, network_time, sync_step_time

    def full(x):
        p = fixed.copy()
        p[free] = x
        return p

    def parts(x):
        p = full(x)
        t_acc = accum_time(p, clean.atomic_bsz)
        t_sync = sync_step_time(p, t_acc, network_time(p, clean.nodes, clean.replicas))
        r1 = (np.log(t_acc) - np.log(clean.accum_time)) / math.sqrt(n)
        r2 = (np.log(t_sync) - np.log(clean.step_time)) / math.sqrt(n)
        reg = np.array([math.sqrt(1e-3) * (p[6] - 1), 0.1 * p[3] / p[2], 0.1 * p[5] / p[4]])
        return r1, r2, reg

    # The same reweighting as the JAX path (squared residuals weighted by
    # 1/(2·RMSE)), each inner problem solved by trust-region reflective.
    x = np.clip(x0, lo[free] * 1.01, np.where(np.isfinite(hi[free]), hi[free] * 0.99, np.inf))
    for _ in range(OUTER_ITERATIONS + 2):
        r1, r2, _ = parts(x)
        w1 = 0.5 / max(float(np.sqrt((r1 ** 2).sum())), 1e-5)
        w2 = 0.5 / max(float(np.sqrt((r2 ** 2).sum())), 1e-5)

        def residuals(x, w1=w1, w2=w2):
            r1, r2, reg = parts(x)
            return np.concatenate([math.sqrt(w1) * r1, math.sqrt(w2) * r2, reg])

        res = least_squares(residuals, x, bounds=(lo[free], hi[free]), x_scale="jac", xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=2000)
        x = res.x
    r1, r2, reg = parts(x)
    loss = float(np.sqrt((r1 ** 2).sum()) + np.sqrt((r2 ** 2).sum()) + (reg ** 2).sum())
    params = enforce_prior(full(x), clean)
    return FitResult(params, loss, False, "")
