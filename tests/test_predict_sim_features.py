"""Predictor features carried into the simulator's instances
(Instance.extras["features"], from the trace: vc, model, GPUs, submit hour and
causal history), so a fitted predictor predicts from them directly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from optsched.model import OptschedError
from optsched.predict.features import FEATURES, instance_features, trace_features
from optsched.traces.trace import make_trace


def _trace(n=12, seed=0):
    rng = np.random.default_rng(seed)
    vc = np.array(["short", "long"] * (n // 2))
    dur = np.where(vc == "short", 100.0, 5000.0) * rng.uniform(0.9, 1.1, n)
    rec = {"job_id": [f"j{i}" for i in range(n)], "arrival_time": np.arange(n) * 60.0, "duration": dur,
           "scale_factor": np.ones(n)}
    return make_trace(rec, "philly", "test", speed="duration", extra={"cluster": vc})


def test_trace_features_are_causal():
    rec = {"job_id": ["a", "b", "c", "d"], "arrival_time": [0.0, 50.0, 150.0, 160.0],
           "duration": [100.0, 1000.0, 10.0, 10.0], "scale_factor": [1, 1, 1, 2]}
    tr = make_trace(rec, "philly", "t", speed="duration", extra={"cluster": ["A", "A", "A", "A"]})
    f = trace_features(tr.jobs)
    assert list(f.columns) == list(FEATURES) and list(f["vc"]) == ["A"] * 4
    # b arrives while a runs: no history; c arrives after a ended (t=100), before b (t=1050)
    assert f["hist_count_group"].tolist()[:3] == pytest.approx([0.0, 0.0, np.log1p(1)])
    assert np.isnan(f["hist_mean_group"].iat[1]) and f["hist_mean_group"].iat[2] == pytest.approx(np.log(100.0))
    # d has 2 GPUs: no finished job of its group, but its vc's history counts a
    assert f["hist_count_group"].iat[3] == 0.0 and f["hist_mean_vc"].iat[3] == pytest.approx(np.log(100.0))


def test_given_features_are_checked():
    from optsched.model import Instance

    inst = Instance(job_ids=("a",), gpu_types=("g",), throughput=np.ones((1, 1)), scale_factor=np.ones(1),
                    weight=np.ones(1), capacity=np.ones(1), steps_remaining=np.ones(1), elapsed_time=np.zeros(1),
                    attained_service=np.zeros(1), arrival_time=np.zeros(1),
                    extras={"features": pd.DataFrame({"vc": ["x"]})})
    with pytest.raises(OptschedError, match="extras.features"):
        instance_features(inst)


def test_simulator_hands_trace_features_to_a_fitted_predictor(monkeypatch):
    pytest.importorskip("sklearn")
    import optsched.formulations.lucid as lucid
    from optsched.predict.models import DurationPredictor, predicted_durations
    from optsched.sim import simulate

    train = _trace(200, seed=1)
    p = DurationPredictor("gbdt").fit(trace_features(train.jobs), train.jobs["duration"])
    tr = _trace(12, seed=2)
    seen = []
    real = lucid.allocate

    def spy(inst, **kw):
        seen.append((inst, kw.get("predictor")))
        return real(inst, **kw)

    monkeypatch.setattr(lucid, "allocate", spy)
    simulate(tr, "gpu=2", policy="lucid", policy_options={"predictor": p, "profile_minutes": 0.0})
    assert seen
    vc_of = dict(zip(tr.jobs["job_id"], tr.jobs["cluster"]))
    for inst, pred in seen:
        f = inst.extras["features"]
        assert list(f["vc"]) == [vc_of[j] for j in inst.job_ids]  # rows follow the active jobs
        d, source, _ = predicted_durations(inst, pred, contributions=False)
        assert source == "predictor:gbdt"
        short = np.array([vc_of[j] == "short" for j in inst.job_ids])
        if short.any() and (~short).any():
            assert d[short].max() < d[~short].min()  # the vc feature reached the model
