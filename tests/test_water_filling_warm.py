"""Warm water-filling rounds (each round's LP started from the previous
round's prices, solvers/block_exact.py) against solving every round cold.

The water-filled (leximin) share vector is unique, so the two may differ only
by solver tolerance, with one exception measured here: a cold round reads
interior duals, and a job that can still rise by a hair (~1e-4 relative)
carries a multiplier of ~mu/slack that can pass STUCK_DUAL, so the cold path
may freeze it a level early (and the levels after shift, measured up to
2.4e-4). The warm path's vertex duals freeze a job only
with a proof (complementary slackness). So: the warm vector is never
lexicographically worse than the cold one, and within 1e-3 of it."""

from __future__ import annotations

import numpy as np
import pytest

from optsched.bench.instances import rigid
from optsched.formulations import hierarchical, water_filling
from optsched.formulations.max_min_fairness import normalized_throughput


def shares(inst, alloc) -> np.ndarray:
    return (normalized_throughput(inst) * alloc.fractions).sum(axis=1)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("module", [water_filling, hierarchical])
def test_warm_rounds_give_the_cold_leximin_shares(module, seed):
    rng = np.random.default_rng(seed)
    # Large enough for the IPM path (warm starts apply above AUTO_IPM_ENTRIES), loads where
    # many rounds are warm (measured: 30-230 crossovers per instance).
    n, k = int(rng.integers(700, 1000)), int(rng.choice([4, 5]))
    inst = rigid(n, k, seed, tenants=int(rng.integers(2, 6)), gpus_per_job=float(rng.choice([0.7, 1.0])))
    warm = module.allocate(inst, warm_levels=True)
    cold = module.allocate(inst, warm_levels=False)
    assert warm.status == cold.status == "optimal"
    assert warm.explanation["event_rounds"] > 0 and cold.explanation["event_rounds"] == 0  # events exercised
    assert warm.objective == pytest.approx(cold.objective, rel=1e-6)
    X = warm.fractions  # feasible: time and capacity
    assert np.all(X.sum(axis=1) <= 1 + 1e-7)
    assert np.all(inst.scale_factor @ X <= inst.capacity * (1 + 1e-7) + 1e-9)
    sw, sc = shares(inst, warm), shares(inst, cold)
    np.testing.assert_allclose(sw, sc, rtol=1e-3, atol=1e-7)  # cold early freezes cascade (seed 5: 2.4e-4)
    if module is hierarchical:  # tenant weights re-split as jobs freeze: leximin over the tenants' levels, not these shares
        return
    ow, oc = np.sort(sw), np.sort(sc)
    # Differences below 1e-6 are solver tolerance (the block IPM accepts a stalled
    # iterate within 100× its 1e-8 gap tolerance).
    differ = np.flatnonzero(np.abs(ow - oc) > 1e-6 * np.maximum(oc, 1e-9))
    assert not len(differ) or ow[differ[0]] > oc[differ[0]]  # leximin: the first difference favours warm


def test_near_degenerate_round_converges_without_clarabel(monkeypatch):
    """The last round of hierarchical 2,000 × 5 (capacity binds while many jobs are
    a hair from their largest share): the IPM used to stall there and fall back
    to CLARABEL. A looser stall test and a crossover from a stalled iterate
    solve it; z must match CLARABEL's."""
    from optsched.solvers import block_lp

    rounds, solve = [], block_lp.solve

    def keep(lp, *args, **kwargs):
        rounds.append(lp)
        return solve(lp, *args, **kwargs)

    monkeypatch.setattr(block_lp, "solve", keep)
    hierarchical.allocate(rigid(2000, 5, 1))
    monkeypatch.undo()
    sol = block_lp.solve(rounds[-1], interior=True)
    ref = block_lp.solve(rounds[-1], backend="clarabel")
    assert sol.ok and sol.backend in ("ipm", "ipm+crossover")
    assert sol.z == pytest.approx(ref.z, rel=1e-7)
