"""The books of a period: rounds received and present, deficits, and the
allocation in force — read for the round's jobs, closed at a reset, and
updated once the round is decided.

A *reset* happens when the allocation's X (or a pair's fractions) differs from
the X in force by more than 1e-9 for some job of the round. Then each unit's
deficit accumulates X·(present − prior) − (received − prior) over the closing
period and its counters restart at the prior (half a round); surviving jobs
keep their GPUs and deficits.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from optsched.allocator.assign import Seats
from optsched.allocator.diff import RoundDiff
from optsched.allocator.state import PRIOR_ROUNDS, AllocatorState, JobTable, PairMemory, pair_key

RESET_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Period:
    """The counters the round decides from: the state's, or a fresh period's."""

    received: np.ndarray
    present: np.ndarray
    deficit: np.ndarray
    x: np.ndarray
    pairs: dict[tuple[str, str], PairMemory]
    reset: bool


@dataclass(frozen=True)
class Rows:
    """The round's jobs in the state's rows (-1: a job never seen)."""

    rows: np.ndarray
    known: np.ndarray
    all_known: bool


def rows_of(t: JobTable, ids: tuple[str, ...], cache: dict) -> Rows:
    """Cached while the job list and the rows are unchanged (the simulator's case)."""
    hit = cache.get("rows")
    if hit is not None and hit[1] == t.version and (hit[0] is ids or hit[0] == ids):
        return hit[2]
    rows = np.fromiter((t.row.get(j, -1) for j in ids), dtype=np.int64, count=len(ids))
    known = rows >= 0
    out = Rows(rows, known, bool(known.all()))
    cache["rows"] = (ids, t.version, out)
    return out


def is_reset(state: AllocatorState, ids: tuple[str, ...], at: Rows, x: np.ndarray, pairs: list) -> bool:
    """Does the allocation differ from the one in force, for the round's jobs?"""
    x_old = np.zeros_like(x)
    x_old[at.known] = state.jobs.x[at.rows[at.known]]
    if x.size and np.abs(x - x_old).max() > RESET_TOLERANCE:
        return True
    new = {pair_key(ids[a], ids[b]): xp for a, b, xp in pairs}
    here = set(ids) if state.pairs else ()
    cur = {key: p.x for key, p in state.pairs.items() if p.x.any() and key[0] in here and key[1] in here}
    if set(cur) != set(new):
        return True
    return any(np.abs(cur[key] - new[key]).max() > RESET_TOLERANCE for key in cur)


def period(state: AllocatorState, reset: bool) -> Period:
    t = state.jobs
    if not reset:
        return Period(t.received, t.present, t.deficit, t.x, state.pairs, False)
    deficit = t.deficit + t.x * (t.present - PRIOR_ROUNDS)[:, None] - (t.received - PRIOR_ROUNDS)
    pairs = {key: PairMemory(np.full(len(p.received), PRIOR_ROUNDS), PRIOR_ROUNDS,
                             p.deficit + p.x * (p.present - PRIOR_ROUNDS) - (p.received - PRIOR_ROUNDS),
                             np.zeros_like(p.x), p.ran)
             for key, p in state.pairs.items()}
    return Period(np.full_like(t.received, PRIOR_ROUNDS), np.full_like(t.present, PRIOR_ROUNDS), deficit,
                  np.zeros_like(t.x), pairs, True)


@dataclass(frozen=True)
class Books:
    """The period's counters gathered for the round's jobs (copies)."""

    received: np.ndarray  # (n, k)
    present: np.ndarray  # (n,)
    deficit: np.ndarray  # (n, k)
    tiebreak: np.ndarray  # (n,) the round's order of the jobs (arrival, then id): breaks exact ties
    ever: np.ndarray  # (n,) bool
    running: np.ndarray  # (n,) bool: ran last round


def gather(state: AllocatorState, per: Period, at: Rows, ids: tuple[str, ...], order: np.ndarray) -> Books:
    """``order``: the round's rank of each job (arrival, then id), the tie-break."""
    t, rows = state.jobs, at.rows
    if at.all_known:  # the common case: fancy indexing copies
        return Books(per.received[rows], per.present[rows], per.deficit[rows], order, t.ever[rows], t.running[rows])
    n, k, known = len(ids), t.k, at.known
    b = Books(np.full((n, k), PRIOR_ROUNDS), np.full(n, PRIOR_ROUNDS), np.zeros((n, k)), order,
              np.zeros(n, dtype=bool), np.zeros(n, dtype=bool))  # a new job's prior
    r = rows[known]
    b.received[known], b.present[known], b.deficit[known] = per.received[r], per.present[r], per.deficit[r]
    b.ever[known], b.running[known] = t.ever[r], t.running[r]
    return b


def digest(books: Books, pairs: dict[tuple[str, str], PairMemory], ids: tuple[str, ...]) -> int:
    """A number that changes every round and depends only on the books of the
    round's jobs (order-independent, exact): seeds the per-round type
    shuffle, so a restored allocator shuffles as the live one does."""
    here = set(ids)
    mine = [p for key, p in pairs.items() if key[0] in here and key[1] in here]
    present = [*books.present.tolist(), *(p.present for p in mine)]
    deficit = [*books.deficit.ravel().tolist(), *(d for p in mine for d in p.deficit.tolist())]
    parts = (len(present), math.fsum(present) + 0.0, math.fsum(deficit) + 0.0)  # + 0.0: -0.0 and 0.0 alike
    return zlib.crc32(repr(parts).encode())


@dataclass(frozen=True)
class RoundBooks:
    """What the round adds to the books."""

    ids: tuple[str, ...]
    at: Rows
    x: np.ndarray  # (n, k) the allocation now in force
    books: Books
    period: Period
    pairs: list  # (a, b, pair fractions) allocated this round
    seats: Seats
    diff: RoundDiff


def commit(state: AllocatorState, rb: RoundBooks, cache: dict) -> None:
    """One round present per job and allocated pair, one round received per
    unit on each type it ran on, X in force, the new lease."""
    t, per, ids = state.jobs, rb.period, rb.ids
    if per.reset:
        t.received, t.present, t.deficit, t.x = per.received, per.present, per.deficit, per.x
        state.pairs = per.pairs
    rows = rb.at.rows
    if not rb.at.all_known:
        t.append([ids[m] for m in np.flatnonzero(~rb.at.known)])
        rows = np.fromiter((t.row[j] for j in ids), dtype=np.int64, count=len(ids))
    k = t.k
    for key, c in rb.seats.pair_units:
        p = state.pairs.get(key)
        if p is None:
            p = state.pairs[key] = PairMemory.fresh(k)
        p.received[c] += 1.0
        p.ran = True
    received = rb.books.received  # this round's copy (fancy indexing), free to update
    received[rb.seats.solo] += 1.0
    t.received[rows] = received
    t.present[rows] = rb.books.present + 1.0
    # X and deficits change only at a reset, on new rows, or with a new X;
    # otherwise they are already in place (skip two scatters).
    in_place = cache.get("x_in_place", (None, None))
    if per.reset or in_place[0] is not rb.x or in_place[1] is not rows:
        t.deficit[rows] = rb.books.deficit
        t.x[rows] = rb.x
        cache["x_in_place"] = (rb.x, rows)
    ran_rows = rows[rb.diff.ran]
    t.ever[ran_rows] = True
    for a, b, xp in rb.pairs:
        key = pair_key(ids[a], ids[b])
        p = state.pairs.get(key)
        if p is None:
            p = state.pairs[key] = PairMemory.fresh(k)
        p.x = xp
        p.present += 1.0
    t.running[:] = False
    t.running[ran_rows] = True
    state.lease = rb.diff.lease
