"""Gavel's priority walk (docs/allocator.md): which units run this round on which
GPU type. A unit is one job on exactly its width of GPUs, or a packed pair
sharing its GPUs.

For unit u and type j, with r[u, j] the rounds u received on j and p[u] the
rounds it has been present since the last allocation reset (both starting at
Gavel's prior of half a round):

    fraction[u, j] = r[u, j] / p[u]
    priority[u, j] = X[u, j] / fraction[u, j]      (> 1: below its share)
                   = X[u, j] · 1e9                  never ran (fraction "0")
                   = 0                              X = 0, or cannot run on j

Entries (u, j) are sorted by (priority, deficit, X) descending — the queue
discipline decides how types interleave — and taken greedily, skipping units
already scheduled this round and units wider than the GPUs left on the type:

- ``phased`` (default): type by type, first the entries with priority ≥ 1
  (at or below their share), then the rest, so a job above its share on the
  first type is not taken there before the type where it is behind;
- ``per_type``: type by type, Gavel's walk;
- ``global``: one queue across types (Gavel's ``enable_global_queue``);
- ``gavel``: Gavel's code as it is: the walk also takes entries of priority 0
  (X = 0 on the type, positive throughput) once the positive ones are served;
  no never-run boost (Gavel's prior keeps the fraction positive); exact ties
  go to the earlier job; a job the allocation does not name holds the GPUs
  its entry took but does not run (Gavel counts it, then skips it). Except
  for FIFO allocations (``skips_zero_priority``: policies named ``fifo*``,
  as Gavel's scheduler skips zero-priority entries for policies named
  ``FIFO*``): a FIFO job runs only on the type its allocation names. Walking
  its zero entries under a shuffled type order moved a job to whichever type
  came first every round (Gavel's static makespan experiment, 100 jobs: the
  critical job migrated 1,200–1,650 times, makespan 237 h vs 182 h published).

Then (``work_conserving``, not ``gavel``) idle GPUs go to the units still
waiting that can use them: those already running on the type first, then the
least served, then the tie-break.

Migration-aware rounds (``Sticky``, the Allocator's ``migration_cost``): a
unit that ran last round on type c with X[u, c] > 0 *stays* there unless its
share requires a move. With lag[u, j] = X[u, j]·present − received (rounds
behind its share on j) and the hysteresis H (rounds):

- its entries on other types are walked after every other entry, unless
  lag[u, j] − lag[u, c] > H (it is more than H rounds further behind there);
  if it then cannot stay (c is full of higher priorities), the walk is redone
  once with its entries in their normal places, so it moves rather than
  waits;
- its entry on c is sorted as if it had been present H more rounds
  (priority X·(present + H) / received): a running job keeps its GPUs until a
  waiting one is behind by about X·H rounds more (fewer preemptions);
- idle GPUs go first to waiting units that ran on that type last round.

Every lag stays within H (+ the integrality of rounds) of the default walk's,
so the long-run fractions still converge to X; a job is never held on a type
its X gives 0 to (no stay entry there). H = 0 never applies.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass

import numpy as np

from optsched.allocator.state import PRIOR_ROUNDS, PairMemory

NEVER_RUN = 1e9  # Gavel's X·1e9 for a zero fraction (not inf, so 2x stays larger)
QUEUES = ("phased", "per_type", "global", "gavel")


def skips_zero_priority(policy: str) -> bool:
    """Allocations whose zero entries the ``gavel`` walk skips: FIFO orders
    (Gavel's scheduler skips them for policies whose name starts with FIFO)."""
    return policy.startswith("fifo") or policy == "gandiva_fifo"

Units = list[list[tuple[tuple[int, ...], int]]]  # per column: (member jobs, width)


@dataclass(frozen=True)
class WalkOptions:
    queue: str = "phased"
    work_conserving: bool = True
    order: tuple[int, ...] = ()  # columns in walk order
    shuffle: bool = False  # a fresh permutation of ``order`` every round
    seed: int = 0

    def type_walk(self, digest: int) -> tuple[list[int], np.ndarray]:
        """This round's type order, and each column's place in it. Shuffled
        from (seed, a digest of the state), so a restored allocator shuffles
        exactly as the live one."""
        walk = list(self.order)
        if self.shuffle:
            walk = np.random.default_rng((self.seed, digest)).permutation(walk).tolist()
        pos = np.empty(len(walk), dtype=np.int64)
        pos[walk] = np.arange(len(walk))
        return walk, pos


@dataclass(frozen=True)
class Sticky:
    """Migration-aware walk: where each job ran last round and how far behind
    its share it is there (the unit it ran as, or the job alone)."""

    col: np.ndarray  # (n,) int: the column to stay on, -1: none (did not run, split, or X = 0 there)
    lag: np.ndarray  # (n,) lag on that column (rounds)
    hysteresis: float  # H (rounds)


@dataclass(frozen=True)
class Standing:
    """Each job's standing this round, in the order of the round's jobs."""

    x: np.ndarray  # (n, k) allocation, zero where the job cannot run
    received: np.ndarray  # (n, k) rounds received, prior included
    present: np.ndarray  # (n,) rounds present, prior included
    deficit: np.ndarray  # (n, k)
    tiebreak: np.ndarray  # (n,)
    ever: np.ndarray  # (n,) bool: ran before
    covered: np.ndarray  # (n,) bool: the allocation names the job
    usable: np.ndarray  # (n, k) bool: positive throughput and enough GPUs
    widths: list[int]  # scale factors
    held: Callable[[int], Container[int]]  # job row -> the columns it held last round


@dataclass(frozen=True)
class PairEntry:
    a: int  # rows of the members in the round's jobs
    b: int
    x: np.ndarray  # (k,) the pair's fractions
    memory: PairMemory | None  # None: the pair never ran nor was allocated


def job_priority(st: Standing, gavel: bool) -> np.ndarray:
    """priority = X / (received / present); X·1e9 for a unit that never ran
    ("gavel": only where nothing was received); 0 where X = 0."""
    fresh = (st.received <= 0) if gavel else ~st.ever[:, None] | (st.received <= 0)
    pri = st.x * st.present[:, None]
    np.divide(pri, st.received, out=pri, where=~fresh)
    if fresh.any():
        pri[fresh] = st.x[fresh] * NEVER_RUN
    return pri


def pair_priority(p: PairEntry, usable: np.ndarray) -> np.ndarray:
    m, k = p.memory, len(p.x)
    ran = m is not None and m.ran
    r = m.received if m is not None else np.full(k, PRIOR_ROUNDS)
    present = m.present if m is not None else PRIOR_ROUNDS
    ok = usable[p.a] & usable[p.b] & (p.x > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, np.where(ran & (r > 0), p.x * present / r, p.x * NEVER_RUN), 0.0)


def walk(st: Standing, pairs: list[PairEntry], opts: WalkOptions, capacity: np.ndarray, digest: int,
         sticky: Sticky | None = None, skip_zero: bool = False) -> Units:
    """The units that run this round, per column, in the order taken.
    ``skip_zero`` (FIFO allocations, see ``skips_zero_priority``): the
    ``gavel`` walk leaves out entries of priority 0 as the other queues do."""
    gavel = opts.queue == "gavel"
    pri = job_priority(st, gavel)
    # Pairs are packed only with the same scale factor (as Gavel does).
    pairs = [p for p in pairs if st.widths[p.a] == st.widths[p.b]]
    pair_pri = [pair_priority(p, st.usable) for p in pairs]
    queue = _entries(st, pri, pairs, pair_pri, gavel and not skip_zero)
    type_walk, pos = opts.type_walk(digest)
    if sticky is not None and sticky.hysteresis > 0 and (sticky.col >= 0).any():
        queue, demoted, holder = _sticky(queue, st, pairs, sticky)
        units, left, sched = _walk_once(queue, opts.queue, pos, st, pairs, capacity, gavel, demoted)
        # A unit that could not stay (its type filled with higher priorities)
        # moves rather than waits: walk again with its entries in place.
        stuck = [m for m in np.flatnonzero(sticky.col >= 0).tolist() if not sched[m]]
        if stuck:
            lift = np.isin(holder, stuck).any(axis=1)
            if (demoted & lift).any():
                units, left, sched = _walk_once(queue, opts.queue, pos, st, pairs, capacity, gavel, demoted & ~lift)
    else:
        units, left, sched = _walk_once(queue, opts.queue, pos, st, pairs, capacity, gavel, None)
    if not gavel and opts.work_conserving and sum(left) and not all(sched):
        _fill_idle(st, sched, left, units, type_walk, in_place_first=sticky is not None and sticky.hysteresis > 0)
    return units


def _walk_once(queue: "_Queue", discipline: str, pos, st: Standing, pairs, capacity, gavel: bool, demoted):
    units: Units = [[] for _ in range(len(capacity))]
    left = capacity.tolist()
    order = _order(queue, discipline, pos, demoted)
    sched = _take(zip(queue.unit[order].tolist(), queue.col[order].tolist()), st, pairs, left, units, gavel)
    return units, left, sched


def _sticky(q: "_Queue", st: Standing, pairs: list[PairEntry], sticky: Sticky):
    """Migration-aware entries: stay entries sorted with H more rounds
    present, entries that would move a unit without need demoted. Returns the
    queue, the demoted mask and each entry's member jobs (-1 padded)."""
    n = len(st.widths)
    solo = q.unit < n
    holder = np.full((len(q.unit), 2), -1, dtype=np.int64)
    holder[solo, 0] = q.unit[solo]
    lag = np.empty(len(q.unit))
    su, sc = q.unit[solo], q.col[solo]
    lag[solo] = st.x[su, sc] * st.present[su] - st.received[su, sc]
    present = np.empty(len(q.unit))
    present[solo] = st.present[su]
    for i in np.flatnonzero(~solo).tolist():
        p = pairs[q.unit[i] - n]
        holder[i] = (p.a, p.b)
        m = p.memory
        pr = m.present if m is not None else PRIOR_ROUNDS
        rc = m.received[q.col[i]] if m is not None else PRIOR_ROUNDS
        lag[i] = p.x[q.col[i]] * pr - rc
        present[i] = pr
    H = sticky.hysteresis
    demoted = np.zeros(len(q.unit), dtype=bool)
    stay = np.zeros(len(q.unit), dtype=bool)
    for h in range(2):
        mem = holder[:, h]
        has = mem >= 0
        home = np.full(len(q.unit), -1, dtype=np.int64)
        home[has] = sticky.col[mem[has]]
        at_home = has & (home >= 0)
        elsewhere = at_home & (q.col != home)
        base = np.zeros(len(q.unit))
        base[at_home] = sticky.lag[mem[at_home]]
        demoted |= elsewhere & (lag - base <= H)
        stay |= at_home & (q.col == home)
    pri = q.pri.copy()
    boost = stay & (pri > 0) & (pri < NEVER_RUN * 1e-3)
    pri[boost] *= (present[boost] + H) / present[boost]
    return _Queue(q.unit, q.col, pri, q.deficit, q.x, q.tiebreak), demoted, holder


@dataclass(frozen=True)
class _Queue:
    unit: np.ndarray  # entry -> job row (< n) or n + pair index
    col: np.ndarray
    pri: np.ndarray
    deficit: np.ndarray
    x: np.ndarray
    tiebreak: np.ndarray


def _entries(st: Standing, pri, pairs: list[PairEntry], pair_pri, gavel: bool) -> _Queue:
    """All (unit, type) entries with a positive priority ("gavel": every usable one)."""
    col, ent = np.nonzero((st.usable if gavel else pri > 0).T)
    q = [ent, col, pri[ent, col], st.deficit[ent, col], st.x[ent, col], st.tiebreak[ent]]
    n = len(st.widths)
    for i, (p, pp) in enumerate(zip(pairs, pair_pri)):
        cs = np.flatnonzero(pp > 0)
        d = p.memory.deficit if p.memory is not None else np.zeros(len(p.x))
        extra = [np.full(len(cs), n + i), cs, pp[cs], d[cs], p.x[cs],
                 np.full(len(cs), 0.5 * (st.tiebreak[p.a] + st.tiebreak[p.b]))]
        q = [np.concatenate([a, b]) for a, b in zip(q, extra)]
    return _Queue(*q)


# Values this close are one value: the LP's fractions carry solver noise of about 1e-9
# (0.33333333309 and 0.33333333427 for two equal shares), and ranking by that noise
# made a schedule turn on the 5th digit of a job's speed. Ties go to the next key.
TIE_RTOL = 1e-7


def tie_classes(v: np.ndarray, rtol: float = TIE_RTOL) -> np.ndarray:
    """Each value's rank among the distinct values of ``v``, where neighbours (in
    sorted order) within ``rtol`` (relative; absolute below 1) are one value.
    Monotone in ``v``, so it replaces ``v`` as a sort key."""
    v = np.asarray(v, dtype=float)
    if len(v) < 2:
        return np.zeros(len(v), dtype=np.int64)
    order = np.argsort(v, kind="stable")
    s = v[order]
    with np.errstate(invalid="ignore"):
        d = np.diff(s)
        close = np.isfinite(d) & (d <= rtol * np.maximum(1.0, np.maximum(np.abs(s[1:]), np.abs(s[:-1]))))
    # (a finite value next to inf is a step: its bound is inf too; equal infinities are one value)
    step = (s[1:] != s[:-1]) & ~close
    out = np.empty(len(v), dtype=np.int64)
    out[order] = np.concatenate([[0], np.cumsum(step)])
    return out


def _order(q: _Queue, discipline: str, pos: np.ndarray, demoted: np.ndarray | None = None) -> np.ndarray:
    """Entry order: (priority, deficit, X) descending, then the tie-break
    ("gavel": the earlier job); by type first for the per-type walks;
    demoted entries (migration-aware walk) after all others."""
    keys = [q.unit if discipline == "gavel" else q.tiebreak, -tie_classes(q.x), -tie_classes(q.deficit),
            -tie_classes(q.pri)]
    if discipline in ("per_type", "gavel"):
        keys.append(pos[q.col])
    elif discipline == "phased":
        keys += [pos[q.col], q.pri < 1.0 - TIE_RTOL]
    if demoted is not None:
        keys.append(demoted)
    return np.lexsort(keys)


def _take(queue: Iterable[tuple[int, int]], st: Standing, pairs: list[PairEntry], left: list[int], units: Units,
          gavel: bool) -> list[bool]:
    """Greedy walk down the queue of (unit, column) entries; returns which jobs are scheduled."""
    n, sfl = len(st.widths), st.widths
    sched = [False] * n
    unscheduled, total = n, sum(left)
    covered = st.covered
    for e, c in queue:
        if total == 0 or unscheduled == 0:
            break  # the rest of the queue can only be skipped
        if left[c] == 0:
            continue
        if e < n:
            if sched[e] or sfl[e] > left[c]:
                continue
            sched[e] = True
            unscheduled -= 1
            w = sfl[e]
            if covered[e] or not gavel:
                units[c].append(((e,), w))
        else:
            a, b = pairs[e - n].a, pairs[e - n].b
            if sched[a] or sched[b] or sfl[a] > left[c]:
                continue
            sched[a] = sched[b] = True
            unscheduled -= 2
            w = sfl[a]
            units[c].append(((a, b), w))
        left[c] -= w
        total -= w
    return sched


def _fill_idle(st: Standing, sched: list[bool], left: list[int], units: Units, type_walk: list[int],
               in_place_first: bool = False) -> None:
    """Work conservation: idle GPUs to waiting jobs — those already on the
    type first (no needless preemption or move), then the least served, then
    the tie-break. ``in_place_first`` (migration-aware): a first pass over
    every type takes only jobs that ran there, so a later type in the walk
    does not take a job that could continue in place. Few jobs wait here
    (mostly arrivals the allocation does not cover yet), so the candidates
    are sorted in Python."""
    sfl = st.widths
    waiting = [m for m in range(len(sfl)) if not sched[m]]
    can_use = st.usable[waiting].tolist()
    served = (st.received.sum(axis=1) / np.maximum(st.present, 1.0))[waiting].tolist()
    tb = st.tiebreak[waiting].tolist()
    was_on = [st.held(m) for m in waiting]
    passes = [(c, True) for c in type_walk] if in_place_first else []
    for c, only_here in passes + [(c, False) for c in type_walk]:
        if left[c] == 0:
            continue
        cand = [i for i, m in enumerate(waiting) if can_use[i][c] and not sched[m] and sfl[m] <= left[c]
                and (not only_here or c in was_on[i])]
        cand.sort(key=lambda i: (c not in was_on[i], served[i], tb[i]))  # stable: ties keep job order
        for i in cand:
            m = waiting[i]
            if left[c] == 0:
                break
            if sfl[m] > left[c]:
                continue
            sched[m] = True
            left[c] -= sfl[m]
            units[c].append(((m,), sfl[m]))


def units_from_counts(counts: np.ndarray) -> Units:
    """Configuration policies: every job runs on exactly its GPU counts (the
    policy made them fit; checked when the allocation was read)."""
    units: Units = [[] for _ in range(counts.shape[1])]
    for m, c in zip(*np.nonzero(counts)):
        units[c].append(((int(m),), int(counts[m, c])))
    return units
