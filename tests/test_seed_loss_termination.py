"""Loss-based termination (Blox) in the simulator: a job with a known loss
curve ends at the analytically known step; jobs without a profile run to their
length; bad input is one line, exit 2."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import optsched.cli  # noqa: F401
from optsched.cli import app
from optsched.model import OptschedError
from optsched.predict.convergence import ConvergenceProfile, termination_step
from optsched.sim import simulate
from optsched.traces.trace import make_trace


def _trace(profiles, steps=(1000.0, 1000.0), arrival=(0.0, 0.0)):
    """Jobs of 1 GPU at 1 step/s (duration = steps); profiles: (L0, L∞, τ, α) or None per job."""
    n = len(steps)
    cols = {c: np.full(n, np.nan) for c in ("loss_initial", "loss_final", "loss_tau", "loss_alpha")}
    for i, p in enumerate(profiles):
        if p is not None:
            for c, v in zip(cols, p):
                cols[c][i] = v
    rec = {"job_id": [f"j{i}" for i in range(n)], "arrival_time": list(arrival), "scale_factor": np.ones(n),
           "steps_total": list(steps), "duration": list(steps)}
    return make_trace(rec, "tiresias", "test", speed="duration", extra=cols)


def test_power_law_closed_form():
    # loss(f) = 0.1/(0.1+f): final 0.1/1.1; within 10 %: 0.1/(0.1+f) <= 0.1 -> f = 0.9
    p = ConvergenceProfile.power(1.0, 0.0, 0.1, 1.0, 1.0)
    assert termination_step(p, 1.0, 0.1) == pytest.approx(0.9, rel=1e-12)
    # α = 2, L∞ = 0.2: q = (final·1.05 − 0.2)/0.8, s = τ(q^(-1/2) − 1)
    p = ConvergenceProfile.power(1.0, 0.2, 0.05, 2.0, 1.0)
    final = 0.2 + 0.8 * (1 + 1 / 0.05) ** -2
    q = (final * 1.05 - 0.2) / 0.8
    assert termination_step(p, 1.0, 0.05) == pytest.approx(0.05 * (q ** -0.5 - 1), rel=1e-12)
    # a threshold the initial loss already meets ends the job at once
    assert termination_step(p, 1.0, 10.0) == 0.0


def test_job_ends_at_known_step_and_others_run_full_length():
    # FIFO on one GPU: j0 (profile) ends at step 900 instead of 1000; j1 (no profile) runs 1000 steps after it.
    tr = _trace([(1.0, 0.0, 0.1, 1.0), None])
    full = simulate(tr, "gpu=1", policy="fifo")
    cut = simulate(tr, "gpu=1", policy="fifo", loss_threshold=0.1)
    jf, jc = full.jobs.set_index("job_id"), cut.jobs.set_index("job_id")
    assert jf.loc["j0", "jct"] == pytest.approx(1000.0) and jf.loc["j1", "jct"] == pytest.approx(2000.0)
    assert jc.loc["j0", "jct"] == pytest.approx(900.0) and jc.loc["j1", "jct"] == pytest.approx(1900.0)
    assert cut.summary["loss_terminated_jobs"] == 1
    assert cut.summary["loss_work_fraction"] == pytest.approx(1900 / 2000)
    assert "loss_terminated_jobs" not in full.summary


def test_threshold_zero_changes_nothing_and_larger_never_lengthens():
    rng = np.random.default_rng(0)
    n = 12
    profs = [(1.0, float(rng.uniform(0.05, 0.5)), float(rng.uniform(0.01, 0.3)), float(rng.uniform(0.5, 2)))
             for _ in range(n)]
    steps = rng.integers(200, 3000, n).astype(float)
    tr = _trace(profs, steps, np.sort(rng.uniform(0, 2000, n)))
    base = simulate(tr, "gpu=2", policy="fifo")
    zero = simulate(tr, "gpu=2", policy="fifo", loss_threshold=0.0)
    assert np.allclose(base.jobs["jct"], zero.jobs["jct"])
    work = [simulate(tr, "gpu=2", policy="fifo", loss_threshold=r).summary["loss_work_fraction"]
            for r in (0.0, 0.02, 0.1, 0.5)]
    assert work[0] == pytest.approx(1.0) and all(a >= b for a, b in zip(work, work[1:])) and work[-1] < 1
    # every job's work is exactly its termination step
    cut = simulate(tr, "gpu=2", policy="fifo", loss_threshold=0.1).jobs.set_index("job_id")
    for i, p in enumerate(profs):
        want = steps[i] * termination_step(ConvergenceProfile.power(*p, 1.0), 1.0, 0.1)
        assert cut.loc[f"j{i}", "steps_total"] == pytest.approx(want, rel=1e-9)


def test_bad_input():
    with pytest.raises(OptschedError, match="no convergence profiles"):
        simulate(make_trace({"arrival_time": [0.0], "duration": [10.0]}, "tiresias", "t", speed="duration"),
                 "gpu=1", policy="fifo", loss_threshold=0.1)
    with pytest.raises(OptschedError, match="no job .* has a convergence profile"):
        simulate(_trace([None, None]), "gpu=1", policy="fifo", loss_threshold=0.1)
    with pytest.raises(OptschedError, match="row 1: convergence profile needs loss_initial > loss_final"):
        simulate(_trace([(0.1, 0.5, 0.1, 1.0), None]), "gpu=1", policy="fifo", loss_threshold=0.1)
    with pytest.raises(OptschedError, match="loss_threshold: must be"):
        simulate(_trace([None, None]), "gpu=1", policy="fifo", loss_threshold=-1)


def test_cli_reads_profiles_from_a_tiresias_csv(tmp_path):
    df = pd.DataFrame({"job_id": [1, 2], "num_gpu": [1, 1], "submit_time": [0, 0], "iterations": [1000, 1000],
                       "model_name": ["m", "m"], "duration": [1000, 1000], "interval": [0, 0],
                       "loss_initial": [1.0, ""], "loss_final": [0.0, ""], "loss_tau": [0.1, ""], "loss_alpha": [1.0, ""]})
    df.to_csv(tmp_path / "t.csv", index=False)
    r = CliRunner().invoke(app, ["simulate", str(tmp_path / "t.csv"), "--cluster", "gpu=1", "--policy", "fifo",
                                 "--loss-threshold", "0.1", "--json", "--quiet"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["loss_terminated_jobs"] == 1 and s["avg_jct"] == pytest.approx((900 + 1900) / 2)
    bad = CliRunner().invoke(app, ["simulate", str(tmp_path / "t.csv"), "--cluster", "gpu=1", "--loss-threshold", "-2"])
    assert bad.exit_code == 2 and "--loss-threshold" in bad.output and len(bad.output.strip().splitlines()) == 1
