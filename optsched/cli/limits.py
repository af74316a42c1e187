"""Documented limits of the commands' numeric options, checked before any work
scales with them (docs/guide/simulate.md: "Options and their limits").

Every check raises OptschedError with a message that starts with the option's
name, so the command prints one line and exits 2. A number must be finite
(``inf``/``nan`` are refused), inside its documented range, and, for a
simulation, the run it asks for must fit in ``MAX_ROUNDS`` rounds: a lower
bound on the rounds (the longest job alone at its fastest rate, and all the
work spread over every GPU) is computed from the trace before the first round.

The simulation's limits are the simulator's own (optsched.sim.limits, which
``optsched.simulate`` and sweeps check too); this module re-exports them and
adds the other commands'.
"""

from __future__ import annotations

import math

from optsched.model import OptschedError

# Simulation (simulate, compare, sweep --set): the simulator's own limits, one copy.
from optsched.sim.limits import (  # noqa: E402,F401
    MAX_HYSTERESIS, MAX_LOAD_FACTOR, MAX_MIGRATION_COST, MAX_ROUND_LENGTH, MAX_ROUNDS, MAX_SECONDS,
    MIN_ELASTIC_ROUND_LENGTH, MIN_ROUND_LENGTH, SIM_FLAGS, check_rounds, check_seed, check_sim_options, number,
    rounds_lower_bound,
)
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


# --------------------------------------------------------------------------
# trace generate
# --------------------------------------------------------------------------


def max_generated_jobs() -> int:
    """The generator's own limit, read where used: the trace code needs pandas (the 'sim'
    extra), which serve, run's checks and bench's do not."""
    from optsched.traces.generate import MAX_GENERATED_JOBS

    return MAX_GENERATED_JOBS


def check_generate(jobs: int, rate: float, seed: int) -> None:
    number("--jobs", jobs, 1, max_generated_jobs(), unit="jobs")
    number("--rate", rate, 0.0, MAX_RATE, unit="jobs/h", lo_open=True)
    check_seed(seed)
    gaps = jobs - 1 + 10 * math.sqrt(max(jobs - 1, 0)) + 40  # the arrival span with a wide margin
    if gaps * 3600.0 / rate > MAX_SECONDS:
        raise OptschedError(f"--rate: {jobs:,} jobs at {rate:g}/h arrive over about {(jobs - 1) * 3600.0 / rate:,.3g} s, "
                            f"beyond the trace limit of {MAX_SECONDS:g} s (use a higher rate or fewer jobs)")


# --------------------------------------------------------------------------
# sweep
# --------------------------------------------------------------------------


def _floats(value) -> list:
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, (list, tuple)) else [value]
    out = []
    for v in items:
        try:
            out.append(float(v))
        except (TypeError, ValueError):
            pass  # the spec names a value that is not a number
    return out


def check_sweep(d: dict) -> None:
    """A sweep's numbers (flags and file alike), before the first trace is built."""
    for load in _floats(d.get("loads") or []):
        number("--loads", load, 0.0, MAX_RATE, lo_open=True)
    for seed in _floats(d.get("seeds") or []):
        if seed == int(seed):
            check_seed(int(seed), "--seeds")
    jobs = (d.get("trace_options") or {}).get("jobs") if isinstance(d.get("trace_options"), dict) else None
    if isinstance(jobs, (int, float)) and not isinstance(jobs, bool):
        number("--jobs", jobs, 1, max_generated_jobs(), unit="jobs")
    workers = d.get("workers")
    if isinstance(workers, (int, float)) and not isinstance(workers, bool):
        number("--workers", workers, 1, MAX_THREADS)
    auto = d.get("auto") if isinstance(d.get("auto"), dict) else {}
    number("--auto-every", _num_or_none(auto.get("every")), 1, MAX_ROUNDS, unit="rounds")
    number("--auto-horizon", _num_or_none(auto.get("horizon")), 0.0, MAX_SECONDS, unit="s")
    options = d.get("options")
    if isinstance(options, dict):
        from optsched.sweep.spec import _set_flag

        check_sim_options({k: _num_or_none(v) if k != "allocator_options" else v for k, v in options.items()},
                          flag=_set_flag)


def _num_or_none(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


# The rounds bound on a sweep's first trace: the sweep's own check (run_sweep validates with it too).
from optsched.sweep.spec import check_sweep_rounds  # noqa: E402,F401


# --------------------------------------------------------------------------
# serve, run, bench
# --------------------------------------------------------------------------


def check_serve(port: int, max_body_bytes: int, max_jobs: int, max_gpus: int, max_time_limit: float,
                sessions_cached: int, threads: int) -> None:
    from optsched.model import MAX_GPUS, MAX_JOBS

    if not 0 <= port <= 65535:  # (a port number is not written 65,535)
        raise OptschedError(f"--port: must be between 0 and 65535, got {port}")
    number("--max-body-bytes", max_body_bytes, 1, MAX_BODY_BYTES, unit="bytes")
    number("--max-jobs", max_jobs, 1, MAX_JOBS, unit="jobs")
    number("--max-gpus", max_gpus, 1, MAX_GPUS, unit="GPUs")
    number("--max-time-limit", max_time_limit, 0.0, MAX_RUN_SECONDS, unit="s", lo_open=True)
    number("--sessions-cached", sessions_cached, 1, MAX_SESSIONS_CACHED)
    number("--threads", threads, 1, MAX_THREADS)


def check_run_options(round_length: float, grace: float, step_scale: float, max_time: float | None, seed: int) -> None:
    number("--round-length", round_length, MIN_RUN_ROUND_LENGTH, MAX_RUN_SECONDS, unit="s")
    number("--grace", grace, 0.0, MAX_RUN_SECONDS, unit="s")
    number("--step-scale", step_scale, 0.0, MAX_STEP_SCALE, lo_open=True)
    number("--max-time", max_time, 0.0, MAX_RUN_SECONDS, unit="s", lo_open=True)
    check_seed(seed)


def check_bench(repeat: int, seed: int) -> None:
    number("--repeat", repeat, 1, MAX_REPEAT, unit="runs")
    check_seed(seed)


__all__ = ["max_generated_jobs", "MAX_ROUNDS", "check_bench", "check_generate", "check_rounds", "check_run_options",
           "check_seed", "check_serve", "check_sim_options", "check_sweep", "check_sweep_rounds", "number",
           "rounds_lower_bound"]
