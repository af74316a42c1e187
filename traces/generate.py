"""Trace generators (deterministic given a seed).

Gavel-style continuous arrivals (README "Simulating a cluster", as Gavel's ``utils.generate_job``
and ``Scheduler.simulate`` do it): the first job arrives at t = 0, then
inter-arrival times are exponential with mean 3600/rate s; a job's duration on
the reference GPU (V100) is 60·10^U(1.5, 3) s with probability 0.8, else
60·10^U(3, 4) s; with ``multi_gpu`` the scale factor is 1/2/4/8 with probability
0.70/0.10/0.15/0.05 (else 1); the job type is uniform over the table's models,
redrawn for s > 1 until the model has a profile at s; total steps = duration ×
its reference throughput. With ``multi_priority`` 20 % of jobs get weight 5.

We use numpy's generator, not Gavel's ``random.Random`` streams, so individual
jobs differ from Gavel's; the distributions are the same.

The stream is length-independent: job i is the same whatever ``n_jobs`` is
(each attribute has its own substream of the seed, drawn one uniform per job in
job order), so a longer stream only appends jobs. Gavel keeps generating jobs
until its measurement window completes; a simulation of the first N jobs is
therefore exactly Gavel's experiment as long as arrivals continue past the time
the window completes (``bench/fidelity.py`` grows N until they do; the
simulator's summary flags ``arrivals_ended_before_window``).
"""

from __future__ import annotations

import numpy as np

from optsched.model import OptschedError
from optsched.traces.throughputs import ThroughputTable, reference_rates
from optsched.traces.trace import Trace, make_trace


MAX_GENERATED_JOBS = 1_000_000  # documented limit of a generated trace (README: options and their limits)
SCALE_FACTORS = (1, 2, 4, 8)
SCALE_PROBABILITIES = (0.70, 0.10, 0.15, 0.05)


def _streams(seed: int, k: int) -> list[np.random.Generator]:
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(k)]


def gavel_durations(rng: np.random.Generator, n: int) -> np.ndarray:
    """Durations of n jobs; prefix-stable (the first draws do not depend on n)."""
    u = rng.random((n, 2))  # row i: (short/long, exponent) of job i
    short = u[:, 0] < 0.8
    exponent = np.where(short, 1.5 + 1.5 * u[:, 1], 3.0 + u[:, 1])
    return 60.0 * 10.0**exponent


def generate_gavel(
    table: ThroughputTable,
    n_jobs: int,
    jobs_per_hour: float,
    seed: int = 0,
    multi_gpu: bool = False,
    multi_priority: bool = False,
    reference: str = "v100",
    models: tuple[str, ...] | None = None,
) -> Trace:
    if not 0 < n_jobs <= MAX_GENERATED_JOBS:  # before any array of n_jobs is drawn
        raise OptschedError(f"generate: n_jobs must be from 1 to {MAX_GENERATED_JOBS:,}, got {n_jobs}")
    if not (np.isfinite(jobs_per_hour) and jobs_per_hour > 0):
        raise OptschedError(f"generate: jobs_per_hour must be a positive finite number, got {jobs_per_hour}")
    # One substream per attribute, one uniform (row) per job: job i's draws do
    # not depend on n_jobs (a longer stream extends a shorter one).
    r_gap, r_dur, r_scale, r_model, r_weight = _streams(seed, 5)
    models = tuple(models or table.models)
    gaps = -(3600.0 / jobs_per_hour) * np.log1p(-r_gap.random(n_jobs))
    arrival = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    duration = gavel_durations(r_dur, n_jobs)
    u_scale = r_scale.random(n_jobs)
    if multi_gpu:
        cum = np.cumsum(SCALE_PROBABILITIES)
        scale = np.asarray(SCALE_FACTORS)[np.minimum(np.searchsorted(cum, u_scale, side="right"), len(cum) - 1)]
    else:
        scale = np.ones(n_jobs, dtype=int)
    u_model = r_model.random(n_jobs)
    chosen = np.empty(n_jobs, dtype=object)
    for s in np.unique(scale):
        fits = [m for m in models if (m, int(s)) in table.alone]
        if not fits:
            raise OptschedError(f"generate: no model in the throughput table has a profile at scale factor {s}")
        idx = np.flatnonzero(scale == s)
        chosen[idx] = np.array(fits, dtype=object)[np.minimum((u_model[idx] * len(fits)).astype(int), len(fits) - 1)]
    rate, reference = reference_rates(table, chosen, scale, reference)
    weight = np.where(r_weight.random(n_jobs) < 0.2, 5.0, 1.0) if multi_priority else np.ones(n_jobs)
    return make_trace(
        {
            "job_id": [str(i) for i in range(n_jobs)],
            "arrival_time": arrival,
            "model": chosen,
            "scale_factor": scale,
            "steps_total": duration * rate,
            "duration": duration,
            "weight": weight,
        },
        "generated",
        f"gavel-style: {n_jobs} jobs at {jobs_per_hour:g}/h, seed {seed}",
        notes=(f"durations on {reference}",),
    )


def default_trace(table: ThroughputTable | None = None) -> Trace:
    """The built-in example: 120 jobs at 8 jobs/h with multi-GPU jobs, on the
    project's own throughput table; it keeps a 36:36:36 cluster busy for a few
    simulated days and simulates in seconds."""
    from optsched.traces.throughputs import default_throughputs

    return generate_gavel(table or default_throughputs(), 120, 8.0, seed=0, multi_gpu=True)
