"""auto (Blox §5.2 policy synthesis) on the sweep engine, and the bursty generator."""

from __future__ import annotations

import numpy as np
import pytest

from optsched.sim import simulate
from optsched.sweep.auto import _simulate_schedule, simulate_auto, window_scores
from optsched.sweep.traces import build_trace, generate_bursty

CLUSTER = "v100=2,p100=2,k80=2"


@pytest.fixture(scope="module")
def trace():
    return build_trace("bursty", {"jobs": 4, "length_scale": 0.1}, 4, 0)


def test_bursty_generator_doubles_the_rate_in_bursts():
    from optsched.traces.throughputs import default_throughputs

    tr = generate_bursty(default_throughputs(), 400, 10.0, seed=3)
    j = tr.jobs
    assert j["burst"].any() and list(j["job_id"]) == [str(i) for i in range(len(j))]
    t = j["arrival_time"].to_numpy()
    in_burst = (t % (4 * 3600)) < 2 * 3600
    assert not (j["burst"] & ~in_burst).any()  # burst jobs arrive only inside bursts
    # Bursts are half of the time (2 h of every 4 h): twice the arrival rate = twice the jobs.
    assert 1.6 < in_burst.sum() / (~in_burst).sum() < 2.4
    assert j.loc[j["burst"], "duration"].max() <= 60 * 10**2.5 + 1e-6  # short jobs
    again = generate_bursty(default_throughputs(), 400, 10.0, seed=3)
    assert again.jobs.equals(j)


@pytest.mark.parametrize("policy", ["max_min_fairness", "fifo"])
def test_one_policy_schedule_reproduces_the_static_run(trace, policy):
    static = simulate(trace, CLUSTER, policy=policy, seed=0)
    sched = _simulate_schedule(trace, CLUSTER, None, 0, {}, [(0.0, policy)])
    np.testing.assert_array_equal(static.jobs["jct"].to_numpy(), sched.jobs["jct"].to_numpy())
    assert static.summary["preemptions"] == sched.summary["preemptions"]


def test_window_scores():
    import pandas as pd

    jobs = pd.DataFrame({"arrival_time": [0.0, 50.0, 500.0], "first_start": [0.0, 80.0, np.nan],
                         "completion_time": [30.0, 150.0, np.nan]})
    jct, resp = window_scores(jobs, 20.0, 120.0)
    assert jct == pytest.approx(10 + 70) and resp == pytest.approx(30)


def test_auto_logs_choices_and_is_no_worse_than_the_worst(trace):
    cands = ["max_min_fairness", "fifo"]
    res, choices = simulate_auto(trace, CLUSTER, seed=0, candidates=cands, every=5)
    statics = [simulate(trace, CLUSTER, policy=p, seed=0).summary["avg_jct"] for p in cands]
    assert res.summary["jobs_completed"] == len(trace)
    assert res.summary["avg_jct"] <= max(statics) * (1 + 1e-9)
    assert len(choices) == res.summary["auto_decisions"] >= 1
    assert set(choices["chosen"]) <= set(cands) and {"score_fifo", "score_max_min_fairness"} <= set(choices.columns)
    assert res.config["policy"] == "auto" and res.config["auto"]["schedule"][0][0] == 0.0


@pytest.mark.parametrize("mode,every", [("fork", 5), ("resim", 20)])
def test_auto_run_replays_from_its_schedule(trace, mode, every):
    """The run auto returns is the static replay of the schedule it logged: the
    look-ahead children (fork) or re-simulations (resim) leave the run intact."""
    res, choices = simulate_auto(trace, CLUSTER, seed=0, candidates=["max_min_fairness", "fifo", "las"],
                                 every=every, mode=mode)
    assert res.summary["auto_mode"] == mode
    replay = _simulate_schedule(trace, CLUSTER, None, 0, {}, [tuple(s) for s in res.config["auto"]["schedule"]])
    np.testing.assert_array_equal(replay.jobs["jct"].to_numpy(), res.jobs["jct"].to_numpy())
    assert list(choices["time"]) == sorted(choices["time"])
