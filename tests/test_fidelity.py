"""Fidelity mechanics (the causes of the gaps in docs/results/fidelity.md):

- the Gavel-style generator's stream is length-independent (job i does not
  depend on how many jobs are generated), so "generate until the window
  completes" is a longer stream with the same prefix;
- a windowed run says when its arrivals stopped before the window completed
  (the queue then drains and the JCT is understated);
- multi-GPU rigid jobs whose GPUs span servers run at the table's
  ``*_unconsolidated`` rate when ``spread_rates`` is on, at the consolidated
  rate when it is off (Gavel's simulator: always consolidated).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from optsched.sim import simulate
from optsched.traces.generate import generate_gavel
from optsched.traces.throughputs import default_throughputs, parse_throughputs
from optsched.traces.trace import make_trace


@pytest.mark.parametrize("multi_gpu", [False, True])
def test_generator_prefix_does_not_depend_on_stream_length(multi_gpu):
    table = default_throughputs()
    short = generate_gavel(table, 200, 3.2, seed=5, multi_gpu=multi_gpu, multi_priority=True).jobs
    long = generate_gavel(table, 5000, 3.2, seed=5, multi_gpu=multi_gpu, multi_priority=True).jobs
    cols = ["job_id", "arrival_time", "model", "scale_factor", "steps_total", "duration", "weight"]
    pd.testing.assert_frame_equal(short[cols].reset_index(drop=True), long[cols].iloc[:200].reset_index(drop=True))
    other = generate_gavel(table, 200, 3.2, seed=6, multi_gpu=multi_gpu).jobs
    assert not np.allclose(other["arrival_time"], short["arrival_time"])


def test_generator_distributions_hold_with_per_attribute_streams():
    table = default_throughputs()
    j = generate_gavel(table, 20000, 2.0, seed=1, multi_gpu=True).jobs
    assert np.diff(j["arrival_time"]).mean() == pytest.approx(1800.0, rel=0.03)
    d = j["duration"].to_numpy()
    assert d.min() >= 60 * 10**1.5 and d.max() <= 60 * 10**4
    assert (d > 60 * 1000).mean() == pytest.approx(0.2, abs=0.015)
    shares = j["scale_factor"].value_counts(normalize=True)
    for s, p in zip((1, 2, 4, 8), (0.70, 0.10, 0.15, 0.05)):
        assert shares[s] == pytest.approx(p, abs=0.015)


def test_window_run_flags_arrivals_that_stop_before_the_window_completes():
    table = default_throughputs()
    cluster = {"v100": 8, "p100": 8, "k80": 8}
    kw = dict(throughputs=table, window=(10, 20), round_length=360.0)
    r = simulate(generate_gavel(table, 20, 2.0, seed=0), cluster, **kw)
    assert r.summary["arrivals_ended_before_window"]  # the window's last job is the stream's last arrival
    # a longer stream with the same prefix, arriving past the window's completion
    n = int(np.ceil(2.0 * r.summary["end_time"] / 3600 * 2)) + 40
    r2 = simulate(generate_gavel(table, n, 2.0, seed=0), cluster, **kw)
    assert not r2.summary["arrivals_ended_before_window"]


def _spread_table() -> object:
    # one model; at 8 GPUs on 4-GPU servers it must span 2 servers
    data = {
        "v100": {"('M', 1)": {"null": 1.0}, "('M', 4)": {"null": 4.0}, "('M', 8)": {"null": 8.0}},
        "v100_unconsolidated": {"('M', 4)": {"null": 2.0}, "('M', 8)": {"null": 3.0}},
    }
    return parse_throughputs(data, "test")


def _one_job(scale: int, steps: float):
    return make_trace({"job_id": ["a"], "arrival_time": [0.0], "model": ["M"], "scale_factor": [scale],
                       "steps_total": [steps], "duration": [np.nan], "weight": [1.0]}, "generated", "test")


@pytest.mark.parametrize("spread_rates,expected", [(True, 3.0), (False, 8.0)])
def test_spread_multi_gpu_job_runs_at_the_unconsolidated_rate(spread_rates, expected):
    table = _spread_table()
    # 8 GPUs on 4-GPU servers: always spread over two servers
    r = simulate(_one_job(8, 3600.0 * 3), {"v100": 8}, throughputs=table, round_length=360.0,
                 spread_rates=spread_rates)
    assert r.jobs["jct"].iloc[0] == pytest.approx(3600.0 * 3 / expected, rel=1e-6)
    assert r.summary["spread_rate_jobs"] == (1 if spread_rates else 0)


def test_consolidated_multi_gpu_job_keeps_the_consolidated_rate():
    table = _spread_table()
    # 4 GPUs fit one 4-GPU server: the consolidated rate although the table has a spread rate
    r = simulate(_one_job(4, 4.0 * 3600), {"v100": 8}, throughputs=table, round_length=360.0)
    assert r.jobs["jct"].iloc[0] == pytest.approx(3600.0, rel=1e-6)
