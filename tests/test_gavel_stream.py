"""generate_gavel(stream="gavel"): Gavel's own jobs for a seed (bench/gavel_sim_side_by_side.py
checks the whole stream against Gavel's generator run from its checkout)."""

import numpy as np
import pytest

from optsched.model import OptschedError
from optsched.traces.generate import GAVEL_DISTRIBUTED, GAVEL_TEMPLATES, generate_gavel
from optsched.traces.throughputs import gavel_throughputs


@pytest.fixture
def table(peer_data):
    return gavel_throughputs(peer_data)


def test_first_jobs_are_gavels(table):
    # The first six jobs of Gavel's generator, seed 0, multi-GPU, 2 jobs/h, as its
    # utils.generate_job wrote them (model, total steps truncated to an int, scale factor, arrival s).
    gavel = [("ResNet-18 (batch size 64)", 17484476, 8, 0.0), ("Transformer (batch size 16)", 343170, 1, 489.172146),
             ("Recommendation (batch size 2048)", 16034, 1, 1903.549655),
             ("Recommendation (batch size 8192)", 20989, 1, 2735.085391), ("LM (batch size 5)", 869104, 4, 4402.135889),
             ("Transformer (batch size 64)", 3842187, 1, 6171.089329)]
    j = generate_gavel(table, 6, 2.0, seed=0, multi_gpu=True, stream="gavel").jobs
    assert list(j["model"]) == [g[0] for g in gavel]
    assert list(np.floor(j["steps_total"]).astype(int)) == [g[1] for g in gavel]
    assert list(j["scale_factor"]) == [g[2] for g in gavel]
    np.testing.assert_allclose(j["arrival_time"], [g[3] for g in gavel], atol=1e-5)


def test_stream_is_prefix_stable_and_distributed_as_gavels(table):
    long = generate_gavel(table, 20000, 2.0, seed=3, multi_gpu=True, stream="gavel").jobs
    short = generate_gavel(table, 300, 2.0, seed=3, multi_gpu=True, stream="gavel").jobs
    assert short.equals(long.iloc[:300])
    sf = long["scale_factor"].to_numpy()
    share = [np.mean(sf == s) for s in (1, 2, 4, 8)]
    np.testing.assert_allclose(share, [0.70, 0.10, 0.15, 0.05], atol=0.01)
    multi = set(long["model"][sf > 1])
    assert multi <= set(GAVEL_TEMPLATES[:GAVEL_DISTRIBUTED])
    gaps = np.diff(long["arrival_time"].to_numpy())
    assert abs(gaps.mean() / 1800.0 - 1) < 0.03  # exponential with mean 3600 / rate
    # single-GPU streams still draw (and drop) the scale factor: the first job's duration is the
    # multi-GPU stream's (later ones differ once a template is redrawn for a multi-GPU job)
    single = generate_gavel(table, 300, 2.0, seed=3, stream="gavel").jobs
    assert single["duration"].iat[0] == short["duration"].iat[0]
    assert (single["scale_factor"] == 1).all() and set(single["model"]) == set(GAVEL_TEMPLATES)


def test_unknown_stream_is_refused(table):
    with pytest.raises(OptschedError, match="stream must be"):
        generate_gavel(table, 3, 2.0, stream="mt19937")


def test_gavel_zero_reset_allocates_the_second_job_as_gavels_simulator(table):
    # Gavel's simulator on this stream (seed 0, multi-GPU, 2 jobs/h; bench/gavel_sim_side_by_side.py):
    # its reset at t = 0 leaves _last_reset_time == 0, read as "never reset", so job 1 (arrived at
    # 489 s) is allocated in round 2 (t = 720 s), not after the 1,920 s interval.
    from optsched.sim import simulate

    trace = generate_gavel(table, 6, 2.0, seed=0, multi_gpu=True, stream="gavel")
    first = {}
    for quirk in (False, True):
        runs = []

        def on_round(info, runs=runs):
            runs.append((info["start"], set(info["decision"].placement.assignments)))

        simulate(trace, {"v100": 36, "p100": 36, "k80": 36}, policy="max_min_fairness", throughputs=table,
                 round_length=360.0, min_recompute_interval=1920.0, on_round=on_round, gavel_zero_reset=quirk,
                 allocator_options={"queue": "gavel", "type_order": ["v100", "p100", "k80"]})
        first[quirk] = min(t for t, ran in runs if trace.jobs["job_id"].iloc[1] in ran)
    assert first[True] == 720.0
    assert first[False] >= 1920.0
    with pytest.raises(OptschedError, match="gavel"):
        simulate(trace, {"v100": 36}, policy="max_min_fairness", throughputs=table, gavel_zero_reset="yes")
