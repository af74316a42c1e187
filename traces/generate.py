"""Trace generators (deterministic given a seed).

Gavel-style continuous arrivals (docs/guide/simulate.md, as Gavel's ``utils.generate_job``
and ``Scheduler.simulate`` do it): the first job arrives at t = 0, then
inter-arrival times are exponential with mean 3600/rate s; a job's duration on
the reference GPU (V100) is 60·10^U(1.5, 3) s with probability 0.8, else
60·10^U(3, 4) s; with ``multi_gpu`` the scale factor is 1/2/4/8 with probability
0.70/0.10/0.15/0.05 (else 1); the job type is uniform over the table's models,
redrawn for s > 1 until the model has a profile at s; total steps = duration ×
its reference throughput. With ``multi_priority`` 20 % of jobs get weight 5.

By default we use numpy's generator, not Gavel's ``random.Random`` streams, so
individual jobs differ from Gavel's; the distributions are the same.
``stream="gavel"`` draws Gavel's own jobs instead (``gavel_stream``: Python's
``random.Random`` seeded as Gavel's ``Scheduler`` seeds it, its draws in its
order), so a seed is the very trace Gavel's simulator runs for that seed: its
experiments are single samples of a long-tailed workload, and a 1,000-job
window's mean duration moves the average JCT by ±10 % between seeds.

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


MAX_GENERATED_JOBS = 1_000_000  # documented limit of a generated trace (docs/guide/simulate.md: options and their limits)
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
    stream: str = "numpy",
) -> Trace:
    if not 0 < n_jobs <= MAX_GENERATED_JOBS:  # before any array of n_jobs is drawn
        raise OptschedError(f"generate: n_jobs must be from 1 to {MAX_GENERATED_JOBS:,}, got {n_jobs}")
    if not (np.isfinite(jobs_per_hour) and jobs_per_hour > 0):
        raise OptschedError(f"generate: jobs_per_hour must be a positive finite number, got {jobs_per_hour}")
    if stream == "gavel":
        return gavel_stream(table, n_jobs, jobs_per_hour, seed, multi_gpu, multi_priority)
    if stream != "numpy":
        raise OptschedError(f"generate: stream must be 'numpy' or 'gavel', got {stream!r}")
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


# Gavel's job templates in its table's order (job_table.py), which its generator draws
# from uniformly by index; the first four families are the ones it runs on several GPUs.
GAVEL_TEMPLATES = (
    [f"ResNet-18 (batch size {b})" for b in (16, 32, 64, 128, 256)]
    + [f"ResNet-50 (batch size {b})" for b in (16, 32, 64, 128)]
    + [f"Transformer (batch size {b})" for b in (16, 32, 64, 128, 256)]
    + [f"LM (batch size {b})" for b in (5, 10, 20, 40, 80)]
    + [f"Recommendation (batch size {b})" for b in (512, 1024, 2048, 4096, 8192)]
    + ["A3C", "CycleGAN"])
GAVEL_DISTRIBUTED = 19  # templates [0, 19) may have a scale factor above 1


def gavel_stream(table: ThroughputTable, n_jobs: int, jobs_per_hour: float, seed: int = 0,
                 multi_gpu: bool = False, multi_priority: bool = False) -> Trace:
    """Gavel's own jobs for ``seed``: the generator's draws in its order from Python's
    ``random.Random`` (jobs from seed + 2, inter-arrival gaps from seed + 3, as its
    Scheduler seeds them). Per job: a scale factor uniform (drawn even for single-GPU
    streams, then 1), the duration (short/long, exponent), the template (redrawn until a
    multi-GPU job gets a distributed one), then the priority. Sequential, so prefix-stable."""
    import math
    import random

    jobs_rng, gaps_rng = random.Random(seed + 2), random.Random(seed + 3)
    scale, duration, chosen, weight, arrival = (np.ones(n_jobs, dtype=int), np.empty(n_jobs),
                                                np.empty(n_jobs, dtype=object), np.ones(n_jobs), np.empty(n_jobs))
    t = 0.0
    for i in range(n_jobs):
        r = jobs_rng.uniform(0, 1)
        s = 2 if 0.7 <= r <= 0.8 else 4 if 0.8 <= r <= 0.95 else 8 if r >= 0.95 else 1
        long = jobs_rng.random() >= 0.8
        duration[i] = 60 * 10 ** (jobs_rng.uniform(3, 4) if long else jobs_rng.uniform(1.5, 3))
        s = s if multi_gpu else 1
        while True:
            k = jobs_rng.choice(range(len(GAVEL_TEMPLATES)))  # random.choice over the templates, by index
            if s == 1 or k < GAVEL_DISTRIBUTED:
                break
        scale[i], chosen[i] = s, GAVEL_TEMPLATES[k]
        if multi_priority and jobs_rng.uniform(0, 1) <= 0.2:
            weight[i] = 5.0
        arrival[i] = t
        t += -math.log(1.0 - gaps_rng.random()) * 3600.0 / jobs_per_hour
    rate, reference = reference_rates(table, chosen, scale, "v100")
    return make_trace(
        {"job_id": [str(i) for i in range(n_jobs)], "arrival_time": arrival, "model": chosen,
         "scale_factor": scale, "steps_total": duration * rate, "duration": duration, "weight": weight},
        "generated", f"gavel's own stream: {n_jobs} jobs at {jobs_per_hour:g}/h, seed {seed}",
        notes=(f"durations on {reference}",))


def default_trace(table: ThroughputTable | None = None) -> Trace:
    """The built-in example: 120 jobs at 8 jobs/h with multi-GPU jobs, on the
    project's own throughput table; it keeps a 36:36:36 cluster busy for a few
    simulated days and simulates in seconds."""
    from optsched.traces.throughputs import default_throughputs

    return generate_gavel(table or default_throughputs(), 120, 8.0, seed=0, multi_gpu=True)
