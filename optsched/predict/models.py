"""Duration predictors: Lucid's interpretable model (``ebm``), Horus's GBDT
(``gbdt``), and the cold-start ``prior``. All predict log-duration (seconds)
and report seconds; scikit-learn and interpret-core are imported only when a
model is fitted or loaded (the ``predict`` extra).

Explanation (``contributions``): per job and feature, how much that feature
moved the job's predicted log-duration away from the model's base value —
the EBM's own additive terms (exact: base + Σ terms = prediction), and for
the GBDT an occlusion attribution (the prediction minus the prediction with
that feature replaced by its training median / most common value; not
additive). A policy that orders jobs by predicted duration × GPUs turns these
into per-feature contributions to a job's priority (see qssf/lucid).
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pandas as pd

from optsched.model import OptschedError
from optsched.predict.features import CATEGORICAL, FEATURES, NUMERIC

KINDS = ("ebm", "gbdt", "prior")

# Cold-start prior: median duration (s) per requested GPU count in the Philly
# trace (Jeon et al., ATC'19; 82,247 jobs, /work/shared/data/philly): 1 GPU
# 1,117 s, 2: 21 s, 4: 17,410 s, 8: 23,683 s, 16: 52,548 s. Counts in between
# or beyond take the overall median 1,144 s. Documented fallback when no
# predictor is given and the caller supplies no prediction.
PRIOR_MEDIAN_SECONDS = {1: 1117.0, 2: 21.0, 4: 17409.5, 8: 23683.0, 16: 52548.0}
PRIOR_DEFAULT_SECONDS = 1144.0


def prior_duration(gpus) -> np.ndarray:
    g = np.asarray(gpus, dtype=float)
    return np.array([PRIOR_MEDIAN_SECONDS.get(int(x), PRIOR_DEFAULT_SECONDS) for x in g.ravel()]).reshape(g.shape)


class DurationPredictor:
    """fit(features, durations) / predict(features) -> seconds / contributions(features)."""

    def __init__(self, kind: str = "gbdt", seed: int = 0, **params):
        if kind not in KINDS:
            raise OptschedError(f"predictor: unknown kind {kind!r} (choose from {', '.join(KINDS)})")
        self.kind, self.seed, self.params = kind, seed, params
        self.model = None
        self.categories: dict[str, list[str]] = {}
        self.reference: dict = {}
        self.base_log = float(np.log(PRIOR_DEFAULT_SECONDS))
        self.prior_by_gpus: dict[int, float] = {}

    # ---------------------------------------------------------------- fitting
    def fit(self, feats: pd.DataFrame, durations) -> "DurationPredictor":
        _check(feats)
        y = np.log(np.maximum(np.asarray(durations, dtype=float), 1.0))
        if len(y) != len(feats) or not len(y):
            raise OptschedError(f"predictor: need one duration per job ({len(y)} durations, {len(feats)} jobs)")
        self.base_log = float(np.median(y))
        g = feats["gpus"].to_numpy(dtype=float)
        self.prior_by_gpus = {int(v): float(np.median(y[g == v])) for v in np.unique(g)}
        for c in CATEGORICAL:
            counts = feats[c].astype(str).value_counts()
            self.categories[c] = sorted(counts.index[counts >= 5])  # rare levels -> "other"
            self.reference[c] = str(counts.index[0])
        for c in NUMERIC:
            v = feats[c].to_numpy(dtype=float)
            self.reference[c] = float(np.nanmedian(v)) if np.isfinite(v).any() else np.nan
        if self.kind == "prior":
            return self
        X = self._matrix(feats)
        if self.kind == "gbdt":
            from sklearn.ensemble import HistGradientBoostingRegressor

            opts = {"max_iter": 120, "learning_rate": 0.08, "max_leaf_nodes": 31, "loss": "absolute_error",
                    "categorical_features": [FEATURES.index(c) for c in CATEGORICAL], **self.params}
            self.model = HistGradientBoostingRegressor(random_state=self.seed, **opts).fit(X, y)
        else:
            from interpret.glassbox import ExplainableBoostingRegressor

            opts = {"interactions": 0, "outer_bags": 2, "max_rounds": 1000, "n_jobs": 1, **self.params}
            self.model = ExplainableBoostingRegressor(feature_names=list(FEATURES), random_state=self.seed,
                                                      feature_types=["nominal", "nominal"] + ["continuous"] * len(NUMERIC),
                                                      **opts).fit(self._frame(feats), y)
        return self

    def _codes(self, feats: pd.DataFrame) -> dict:
        out = {}
        for c in CATEGORICAL:
            cats = self.categories.get(c, [])
            s = feats[c].astype(str).to_numpy() if c in feats else np.full(len(feats), "")
            idx = {v: i for i, v in enumerate(cats)}
            out[c] = np.array([idx.get(v, len(cats)) for v in s], dtype=float)  # unseen -> "other"
        return out

    def _matrix(self, feats: pd.DataFrame) -> np.ndarray:
        codes = self._codes(feats)
        cols = [codes[c] for c in CATEGORICAL] + [feats[c].to_numpy(dtype=float) for c in NUMERIC]
        return np.column_stack(cols)

    def _frame(self, feats: pd.DataFrame) -> pd.DataFrame:
        df = feats.loc[:, list(FEATURES)].copy()
        for c in CATEGORICAL:
            s = df[c].astype(str)
            df[c] = s.where(s.isin(self.categories.get(c, [])), "other")
        return df

    # ---------------------------------------------------------------- prediction
    def predict_log(self, feats: pd.DataFrame) -> np.ndarray:
        _check(feats)
        if self.kind == "prior" or self.model is None:
            g = feats["gpus"].to_numpy(dtype=float)
            if self.prior_by_gpus:
                return np.array([self.prior_by_gpus.get(int(v), self.base_log) for v in g])
            return np.log(prior_duration(g))
        if self.kind == "gbdt":
            return self.model.predict(self._matrix(feats))
        return self.model.predict(self._frame(feats))

    def predict(self, feats: pd.DataFrame) -> np.ndarray:
        return np.exp(self.predict_log(feats))

    def contributions(self, feats: pd.DataFrame) -> pd.DataFrame:
        """Per job × feature: contribution to the predicted log-duration (see module doc)."""
        _check(feats)
        if self.kind == "prior" or self.model is None:
            out = pd.DataFrame(0.0, index=feats.index, columns=list(FEATURES))
            out["gpus"] = self.predict_log(feats) - self.base_log
            return out
        if self.kind == "ebm":
            contrib = np.asarray(self.model.eval_terms(self._frame(feats)))  # base = model.intercept_
            return pd.DataFrame(contrib[:, :len(FEATURES)], index=feats.index, columns=list(FEATURES))
        full = self.predict_log(feats)
        out = {}
        for c in FEATURES:
            occluded = feats.copy()
            occluded[c] = self.reference.get(c, np.nan)
            out[c] = full - self.predict_log(occluded)
        return pd.DataFrame(out, index=feats.index)

    # ---------------------------------------------------------------- persistence
    def save(self, path) -> None:
        with open(path, "wb") as f:
            pickle.dump(self, f)

    @staticmethod
    def load(path) -> "DurationPredictor":
        try:
            with open(path, "rb") as f:
                obj = pickle.load(f)
        except FileNotFoundError:
            raise OptschedError(f"predictor: no such file {str(path)!r}") from None
        except ModuleNotFoundError as e:
            raise OptschedError(f"predictor: {path} needs {e.name} (pip install 'optsched[predict]')") from None
        if not isinstance(obj, DurationPredictor):
            raise OptschedError(f"predictor: {path} is not a saved DurationPredictor")
        return obj


def _check(feats: pd.DataFrame) -> None:
    missing = [c for c in FEATURES if c not in feats]
    if missing:
        raise OptschedError(f"predictor: features lack {missing[0]!r} (build them with optsched.predict.features)")


class JobPredictions:
    """Predictions made ahead of time, by job id: what a caller uses when the
    executor's instances cannot carry the features (the simulator's instances
    have no vc, model or history; bench/seed_compare.py predicts every job from
    the trace's causal history with a fitted DurationPredictor and passes this
    as the ``predictor`` policy option). Unknown ids get the prior."""

    def __init__(self, durations: dict[str, float], contributions: pd.DataFrame | None = None, kind: str = "table"):
        self.durations = {str(k): float(v) for k, v in durations.items()}
        self.table = contributions
        self.kind = kind

    def predict_instance(self, inst, contributions: bool = True):
        prior = prior_duration(inst.scale_factor)
        d = np.array([self.durations.get(j, p) for j, p in zip(inst.job_ids, prior)])
        c = None
        if contributions and self.table is not None:
            c = self.table.reindex(list(inst.job_ids)).fillna(0.0).reset_index(drop=True)
        return d, c


# Saved predictors loaded in this process, by path and the file's (mtime, size): a
# predictor saved again under the same path is loaded again (rounds load it every time).
_LOADED: dict[tuple, DurationPredictor] = {}


def resolve_predictor(predictor=None) -> DurationPredictor | None:
    """A DurationPredictor, a path to a saved one, or None: $OPTSCHED_PREDICTOR if set."""
    if isinstance(predictor, DurationPredictor) or hasattr(predictor, "predict_instance"):
        return predictor
    path = predictor or os.environ.get("OPTSCHED_PREDICTOR")
    if not path:
        return None
    path = str(path)
    try:
        st = os.stat(path)
        key = (path, st.st_mtime_ns, st.st_size)
    except OSError:
        key = (path, None, None)  # DurationPredictor.load names the missing file
    if key not in _LOADED:
        _LOADED.clear()  # (one saved predictor in use at a time is the norm; never a stale one)
        _LOADED[key] = DurationPredictor.load(path)
    return _LOADED[key]


def predicted_durations(inst, predictor=None, contributions: bool = True) -> tuple[np.ndarray, str, pd.DataFrame | None]:
    """(seconds per job at its GPU count, source, per-feature contributions or None).

    Source order: ``inst.extras["predicted_duration"]`` ("given"), a predictor
    (option or $OPTSCHED_PREDICTOR; "predictor:<kind>"), else the Philly prior
    by GPU count ("prior")."""
    given = (inst.extras or {}).get("predicted_duration")
    if given is not None:
        d = np.asarray(given, dtype=float)
        if d.shape != (inst.n,) or not np.all(np.isfinite(d)) or np.any(d <= 0):
            raise OptschedError(f"extras.predicted_duration: need {inst.n} positive finite seconds")
        return d, "given", None
    p = resolve_predictor(predictor)
    if p is None:
        return prior_duration(inst.scale_factor), "prior", None
    if hasattr(p, "predict_instance"):
        d, c = p.predict_instance(inst, contributions)
        return d, f"predictor:{p.kind}", c
    from optsched.predict.features import instance_features

    feats = instance_features(inst)
    return p.predict(feats), f"predictor:{p.kind}", (p.contributions(feats) if contributions else None)
