"""Core types: the snapshot contract (pydantic, validated at the edge) and the
numpy view of it that formulations work on.

Nothing here imports cvxpy, jax or ortools: this is the bottom of the import
graph (DESIGN.md §2).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

SNAPSHOT_VERSION = 1


class OptschedError(ValueError):
    """A user-facing error: one line, naming the offending field. The CLI prints
    it without a traceback and exits with code 2."""


# --------------------------------------------------------------------------
# Snapshot contract (version 1)
# --------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Server(_Strict):
    id: str
    gpu_type: str
    gpus: int = Field(gt=0)


class Cluster(_Strict):
    gpus: dict[str, int] = Field(description="GPU count per accelerator type.")
    servers: list[Server] | None = Field(
        default=None,
        description="Optional servers; when absent, placement synthesizes servers from `gpus`.",
    )
    price_per_hour: dict[str, float] | None = Field(
        default=None, description="Optional $/GPU-hour per type (cost-aware policies)."
    )

    @field_validator("gpus")
    @classmethod
    def _non_negative(cls, v: dict[str, int]) -> dict[str, int]:
        for t, c in v.items():
            if c < 0:
                raise ValueError(f"gpus[{t!r}] is negative ({c})")
        return v

    @model_validator(mode="after")
    def _servers_match(self) -> "Cluster":
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
        return self


class Job(_Strict):
    id: str
    model: str = ""
    scale_factor: int = Field(default=1, gt=0, description="GPUs the job runs on.")
    weight: float = Field(default=1.0, gt=0, description="Priority weight.")
    throughput: dict[str, float] = Field(
        description="Steps/s at its scale factor per GPU type; a missing type means it cannot run there."
    )
    steps_total: float | None = Field(default=None, ge=0)
    steps_done: float = Field(default=0.0, ge=0)
    arrival_time: float = 0.0
    elapsed_time: float = Field(default=0.0, ge=0)
    attained_service: float = Field(default=0.0, ge=0, description="GPU-seconds received so far.")
    entity: str | None = Field(default=None, description="Tenant/user (hierarchical policies).")
    isolated_time: float | None = Field(
        default=None, ge=0, description="Cumulative time the job would have run in isolation (Themis)."
    )
    slo: float | None = Field(default=None, description="Deadline, absolute seconds (cost/SLO policies).")
    colocated: dict[str, dict[str, tuple[float, float]]] | None = Field(
        default=None,
        description="Space sharing: {other_job_id: {gpu_type: [t_self, t_other]}} steps/s when packed.",
    )

    @field_validator("throughput")
    @classmethod
    def _finite_non_negative(cls, v: dict[str, float]) -> dict[str, float]:
        for t, x in v.items():
            if not math.isfinite(x):
                raise ValueError(f"throughput[{t!r}] is not finite ({x})")
            if x < 0:
                raise ValueError(f"throughput[{t!r}] is negative ({x})")
        return v


class Snapshot(_Strict):
    version: Literal[1] = 1
    time: float = 0.0
    cluster: Cluster
    jobs: list[Job] = Field(default_factory=list)
    entity_weights: dict[str, float] | None = None
    # Allocator state (optional): rounds received per job and type, the
    # current placement, the prior allocation.
    rounds_received: dict[str, dict[str, float]] | None = None
    placement: dict[str, list["GpuSlot"]] | None = None
    prior_allocation: dict[str, dict[str, float]] | None = None

    @model_validator(mode="after")
    def _check_jobs(self) -> "Snapshot":
        ids = [j.id for j in self.jobs]
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            dup = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
            raise ValueError(f"jobs: duplicate job id {dup!r}")
        types = set(self.cluster.gpus)
        for i, j in enumerate(self.jobs):
            for t in j.throughput:
                if t not in types:
                    raise ValueError(f"jobs[{i}].throughput: unknown GPU type {t!r} (cluster has {sorted(types)})")
            if not any(x > 0 for x in j.throughput.values()):
                raise ValueError(f"jobs[{i}].throughput: job {j.id!r} has no positive throughput on any GPU type")
            if not any(j.scale_factor <= self.cluster.gpus[t] for t, x in j.throughput.items() if x > 0):
                raise ValueError(
                    f"jobs[{i}].scale_factor: job {j.id!r} needs {j.scale_factor} GPUs, more than any "
                    f"type it can run on has"
                )
        return self


class GpuSlot(_Strict):
    server: str
    gpu_type: str
    gpu: int


Snapshot.model_rebuild()


def _format_validation_error(err: ValidationError) -> str:
    e = err.errors()[0]
    loc = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in e["loc"]).replace(".[", "[")
    msg = e["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    where = f"{loc}: " if loc else ""
    extra = f" (and {len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    return f"invalid snapshot: {where}{msg}{extra}"


def parse_snapshot(data: str | bytes | dict) -> Snapshot:
    """Parse and validate a snapshot; raise OptschedError with a one-line message."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise OptschedError(f"invalid snapshot: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    if not isinstance(data, dict):
        raise OptschedError("invalid snapshot: top level must be a JSON object")
    try:
        return Snapshot.model_validate(data)
    except ValidationError as e:
        raise OptschedError(_format_validation_error(e)) from None


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
        types = tuple(sorted(snap.cluster.gpus))
        n, k = len(snap.jobs), len(types)
        cap = np.array([snap.cluster.gpus[t] for t in types], dtype=float)
        T = np.zeros((n, k))
        for m, job in enumerate(snap.jobs):
            for j, t in enumerate(types):
                T[m, j] = job.throughput.get(t, 0.0)
        sf = np.array([j.scale_factor for j in snap.jobs], dtype=float)
        T[sf[:, None] > cap[None, :]] = 0.0  # cannot fit on that type at all
        rem = np.array(
            [np.nan if j.steps_total is None else max(j.steps_total - j.steps_done, 0.0) for j in snap.jobs],
            dtype=float,
        )
        return cls(
            job_ids=tuple(j.id for j in snap.jobs),
            gpu_types=types,
            throughput=T,
            scale_factor=sf,
            weight=np.array([j.weight for j in snap.jobs], dtype=float),
            capacity=cap,
            steps_remaining=rem,
            elapsed_time=np.array([j.elapsed_time for j in snap.jobs], dtype=float),
            attained_service=np.array([j.attained_service for j in snap.jobs], dtype=float),
            arrival_time=np.array([j.arrival_time for j in snap.jobs], dtype=float),
            entity=tuple(j.entity for j in snap.jobs),
        )

    def equal_share(self) -> np.ndarray:
        """X^equal[m, j] = W_j / Σ W (Gavel's proportional share), only on types the job can use."""
        share = np.broadcast_to(self.capacity / max(self.capacity.sum(), 1e-12), (self.n, self.k))
        return np.where(self.available, share, 0.0)


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
    build_seconds: float = 0.0
    solver_seconds: float = 0.0  # the backend's own time, inside solve_seconds
    # Space sharing: pairs[p] = (m, m') job indices packed together on one set
    # of GPUs, pair_fractions[p, j] = time fraction of that pair on type j.
    pairs: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=int))
    pair_fractions: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    # Elastic / configuration policies (pollux, sia, hadar): gpu_counts[m, j] =
    # GPUs of type j job m runs on this round (fractions are then 1 where > 0).
    # None for fractional policies, whose job sizes are their scale factors.
    gpu_counts: np.ndarray | None = None

    def to_dict(self) -> dict:
        alloc = {
            jid: {t: float(self.fractions[m, j]) for j, t in enumerate(self.gpu_types) if self.fractions[m, j] > 0}
            for m, jid in enumerate(self.job_ids)
        }
        return {
            "policy": self.policy,
            "status": self.status,
            "objective": _finite_or_none(self.objective),
            "solve_seconds": self.solve_seconds,
            "build_seconds": self.build_seconds,
            "solver_seconds": self.solver_seconds,
            "allocation": alloc,
            "effective_throughput": {jid: float(x) for jid, x in zip(self.job_ids, self.effective_throughput)},
            "explanation": self.explanation,
            **({"packed_allocation": self._packed_dict()} if len(self.pairs) else {}),
            **({"gpu_counts": self._gpu_counts_dict()} if self.gpu_counts is not None else {}),
        }

    def _gpu_counts_dict(self) -> dict:
        return {
            jid: {t: int(self.gpu_counts[m, j]) for j, t in enumerate(self.gpu_types) if self.gpu_counts[m, j] > 0}
            for m, jid in enumerate(self.job_ids)
        }

    def _packed_dict(self) -> dict:
        return {
            f"{self.job_ids[a]}+{self.job_ids[b]}": {
                t: float(self.pair_fractions[p, j]) for j, t in enumerate(self.gpu_types) if self.pair_fractions[p, j] > 0
            }
            for p, (a, b) in enumerate(self.pairs)
        }


def _finite_or_none(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None
