"""The round's result and what changed since the previous round: started,
preempted, continued, migrated (a continuing job on a different set of GPUs)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optsched.allocator.assign import Seats
from optsched.allocator.state import Lease, same_gpus
from optsched.model import GpuSlot


@dataclass(frozen=True)
class Placement:
    """One round: job → its GPUs, and what changed since the previous round.

    ``continued``: ran last round and this round; ``migrated``: continued on a
    different set of GPUs; ``note``: warnings (CP-SAT fallback, ignored input).
    """

    assignments: dict[str, tuple[GpuSlot, ...]]
    started: tuple[str, ...] = ()
    preempted: tuple[str, ...] = ()
    continued: tuple[str, ...] = ()
    migrated: tuple[str, ...] = ()
    note: str = ""
    round: int = 0

    def gpu_type(self, job_id: str) -> str | None:
        """The type the job runs on this round (the type holding most of its GPUs
        if a configuration policy split it over types); None if it does not run."""
        slots = self.assignments.get(job_id)
        if not slots:
            return None
        types = [s.gpu_type for s in slots]
        return max(dict.fromkeys(types), key=types.count)

    def to_dict(self) -> dict:
        """As JSON: ``placement`` (job → its GPUs), started, preempted, continued, migrated."""
        out = {
            "placement": {
                j: [{"server": s.server, "gpu_type": s.gpu_type, "gpu": s.gpu} for s in slots]
                for j, slots in self.assignments.items()
            },
            "started": list(self.started),
            "preempted": list(self.preempted),
            "migrated": list(self.migrated),
        }
        if self.note:
            out["placement_note"] = self.note
        return out


@dataclass(frozen=True)
class RoundDiff:
    placement: Placement
    lease: Lease  # the GPUs held from now on
    ran: list[int]  # rows (in the round's jobs) that run


def round_diff(ids: tuple[str, ...], seats: Seats, lease: Lease, was_running: list[bool],
               slots: list[tuple[GpuSlot, ...]], *, round_no: int = 0) -> RoundDiff:
    """Job by job in the order of ``ids``. A job that keeps its GPUs keeps its
    GPU dict and slot tuple from last round (no rebuilding)."""
    gpus_now: dict[str, dict[int, np.ndarray]] = {}
    unit_now, assignments = {}, {}
    started, preempted, continued, migrated, ran = [], [], [], [], []
    for m, j in enumerate(ids):
        c = seats.column[m]
        if c < 0:
            if was_running[m]:
                preempted.append(j)
            continue
        old = lease.gpus.get(j)
        if m not in seats.split:
            g = seats.gpus[m]
            a = lease.slots.get(j)
            if old is not None and a is not None and len(old) == 1 and old.get(c) is g:
                per = old
            else:
                per = {c: g}
                a = tuple(map(slots[c].__getitem__, g.tolist()))
        else:
            per = seats.split[m]
            a = tuple(slots[c][i] for c, g in per.items() for i in g.tolist())
        ran.append(m)
        gpus_now[j], assignments[j], unit_now[j] = per, a, seats.unit[m]
        if was_running[m]:
            continued.append(j)
            if per is not old and not same_gpus(per, old):
                migrated.append(j)
        else:
            started.append(j)
    # The Placement gets its own dict: the lease keeps (and later edits) the other.
    placement = Placement(dict(assignments), tuple(started), tuple(preempted), tuple(continued), tuple(migrated),
                          "; ".join(seats.notes), round_no)
    return RoundDiff(placement, Lease(gpus_now, unit_now, assignments), ran)
