"""Loss-based termination (Blox): a job's convergence profile and the rule that
ends it when its loss is within a relative threshold of its final loss.

A profile is the loss as a function of steps, either a power law

    loss(s) = L∞ + (L0 − L∞) · (1 + s/τ)^(−α)

(``ConvergenceProfile.power``; Optimus and Blox fit curves of this family) or
measured points (``ConvergenceProfile.points``, interpolated linearly, flat
after the last). The job's *final loss* is loss(steps_total): what it would
reach running to its requested length. The rule (pure, vectorizable):

    terminate at the first s with loss(s) ≤ final · (1 + threshold)

``termination_step(profile, steps_total, threshold)`` is that s (≤
steps_total; steps_total itself when the loss only gets there at the end).

A power law keeps its parameters (``law``) and is evaluated and inverted in
closed form: the termination step of loss(s) = L∞ + (L0 − L∞)(1 + s/τ)^(−α) is
s* = τ·(q^(−1/α) − 1), q = (final·(1 + R) − L∞)/(L0 − L∞), 0 when q ≥ 1.

In traces a job's profile is four optional columns (``LOSS_COLUMNS``:
``loss_initial, loss_final, loss_tau, loss_alpha``), a power law over the
*fraction* of the job's requested work (τ is a fraction, so the same columns
mean the same curve whether the trace gives steps or a duration); empty cells:
no profile. The simulator (``--loss-threshold R``,
optsched/sim/stages.py ``loss_termination``) replaces each profiled job's work
by its termination step — exactly equivalent to checking ``should_terminate``
after every step, because the profile is a fixed function of progress — and
reports how many jobs it cut and the fraction of work left. A run without
``--loss-threshold`` is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optsched.model import OptschedError


LOSS_COLUMNS = ("loss_initial", "loss_final", "loss_tau", "loss_alpha")


@dataclass(frozen=True)
class ConvergenceProfile:
    steps: np.ndarray  # increasing, starting at 0
    loss: np.ndarray
    law: tuple[float, float, float, float] | None = None  # power law (L0, L∞, τ, α): exact evaluation

    @classmethod
    def power(cls, initial: float, final: float, tau: float, alpha: float, horizon: float, points: int = 512):
        if not (initial > final >= 0 and tau > 0 and alpha > 0 and horizon > 0):
            raise OptschedError("convergence: need initial > final >= 0, tau > 0, alpha > 0, horizon > 0")
        s = np.concatenate([[0.0], np.geomspace(tau * 1e-3, horizon, points - 1)])
        law = (float(initial), float(final), float(tau), float(alpha))
        return cls(s, final + (initial - final) * (1.0 + s / tau) ** (-alpha), law)

    @classmethod
    def points(cls, steps, loss):
        s, l = np.asarray(steps, dtype=float), np.asarray(loss, dtype=float)
        if s.shape != l.shape or s.ndim != 1 or len(s) < 2:
            raise OptschedError("convergence: need at least two (step, loss) points of equal length")
        if not (np.all(np.isfinite(s)) and np.all(np.isfinite(l))) or np.any(np.diff(s) <= 0) or s[0] < 0:
            raise OptschedError("convergence: steps must be finite, >= 0 and increasing; losses finite")
        return cls(s, l)

    def __call__(self, steps) -> np.ndarray:
        if self.law is not None:
            l0, linf, tau, alpha = self.law
            return linf + (l0 - linf) * (1.0 + np.asarray(steps, dtype=float) / tau) ** (-alpha)
        return np.interp(np.asarray(steps, dtype=float), self.steps, self.loss)


def termination_step(profile: ConvergenceProfile, steps_total: float, threshold: float) -> float:
    """The first step where loss ≤ final·(1 + threshold), final = loss(steps_total)."""
    if not threshold >= 0:
        raise OptschedError(f"loss threshold: must be >= 0, got {threshold}")
    if steps_total <= 0:
        return float(steps_total)
    final = float(profile(steps_total))
    target = final * (1.0 + threshold) if final >= 0 else final * (1.0 - threshold)
    if profile.law is not None:
        l0, linf, tau, alpha = profile.law
        q = (target - linf) / (l0 - linf)
        if q >= 1.0:
            return 0.0
        return float(min(tau * (q ** (-1.0 / alpha) - 1.0), steps_total))
    grid = np.union1d(profile.steps[profile.steps < steps_total], [steps_total])
    vals = profile(grid)
    hit = np.flatnonzero(vals <= target)
    if not len(hit):
        return float(steps_total)
    i = int(hit[0])
    if i == 0:
        return float(grid[0])
    # linear interpolation inside the crossing segment
    s0, s1, v0, v1 = grid[i - 1], grid[i], vals[i - 1], vals[i]
    return float(s0 + (s1 - s0) * (v0 - target) / (v0 - v1)) if v0 != v1 else float(s1)


def should_terminate(profile: ConvergenceProfile, steps_done: float, steps_total: float, threshold: float) -> bool:
    return steps_done >= termination_step(profile, steps_total, threshold) - 1e-9


def profiles_from_columns(frame, where: str = "trace") -> list[ConvergenceProfile | None]:
    """One profile per row of a trace's jobs table (``LOSS_COLUMNS``; a power
    law over the fraction of the job's work, horizon 1), None where the row has
    no profile (all four cells empty). A partial or invalid profile is an error
    naming the row."""
    if not all(c in frame for c in LOSS_COLUMNS):
        return [None] * len(frame)
    vals = np.column_stack([np.asarray(frame[c], dtype=float) for c in LOSS_COLUMNS])
    rows = frame["row"].to_numpy() if "row" in frame else np.arange(1, len(frame) + 1)
    out: list[ConvergenceProfile | None] = []
    for i, (l0, linf, tau, alpha) in enumerate(vals.tolist()):
        blank = np.isnan([l0, linf, tau, alpha])
        if blank.all():
            out.append(None)
            continue
        if blank.any() or not np.isfinite([l0, linf, tau, alpha]).all():
            raise OptschedError(f"{where}: row {rows[i]}: a convergence profile needs all of "
                                f"{', '.join(LOSS_COLUMNS)} (finite numbers)")
        if not (l0 > linf >= 0 and tau > 0 and alpha > 0):
            raise OptschedError(f"{where}: row {rows[i]}: convergence profile needs loss_initial > loss_final >= 0, "
                                f"loss_tau > 0, loss_alpha > 0; got {l0:g}, {linf:g}, {tau:g}, {alpha:g}")
        out.append(ConvergenceProfile.power(l0, linf, tau, alpha, 1.0, points=16))
    return out


def synthetic_columns(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``LOSS_COLUMNS`` for n jobs, the documented synthetic prior (as
    ``synthetic_profiles``, τ as a fraction of the work): for traces without
    profiles (Philly) in benchmarks."""
    rng = np.random.default_rng(seed)
    alpha, frac, final = rng.uniform(0.5, 2.0, n), rng.uniform(0.01, 0.2, n), rng.uniform(0.05, 0.5, n)
    return {"loss_initial": np.ones(n), "loss_final": final, "loss_tau": frac, "loss_alpha": alpha}


def synthetic_profiles(steps_total: np.ndarray, seed: int = 0) -> list[ConvergenceProfile]:
    """Documented synthetic profiles for traces without any (Philly): power laws
    with α ~ U(0.5, 2), τ = steps_total · U(0.01, 0.2), L0 = 1, L∞ ~ U(0.05, 0.5)."""
    rng = np.random.default_rng(seed)
    n = len(steps_total)
    alpha, frac, final = rng.uniform(0.5, 2.0, n), rng.uniform(0.01, 0.2, n), rng.uniform(0.05, 0.5, n)
    return [ConvergenceProfile.power(1.0, f, max(t * fr, 1e-6), a, max(t, 1e-6))
            for t, fr, a, f in zip(np.asarray(steps_total, float), frac, alpha, final)]
