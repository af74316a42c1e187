"""Documented limits of the commands' numeric options, checked before any work
scales with them (README: "Options and their limits").

Every check raises OptschedError with a message that starts with the option's
name, so the command prints one line and exits 2. A number must be finite
(``inf``/``nan`` are refused), inside its documented range, and, for a
simulation, the run it asks for must fit in ``MAX_ROUNDS`` rounds: a lower
bound on the rounds (the longest job alone at its fastest rate, and all the
work spread over every GPU) is computed from the trace before the first round.
"""

from __future__ import annotations

import math

from optsched.model import OptschedError

# Simulation (simulate, compare, sweep --set).
MIN_ROUND_LENGTH = 1e-3  # seconds
MAX_ROUND_LENGTH = 1e7  # seconds (~116 days)
MIN_ELASTIC_ROUND_LENGTH = 1.0  # seconds: every round of elastic jobs refits goodput models
MAX_ROUNDS = 1_000_000  # rounds one run may take (lower bound checked up front)
MAX_SECONDS = 1e10  # any other time option (the trace limit of arrival times and durations)
MAX_LOAD_FACTOR = 1e6
MAX_HYSTERESIS = 1e6  # rounds
MAX_MIGRATION_COST = 1e7  # seconds
# Traces (trace generate; the generator checks its own size too).
from optsched.traces.generate import MAX_GENERATED_JOBS  # noqa: E402
MAX_RATE = 1e7  # jobs per hour
# Real runs (run).
MIN_RUN_ROUND_LENGTH = 0.01  # seconds
MAX_RUN_SECONDS = 1e7
MAX_STEP_SCALE = 1e6
# Service (serve).
MAX_THREADS = 1024
MAX_SESSIONS_CACHED = 1_000_000
MAX_BODY_BYTES = 2**31
# Benchmarks (bench).
MAX_REPEAT = 1000


def _g(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def number(option: str, value, lo: float | None = None, hi: float | None = None, *, unit: str = "",
           lo_open: bool = False, hi_open: bool = False):
    """``value`` unchanged when it is a finite number in the range; else one-line OptschedError naming ``option``.
    ``None`` (the option not given) passes."""
    if value is None:
        return None
    u = f" {unit}" if unit else ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OptschedError(f"{option}: {value!r} is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise OptschedError(f"{option}: must be a finite number, got {value}")
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise OptschedError(f"{option}: must be {'>' if lo_open else '>='} {_g(lo)}{u}, got {_g(value)}")
    if hi is not None and (value >= hi if hi_open else value > hi):
        raise OptschedError(f"{option}: must be {'<' if hi_open else '<='} {_g(hi)}{u}, got {_g(value)}")
    return value


def check_seed(value: int | None, option: str = "--seed") -> None:
    """Seeds of the trace generators and samplers feed numpy's SeedSequence: an integer in [0, 2^128)."""
    if value is not None and not 0 <= value < 2**128:
        raise OptschedError(f"{option}: must be an integer from 0 to 2^128 - 1, got {value}")


# --------------------------------------------------------------------------
# simulate / compare / sweep
# --------------------------------------------------------------------------


def check_sim_options(cfg: dict, elastic: bool = False) -> None:
    """The static limits of a simulation's options (cfg: the keywords of SimConfig
    as the CLI builds them; sweep's ``--set`` uses the same names)."""
    rl = cfg.get("round_length")
    if rl is not None:
        number("--round-length", rl, MIN_ROUND_LENGTH, MAX_ROUND_LENGTH, unit="s")
    if elastic and rl is not None and rl < MIN_ELASTIC_ROUND_LENGTH:
        raise OptschedError(f"--round-length: must be >= {MIN_ELASTIC_ROUND_LENGTH:g} s for elastic jobs "
                            f"(every round refits their goodput models), got {rl:g}")
    round_length = rl if rl is not None else (60.0 if elastic else 360.0)
    ro = cfg.get("restart_overhead")
    if isinstance(ro, (int, float)) and not isinstance(ro, bool):
        number("--restart-overhead", ro, 0.0, unit="s")
        if ro >= round_length:
            raise OptschedError(f"--restart-overhead: must be shorter than a round ({round_length:g} s), got {ro:g} "
                                "(a job restarted every round would never progress)")
    number("--min-recompute-interval", cfg.get("min_recompute_interval"), 0.0, MAX_SECONDS, unit="s")
    number("--recompute-every", cfg.get("recompute_every"), 1, MAX_ROUNDS, unit="rounds")
    number("--load-factor", cfg.get("load_factor"), 0.0, MAX_LOAD_FACTOR, lo_open=True)
    ao = cfg.get("allocator_options") or {}
    number("--migration-cost", ao.get("migration_cost"), 0.0, MAX_MIGRATION_COST, unit="s")
    number("--hysteresis", ao.get("hysteresis"), 0.0, MAX_HYSTERESIS, unit="rounds")


def rounds_lower_bound(trace, cluster, table, seed: int, round_length: float) -> tuple[float, str]:
    """A lower bound on the rounds a simulation of the trace's rigid jobs takes,
    and what sets it: the longest job alone at its fastest rate, or all the work
    (GPU-seconds at each job's fastest rate) spread over every GPU. Elastic jobs
    (no length) do not count."""
    import numpy as np

    from optsched.sim.jobs import elastic_rows, resolve_jobs

    rigid = ~elastic_rows(trace)
    if not rigid.any():
        return 0.0, ""
    from dataclasses import replace

    sub = trace if rigid.all() else replace(trace, jobs=trace.jobs[rigid].reset_index(drop=True))
    try:
        jobs = resolve_jobs(sub, cluster, table, seed=seed, skip_unrunnable=True)
    except OptschedError:
        return 0.0, ""  # the run itself reports the trace's problem, naming it
    if jobs.n == 0:
        return 0.0, ""
    fastest = jobs.throughput.max(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        alone = np.where(fastest > 0, jobs.steps_total / fastest, 0.0)
    alone = np.nan_to_num(alone, nan=0.0, posinf=MAX_SECONDS, neginf=0.0)
    longest = int(np.argmax(alone))
    total_gpus = float(sum(cluster.gpus.values()))
    work = float((alone * jobs.scale_factor).sum()) / total_gpus
    by_job, by_work = float(alone[longest]) / round_length, work / round_length
    if by_job >= by_work:
        return by_job, f"job {jobs.job_ids[longest]!r} alone runs {alone[longest]:,.0f} s"
    return by_work, f"the trace's work fills every GPU for {work:,.0f} s"


def check_rounds(trace, cluster, table, cfg: dict) -> None:
    """Refuse, before the first round, a run that needs more than MAX_ROUNDS rounds."""
    from optsched.sim.jobs import elastic_rows

    elastic = bool(elastic_rows(trace).any())
    round_length = cfg.get("round_length") or (60.0 if elastic else 360.0)
    rounds, why = rounds_lower_bound(trace, cluster, table, int(cfg.get("seed") or 0), round_length)
    if rounds > MAX_ROUNDS:
        raise OptschedError(f"--round-length: rounds of {round_length:g} s need at least {rounds:,.3g} rounds "
                            f"({why}); a run is limited to {MAX_ROUNDS:,} rounds (use longer rounds)")


# --------------------------------------------------------------------------
# trace generate
# --------------------------------------------------------------------------


def check_generate(jobs: int, rate: float, seed: int) -> None:
    number("--jobs", jobs, 1, MAX_GENERATED_JOBS, unit="jobs")
    number("--rate", rate, 0.0, MAX_RATE, unit="jobs/h", lo_open=True)
    check_seed(seed)
    gaps = jobs - 1 + 10 * math.sqrt(max(jobs - 1, 0)) + 40  # the arrival span with a wide margin
    if gaps * 3600.0 / rate > MAX_SECONDS:
        raise OptschedError(f"--rate: {jobs:,} jobs at {rate:g}/h arrive over about {(jobs - 1) * 3600.0 / rate:,.3g} s, "
                            f"beyond the trace limit of {MAX_SECONDS:g} s (use a higher rate or fewer jobs)")


__all__ = ["MAX_GENERATED_JOBS", "MAX_ROUNDS", "check_generate", "check_rounds", "check_seed",
           "check_sim_options", "number", "rounds_lower_bound"]
