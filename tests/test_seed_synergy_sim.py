"""Synergy in the simulator: jobs with CPU/memory sensitivity profiles run at
the speed their CPUs give — synergy's LP speed factor, the GPU-proportional
share (3 CPUs per GPU) under any other policy."""

from __future__ import annotations

import numpy as np
import pytest

from optsched.model import OptschedError
from optsched.sim import simulate
from optsched.traces.trace import make_trace

SENSITIVE = [(1.0, 0.5), (6.0, 1.0)]  # envelope with (0,0): 0.5·c up to 1 CPU, then 0.5 + 0.1·(c − 1)
INSENSITIVE = [(0.5, 1.0)]


def _trace(profiles, dur=1000.0):
    n = len(profiles)
    rec = {"job_id": [f"j{i}" for i in range(n)], "arrival_time": np.zeros(n), "duration": np.full(n, dur),
           "scale_factor": np.ones(n)}
    return make_trace(rec, "tiresias", "t", speed="duration", extra={"cpu_profile": list(profiles)})


def test_known_speeds_under_fifo_and_synergy():
    tr = _trace([SENSITIVE, INSENSITIVE])
    fifo = simulate(tr, "gpu=2", policy="fifo").jobs.set_index("job_id")["jct"]
    syn = simulate(tr, "gpu=2", policy="synergy").jobs.set_index("job_id")["jct"]
    # fifo: 3 CPUs per GPU -> j0 at f(3) = 0.7, j1 at 1
    assert fifo["j0"] == pytest.approx(1000 / 0.7) and fifo["j1"] == pytest.approx(1000.0)
    # synergy: j1 needs 0.5 CPU, j0 gets the other 5.5 -> 0.5 + 0.1·4.5 = 0.95
    assert syn["j0"] == pytest.approx(1000 / 0.95, rel=1e-6) and syn["j1"] == pytest.approx(1000.0)


def test_jobs_without_profiles_run_at_full_speed_and_equal_profiles_gain_nothing():
    tr = _trace([None, None])
    assert simulate(tr, "gpu=2", policy="synergy").jobs["jct"].tolist() == pytest.approx([1000.0, 1000.0])
    tr = _trace([SENSITIVE, SENSITIVE])
    for p in ("fifo", "synergy"):  # 6 CPUs for two equally sensitive jobs: 3 each either way
        assert simulate(tr, "gpu=2", policy=p).jobs["jct"].tolist() == pytest.approx([1000 / 0.7] * 2, rel=1e-6)


def test_bad_profile_is_named():
    with pytest.raises(OptschedError, match="cpu_profile"):
        simulate(_trace([[(1.0, 2.0)], None]), "gpu=2", policy="fifo")
