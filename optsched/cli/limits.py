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
MAX_ROUNDS = 100_000  # rounds one run may take (lower bound checked up front; ~0.3-1 ms a round)
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
        bound = "positive" if lo_open and lo == 0 else f"{'>' if lo_open else '>='} {_g(lo)}{u}"
        raise OptschedError(f"{option}: must be {bound}, got {_g(value)}")
    if hi is not None and (value >= hi if hi_open else value > hi):
        raise OptschedError(f"{option}: must be {'<' if hi_open else '<='} {_g(hi)}{u}, got {_g(value)}")
    return value


def check_seed(value: int | None, option: str = "--seed") -> None:
    """Seeds feed numpy's SeedSequence (no negatives) and land in int64 table columns (sweep's
    results.parquet): an integer in [0, 2^63)."""
    if value is not None and not 0 <= value < 2**63:
        raise OptschedError(f"{option}: must be an integer from 0 to 2^63 - 1, got {value}")


# --------------------------------------------------------------------------
# simulate / compare / sweep
# --------------------------------------------------------------------------


SIM_FLAGS = {"round_length": "--round-length", "restart_overhead": "--restart-overhead",
             "min_recompute_interval": "--min-recompute-interval", "recompute_every": "--recompute-every",
             "load_factor": "--load-factor", "migration_cost": "--migration-cost", "hysteresis": "--hysteresis"}


def check_sim_options(cfg: dict, elastic: bool = False, flag=SIM_FLAGS.get) -> None:
    """The static limits of a simulation's options (cfg: the keywords of SimConfig
    as the CLI builds them; sweep's ``--set`` uses the same names, and ``flag``
    names them in messages)."""
    rl = cfg.get("round_length")
    if rl is not None:
        number(flag("round_length"), rl, MIN_ROUND_LENGTH, MAX_ROUND_LENGTH, unit="s")
    if elastic and rl is not None and rl < MIN_ELASTIC_ROUND_LENGTH:
        raise OptschedError(f"{flag('round_length')}: must be >= {MIN_ELASTIC_ROUND_LENGTH:g} s for elastic jobs "
                            f"(every round refits their goodput models), got {rl:g}")
    round_length = rl if rl is not None else (60.0 if elastic else 360.0)
    ro = cfg.get("restart_overhead")
    if not isinstance(ro, str):
        number(flag("restart_overhead"), ro, 0.0, unit="s")
        if ro is not None and ro >= round_length:
            raise OptschedError(f"{flag('restart_overhead')}: must be shorter than a round ({round_length:g} s), got "
                                f"{ro:g} (a job restarted every round would never progress)")
    number(flag("min_recompute_interval"), cfg.get("min_recompute_interval"), 0.0, MAX_SECONDS, unit="s")
    number(flag("recompute_every"), cfg.get("recompute_every"), 1, MAX_ROUNDS, unit="rounds")
    number(flag("load_factor"), cfg.get("load_factor"), 0.0, MAX_LOAD_FACTOR, lo_open=True)
    ao = cfg.get("allocator_options") or {}
    if isinstance(ao, dict):
        number(flag("migration_cost"), ao.get("migration_cost"), 0.0, MAX_MIGRATION_COST, unit="s")
        number(flag("hysteresis"), ao.get("hysteresis"), 0.0, MAX_HYSTERESIS, unit="rounds")


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


def check_rounds(trace, cluster, table, cfg: dict, flag=SIM_FLAGS.get) -> None:
    """Refuse, before the first round, a run that needs more than MAX_ROUNDS rounds."""
    from optsched.sim.jobs import elastic_rows

    elastic = bool(elastic_rows(trace).any())
    round_length = cfg.get("round_length") or (60.0 if elastic else 360.0)
    rounds, why = rounds_lower_bound(trace, cluster, table, int(cfg.get("seed") or 0), round_length)
    if rounds > MAX_ROUNDS:
        raise OptschedError(f"{flag('round_length')}: rounds of {round_length:g} s need at least {rounds:,.3g} rounds "
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
        number("--jobs", jobs, 1, MAX_GENERATED_JOBS, unit="jobs")
    workers = d.get("workers")
    if isinstance(workers, (int, float)) and not isinstance(workers, bool):
        number("--workers", workers, 1, MAX_THREADS)
    auto = d.get("auto") if isinstance(d.get("auto"), dict) else {}
    number("--auto-every", _num_or_none(auto.get("every")), 1, MAX_ROUNDS, unit="rounds")
    number("--auto-horizon", _num_or_none(auto.get("horizon")), 0.0, MAX_SECONDS, unit="s")
    options = d.get("options")
    if isinstance(options, dict):
        check_sim_options({k: _num_or_none(v) if k != "allocator_options" else v for k, v in options.items()},
                          flag=lambda k: f"--set {k}")


def _num_or_none(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def check_sweep_rounds(spec) -> None:
    """The rounds bound on the sweep's first trace, for every cluster shape (job lengths do not depend on the load)."""
    from optsched.sim import DEFAULT_CLUSTER, DEFAULT_ELASTIC_SERVERS
    from optsched.sim.jobs import elastic_rows, parse_cluster
    from optsched.sweep.traces import build_cluster, build_trace, throughput_table

    trace = build_trace(spec.trace, spec.trace_options, spec.loads[0], spec.seeds[0])
    table = throughput_table(spec.trace_options, spec.options)
    for c in spec.clusters:
        cluster = build_cluster(c) or (parse_cluster(None, DEFAULT_ELASTIC_SERVERS) if elastic_rows(trace).all()
                                       else parse_cluster(DEFAULT_CLUSTER))
        check_rounds(trace, cluster, table, {**spec.options, "seed": spec.seeds[0]}, flag=lambda k: f"--set {k}")


# --------------------------------------------------------------------------
# serve, run, bench
# --------------------------------------------------------------------------


def check_serve(port: int, max_body_bytes: int, max_jobs: int, max_gpus: int, max_time_limit: float,
                sessions_cached: int, threads: int) -> None:
    from optsched.model import MAX_GPUS, MAX_JOBS

    number("--port", port, 0, 65535)
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


__all__ = ["MAX_GENERATED_JOBS", "MAX_ROUNDS", "check_bench", "check_generate", "check_rounds", "check_run_options",
           "check_seed", "check_serve", "check_sim_options", "check_sweep", "check_sweep_rounds", "number",
           "rounds_lower_bound"]
