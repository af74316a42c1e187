"""The seeds' schedulers on one Philly-derived trace, plus the predictors'
accuracy, Lucid's ageing, loss-based termination and Optimus on the Pollux
workloads.

    OPENBLAS_NUM_THREADS=1 python bench/seed_compare.py [--jobs 1000] [--rate 30]
        [--cluster v100=32,p100=32,k80=32] [--out seed-out] [--pollux 1-8] [--skip-sim]

1. Predictors (optsched.predict): Philly split by submit time, first 80 % to
   train, last 20 % held out; MAE of log-duration for the trivial baseline
   (training median), the prior (median per GPU count), Horus's GBDT and
   Lucid's EBM.
2. Trace: ``--jobs`` jobs drawn (seed 0) from the held-out part (duration <= 24 h,
   <= 16 GPUs: 96.7 % of Philly), Poisson arrivals at ``--rate`` jobs/h,
   job types assigned from the seed (the simulator's Philly rule). Every job's
   prediction comes from the fitted model with its causal history features
   (``JobPredictions``: the simulator's instances cannot carry vc/history).
3. ``simulate`` per policy (fifo, tiresias, tiresias_gittins, max_min_fairness,
   lucid, lucid_ageing, qssf, optimus, allox, synergy, gandiva); one table, one
   JCT CDF (seed-out/jct_cdf.png). Policies that read per-round state run with
   recompute_every=1.
4. Ageing: JCT of the largest 5 % jobs (GPU-time) under lucid and lucid_ageing.
5. Loss-based termination: each job gets a synthetic power-law convergence
   profile as trace columns (optsched.predict.convergence.synthetic_columns);
   fifo and lucid rerun with ``loss_threshold`` (``--loss-threshold``, default
   5 %: the simulator ends a job when its loss is within 5 % of its final
   loss); JCT change.
6. Optimus on Pollux workloads (``--pollux``), 16 nodes × 4 GPUs, 1× load:
   GPU counts by marginal gain from each job's fitted speed model at its
   workload batch size (fixed) and the iterations it has left
   (formulations/optimus.py, optsched/sim/stages.py ``optimus_extras``);
   published: 5,682 s mean JCT (Pollux simulator).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

warnings.filterwarnings("ignore")
DATA = Path(os.environ.get("OPTSCHED_PEER_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
POLICIES = ["fifo", "tiresias", "tiresias_gittins", "max_min_fairness", "lucid", "lucid_ageing", "qssf", "optimus",
            "allox", "synergy", "gandiva"]
PER_ROUND = {"lucid", "lucid_ageing", "qssf", "allox", "synergy", "optimus"}


def predictors(out: dict):
    from optsched.predict.features import history_features, read_philly_history
    from optsched.predict.models import DurationPredictor, JobPredictions

    h = read_philly_history(DATA / "philly" / "philly.csv.gz")
    f = history_features(h)
    y = np.log(np.maximum(h["duration"].to_numpy(), 1.0))
    cut = int(0.8 * len(h))
    rows = {"baseline (train median)": float(np.mean(np.abs(np.median(y[:cut]) - y[cut:])))}
    tables = {}
    for kind in ("prior", "gbdt", "ebm"):
        t0 = time.perf_counter()
        p = DurationPredictor(kind).fit(f.iloc[:cut], h["duration"].iloc[:cut])
        pred = p.predict_log(f.iloc[cut:])
        rows[kind] = float(np.mean(np.abs(pred - y[cut:])))
        print(f"  {kind}: MAE {rows[kind]:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)
        tables[kind] = (p, pred)
    out["predictor_mae_log_duration"] = rows
    held = h.iloc[cut:].reset_index(drop=True)
    return held, f.iloc[cut:].reset_index(drop=True), tables, JobPredictions


def philly_trace(held: pd.DataFrame, n_jobs: int, rate: float, seed: int = 0):
    from optsched.traces.philly import read_philly

    tr = read_philly(DATA / "philly" / "philly.csv.gz")
    j = tr.jobs
    keep = j["row"].isin(held["row"]) & (j["duration"] <= 86400) & (j["scale_factor"] <= 16)
    pool = j[keep].reset_index(drop=True)
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(pool), size=n_jobs, replace=False))
    s = pool.iloc[idx].reset_index(drop=True).copy()
    arr = np.cumsum(rng.exponential(3600.0 / rate, n_jobs))
    s["arrival_time"] = arr - arr[0]
    s["job_id"] = [str(i) for i in range(n_jobs)]
    return replace(tr, jobs=s, notes=tr.notes + (f"{n_jobs} held-out jobs, seed {seed}, {rate} jobs/h",))


def run(trace, cluster, policy, **cfg):
    from optsched.sim import simulate

    t0 = time.perf_counter()
    r = simulate(trace, cluster, policy=policy, **cfg)
    print(f"  {policy}: avg JCT {r.summary['avg_jct'] / 3600:.2f} h ({time.perf_counter() - t0:.0f} s)", flush=True)
    return r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=30.0)
    ap.add_argument("--cluster", default="v100=32,p100=32,k80=32")
    ap.add_argument("--out", default="seed-out")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--pollux", default="1-8")
    ap.add_argument("--skip-sim", action="store_true")
    ap.add_argument("--skip-pollux", action="store_true")
    ap.add_argument("--loss-threshold", type=float, default=0.05)
    a = ap.parse_args()
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out: dict = {}
    print("predictors (Philly, 80/20 split by submit time)", flush=True)
    held, feats, tables, JobPredictions = predictors(out)
    trace = philly_trace(held, a.jobs, a.rate)
    row_pos = {r: i for i, r in enumerate(held["row"])}
    pos = [row_pos[r] for r in trace.jobs["row"]]
    preds = {}
    for kind in ("gbdt", "ebm"):
        p, logp = tables[kind]
        contrib = p.contributions(feats.iloc[pos])
        contrib.index = trace.jobs["job_id"].to_list()
        preds[kind] = JobPredictions(dict(zip(trace.jobs["job_id"], np.exp(logp[pos]))), contrib, kind)
    results = {}
    if not a.skip_sim:
        print(f"simulate {a.jobs} jobs on {a.cluster}", flush=True)
        for pol in a.policies.split(","):
            opts = {}
            if pol.startswith("lucid"):
                opts["predictor"] = preds["ebm"]
            elif pol in ("qssf", "allox"):
                opts["predictor"] = preds["gbdt"]
            results[pol] = run(trace, a.cluster, pol, policy_options=opts,
                               recompute_every=1 if pol in PER_ROUND else None, seed=0)
            results[pol].write(out_dir, pol)
        from optsched.sim.plots import jct_cdf

        jct_cdf(results, out_dir / "jct_cdf.png")
        keys = ["jobs_completed", "avg_jct", "median_jct", "p99_jct", "makespan", "avg_responsiveness",
                "preemptions", "solver_seconds"]
        table = {p: {k: r.summary.get(k) for k in keys} for p, r in results.items()}
        out["compare"] = table
        if "lucid" in results and "lucid_ageing" in results:
            jobs = results["lucid"].jobs
            big = jobs["job_id"].isin(trace.jobs.loc[(trace.jobs["duration"] * trace.jobs["scale_factor"]).rank(pct=True) > 0.95, "job_id"])
            out["ageing_largest_5pct_avg_jct"] = {
                p: float(results[p].jobs.loc[big.to_numpy(), "jct"].mean()) for p in ("lucid", "lucid_ageing", "tiresias")
                if p in results}
        # loss-based termination: synthetic profiles as trace columns, the simulator's --loss-threshold
        from optsched.predict.convergence import synthetic_columns

        profiled = replace(trace, jobs=trace.jobs.assign(**synthetic_columns(len(trace.jobs), seed=1)))
        out["loss_termination"] = {"threshold": a.loss_threshold}
        for pol in ("fifo", "lucid"):
            if pol in results:
                r = run(profiled, a.cluster, pol, policy_options={"predictor": preds["ebm"]} if pol == "lucid" else {},
                        recompute_every=1 if pol in PER_ROUND else None, seed=0, loss_threshold=a.loss_threshold)
                out["loss_termination"]["work_fraction"] = r.summary["loss_work_fraction"]
                out["loss_termination"][pol] = {"avg_jct_full": results[pol].summary["avg_jct"],
                                                "avg_jct_terminated": r.summary["avg_jct"]}
    if not a.skip_pollux:
        lo, _, hi = a.pollux.partition("-")
        pol = {}
        for w in range(int(lo), int(hi or lo) + 1):
            r = run(DATA / "pollux" / "workloads" / f"workload-{w}.csv", None, "optimus", seed=0)
            pol[w] = r.summary["avg_jct"]
        out["optimus_pollux_avg_jct"] = {"per_workload": pol, "mean": float(np.mean(list(pol.values()))),
                                         "published": 5682.0}
    (out_dir / "seed_compare.json").write_text(json.dumps(out, indent=2, default=float) + "\n")
    print(json.dumps(out, indent=2, default=float))


if __name__ == "__main__":
    main()
