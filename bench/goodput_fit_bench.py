"""JAX refit time per round: 1,000 jobs, each with its own observations
(5–60 rows: buckets 16 and 64), fitted with the jitted BFGS; compared with the
scipy least_squares reference on a sample (extrapolated), in one run.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/goodput_fit_bench.py [--jobs 1000]

The peers refit with autograd + L-BFGS-B at 0.2–17 s per fit (DESIGN §8).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from optsched.goodput.fit import Observations, bucket_size, fit_many, fit_params, fit_reference
from optsched.goodput.model import accum_time, iteration_time

CONFIGS = np.array([(1, 1), (1, 2), (1, 4), (2, 8), (4, 16), (1, 3), (2, 6), (3, 12)], dtype=float)


def job_observations(rng: np.random.Generator) -> Observations:
    true = np.array([rng.uniform(0.01, 0.1), rng.uniform(1e-4, 2e-3), rng.uniform(0.05, 0.4), rng.uniform(1e-3, 0.02),
                     rng.uniform(0.01, 0.1), rng.uniform(1e-4, 5e-3), rng.uniform(1.0, 3.0)])
    rows = int(rng.integers(5, 61))
    cfg = CONFIGS[rng.integers(0, len(CONFIGS), rows)]
    b = rng.choice([8, 16, 32, 64, 128, 256], rows).astype(float)
    noise = np.exp(rng.normal(0, 0.03, (2, rows)))
    t_acc = accum_time(true, b) * noise[0]
    step = np.maximum(iteration_time(true, cfg[:, 0], cfg[:, 1], b, 0) * noise[1], t_acc * 1.001)
    return Observations(cfg[:, 0], cfg[:, 1], b, t_acc, step)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--reference-sample", type=int, default=50)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    obs = [job_observations(rng) for _ in range(a.jobs)]
    buckets = sorted({bucket_size(len(o)) for o in obs})
    t0 = time.perf_counter()
    for size in buckets:  # compile once per bucket shape
        fit_params(next(o for o in obs if bucket_size(len(o)) == size))
    compile_s = time.perf_counter() - t0
    rounds = []
    for _ in range(3):
        t0 = time.perf_counter()
        fit_many(obs)
        rounds.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for o in obs[: a.reference_sample]:
        fit_reference(o)
    ref = (time.perf_counter() - t0) / a.reference_sample
    table = Table(title=f"goodput refit, {a.jobs} jobs per round", header_style="bold")
    for c in ("path", "per round s", "per fit ms"):
        table.add_column(c, justify="right")
    table.add_row(f"JAX BFGS (jitted, buckets {buckets}; compile {compile_s:.1f} s once)",
                  f"{np.median(rounds):.2f}", f"{np.median(rounds) / a.jobs * 1e3:.2f}")
    table.add_row(f"scipy least_squares reference (sample of {a.reference_sample})", f"{ref * a.jobs:.2f}", f"{ref * 1e3:.2f}")
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
