"""The round-based allocator: from time fractions X[m, j] to the jobs that run
this round and their GPUs (Gavel's mechanism, docs/allocator.md).

The parts, in the order a round uses them:

- ``inputs``: the round's jobs and allocation in the allocator's columns, validated;
- ``ledger``: the period's books — rounds received / present, deficits, the
  allocation in force; a reset when the allocation changes;
- ``walk``: Gavel's priorities (X / fraction received) and the queue walk that
  picks the units (a job, or a packed pair) to run on each type (migration-aware
  with a ``migration_cost``: running jobs stay unless their share requires a move);
- ``assign``: units to GPUs through ``optsched.placement`` (lease extension);
- ``diff``: the round's Placement: started, preempted, continued, migrated;
- ``state``: the typed memory and its JSON form (the Snapshot's fields).

``Allocator`` below only coordinates them.

Configuration policies (``allocation.gpu_counts`` not None): job m runs on
exactly gpu_counts[m, j] GPUs of each type j with a positive count (several
types for task-level heterogeneity); all of them run — the policy made them
fit — and idle GPUs stay idle.

Differences from Gavel's code, on purpose: the fraction's denominator is the
rounds the job has been present since the reset (Gavel divides by the type's
busy time since the reset, which lets a late arrival catch up for rounds
before it existed); idle GPUs are filled in a second pass after every type's
positive-priority walk. ``queue="gavel"`` gives Gavel's walk back for
reproducing its numbers (bench/fidelity.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np

from optsched.allocator.assign import PlacementOptions, seat
from optsched.allocator.diff import Placement, round_diff
from optsched.allocator.inputs import AllocationView, InputReader, JobsView
from optsched.allocator.ledger import RESET_TOLERANCE, Books, Period, RoundBooks, commit, gather, is_reset, period, rows_of
from optsched.allocator.ledger import digest as ledger_digest
from optsched.allocator.state import PRIOR_ROUNDS, STATE_FIELDS, AllocatorState, Columns, members, pair_key
from optsched.allocator.walk import (
    NEVER_RUN, QUEUES, PairEntry, Standing, Sticky, Units, WalkOptions, skips_zero_priority, units_from_counts, walk,
)
from optsched.model import Allocation, Cluster, Instance, OptschedError, Snapshot
from optsched.placement import DEFAULT_GPUS_PER_SERVER, Layout, placement_policies

log = logging.getLogger("optsched.allocator")

# migration_cost → hysteresis H = 20 · migration_cost / round_length rounds: a job
# that alternates between types moves about every H rounds, so its moves cost
# ≲ 5% of the time it runs.
HYSTERESIS_PER_COST = 20.0


class Allocator:
    """Round-based mechanism + placement, for a simulator or a real cluster.

    >>> alloc = Allocator(snapshot.cluster)
    >>> placement = alloc.next_round(instance, allocation)   # every round
    >>> alloc.record(job, gpu_type, seconds)                 # it ran less than the round
    >>> alloc.remove(finished_job_ids)
    >>> alloc.state()                                        # JSON; restores exactly

    A job the allocator remembers that is missing from the jobs of a round,
    without ``remove()``, is removed (its counters and GPUs dropped) with a
    warning on the ``optsched.allocator`` logger: a job that leaves the
    snapshot has left the cluster.

    ``migration_cost`` (seconds a restart or move costs, as the runtime
    measures it): migration-aware rounds — a running job stays on its type
    and GPUs unless it is more than H = 20·migration_cost/round_length rounds
    further behind its share elsewhere, and keeps its GPUs until a waiting job
    is about X·H rounds further behind (walk.py). ``hysteresis`` sets H in
    rounds directly. 0 (default): Gavel-style rounds that ignore the cost.
    """

    def __init__(
        self,
        cluster: Cluster,
        placement: str = "consolidated",
        seed: int = 0,
        round_length: float = 360.0,
        placement_time_limit: float = 1.0,
        *,
        gpus_per_server: int = DEFAULT_GPUS_PER_SERVER,
        type_order: str | Sequence[str] = "fixed",
        work_conserving: bool = True,
        queue: str = "phased",
        migration_cost: float = 0.0,
        hysteresis: float | None = None,
    ):
        if placement not in placement_policies():
            raise OptschedError(f"placement: unknown policy {placement!r} (choose from {', '.join(placement_policies())})")
        if not round_length > 0:
            raise OptschedError(f"round_length: must be positive (got {round_length})")
        if not placement_time_limit > 0:
            raise OptschedError(f"placement_time_limit: must be positive (got {placement_time_limit})")
        if queue not in QUEUES:
            raise OptschedError(f"queue: unknown queue discipline {queue!r} (choose from {', '.join(QUEUES)})")
        if isinstance(migration_cost, bool) or not isinstance(migration_cost, (int, float)) \
                or not (np.isfinite(migration_cost) and migration_cost >= 0):
            raise OptschedError(f"migration_cost: must be a finite number of seconds >= 0 (got {migration_cost!r})")
        if hysteresis is not None and (isinstance(hysteresis, bool) or not isinstance(hysteresis, (int, float))
                                       or not (np.isfinite(hysteresis) and hysteresis >= 0)):
            raise OptschedError(f"hysteresis: must be a finite number of rounds >= 0 (got {hysteresis!r})")
        self.cluster = cluster
        self.placement = placement
        self.seed = int(seed)
        self.round_length = float(round_length)
        self.placement_time_limit = float(placement_time_limit)
        from optsched.checks import check_flag

        self.work_conserving = check_flag("work_conserving", work_conserving)
        self.queue = queue
        self.migration_cost = float(migration_cost)
        # Rounds of lag a running unit may fall behind elsewhere before it moves.
        self.hysteresis = float(hysteresis) if hysteresis is not None else \
            HYSTERESIS_PER_COST * self.migration_cost / self.round_length
        self.layout = Layout.from_cluster(cluster, gpus_per_server)
        self.cols = Columns.of(cluster.gpus, self.layout)
        self.gpu_types = self.cols.gpu_types
        self.walk_options = WalkOptions(queue, work_conserving, _type_order(type_order, cluster, self.cols),
                                        type_order == "shuffle", self.seed)
        self.placement_options = PlacementOptions(placement, self.placement_time_limit, self.seed, self.hysteresis > 0)
        self._slots = [tl.slots for tl in self.cols.types]
        self._inputs = InputReader(self.cols)
        self._state = AllocatorState.empty(self.cols.k)
        self._cache: dict = {}  # derived from the state, cleared when it is replaced

    # ------------------------------------------------------------------
    # State in and out
    # ------------------------------------------------------------------

    @classmethod
    def from_snapshot(cls, snap: Snapshot, placement: str = "consolidated", **options) -> "Allocator":
        """An allocator holding the state a snapshot carries; state of jobs not
        in the snapshot is dropped (they have finished)."""
        alloc = cls(snap.cluster, placement=placement, **options)
        alloc.load_state(snap.model_dump(include=set(STATE_FIELDS)), active={j.id for j in snap.jobs})
        return alloc

    def load_state(self, state: dict, active: set[str] | None = None) -> None:
        """Replace the memory with what ``state()`` returned (restores exactly,
        given the same constructor options). Validates everything first: a
        malformed field, a placement naming missing servers or GPUs, or two
        jobs on one GPU that are not a packed pair is an OptschedError naming
        the field, and nothing changes. Jobs not in ``active`` are dropped."""
        self._state = AllocatorState.from_dict(state, self.cols, active)
        self._cache = {}

    def state(self) -> dict:
        """JSON-able allocator state, named like the Snapshot fields that carry it."""
        return self._state.to_dict(self.cols)

    # ------------------------------------------------------------------
    # Events from the executor
    # ------------------------------------------------------------------

    def record(self, job_id: str, gpu_type: str, seconds: float) -> None:
        """The job actually ran ``seconds`` on ``gpu_type`` in the last round
        (e.g. it finished mid-round): replaces the full round next_round
        credited. A job that did not run there in the last round is an
        OptschedError. For a packed pair, the last call for either job sets
        the pair's credit."""
        st = self._state
        if job_id not in st.jobs.row:
            raise OptschedError(f"record: unknown job {job_id!r}")
        if gpu_type not in self.cols.index:
            raise OptschedError(f"record: unknown GPU type {gpu_type!r}")
        if not np.isfinite(seconds) or seconds < 0:
            raise OptschedError(f"record: seconds must be a finite non-negative number (got {seconds})")
        if seconds > self.round_length * (1 + 1e-9):  # (a session refuses the same; 1e6 s credited 2,778 rounds)
            raise OptschedError(f"record: seconds ({seconds:g}) exceed the round ({self.round_length:g} s)")
        c = self.cols.index[gpu_type]
        if c not in st.lease.gpus.get(job_id, {}):
            raise OptschedError(f"record: job {job_id!r} did not run on {gpu_type} in the last round (nothing to credit)")
        unit = st.lease.unit.get(job_id, job_id)
        credit = seconds / self.round_length
        delta = credit - st.credits.get((unit, c), 1.0)
        st.credits[(unit, c)] = credit
        if isinstance(unit, tuple):
            p = st.pairs.get(unit)
            if p is not None:
                p.received[c] = max(p.received[c] + delta, 0.0)
        else:
            r = st.jobs.row[job_id]
            st.jobs.received[r, c] = max(st.jobs.received[r, c] + delta, 0.0)

    def remove(self, job_ids: str | Iterable[str]) -> None:
        """Finished jobs leave: their GPUs are freed and their counters dropped.
        Removing a job twice is a no-op; a job never seen is an error."""
        ids = [job_ids] if isinstance(job_ids, str) else list(job_ids)
        unknown = [j for j in ids if j not in self._state.jobs.row and j not in self._state.removed]
        if unknown:
            raise OptschedError(f"remove: unknown job {unknown[0]!r}")
        self._forget(set(ids))

    def _forget(self, gone: set[str]) -> None:
        st = self._state
        st.forget(gone)
        st.removed |= gone
        st.credits = {k: v for k, v in st.credits.items() if not gone & set(members(k[0]))}

    # ------------------------------------------------------------------
    # The round
    # ------------------------------------------------------------------

    def next_round(self, jobs: Instance | Snapshot, allocation: Allocation) -> Placement:
        """Choose this round's jobs and GPUs. ``jobs``: the active jobs. Jobs the
        allocation does not name get X = 0 (they only fill idle GPUs). The
        allocation may name jobs that are not in ``jobs`` only while it is the
        allocation in force (they left since it was computed); a new
        allocation naming such a job is an OptschedError. Nothing changes in
        the allocator if this raises."""
        view = self._inputs.jobs(jobs)
        av = self._inputs.allocation(allocation, view)
        st, ids = self._state, view.ids
        at = rows_of(st.jobs, ids, self._cache)
        reset = self._is_reset(allocation, view, at, av)
        if reset and av.absent:
            raise OptschedError(f"allocation: job {av.absent[0]!r} is not among the active jobs "
                                f"(the allocation was computed for other jobs)")
        # Jobs that left without remove(): decide as if they were gone (as a
        # restore from the next snapshot would), forget them once committed.
        gone = self._gone(ids, at)
        lease = st.lease.without(gone) if gone else st.lease
        per = period(st, reset)
        # Ties: by arrival, then id (the view's rank).
        books = gather(st, per, at, ids, view.order)
        units = self._units(view, av, books, per, skips_zero_priority(allocation.policy))
        seats = seat(units, ids, lease, self.cols, self.placement_options)
        seats.notes[:0] = av.notes
        diff = round_diff(ids, seats, lease, books.running.tolist(), self._slots, round_no=st.round)
        commit(st, RoundBooks(ids, at, av.x, books, per, av.pairs, seats, diff), self._cache)
        st.adopt_next = False
        st.credits = {}
        st.round += 1
        if gone:
            log.warning("jobs %s left without remove(); removed", ", ".join(map(repr, sorted(gone))))
            self._forget(gone)
        self._cache["last"] = (allocation, view, st.jobs.version)
        return diff.placement

    def _is_reset(self, allocation: Allocation, view: JobsView, at, av: AllocationView) -> bool:
        st = self._state
        if st.adopt_next:
            return False
        last = self._cache.get("last")
        if last is not None and last[0] is allocation and last[1] is view and last[2] == st.jobs.version:
            return False  # the same inputs as last round: the same X, already in force
        return is_reset(st, view.ids, at, av.x, av.pairs)

    def _gone(self, ids: tuple[str, ...], at) -> set[str]:
        """Jobs in memory that are not in this round."""
        known = len(ids) if at.all_known else int(at.known.sum())
        if known == len(self._state.jobs.row):
            return set()
        return set(self._state.jobs.row) - set(ids)

    def _units(self, view: JobsView, av: AllocationView, books: Books, per: Period, skip_zero: bool = False) -> Units:
        if av.counts is not None:
            return units_from_counts(av.counts)
        ids, gpus = view.ids, self._state.lease.gpus  # a gone job's GPUs are never asked for
        standing = Standing(av.x, books.received, books.present, books.deficit, books.tiebreak, books.ever, av.covered,
                            view.usable, view.widths, lambda m: gpus.get(ids[m], ()))
        pairs = [PairEntry(a, b, xp, per.pairs.get(pair_key(ids[a], ids[b]))) for a, b, xp in av.pairs]
        digest = ledger_digest(books, per.pairs, ids) if self.walk_options.shuffle else 0
        sticky = self._sticky(ids, av, books, pairs) if self.hysteresis > 0 else None
        return walk(standing, pairs, self.walk_options, self.cols.capacity, digest, sticky, skip_zero)

    def _sticky(self, ids: tuple[str, ...], av: AllocationView, books: Books, pairs: list[PairEntry]) -> Sticky | None:
        """Where each running job stays (migration-aware walk): the type it ran
        on last round, as the unit it ran in if that pair is still allocated
        there, else alone; never a type its X gives 0 to."""
        lease, n = self._state.lease, len(ids)
        col, lag = np.full(n, -1, dtype=np.int64), np.zeros(n)
        pair_at = {(p.a, p.b): p for p in pairs}
        pos = {j: m for m, j in enumerate(ids)} if any(isinstance(u, tuple) for u in lease.unit.values()) else {}
        for m in np.flatnonzero(books.running).tolist():
            per = lease.gpus.get(ids[m])
            if per is None or len(per) != 1:
                continue
            (c,) = per
            unit = lease.unit.get(ids[m])
            if isinstance(unit, tuple):
                a, b = sorted((pos.get(unit[0], -1), pos.get(unit[1], -1)))
                p = pair_at.get((a, b))
                if p is not None and p.x[c] > 0:
                    mem = p.memory
                    present = mem.present if mem is not None else PRIOR_ROUNDS
                    received = mem.received[c] if mem is not None else PRIOR_ROUNDS
                    col[m], lag[m] = c, p.x[c] * present - received
                    continue
            if av.x[m, c] > 0:
                col[m], lag[m] = c, av.x[m, c] * books.present[m] - books.received[m, c]
        return Sticky(col, lag, self.hysteresis) if (col >= 0).any() else None


def _type_order(type_order, cluster: Cluster, cols: Columns) -> tuple[int, ...]:
    if type_order in ("fixed", "shuffle"):
        return tuple(cols.index[t] for t in cluster.gpus)
    unknown = [t for t in type_order if t not in cols.index]
    if unknown or sorted(type_order) != sorted(cols.gpu_types):
        raise OptschedError(f"type_order: must list each GPU type once ({', '.join(cluster.gpus)})")
    return tuple(cols.index[t] for t in type_order)


__all__ = ["Allocator", "Placement", "PRIOR_ROUNDS", "NEVER_RUN", "QUEUES", "RESET_TOLERANCE"]
