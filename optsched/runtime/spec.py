"""Runnable jobs: what ``optsched run`` launches, from a trace.

Any trace the project reads works (``optsched.traces.io.read_trace``); the
small runnable traces are Tiresias CSVs, whose ``model_name`` names a shipped
workload and its knobs and whose ``duration`` is the expected runtime alone
(the simulator's speed, the policy's first throughput estimate)::

    job_id,num_gpu,submit_time,iterations,model_name,duration,interval
    a,1,0,1500,regression:work=1,6,0
    b,2,4,800,regression:work=3,9,4

``model_name`` = ``WORKLOAD[:KEY=VALUE...]`` runs the shipped workload
``optsched/runtime/workloads/WORKLOAD.py --steps ITERATIONS --KEY VALUE ...``
(as a file: it skips the optsched package's imports, a faster restart)
(underscores in keys become dashes; ``flag=1`` passes a bare ``--flag``).
A model that is not a shipped workload (a Gavel or Philly job type) runs the
default ``regression`` workload. ``--step-scale`` multiplies every job's steps
(real traces have 10⁵-step jobs).
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field

from optsched.model import OptschedError
from optsched.runtime.workloads import WORKLOADS

DEFAULT_WORKLOAD = "regression"
_WORKLOAD_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads")

# The built-in example (also examples/workloads/small.csv): 6 jobs, ~25 s on 2 slots; durations measured here.
EXAMPLE_CSV = """job_id,num_gpu,submit_time,iterations,model_name,duration,interval
j0,1,0,2000,regression:work=1,5.5,0
j1,1,0,1200,regression:work=2,8,0
j2,2,2,1000,regression:work=1,2.5,2
j3,1,5,2500,regression:work=1,7,3
j4,1,9,600,regression:work=3,6,4
j5,1,12,1500,regression:work=1,4,3
"""


@dataclass(frozen=True)
class RunJob:
    """A job the runtime can launch: its command takes ``--steps`` itself."""

    job_id: str
    arrival_time: float
    steps: int
    command: tuple[str, ...]
    scale_factor: int = 1
    model: str = ""
    weight: float = 1.0
    throughput: float | None = None  # estimated steps/s alone (trace duration); None: unknown
    env: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.steps < 0:
            raise OptschedError(f"job {self.job_id}: steps must be >= 0, got {self.steps}")
        if self.scale_factor < 1:
            raise OptschedError(f"job {self.job_id}: scale_factor must be >= 1, got {self.scale_factor}")
        if not self.command:
            raise OptschedError(f"job {self.job_id}: empty command")


def workload_command(model: str, steps: int, python: str | None = None) -> tuple[str, ...]:
    """``regression:work=2`` → the command line (see the module docstring)."""
    name, *opts = model.split(":") if model else [DEFAULT_WORKLOAD]
    name = name.strip()
    if name not in WORKLOADS:
        name, opts = DEFAULT_WORKLOAD, []
    cmd = [python or sys.executable, os.path.join(_WORKLOAD_DIR, f"{name}.py"), "--steps", str(int(steps))]
    for opt in opts:
        key, eq, value = opt.partition("=")
        key = key.strip().replace("_", "-")
        if not key:
            continue
        if not eq:
            raise OptschedError(f"model {model!r}: option {opt!r} is not KEY=VALUE")
        if value.strip() in ("1", "true", "yes") and key in ("ignore-lease",):
            cmd.append(f"--{key}")
        else:
            cmd += [f"--{key}", value.strip()]
    return tuple(cmd)


def jobs_from_trace(trace, step_scale: float = 1.0, python: str | None = None) -> list[RunJob]:
    """RunJobs for every job of a Trace (arrival order)."""
    out = []
    for r in trace.jobs.itertuples(index=False):
        steps = r.steps_total
        duration = r.duration
        if steps is None or not math.isfinite(steps):
            if duration is None or not math.isfinite(duration):
                raise OptschedError(f"trace row {r.row}: job {r.job_id} has neither steps nor a duration")
            steps = duration  # one step per second of the trace's duration
        steps = max(int(round(float(steps) * step_scale)), 1)
        thr = steps / float(duration) if duration is not None and math.isfinite(duration) and duration > 0 else None
        out.append(RunJob(str(r.job_id), float(r.arrival_time), steps, workload_command(str(r.model), steps, python),
                          int(r.scale_factor), str(r.model), float(r.weight), thr))
    return out


def example_trace_path(tmp_dir: str) -> str:
    p = os.path.join(tmp_dir, "example.csv")
    with open(p, "w") as f:
        f.write(EXAMPLE_CSV)
    return p


__all__ = ["DEFAULT_WORKLOAD", "EXAMPLE_CSV", "RunJob", "example_trace_path", "jobs_from_trace", "workload_command"]
