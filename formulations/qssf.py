"""Horus / QSSF (Helios, SC'21: Quasi-Shortest-Service-First; Horus, TPDS'21):
jobs ordered by predicted GPU service = predicted duration × GPUs, shortest
first, non-preemptive with backfilling.

The prediction is Horus's GBDT (optsched.predict, kind ``gbdt``) trained on
job history, given as the ``predictor`` option (a DurationPredictor or a
path) or ``$OPTSCHED_PREDICTOR``; a caller may instead put
``predicted_duration`` in ``Instance.extras``; with neither, the documented
cold-start prior (the Philly median per GPU count). A running job keeps its
GPUs (X = 1; ``preemptive=True`` re-sorts everyone by predicted *remaining*
service). Explanation: ``predicted_duration``, ``prediction_source`` and,
when the predictor explains itself, ``priority_contributions`` — per feature,
its share of log(priority) = log(predicted duration) + log(GPUs).
"""

from __future__ import annotations

import time

import numpy as np

from optsched.formulations.priority import greedy_fit
from optsched.formulations.seed_common import (
    contributions_dict, pinned_order, remaining_predicted, running_mask,
)
from optsched.model import Allocation, Instance
from optsched.checks import check_flag


# What allocate() imports, loaded (and timed as import_seconds) before its timer: optsched/policy.py.
IMPORTS = ("optsched.predict.models",)


def allocate(inst: Instance, policy: str = "qssf", solver: str = "auto", time_limit: float = 60.0,
             predictor=None, preemptive: bool = False, agnostic: bool = False, explain: bool | None = None,
             **_) -> Allocation:
    from optsched.predict.models import predicted_durations

    preemptive, agnostic = check_flag("preemptive", preemptive), check_flag("agnostic", agnostic)
    t0 = time.perf_counter()
    want = bool(explain or (explain is None and inst.n <= 200))
    pred, source, contrib = predicted_durations(inst, predictor, contributions=want)
    service = (remaining_predicted(inst, pred) if preemptive else pred) * inst.scale_factor
    pinned = np.zeros(inst.n, dtype=bool) if preemptive else running_mask(inst)
    order = pinned_order(inst, service, pinned)
    X = greedy_fit(inst, order, agnostic)
    explanation = {
        "priority_order": [inst.job_ids[m] for m in order],
        "predicted_duration": {jid: float(d) for jid, d in zip(inst.job_ids, pred)},
        "prediction_source": source,
        "non_preemptive": not preemptive,
    }
    if contrib is not None:
        explanation["priority_contributions"] = contributions_dict(inst, contrib, {"log_gpus": np.log(inst.scale_factor)})
    running = int((X.sum(axis=1) > 0).sum())
    return Allocation.of(inst, policy, X, "ok", float(running), time.perf_counter() - t0, explanation=explanation)
