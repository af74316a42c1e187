"""The round-based allocator: from time fractions X[m, j] to the jobs that run
this round and their GPUs (Gavel's mechanism, DESIGN.md §6).

Every round, for job m and type j, with r[m, j] the rounds m received on j
since the last allocation reset (or its arrival) and p[m] the rounds m has been
active since then — both starting at Gavel's prior of half a round:

    fraction[m, j] = r[m, j] / p[m]
    priority[m, j] = X[m, j] / fraction[m, j]   (below their share: > 1)
                   = X[m, j] · 1e9 for a job that has never run (never-run first)
                   = 0 when X[m, j] = 0 or the job cannot run on j.

Units — a job on exactly ``scale_factor`` GPUs, or a packed pair (same scale
factor) sharing its GPUs, only on types where the allocation gives the pair a
fraction — are taken greedily in queue order, skipping jobs already scheduled
this round and units wider than the GPUs left on the type. Queue disciplines
(``queue=``), each sorting by (priority, deficit, X) descending within a type:

- ``"per_type"``: type by type in a fixed order — Gavel's walk;
- ``"phased"`` (default): the same walk, first over entries with priority ≥ 1
  (at or below their share), then over the rest (above their share), so a
  job above its share on the first type is not taken there before the type
  where it is behind. Measured (500 rounds, max |fraction − X|): equal to
  per_type on contended clusters (0.005 vs 0.004, bench/allocator_bench.py);
  on six single-GPU instances whose X leaves GPUs idle, worst gap 0.33 vs 0.58
  (per_type) and 0.58 (global);
- ``"global"``: one queue across types (Gavel's ``enable_global_queue``);
- ``"gavel"``: Gavel's code as it is, for reproducing its numbers: the
  per-type walk also takes entries of priority 0 (X = 0 on that type, positive
  throughput) once the positive ones are served, so there is no separate idle
  pass (``work_conserving`` is ignored); priority = X·present/received without
  the never-run boost (Gavel's prior keeps the fraction positive); exact ties
  go to the earlier job (the order of ``jobs``); and a job the allocation does
  not cover (arrived since it was computed) waits for the next allocation
  while still holding the GPUs its queue entry took (Gavel's scheduler counts
  it in the round, then skips it when assigning workers).

The type order is the order of ``cluster.gpus`` (``type_order="shuffle"``:
a seeded permutation per round, as Gavel's code does for most policies; or an
explicit list). Then (``work_conserving=True``) idle GPUs go to the remaining
jobs that can use them, those already running on the type first, then the
least served. Placement (optsched.placement) maps the units onto servers; a
continuing job keeps its GPUs when they are free (lease extension).

The allocation is *reset* when the Allocation passed in changes: a different
object whose X differs from the one in force by more than 1e-9 for some active
job (so re-solving an unchanged problem, or reloading state from a snapshot
whose ``prior_allocation`` matches, continues the period). At a reset the
deficit of every job accumulates X·(rounds present) − (rounds received) over the
closing period and the counters restart at the prior; surviving jobs keep their
GPUs and deficits.

Differences from Gavel's code, on purpose: the fraction's denominator is the
rounds the job has been present since the reset (Gavel divides by the type's
busy time since the reset, which lets a late arrival catch up for rounds before
it existed); idle GPUs are filled in a second pass after every type's
positive-priority walk (Gavel's single walk can put a job on a type where its X
is 0 before the walk reaches the type it was allocated).
``queue="gavel"`` gives Gavel's walk back for reproducing its numbers
(bench/fidelity.py). The remaining differences do not change the order within
a type there: the jobs that run all started the period at the same reset, so
dividing by rounds present or by the type's busy time scales every priority on
a type alike; resetting at every recomputation instead of only when X changes
measured no difference on the Gavel run (17.09 h / 23.84 h either way).

Configuration policies (``allocation.gpu_counts`` not None): job m runs on
exactly gpu_counts[m, j] GPUs of each type j with a positive count (several
types for task-level heterogeneity); all of them run — the policy made them
fit — and idle GPUs stay idle.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from optsched.model import Allocation, Cluster, GpuSlot, Instance, OptschedError, Snapshot
from optsched.placement import DEFAULT_GPUS_PER_SERVER, PLACEMENT_POLICIES, Layout, place, place_greedy_fast

PRIOR_ROUNDS = 0.5  # Gavel: every job starts a period with half a round received on every type
NEVER_RUN = 1e9  # Gavel's X·1e9 for a zero fraction (not inf, so 2x stays larger); here: never ran
RESET_TOLERANCE = 1e-9
QUEUES = ("phased", "per_type", "global", "gavel")


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


@dataclass
class _PairState:
    received: np.ndarray  # (k,)
    present: float = PRIOR_ROUNDS
    prior: float = PRIOR_ROUNDS
    deficit: np.ndarray = field(default_factory=lambda: np.zeros(0))
    x: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ran: bool = False


@dataclass(frozen=True)
class _JobsView:
    """What the round needs from an Instance, in the allocator's columns."""

    inst: Instance
    key: tuple  # (job ids, gpu types, throughput shape/dtype, scale factor dtype, their bytes)
    ids: tuple[str, ...]
    sf: np.ndarray  # (n,) int64
    sfl: list[int]
    usable: np.ndarray  # (n, k) bool: positive throughput and enough GPUs of the type


class Allocator:
    """Round-based mechanism + placement. Holds, per job, the rounds received
    per type since the last allocation reset and the current placement.

    >>> alloc = Allocator(snapshot.cluster)
    >>> placement = alloc.next_round(instance, allocation)   # every round
    >>> alloc.remove(finished_job_ids)
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
        if placement not in PLACEMENT_POLICIES:
            raise OptschedError(f"placement: unknown policy {placement!r} (choose from {', '.join(PLACEMENT_POLICIES)})")
        if not round_length > 0:
            raise OptschedError(f"round_length: must be positive (got {round_length})")
        if not placement_time_limit > 0:
            raise OptschedError(f"placement_time_limit: must be positive (got {placement_time_limit})")
        self.cluster = cluster
        self.placement = placement
        self.seed = int(seed)
        self.round_length = float(round_length)
        self.placement_time_limit = float(placement_time_limit)
        self.work_conserving = work_conserving
        if queue not in QUEUES:
            raise OptschedError(f"queue: unknown queue discipline {queue!r} (choose from {', '.join(QUEUES)})")
        self.queue = queue
        self.layout = Layout.from_cluster(cluster, gpus_per_server)
        self.gpu_types: tuple[str, ...] = tuple(sorted(cluster.gpus))  # columns, as in Instance
        self._col = {t: c for c, t in enumerate(self.gpu_types)}
        self._capacity = np.array([cluster.gpus[t] for t in self.gpu_types], dtype=np.int64)
        if type_order in ("fixed", "shuffle"):
            self._walk = [self._col[t] for t in cluster.gpus]
            self._shuffle = type_order == "shuffle"
        else:
            unknown = [t for t in type_order if t not in self._col]
            if unknown or sorted(type_order) != sorted(self.gpu_types):
                raise OptschedError(f"type_order: must list each GPU type once ({', '.join(cluster.gpus)})")
            self._walk = [self._col[t] for t in type_order]
            self._shuffle = False
        self._walk_pos = np.empty(len(self.gpu_types), dtype=np.int64)  # column -> its place in the walk
        self._walk_pos[self._walk] = np.arange(len(self._walk))
        self._layouts = [self.layout.types[t] for t in self.gpu_types]  # per column
        self._slots = [tl.slots for tl in self._layouts]
        k = len(self.gpu_types)
        self._row: dict[str, int] = {}
        self._rows_version = 0  # bumped whenever rows are added, removed or moved
        self._ids: list[str | None] = []
        self._received = np.zeros((0, k))
        self._present = np.zeros(0)
        self._prior = np.zeros(0)
        self._deficit = np.zeros((0, k))
        self._x = np.zeros((0, k))
        self._ever = np.zeros(0, dtype=bool)
        self._running = np.zeros(0, dtype=bool)  # ran in the last round
        self._tiebreak = np.zeros(0)
        self._removed: set[str] = set()
        self._pairs: dict[tuple[str, str], _PairState] = {}
        # Current placement: job -> {column: GPU numbers}, and the unit it ran in
        # (its own id, or the sorted pair of ids).
        self._gpus: dict[str, dict[int, np.ndarray]] = {}
        self._unit: dict[str, str | tuple[str, str]] = {}
        # The slots of each job in the last Placement (the tuple for _gpus[j] as
        # it is; reused while the job keeps its GPUs).
        self._assignments: dict[str, tuple[GpuSlot, ...]] = {}
        self._x_in_place: tuple = (None, None)  # (X, rows) last written to _x and _deficit by _commit
        self._last_credit: dict[tuple[str | tuple[str, str], int], float] = {}
        self._allocation: Allocation | None = None
        self._adopt_first = False  # loaded state without prior_allocation: continue its period
        self._round = 0
        self._cache: dict = {}

    # ------------------------------------------------------------------
    # State in and out
    # ------------------------------------------------------------------

    @classmethod
    def from_snapshot(cls, snap: Snapshot, placement: str = "consolidated", **options) -> "Allocator":
        """An allocator holding the state a snapshot carries (rounds_received,
        rounds_present, deficits, placement, prior_allocation)."""
        alloc = cls(snap.cluster, placement=placement, **options)
        alloc.load_state(snap.model_dump(include={"rounds_received", "rounds_present", "deficits", "placement", "prior_allocation"}),
                         active={j.id for j in snap.jobs})
        return alloc

    def load_state(self, state: dict, active: set[str] | None = None) -> None:
        """Load the fields ``state()`` returns. Validates everything before
        changing anything; a placement naming missing servers or GPUs, or two
        jobs on one GPU that are not a packed pair, is an OptschedError.
        Jobs not in ``active`` (when given) are dropped: they have finished."""
        keep = (lambda j: True) if active is None else (lambda j: j in active)
        received = {j: v for j, v in (state.get("rounds_received") or {}).items() if keep(j)}
        present = {j: v for j, v in (state.get("rounds_present") or {}).items() if keep(j)}
        deficits = {j: v for j, v in (state.get("deficits") or {}).items() if keep(j)}
        prior = {j: v for j, v in (state.get("prior_allocation") or {}).items() if keep(j)}
        raw_placement = {j: v for j, v in (state.get("placement") or {}).items() if keep(j)}
        for name, table in (("rounds_received", received), ("deficits", deficits), ("prior_allocation", prior)):
            for j, per_type in table.items():
                for t, v in per_type.items():
                    if t not in self._col:
                        raise OptschedError(f"{name}[{j!r}]: unknown GPU type {t!r}")
                    if not np.isfinite(v) or (name != "deficits" and v < 0):
                        raise OptschedError(f"{name}[{j!r}][{t!r}]: must be a finite non-negative number (got {v})")
        for j, v in present.items():
            if not np.isfinite(v) or v < 0:
                raise OptschedError(f"rounds_present[{j!r}]: must be a finite non-negative number (got {v})")
        gpus: dict[str, dict[int, np.ndarray]] = {}
        holder: dict[tuple[int, int], list[str]] = {}
        for j, slots in raw_placement.items():
            per: dict[int, list[int]] = {}
            for i, s in enumerate(slots):
                s = s if isinstance(s, GpuSlot) else GpuSlot.model_validate(s)
                t, g = self.layout.locate(s, f"placement[{j!r}][{i}]")
                per.setdefault(self._col[t], []).append(g)
                holder.setdefault((self._col[t], g), []).append(j)
            gpus[j] = {c: np.array(sorted(set(v)), dtype=np.int64) for c, v in per.items()}
        unit: dict[str, str | tuple[str, str]] = {j: j for j in gpus}
        for (c, g), js in holder.items():
            if len(js) == 1:
                continue
            a, b = sorted(js)[:2]
            if len(js) > 2 or not _same_gpus(gpus[a], gpus[b]):
                t = self.gpu_types[c]
                slot = self.layout.types[t].slots[g]
                raise OptschedError(
                    f"placement: GPU {_slot_name(slot)} is held by {', '.join(map(repr, js))} (only a packed pair may share GPUs)"
                )
            unit[a] = unit[b] = (a, b)
        # Validated: apply.
        ids = list(dict.fromkeys([*received, *present, *deficits, *prior, *gpus]))
        self._append_rows([j for j in ids if j not in self._row])
        longest = max((sum(v.values()) for v in received.values()), default=0.0)
        for j in ids:
            r = self._row[j]
            self._received[r] = PRIOR_ROUNDS  # types the state does not list: the prior
            self._prior[r] = PRIOR_ROUNDS
            for t, v in received.get(j, {}).items():
                self._received[r, self._col[t]] = v
            for t, v in deficits.get(j, {}).items():
                self._deficit[r, self._col[t]] = v
            for t, v in prior.get(j, {}).items():
                self._x[r, self._col[t]] = v
            ran = j in gpus or sum(received.get(j, {}).values()) > 0
            # Without rounds_present, assume the job was present as long as the
            # longest-served job (the period length when some job ran every round).
            self._present[r] = present.get(j, max(longest, sum(received.get(j, {}).values()), PRIOR_ROUNDS))
            self._ever[r] = ran
        self._running[:] = False
        for j in gpus:
            self._running[self._row[j]] = True
        self._gpus, self._unit = gpus, unit
        self._assignments = {}
        self._x_in_place = (None, None)
        self._allocation = None
        self._adopt_first = bool(received or gpus) and not prior

    def state(self) -> dict:
        """JSON-able allocator state, named like the Snapshot fields that carry it."""
        t = self.gpu_types

        def table(a: np.ndarray) -> dict:
            return {
                j: {t[c]: float(a[r, c]) for c in np.flatnonzero(a[r])}
                for j, r in self._row.items()
                if a[r].any()
            }

        placement = {}
        for j, per in self._gpus.items():
            slots = [self.layout.types[t[c]].slots[g] for c, gs in sorted(per.items()) for g in gs]
            placement[j] = [{"server": s.server, "gpu_type": s.gpu_type, "gpu": s.gpu} for s in slots]
        return {
            "rounds_received": table(self._received),
            "rounds_present": {j: float(self._present[r]) for j, r in self._row.items()},
            "deficits": table(self._deficit),
            "prior_allocation": table(self._x),
            "placement": placement,
        }

    # ------------------------------------------------------------------
    # Events from the executor
    # ------------------------------------------------------------------

    def record(self, job_id: str, gpu_type: str, seconds: float) -> None:
        """The job actually ran ``seconds`` on ``gpu_type`` in the last round
        (e.g. it finished mid-round). Replaces the full round next_round
        counted for it on that type; adds to it if none was counted. For a
        packed pair, the last call for either job sets the pair's credit."""
        if job_id not in self._row:
            raise OptschedError(f"record: unknown job {job_id!r}")
        if gpu_type not in self._col:
            raise OptschedError(f"record: unknown GPU type {gpu_type!r}")
        if not np.isfinite(seconds) or seconds < 0:
            raise OptschedError(f"record: seconds must be a finite non-negative number (got {seconds})")
        c = self._col[gpu_type]
        unit = self._unit.get(job_id, job_id)
        credit = seconds / self.round_length
        delta = credit - self._last_credit.get((unit, c), 0.0)
        self._last_credit[(unit, c)] = credit
        if isinstance(unit, tuple):
            if unit in self._pairs:
                ps = self._pairs[unit]
                ps.received[c] = max(ps.received[c] + delta, 0.0)
        else:
            r = self._row[job_id]
            self._received[r, c] = max(self._received[r, c] + delta, 0.0)

    def remove(self, job_ids: str | Iterable[str]) -> None:
        """Finished jobs leave: their GPUs are freed and their counters dropped.
        Removing a job twice is a no-op; a job never seen is an error."""
        ids = [job_ids] if isinstance(job_ids, str) else list(job_ids)
        unknown = [j for j in ids if j not in self._row and j not in self._removed]
        if unknown:
            raise OptschedError(f"remove: unknown job {unknown[0]!r}")
        gone = set(ids)
        for j in ids:
            r = self._row.pop(j, None)
            if r is not None:
                self._ids[r] = None
                self._running[r] = False
                self._rows_version += 1
            self._gpus.pop(j, None)
            self._unit.pop(j, None)
            self._assignments.pop(j, None)
            self._removed.add(j)
        for key in [p for p in self._pairs if gone & set(p)]:
            del self._pairs[key]
        for j, u in list(self._unit.items()):  # a pair partner now runs alone
            if isinstance(u, tuple) and gone & set(u):
                self._unit[j] = j
        self._last_credit = {k: v for k, v in self._last_credit.items() if not (gone & set(_members(k[0])))}
        if len(self._ids) > 64 and len(self._row) < len(self._ids) // 2:
            self._compact()

    # ------------------------------------------------------------------
    # The round
    # ------------------------------------------------------------------

    def next_round(self, jobs: Instance | Snapshot, allocation: Allocation) -> Placement:
        """Choose this round's jobs and GPUs. ``jobs``: the active jobs. Jobs the
        allocation does not cover get X = 0 (they only fill idle GPUs); an
        allocation naming a job never seen is an OptschedError; jobs the
        allocation names that were removed are ignored. Nothing changes in the
        allocator if this raises."""
        view = self._view(self._instance(jobs))
        ids, sf, usable = view.ids, view.sf, view.usable
        n, k = len(ids), len(self.gpu_types)
        X, covered, pairs, counts, allocation_notes = self._read_allocation(allocation, view)
        notes = list(allocation_notes)

        rows, known, all_known = self._rows(ids)
        reset = self._is_reset(allocation, ids, rows, known, X, pairs)
        if reset:
            full = self._reset_arrays()
            pair_state = self._reset_pairs()
        else:
            full = None
            pair_state = self._pairs
        src = full or {"received": self._received, "present": self._present, "deficit": self._deficit}
        if all_known:  # the common case: fancy indexing copies
            rec, pres = src["received"][rows], src["present"][rows]
            deficit, tiebreak = src["deficit"][rows], self._tiebreak[rows]
            ever = self._ever[rows]
            was = self._running[rows]
        else:
            rec, pres = np.full((n, k), PRIOR_ROUNDS), np.full(n, PRIOR_ROUNDS)  # a new job's prior
            deficit, tiebreak = np.zeros((n, k)), np.zeros(n)
            rec[known] = src["received"][rows[known]]
            pres[known] = src["present"][rows[known]]
            deficit[known] = src["deficit"][rows[known]]
            tiebreak[known] = self._tiebreak[rows[known]]
            for m in np.flatnonzero(~known):
                tiebreak[m] = _tiebreak(self.seed, ids[m])
            ever = np.zeros(n, dtype=bool)
            ever[known] = self._ever[rows[known]]
            was = np.zeros(n, dtype=bool)
            was[known] = self._running[rows[known]]

        units: list[list[tuple[tuple[int, ...], int]]] = [[] for _ in range(k)]  # per column: (members, width)
        if counts is not None:
            self._units_from_counts(counts, units)
        else:
            self._walk_priorities(X, rec, pres, deficit, tiebreak, usable, sf, view.sfl, pairs, pair_state, units, ids, ever,
                                  covered)

        # Placement, type by type. A unit keeps its previous GPUs (lease) when
        # it ran on the type last round as the same unit with the same width.
        solo_m: list[int] = []  # one-job units: job, column
        solo_c: list[int] = []
        pair_units: list = []  # (key, column, members)
        last_credit: dict = {}  # (unit key, column) -> rounds credited; record() corrects it
        held_c, held_g = [-1] * n, [None] * n  # per job: its column and GPU numbers this round
        split: dict[int, dict[int, np.ndarray]] = {}  # jobs on several types: column -> GPU numbers
        key_of: list = [None] * n
        limit = self.placement_time_limit / max(1, sum(1 for u in units if u))
        prev_unit, prev_gpus = self._unit, self._gpus
        greedy = self.placement != "cpsat"
        consolidate = self.placement == "consolidated"
        for c, us in enumerate(units):
            if not us:
                continue
            tl = self._layouts[c]
            keys, prev, widths = [], [], []
            for mem, w in us:
                if len(mem) == 1:
                    key = first = ids[mem[0]]
                else:
                    key = _pair_key(ids[mem[0]], ids[mem[1]])
                    first = key[0]
                keys.append(key)
                widths.append(w)
                prev.append(prev_gpus[first].get(c) if prev_unit.get(first) == key else None)
            gs = place_greedy_fast(tl, widths, prev, consolidate) if greedy else None
            if gs is None:  # a wide unit to place, overlapping leases, or CP-SAT
                res = place(tl, np.array(widths, dtype=np.int64), prev, self.placement, limit, self.seed, score=False)
                gs = res.gpus
                if res.note:
                    notes.append(f"{tl.gpu_type}: {res.note}")
            for (mem, _), key, g in zip(us, keys, gs):
                last_credit[(key, c)] = 1.0
                if len(mem) == 1:
                    solo_m.append(mem[0])
                    solo_c.append(c)
                else:
                    pair_units.append((key, c, mem))
                for m in mem:
                    if held_c[m] >= 0:  # a configuration policy put the job on several types
                        split.setdefault(m, {held_c[m]: held_g[m]})[c] = g
                    held_c[m], held_g[m], key_of[m] = c, g, key

        # The round's result, job by job in the order of ``jobs``. A job that
        # kept its GPUs keeps its GPU dict and slot tuple from last round.
        slots = self._slots
        prev_assign = self._assignments
        gpus_now: dict[str, dict[int, np.ndarray]] = {}
        unit_now: dict[str, str | tuple[str, str]] = {}
        assignments: dict[str, tuple[GpuSlot, ...]] = {}
        started, preempted, continued, migrated, ran = [], [], [], [], []
        was_l = was.tolist()
        for m, j in enumerate(ids):
            c = held_c[m]
            if c < 0:
                if was_l[m]:
                    preempted.append(j)
                continue
            old = prev_gpus.get(j)
            if m not in split:
                g = held_g[m]
                a = prev_assign.get(j)
                if old is not None and a is not None and len(old) == 1 and old.get(c) is g:
                    per = old
                else:
                    per = {c: g}
                    a = tuple(map(slots[c].__getitem__, g.tolist()))
            else:
                per = split[m]
                a = tuple(slots[c][i] for c, g in sorted(per.items()) for i in g.tolist())
            ran.append(m)
            gpus_now[j] = per
            assignments[j] = a
            unit_now[j] = key_of[m]
            if was_l[m]:
                continued.append(j)
                if per is not old and not _same_gpus(per, old):
                    migrated.append(j)
            else:
                started.append(j)
        result = Placement(
            assignments=assignments,
            started=tuple(started),
            preempted=tuple(preempted),
            continued=tuple(continued),
            migrated=tuple(migrated),
            note="; ".join(notes),
            round=self._round,
        )
        self._commit(ids, rows, all_known, X, rec, pres, deficit, tiebreak, full, pair_state, pairs, (solo_m, solo_c),
                     pair_units, ran, gpus_now, unit_now, assignments, last_credit, allocation)
        return result

    # ------------------------------------------------------------------
    # Internals
    # ------------------------------------------------------------------

    def _walk_priorities(self, X, rec, pres, deficit, tiebreak, usable, sf, sfl, pairs, pair_state, units, ids, ever,
                         covered) -> None:
        n = len(ids)
        gavel = self.queue == "gavel"
        # priority = X·present/received; X·1e9 for a job that never ran (or has
        # no rounds received; "gavel": only the latter); 0 where X = 0 (X ≥ 0,
        # masked to usable types).
        fresh = (rec <= 0) if gavel else ~ever[:, None] | (rec <= 0)
        pri = X * pres[:, None]
        np.divide(pri, rec, out=pri, where=~fresh)
        if fresh.any():
            pri[fresh] = X[fresh] * NEVER_RUN
        # Pairs: (a, b, width, pair priority per type, deficit, x) where allowed.
        pair_rows = []
        for a, b, xp in pairs:
            if sf[a] != sf[b]:
                continue  # Gavel packs only jobs of the same scale factor
            key = _pair_key(ids[a], ids[b])
            ps = pair_state.get(key)
            ran = ps is not None and ps.ran
            r = ps.received if ps is not None else np.full(len(xp), PRIOR_ROUNDS)
            p = ps.present if ps is not None else PRIOR_ROUNDS
            d = ps.deficit if ps is not None else np.zeros(len(xp))
            ok = usable[a] & usable[b] & (xp > 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                pp = np.where(ok, np.where(ran & (r > 0), xp * p / r, xp * NEVER_RUN), 0.0)
            pair_rows.append((a, b, pp, d, xp))
        # All (unit, type) entries with a positive priority ("gavel": every
        # usable one), then one walk in the order the queue discipline gives.
        col, ent = np.nonzero((usable if gavel else pri > 0).T)
        k_pri, k_def, k_x, k_tb = pri[ent, col], deficit[ent, col], X[ent, col], tiebreak[ent]
        for i, (a, b, pp, d, xp) in enumerate(pair_rows):
            cs = np.flatnonzero(pp > 0)
            ent = np.concatenate([ent, np.full(len(cs), n + i)])
            col = np.concatenate([col, cs])
            k_pri, k_def, k_x = np.concatenate([k_pri, pp[cs]]), np.concatenate([k_def, d[cs]]), np.concatenate([k_x, xp[cs]])
            k_tb = np.concatenate([k_tb, np.full(len(cs), 0.5 * (tiebreak[a] + tiebreak[b]))])
        walk = self._walk
        if self._shuffle:
            walk = list(np.random.default_rng((self.seed, self._round)).permutation(walk))
            pos = np.empty(len(self.gpu_types), dtype=np.int64)
            pos[walk] = np.arange(len(walk))
        else:
            pos = self._walk_pos
        keys = [ent if gavel else k_tb, -k_x, -k_def, -k_pri]
        if self.queue in ("per_type", "gavel"):
            keys.append(pos[col])
        elif self.queue == "phased":
            keys += [pos[col], k_pri < 1.0]
        order = np.lexsort(keys)
        sched = [False] * n
        unscheduled = n
        left = self._capacity.tolist()
        total = sum(left)
        for e, c in zip(ent[order].tolist(), col[order].tolist()):
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
                a, b = pair_rows[e - n][:2]
                if sched[a] or sched[b] or sfl[a] > left[c]:
                    continue
                sched[a] = sched[b] = True
                unscheduled -= 2
                w = sfl[a]
                units[c].append(((a, b), w))
            left[c] -= w
            total -= w
        if gavel or not self.work_conserving or total == 0 or unscheduled == 0:
            return
        # Work conservation: idle GPUs to jobs not yet running, least served first.
        # Jobs already running on the type go first (no needless preemption or
        # move to another type), then the least served, then the tie-break.
        # Few jobs wait here (mostly arrivals the allocation does not cover
        # yet), so the candidates are sorted in Python.
        waiting = [m for m in range(n) if not sched[m]]
        can_use = usable[waiting].tolist()
        served = (rec.sum(axis=1) / np.maximum(pres, 1.0))[waiting].tolist()
        tb = tiebreak[waiting].tolist()
        was_on = [self._gpus.get(ids[m], ()) for m in waiting]
        for c in walk:
            if left[c] == 0:
                continue
            cand = [i for i, m in enumerate(waiting) if can_use[i][c] and not sched[m] and sfl[m] <= left[c]]
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

    def _units_from_counts(self, counts: np.ndarray, units) -> None:
        over = counts.sum(axis=0) > self._capacity
        if over.any():
            c = int(np.flatnonzero(over)[0])
            raise OptschedError(
                f"allocation.gpu_counts: {int(counts[:, c].sum())} {self.gpu_types[c]} GPUs requested, "
                f"{int(self._capacity[c])} exist"
            )
        for m, c in zip(*np.nonzero(counts)):
            units[c].append(((int(m),), int(counts[m, c])))

    def _previous(self, key, c: int) -> np.ndarray | None:
        first = key[0] if isinstance(key, tuple) else key
        if self._unit.get(first) != key:
            return None
        return self._gpus[first].get(c)

    def _rows(self, ids: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, bool]:
        """Row of each job in the state arrays (-1 for jobs never seen), which
        are known, and whether all are; cached while the job list and the rows
        are unchanged (the simulator's case)."""
        hit = self._cache.get("rows")
        if hit is not None and hit[1] == self._rows_version and (hit[0] is ids or hit[0] == ids):
            return hit[2]
        rows = np.fromiter((self._row.get(j, -1) for j in ids), dtype=np.int64, count=len(ids))
        known = rows >= 0
        out = (rows, known, bool(known.all()))
        self._cache["rows"] = (ids, self._rows_version, out)
        return out

    def _instance(self, jobs) -> Instance:
        if isinstance(jobs, Instance):
            return jobs
        if isinstance(jobs, Snapshot):
            hit = self._cache.get("snapshot")
            if hit is not None and hit[0] is jobs:
                return hit[1]
            inst = Instance.from_snapshot(jobs)
            self._cache["snapshot"] = (jobs, inst)
            return inst
        raise OptschedError(f"jobs: expected an Instance or a Snapshot, got {type(jobs).__name__}")

    def _view(self, inst: Instance) -> "_JobsView":
        """The jobs' scale factors and usable types in the allocator's columns,
        validated. Cached while the instance carries the same jobs, types,
        throughputs and scale factors: the simulator builds a new Instance every
        round, mostly with the same content."""
        T, sf = np.asarray(inst.throughput), np.asarray(inst.scale_factor)
        hit = self._cache.get("view")
        if hit is not None and (hit.inst is inst or hit.key == (inst.job_ids, inst.gpu_types, T.shape, T.dtype, sf.dtype,
                                                                 T.tobytes(), sf.tobytes())):
            return hit
        key = (inst.job_ids, inst.gpu_types, T.shape, T.dtype, sf.dtype, T.tobytes(), sf.tobytes())
        n, k = inst.n, len(self.gpu_types)
        ids = inst.job_ids
        unknown = [t for t in inst.gpu_types if t not in self._col]
        if unknown:
            raise OptschedError(f"jobs: unknown GPU type {unknown[0]!r} (cluster has {', '.join(self.gpu_types)})")
        if inst.gpu_types == self.gpu_types and T.shape == (n, k):
            Tk = T  # already in the allocator's columns (only read here)
        else:
            Tk = np.zeros((n, k))
            Tk[:, [self._col[t] for t in inst.gpu_types]] = T
        whole = np.isfinite(sf) & (sf >= 1) & (sf == np.round(sf))
        if not whole.all():
            m = int(np.flatnonzero(~whole)[0])
            raise OptschedError(f"jobs[{m}].scale_factor: job {ids[m]!r} needs a positive whole number of GPUs (got {sf[m]})")
        sfi = sf.astype(np.int64)
        usable = (Tk > 0) & (sfi[:, None] <= self._capacity[None, :])
        stuck = ~usable.any(axis=1)
        if stuck.any():
            m = int(np.flatnonzero(stuck)[0])
            have = ", ".join(f"{t} {int(c)}" for t, c in zip(self.gpu_types, self._capacity) if Tk[m, self._col[t]] > 0)
            raise OptschedError(
                f"jobs[{m}].scale_factor: job {ids[m]!r} needs {sfi[m]} GPUs but no GPU type it can run on has "
                f"that many ({have or 'it has no positive throughput'})"
            )
        view = _JobsView(inst, key, ids, sfi, sfi.tolist(), usable)
        self._cache["view"] = view
        return view

    def _read_allocation(self, allocation: Allocation, view: "_JobsView"):
        """X (n, k) in the allocator's columns, zero on types a job cannot use;
        covered (n,): the jobs the allocation names; pairs [(a, b, x_pair
        (k,))]; gpu_counts (n, k) or None; notes. Cached while the allocation
        object and the jobs' view are the same."""
        if not isinstance(allocation, Allocation):
            raise OptschedError(f"allocation: expected an Allocation, got {type(allocation).__name__}")
        hit = self._cache.get("allocation")
        if hit is not None and hit[0] is allocation and hit[1] is view:
            return hit[2]
        ids = view.ids
        n, k = len(ids), len(self.gpu_types)
        pos = {j: m for m, j in enumerate(ids)}
        where = np.fromiter((pos.get(j, -1) for j in allocation.job_ids), dtype=np.int64, count=len(allocation.job_ids))
        ok = where >= 0
        if not ok.all():
            for a in np.flatnonzero(~ok):
                j = allocation.job_ids[a]
                if j not in self._row and j not in self._removed:
                    raise OptschedError(f"allocation: job {j!r} (row {a}) is not among the active jobs")
        acols, F, counts_error = self._checked_allocation(allocation)
        X = np.zeros((n, k))
        X[np.ix_(where[ok], acols)] = F[ok]
        covered = np.zeros(n, dtype=bool)  # jobs the allocation names
        covered[where[ok]] = True
        pairs = []
        if len(allocation.pairs):
            PF = np.asarray(allocation.pair_fractions, dtype=float)
            for p, (a, b) in enumerate(np.asarray(allocation.pairs, dtype=np.int64)):
                if where[a] < 0 or where[b] < 0:
                    continue
                if not np.all(np.isfinite(PF[p])) or np.any(PF[p] < 0):
                    raise OptschedError(f"allocation.pair_fractions[{p}]: negative or non-finite fraction")
                xp = np.zeros(k)
                xp[acols] = PF[p]
                if xp.any():
                    pairs.append((int(where[a]), int(where[b]), xp))
        counts = None
        if allocation.gpu_counts is not None:
            if counts_error:
                raise OptschedError(counts_error)
            counts = np.zeros((n, k), dtype=np.int64)
            counts[np.ix_(where[ok], acols)] = np.asarray(allocation.gpu_counts)[ok].astype(np.int64)
        notes = []
        outside = X[~view.usable]
        if outside.size and (outside > 0).any():
            notes.append("allocation gives time on types some jobs cannot use; ignored")
            X = np.where(view.usable, X, 0.0)
        out = (X, covered, pairs, counts, tuple(notes))
        self._cache["allocation"] = (allocation, view, out)
        return out

    def _checked_allocation(self, allocation: Allocation):
        """The allocation's columns and fractions, validated, and what is wrong
        with its GPU counts ("" if nothing; raised after the pair checks, in
        the order the checks always ran). Cached per allocation object: the
        job set changes more often than the allocation."""
        hit = self._cache.get("checked")
        if hit is not None and hit[0] is allocation:
            return hit[1]
        acols = []
        for t in allocation.gpu_types:
            if t not in self._col:
                raise OptschedError(f"allocation: unknown GPU type {t!r} (cluster has {', '.join(self.gpu_types)})")
            acols.append(self._col[t])
        acols = np.array(acols, dtype=np.int64)
        F = np.asarray(allocation.fractions, dtype=float)
        if F.shape != (len(allocation.job_ids), len(allocation.gpu_types)):
            raise OptschedError(f"allocation.fractions: shape {F.shape} does not match its job_ids × gpu_types")
        bad = ~np.isfinite(F) | (F < 0)
        if bad.any():
            a = int(np.argwhere(bad)[0][0])
            raise OptschedError(f"allocation.fractions[{a}]: job {allocation.job_ids[a]!r} has a negative or non-finite fraction")
        counts_error = ""
        if allocation.gpu_counts is not None:
            G = np.asarray(allocation.gpu_counts)
            if G.shape != F.shape or np.any(G < 0) or np.any(G != np.round(G)):
                counts_error = "allocation.gpu_counts: must be whole non-negative numbers shaped like fractions"
        out = (acols, F, counts_error)
        self._cache["checked"] = (allocation, out)
        return out

    def _is_reset(self, allocation, ids, rows, known, X, pairs) -> bool:
        if allocation is self._allocation:
            return False
        if self._allocation is None and self._adopt_first:
            return False
        if self._allocation is None and not self._row and not self._pairs:
            return True  # first allocation ever: start the first period
        x_old = np.zeros_like(X)
        x_old[known] = self._x[rows[known]]
        if X.size and np.abs(X - x_old).max() > RESET_TOLERANCE:
            return True
        new = {_pair_key(ids[a], ids[b]): xp for a, b, xp in pairs}
        cur = {key: ps.x for key, ps in self._pairs.items() if ps.x.any()}
        if set(cur) != set(new):
            return True
        return any(np.abs(cur[key] - new[key]).max() > RESET_TOLERANCE for key in cur)

    def _reset_arrays(self) -> dict:
        """Close the period: deficit += X·(present − prior) − (received − prior);
        counters restart at the prior (half a round) for jobs that ever ran."""
        deficit = self._deficit + self._x * (self._present - self._prior)[:, None] - (self._received - self._prior[:, None])
        prior = np.full(len(self._present), PRIOR_ROUNDS)
        return {
            "received": np.repeat(prior[:, None], len(self.gpu_types), axis=1),
            "present": prior.copy(),
            "prior": prior,
            "deficit": deficit,
            "x": np.zeros_like(self._x),
        }

    def _reset_pairs(self) -> dict:
        out = {}
        for key, ps in self._pairs.items():
            d = ps.deficit + ps.x * (ps.present - ps.prior) - (ps.received - ps.prior)
            pr = PRIOR_ROUNDS
            out[key] = _PairState(np.full(len(ps.received), pr), pr, pr, d, np.zeros_like(ps.x), ps.ran)
        return out

    def _commit(self, ids, rows, all_known, X, rec, pres, deficit, tiebreak, full, pair_state, pairs, solo, pair_units,
                ran, gpus_now, unit_now, assignments, last_credit, allocation):
        """Apply the round: one round received per unit scheduled (``solo``:
        (jobs, columns) of one-job units; ``pair_units``: (key, column, members)),
        one round present per job, X in force; ``ran``: the jobs that run."""
        k = len(self.gpu_types)
        if full is not None:
            self._received, self._present, self._prior = full["received"], full["present"], full["prior"]
            self._deficit, self._x = full["deficit"], full["x"]
            self._pairs = pair_state
        if not all_known:
            known = rows >= 0
            self._append_rows([ids[m] for m in np.flatnonzero(~known)])
            rows = np.fromiter((self._row[j] for j in ids), dtype=np.int64, count=len(ids))
            self._tiebreak[rows] = tiebreak
            self._prior[rows[~known]] = PRIOR_ROUNDS
        for key, c, mem in pair_units:
            ps = self._pairs.get(key)
            if ps is None:
                ps = self._pairs[key] = _PairState(np.full(k, PRIOR_ROUNDS), deficit=np.zeros(k), x=np.zeros(k))
            ps.received[c] += 1.0
            ps.ran = True
        rec[solo] += 1.0  # rec is this round's copy (fancy indexing), free to update
        self._received[rows] = rec
        self._present[rows] = pres + 1.0
        # X and deficits change only at a reset, on new rows, or with a new X;
        # otherwise they are already in place (skip two scatters).
        if full is not None or self._x_in_place[0] is not X or self._x_in_place[1] is not rows:
            self._deficit[rows] = deficit
            self._x[rows] = X
            self._x_in_place = (X, rows)
        ran_rows = rows[ran]
        self._ever[ran_rows] = True
        # Pair bookkeeping: X in force and presence.
        for a, b, xp in pairs:
            key = _pair_key(ids[a], ids[b])
            ps = self._pairs.get(key)
            if ps is None:
                ps = self._pairs[key] = _PairState(np.full(k, PRIOR_ROUNDS), deficit=np.zeros(k), x=np.zeros(k))
            ps.x = xp
            ps.present += 1.0
        self._running[:] = False
        self._running[ran_rows] = True
        self._gpus, self._unit, self._assignments = gpus_now, unit_now, assignments
        self._last_credit = last_credit
        self._allocation = allocation
        self._adopt_first = False
        self._round += 1

    def _append_rows(self, new_ids: list[str]) -> None:
        start = len(self._ids)
        need = start + len(new_ids)
        if need > len(self._present):
            size = max(need, 2 * len(self._present), 64)
            self._received = _grow(self._received, size)
            self._present = _grow(self._present, size)
            self._prior = _grow(self._prior, size)
            self._deficit = _grow(self._deficit, size)
            self._x = _grow(self._x, size)
            self._ever = _grow(self._ever, size)
            self._running = _grow(self._running, size)
            self._tiebreak = _grow(self._tiebreak, size)
        self._rows_version += 1
        for i, j in enumerate(new_ids):
            self._row[j] = start + i
            self._ids.append(j)
            self._removed.discard(j)
            self._tiebreak[start + i] = _tiebreak(self.seed, j)

    def _compact(self) -> None:
        live = np.array([r for r in range(len(self._ids)) if self._ids[r] is not None], dtype=np.int64)
        self._rows_version += 1
        for name in ("_received", "_present", "_prior", "_deficit", "_x", "_ever", "_running", "_tiebreak"):
            setattr(self, name, getattr(self, name)[live].copy())
        self._ids = [self._ids[r] for r in live]
        self._row = {j: r for r, j in enumerate(self._ids)}


def _grow(a: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros((size, *a.shape[1:]), dtype=a.dtype)
    out[: len(a)] = a
    return out


def _tiebreak(seed: int, job_id: str) -> float:
    """A fixed pseudo-random number per (seed, job): breaks exact ties without
    favouring low job indices, with no RNG state to keep in sync."""
    return zlib.crc32(f"{seed}:{job_id}".encode()) / 2**32


def _pair_key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def _unit_key(ids, members: tuple[int, ...]):
    return ids[members[0]] if len(members) == 1 else _pair_key(ids[members[0]], ids[members[1]])


def _members(key) -> tuple[str, ...]:
    return key if isinstance(key, tuple) else (key,)


def _same_gpus(a: dict[int, np.ndarray], b: dict[int, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        a[c] is b[c] or (len(a[c]) == len(b[c]) and np.array_equal(np.sort(a[c]), np.sort(b[c]))) for c in a
    )


def _slot_name(slot: GpuSlot) -> str:
    return f"{slot.server}:{slot.gpu}"


__all__ = ["Allocator", "Placement"]
