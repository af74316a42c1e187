"""Goodput models for GPU types a job has not run on (Sia's idea, docs/architecture.md §7).

What we chose: a job measured on type s but not on type t gets type t's
parameters by scaling every time term of its type-s model (α_c … β_r) by
1/f, f = speed on t / speed on s (γ, the overlap, is kept). f comes from, in
order of preference:

1. the job's own throughput ratio T[m, t] / T[m, s] (Job.throughput: Sia profiles
   every new job for one GPU on each type — a few seconds — before it scales);
2. the ratio learned across jobs: the geometric mean over every job measured on
   both types of (predicted 1-GPU throughput at its M0 on t) / (same on s);
3. otherwise the job cannot use type t (no model, no throughput).

The source type s is the measured type with the most observations' worth of
trust we have: here simply the one with the highest predicted 1-GPU throughput.
Pure numpy.
"""

from __future__ import annotations

import numpy as np

from optsched.goodput.model import iteration_time

MEASURED, OWN_RATIO, CROSS_JOB, NONE = 0, 1, 2, 3


def single_gpu_speed(params: np.ndarray, micro_batch: np.ndarray) -> np.ndarray:
    """Samples/s of one GPU at the given micro-batch; params (..., 7)."""
    b = np.asarray(micro_batch, dtype=float)
    return b / iteration_time(params, 1, 1, b, 0)


def cross_job_factors(params: np.ndarray, micro_batch: np.ndarray) -> np.ndarray:
    """F[t, s] = geometric mean over jobs measured on both of speed_t / speed_s (nan if none)."""
    n, k, _ = params.shape
    with np.errstate(invalid="ignore", divide="ignore"):
        speed = single_gpu_speed(params, micro_batch[:, None])  # (n, k), nan where unmeasured
        logs = np.log(speed)
    F = np.full((k, k), np.nan)
    for t in range(k):  # k is the number of GPU types (a handful), not jobs
        d = logs[:, t][:, None] - logs  # (n, k)
        ok = np.isfinite(d)
        cnt = ok.sum(axis=0)
        F[t] = np.where(cnt > 0, np.exp(np.where(ok, d, 0).sum(axis=0) / np.maximum(cnt, 1)), np.nan)
    return F


def fill_params(params: np.ndarray, throughput: np.ndarray, micro_batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """params (n, k, 7) with nan rows for unmeasured types → (filled params, source (n, k))."""
    params = np.array(params, dtype=float)
    n, k, _ = params.shape
    measured = np.isfinite(params).all(axis=2)
    source = np.where(measured, MEASURED, NONE)
    if measured.all() or not measured.any():
        return params, source
    with np.errstate(invalid="ignore", divide="ignore"):
        speed = np.where(measured, single_gpu_speed(params, micro_batch[:, None]), -np.inf)
    ref = np.argmax(speed, axis=1)  # (n,) reference measured type per job
    has_ref = measured.any(axis=1)
    ref_params = params[np.arange(n), ref]  # (n, 7)
    T_ref = throughput[np.arange(n), ref]
    with np.errstate(invalid="ignore", divide="ignore"):
        own = throughput / T_ref[:, None]  # (n, k)
    F = cross_job_factors(params, micro_batch)  # (k, k)
    cross = F[:, ref].T  # (n, k): F[t, ref_m]
    use_own = ~measured & has_ref[:, None] & (throughput > 0) & (T_ref[:, None] > 0) & np.isfinite(own)
    use_cross = ~measured & has_ref[:, None] & ~use_own & np.isfinite(cross) & (cross > 0)
    factor = np.where(use_own, own, np.where(use_cross, cross, np.nan))
    scaled = ref_params[:, None, :].repeat(k, axis=1)
    scaled[..., :6] = scaled[..., :6] / factor[..., None]
    fill = use_own | use_cross
    params[fill] = scaled[fill]
    source = np.where(use_own, OWN_RATIO, np.where(use_cross, CROSS_JOB, source))
    return params, source
