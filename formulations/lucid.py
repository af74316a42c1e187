"""Lucid (ASPLOS'23): non-intrusive, interpretable scheduling — profiling,
workload estimate, affine pair binding, orchestration; non-preemptive.

1. **Profiling.** A new job first runs on a small profiling partition
   (``profile_gpus`` GPUs of the largest type, default 1/16 of it, at least
   1) for up to ``profile_minutes`` (default 5) of execution, FIFO. Jobs that
   fail or end early do so there (fail fast) and never queue for the main
   cluster; jobs wider than the partition skip profiling. A job has been
   profiled once it executed ``profile_minutes`` (attained service / GPUs).
2. **Workload estimate.** Lucid's interpretable duration model
   (optsched.predict, kind ``ebm``; ``predictor`` option, $OPTSCHED_PREDICTOR,
   ``Instance.extras["predicted_duration"]``, or the documented prior).
3. **Classification** small / medium / jumbo, by the profiled GPU utilization
   when the caller supplies it (``extras["gpu_utilization"]`` in [0, 1]:
   < 0.4 small, < 0.7 medium, else jumbo), else by width (1 GPU small, 2–4
   medium, ≥ 8 jumbo; documented fallback). Jumbo jobs are never bound;
   medium jobs only with small ones.
4. **Orchestration.** The main queue is ordered by predicted GPU service
   (predicted duration × GPUs), smallest first; running jobs keep their GPUs
   (non-preemptive), the rest are placed in that order with backfill. With
   ``ageing`` (anti-starvation), the key is divided by 1 + wait/``age_seconds``
   (default 4 h), so a large job's priority grows with its wait.
5. **Affine pair binding.** Only when the cluster is loaded (jobs still wait
   after step 4), each waiting job may bind to a running job of the same
   width on its GPUs: a maximum-weight bipartite matching (running hosts ×
   waiting guests; scipy's linear_sum_assignment, exact) whose weights are
   the predicted co-location throughput gain t_a/T_a + t_b/T_b − 1 of pairs
   admitted by formulations/base.py's rule (pair throughputs: the snapshot's
   ``colocated`` data, the simulator's table with --packing). No pair data:
   no binding.
"""

from __future__ import annotations

import time

import numpy as np

from optsched.formulations.base import admitted_pairs
from optsched.formulations.priority import greedy_fit
from optsched.formulations.seed_common import (
    contributions_dict, executed_seconds, pinned_order, running_mask, waiting_seconds,
)
from optsched.model import MAX_GPUS, Allocation, Instance, OptschedError, pair_key
from optsched.checks import MAX_SECONDS, check_flag, check_number

# Binds pairs itself from the instance's candidate pairs: the simulator's --packing
# offers them (optsched.sim.supports_packing).
SPACE_SHARING = True
CLASSES = ("small", "medium", "jumbo")
COMPATIBLE = {("small", "small"), ("small", "medium"), ("medium", "small")}


def classify(inst: Instance) -> np.ndarray:
    util = (inst.extras or {}).get("gpu_utilization")
    if util is not None:
        u = np.asarray(util, dtype=float)
        if u.shape != (inst.n,) or np.any(~np.isfinite(u)) or np.any((u < 0) | (u > 1)):
            raise OptschedError(f"extras.gpu_utilization: need {inst.n} numbers in [0, 1]")
        return np.where(u < 0.4, 0, np.where(u < 0.7, 1, 2))
    s = inst.scale_factor
    return np.where(s <= 1, 0, np.where(s <= 4, 1, 2))


def bind_pairs(weights: np.ndarray) -> list[tuple[int, int]]:
    """Maximum-weight bipartite matching (hosts × guests; weight ≤ 0 = no edge)."""
    from scipy.optimize import linear_sum_assignment

    if weights.size == 0:
        return []
    W = np.where(weights > 0, weights, 0.0)
    r, c = linear_sum_assignment(W, maximize=True)
    return [(int(a), int(b)) for a, b in zip(r, c) if weights[a, b] > 0]


# What allocate() imports, loaded (and timed as import_seconds) before its timer: optsched/policy.py.
IMPORTS = ("scipy.optimize", "optsched.predict.models")


def allocate(inst: Instance, policy: str = "lucid", solver: str = "auto", time_limit: float = 60.0,
             predictor=None, profile_gpus: int | None = None, profile_minutes: float = 5.0, ageing: bool = False,
             age_seconds: float = 4 * 3600.0, binding: bool = True, explain: bool | None = None, **_) -> Allocation:
    from optsched.predict.models import predicted_durations

    # profile_gpus above the largest type's GPUs is that type's GPUs (the cluster may change between rounds).
    profile_gpus = check_number("profile_gpus", profile_gpus, 0, MAX_GPUS, whole=True, none=True, unit="GPUs")
    profile_minutes = check_number("profile_minutes", profile_minutes, 0.0, MAX_SECONDS / 60.0, unit="minutes")
    age_seconds = check_number("age_seconds", age_seconds, 0.0, MAX_SECONDS, lo_open=True, unit="s")
    ageing, binding = check_flag("ageing", ageing), check_flag("binding", binding)
    t0 = time.perf_counter()
    want = bool(explain or (explain is None and inst.n <= 200))
    pred, source, contrib = predicted_durations(inst, predictor, contributions=want)
    cls = classify(inst)
    running = running_mask(inst)
    executed = executed_seconds(inst)
    ptype = int(np.argmax(inst.capacity))
    pg = int(max(1, inst.capacity[ptype] // 16)) if profile_gpus is None else int(min(profile_gpus, inst.capacity[ptype]))
    profiled = (executed >= profile_minutes * 60.0) | (inst.scale_factor > pg) | (inst.throughput[:, ptype] <= 0)
    # 1. profiling partition: unprofiled jobs, FIFO (running ones first), on the profiling type
    X = np.zeros((inst.n, inst.k))
    prof_free = float(pg) if profile_minutes > 0 else 0.0
    profiling = np.zeros(inst.n, dtype=bool)
    for m in pinned_order(inst, np.zeros(inst.n), running & ~profiled):
        if not profiled[m] and inst.scale_factor[m] <= prof_free:
            X[m, ptype] = 1.0
            prof_free -= inst.scale_factor[m]
            profiling[m] = True
    # 2-4. main cluster: capacity minus the partition, profiled jobs by (aged) predicted GPU service
    key = pred * inst.scale_factor
    if ageing:
        key = key / (1.0 + waiting_seconds(inst) / age_seconds)
    main_cap = inst.capacity.copy()
    main_cap[ptype] -= pg if profile_minutes > 0 else 0
    queue = profiled & ~profiling
    order = [m for m in pinned_order(inst, key, running) if queue[m]]
    from dataclasses import replace

    main = replace(inst, capacity=main_cap)
    Xm = greedy_fit(main, np.asarray(order, dtype=int))
    X = X + Xm
    # 5. pair binding when loaded
    pairs, Y = np.zeros((0, 2), dtype=int), np.zeros((0, inst.k))
    thr = (inst.throughput * X).sum(axis=1)
    waiting = queue & (Xm.sum(axis=1) == 0)
    if binding and waiting.any():
        P, rate, ok = admitted_pairs(inst, None)
        host_ok = Xm.sum(axis=1) > 0
        on = Xm.argmax(axis=1)
        hosts, guests = np.flatnonzero(host_ok), np.flatnonzero(waiting)
        hi = {m: i for i, m in enumerate(hosts)}
        gi = {m: i for i, m in enumerate(guests)}
        Wt = np.zeros((len(hosts), len(guests)))
        for p, (a, b) in enumerate(P.tolist()):
            for h, g in ((a, b), (b, a)):
                if h in hi and g in gi and ok[p, on[h]] and (CLASSES[cls[h]], CLASSES[cls[g]]) in COMPATIBLE:
                    Wt[hi[h], gi[g]] = max(Wt[hi[h], gi[g]], rate[p, on[h]].sum() - 1.0)
        chosen = bind_pairs(Wt)
        if chosen:
            pidx = {tuple(p): q for q, p in enumerate(P.tolist())}
            pairs = np.array([sorted((hosts[h], guests[g])) for h, g in chosen], dtype=int)
            Y = np.zeros((len(pairs), inst.k))
            for q, (h, g) in enumerate(chosen):
                host, j = hosts[h], on[hosts[h]]
                Y[q, j] = 1.0
                X[host] = 0.0
                r = rate[pidx[tuple(pairs[q])], j]
                a, b = pairs[q]
                thr[host] = 0.0
                thr[a] = inst.throughput[a, j] * r[0]
                thr[b] = inst.throughput[b, j] * r[1]
    explanation = {
        "priority_order": [inst.job_ids[m] for m in order],
        "profiling": [inst.job_ids[m] for m in np.flatnonzero(profiling)],
        # Unprofiled jobs run only in the profiling partition: these wait for it even
        # when the main cluster has free GPUs (Lucid's rule).
        "waiting_for_profiling": [inst.job_ids[m] for m in np.flatnonzero(~profiled & ~profiling)],
        "profiling_partition": {"gpu_type": inst.gpu_types[ptype], "gpus": pg if profile_minutes > 0 else 0},
        "job_class": {jid: CLASSES[c] for jid, c in zip(inst.job_ids, cls)},
        "predicted_duration": {jid: float(d) for jid, d in zip(inst.job_ids, pred)},
        "prediction_source": source,
        "bound_pairs": [pair_key(inst.job_ids[a], inst.job_ids[b]) for a, b in pairs.tolist()],
        "ageing": bool(ageing),
    }
    if contrib is not None:
        explanation["priority_contributions"] = contributions_dict(inst, contrib, {"log_gpus": np.log(inst.scale_factor)})
    used = inst.scale_factor @ X + (inst.scale_factor[pairs[:, 0]] @ Y if len(pairs) else 0.0)
    explanation["capacity_used"] = {t: float(u) for t, u in zip(inst.gpu_types, used)}
    explanation["capacity"] = {t: float(c) for t, c in zip(inst.gpu_types, inst.capacity)}
    n_run = int(((X.sum(axis=1) > 0)).sum() + 2 * len(pairs))
    return Allocation.of(inst, policy, X, "ok", float(n_run), time.perf_counter() - t0, thr, explanation,
                         pairs=pairs, pair_fractions=Y)
