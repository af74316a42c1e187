"""Job-history features for duration prediction (what the traces carry).

A history is a table with one row per job: ``submit`` (seconds; absolute
epoch seconds when known, so that the hour of day means something),
``duration`` (seconds; unknown for jobs to predict), ``gpus``, ``vc`` (virtual
cluster or user; "" when unknown) and ``model`` ("" when unknown). The
features:

    vc, model                  categorical
    gpus                       requested GPUs
    submit_hour, weekday       from ``submit``
    hist_mean_group            mean log-duration of the last 20 jobs of the same
                               (vc, gpus) that had *finished* before this job was
                               submitted (NaN when none: the cold start)
    hist_last_group            log-duration of the last of them
    hist_count_group           log(1 + how many had finished)
    hist_mean_vc               the same mean over the whole vc

Past durations are causal: a job's own duration, and those of jobs still
running at its submission, never enter its features.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from optsched.model import OptschedError

CATEGORICAL = ("vc", "model")
NUMERIC = ("gpus", "submit_hour", "weekday", "hist_mean_group", "hist_last_group", "hist_count_group", "hist_mean_vc")
FEATURES = CATEGORICAL + NUMERIC
HISTORY_COLUMNS = ("submit", "gpus")  # required; duration, vc, model optional
WINDOW = 20


def read_philly_history(path) -> pd.DataFrame:
    """The Philly CSV (timestamp,duration,num_gpus,gpu_time,cluster) as a history table."""
    df = pd.read_csv(path)
    missing = [c for c in ("timestamp", "duration", "num_gpus") if c not in df]
    if missing:
        raise OptschedError(f"predict: {path}: missing column {missing[0]!r} (need timestamp, duration, num_gpus)")
    ts = pd.to_datetime(df["timestamp"], errors="coerce")
    if ts.isna().any():
        raise OptschedError(f"predict: {path}: row {int(np.argmax(ts.isna().to_numpy())) + 2}: timestamp is not a date-time")
    out = pd.DataFrame({
        "submit": (ts - pd.Timestamp("1970-01-01")).dt.total_seconds().to_numpy(),
        "duration": df["duration"].to_numpy(dtype=float),
        "gpus": df["num_gpus"].to_numpy(dtype=float),
        "vc": df["cluster"].astype(str).to_numpy() if "cluster" in df else "",
        "model": df["model"].astype(str).to_numpy() if "model" in df else "",
        "row": np.arange(len(df)) + 2,  # file line, as the trace readers number rows
    })
    return out.sort_values("submit", kind="stable").reset_index(drop=True)


def _causal_stats(submit: np.ndarray, end: np.ndarray, logd: np.ndarray, window: int):
    """Per query submit time: (mean of the last ``window`` finished, last, count)."""
    order = np.argsort(end, kind="stable")
    e, ld = end[order], logd[order]
    cs = np.concatenate([[0.0], np.cumsum(ld)])
    idx = np.searchsorted(e, submit, side="left")  # finished strictly before submission
    lo = np.maximum(idx - window, 0)
    cnt = idx - lo
    mean = np.where(cnt > 0, (cs[idx] - cs[lo]) / np.maximum(cnt, 1), np.nan)
    last = np.where(idx > 0, ld[np.maximum(idx - 1, 0)] if len(ld) else np.nan, np.nan)
    return mean, last, idx


def history_features(jobs: pd.DataFrame, past: pd.DataFrame | None = None, window: int = WINDOW) -> pd.DataFrame:
    """Features of ``jobs`` given finished ``past`` jobs (default: ``jobs`` themselves,
    which must then carry durations). Missing optional columns get documented defaults."""
    for c in HISTORY_COLUMNS:
        if c not in jobs:
            raise OptschedError(f"predict: history: missing column {c!r} (need {', '.join(HISTORY_COLUMNS)})")
    jobs = _defaults(jobs)
    past = jobs if past is None else _defaults(past)
    if len(past) and "duration" not in past:
        raise OptschedError("predict: history: past jobs need a 'duration' column")
    submit = jobs["submit"].to_numpy(dtype=float)
    feats = pd.DataFrame({
        "vc": jobs["vc"].astype(str).to_numpy(),
        "model": jobs["model"].astype(str).to_numpy(),
        "gpus": jobs["gpus"].to_numpy(dtype=float),
        "submit_hour": (submit % 86400.0) / 3600.0,
        "weekday": np.floor(submit / 86400.0 + 3) % 7,  # 1970-01-01 was a Thursday (3)
    })
    n = len(jobs)
    for col in ("hist_mean_group", "hist_last_group", "hist_count_group", "hist_mean_vc"):
        feats[col] = np.nan
    if not len(past):
        feats["hist_count_group"] = 0.0
        return feats
    p_end = past["submit"].to_numpy(dtype=float) + past["duration"].to_numpy(dtype=float)
    p_logd = np.log(np.maximum(past["duration"].to_numpy(dtype=float), 1.0))
    p_vc, p_g = past["vc"].astype(str).to_numpy(), past["gpus"].to_numpy(dtype=float)
    j_vc, j_g = feats["vc"].to_numpy(), feats["gpus"].to_numpy()
    mean_g, last_g, cnt_g, mean_vc = (np.full(n, np.nan) for _ in range(4))
    cnt_g[:] = 0.0
    for (vc, g), pidx in pd.DataFrame({"vc": p_vc, "g": p_g}).groupby(["vc", "g"], sort=False).indices.items():
        q = np.flatnonzero((j_vc == vc) & (j_g == g))
        if len(q):
            mean_g[q], last_g[q], cnt_g[q] = _causal_stats(submit[q], p_end[pidx], p_logd[pidx], window)
    for vc, pidx in pd.Series(p_vc).groupby(p_vc, sort=False).indices.items():
        q = np.flatnonzero(j_vc == vc)
        if len(q):
            mean_vc[q] = _causal_stats(submit[q], p_end[pidx], p_logd[pidx], window)[0]
    feats["hist_mean_group"], feats["hist_last_group"] = mean_g, last_g
    feats["hist_count_group"], feats["hist_mean_vc"] = np.log1p(cnt_g), mean_vc
    return feats


def _defaults(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    for c in CATEGORICAL:
        if c not in df:
            df[c] = ""
    return df


def trace_features(jobs: pd.DataFrame, window: int = WINDOW) -> pd.DataFrame:
    """Features of a trace's jobs (``Trace.jobs``), one row per job in order:
    vc from a ``vc`` or ``cluster`` column (Philly's virtual cluster), model
    from ``model`` (as the trace gives it: "" for Philly), GPUs = scale factor,
    submit = ``submit_epoch`` column + arrival time (the hour of day is then
    relative to the first arrival when the trace has no epoch), history = the
    trace's own jobs with a duration, each counted once it *would* have
    finished (arrival + duration): causal, as ``history_features``. The
    simulator puts these rows in ``Instance.extras["features"]`` for the
    policies that predict durations."""
    vc = jobs["vc"] if "vc" in jobs else jobs["cluster"] if "cluster" in jobs else pd.Series([""] * len(jobs))
    epoch = jobs["submit_epoch"].to_numpy(dtype=float) if "submit_epoch" in jobs else 0.0
    h = pd.DataFrame({
        "submit": epoch + jobs["arrival_time"].to_numpy(dtype=float),
        "gpus": jobs["scale_factor"].to_numpy(dtype=float),
        "vc": vc.astype(str).to_numpy(),
        "model": jobs["model"].astype(str).to_numpy() if "model" in jobs else "",
        "duration": jobs["duration"].to_numpy(dtype=float) if "duration" in jobs else np.nan,
    })
    past = h[np.isfinite(h["duration"].to_numpy())]
    return history_features(h.drop(columns="duration"), past, window)


def instance_features(inst) -> pd.DataFrame:
    """Features of an Instance's jobs. ``inst.extras["features"]`` when the
    caller computed them (a table with the ``FEATURES`` columns, one row per
    job: the simulator's, from ``trace_features``); else read from
    ``inst.extras`` when the caller put them there (``vc``, ``model``: per-job
    strings; ``submit_epoch``: the absolute time of arrival 0; ``history``: a
    finished-jobs table as above), else: vc = the job's entity, model = "",
    submit = arrival time, no history (NaN history features: the models treat
    them as missing)."""
    ex = inst.extras or {}
    n = inst.n
    given = ex.get("features")
    if given is not None:
        if not isinstance(given, pd.DataFrame) or len(given) != n or any(c not in given for c in FEATURES):
            raise OptschedError(f"extras.features: need a table of {n} rows with columns {', '.join(FEATURES)}")
        return given.reset_index(drop=True)
    vc = ex.get("vc") or tuple(e or "" for e in inst.entity) or ("",) * n
    jobs = pd.DataFrame({
        "submit": float(ex.get("submit_epoch", 0.0)) + np.asarray(inst.arrival_time, dtype=float),
        "gpus": np.asarray(inst.scale_factor, dtype=float),
        "vc": list(vc) if len(vc) == n else [""] * n,
        "model": list(ex.get("model") or [""] * n),
    })
    return history_features(jobs, ex.get("history") if ex.get("history") is not None else jobs.iloc[:0].assign(duration=[]))
