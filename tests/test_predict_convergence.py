"""Loss-based termination (Blox) as a pure function."""

import numpy as np
import pytest

from optsched.model import OptschedError
from optsched.predict.convergence import ConvergenceProfile, should_terminate, synthetic_profiles, termination_step


def test_power_law_termination_matches_closed_form():
    p = ConvergenceProfile.power(initial=1.0, final=0.0, tau=100.0, alpha=1.0, horizon=1e6, points=4096)
    # loss(s) = 100/(100+s); final at S=1e4 is 100/10100; within 10 %: 100/(100+s) <= 1.1·100/10100
    s = termination_step(p, 1e4, 0.1)
    assert s == pytest.approx(10100 / 1.1 - 100, rel=2e-3)
    assert should_terminate(p, s + 1, 1e4, 0.1) and not should_terminate(p, s * 0.9, 1e4, 0.1)
    assert termination_step(p, 1e4, 0.0) == pytest.approx(1e4)


def test_points_profile_and_bad_input():
    p = ConvergenceProfile.points([0, 10, 20, 30], [1.0, 0.5, 0.3, 0.29])
    assert termination_step(p, 30, 0.05) == pytest.approx(10 + 10 * (0.5 - 0.3045) / (0.5 - 0.3))
    with pytest.raises(OptschedError, match="increasing"):
        ConvergenceProfile.points([0, 5, 5], [1, 2, 3])
    with pytest.raises(OptschedError, match="threshold"):
        termination_step(p, 30, -1)


def test_termination_never_lengthens_a_job():
    S = np.array([100.0, 1e4, 5e5])
    for prof, s in zip(synthetic_profiles(S, seed=3), S):
        t = termination_step(prof, s, 0.02)
        assert 0 <= t <= s
