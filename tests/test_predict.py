"""optsched.predict: causal history features, the three predictors, their
explanations, bad input, and accuracy on a held-out part of the Philly trace."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from optsched.model import OptschedError
from optsched.predict.features import FEATURES, history_features, instance_features, read_philly_history
from optsched.predict.models import DurationPredictor, predicted_durations, prior_duration
from tests.conftest import random_instance

pytest.importorskip("sklearn", reason="the predict extra (scikit-learn) is not installed")


def _synthetic(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    vc = rng.choice(["a", "b", "c"], n)
    gpus = rng.choice([1, 2, 4, 8], n)
    submit = np.sort(rng.uniform(0, 30 * 86400, n))
    logd = 5 + 1.5 * (vc == "b") + 0.5 * np.log2(gpus) + rng.normal(0, 0.3, n)
    return pd.DataFrame({"submit": submit, "duration": np.exp(logd), "gpus": gpus, "vc": vc})


def test_history_features_are_causal():
    h = pd.DataFrame({"submit": [0.0, 10.0, 20.0, 200.0], "duration": [100.0, 5.0, 1e6, 1.0],
                      "gpus": [1, 1, 1, 1], "vc": ["a"] * 4})
    f = history_features(h)
    assert np.isnan(f["hist_mean_group"][0]) and np.isnan(f["hist_mean_group"][1])  # nothing finished yet
    assert f["hist_mean_group"][2] == pytest.approx(np.log(5.0))  # job 1 ended at 15; job 0 at 100
    assert f["hist_mean_group"][3] == pytest.approx(np.mean(np.log([5.0, 100.0])))  # job 2 still runs
    assert list(f.columns) == list(FEATURES)


def test_missing_history_column_is_a_clear_error():
    with pytest.raises(OptschedError, match="missing column 'gpus'"):
        history_features(pd.DataFrame({"submit": [0.0]}))
    with pytest.raises(OptschedError, match="features lack"):
        DurationPredictor("prior").predict(pd.DataFrame({"gpus": [1]}))


@pytest.mark.parametrize("kind", ["gbdt", "ebm", "prior"])
def test_predictors_learn_and_explain(kind):
    if kind == "ebm":
        pytest.importorskip("interpret", reason="interpret-core is not installed")
    h = _synthetic()
    f = history_features(h)
    y = np.log(h["duration"].to_numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = DurationPredictor(kind).fit(f.iloc[:1200], h["duration"].iloc[:1200])
        mae = np.mean(np.abs(p.predict_log(f.iloc[1200:]) - y[1200:]))
        c = p.contributions(f.iloc[1200:1210])
    base = np.mean(np.abs(np.median(y[:1200]) - y[1200:]))
    assert mae < (0.5 * base if kind != "prior" else base)
    assert list(c.columns) == list(FEATURES)
    if kind == "ebm":  # additive: intercept + terms = prediction
        assert np.allclose(p.model.intercept_ + c.sum(axis=1), p.predict_log(f.iloc[1200:1210]))
    if kind == "gbdt":
        assert c.abs().to_numpy().max() > 0.3  # the vc (directly or through its history) drives the duration


def test_policy_predictions_fall_back_and_accept_given_values(tmp_path):
    inst = random_instance(np.random.default_rng(1), 6)
    d, source, _ = predicted_durations(inst)
    assert source == "prior" and np.allclose(d, prior_duration(inst.scale_factor))
    given = replace(inst, extras={"predicted_duration": np.arange(1.0, 7.0)})
    assert predicted_durations(given)[1] == "given"
    with pytest.raises(OptschedError, match="extras.predicted_duration"):
        predicted_durations(replace(inst, extras={"predicted_duration": [1.0]}))
    h = _synthetic(300)
    p = DurationPredictor("gbdt").fit(history_features(h), h["duration"])
    p.save(tmp_path / "p.pkl")
    d2, source2, contrib = predicted_durations(inst, str(tmp_path / "p.pkl"))
    assert source2 == "predictor:gbdt" and d2.shape == (6,) and contrib.shape == (6, len(FEATURES))
    assert len(instance_features(inst)) == 6
    with pytest.raises(OptschedError, match="no such file"):
        predicted_durations(inst, str(tmp_path / "missing.pkl"))


def test_philly_held_out_mae_beats_trivial_baseline(peer_data):
    """MAE of log-duration on the last 20 % (by submit time) of a 20,000-job
    slice of Philly, next to the trivial baseline (the training median)."""
    h = read_philly_history(peer_data / "philly" / "philly.csv.gz").iloc[:20000]
    f = history_features(h)
    y = np.log(np.maximum(h["duration"].to_numpy(), 1.0))
    cut = 16000
    baseline = np.mean(np.abs(np.median(y[:cut]) - y[cut:]))
    p = DurationPredictor("gbdt", max_iter=60).fit(f.iloc[:cut], h["duration"].iloc[:cut])
    mae = np.mean(np.abs(p.predict_log(f.iloc[cut:]) - y[cut:]))
    assert mae < 0.85 * baseline, (mae, baseline)
