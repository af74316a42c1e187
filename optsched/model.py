"""Core types: the snapshot contract (pydantic, validated at the edge) and the
numpy view of it that formulations work on.

Nothing here imports cvxpy, jax or ortools: this is the bottom of the import
graph (docs/architecture.md §2).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import math
import re
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import attrgetter
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import SchemaValidator

SNAPSHOT_VERSION = 1

# Documented size limits (docs/guide/solve.md, "The snapshot"): checked while validating, before
# any work scales with them (servers synthesized per GPU, matrices jobs x types).
MAX_GPUS = 100_000  # GPUs in a cluster, all types together (so also per type and per server)
MAX_GPU_TYPES = 64  # GPU types in a cluster
MAX_JOBS = 100_000  # jobs in a snapshot
MAX_SERVERS = MAX_GPUS  # a server has at least one GPU
# Value ranges (docs/guide/solve.md, "The snapshot"): beyond them products and ratios of the
# programs' coefficients overflow or lose every digit (a throughput of 1e308
# made max-min report 3e-11 as "optimal"; 1e-300 made water filling run for
# thousands of rounds).
MIN_THROUGHPUT, MAX_THROUGHPUT = 1e-12, 1e15  # steps/s; 0 = cannot run there
# $/GPU-hour: 0 (free) or in this range; outside it the cost-aware programs lose every other
# term to rounding (1e-300 made every round's solve fail).
MIN_PRICE, MAX_PRICE = 1e-6, 1e6
MIN_WEIGHT, MAX_WEIGHT = 1e-9, 1e9


class OptschedError(ValueError):
    """A user-facing error: one line, naming the offending field. The CLI prints
    it without a traceback and exits with code 2."""


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice (``loads_unique``); ``str()`` says which."""


def _unique_object(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        owner = d.get("id")
        where = f" (in the object with id {owner!r})" if isinstance(owner, str) and key != "id" else ""
        raise DuplicateKeyError(f"key {key!r} appears twice in one object{where}")
    return d


def check_unique_keys(text: str | bytes) -> None:
    """DuplicateKeyError if a JSON object in ``text`` repeats a key; nothing for valid
    JSON without one. jiter (Rust) scans; when it finds one, loads_unique names it with
    its object's id. Text that is not JSON passes: the parsers after this name the error."""
    import jiter

    try:
        jiter.from_json(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text,
                        catch_duplicate_keys=True, cache_mode=False)
    except ValueError as e:
        if "duplicate key" in str(e):
            loads_unique(text)  # raises, naming the object
            raise DuplicateKeyError(str(e)) from None


def loads_unique(text: str | bytes):
    """json.loads, refusing an object that repeats a key (DuplicateKeyError). Plain JSON
    readers keep the last value, so a repeated "jobs" or "throughput" would silently
    drop the first; a scheduler input should not lose data that way."""
    return json.loads(text, object_pairs_hook=_unique_object)


# --------------------------------------------------------------------------
# Snapshot contract (version 1)
# --------------------------------------------------------------------------


def _numeric_leaves(annotation) -> str | None:
    """"whole" / "number" when every leaf of ``annotation`` is an int / a number
    (None, containers and dict keys aside); None when any leaf is text, a model, a flag."""
    import types
    import typing

    if annotation is type(None) or annotation is Ellipsis:
        return "none"
    if annotation is int:
        return "whole"
    if annotation is float:
        return "number"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is dict:
        args = args[1:]  # the keys are names
    elif origin not in (list, tuple, typing.Union, types.UnionType):
        return None
    kinds = {_numeric_leaves(a) for a in args} - {"none"}
    if not kinds or None in kinds:
        return None
    return "whole" if kinds == {"whole"} else "number"


class FieldError(ValueError):
    """A model validator's error about one of its fields: error formatting puts
    ``field`` into the location (jobs[0] + scale_factor = jobs[0].scale_factor)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@functools.cache
def _numeric_fields(cls) -> dict[str, str]:
    """{name: "whole" | "number"} of every field of ``cls`` whose values are numbers."""
    out = {}
    for name, f in cls.model_fields.items():
        kind = _numeric_leaves(f.annotation)
        if kind is not None:
            out[f.alias or name] = kind
    return out


_PLAIN = (int, float, type(None))


def _plain(v) -> bool:
    return type(v) in _PLAIN or (type(v) is dict and all(type(x) in _PLAIN for x in v.values()))


class NumbersAreNumbers(BaseModel):
    """A number written as true or "4" is a mistake, not 1 or 4 (pydantic's lax mode
    converts both): every field whose values are numbers refuses flags and text.
    (Snapshots parsed from JSON text take a strict fast path; this is the check
    on the reference path and on every other body: one call per object, not per field.)"""

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data):
        if not isinstance(data, dict):
            return data
        numeric = _numeric_fields(cls)
        if all(_plain(data[k]) or _flag_or_text(data[k], k) is None for k in data.keys() & numeric.keys()):
            return data  # (the common case, fast: the few fields given, plain numbers or {type: number} rows)
        for name, kind in numeric.items():  # the first bad one in field order (a set's order is not fixed)
            found = _flag_or_text(data.get(name), name)
            if found is not None:
                where, bad = found
                what = "a whole number" if kind == "whole" else "a number"
                raise FieldError(where, f"must be {what}, not {type(bad).__name__} ({bad!r})")
        return data


def _flag_or_text(v, where: str, depth: int = 0) -> tuple[str, Any] | None:
    """(path, value) of the first bool or str among the values of ``v`` (dict values,
    list items; the path as gpus['v100'], colocated['b']['v100'][1]), else None."""
    if isinstance(v, (bool, str)):
        return where, v
    if depth >= 4:
        return None
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, (list, tuple)) else ()
    for key, x in items:
        found = _flag_or_text(x, f"{where}[{key!r}]", depth + 1)
        if found is not None:
            return found
    return None


class _Strict(NumbersAreNumbers):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every number finite (docs/guide/solve.md)


class Server(_Strict):
    id: str
    gpu_type: str
    gpus: int = Field(gt=0, le=MAX_GPUS)
    cpus: float | None = Field(default=None, gt=0, description="CPU cores (synergy).")
    memory: float | None = Field(default=None, gt=0, description="Memory, GB (synergy).")


class Cluster(_Strict):
    """The GPUs: a count per type and, optionally, the servers that hold them
    (then every type with GPUs has servers adding up to its count), and prices."""

    gpus: dict[str, int] = Field(description="GPU count per accelerator type.")
    servers: list[Server] | None = Field(
        default=None, max_length=MAX_SERVERS,
        description="Optional servers; when absent, placement synthesizes servers from `gpus`.",
    )
    price_per_hour: dict[str, float] | None = Field(
        default=None, description="Optional $/GPU-hour per type (cost-aware policies)."
    )

    @field_validator("gpus")
    @classmethod
    def _non_negative(cls, v: dict[str, int]) -> dict[str, int]:
        if len(v) > MAX_GPU_TYPES:
            raise ValueError(f"{len(v)} GPU types exceed the limit of {MAX_GPU_TYPES}")
        for t, c in v.items():
            if c < 0:
                raise ValueError(f"gpus[{t!r}] is negative ({c})")
            if c > MAX_GPUS:
                raise ValueError(f"gpus[{t!r}] = {c} exceeds the limit of {MAX_GPUS:,} GPUs")
        total = sum(v.values())
        if total > MAX_GPUS:
            raise ValueError(f"{total:,} GPUs in all exceed the limit of {MAX_GPUS:,}")
        return v

    @model_validator(mode="after")
    def _prices_known(self) -> "Cluster":
        bad = check_prices(self.price_per_hour or {}, set(self.gpus))
        if bad:
            raise FieldError(f"price_per_hour{bad[0]}", bad[1])
        return self

    @model_validator(mode="after")
    def _servers_match(self) -> "Cluster":
        if self.servers is not None and not self.servers and any(c > 0 for c in self.gpus.values()):
            raise ValueError("servers: an empty list, but the cluster has GPUs; list the servers of every type "
                             "or omit `servers` (placement then synthesizes them)")
        if self.servers:
            ids = [s.id for s in self.servers]
            if len(set(ids)) != len(ids):
                raise ValueError("servers: duplicate server id")
            per_type: dict[str, int] = {}
            for s in self.servers:
                if s.gpu_type not in self.gpus:
                    raise ValueError(f"servers[{s.id!r}].gpu_type: unknown GPU type {s.gpu_type!r}")
                per_type[s.gpu_type] = per_type.get(s.gpu_type, 0) + s.gpus
            for t, c in per_type.items():
                if c != self.gpus[t]:
                    raise ValueError(
                        f"servers: {c} {t} GPUs on servers but cluster.gpus[{t!r}] = {self.gpus[t]}"
                    )
            for t, c in self.gpus.items():
                if c > 0 and t not in per_type:
                    raise ValueError(
                        f"servers: no server for GPU type {t!r} ({c} GPUs); list servers for every type or for none"
                    )
        return self


class GoodputSpec(_Strict):
    """An elastic job's goodput model (Pollux/Sia; docs/architecture.md §7). Configuration
    policies (pollux, sia) choose its GPU count and batch size from it; jobs without
    it keep their scale factor and throughput (no elasticity)."""

    application: str = Field(default="", description="Application name (informational).")
    perf_params: dict[str, list[float]] = Field(
        default_factory=dict,
        description="Per GPU type, the 7 throughput parameters [alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma]; "
        "types without them are bootstrapped from the job's throughput ratio (optsched.goodput.bootstrap).",
    )
    grad_sqr: float = Field(default=1.0, ge=0, allow_inf_nan=False, description="|g|^2 measured at init_batch_size.")
    grad_var: float = Field(default=0.0, ge=0, allow_inf_nan=False, description="tr(Sigma) measured at init_batch_size.")
    init_batch_size: float = Field(gt=0, allow_inf_nan=False, description="M0: the batch size the gradient statistics refer to.")
    max_batch_size: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="Largest global batch (default M0).")
    local_bsz: tuple[float, float | None] = Field(default=(1.0, None), description="[min, max] per-GPU micro-batch.")
    min_gpus: int = Field(default=1, ge=1, le=MAX_GPUS)
    max_gpus: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    num_restarts: int = Field(default=0, ge=0, le=10**9)
    restart_seconds: float = Field(default=30.0, ge=0, allow_inf_nan=False, description="Seconds lost per restart (checkpoint + restore).")
    current: dict[str, tuple[int, int]] | None = Field(
        default=None, description="Current configuration {gpu_type: [gpus, nodes]} (else taken from snapshot.placement)."
    )

    @model_validator(mode="after")
    def _limits(self) -> "GoodputSpec":
        for t, p in self.perf_params.items():
            if len(p) != 7 or not all(math.isfinite(x) for x in p):
                raise ValueError(f"perf_params[{t!r}]: need 7 finite numbers, got {p}")
            if min(p[:6]) < 0 or not 1.0 <= p[6] <= 10.0:
                raise ValueError(f"perf_params[{t!r}]: alpha/beta must be >= 0 and gamma in [1, 10] ({p})")
        lo, hi = self.local_bsz
        if lo <= 0 or (hi is not None and hi < lo):
            raise ValueError(f"local_bsz: need 0 < min <= max, got {list(self.local_bsz)}")
        max_bs = self.max_batch_size or self.init_batch_size
        if max_bs < self.init_batch_size:
            raise ValueError(f"max_batch_size {max_bs:g} is below init_batch_size {self.init_batch_size:g}")
        if lo * self.min_gpus > max_bs:
            raise ValueError(
                f"local_bsz: batch-size limits exclude every configuration (min micro-batch {lo:g} x min_gpus "
                f"{self.min_gpus} > max_batch_size {max_bs:g})"
            )
        if self.max_gpus is not None and self.max_gpus < self.min_gpus:
            raise ValueError(f"max_gpus {self.max_gpus} is below min_gpus {self.min_gpus}")
        return self


class Job(_Strict):
    """One job: the GPUs it runs on (``scale_factor``), its throughput on each
    GPU type in steps/s (or a ``goodput`` model for an elastic job), its work
    (``steps_total``, ``steps_done``), weight and what it has received so far."""

    id: str = Field(min_length=1)
    model: str = ""
    scale_factor: int = Field(default=1, gt=0, le=MAX_GPUS, description="GPUs the job runs on.")
    weight: float = Field(default=1.0, ge=MIN_WEIGHT, le=MAX_WEIGHT, allow_inf_nan=False, description="Priority weight.")
    throughput: dict[str, float] = Field(
        description="Steps/s at its scale factor per GPU type; a missing type means it cannot run there."
    )
    steps_total: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    steps_done: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    arrival_time: float = Field(default=0.0, allow_inf_nan=False)
    elapsed_time: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    attained_service: float = Field(default=0.0, ge=0, allow_inf_nan=False, description="GPU-seconds received so far.")
    entity: str | None = Field(default=None, description="Tenant/user (hierarchical policies).")
    isolated_time: float | None = Field(
        default=None, ge=0, allow_inf_nan=False, description="Cumulative time the job would have run in isolation (Themis)."
    )
    slo: float | None = Field(default=None, allow_inf_nan=False, description="Deadline, absolute seconds (cost/SLO policies).")
    colocated: dict[str, dict[str, tuple[float, float]]] | None = Field(
        default=None,
        description="Space sharing: {other_job_id: {gpu_type: [t_self, t_other]}} steps/s when packed.",
    )
    last_run_time: float | None = Field(
        default=None, allow_inf_nan=False, description="Absolute time the job last ran (Tiresias starvation promotion)."
    )
    goodput: GoodputSpec | None = Field(
        default=None, description="Elastic job: goodput model for the configuration policies (pollux, sia)."
    )
    cpu_profile: list[tuple[float, float]] | None = Field(
        default=None, description="Synergy: [[CPUs per GPU, relative throughput in (0, 1]], ...] by increasing CPUs.")
    memory_profile: list[tuple[float, float]] | None = Field(
        default=None, description="Synergy: [[GB per GPU, relative throughput in (0, 1]], ...] by increasing GB.")

    @field_validator("cpu_profile", "memory_profile")
    @classmethod
    def _sensitivity(cls, v):
        if v is None:
            return v
        if not v:
            raise ValueError("needs at least one [amount per GPU, relative throughput] point")
        xs = [x for x, _ in v]
        if any(not (math.isfinite(x) and x >= 0) for x in xs) or any(b <= a for a, b in zip(xs, xs[1:])):
            raise ValueError(f"amounts per GPU must be finite, >= 0 and increasing ({xs})")
        if any(not (math.isfinite(y) and 0 < y <= 1) for _, y in v):
            raise ValueError(f"relative throughputs must be in (0, 1] ({[y for _, y in v]})")
        return v

    @field_validator("throughput")
    @classmethod
    def _finite_non_negative(cls, v: dict[str, float]) -> dict[str, float]:
        for t, x in v.items():
            if not math.isfinite(x):
                raise ValueError(f"throughput[{t!r}] is not finite ({x})")
            if x < 0:
                raise ValueError(f"throughput[{t!r}] is negative ({x})")
            if x > MAX_THROUGHPUT or 0 < x < MIN_THROUGHPUT:
                raise ValueError(f"throughput[{t!r}] must be 0 or between {MIN_THROUGHPUT:g} and {MAX_THROUGHPUT:g} steps/s ({x})")
        return v


class Snapshot(_Strict):
    """A cluster and its jobs at one moment, the input of :func:`optsched.solve`
    (``optsched schema`` prints its JSON Schema; the allocator's memory rides
    along in the last fields)."""

    version: Literal[1] = 1
    time: float = Field(default=0.0, allow_inf_nan=False)
    cluster: Cluster
    jobs: list[Job] = Field(default_factory=list, max_length=MAX_JOBS)
    entity_weights: dict[str, float] | None = None
    # Space sharing by job type: {model_a: {model_b: {gpu_type: [t_a, t_b]}}}, steps/s of a job of
    # model_a and one of model_b packed on the same GPUs (jobs[].model names them). max_min_fairness
    # --packing then packs over every pair of jobs, solved over the models (optsched/packed_classes.py).
    # Not together with jobs[].colocated (pairs listed one by one).
    colocation: dict[str, dict[str, dict[str, tuple[float, float]]]] | None = Field(
        default=None, description="Pair throughputs by model: {model_a: {model_b: {gpu_type: [steps/s of a, "
        "steps/s of b]}}} (space sharing over every pair of jobs; max_min_fairness).")
    # Allocator state (optional): rounds received per job and type, the
    # current placement, the prior allocation.
    rounds_received: dict[str, dict[str, float]] | None = None
    placement: dict[str, list["GpuSlot"]] | None = None
    prior_allocation: dict[str, dict[str, float]] | None = None
    # More allocator state (optsched.allocator): rounds each job has been
    # active since the last allocation reset (the denominator of its fraction),
    # and the deficit tie-breakers per job and type.
    rounds_present: dict[str, float] | None = None
    deficits: dict[str, dict[str, float]] | None = None
    # The rest of the allocator's memory (optsched.allocator, validated when an
    # Allocator loads it, errors naming "allocator.<key>"): {"round": the next
    # Placement.round, "credits": {unit: {gpu type: rounds}} record() gave this
    # round, "removed": [ids of removed jobs], "adopt_allocation": bool}.
    # Absent (older snapshots): round 0, no credits, no removals.
    allocator: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _text_is_unicode(cls, data: Any) -> Any:
        """Every name is text that can be printed and written: a lone surrogate
        (JSON "\\ud800") is refused here, naming where it is."""
        where = _lone_surrogate(data, "")
        if where is not None:
            raise ValueError(f"{where + ': ' if where else ''}not valid Unicode text (a lone surrogate)")  # (the caller names the whole)
        return data

    @model_validator(mode="after")
    def _check_jobs(self) -> "Snapshot":
        ids = [j.id for j in self.jobs]
        id_set = set(ids)  # built once: checking each job against it keeps parsing linear in the job count
        if len(id_set) != len(ids):
            seen: set[str] = set()
            dup = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
            raise ValueError(f"jobs: duplicate job id {dup!r}")
        types = set(self.cluster.gpus)
        for i in _suspect_jobs(self.jobs, self.cluster.gpus):  # vectorized: the jobs a check below might refuse
            _check_job(i, self.jobs[i], id_set, types, self.cluster.gpus)
        for e, w in (self.entity_weights or {}).items():
            if not math.isfinite(w) or not MIN_WEIGHT <= w <= MAX_WEIGHT:
                raise ValueError(f"entity_weights[{e!r}] must be between {MIN_WEIGHT:g} and {MAX_WEIGHT:g} ({w})")
        if self.colocation is not None:
            _check_colocation(self.colocation, self.jobs, types)
        return self


_RATES_RANGE = f"rates must be finite: 0 or between {MIN_THROUGHPUT:g} and {MAX_THROUGHPUT:g} steps/s"


def _rates_in_range(rates) -> bool:
    """Pair rates (jobs[].colocated, colocation) in the documented throughput range."""
    return all(math.isfinite(r) and (r == 0 or MIN_THROUGHPUT <= r <= MAX_THROUGHPUT) for r in rates)


def _check_colocation(table: dict, jobs: list["Job"], types: set[str]) -> None:
    """Pair throughputs by model: known types, rates 0 or in the throughput range, both
    orders of a pair in agreement, a bounded size, and not mixed with jobs[].colocated."""
    i = next((i for i, j in enumerate(jobs) if j.colocated), None)
    if i is not None:
        raise ValueError(f"colocation: pair throughputs are given by model here, so jobs[{i}].colocated (by job "
                         "pair) cannot be given too")
    entries = sum(len(per_b) for per_b in table.values())
    if entries > MAX_JOBS:
        raise ValueError(f"colocation: {entries:,} model pairs exceed the limit of {MAX_JOBS:,}")
    for a, per_b in table.items():
        for b, per_t in per_b.items():
            for t, rates in per_t.items():
                where = f"colocation[{a!r}][{b!r}][{t!r}]"
                if t not in types:
                    raise ValueError(f"{where}: unknown GPU type {t!r}")
                if not _rates_in_range(rates):
                    raise ValueError(f"{where}: {_RATES_RANGE} ({list(rates)})")
                if a == b and not np.isclose(rates[0], rates[1], rtol=1e-9, atol=0.0):
                    raise ValueError(f"{where}: two jobs of one model packed together run alike, but the rates "
                                     f"differ ({list(rates)})")
                back = table.get(b, {}).get(a, {}).get(t)
                if a != b and back is not None and not np.allclose(rates, back[::-1], rtol=1e-9, atol=0.0):
                    raise ValueError(f"{where}: {list(rates)} disagrees with colocation[{b!r}][{a!r}][{t!r}] "
                                     f"= {list(back)}, the same pair in the other order (read in this order: "
                                     f"{list(back[::-1])})")


def _lone_surrogate(obj: Any, path: str, depth: int = 0) -> str | None:
    """The path of the first string (key or value) that is not valid Unicode, else None."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if depth > 64:  # deeper than any snapshot field: pydantic names the wrong type
        return None
    if isinstance(obj, dict):
        for k, v in obj.items():
            sub = f"{path}.{k}" if path else str(k)
            if isinstance(k, str) and _lone_surrogate(k, "") is not None:
                return path or "snapshot"
            got = _lone_surrogate(v, sub, depth + 1)
            if got is not None:
                return got
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            got = _lone_surrogate(v, f"{path}[{i}]", depth + 1)
            if got is not None:
                return got
    return None


def _check_job(i: int, j: "Job", ids: set[str], types: set[str], gpus: dict[str, int]) -> None:
    """The checks of job i that need the whole snapshot (known types, a type it fits on, pair partners)."""
    for t in j.throughput:
        if t not in types:
            raise ValueError(f"jobs[{i}].throughput: unknown GPU type {t!r} (cluster has {sorted(types)})")
    if not any(x > 0 for x in j.throughput.values()):
        raise ValueError(f"jobs[{i}].throughput: job {j.id!r} has no positive throughput on any GPU type")
    if not any(j.scale_factor <= gpus[t] for t, x in j.throughput.items() if x > 0):
        raise ValueError(
            f"jobs[{i}].scale_factor: job {j.id!r} needs {j.scale_factor} GPU{'s' if j.scale_factor != 1 else ''}, more than any "
            f"type it can run on has"
        )
    if j.steps_total is not None and j.steps_done > j.steps_total:
        raise ValueError(f"jobs[{i}].steps_done: {j.steps_done:g} exceeds steps_total {j.steps_total:g}")
    _check_colocated(i, j, ids, types)
    for t in (j.goodput.perf_params if j.goodput else {}):
        if t not in types:
            raise ValueError(f"jobs[{i}].goodput.perf_params: unknown GPU type {t!r}")


def _throughput_entries(jobs: list["Job"], col: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every job's throughput entries as flat arrays (row = job index, column =
    ``col[type]`` or -1 for a type not in ``col``, value), in each dict's order:
    one pass over the jobs at C speed instead of a Python loop over jobs × types."""
    thr = [j.throughput for j in jobs]
    lens = np.fromiter(map(len, thr), dtype=np.intp, count=len(thr))
    rows = np.repeat(np.arange(len(thr)), lens)
    cols = np.fromiter(map(col.get, chain.from_iterable(thr), repeat(-1)), dtype=np.intp, count=len(rows))
    vals = np.fromiter(chain.from_iterable(map(dict.values, thr)), dtype=float, count=len(rows))
    return rows, cols, vals


def _suspect_jobs(jobs: list["Job"], gpus: dict[str, int]) -> list[int]:
    """Indices (increasing) of every job that ``_check_job`` might refuse: a superset
    of the refused ones, so checking only these (in order) raises exactly what
    checking every job in order would."""
    n = len(jobs)
    rows, cols, vals = _throughput_entries(jobs, {t: c for c, t in enumerate(gpus)})
    cap = np.array([*gpus.values(), 0], dtype=float)  # the last entry: unknown types (cols == -1)
    sf = np.fromiter((j.scale_factor for j in jobs), dtype=float, count=n)
    positive = vals > 0  # NaN is not (like the Python check)
    fits = positive & (sf[rows] <= cap[cols])
    suspect = (np.bincount(rows[cols < 0], minlength=n) > 0) | (np.bincount(rows[fits], minlength=n) == 0)
    suspect[[m for m, j in enumerate(jobs) if j.colocated or (j.goodput is not None and j.goodput.perf_params)
             or (j.steps_total is not None and j.steps_done > j.steps_total)]] = True
    return np.flatnonzero(suspect).tolist()


def _check_colocated(i: int, job: "Job", ids: set[str], types: set[str]) -> None:
    """Pair throughputs must name known jobs and types, with finite, non-negative rates."""
    for other, per_type in (job.colocated or {}).items():
        if other not in ids:
            raise ValueError(f"jobs[{i}].colocated: unknown job id {other!r}")
        if other == job.id:
            raise ValueError(f"jobs[{i}].colocated: job {job.id!r} cannot be packed with itself")
        for t, rates in per_type.items():
            if t not in types:
                raise ValueError(f"jobs[{i}].colocated[{other!r}]: unknown GPU type {t!r}")
            if not _rates_in_range(rates):
                raise ValueError(f"jobs[{i}].colocated[{other!r}][{t!r}]: {_RATES_RANGE} ({list(rates)})")


class GpuSlot(_Strict):
    server: str
    gpu_type: str
    gpu: int


Snapshot.model_rebuild()


def _format_validation_error(err: ValidationError) -> str:
    return f"invalid snapshot: {describe_validation_error(err)}"


@functools.cache
def _dict_fields() -> frozenset[str]:
    """Names of the snapshot's fields (at any depth) whose values are dicts keyed by the user's
    names (GPU types, job ids, models): an error's location shows those keys as ['v100'], as
    the snapshot's own checks do."""
    import types
    import typing

    names: set[str] = set()
    seen: set[type] = set()

    def visit(model: type[BaseModel]) -> None:
        seen.add(model)
        for name, f in model.model_fields.items():
            todo = [(f.annotation, True)]
            while todo:
                a, top = todo.pop()
                origin = typing.get_origin(a)
                if origin in (typing.Union, types.UnionType):
                    todo += [(x, top) for x in typing.get_args(a)]
                elif origin is dict:
                    names.update([name] if top else [])
                elif origin in (list, tuple):
                    todo += [(x, False) for x in typing.get_args(a)]
                elif isinstance(a, type) and issubclass(a, BaseModel) and a not in seen:
                    visit(a)

    visit(Snapshot)
    return frozenset(names)


def describe_validation_error(err: ValidationError, at: str = "") -> str:
    """One line: the first error's location (jobs[0].throughput['v100']; ``at``: where the
    validated object sits, e.g. reports[2]) and message."""
    e = err.errors()[0]
    parts, keys = [], False  # past a dict field (throughput, gpus, ...) strings are user keys: ['v100']
    for p in e["loc"]:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif not keys and isinstance(p, str) and re.fullmatch(r"[A-Za-z0-9_.-]+", p):
            parts.append(f".{p}")
            keys = p in _dict_fields()
        else:
            parts.append(f"[{p!r}]")  # a key (or one with spaces, brackets: quoted, the message stays one line)
    loc = "".join(parts).lstrip(".")
    msg = " ".join(str(e["msg"]).split())
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    inner = (e.get("ctx") or {}).get("error")
    if isinstance(inner, FieldError):  # the field is part of the location
        loc = f"{loc}.{inner.field}" if loc else inner.field
        msg = " ".join(inner.message.split())
    if at:
        loc = f"{at}.{loc}" if loc and not loc.startswith("[") else f"{at}{loc}"
    where = f"{loc}: " if loc else ""
    extra = f" (and {len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    return f"{where}{msg}{extra}"


def parse_snapshot(data: str | bytes | dict) -> Snapshot:
    """Parse and validate a snapshot; raise OptschedError with a one-line message."""
    if isinstance(data, (str, bytes)):
        _check_counts(data)
        snap = _parse_json_fast(data)
        if snap is not None:
            try:  # the fast parser keeps a repeated key's last value, as json.loads does
                check_unique_keys(data)
            except DuplicateKeyError as e:
                raise OptschedError(f"invalid snapshot: {e}") from None
            return snap
    return _parse_reference(data)


def _check_counts(data: str | bytes) -> None:
    """The job and server limits before any per-item work: pydantic checks a list's
    length only after validating every item (a 1,000,000-job snapshot took 12 s to be
    refused). Every job has a "throughput" key and every server a "gpu_type" key, so
    their counts in the text bound the lists' lengths from above (a C-speed scan);
    only past a limit is the JSON loaded to count exactly."""
    for key, where, limit in (("throughput", "jobs", MAX_JOBS), ("gpu_type", "cluster.servers", MAX_SERVERS)):
        needle = f'"{key}"'
        if data.count(needle if isinstance(data, str) else needle.encode()) <= limit:
            continue
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            return  # the parse names the error
        if not isinstance(doc, dict):
            return  # (the same)
        holder = doc if where == "jobs" else doc.get("cluster")
        items = holder.get(where.rpartition(".")[2]) if isinstance(holder, dict) else None
        if isinstance(items, list) and len(items) > limit:  # pydantic's own wording, as the reference path says it
            raise OptschedError(f"invalid snapshot: {where}: List should have at most {limit} items after validation, "
                                f"not {len(items)}")


def _parse_reference(data: str | bytes | dict) -> Snapshot:
    """json.loads + Snapshot.model_validate: the definition of what a valid snapshot
    is and what each error says (the fast path only ever returns what this returns)."""
    if isinstance(data, (str, bytes)):
        try:
            data = loads_unique(data)
        except DuplicateKeyError as e:
            raise OptschedError(f"invalid snapshot: {e}") from None
        except json.JSONDecodeError as e:
            raise OptschedError(f"invalid snapshot: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
        except UnicodeDecodeError as e:
            raise OptschedError(f"invalid snapshot: not UTF-8 text (byte {e.start})") from None
        except RecursionError:
            raise OptschedError("invalid snapshot: JSON nested too deeply") from None
        except ValueError:  # an integer of more than 4,300 digits (Python's conversion limit)
            raise OptschedError("invalid snapshot: a number has more than 4,300 digits") from None
    if not isinstance(data, dict):
        raise OptschedError("invalid snapshot: top level must be a JSON object")
    try:
        return Snapshot.model_validate(data)
    except ValidationError as e:
        raise OptschedError(_format_validation_error(e)) from None


def _parse_json_fast(data: str | bytes) -> Snapshot | None:
    """The snapshot, validated straight from the JSON text (pydantic's Rust
    parser, no Python dict in between), or None if anything is wrong with it:
    the caller then takes the reference path (json.loads + model_validate),
    which names the error exactly as it always has. Only a valid snapshot
    comes out of here, equal to what the reference path gives for it.

    The validator is Snapshot's own schema minus the two checks that cost
    Python work per string or per job; both are vacuous or repeated here:
    lone surrogates cannot come out of the JSON parser (it refuses them and
    invalid UTF-8, so the reference path reports them), and the throughput
    values are checked below, vectorized."""
    validator = _fast_validator()
    if validator is None:
        return None
    try:
        with gc_paused():
            snap = validator.validate_json(data, strict=True)
    except Exception:  # a JSON syntax error, a validation error, anything: the reference path names it
        return None
    vals = np.fromiter(chain.from_iterable(j.throughput.values() for j in snap.jobs), dtype=float)
    in_range = (vals == 0) | ((vals >= MIN_THROUGHPUT) & (vals <= MAX_THROUGHPUT))  # NaN is not
    if not in_range.all():  # Job._finite_non_negative, for every job at once
        return None
    return snap


@contextlib.contextmanager
def gc_paused():
    """No cyclic garbage collection inside: building 100,000 jobs' objects (none of
    them in a cycle) otherwise triggers collections that traverse the growing heap
    again and again, half the time of a large parse. Reference counting still frees."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@functools.cache
def _fast_validator() -> SchemaValidator | None:
    """Snapshot's core schema without Snapshot._text_is_unicode (a Python walk over
    every string, which also makes pydantic turn the parsed JSON into Python objects
    first) and Job._finite_non_negative (a Python call per job); None if this
    pydantic's schema does not have them where expected (then no fast path)."""
    skip = {Snapshot._text_is_unicode.__func__, Job._finite_non_negative.__func__,
            NumbersAreNumbers._numbers_are_numbers.__func__}  # (strict=True below refuses flags and text)
    found: set = set()

    def strip(node):
        if isinstance(node, list):
            return [strip(v) for v in node]
        if not isinstance(node, dict):
            return node
        if node.get("type") in ("function-before", "function-after") and isinstance(node.get("function"), dict):
            fn = node["function"].get("function")
            fn = getattr(fn, "__func__", fn)
            if fn in skip:
                found.add(fn)
                return strip(node["schema"])
        return {k: strip(v) for k, v in node.items()}

    schema = strip(Snapshot.__pydantic_core_schema__)
    if found != skip:
        return None
    config = {"title": Snapshot.__name__, "extra_fields_behavior": "forbid"}
    try:  # the models' own prebuilt validators would bring Job._finite_non_negative back
        return SchemaValidator(schema, config, _use_prebuilt=False)
    except TypeError:  # an older pydantic-core: no prebuilt validators to avoid
        return SchemaValidator(schema, config)


def snapshot_schema() -> dict:
    return Snapshot.model_json_schema()


# --------------------------------------------------------------------------
# Numpy view
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    """The arrays a formulation needs, built once per snapshot.

    throughput[m, j]: steps/s of job m on type j at its scale factor (0 where it
    cannot run, including types with fewer GPUs than its scale factor).
    """

    job_ids: tuple[str, ...]
    gpu_types: tuple[str, ...]
    throughput: np.ndarray  # (n, k)
    scale_factor: np.ndarray  # (n,)
    weight: np.ndarray  # (n,)
    capacity: np.ndarray  # (k,)
    steps_remaining: np.ndarray  # (n,) nan when steps_total is unknown
    elapsed_time: np.ndarray  # (n,)
    attained_service: np.ndarray  # (n,)
    arrival_time: np.ndarray  # (n,)
    entity: tuple[str | None, ...] = ()
    extras: dict = field(default_factory=dict)
    # Optional data for the policy family (None / nan when the snapshot lacks it;
    # each policy names the missing field in its error).
    time: float = 0.0  # snapshot time (SLO deadlines are absolute)
    isolated_time: np.ndarray | None = None  # (n,) Themis cumulative isolated time, nan when unknown
    slo: np.ndarray | None = None  # (n,) absolute deadline, nan when none
    last_run_time: np.ndarray | None = None  # (n,) nan when unknown
    price: np.ndarray | None = None  # (k,) $/GPU-hour, nan when unknown
    entity_weights: dict | None = None  # tenant -> weight
    # Space sharing: pairs[p] = (m, m') with m < m'; pair_throughput[p, j] =
    # (t_m, t_m') steps/s of each when packed on type j (0 where not measured).
    pairs: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=int))
    pair_throughput: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 2)))
    # Elastic jobs (Job.goodput): goodput models and current configurations.
    elastic: "ElasticInfo | None" = None

    @property
    def n(self) -> int:
        return len(self.job_ids)

    @property
    def k(self) -> int:
        return len(self.gpu_types)

    @property
    def available(self) -> np.ndarray:
        return self.throughput > 0

    @classmethod
    def from_snapshot(cls, snap: Snapshot) -> "Instance":
        jobs = snap.jobs
        types = tuple(sorted(snap.cluster.gpus))
        n, k = len(jobs), len(types)
        cap = np.array([snap.cluster.gpus[t] for t in types], dtype=float)
        T = np.zeros((n, k))
        rows, cols, vals = _throughput_entries(jobs, {t: j for j, t in enumerate(types)})
        known = cols >= 0  # (a validated snapshot has no other types)
        T[rows[known], cols[known]] = vals[known]
        sf = _column(jobs, "scale_factor")
        T[sf[:, None] > cap[None, :]] = 0.0  # cannot fit on that type at all
        total = _optional(map(attrgetter("steps_total"), jobs))
        left = total - _column(jobs, "steps_done")
        rem = np.where(0.0 > left, 0.0, left)  # max(left, 0.0), nan (unknown total) kept
        return cls(
            job_ids=tuple(map(attrgetter("id"), jobs)),
            gpu_types=types,
            throughput=T,
            scale_factor=sf,
            weight=_column(jobs, "weight"),
            capacity=cap,
            steps_remaining=rem,
            elapsed_time=_column(jobs, "elapsed_time"),
            attained_service=_column(jobs, "attained_service"),
            arrival_time=_column(jobs, "arrival_time"),
            entity=tuple(map(attrgetter("entity"), jobs)),
            time=float(snap.time),
            isolated_time=_optional(map(attrgetter("isolated_time"), jobs)),
            slo=_optional(map(attrgetter("slo"), jobs)),
            last_run_time=_optional(map(attrgetter("last_run_time"), jobs)),
            price=_optional([(snap.cluster.price_per_hour or {}).get(t) for t in types]),
            entity_weights=dict(snap.entity_weights) if snap.entity_weights else None,
            **_pair_arrays(snap, types),
            elastic=_elastic_info(snap, types),
            extras={**_resource_extras(snap, types), **_colocation_extras(snap, types)},
        )

    def equal_share(self) -> np.ndarray:
        """X^equal[m, j] = W_j / Σ W (Gavel's proportional share), only on types the job can use."""
        share = np.broadcast_to(self.capacity / max(self.capacity.sum(), 1e-12), (self.n, self.k))
        return np.where(self.available, share, 0.0)


def _colocation_extras(snap: Snapshot, types: tuple[str, ...]) -> dict:
    """{"colocation": (labels, rates)} when the snapshot gives pair throughputs by model:
    labels[m] = index of job m's model, rates[(a, b)] = (k, 2) steps/s of models a, b packed."""
    if snap.colocation is None:
        return {}
    models = sorted({j.model for j in snap.jobs})
    index = {m: i for i, m in enumerate(models)}
    col = {t: c for c, t in enumerate(types)}
    rates: dict[tuple[int, int], np.ndarray] = {}
    for a, per_b in snap.colocation.items():
        for b, per_t in per_b.items():
            if a not in index or b not in index:
                continue  # a model no job of this snapshot has
            ab = rates.setdefault((index[a], index[b]), np.zeros((len(types), 2)))
            ba = rates.setdefault((index[b], index[a]), np.zeros((len(types), 2)))
            for t, pair in per_t.items():  # a pair's types may be split over its two orders (they agree where both)
                ab[col[t]] = pair
                ba[col[t]] = pair[::-1]
    labels = np.fromiter((index[j.model] for j in snap.jobs), dtype=np.int64, count=len(snap.jobs))
    return {"colocation": (labels, rates)}


def _resource_extras(snap: Snapshot, types: tuple[str, ...]) -> dict:
    """Synergy's inputs, only when the snapshot has them: CPUs and memory per
    GPU type (summed over its servers; nan where a server lacks the number)
    and each job's sensitivity profiles (None where absent)."""
    servers = snap.cluster.servers or []
    has_res = any(s.cpus is not None or s.memory is not None for s in servers)
    has_prof = not (_all_none(snap.jobs, "cpu_profile") and _all_none(snap.jobs, "memory_profile"))
    if not (has_res or has_prof):
        return {}
    out: dict = {"cpu_profile": [j.cpu_profile for j in snap.jobs], "memory_profile": [j.memory_profile for j in snap.jobs]}
    if has_res:
        for key in ("cpus", "memory"):
            per = {t: 0.0 for t in types}
            for srv in servers:
                v = getattr(srv, key)
                per[srv.gpu_type] = per[srv.gpu_type] + (np.nan if v is None else float(v))
            out[f"server_{key}"] = np.array([per[t] for t in types], dtype=float)
    return out


def _optional(values) -> np.ndarray:
    """Floats, nan for None."""
    values = list(values)
    if None not in values:  # (C-speed scans: a column is usually all numbers or all None)
        return np.array(values, dtype=float)
    if values.count(None) == len(values):
        return np.full(len(values), np.nan)
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def _all_none(jobs: list[Job], name: str) -> bool:
    """No job has the field ``name`` (a C-speed scan)."""
    return list(map(attrgetter(name), jobs)).count(None) == len(jobs)


def _column(jobs: list[Job], name: str) -> np.ndarray:
    """One float per job: the field ``name``."""
    return np.fromiter(map(attrgetter(name), jobs), dtype=float, count=len(jobs))


def _pair_arrays(snap: Snapshot, types: tuple[str, ...]) -> dict:
    """Pair throughputs from ``Job.colocated``, merged over both jobs' views.

    Either job of a pair may list it ({other: {type: [t_self, t_other]}}); when
    both do, they must agree (1e-9 relative) or the snapshot is rejected."""
    if not any(map(attrgetter("colocated"), snap.jobs)):  # (None or {}: no pairs)
        return {}
    index = {j.id: m for m, j in enumerate(snap.jobs)}
    col = {t: c for c, t in enumerate(types)}
    merged: dict[tuple[int, int], np.ndarray] = {}
    for m, job in enumerate(snap.jobs):
        for other, per_type in (job.colocated or {}).items():
            o = index[other]  # validated in Snapshot._check_jobs
            a, b = (m, o) if m < o else (o, m)
            rates = merged.setdefault((a, b), np.full((len(types), 2), np.nan))
            for t, (t_self, t_other) in per_type.items():
                new = np.array([t_self, t_other] if m < o else [t_other, t_self])
                old = rates[col[t]]
                if not np.isnan(old).all() and not np.allclose(old, new, rtol=1e-9, atol=0.0):
                    raise OptschedError(
                        f"invalid snapshot: jobs[{m}].colocated[{other!r}][{t!r}]: {[t_self, t_other]} "
                        f"disagrees with what job {other!r} lists for the same pair"
                    )
                rates[col[t]] = new
    if not merged:
        return {}
    keys = sorted(merged)
    return {
        "pairs": np.array(keys, dtype=int).reshape(-1, 2),
        "pair_throughput": np.nan_to_num(np.stack([merged[k] for k in keys]), nan=0.0),
    }


@dataclass(frozen=True)
class Allocation:
    """The result of a policy: time fractions X[m, j] plus how it was obtained."""

    policy: str
    status: str
    objective: float
    solve_seconds: float
    job_ids: tuple[str, ...]
    gpu_types: tuple[str, ...]
    fractions: np.ndarray  # (n, k)
    effective_throughput: np.ndarray  # (n,)
    explanation: dict = field(default_factory=dict)
    # Honest timings: solve_seconds = build + solver + decode (+ glue), each measured.
    build_seconds: float = 0.0  # the formulation's arrays (the block LP)
    solver_seconds: float = 0.0  # the backend's own time, inside solve_seconds
    decode_seconds: float = 0.0  # cleaning X, effective throughputs, the explanation
    import_seconds: float = 0.0  # a backend's modules loaded on first use (a cold process), outside solve_seconds
    # Space sharing: pairs[p] = (m, m') job indices packed together on one set
    # of GPUs, pair_fractions[p, j] = time fraction of that pair on type j.
    pairs: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=int))
    pair_fractions: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    # Elastic / configuration policies (pollux, sia, hadar): gpu_counts[m, j] =
    # GPUs of type j job m runs on this round (fractions are then 1 where > 0).
    # None for fractional policies, whose job sizes are their scale factors.
    gpu_counts: np.ndarray | None = None
    # Nodes (servers) each job spans per type, for configuration policies that
    # choose (nodes, GPUs); None otherwise.
    nodes: np.ndarray | None = None

    @classmethod
    def of(
        cls, inst: "Instance", policy: str, fractions: np.ndarray, status: str, objective: float,
        solve_seconds: float, effective_throughput: np.ndarray | None = None, explanation: dict | None = None, **extra,
    ) -> "Allocation":
        """An allocation over ``inst``'s jobs and types; throughput defaults to Σ_j T[m,j]·X[m,j]."""
        thr = (inst.throughput * fractions).sum(axis=1) if effective_throughput is None else effective_throughput
        return cls(policy, status, objective, solve_seconds, inst.job_ids, inst.gpu_types, fractions, thr,
                   explanation or {}, **extra)

    def to_dict(self) -> dict:
        """As JSON: the allocation by job and type (positive entries), timings, explanation."""
        alloc = dict(zip(self.job_ids, _positive_rows(self.fractions, self.gpu_types)))
        return {
            "policy": self.policy,
            "status": self.status,
            "objective": _finite_or_none(self.objective),
            "solve_seconds": self.solve_seconds,
            "build_seconds": self.build_seconds,
            "solver_seconds": self.solver_seconds,
            "decode_seconds": self.decode_seconds,
            "import_seconds": self.import_seconds,
            "allocation": alloc,
            "effective_throughput": dict(zip(self.job_ids, np.asarray(self.effective_throughput, dtype=float).tolist())),
            "explanation": self.explanation,
            **({"packed_allocation": self._packed_dict()} if len(self.pairs) else {}),
            **({"gpu_counts": self._gpu_counts_dict()} if self.gpu_counts is not None else {}),
            **({"nodes": {
                jid: {t: int(self.nodes[m, j]) for j, t in enumerate(self.gpu_types) if self.nodes[m, j] > 0}
                for m, jid in enumerate(self.job_ids)
            }} if self.nodes is not None else {}),
        }

    def _gpu_counts_dict(self) -> dict:
        return {
            jid: {t: int(self.gpu_counts[m, j]) for j, t in enumerate(self.gpu_types) if self.gpu_counts[m, j] > 0}
            for m, jid in enumerate(self.job_ids)
        }

    def _packed_dict(self) -> dict:
        return {
            pair_key(self.job_ids[a], self.job_ids[b]): {
                t: float(self.pair_fractions[p, j]) for j, t in enumerate(self.gpu_types) if self.pair_fractions[p, j] > 0
            }
            for p, (a, b) in enumerate(self.pairs)
        }


def check_prices(prices: dict, types) -> tuple[str, str] | None:
    """None when every price is for a known GPU type and 0 or in [MIN_PRICE, MAX_PRICE]; else
    (where after the prices' name: "" or "['v100']", the problem)."""
    for t, price in prices.items():
        if t not in types:
            return "", f"unknown GPU type {t!r} (cluster has {', '.join(sorted(types))})"
        if not (isinstance(price, (int, float)) and math.isfinite(price)
                and (price == 0 or MIN_PRICE <= price <= MAX_PRICE)):
            return f"[{t!r}]", f"must be 0 or between {MIN_PRICE:g} and {MAX_PRICE:g} $/GPU-hour ({price})"
    return None


def pair_key(a: str, b: str) -> str:
    """A packed pair's key in ``packed_allocation``: "a+b", or the JSON list '["a+b", "c"]' when
    an id holds a '+' (pairs (a+b, c) and (a, b+c) would both read "a+b+c")."""
    if "+" in a or "+" in b:
        return json.dumps([a, b])
    return f"{a}+{b}"


def _positive_rows(values: np.ndarray, names: tuple[str, ...]) -> list[dict]:
    """Per row m, {names[j]: float(values[m, j]) for each j where values[m, j] > 0}, in
    column order: rows are grouped by which of their entries are positive (a few
    patterns), so the Python work is building one small dict per row."""
    values = np.asarray(values, dtype=float)
    n, k = len(values), len(names)
    if n == 0 or k > 62:  # (no rows; more types than bits in a pattern key: row by row)
        return [{t: float(values[m, j]) for j, t in enumerate(names) if values[m, j] > 0} for m in range(n)]
    positive = values[:, :k] > 0
    key = positive @ (np.int64(1) << np.arange(k, dtype=np.int64))
    rows = np.empty(n, dtype=object)
    with gc_paused():  # 100,000 new dicts would trigger collections over the whole heap
        for pattern in np.unique(key).tolist():
            members = np.flatnonzero(key == pattern)
            cols = np.flatnonzero(positive[members[0]]).tolist()
            keys = [names[j] for j in cols]
            columns = [values[members, j].tolist() for j in cols]
            if len(keys) == 1:
                (t,), (col,) = keys, columns
                dicts = [{t: x} for x in col]
            else:
                dicts = [dict(zip(keys, xs)) for xs in zip(*columns)] if keys else [{} for _ in members]
            rows[members] = dicts
    return rows.tolist()


def _finite_or_none(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


# --------------------------------------------------------------------------
# Elastic jobs (goodput models)
# --------------------------------------------------------------------------

DEFAULT_SERVER_GPUS = 8  # GPUs per server of a type when the snapshot lists no servers


@dataclass(frozen=True)
class ElasticInfo:
    """Goodput data of every job (rows of non-elastic jobs: is_elastic False, params nan).

    params[m, j] are the 7 throughput parameters of job m on type j (nan: not
    measured there; optsched.goodput.bootstrap fills them). current_gpus/nodes:
    the job's configuration now (0 when not running).
    """

    is_elastic: np.ndarray  # (n,) bool
    params: np.ndarray  # (n, k, 7)
    grad_sqr: np.ndarray  # (n,)
    grad_var: np.ndarray  # (n,)
    init_batch_size: np.ndarray  # (n,)
    max_batch_size: np.ndarray  # (n,)
    min_local_bsz: np.ndarray  # (n,)
    max_local_bsz: np.ndarray  # (n,)
    min_gpus: np.ndarray  # (n,)
    max_gpus: np.ndarray  # (n,) inf when unbounded
    num_restarts: np.ndarray  # (n,)
    restart_seconds: np.ndarray  # (n,)
    current_gpus: np.ndarray  # (n, k) int
    current_nodes: np.ndarray  # (n, k) int
    server_gpus: np.ndarray  # (k,) int, GPUs per server of each type


def _elastic_info(snap: Snapshot, types: tuple[str, ...]) -> ElasticInfo | None:
    jobs = snap.jobs
    if _all_none(jobs, "goodput"):
        return None
    n, k = len(jobs), len(types)
    col = {t: j for j, t in enumerate(types)}
    params = np.full((n, k, 7), np.nan)
    cur_g = np.zeros((n, k), dtype=int)
    cur_n = np.zeros((n, k), dtype=int)
    placement = snap.placement or {}
    for m, job in enumerate(jobs):
        if job.goodput is None and job.id not in placement:
            continue  # a rigid job that is not running: nothing to record
        for t, p in (job.goodput.perf_params if job.goodput else {}).items():
            params[m, col[t]] = p
        slots = placement.get(job.id) or []
        for s in slots:
            if s.gpu_type in col:
                cur_g[m, col[s.gpu_type]] += 1
        for t in {s.gpu_type for s in slots if s.gpu_type in col}:
            cur_n[m, col[t]] = len({s.server for s in slots if s.gpu_type == t})
        for t, (g, nn) in ((job.goodput.current if job.goodput else None) or {}).items():
            if t in col:
                cur_g[m, col[t]], cur_n[m, col[t]] = g, nn
    spec = [j.goodput for j in jobs]
    get = lambda f, default: np.array([default if s is None else f(s) for s in spec], dtype=float)  # noqa: E731
    per_server: dict[str, int] = {}
    for srv in snap.cluster.servers or []:
        per_server[srv.gpu_type] = max(per_server.get(srv.gpu_type, 0), srv.gpus)
    server_gpus = np.array([per_server.get(t, min(snap.cluster.gpus[t], DEFAULT_SERVER_GPUS)) or 1 for t in types], dtype=int)
    return ElasticInfo(
        is_elastic=np.array([s is not None for s in spec]),
        params=params,
        grad_sqr=get(lambda s: s.grad_sqr, 1.0),
        grad_var=get(lambda s: s.grad_var, 0.0),
        init_batch_size=get(lambda s: s.init_batch_size, 1.0),
        max_batch_size=get(lambda s: s.max_batch_size or s.init_batch_size, 1.0),
        min_local_bsz=get(lambda s: s.local_bsz[0], 1.0),
        max_local_bsz=get(lambda s: s.local_bsz[1] or (s.max_batch_size or s.init_batch_size), 1.0),
        min_gpus=get(lambda s: s.min_gpus, 1.0),
        max_gpus=get(lambda s: s.max_gpus or np.inf, np.inf),
        num_restarts=get(lambda s: s.num_restarts, 0.0),
        restart_seconds=get(lambda s: s.restart_seconds, 30.0),
        current_gpus=cur_g,
        current_nodes=cur_n,
        server_gpus=server_gpus,
    )


def json_default(x):
    """``json.dumps(default=...)`` for numpy scalars and arrays, tuples and sets
    (executors write their tables and summaries with it); anything else as text."""
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, (tuple, set, np.ndarray)):
        return list(x)
    return str(x)
