"""The allocator's memory, typed, and its JSON form.

Everything ``next_round`` decides from lives here: per job and per packed pair
(a *unit*) the rounds received on each type and the rounds present since the
last allocation reset, the deficits, the allocation in force (X of the period),
whether the unit ever ran, and the lease (the GPUs each job holds now).

``to_dict()`` writes the five Snapshot fields (``rounds_received``,
``rounds_present``, ``deficits``, ``prior_allocation``, ``placement``), so the
state merges into the next snapshot; ``from_dict()`` reads them back bit for
bit (JSON keeps a float's repr). Conventions that make five fields enough:

- a packed pair is a unit of its own, as in Gavel (``JobIdPair``); its key in
  the tables is the JSON list of its two job ids, e.g. ``'["j0", "j1"]'``;
- ``rounds_received`` lists exactly the units that have ever run (every type),
  so "never ran" (Gavel's X·1e9 priority) survives a restore;
- ``placement`` keeps each job's GPUs in the order they were given.

The rest of the memory goes in a sixth field, ``allocator`` (the Snapshot's
``allocator``): ``round`` (the next ``Placement.round``), ``credits`` (what
``record()`` credited this round, per unit and type, so a second ``record()``
after a restore corrects from the same value), ``removed`` (ids of removed
jobs, so removing one again stays a no-op; jobs dropped on load because the
snapshot no longer lists them join it) and ``adopt_allocation`` (loaded from
an older snapshot without ``prior_allocation``, no round since). A state
without it (older snapshots) loads as round 0 with no credits or removals.

Derived on load, never stored: which jobs ran last round (the placement),
the pair a job ran in (two jobs on the same GPUs). Exact ties are broken by
the round's order of the jobs (arrival, then id), not by anything stored here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from optsched.model import GpuSlot, OptschedError
from optsched.placement import Layout, TypeLayout

PRIOR_ROUNDS = 0.5  # Gavel: every unit starts a period with half a round received on every type
STATE_FIELDS = ("rounds_received", "rounds_present", "deficits", "prior_allocation", "placement", "allocator")
ALLOCATOR_FIELDS = ("round", "credits", "removed", "adopt_allocation")

UnitKey = str | tuple[str, str]  # a job id, or a packed pair (sorted ids)


def pair_key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def unit_name(key: UnitKey) -> str:
    """The unit's key in the JSON tables."""
    return key if isinstance(key, str) else json.dumps(list(key))


def members(key: UnitKey) -> tuple[str, ...]:
    return key if isinstance(key, tuple) else (key,)


@dataclass(frozen=True)
class Columns:
    """The cluster as the allocator indexes it: GPU types as columns (sorted,
    as in Instance), their capacities and server layouts."""

    gpu_types: tuple[str, ...]
    index: dict[str, int]
    capacity: np.ndarray  # (k,) int64
    layout: Layout
    types: tuple[TypeLayout, ...]  # per column

    @classmethod
    def of(cls, gpus: dict[str, int], layout: Layout) -> "Columns":
        gpu_types = tuple(sorted(gpus))
        return cls(gpu_types, {t: c for c, t in enumerate(gpu_types)},
                   np.array([gpus[t] for t in gpu_types], dtype=np.int64), layout,
                   tuple(layout.types[t] for t in gpu_types))

    @property
    def k(self) -> int:
        return len(self.gpu_types)


# --------------------------------------------------------------------------
# Per-job memory: one row per job, numpy columns
# --------------------------------------------------------------------------


@dataclass
class JobTable:
    """Rows of per-job memory. Removed jobs leave a hole (id None) until
    ``compact`` (rows stay put so cached row lookups stay valid)."""

    k: int
    ids: list[str | None] = field(default_factory=list)
    row: dict[str, int] = field(default_factory=dict)
    received: np.ndarray = None  # (rows, k) rounds received per type, prior included
    present: np.ndarray = None  # (rows,) rounds present since the reset, prior included
    deficit: np.ndarray = None  # (rows, k)
    x: np.ndarray = None  # (rows, k) the allocation in force
    ever: np.ndarray = None  # (rows,) bool: ran at least once (alone or packed)
    running: np.ndarray = None  # (rows,) bool: ran last round (derived from the lease)
    version: int = 0  # bumped whenever rows are added, removed or moved

    COLUMNS = ("received", "present", "deficit", "x", "ever", "running")

    def __post_init__(self):
        k = self.k
        defaults = {"received": np.zeros((0, k)), "present": np.zeros(0), "deficit": np.zeros((0, k)),
                    "x": np.zeros((0, k)), "ever": np.zeros(0, bool), "running": np.zeros(0, bool)}
        for name, empty in defaults.items():
            if getattr(self, name) is None:
                setattr(self, name, empty)

    def live(self) -> np.ndarray:
        return np.fromiter(self.row.values(), dtype=np.int64, count=len(self.row))

    def append(self, new_ids: list[str]) -> None:
        """New rows at Gavel's prior: never ran, half a round on every type."""
        start, need = len(self.ids), len(self.ids) + len(new_ids)
        if need > len(self.present):
            size = max(need, 2 * len(self.present), 64)
            for name in self.COLUMNS:
                old = getattr(self, name)
                grown = np.zeros((size, *old.shape[1:]), dtype=old.dtype)
                grown[: len(old)] = old
                setattr(self, name, grown)
        rows = slice(start, need)
        self.received[rows], self.present[rows] = PRIOR_ROUNDS, PRIOR_ROUNDS
        self.deficit[rows], self.x[rows] = 0.0, 0.0
        self.ever[rows] = self.running[rows] = False
        for i, j in enumerate(new_ids):
            self.row[j] = start + i
            self.ids.append(j)
        self.version += 1

    def drop(self, job_id: str) -> bool:
        r = self.row.pop(job_id, None)
        if r is None:
            return False
        self.ids[r] = None
        self.running[r] = False
        self.version += 1
        return True

    def compact(self) -> None:
        live = np.array([r for r, j in enumerate(self.ids) if j is not None], dtype=np.int64)
        for name in self.COLUMNS:
            setattr(self, name, getattr(self, name)[live].copy())
        self.ids = [self.ids[r] for r in live]
        self.row = {j: r for r, j in enumerate(self.ids)}
        self.version += 1


@dataclass
class PairMemory:
    """A packed pair's counters: the same quantities as a job's row."""

    received: np.ndarray  # (k,)
    present: float = PRIOR_ROUNDS
    deficit: np.ndarray = None  # (k,)
    x: np.ndarray = None  # (k,)
    ran: bool = False

    @classmethod
    def fresh(cls, k: int) -> "PairMemory":
        return cls(np.full(k, PRIOR_ROUNDS), PRIOR_ROUNDS, np.zeros(k), np.zeros(k))


@dataclass
class Lease:
    """The GPUs each job holds since the last round: job -> column -> GPU
    numbers (in the order given), and the unit it ran in."""

    gpus: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    unit: dict[str, UnitKey] = field(default_factory=dict)
    # The slot tuples of the last Placement, reused while a job keeps its GPUs
    # (derived: rebuilt from gpus when missing).
    slots: dict[str, tuple[GpuSlot, ...]] = field(default_factory=dict)

    def without(self, gone: set[str]) -> "Lease":
        """The lease once ``gone`` jobs have left: a pair partner that stays
        now holds its GPUs alone."""
        unit = {j: (j if isinstance(u, tuple) and gone & set(u) else u) for j, u in self.unit.items() if j not in gone}
        return Lease({j: g for j, g in self.gpus.items() if j not in gone}, unit,
                     {j: a for j, a in self.slots.items() if j not in gone})


@dataclass
class AllocatorState:
    jobs: JobTable
    pairs: dict[tuple[str, str], PairMemory] = field(default_factory=dict)
    lease: Lease = field(default_factory=Lease)
    # Loaded from an older snapshot without prior_allocation: adopt the next
    # allocation as the one in force instead of starting a new period.
    adopt_next: bool = False
    round: int = 0  # the next Placement.round
    credits: dict = field(default_factory=dict)  # record() this round: (unit, column) -> rounds credited
    removed: set = field(default_factory=set)  # ids of removed jobs

    @classmethod
    def empty(cls, k: int) -> "AllocatorState":
        return cls(JobTable(k))

    def forget(self, gone: set[str]) -> None:
        """Drop jobs (finished or gone) with their pairs and GPUs."""
        for j in gone:
            self.jobs.drop(j)
        for key in [p for p in self.pairs if gone & set(p)]:
            del self.pairs[key]
        self.lease = self.lease.without(gone)
        t = self.jobs
        if len(t.ids) > 64 and len(t.row) < len(t.ids) // 2:
            t.compact()

    # ------------------------------------------------------------------
    # JSON form (the Snapshot's fields)
    # ------------------------------------------------------------------

    def to_dict(self, cols: Columns) -> dict:
        t, types = self.jobs, cols.gpu_types

        def sparse(a: np.ndarray) -> dict:
            return {types[c]: float(a[c]) for c in np.flatnonzero(a)}

        units = [(j, r) for j, r in t.row.items()]
        received = {j: dict(zip(types, t.received[r].tolist())) for j, r in units if t.ever[r]}
        present = {j: float(t.present[r]) for j, r in units}
        deficits = {j: d for j, r in units if (d := sparse(t.deficit[r]))}
        prior = {j: x for j, r in units if (x := sparse(t.x[r]))}
        for key, p in self.pairs.items():
            name = unit_name(key)
            if p.ran:
                received[name] = dict(zip(types, p.received.tolist()))
            present[name] = float(p.present)
            if d := sparse(p.deficit):
                deficits[name] = d
            if x := sparse(p.x):
                prior[name] = x
        placement = {}
        for j, per in self.lease.gpus.items():
            slots = [cols.types[c].slots[g] for c, gs in per.items() for g in gs.tolist()]
            placement[j] = [{"server": s.server, "gpu_type": s.gpu_type, "gpu": s.gpu} for s in slots]
        credits: dict = {}
        for (u, c), v in sorted(self.credits.items(), key=lambda kv: (unit_name(kv[0][0]), kv[0][1])):
            credits.setdefault(unit_name(u), {})[types[c]] = float(v)
        memory = {"round": int(self.round), "credits": credits, "removed": sorted(self.removed)}
        if self.adopt_next:
            memory["adopt_allocation"] = True
        return {"rounds_received": received, "rounds_present": present, "deficits": deficits,
                "prior_allocation": prior, "placement": placement, "allocator": memory}

    @classmethod
    def from_dict(cls, data: dict, cols: Columns, active: set[str] | None = None) -> "AllocatorState":
        """The state ``to_dict`` wrote, validated (OptschedError naming the
        field). Units with a job not in ``active`` (when given) are dropped:
        those jobs have finished."""
        tables = _read_tables(data)
        keep = (lambda u: True) if active is None else (lambda u: all(j in active for j in members(u)))
        tables = {name: {u: v for u, v in table.items() if keep(u)} for name, table in tables.items()}
        placement = {j: v for j, v in _read_placement(data).items() if keep(j)}
        rows = {name: {u: _per_type(v, cols, name, u) for u, v in tables[name].items()}
                for name in ("rounds_received", "deficits", "prior_allocation")}
        present = {u: _number(v, f"rounds_present[{unit_name(u)!r}]", negative=False)
                   for u, v in tables["rounds_present"].items()}
        for u, r in rows["rounds_received"].items():
            if (r < 0).any():
                raise OptschedError(f"rounds_received[{unit_name(u)!r}]: counts must be non-negative")
        for u, r in rows["prior_allocation"].items():
            if (r < 0).any() or (r > 1).any():
                raise OptschedError(f"prior_allocation[{unit_name(u)!r}]: fractions must be between 0 and 1")
        gpus = {j: _job_gpus(j, slots, cols) for j, slots in placement.items()}
        unit = _units_of(gpus, cols)
        state = cls.empty(cols.k)
        state._fill(rows, present)
        state.lease = Lease(gpus, unit)
        memory = _read_memory(data.get("allocator"), cols, state.lease, keep)
        state.adopt_next = (data.get("prior_allocation") is None and bool(rows["rounds_received"] or gpus)) \
            or memory["adopt_allocation"]
        state.round = memory["round"]
        state.credits = memory["credits"]
        state.removed = memory["removed"]
        if active is not None:  # jobs the snapshot no longer lists have left: removed
            state.removed |= {j for name in _read_tables(data).values() for u in name for j in members(u)
                              if j not in active}
            state.removed |= {j for j in _read_placement(data) if j not in active}
        t = state.jobs
        for j in gpus:
            if j not in t.row:
                t.append([j])
            t.running[t.row[j]] = t.ever[t.row[j]] = True
        return state

    def _fill(self, rows: dict, present: dict) -> None:
        received, deficits, prior = rows["rounds_received"], rows["deficits"], rows["prior_allocation"]
        units = list(dict.fromkeys([*present, *received, *deficits, *prior]))
        longest = max((float(v.sum()) for v in received.values()), default=0.0)
        k, t = self.jobs.k, self.jobs
        jobs = [u for u in units if isinstance(u, str)]
        t.append(jobs)
        for u in units:
            # Without rounds_present (an older snapshot), assume the unit was
            # present as long as the longest-served unit.
            p = present.get(u, max(longest, float(received[u].sum()) if u in received else 0.0, PRIOR_ROUNDS))
            rec = received.get(u, np.full(k, PRIOR_ROUNDS))
            d, x = deficits.get(u, np.zeros(k)), prior.get(u, np.zeros(k))
            if isinstance(u, tuple):
                self.pairs[u] = PairMemory(rec.copy(), p, d.copy(), x.copy(), u in received)
            else:
                r = t.row[u]
                t.received[r], t.present[r], t.deficit[r], t.x[r], t.ever[r] = rec, p, d, x, u in received


# --------------------------------------------------------------------------
# Validation of the JSON form
# --------------------------------------------------------------------------


def _read_tables(data) -> dict:
    if not isinstance(data, dict):
        raise OptschedError(f"state: expected a mapping, got {type(data).__name__}")
    unknown = [f for f in data if f not in STATE_FIELDS]
    if unknown:
        raise OptschedError(f"state: unknown field {unknown[0]!r} (fields: {', '.join(STATE_FIELDS)})")
    out = {}
    for name in ("rounds_received", "rounds_present", "deficits", "prior_allocation"):
        table = data.get(name) or {}
        if not isinstance(table, dict):
            raise OptschedError(f"{name}: expected a mapping of job id to values, got {type(table).__name__}")
        out[name] = {_unit_of(u, name): v for u, v in table.items()}
    return out


def _read_memory(memory, cols: Columns, lease: Lease, keep) -> dict:
    """The ``allocator`` field: round counter, this round's record() credits,
    removed job ids (absent: an older snapshot — round 0, nothing else)."""
    out = {"round": 0, "credits": {}, "removed": set(), "adopt_allocation": False}
    if memory is None:
        return out
    if not isinstance(memory, dict):
        raise OptschedError(f"allocator: expected a mapping ({', '.join(ALLOCATOR_FIELDS)}), got {type(memory).__name__}")
    unknown = [f for f in memory if f not in ALLOCATOR_FIELDS]
    if unknown:
        raise OptschedError(f"allocator: unknown field {unknown[0]!r} (fields: {', '.join(ALLOCATOR_FIELDS)})")
    r = memory.get("round", 0)
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 0:
        raise OptschedError(f"allocator.round: expected a non-negative whole number, got {r!r}")
    out["round"] = int(r)
    adopt = memory.get("adopt_allocation", False)
    if not isinstance(adopt, bool):
        raise OptschedError(f"allocator.adopt_allocation: expected true or false, got {adopt!r}")
    out["adopt_allocation"] = adopt
    removed = memory.get("removed") or []
    if not isinstance(removed, list) or not all(isinstance(j, str) for j in removed):
        raise OptschedError("allocator.removed: expected a list of job ids (strings)")
    out["removed"] = set(removed)
    credits = memory.get("credits") or {}
    if not isinstance(credits, dict):
        raise OptschedError(f"allocator.credits: expected a mapping of unit to {{GPU type: rounds}}, got {type(credits).__name__}")
    for name, per in credits.items():
        u = _unit_of(name, "allocator.credits")
        where = f"allocator.credits[{unit_name(u)!r}]"
        if not isinstance(per, dict):
            raise OptschedError(f"{where}: expected a mapping of GPU type to rounds, got {type(per).__name__}")
        for t, v in per.items():
            if t not in cols.index:
                raise OptschedError(f"{where}: unknown GPU type {t!r}")
            c = cols.index[t]
            if not keep(u):
                continue  # a job that has left: its credit goes with it
            for j in members(u):
                if c not in lease.gpus.get(j, {}) or lease.unit.get(j) != u:
                    raise OptschedError(f"{where}: job {j!r} did not run on {t} as this unit in the last round (placement)")
            out["credits"][(u, c)] = _number(v, f"{where}[{t!r}]", negative=False)
    return out


def _unit_of(name, field_name: str) -> UnitKey:
    if not isinstance(name, str):
        raise OptschedError(f"{field_name}: keys must be job ids (strings), got {name!r}")
    if name.startswith("["):
        try:
            ids = json.loads(name)
        except ValueError:
            ids = None
        if isinstance(ids, list) and len(ids) == 2 and all(isinstance(i, str) for i in ids) and ids[0] != ids[1]:
            return pair_key(*ids)
    return name


# Counters are rounds (or deficits in rounds): a billion is ~10,000 years of
# 360 s rounds. Larger values can only be corruption, and products of them
# overflow to inf in the walk's priorities.
MAX_COUNTER = 1e9


def _number(v, where: str, negative: bool) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise OptschedError(f"{where}: expected a number, got {type(v).__name__}")
    v = float(v)
    if not math.isfinite(v) or (not negative and v < 0):
        raise OptschedError(f"{where}: must be a finite {'' if negative else 'non-negative '}number (got {v})")
    if abs(v) > MAX_COUNTER:
        raise OptschedError(f"{where}: {v:g} is beyond the documented limit of {MAX_COUNTER:g}")
    return v


def _per_type(values, cols: Columns, name: str, u: UnitKey) -> np.ndarray:
    where = f"{name}[{unit_name(u)!r}]"
    if not isinstance(values, dict):
        raise OptschedError(f"{where}: expected a mapping of GPU type to number, got {type(values).__name__}")
    received = name == "rounds_received"
    out = np.full(cols.k, PRIOR_ROUNDS) if received else np.zeros(cols.k)  # types not listed: the prior / 0
    for t, v in values.items():
        if t not in cols.index:
            raise OptschedError(f"{where}: unknown GPU type {t!r}")
        out[cols.index[t]] = _number(v, f"{where}[{t!r}]", negative=name == "deficits")
    return out


def _read_placement(data: dict) -> dict:
    placement = data.get("placement") or {}
    if not isinstance(placement, dict):
        raise OptschedError(f"placement: expected a mapping of job id to GPU slots, got {type(placement).__name__}")
    for j, slots in placement.items():
        if not isinstance(j, str) or j.startswith("[") and isinstance(_unit_of(j, "placement"), tuple):
            raise OptschedError(f"placement: keys must be job ids, got {j!r}")
        if not isinstance(slots, (list, tuple)):
            raise OptschedError(f"placement[{j!r}]: expected a list of GPU slots, got {type(slots).__name__}")
    return placement


def _job_gpus(j: str, slots, cols: Columns) -> dict[int, np.ndarray]:
    per: dict[int, list[int]] = {}
    for i, s in enumerate(slots):
        where = f"placement[{j!r}][{i}]"
        if not isinstance(s, GpuSlot):
            try:
                s = GpuSlot.model_validate(s)
            except Exception as err:  # pydantic's message, one line
                raise OptschedError(f"{where}: expected {{server, gpu_type, gpu}} ({str(err).splitlines()[-1].strip()})") from None
        t, g = cols.layout.locate(s, where)
        c = cols.index[t]
        if g in per.get(c, ()):
            raise OptschedError(f"{where}: GPU {s.server}:{s.gpu} listed twice")
        per.setdefault(c, []).append(g)
    return {c: np.array(v, dtype=np.int64) for c, v in per.items()}


def _units_of(gpus: dict[str, dict[int, np.ndarray]], cols: Columns) -> dict[str, UnitKey]:
    """Each job's unit: itself, or the pair it shares all its GPUs with. Two
    jobs on one GPU that are not such a pair is an error."""
    holder: dict[tuple[int, int], list[str]] = {}
    for j, per in gpus.items():
        for c, gs in per.items():
            for g in gs.tolist():
                holder.setdefault((c, g), []).append(j)
    unit: dict[str, UnitKey] = {j: j for j in gpus}
    for (c, g), js in holder.items():
        if len(js) == 1:
            continue
        a, b = sorted(js)[:2]
        if len(js) > 2 or not same_gpus(gpus[a], gpus[b]):
            slot = cols.types[c].slots[g]
            raise OptschedError(
                f"placement: GPU {slot.server}:{slot.gpu} is held by {', '.join(map(repr, js))} "
                f"(only a packed pair may share GPUs)"
            )
        unit[a] = unit[b] = (a, b)
    return unit


def same_gpus(a: dict[int, np.ndarray], b: dict[int, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        a[c] is b[c] or (len(a[c]) == len(b[c]) and np.array_equal(np.sort(a[c]), np.sort(b[c]))) for c in a
    )
