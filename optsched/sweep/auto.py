"""``auto``: automatic policy synthesis (Blox, EuroSys'24, §5.2).

Every ``every`` rounds (a decision point t), each candidate policy is
simulated forward from the current state over ``horizon`` seconds, and the
run switches to the candidate with the best score on that window; the choices
are logged (one row per decision: time, chosen, each candidate's score).

**Forking the state.** The simulator has no public fork/resume API, so two
ways are implemented, with identical results (the simulator is
deterministic given the seed; tests/test_sweep_auto.py checks it):

- ``mode="fork"`` (default on Linux for rigid-only traces): the run itself is
  simulated once; at a decision point its ``on_round`` callback ``os.fork()``s
  one child per candidate, which appends its candidate to the (shared, now
  copied) schedule and keeps simulating to t + horizon, reads the per-job state
  the loop hands to ``on_round`` (``info["live"]``: the run's constants and
  its state), writes its score to a pipe and exits. Cost per decision:
  candidates × horizon, children in parallel (``parallel`` at a time). Not
  used when JAX is loaded (elastic jobs: forking JAX's threads is unsafe).
- ``mode="resim"``: the state at t is reproduced by re-simulating from t = 0
  with the schedule chosen so far and then the candidate, up to t + horizon
  (``max_time``). Quadratic in the run length: decision k re-simulates
  k·every rounds per candidate.

``auto_sim_seconds`` in the summary counts the look-ahead simulation time.

**Scores** on the window W = [t, t + horizon), over the jobs present in it:

- ``jct``: Σ time each job spends in the system inside W (by Little's law the
  window's contribution to the average JCT);
- ``responsiveness``: Σ time jobs wait inside W before their first start;
- ``mix``: ``jct_weight`` × jct/best jct + (1 − jct_weight) × resp/best resp.

Lower is better; ties keep the current policy. Candidates are policies; the
admission rule is the run's (switching admission needs the simulator hook).
Decision points are every ``every`` × round length seconds of simulated time
(rounds that end early, when every placed job finished, make a round shorter
than its length; idle stretches are skipped).
"""

from __future__ import annotations

import logging
import os
import time as _time

import numpy as np
import pandas as pd

from optsched.model import OptschedError

log = logging.getLogger("optsched.sweep.auto")


def window_scores(jobs: pd.DataFrame, t: float, end: float, total_gpus: float = 1.0) -> tuple[float, float]:
    """(jct score, responsiveness score) of one look-ahead (module doc)."""
    arr = jobs["arrival_time"].to_numpy(dtype=float)
    comp = jobs["completion_time"].to_numpy(dtype=float)
    start = jobs["first_start"].to_numpy(dtype=float)
    comp = np.where(np.isnan(comp), end, np.minimum(comp, end))
    start = np.where(np.isnan(start), end, np.minimum(start, end))
    lo = np.maximum(arr, t)
    present = arr < end
    jct = np.clip(comp - lo, 0, None)[present].sum()
    resp = np.clip(start - lo, 0, None)[present].sum()
    # Terminal cost: the jobs still unfinished at the window's end, as the SPT lower bound on
    # their remaining sum of completion times (Σ_k (n−k+1)·r_(k) over remaining times sorted
    # ascending, on m = GPUs / mean scale factor parallel slots), r = remaining fraction × the
    # job's time at an equal share of the cluster (isolated_time).
    left = present & np.isnan(jobs["completion_time"].to_numpy(dtype=float))
    if left.any() and "isolated_time" in jobs:
        frac = 1.0 - jobs["steps_done"].to_numpy(dtype=float) / jobs["steps_total"].to_numpy(dtype=float)
        r = np.sort(np.nan_to_num(np.clip(frac, 0, 1) * jobs["isolated_time"].to_numpy(dtype=float))[left])
        slots = max(total_gpus / float(jobs["scale_factor"].to_numpy()[left].mean()), 1.0)
        jct += float((np.arange(len(r), 0, -1) * r).sum() / slots)
    return float(jct), float(resp)


def _score_arrays(arrival, first_start, completion, remaining, scale, t, end, total_gpus):
    frame = pd.DataFrame({"arrival_time": arrival, "first_start": first_start, "completion_time": completion,
                          "steps_done": 1.0 - remaining, "steps_total": 1.0, "isolated_time": 1.0,
                          "scale_factor": scale})
    # remaining is passed as a time (seconds at an equal share): steps_done/steps_total·isolated_time
    frame["steps_done"] = 0.0
    frame["isolated_time"] = remaining
    return window_scores(frame, t, end, total_gpus)


def _simulate_schedule(trace, cluster, throughputs, seed, options, schedule, max_time=None):
    from optsched.sim import simulate_flags as simulate
    from optsched.sweep.autopolicy import NAME, register

    register()
    opts = dict(options)
    user_policy_options = dict(opts.pop("policy_options", {}) or {})
    opts["recompute_every"] = 1
    if max_time is not None:
        opts["max_time"] = max_time
    res = simulate(trace, cluster, policy=NAME, throughputs=throughputs, seed=seed,
                   policy_options={**user_policy_options, "schedule": tuple(schedule), "memo": {}}, **opts)
    return res


def _score_candidate(args):
    trace, cluster, throughputs, seed, options, schedule, t, end = args
    t0 = _time.perf_counter()
    res = _simulate_schedule(trace, cluster, throughputs, seed, options, schedule, max_time=end)
    jct, resp = window_scores(res.jobs, t, end, float(sum(res.config["cluster"].values())))
    complete = bool(res.summary.get("jobs_unfinished", 1) == 0)
    return jct, resp, complete, res if complete else None, _time.perf_counter() - t0


def _choose(candidates, jct, resp, metric, jct_weight, current):
    jct, resp = np.asarray(jct, float), np.asarray(resp, float)
    if metric == "jct":
        score = jct
    elif metric == "responsiveness":
        score = resp
    else:
        score = jct_weight * jct / max(jct.min(), 1e-9) + (1 - jct_weight) * resp / max(resp.min(), 1e-9)
    best = int(np.argmin(score))
    if current in candidates and score[candidates.index(current)] <= score[best] * (1 + 1e-12):
        best = candidates.index(current)
    return candidates[best], score


def _fork_usable() -> bool:
    import sys

    return hasattr(os, "fork") and "jax" not in sys.modules


class _ForkFailed(Exception):
    pass


def _simulate_auto_fork(trace, cluster, throughputs, seed, options, candidates, step, horizon, metric, jct_weight,
                        parallel, t_first):
    """The fork mode (module doc). Returns (SimResult, rows, schedule, look-ahead seconds) or raises _ForkFailed."""
    import json

    from optsched.sim import simulate_flags as simulate
    from optsched.sweep.autopolicy import NAME, register

    register()
    schedule: list[tuple[float, str]] = []
    rows: list[dict] = []
    state = {"next": t_first, "child": None, "sim": 0.0}

    def child_score(jobs, st, equal_thr, total_gpus, t, end):
        remaining = np.clip(jobs.steps_total - st.steps_done, 0, None) / np.maximum(equal_thr, 1e-300)
        return _score_arrays(jobs.arrival, st.first_start, st.completion, remaining, jobs.scale_factor, t, end,
                             total_gpus)

    def finish_child(payload: dict) -> None:
        fd = state["child"]["fd"]
        os.write(fd, json.dumps(payload).encode())
        os.close(fd)
        os._exit(0)

    def on_round(info: dict) -> None:
        now = float(info["time"])
        child = state["child"]
        if child is not None:
            if now >= child["end"]:
                run, st = info["live"]
                try:
                    jct, resp = child_score(run.jobs, st, run.equal_thr_floor, float(run.capacity.sum()),
                                            child["t"], child["end"])
                    finish_child({"jct": jct, "resp": resp})
                except Exception as e:  # noqa: BLE001
                    finish_child({"error": f"{type(e).__name__}: {e}"})
            return
        if now < state["next"] and schedule:
            return
        t0 = _time.perf_counter()
        results = {}
        for batch_start in range(0, len(candidates), max(parallel, 1)):
            procs = []
            for c in candidates[batch_start: batch_start + max(parallel, 1)]:
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:  # the child: this candidate from now on, up to the horizon
                    os.close(r)
                    state["child"] = {"fd": w, "t": now, "end": now + horizon}
                    schedule.append((now, c))
                    return
                os.close(w)
                procs.append((c, pid, r))
            for c, pid, r in procs:
                chunks = []
                while True:
                    b = os.read(r, 65536)
                    if not b:
                        break
                    chunks.append(b)
                os.close(r)
                os.waitpid(pid, 0)
                try:
                    results[c] = json.loads(b"".join(chunks).decode() or "{}")
                except ValueError:
                    results[c] = {}
        bad = [c for c in candidates if "jct" not in results.get(c, {})]
        if bad:
            raise _ForkFailed(results.get(bad[0], {}).get("error", "a look-ahead child died"))
        current = schedule[-1][1] if schedule else None
        chosen, score = _choose(candidates, [results[c]["jct"] for c in candidates],
                                [results[c]["resp"] for c in candidates], metric, jct_weight, current)
        rows.append({"time": now, "chosen": chosen, "previous": current or "", "metric": metric,
                     **{f"score_{c}": float(x) for c, x in zip(candidates, score)}})
        if chosen != current:
            schedule.append((now, chosen))
        state["next"] = now + step
        state["sim"] += _time.perf_counter() - t0

    # The first decision (before any round has run) by re-simulation: cheap at t = first arrival.
    jct, resp = [], []
    for c in candidates:
        j, r_, _, _, secs = _score_candidate((trace, cluster, throughputs, seed, options, [(t_first, c)], t_first,
                                              t_first + horizon))
        jct.append(j)
        resp.append(r_)
        state["sim"] += secs
    chosen, score = _choose(candidates, jct, resp, metric, jct_weight, None)
    rows.append({"time": t_first, "chosen": chosen, "previous": "", "metric": metric,
                 **{f"score_{c}": float(x) for c, x in zip(candidates, score)}})
    schedule.append((t_first, chosen))
    state["next"] = t_first + step
    opts = dict(options)
    user_policy_options = dict(opts.pop("policy_options", {}) or {})
    opts["recompute_every"] = 1
    res = simulate(trace, cluster, policy=NAME, throughputs=throughputs, seed=seed, on_round=on_round,
                   policy_options={**user_policy_options, "schedule": schedule, "memo": {}}, **opts)
    if state["child"] is not None:  # a child whose run ended before its horizon
        c = state["child"]
        jct, resp = window_scores(res.jobs, c["t"], c["end"], float(sum(res.config["cluster"].values())))
        finish_child({"jct": jct, "resp": resp})
    return res, rows, list(schedule), state["sim"]


def simulate_auto(trace, cluster=None, throughputs=None, seed: int = 0, options: dict | None = None,
                  candidates=("max_min_fairness", "fifo", "las"), every: int = 10, horizon: float | None = None,
                  metric: str = "jct", jct_weight: float = 0.5, parallel: int = 1, mode: str = "auto"):
    """Returns (SimResult, choices DataFrame). ``horizon`` seconds (default 2 × every rounds);
    ``mode``: fork | resim | auto (fork when usable)."""
    from optsched.sim.jobs import elastic_rows
    from optsched.sim.loop import SimConfig
    from optsched.traces.io import read_trace

    if isinstance(trace, str):
        trace = read_trace(trace)
    options = dict(options or {})
    if metric not in ("jct", "responsiveness", "mix"):
        raise OptschedError(f"auto.metric: unknown {metric!r} (choose from jct, responsiveness, mix)")
    for bad in ("recompute_every", "max_time", "window"):
        if options.get(bad) is not None:
            raise OptschedError(f"auto: option {bad} is not supported with policy auto")
    candidates = list(candidates)
    round_length = SimConfig(round_length=options.get("round_length")).resolved_round_length(
        bool(elastic_rows(trace).any()))
    step = every * round_length
    horizon = float(horizon) if horizon else 2 * step
    t = float(trace.jobs["arrival_time"].min())
    schedule: list[tuple[float, str]] = []
    rows, final = [], None
    sim_seconds, wall0 = 0.0, _time.perf_counter()
    if mode not in ("auto", "fork", "resim"):
        raise OptschedError(f"auto.mode: unknown {mode!r} (choose from auto, fork, resim)")
    if mode == "fork" or (mode == "auto" and _fork_usable()):
        try:
            final, rows, schedule, sim_seconds = _simulate_auto_fork(
                trace, cluster, throughputs, seed, options, candidates, step, horizon, metric, jct_weight,
                parallel, t)
            mode = "fork"
        except _ForkFailed as e:
            if mode == "fork":
                raise OptschedError(f"auto: fork look-ahead failed ({e})") from None
            log.warning("auto: fork look-ahead failed (%s); re-simulating instead", e)
            rows, schedule, final, sim_seconds = [], [], None, 0.0
    if final is None:
        mode = "resim"
    pool = None
    if final is None and parallel > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        from optsched.sweep.worker import init_worker

        pool = ProcessPoolExecutor(max_workers=min(parallel, len(candidates)), mp_context=mp.get_context("spawn"),
                                   initializer=init_worker)
    try:
        for _ in range(100_000 if final is None else 0):
            end = t + horizon
            jobs_args = [(trace, cluster, throughputs, seed, options, schedule + [(t, c)], t, end) for c in candidates]
            results = list(pool.map(_score_candidate, jobs_args)) if pool else [_score_candidate(a) for a in jobs_args]
            sim_seconds += sum(r[4] for r in results)
            current = schedule[-1][1] if schedule else None
            chosen, score = _choose(candidates, [r[0] for r in results], [r[1] for r in results], metric,
                                    jct_weight, current)
            best = candidates.index(chosen)
            rows.append({"time": t, "chosen": chosen, "previous": current or "", "metric": metric,
                         **{f"score_{c}": float(s) for c, s in zip(candidates, score)}})
            if chosen != current:
                schedule.append((t, chosen))
            done_res = results[best][3]
            if done_res is not None and float(done_res.summary.get("makespan", np.inf)) + \
                    float(trace.jobs["arrival_time"].min()) <= t + step:
                final = done_res  # every job finished before the next decision point
                break
            t += step
    finally:
        if pool is not None:
            pool.shutdown()
    if final is None:
        final = _simulate_schedule(trace, cluster, throughputs, seed, options, schedule)
    choices = pd.DataFrame(rows)
    summary = dict(final.summary)
    summary.update({"policy": "auto", "auto_decisions": len(rows), "auto_switches": max(len(schedule) - 1, 0),
                    "auto_sim_seconds": sim_seconds, "auto_mode": mode, "wall_seconds": _time.perf_counter() - wall0})
    config = dict(final.config)
    po = {k: v for k, v in (config.get("policy_options") or {}).items() if k not in ("memo", "schedule")}
    config.update({"policy": "auto", "policy_options": po, "recompute_every": options.get("recompute_every"),
                   "max_time": None,
                   "auto": {"candidates": candidates, "every": every, "horizon": horizon, "metric": metric,
                            "jct_weight": jct_weight, "schedule": [list(s) for s in schedule]}})
    from optsched.sim import SimResult

    return SimResult(final.jobs, final.rounds, summary, config), choices
