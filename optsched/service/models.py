"""Request and response bodies of the service (pydantic), units in every field's
description. The snapshot types themselves (Cluster, Job, GoodputSpec,
Snapshot) are ``optsched.model``'s: one contract for the CLI, the library and
the service.

Limits that bound the work one request can cause live here as constants
(``Limits``); the server checks them before the work scales.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from optsched.checks import MIN_ROUND_LENGTH
from optsched.model import Cluster, FieldError, GoodputSpec, NumbersAreNumbers, Snapshot

ID_PATTERN = r"^[A-Za-z0-9_.:@+\-]{1,128}$"
# Not "." or "..": a URL's dot segments, which clients (httpx, curl, browsers) resolve away, so such a
# session could be created but never reached. (Three alternatives: pydantic's regex has no lookahead.)
SESSION_ID_PATTERN = r"^(?:[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,63}|\.[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,62}|\.\.[A-Za-z0-9_.\-]{1,62})$"
SOLVER_NAMES = ("auto", "ipm", "clarabel", "highs", "highs-simplex", "scs")
PLACEMENTS = ("consolidated", "first_fit", "cpsat")
QUEUES = ("phased", "per_type", "global", "gavel")


def _policy_enum(schema: dict) -> None:
    """List the registered policies in the JSON Schema (validation stays in the
    handler, so a policy registered later is still accepted)."""
    from optsched.policy import policy_names

    schema["enum"] = policy_names()


def PolicyField(description: str = "Policy name (GET /v1/policies).") -> Any:  # noqa: N802
    return Field(default="max_min_fairness", max_length=64, description=description, json_schema_extra=_policy_enum)


@dataclass(frozen=True)
class Limits:
    """What one request or session may ask for (``optsched serve`` options)."""

    max_body_bytes: int = 32 * 2**20  # request body, bytes
    max_jobs: int = 10_000  # jobs in a snapshot, active jobs in a session
    max_gpus: int = 100_000  # GPUs in a cluster (all types)
    max_time_limit: float = 600.0  # solver seconds per solve
    max_sessions_cached: int = 256  # sessions kept in memory (the rest load from the database on use)


class _Body(NumbersAreNumbers):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# ---------------------------------------------------------------- errors


class ErrorBody(BaseModel):
    detail: str = Field(description="One line: the field (dotted path, [i] for list items) and what is wrong with it.")
    field: str | None = Field(default=None, description="The offending field, when there is one.")


# ---------------------------------------------------------------- solve


class SolveRequest(_Body):
    snapshot: Snapshot = Field(description="The cluster snapshot (version 1; `optsched schema`).")
    policy: str = PolicyField()
    solver: Literal[SOLVER_NAMES] = Field(default="auto", description="Solver backend.")  # type: ignore[valid-type]
    time_limit: float = Field(default=60.0, gt=0, description="Solver time limit, seconds (capped by the server).")
    packing: StrictBool = Field(default=False, description="Allow space sharing (policies that support it).")
    partitions: int = Field(default=1, ge=1, le=1024, description=(
        "POP: solve this many job groups (each with 1/K of every GPU type) and merge (fractional policies, no packing)."))
    placement: StrictBool = Field(default=False, description="Also compute the next round's GPU placement.")
    placement_policy: Literal[PLACEMENTS] = Field(default="consolidated")  # type: ignore[valid-type]


class GpuSlotOut(BaseModel):
    server: str
    gpu_type: str
    gpu: int = Field(description="GPU index within the server.")


class SolveResponse(BaseModel):
    policy: str
    status: str = Field(description="`optimal`, or `fallback: <reason> ...` when the solver failed or timed out.")
    objective: float | None = Field(description="The policy's objective (null when undefined).")
    solve_seconds: float = Field(description="Wall seconds of the policy solve (build + solver + decode).")
    total_seconds: float = Field(default=0.0, description="Wall seconds the server spent on the request's work.")
    allocation: dict[str, dict[str, float]] = Field(description="job -> GPU type -> time fraction in [0, 1].")
    effective_throughput: dict[str, float] = Field(description="job -> steps/s under the allocation.")
    explanation: dict = Field(description="gpu_price, capacity_used, capacity, bottleneck_jobs, share_vs_equal, ...")
    gpu_counts: dict[str, dict[str, int]] | None = Field(default=None, description="Configuration policies: job -> type -> GPUs.")
    packed_allocation: dict[str, dict[str, float]] | None = Field(default=None, description="Space sharing: 'a+b' (or the JSON list '[\"a+b\", \"c\"]' when an id holds a +) -> type -> fraction.")
    placement: dict[str, list[GpuSlotOut]] | None = Field(default=None, description="With placement=true: job -> GPUs this round.")
    started: list[str] | None = None
    preempted: list[str] | None = None
    migrated: list[str] | None = None
    allocator_state: dict | None = Field(default=None, description="Merge into the next snapshot to keep the allocator's memory.")


# ---------------------------------------------------------------- sessions


# A session's allocator charges a move this many seconds by default: the checkpoint-restart penalty
# Pollux's and Sia's schedulers charge per restart or migration (30 s), the simulator's restart overhead
# of elastic jobs too. With 0 (Gavel's walk) a 200-job session moved jobs ~10 times each.
DEFAULT_MIGRATION_COST = 30.0


class AllocatorOptions(_Body):
    queue: Literal[QUEUES] = Field(default="phased", description="Allocator walk (docs: Simulate and traces).")  # type: ignore[valid-type]
    type_order: Literal["fixed", "shuffle"] | list[str] = Field(default="fixed", description="GPU type walk order.")
    work_conserving: StrictBool = Field(default=True, description="Give idle GPUs to jobs beyond their share.")
    seed: int = Field(default=0, ge=0, le=2**31 - 1, description="Seeds the type shuffle and CP-SAT placement; ties go by arrival, then id.")
    gpus_per_server: int = Field(default=4, ge=1, le=4096, description="Server size when the cluster lists no servers.")
    migration_cost: float = Field(default=DEFAULT_MIGRATION_COST, ge=0, le=86400, allow_inf_nan=False, description=(
        "Seconds a restart or migration costs the job: above 0 the allocator keeps running jobs on their type "
        "and GPUs unless their share requires a move (docs: Rounds and placement). Default 30 s: the checkpoint-restart "
        "penalty Pollux's and Sia's schedulers charge a job per restart or migration (the simulator's restart "
        "overhead of elastic jobs); 0 is Gavel's walk, which moves jobs freely."))
    hysteresis: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False, description=(
        "The allocator's hysteresis in rounds, set directly (default: from migration_cost)."))


# Simulation options with no meaning for a session (the caller runs the jobs), each refused by
# name with what to do instead; the options that do mean something are SessionConfig's fields.
NOT_FOR_SESSIONS = {
    "admission": "a session admits every submitted job at its next round; submit a job when it should compete",
    "load_factor": "a session admits every submitted job at its next round; submit a job when it should compete",
    "loss_threshold": "the caller ends its jobs (report finished=true, or finish the job)",
    "restart_overhead": "the caller's jobs pay their real restart costs; allocator.migration_cost tells the "
                        "allocator what a move costs",
    "window": "the caller decides when to stop asking for rounds",
    "max_time": "the caller decides when to stop asking for rounds",
    "spread_rates": "give the throughput the job reaches where it runs (report throughput)",
    "migration_cost": "it is an allocator option: allocator.migration_cost",
    "queue": "it is an allocator option: allocator.queue",
    "type_order": "it is an allocator option: allocator.type_order",
    "seed": "it is an allocator option: allocator.seed",
}


class SessionConfig(_Body):
    session_id: str | None = Field(default=None, pattern=SESSION_ID_PATTERN,
                                   description="Optional id chosen by the caller (else a random one).")
    cluster: Cluster = Field(description="GPU types with counts, optional servers and prices.")
    policy: str = PolicyField()
    solver: Literal[SOLVER_NAMES] = "auto"  # type: ignore[valid-type]
    time_limit: float = Field(default=30.0, gt=0, description="Solver time limit per recomputation, seconds "
                              "(capped by the server's --max-time-limit).")
    packing: StrictBool = Field(default=False, description="Space sharing (jobs need `colocated` pair throughputs, or "
                          "the session a `colocation` table by model).")
    colocation: dict[str, dict[str, dict[str, tuple[float, float]]]] | None = Field(
        default=None, description="Pair throughputs by model, as the snapshot's `colocation`: {model_a: {model_b: "
        "{gpu_type: [steps/s of a, steps/s of b]}}} over the jobs' `model`; max_min_fairness packs over every pair.")
    partitions: int = Field(default=1, ge=1, le=1024, description=(
        "POP: each recomputation solves this many job groups (each with 1/K of every GPU type) and merges them "
        "(fractional policies, no packing)."))
    throughputs: dict[str, dict[str, float]] | None = Field(
        default=None, description="Throughput table by model: {model: {gpu_type: steps/s}}, the rate of a job of "
        "that model at its scale factor; a submitted job without `throughput` gets its model's row (stored with the "
        "job: a later table does not change it).")
    # At least simulate's 1 ms: shorter rounds vanish in the clock's rounding (1e12 + 1e-300 == 1e12).
    round_length: float = Field(default=360.0, ge=MIN_ROUND_LENGTH, le=1e7, description="Seconds per round (Gavel: 360).")
    min_recompute_interval: float = Field(
        default=0.0, ge=0, le=1e9,
        description="Session seconds: the allocation is not recomputed sooner than this after the last recomputation "
        "(Gavel: 1920). Arrivals then only get idle GPUs until the next recomputation.")
    recompute_every: int | None = Field(
        default=None, ge=1, le=1_000_000,
        description="Also recompute every K rounds (default: only when jobs arrive, leave or change; every round "
        "for policies that read per-round state: pollux, sia, las, fifo, srtf, tiresias, gandiva).")
    placement: Literal[PLACEMENTS] = Field(default="consolidated", description="Placement policy.")  # type: ignore[valid-type]
    placement_time_limit: float = Field(default=1.0, gt=0, le=600, description="CP-SAT placement limit, seconds.")
    allocator: AllocatorOptions = Field(default_factory=AllocatorOptions)
    start_time: float = Field(default=0.0, ge=0, le=1e12, description="Session clock at creation, seconds.")
    max_jobs: int | None = Field(default=None, ge=1, description="Active jobs allowed (default and cap: the server's --max-jobs).")

    @model_validator(mode="before")
    @classmethod
    def _simulation_only(cls, data):
        if isinstance(data, dict):
            for key in data:
                if key in NOT_FOR_SESSIONS:
                    raise FieldError(key, f"not a session option: {NOT_FOR_SESSIONS[key]}")
        return data

    @field_validator("session_id", mode="before")
    @classmethod
    def _readable_session_id(cls, v):
        # Before the pattern: its message would be the regex itself.
        if isinstance(v, str) and not re.fullmatch(SESSION_ID_PATTERN, v):
            why = " (a URL path segment)" if v in (".", "..") else ""
            raise ValueError(f"1-64 of A-Z a-z 0-9 _ . -, not '.' or '..', got {v[:80]!r}{why}")
        return v


class JobSpec(_Body):
    """A job as the caller submits it. The bookkeeping fields of a snapshot job
    (steps_done, elapsed_time, attained_service, last_run_time) are the
    session's: it keeps them from the progress reports."""

    id: str = Field(pattern=ID_PATTERN, description="Unique within the session (also among finished jobs).")
    model: str = Field(default="", max_length=256)
    scale_factor: int = Field(default=1, ge=1, le=100_000, description="GPUs the job runs on.")
    weight: float = Field(default=1.0, gt=0, le=1e9, description="Priority weight (2 = twice the share).")
    throughput: dict[str, float] | None = Field(
        default=None,
        description="Steps/s at its scale factor per GPU type; a missing type (or 0) means it cannot run there. "
        "Default: the session's `throughputs` row of the job's model.")
    steps_total: float | None = Field(default=None, gt=0, le=1e15,  # (traces' limit; 0 steps is no job)
                                      description="Steps to finish; the session finishes the job when steps_done reaches it.")
    arrival_time: float | None = Field(default=None, ge=0, le=1e12,
                                       description="Session seconds; default: the session clock now.")
    entity: str | None = Field(default=None, max_length=128, description="Tenant (hierarchical policies).")
    slo: float | None = Field(default=None, ge=0, le=1e12, description="Deadline, absolute session seconds.")
    colocated: dict[str, dict[str, tuple[float, float]]] | None = Field(
        default=None, description="Space sharing: {other_job: {gpu_type: [steps/s self, steps/s other]}}.")
    goodput: GoodputSpec | None = Field(default=None, description="Elastic job: goodput model (pollux, sia).")


    @field_validator("id")
    @classmethod
    def _not_a_path_segment(cls, v: str) -> str:
        if v in (".", ".."):  # /jobs/.. is the session itself in any URL
            raise ValueError(f"{v!r} is a path segment, not a job id")
        return v


class SubmitJobs(_Body):
    jobs: list[JobSpec] = Field(min_length=1, description="Jobs arriving now (validated together).")


class JobUpdate(_Body):
    """Fields of a job that may change while it is in the session; the allocation
    is recomputed at the next allowed round."""

    model: str | None = Field(default=None, max_length=256)
    weight: float | None = Field(default=None, gt=0, le=1e9)
    throughput: dict[str, float] | None = Field(default=None, description="Steps/s per GPU type (replaces the table).")
    steps_total: float | None = Field(default=None, gt=0, le=1e15)
    entity: str | None = Field(default=None, max_length=128)
    slo: float | None = Field(default=None, ge=0, le=1e12)


class Iteration(_Body):
    """One measured iteration configuration of an elastic job (goodput refit)."""

    gpu_type: str = Field(max_length=64)
    nodes: int = Field(ge=1, le=100_000, description="Servers the job spanned.")
    replicas: int = Field(ge=1, le=100_000, description="GPUs (data-parallel replicas).")
    local_bsz: float = Field(gt=0, le=1e9, description="Per-GPU micro-batch size.")
    step_time: float = Field(gt=0, le=1e6, description="Seconds per optimizer step (compute + synchronization).")
    sync_time: float = Field(ge=0, le=1e6, description="Seconds of the step spent synchronizing gradients.")


class ProgressReport(_Body):
    job_id: str = Field(pattern=ID_PATTERN)
    seq: int | None = Field(default=None, ge=0, le=2**62, description=(
        "The caller's sequence number of this job's reports, increasing: a report whose seq is not above the last "
        "one applied for the job is a retry and changes nothing (the answer is the job as it stands). Without seq, "
        "`steps` adds on every delivery; `steps_done` (absolute) is idempotent by itself."))
    steps: float | None = Field(default=None, ge=0, le=1e18, description="Steps made since the last report (adds).")
    steps_done: float | None = Field(default=None, ge=0, le=1e18, description="Absolute steps done (replaces).")
    seconds: float | None = Field(
        default=None, ge=0, le=1e9,
        description="Seconds the job actually ran in the last round (e.g. it finished early); default: the whole "
        "round. Only for a job that ran in the last round.")
    throughput: float | None = Field(
        default=None, ge=1e-12, le=1e12,  # the snapshot's range (model.MIN_THROUGHPUT): 1e-300 was stored
        description="Observed steps/s at its scale factor on the GPU type it ran on in the last round: replaces the "
        "job's throughput on that type at the next recomputation.")
    iterations: list[Iteration] | None = Field(default=None, max_length=4096,
                                               description="Elastic jobs: measured iteration times (refit at recomputation).")
    grad_sqr: float | None = Field(default=None, ge=0, le=1e300, description="Elastic jobs: |g|^2 at init batch size.")
    grad_var: float | None = Field(default=None, ge=0, le=1e300, description="Elastic jobs: tr(Sigma) at init batch size.")
    finished: StrictBool = Field(default=False, description="The job is done (it leaves the session).")


class ReportProgress(_Body):
    reports: list[ProgressReport] = Field(min_length=1)


class RoundRequest(_Body):
    now: float | None = Field(default=None, ge=0, le=1e12,
                              description="Session seconds at which the round starts (default: the last round's start "
                              "+ round_length; never earlier than the session clock).")
    expected_round: int | None = Field(default=None, ge=0,
                                       description="The round number the caller expects to get: a retried request "
                                       "for a round already given is 409, not a second round.")


class FinishRequest(_Body):
    seconds: float | None = Field(default=None, ge=0, le=1e9,
                                  description="Seconds it ran in the last round before finishing (default: the whole round).")


class RoundOut(BaseModel):
    round: int = Field(description="0-based round number.")
    time: float = Field(description="Session seconds at which the round starts.")
    round_length: float = Field(description="Seconds.")
    placement: dict[str, list[GpuSlotOut]] = Field(description="job -> GPUs it runs on this round.")
    started: list[str] = Field(description="Jobs to launch (did not run last round).")
    preempted: list[str] = Field(description="Jobs to stop (ran last round, not this one).")
    migrated: list[str] = Field(description="Jobs that keep running on different GPUs (restart them there).")
    continued: list[str] = Field(description="Jobs that keep their GPUs.")
    recomputed: bool = Field(description="The allocation was recomputed for this round.")
    allocation_status: str = Field(description="Status of the allocation in force.")
    solve_seconds: float = Field(description="Seconds spent solving for this round (0 when reused).")
    note: str = ""
    queued: list[str] = Field(description="Active jobs that do not run this round.")


class JobOut(BaseModel):
    id: str
    status: Literal["queued", "running", "finished"]
    spec: dict = Field(description="The job as submitted (and updated).")
    arrival_time: float = Field(description="Session seconds.")
    steps_done: float = Field(description="Steps.")
    elapsed_time: float = Field(description="Seconds since arrival (to the session clock, or to its finish).")
    attained_service: float = Field(description="GPU-seconds received (closed rounds).")
    rounds_run: int
    preemptions: int
    first_start: float | None = Field(description="Session seconds of its first round, null before.")
    finish_time: float | None = Field(description="Session seconds, null while active.")
    gpus: list[GpuSlotOut] = Field(description="GPUs it holds this round (empty when queued).")


class SessionOut(BaseModel):
    session_id: str
    config: dict
    time: float = Field(description="Session clock, seconds (start of the last round).")
    round: int = Field(description="Rounds given so far.")
    version: int = Field(description="State changes committed so far.")
    jobs: list[JobOut] = Field(description="Active jobs, in arrival order.")
    finished_jobs: int
    allocation: dict | None = Field(description="The allocation in force (as POST /v1/solve returns it).")
    allocator_state: dict = Field(description="The allocator's memory (Allocator.state()).")
    last_round: RoundOut | None


class SessionCreated(BaseModel):
    session_id: str
    time: float
    round: int


class JobsOut(BaseModel):
    jobs: list[JobOut]


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    sessions_cached: int
    database: str
    commit_groups: int = Field(description="Database transactions (group commits) so far.")
    commits: int = Field(description="State changes committed so far (several per group under load).")
    commit_seconds: float = Field(description="Wall seconds spent committing (fsync included).")


class PoliciesOut(BaseModel):
    policies: list[str]
    per_round: list[str] = Field(description="Policies re-decided every round by default.")
