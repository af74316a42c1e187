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

How the simulator should call it: when a job is resolved (optsched/sim/jobs.py,
``resolve_jobs``), if the job carries a profile (a trace column or
``Job.convergence``) and ``--loss-threshold`` is set, replace its work by
``termination_step(...)`` — exactly equivalent to checking
``should_terminate`` after every round, because the profile is a fixed
function of progress — and report ``steps_total``, the termination step and
the JCT change per job. A run without profiles is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optsched.model import OptschedError


@dataclass(frozen=True)
class ConvergenceProfile:
    steps: np.ndarray  # increasing, starting at 0
    loss: np.ndarray

    @classmethod
    def power(cls, initial: float, final: float, tau: float, alpha: float, horizon: float, points: int = 512):
        if not (initial > final >= 0 and tau > 0 and alpha > 0 and horizon > 0):
            raise OptschedError("convergence: need initial > final >= 0, tau > 0, alpha > 0, horizon > 0")
        s = np.concatenate([[0.0], np.geomspace(tau * 1e-3, horizon, points - 1)])
        return cls(s, final + (initial - final) * (1.0 + s / tau) ** (-alpha))

    @classmethod
    def points(cls, steps, loss):
        s, l = np.asarray(steps, dtype=float), np.asarray(loss, dtype=float)
        if s.shape != l.shape or s.ndim != 1 or len(s) < 2:
            raise OptschedError("convergence: need at least two (step, loss) points of equal length")
        if not (np.all(np.isfinite(s)) and np.all(np.isfinite(l))) or np.any(np.diff(s) <= 0) or s[0] < 0:
            raise OptschedError("convergence: steps must be finite, >= 0 and increasing; losses finite")
        return cls(s, l)

    def __call__(self, steps) -> np.ndarray:
        return np.interp(np.asarray(steps, dtype=float), self.steps, self.loss)


def termination_step(profile: ConvergenceProfile, steps_total: float, threshold: float) -> float:
    """The first step where loss ≤ final·(1 + threshold), final = loss(steps_total)."""
    if not threshold >= 0:
        raise OptschedError(f"loss threshold: must be >= 0, got {threshold}")
    if steps_total <= 0:
        return float(steps_total)
    final = float(profile(steps_total))
    target = final * (1.0 + threshold) if final >= 0 else final * (1.0 - threshold)
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


def synthetic_profiles(steps_total: np.ndarray, seed: int = 0) -> list[ConvergenceProfile]:
    """Documented synthetic profiles for traces without any (Philly): power laws
    with α ~ U(0.5, 2), τ = steps_total · U(0.01, 0.2), L0 = 1, L∞ ~ U(0.05, 0.5)."""
    rng = np.random.default_rng(seed)
    n = len(steps_total)
    alpha, frac, final = rng.uniform(0.5, 2.0, n), rng.uniform(0.01, 0.2, n), rng.uniform(0.05, 0.5, n)
    return [ConvergenceProfile.power(1.0, f, max(t * fr, 1e-6), a, max(t, 1e-6))
            for t, fr, a, f in zip(np.asarray(steps_total, float), frac, alpha, final)]
