"""Documented limits of a simulation's options (docs/guide/simulate.md:
"Options and their limits"), checked by the simulator itself before the first
round, so the Python API (``optsched.simulate``), sweeps and the CLI refuse the
same values with the same one-line OptschedError naming the option.
``optsched.cli.limits`` re-exports these and adds the other commands' limits.

A number must be finite (``inf``/``nan`` are refused) and inside its documented
range, and the run a configuration asks for must fit in ``MAX_ROUNDS`` rounds:
a lower bound on the rounds (the longest rigid job alone at its fastest rate,
and all the rigid work spread over every GPU) is computed before the first round.
Options are named by their CLI flags (``--round-length``), as every simulator
message is; ``optsched.simulate`` (the Python API) renames them to its keywords
(``keyword_names``).
"""

from __future__ import annotations

import functools
import math

from optsched.checks import MAX_SECONDS, MIN_ROUND_LENGTH, check_number  # noqa: F401  (re-exported)
from optsched.model import OptschedError

MAX_ROUND_LENGTH = 1e7  # seconds (~116 days)
MIN_ELASTIC_ROUND_LENGTH = 1.0  # seconds: every round of elastic jobs refits goodput models
MAX_ROUNDS = 100_000  # rounds one run may take (lower bound checked up front; ~0.3-1 ms a round)
MAX_LOAD_FACTOR = 1e6
MAX_HYSTERESIS = 1e6  # rounds
MAX_MIGRATION_COST = 1e7  # seconds

# number(option, value, lo, hi, ...): check_number where None (the option not given) passes.
number = functools.partial(check_number, none=True)


def check_seed(value: int | None, option: str = "--seed") -> None:
    """Seeds feed numpy's SeedSequence (no negatives) and land in int64 table columns (sweep's
    results.parquet): an integer in [0, 2^63)."""
    if value is not None and not 0 <= value < 2**63:
        raise OptschedError(f"{option}: must be an integer from 0 to 2^63 - 1, got {value}")


SIM_FLAGS = {"round_length": "--round-length", "restart_overhead": "--restart-overhead",
             "min_recompute_interval": "--min-recompute-interval", "recompute_every": "--recompute-every",
             "load_factor": "--load-factor", "migration_cost": "--migration-cost", "hysteresis": "--hysteresis",
             "seed": "--seed"}


# The Python API's names for the flags its messages would name (optsched.simulate).
_API_NAMES = {"cluster": "cluster", "servers": "cluster", "prices": "cluster prices", "set": "option",
              "policy-option": "policy_options"}
_ALLOCATOR_FLAGS = ("queue", "type-order", "migration-cost", "hysteresis")


def keyword_names(message: str, style=None) -> str:
    """A simulator message with each CLI flag replaced by the Python API's keyword:
    ``--round-length`` → ``round_length``, ``--queue`` → ``allocator_options['queue']``,
    ``--servers`` → ``cluster``; ``style(keyword)`` restyles each (a sweep's ``--set round_length``)."""
    import re

    def name(m: re.Match) -> str:
        flag = m.group(1)
        if flag in _ALLOCATOR_FLAGS:
            key = f"allocator_options[{flag.replace('-', '_')!r}]"
        else:
            key = _API_NAMES.get(flag, flag.replace("-", "_"))
        return style(key) if style is not None else key

    from optsched.traces.io import FORMAT_HINT

    message = message.replace(FORMAT_HINT, "pass optsched.traces.io.read_trace(path, format=...) as the trace")
    return re.sub(r"(?<![\w-])--([a-z][a-z-]*[a-z])", name, message)


def default_round_length(elastic: bool) -> float:
    """The round length when none is given: Pollux's and Sia's 60 s with elastic jobs, else Gavel's 360 s."""
    return 60.0 if elastic else 360.0


def check_sim_options(cfg: dict, elastic: bool = False, flag=SIM_FLAGS.get) -> None:
    """The static limits of a simulation's options (cfg: SimConfig's keywords;
    sweep's ``--set`` uses the same names, and ``flag`` names them in messages)."""
    rl = cfg.get("round_length")
    if rl is not None:
        number(flag("round_length"), rl, MIN_ROUND_LENGTH, MAX_ROUND_LENGTH, unit="s")
    if elastic and rl is not None and rl < MIN_ELASTIC_ROUND_LENGTH:
        raise OptschedError(f"{flag('round_length')}: must be >= {MIN_ELASTIC_ROUND_LENGTH:g} s for elastic jobs "
                            f"(every round refits their goodput models), got {rl:g}")
    round_length = rl if rl is not None else default_round_length(elastic)
    ro = cfg.get("restart_overhead")
    if not isinstance(ro, str):
        number(flag("restart_overhead"), ro, 0.0, unit="s")
        if ro is not None and ro >= round_length:
            raise OptschedError(f"{flag('restart_overhead')}: must be shorter than a round ({round_length:g} s), got "
                                f"{ro:g} (a job restarted every round would never progress)")
    number(flag("min_recompute_interval"), cfg.get("min_recompute_interval"), 0.0, MAX_SECONDS, unit="s")
    number(flag("recompute_every"), cfg.get("recompute_every"), 1, MAX_ROUNDS, unit="rounds")
    number(flag("load_factor"), cfg.get("load_factor"), 0.0, MAX_LOAD_FACTOR, lo_open=True)
    seed = cfg.get("seed")
    if seed is not None and not isinstance(seed, bool) and isinstance(seed, int):
        check_seed(seed, flag("seed"))
    ao = cfg.get("allocator_options") or {}
    if isinstance(ao, dict):
        number(flag("migration_cost"), ao.get("migration_cost"), 0.0, MAX_MIGRATION_COST, unit="s")
        number(flag("hysteresis"), ao.get("hysteresis"), 0.0, MAX_HYSTERESIS, unit="rounds")


def jobs_rounds_bound(jobs, total_gpus: float, round_length: float, rows=None) -> tuple[float, str]:
    """A lower bound on the rounds the rigid jobs of resolved ``jobs`` (optsched.sim.jobs.JobArrays)
    take on ``total_gpus`` GPUs, and what sets it: the longest job alone at its fastest rate, or all
    the work (GPU-seconds at each job's fastest rate) spread over every GPU. ``rows``: only these jobs
    count (a window). Elastic jobs (no length) do not count."""
    import numpy as np

    keep = np.zeros(jobs.n, dtype=bool)
    keep[np.arange(jobs.n) if rows is None else rows] = True
    if jobs.is_elastic is not None:
        keep &= ~jobs.is_elastic
    if not keep.any():
        return 0.0, ""
    fastest = jobs.throughput[keep].max(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        alone = np.where(fastest > 0, jobs.steps_total[keep] / fastest, 0.0)
    alone = np.nan_to_num(alone, nan=0.0, posinf=MAX_SECONDS, neginf=0.0)
    longest = int(np.argmax(alone))
    work = float((alone * jobs.scale_factor[keep]).sum()) / float(total_gpus)
    by_job, by_work = float(alone[longest]) / round_length, work / round_length
    if by_job >= by_work:
        job_id = np.asarray(jobs.job_ids, dtype=object)[keep][longest]
        return by_job, f"job {job_id!r} alone runs {alone[longest]:,.0f} s"
    return by_work, f"the trace's work fills every GPU for {work:,.0f} s"


def _refuse_rounds(rounds: float, why: str, round_length: float, flag) -> None:
    if rounds > MAX_ROUNDS:
        raise OptschedError(f"{flag('round_length')}: rounds of {round_length:g} s need at least {rounds:,.3g} rounds "
                            f"({why}); a run is limited to {MAX_ROUNDS:,} rounds (use longer rounds)")


def rounds_lower_bound(trace, cluster, table, seed: int, round_length: float) -> tuple[float, str]:
    """``jobs_rounds_bound`` of a trace's rigid jobs, before the simulation resolves them."""
    from dataclasses import replace

    from optsched.sim.jobs import elastic_rows, resolve_jobs

    rigid = ~elastic_rows(trace)
    if not rigid.any():
        return 0.0, ""
    sub = trace if rigid.all() else replace(trace, jobs=trace.jobs[rigid].reset_index(drop=True))
    try:
        jobs = resolve_jobs(sub, cluster, table, seed=seed, skip_unrunnable=True)
    except OptschedError:
        return 0.0, ""  # the run itself reports the trace's problem, naming it
    if jobs.n == 0:
        return 0.0, ""
    return jobs_rounds_bound(jobs, sum(cluster.gpus.values()), round_length)


def check_rounds(trace, cluster, table, cfg: dict, flag=SIM_FLAGS.get) -> None:
    """Refuse, before the first round, a run of ``trace`` that needs more than MAX_ROUNDS rounds."""
    from optsched.sim.jobs import elastic_rows

    round_length = cfg.get("round_length") or default_round_length(bool(elastic_rows(trace).any()))
    rounds, why = rounds_lower_bound(trace, cluster, table, int(cfg.get("seed") or 0), round_length)
    _refuse_rounds(rounds, why, round_length, flag)


def check_job_rounds(jobs, cluster, config, flag=SIM_FLAGS.get) -> None:
    """The simulator's own check on resolved jobs and a SimConfig: the rounds bound of the jobs the
    run waits for (its window's, if any), no more than ``max_time`` allows."""
    import numpy as np

    round_length = config.resolved_round_length(jobs.any_elastic)
    rows = None
    if config.window is not None:
        rows = np.arange(max(config.window[0], 0), min(config.window[1], jobs.n))
    rounds, why = jobs_rounds_bound(jobs, sum(cluster.gpus.values()), round_length, rows)
    mt = config.max_time
    if mt is not None and jobs.n and math.isfinite(mt):  # idle stretches are skipped: at most this many rounds
        rounds = min(rounds, max(mt - float(jobs.arrival[0]), 0.0) / round_length)
    _refuse_rounds(rounds, why, round_length, flag)


__all__ = ["MAX_ROUNDS", "MIN_ROUND_LENGTH", "SIM_FLAGS", "check_job_rounds", "check_rounds", "check_seed",
           "check_sim_options", "default_round_length", "jobs_rounds_bound", "number", "rounds_lower_bound"]
