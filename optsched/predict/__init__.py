"""Duration and priority prediction for the seeds' schedulers (Lucid, Horus/QSSF).

- :mod:`optsched.predict.features`: the features a job history carries
  (virtual cluster or user, model, GPUs, submit hour and weekday, past
  durations of similar jobs, computed causally: only jobs that had finished
  before the job was submitted count) — from the Philly trace or an Instance.
- :mod:`optsched.predict.models`: ``DurationPredictor`` with kinds ``ebm``
  (Lucid: interpret-core's explainable boosting machine, an additive model
  whose per-feature terms are the explanation), ``gbdt`` (Horus: scikit-learn's
  HistGradientBoostingRegressor; contributions by occlusion against the
  training median) and ``prior`` (the cold-start fallback: the median
  duration per GPU count of the Philly trace, :data:`PRIOR_MEDIAN_SECONDS`).
- :mod:`optsched.predict.convergence`: Blox's loss-based termination as a
  pure function of a job's convergence profile.

Every prediction is in seconds at the job's requested GPU count. Policies read
them through :func:`predicted_durations`: ``Instance.extras["predicted_duration"]``
when the caller provides it, else a predictor (the ``predictor`` policy option:
a DurationPredictor or a path to a saved one; else ``$OPTSCHED_PREDICTOR``),
else the prior.
"""

from optsched.predict.models import PRIOR_MEDIAN_SECONDS, DurationPredictor, predicted_durations, prior_duration

__all__ = ["DurationPredictor", "PRIOR_MEDIAN_SECONDS", "predicted_durations", "prior_duration"]
