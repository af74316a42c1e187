"""From the walk's units to GPUs, type by type, through optsched.placement.

A unit keeps its previous GPUs (lease extension) when it ran on the type last
round as the same unit (same job, or same pair) with the same width; the
placement policy places the rest."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from optsched.allocator.state import Columns, Lease, pair_key
from optsched.allocator.walk import Units
from optsched.placement import place, place_greedy_fast


@dataclass(frozen=True)
class PlacementOptions:
    policy: str = "consolidated"
    time_limit: float = 1.0  # seconds for CP-SAT, shared by the types placed
    seed: int = 0
    sticky: bool = False  # migration-aware: a job keeps its GPUs even when its unit changed (pair split or formed)


@dataclass
class Seats:
    """Where each of the round's jobs sits (by row in the round's jobs)."""

    column: list[int]  # -1: does not run
    gpus: list  # its GPU numbers on that column
    unit: list  # its unit key
    split: dict[int, dict[int, np.ndarray]] = field(default_factory=dict)  # jobs on several types
    solo: tuple[list[int], list[int]] = field(default_factory=lambda: ([], []))  # (job rows, columns) of one-job units
    pair_units: list[tuple[tuple[str, str], int]] = field(default_factory=list)  # (pair, column)
    notes: list[str] = field(default_factory=list)


def seat(units: Units, ids: tuple[str, ...], lease: Lease, cols: Columns, opts: PlacementOptions) -> Seats:
    n = len(ids)
    seats = Seats([-1] * n, [None] * n, [None] * n)
    column, gpus, unit, split = seats.column, seats.gpus, seats.unit, seats.split
    solo_m, solo_c = seats.solo
    limit = opts.time_limit / max(1, sum(1 for u in units if u))
    greedy, consolidate = opts.policy in ("consolidated", "first_fit"), opts.policy == "consolidated"
    held, held_as = lease.gpus, lease.unit
    for c, us in enumerate(units):
        if not us:
            continue
        tl = cols.types[c]
        # Inlined (a few hundred units a round): the unit's key, and its GPUs
        # on this type last round if it ran as the same unit.
        keys, widths, prev = [], [], []
        for mem, w in us:
            if len(mem) == 1:
                key = first = ids[mem[0]]
            else:
                key = pair_key(ids[mem[0]], ids[mem[1]])
                first = key[0]
            keys.append(key)
            widths.append(w)
            p = held[first].get(c) if held_as.get(first) == key else None
            if p is None and opts.sticky:
                for m in mem:
                    g = held.get(ids[m])
                    if g is not None and len(g) == 1 and len(g.get(c, ())) == w:
                        p = g[c]
                        break
            prev.append(p)
        gs = place_greedy_fast(tl, widths, prev, consolidate) if greedy else None
        if gs is None:  # a wide unit to place, overlapping leases, or CP-SAT
            res = place(tl, np.array(widths, dtype=np.int64), prev, opts.policy, limit, opts.seed, score=False)
            gs = res.gpus
            if res.note:
                seats.notes.append(f"{tl.gpu_type}: {res.note}")
        for (mem, _), key, g in zip(us, keys, gs):
            if len(mem) == 1:
                solo_m.append(mem[0])
                solo_c.append(c)
            else:
                seats.pair_units.append((key, c))
            for m in mem:
                if column[m] >= 0:  # a configuration policy put the job on several types
                    split.setdefault(m, {column[m]: gpus[m]})[c] = g
                column[m], gpus[m], unit[m] = c, g, key
    return seats
