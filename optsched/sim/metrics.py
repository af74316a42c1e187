"""What papers report about a simulated run, from per-job and per-round tables.

- JCT = completion − arrival (seconds): average, median, p95, p99, over all
  completed jobs and over the steady-state ``window`` of job indices (Gavel
  reports jobs 4000–4999 of its continuous stream; Blox 3000–3999).
- makespan = last completion − first arrival.
- responsiveness = first start − arrival.
- finish-time fairness ρ = JCT / t_isolated, t_isolated = total steps / the
  throughput the job gets from an equal share of every GPU type (Gavel's
  "proportional share", X^equal[m, j] = W_j / Σ W); ρ > 1 means slower than
  that fair, uncontended share.
- GPU-hours = Σ GPU-seconds received / 3600 (a packed pair's GPU time counts for
  both jobs: it is each job's attained service); preemptions, migrations; solver
  seconds (total, per recomputation); utilization per GPU type over time
  (busy GPU-seconds / (GPUs × round duration)).
Failed jobs (the trace says so) are excluded from the JCT statistics and
counted separately; jobs dropped before the run (unrunnable, with
``skip_unrunnable``) are counted in ``skipped_jobs``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from optsched.sim.jobs import JobArrays


def jobs_frame(jobs: JobArrays, st) -> pd.DataFrame:
    """One row per job, the same columns for rigid and elastic jobs. Elastic
    jobs count work in statistical progress (M0-steps) and report their
    epochs; rigid jobs count steps (epochs empty)."""
    elastic = jobs.is_elastic if jobs.is_elastic is not None else np.zeros(jobs.n, dtype=bool)
    epochs = np.full(jobs.n, np.nan)
    for m, g in st.goodput.items():
        epochs[m] = g.epoch
    df = pd.DataFrame(
        {
            "job_id": list(jobs.job_ids),
            "model": jobs.models.astype(str),
            "kind": np.where(elastic, "elastic", "rigid"),
            "scale_factor": jobs.scale_factor.astype(int),
            "weight": jobs.weight,
            "arrival_time": jobs.arrival,
            "first_start": st.first_start,
            "completion_time": st.completion,
            "steps_total": jobs.steps_total,
            "steps_done": st.steps_done,
            "gpu_seconds": st.gpu_seconds,
            "preemptions": st.preemptions,
            "migrations": st.migrations,
            "restarts": st.restarts,
            "epochs": epochs,
            "failed": jobs.failed,
            "row": jobs.rows,
        }
    )
    df["jct"] = df["completion_time"] - df["arrival_time"]
    df["responsiveness"] = df["first_start"] - df["arrival_time"]
    return df


def add_fairness(df: pd.DataFrame, jobs: JobArrays, capacity: np.ndarray) -> pd.DataFrame:
    thr_equal = jobs.throughput @ capacity / capacity.sum()
    df["isolated_time"] = jobs.steps_total / np.maximum(thr_equal, 1e-300)
    if jobs.any_elastic:  # no isolated run time for jobs under a goodput model
        df.loc[jobs.is_elastic, "isolated_time"] = np.nan
    df["ftf_rho"] = df["jct"] / df["isolated_time"]
    return df


def rounds_frame(rounds: list[tuple], gpu_types, columns) -> pd.DataFrame:
    cols = list(columns) + [f"util_{t}" for t in gpu_types]
    return pd.DataFrame(rounds, columns=cols)


def _stats(x: np.ndarray, prefix: str) -> dict:
    if x.size == 0:
        return {f"{prefix}avg_jct": None, f"{prefix}median_jct": None, f"{prefix}p95_jct": None, f"{prefix}p99_jct": None}
    return {
        f"{prefix}avg_jct": float(x.mean()),
        f"{prefix}median_jct": float(np.median(x)),
        f"{prefix}p95_jct": float(np.percentile(x, 95)),
        f"{prefix}p99_jct": float(np.percentile(x, 99)),
    }


def summarize(df: pd.DataFrame, rounds: pd.DataFrame, info: dict, window=None, skipped: int = 0) -> dict:
    done = df["completion_time"].notna() & ~df["failed"]
    jct = df.loc[done, "jct"].to_numpy()
    out: dict = {
        "jobs": int(len(df)),
        "jobs_completed": int(done.sum()),
        "jobs_failed": int((df["completion_time"].notna() & df["failed"]).sum()),
        "jobs_unfinished": int(df["completion_time"].isna().sum()),
        "skipped_jobs": int(skipped),
        **_stats(jct, ""),
    }
    if window is not None:
        lo, hi = window
        sel = df.iloc[lo:hi]
        wdone = sel["completion_time"].notna() & ~sel["failed"]
        out.update({"window": [int(lo), int(min(hi, len(df)))], "window_completed": int(wdone.sum()),
                    **_stats(sel.loc[wdone, "jct"].to_numpy(), "window_")})
    first = float(df["arrival_time"].min()) if len(df) else 0.0
    last = float(df["completion_time"].max()) if done.any() or df["completion_time"].notna().any() else float("nan")
    resp = df["responsiveness"].dropna().to_numpy()
    rho = df.loc[done, "ftf_rho"].to_numpy() if "ftf_rho" in df else np.zeros(0)
    rho = rho[np.isfinite(rho)]  # elastic jobs have no isolated run time
    util_cols = [c for c in rounds.columns if c.startswith("util_")]
    w = rounds["duration"].to_numpy() if len(rounds) else np.zeros(0)
    out.update(
        {
            "makespan": last - first if np.isfinite(last) else None,
            "avg_responsiveness": float(resp.mean()) if resp.size else None,
            "ftf_rho_median": float(np.median(rho)) if rho.size else None,
            "ftf_rho_p95": float(np.percentile(rho, 95)) if rho.size else None,
            "ftf_rho_max": float(rho.max()) if rho.size else None,
            "gpu_hours": float(df["gpu_seconds"].sum() / 3600.0),
            "preemptions": int(df["preemptions"].sum()),
            "migrations": int(df["migrations"].sum()),
            "rounds": int(len(rounds)),
            "recomputations": int(info.get("recomputations", 0)),
            "solver_seconds": float(info.get("solver_seconds", 0.0)),
            "fit_seconds": float(info.get("fit_seconds", 0.0)),
            "solver_seconds_per_recomputation": float(info["solver_seconds"] / max(info.get("recomputations", 0), 1)),
            "wall_seconds": float(info.get("wall_seconds", 0.0)),
            "utilization": {c[5:]: float((rounds[c].to_numpy() * w).sum() / max(w.sum(), 1e-300)) for c in util_cols},
        }
    )
    return out
