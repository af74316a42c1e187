"""The round-based allocator: from time fractions X[m, j] to the jobs that run
this round and their GPUs (Gavel's mechanism, DESIGN.md §6).

The parts, in the order a round uses them:

- ``inputs``: the round's jobs and allocation in the allocator's columns, validated;
- ``ledger``: the period's books — rounds received / present, deficits, the
  allocation in force; a reset when the allocation changes;
- ``walk``: Gavel's priorities (X / fraction received) and the queue walk that
  picks the units (a job, or a packed pair) to run on each type;
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
from optsched.allocator.walk import NEVER_RUN, QUEUES, PairEntry, Standing, Units, WalkOptions, units_from_counts, walk
from optsched.model import Allocation, Cluster, Instance, OptschedError, Snapshot
from optsched.placement import DEFAULT_GPUS_PER_SERVER, Layout, placement_policies

log = logging.getLogger("optsched.allocator")


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
    ):
        if placement not in placement_policies():
            raise OptschedError(f"placement: unknown policy {placement!r} (choose from {', '.join(placement_policies())})")
        if not round_length > 0:
            raise OptschedError(f"round_length: must be positive (got {round_length})")
        if not placement_time_limit > 0:
            raise OptschedError(f"placement_time_limit: must be positive (got {placement_time_limit})")
        if queue not in QUEUES:
            raise OptschedError(f"queue: unknown queue discipline {queue!r} (choose from {', '.join(QUEUES)})")
        self.cluster = cluster
        self.placement = placement
        self.seed = int(seed)
        self.round_length = float(round_length)
        self.placement_time_limit = float(placement_time_limit)
        self.work_conserving = work_conserving
        self.queue = queue
        self.layout = Layout.from_cluster(cluster, gpus_per_server)
        self.cols = Columns.of(cluster.gpus, self.layout)
        self.gpu_types = self.cols.gpu_types
        self.walk_options = WalkOptions(queue, work_conserving, _type_order(type_order, cluster, self.cols),
                                        type_order == "shuffle", self.seed)
        self.placement_options = PlacementOptions(placement, self.placement_time_limit, self.seed)
        self._slots = [tl.slots for tl in self.cols.types]
        self._inputs = InputReader(self.cols)
        self._state = AllocatorState.empty(self.cols.k)
        self._cache: dict = {}  # derived from the state, cleared when it is replaced
        self._credits: dict = {}  # record() corrections this round: (unit, column) -> rounds credited
        self._removed: set[str] = set()
        self._round = 0

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
        self._state = AllocatorState.from_dict(state, self.cols, self.seed, active)
        self._cache, self._credits, self._removed = {}, {}, set()

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
        c = self.cols.index[gpu_type]
        if c not in st.lease.gpus.get(job_id, {}):
            raise OptschedError(f"record: job {job_id!r} did not run on {gpu_type} in the last round (nothing to credit)")
        unit = st.lease.unit.get(job_id, job_id)
        credit = seconds / self.round_length
        delta = credit - self._credits.get((unit, c), 1.0)
        self._credits[(unit, c)] = credit
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
        unknown = [j for j in ids if j not in self._state.jobs.row and j not in self._removed]
        if unknown:
            raise OptschedError(f"remove: unknown job {unknown[0]!r}")
        self._forget(set(ids))

    def _forget(self, gone: set[str]) -> None:
        self._state.forget(gone)
        self._removed |= gone
        self._credits = {k: v for k, v in self._credits.items() if not gone & set(members(k[0]))}

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
        books = gather(st, per, at, ids, self.seed)
        units = self._units(view, av, books, per)
        seats = seat(units, ids, lease, self.cols, self.placement_options)
        seats.notes[:0] = av.notes
        diff = round_diff(ids, seats, lease, books.running.tolist(), self._slots, round_no=self._round)
        commit(st, RoundBooks(ids, at, av.x, books, per, av.pairs, seats, diff), self.seed, self._cache)
        st.adopt_next = False
        self._credits = {}
        self._round += 1
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

    def _units(self, view: JobsView, av: AllocationView, books: Books, per: Period) -> Units:
        if av.counts is not None:
            return units_from_counts(av.counts)
        ids, gpus = view.ids, self._state.lease.gpus  # a gone job's GPUs are never asked for
        standing = Standing(av.x, books.received, books.present, books.deficit, books.tiebreak, books.ever, av.covered,
                            view.usable, view.widths, lambda m: gpus.get(ids[m], ()))
        pairs = [PairEntry(a, b, xp, per.pairs.get(pair_key(ids[a], ids[b]))) for a, b, xp in av.pairs]
        digest = ledger_digest(books, per.pairs, ids) if self.walk_options.shuffle else 0
        return walk(standing, pairs, self.walk_options, self.cols.capacity, digest)


def _type_order(type_order, cluster: Cluster, cols: Columns) -> tuple[int, ...]:
    if type_order in ("fixed", "shuffle"):
        return tuple(cols.index[t] for t in cluster.gpus)
    unknown = [t for t in type_order if t not in cols.index]
    if unknown or sorted(type_order) != sorted(cols.gpu_types):
        raise OptschedError(f"type_order: must list each GPU type once ({', '.join(cluster.gpus)})")
    return tuple(cols.index[t] for t in type_order)


__all__ = ["Allocator", "Placement", "PRIOR_ROUNDS", "NEVER_RUN", "QUEUES", "RESET_TOLERANCE"]
