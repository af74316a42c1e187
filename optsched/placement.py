"""Placement: which GPUs of which servers the jobs chosen for a round run on.

The allocator (optsched.allocator) decides, per GPU type, which *units* run
this round — a unit is one job, or a packed pair sharing the same GPUs, of
width w (its scale factor, or its GPU count for configuration policies). This
module maps the units of one type onto that type's servers:

    every unit gets exactly w distinct GPUs of the type,
    no GPU is given to two units,
    a continuing unit keeps its previous GPUs when they are all still free
    (lease extension: no needless migration).

Policies (``PLACEMENT_POLICIES``):

- ``consolidated`` (default): lease extension first; then multi-GPU units,
  widest first, each on the fullest server that still fits it whole (best fit),
  otherwise on the fewest servers (largest free counts first, the remainder on
  the smallest server that holds it); then one-GPU units fill the partly used
  servers first, keeping whole servers free for wide jobs.
- ``first_fit``: lease extension first; then widest first, the lowest-numbered
  free GPUs (Gavel's strided walk over servers, ``_assign_workers_to_job``).
- ``cpsat``: exact — minimize the servers spanned (Σ_u #servers of u), then the
  migrations (continuing units that lose their GPUs), with OR-tools CP-SAT
  (``num_workers=1``, a fixed seed, the consolidated greedy as hint, and the time
  limit as CP-SAT's *deterministic* time: the same work on any machine under any
  load, so the same placement; a wall-clock net at CPSAT_WALL_FACTOR × the limit
  only stops a runaway solve, and the note says when it did). The
  greedy result is kept when CP-SAT does not beat it (time limit, model too
  large), with a note saying so.

Servers come from ``cluster.servers``. When absent they are synthesized per
type: ``gpus_per_server`` GPUs each (default 4, the server size of Gavel's
physical cluster), the remainder on a last, smaller server; ids
``"<type>-<i>"``, GPU indices 0..n-1 within a server.
"""

from __future__ import annotations

import functools

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from optsched.model import Cluster, GpuSlot, OptschedError

PLACEMENT_POLICIES = ("consolidated", "first_fit", "cpsat")
# Placements from other packages: an entry point in this group whose object is
# ``place(layout: TypeLayout, widths: list[int], previous: list[ndarray | None])
# -> list[ndarray]`` (each unit's GPU numbers on that type; ``previous[u]`` is
# unit u's GPUs last round, None if it did not run there). Checked on return.
PLACEMENT_ENTRY_POINTS = "optsched.placements"
DEFAULT_GPUS_PER_SERVER = 4
# CP-SAT model size (multi-GPU units × servers of the type) beyond which the
# greedy result is kept: past this, CP-SAT rarely improves within a second.
CPSAT_MAX_PAIRS = 60_000


# --------------------------------------------------------------------------
# Layout: servers and GPUs of each type
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class TypeLayout:
    """The GPUs of one type, numbered 0..W-1 server by server."""

    gpu_type: str
    server_ids: tuple[str, ...]
    server_capacity: np.ndarray  # (S,) GPUs per server
    server_start: np.ndarray  # (S,) first GPU number of each server
    server_of: np.ndarray  # (W,) server of each GPU
    slots: tuple[GpuSlot, ...]  # (W,) built once, reused every round

    @property
    def W(self) -> int:
        return len(self.slots)

    @property
    def S(self) -> int:
        return len(self.server_ids)

    def free_per_server(self, free: np.ndarray) -> np.ndarray:
        return np.add.reduceat(free.astype(np.int64), self.server_start) if self.S else np.zeros(0, np.int64)

    @cached_property
    def lists(self) -> tuple[list[int], list[int], list[int]]:
        """(server capacity, server start, server of each GPU) as Python lists,
        for the pure-Python fast path (numpy calls cost more than they do here)."""
        return self.server_capacity.tolist(), self.server_start.tolist(), self.server_of.tolist()

    @cached_property
    def single_gpu(self) -> tuple[np.ndarray, ...]:
        """A read-only one-element array per GPU, shared by every one-GPU unit
        placed there (saves building a new array per unit per round)."""
        out = tuple(np.array([g], dtype=np.int64) for g in range(self.W))
        for a in out:
            a.flags.writeable = False
        return out

    def min_servers(self, width: int) -> int:
        """Fewest servers that can hold ``width`` GPUs (largest servers first):
        a lower bound on the servers a unit of that width spans."""
        cum = np.cumsum(np.sort(self.server_capacity)[::-1])
        return int(np.searchsorted(cum, width) + 1)


@dataclass(frozen=True)
class Layout:
    types: dict[str, TypeLayout]
    index: dict[tuple[str, int], tuple[str, int]]  # (server id, gpu) -> (type, GPU number)

    @classmethod
    def from_cluster(cls, cluster: Cluster, gpus_per_server: int = DEFAULT_GPUS_PER_SERVER) -> "Layout":
        if gpus_per_server < 1:
            raise OptschedError(f"gpus_per_server: must be at least 1 (got {gpus_per_server})")
        per_type: dict[str, list[tuple[str, int]]] = {t: [] for t in cluster.gpus}
        if cluster.servers:
            for s in cluster.servers:
                per_type[s.gpu_type].append((s.id, s.gpus))
        else:
            for t, count in cluster.gpus.items():
                full, rest = divmod(count, gpus_per_server)
                sizes = [gpus_per_server] * full + ([rest] if rest else [])
                per_type[t] = [(f"{t}-{i}", g) for i, g in enumerate(sizes)]
        types: dict[str, TypeLayout] = {}
        index: dict[tuple[str, int], tuple[str, int]] = {}
        for t, servers in per_type.items():
            caps = np.array([g for _, g in servers], dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(caps)[:-1]]).astype(np.int64) if len(caps) else np.zeros(0, np.int64)
            slots = []
            for sid, g in servers:
                for i in range(g):
                    index[(sid, i)] = (t, len(slots))
                    slots.append(GpuSlot.model_construct(server=sid, gpu_type=t, gpu=i))
            types[t] = TypeLayout(
                gpu_type=t,
                server_ids=tuple(s for s, _ in servers),
                server_capacity=caps,
                server_start=starts,
                server_of=np.repeat(np.arange(len(caps)), caps),
                slots=tuple(slots),
            )
        return cls(types=types, index=index)

    def locate(self, slot: GpuSlot, where: str) -> tuple[str, int]:
        """(type, GPU number) of a slot; OptschedError naming ``where`` if stale."""
        hit = self.index.get((slot.server, slot.gpu))
        if hit is None:
            known = any(s == slot.server for s, _ in self.index)
            what = f"GPU {slot.gpu} of server {slot.server!r}" if known else f"unknown server {slot.server!r}"
            raise OptschedError(f"{where}: {what} is not in the cluster (stale placement?)")
        if hit[0] != slot.gpu_type:
            raise OptschedError(f"{where}: server {slot.server!r} has {hit[0]} GPUs, not {slot.gpu_type}")
        return hit


@functools.cache
def _plugins() -> dict:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=PLACEMENT_ENTRY_POINTS) if ep.name not in PLACEMENT_POLICIES}


def placement_policies() -> tuple[str, ...]:
    """Built-in placement policies, then those registered by other packages."""
    return PLACEMENT_POLICIES + tuple(sorted(_plugins()))


def _plugin_gpus(layout: "TypeLayout", widths: np.ndarray, previous: list, name: str) -> list[np.ndarray]:
    try:
        gpus = [np.asarray(g, dtype=np.int64) for g in _plugins()[name].load()(layout, [int(w) for w in widths], previous)]
    except Exception as e:  # another package's code: its failure is reported, not raised through the allocator
        raise OptschedError(f"placement: policy {name!r} failed: {type(e).__name__}: {e}") from None
    used = np.concatenate(gpus) if gpus else np.zeros(0, np.int64)
    ok = (len(gpus) == len(widths) and all(len(g) == w for g, w in zip(gpus, widths))
          and len(np.unique(used)) == len(used) and (used.size == 0 or (used.min() >= 0 and used.max() < layout.W)))
    if not ok:
        raise OptschedError(f"placement: policy {name!r} returned an invalid placement (each unit needs its width "
                            f"in distinct GPUs 0..{layout.W - 1})")
    return gpus


# --------------------------------------------------------------------------
# Placing the units of one type
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class TypePlacement:
    gpus: list[np.ndarray]  # per unit, its GPU numbers
    spans: int  # Σ_u servers spanned
    migrations: int  # continuing units whose GPU set changed
    note: str = ""


def place(
    layout: TypeLayout,
    widths: np.ndarray,
    previous: list[np.ndarray | None],
    policy: str = "consolidated",
    time_limit: float = 1.0,
    seed: int = 0,
    *,
    score: bool = True,
) -> TypePlacement:
    """Place units of the given widths (Σ widths ≤ W) on one type's GPUs.
    ``previous[u]`` is unit u's GPUs last round (same type), or None.
    ``score=False`` skips counting spans and migrations for the greedy
    policies (reported as -1): the allocator's hot path does not need them."""
    widths = np.asarray(widths, dtype=np.int64)
    if widths.sum() > layout.W:
        raise OptschedError(f"placement: {widths.sum()} {layout.gpu_type} GPUs requested, only {layout.W} exist")
    previous = _valid_previous(layout, widths, previous)
    if policy == "cpsat":
        return place_cpsat(layout, widths, previous, time_limit, seed)
    if policy in PLACEMENT_POLICIES:
        gpus = _greedy(layout, widths, previous, consolidate=policy == "consolidated")
    elif policy in _plugins():
        gpus = _plugin_gpus(layout, widths, previous, policy)
    else:
        raise OptschedError(f"placement: unknown policy {policy!r} (choose from {', '.join(placement_policies())})")
    return _scored(layout, gpus, previous) if score else TypePlacement(gpus, -1, -1)


def place_greedy_fast(
    layout: TypeLayout, widths: list[int], previous: list[np.ndarray | None], consolidate: bool
) -> list[np.ndarray] | None:
    """The greedy policies' result (``_greedy`` after ``_valid_previous``) for
    the common round where every unit either keeps its previous GPUs or needs
    one GPU, computed with Python ints instead of a dozen numpy calls.

    Returns None — use ``place`` — when a unit without a valid lease is wider
    than one GPU, or when leases overlap (``_valid_previous`` then decides
    which one stays). A kept lease is returned as the same array object.
    The caller guarantees Σ widths ≤ W (``place`` checks it)."""
    taken: set[int] = set()
    out: list[np.ndarray | None] = []
    singles: list[int] = []
    for u, (w, p) in enumerate(zip(widths, previous)):
        if p is not None and len(p) == w:
            before = len(taken)
            taken.update(p.tolist())
            if len(taken) != before + w:
                return None
            out.append(p)
        elif w == 1:
            out.append(None)
            singles.append(u)
        else:
            return None
    if singles:
        single = layout.single_gpu
        for u, g in zip(singles, _free_gpus(layout, taken, len(singles), consolidate)):
            out[u] = single[g]
    return out  # type: ignore[return-value]


def _free_gpus(layout: TypeLayout, taken: set[int], count: int, consolidate: bool) -> list[int]:
    """The first ``count`` free GPUs in the order ``_greedy`` gives one-GPU
    units: consolidated — servers by increasing free count (fullest first, ties
    by server order), GPUs in order within a server, which is the stable sort
    of the GPU numbers by their server's free count; first fit — lowest first."""
    caps, starts, server_of = layout.lists
    fps = caps.copy()
    for g in taken:
        fps[server_of[g]] -= 1
    servers = sorted(range(len(caps)), key=fps.__getitem__) if consolidate else range(len(caps))
    out: list[int] = []
    for s in servers:
        if fps[s] == 0:
            continue
        for g in range(starts[s], starts[s] + caps[s]):
            if g not in taken:
                out.append(g)
                if len(out) == count:
                    return out
    return out


def _valid_previous(layout: TypeLayout, widths: np.ndarray, previous) -> list[np.ndarray | None]:
    """Keep a unit's previous GPUs as a lease candidate only when the width is
    unchanged and no earlier unit (widest first) claims any of them — stale
    overlaps happen when a packed pair is split. Valid leases are disjoint."""
    out = [p if p is not None and len(p) == w else None for p, w in zip(previous, widths.tolist())]
    held = [p for p in out if p is not None]
    if not held:
        return out
    flat = np.concatenate(held)
    if len(np.unique(flat)) == len(flat):
        return out  # the common case: last round's placement, all disjoint
    claimed = np.zeros(layout.W, dtype=bool)
    for u in np.argsort(-widths, kind="stable"):
        p = out[u]
        if p is None:
            continue
        if claimed[p].any():
            out[u] = None
        else:
            claimed[p] = True
    return out


def _scored(layout: TypeLayout, gpus: list[np.ndarray], previous, note: str = "") -> TypePlacement:
    if gpus:
        unit = np.repeat(np.arange(len(gpus)), [len(g) for g in gpus])
        spans = len(np.unique(unit * layout.S + layout.server_of[np.concatenate(gpus)]))
    else:
        spans = 0
    moved = sum(1 for g, p in zip(gpus, previous) if p is not None and not _same(g, p))
    return TypePlacement(gpus=gpus, spans=spans, migrations=moved, note=note)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a is b or (len(a) == len(b) and np.array_equal(np.sort(a), np.sort(b)))


def _greedy(layout: TypeLayout, widths: np.ndarray, previous, consolidate: bool) -> list[np.ndarray]:
    """``previous`` holds disjoint leases (_valid_previous), so lease extension
    keeps every one of them: all GPUs are free at the start of a round."""
    free = np.ones(layout.W, dtype=bool)
    out: list[np.ndarray | None] = list(previous)
    held = [p for p in previous if p is not None]
    if held:
        free[np.concatenate(held)] = False
    singles = []
    wl = widths.tolist()
    fps = layout.free_per_server(free) if consolidate else None
    for u in sorted(range(len(wl)), key=wl.__getitem__, reverse=True):  # widest first (stable)
        if out[u] is not None:
            continue
        if wl[u] == 1:
            singles.append(u)
            continue
        g = _take_consolidated(layout, free, fps, wl[u]) if consolidate else np.flatnonzero(free)[: wl[u]]
        free[g] = False
        out[u] = g
    if singles:
        idx = np.flatnonzero(free)
        if consolidate:
            # Sequential best fit for one-GPU units = fill servers in increasing
            # order of their free count (fullest first), done in one sort.
            idx = idx[np.argsort(fps[layout.server_of[idx]], kind="stable")]
        for u, g in zip(singles, idx[: len(singles)].tolist()):
            out[u] = np.array([g])
    return out  # type: ignore[return-value]


def _take_consolidated(layout: TypeLayout, free: np.ndarray, fps: np.ndarray, w: int) -> np.ndarray:
    """Take w GPUs: the fullest server that holds them all, else the fewest
    servers. ``fps`` (free GPUs per server) is updated in place."""
    fits = np.flatnonzero(fps >= w)
    if len(fits):
        servers, counts = [fits[np.argmin(fps[fits])]], [w]
    else:
        by_size = np.argsort(-fps, kind="stable")
        cum = np.cumsum(fps[by_size])
        k = int(np.searchsorted(cum, w))  # servers needed beyond the first: k (0-based index of last)
        servers = list(by_size[:k])
        rest = w - (int(cum[k - 1]) if k else 0)
        others = by_size[k:]
        ok = others[fps[others] >= rest]
        servers.append(ok[np.argmin(fps[ok])])
        counts = [int(fps[s]) for s in servers[:-1]] + [rest]
    parts = []
    for s, c in zip(servers, counts):
        a = int(layout.server_start[s])
        parts.append(a + np.flatnonzero(free[a : a + layout.server_capacity[s]])[:c])
        fps[s] -= c
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


# --------------------------------------------------------------------------
# Exact placement with CP-SAT
# --------------------------------------------------------------------------


def place_cpsat(layout: TypeLayout, widths, previous, time_limit: float = 1.0, seed: int = 0) -> TypePlacement:
    """Lexicographic: minimize Σ_u servers spanned, then migrations.

    Multi-GPU unit u (w_u ≥ 2): x[u,g] ∈ {0..min(w_u, c_g)} GPUs on server g,
    y[u,g] ∈ {0,1} with x[u,g] ≤ min(w_u, c_g)·y[u,g], Σ_g x[u,g] = w_u,
    keep[u] ⇒ x[u,g] = its previous count on g (its previous GPUs are free of
    any other continuing unit's by construction, so keeping is always
    realizable). One-GPU units are interchangeable and always span one server:
    per server, kept1_g ≤ (continuing one-GPU units there) and new1_g.
    Capacity Σ_u x[u,g] + kept1_g + new1_g ≤ c_g; Σ_g kept1_g + new1_g = #singles.
    Objective (B = #continuing units + 1 so spans dominate):
        B·Σ y + Σ_u (1 − keep[u]) + Σ_g (c1_g − kept1_g).
    """
    from optsched.extras import require

    require("ortools", "placement cpsat")  # every round, not only those the greedy cannot settle
    greedy = _scored(layout, _greedy(layout, widths, previous, consolidate=True), previous)
    lower = sum(layout.min_servers(int(w)) for w in widths)
    if greedy.spans == lower and greedy.migrations == 0:
        return greedy  # the greedy meets the lower bound: optimal, nothing to search
    # Second starting point: repack from scratch (no leases). Fewer spans, more
    # migrations; the better of the two (lexicographically) is the hint and the
    # fallback, so the result never spans more servers than the greedy.
    fresh = _scored(layout, _greedy(layout, widths, [None] * len(widths), consolidate=True), previous)
    if (fresh.spans, fresh.migrations) < (greedy.spans, greedy.migrations):
        greedy = fresh
    return _cpsat_search(layout, widths, previous, greedy, time_limit, seed)


@dataclass
class _CpModel:
    """The CP-SAT model of one type's placement and its variables."""

    model: object  # cp_model.CpModel
    multi: list[int]  # multi-GPU units
    singles: list[int]  # one-GPU units
    x: dict  # (u, g) -> GPUs of multi-GPU unit u on server g
    y: dict  # (u, g) -> unit u uses server g
    keep: dict  # u -> unit u keeps its previous GPUs
    kept1: list  # per server: continuing one-GPU units kept there
    new1: list  # per server: one-GPU units placed anew
    cont1: np.ndarray  # per server: continuing one-GPU units
    units: int  # all units, of any width


def _cpsat_search(layout: TypeLayout, widths, previous, greedy: TypePlacement, time_limit: float, seed: int) -> TypePlacement:
    multi = [u for u in range(len(widths)) if widths[u] > 1]
    if len(multi) * layout.S > CPSAT_MAX_PAIRS:
        return _note(greedy, f"cpsat: model too large ({len(multi)} multi-GPU units × {layout.S} servers); greedy kept")
    from ortools.sat.python import cp_model

    cm = _cpsat_model(layout, widths, previous)
    _cpsat_hint(cm, layout, greedy, previous)
    solver = _cpsat_solver(len(cm.x), time_limit, seed)
    status = solver.Solve(cm.model)
    wall = "" if solver.WallTime() < CPSAT_WALL_FACTOR * time_limit else \
        f" (wall-clock net of {CPSAT_WALL_FACTOR * time_limit:g} s reached: depends on the machine's load)"
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _note(greedy, f"cpsat: {solver.StatusName(status).lower()} within {time_limit:g} s{wall}; greedy kept")
    exact = _scored(layout, _decode(layout, previous, cm, solver), previous)
    if (exact.spans, exact.migrations) > (greedy.spans, greedy.migrations):
        return _note(greedy, "cpsat: no better than greedy within the time limit; greedy kept")
    note = "" if status == cp_model.OPTIMAL else f"cpsat: feasible (not proven optimal) within {time_limit:g} s{wall}"
    return TypePlacement(exact.gpus, exact.spans, exact.migrations, note)


def _cpsat_model(layout: TypeLayout, widths, previous) -> _CpModel:
    from ortools.sat.python import cp_model

    caps, S = layout.server_capacity, layout.S
    m = cp_model.CpModel()
    multi = [u for u in range(len(widths)) if widths[u] > 1]
    x, y, keep = {}, {}, {}
    for u in multi:
        w, row = int(widths[u]), []
        for g in range(S):
            ub = int(min(w, caps[g]))
            if ub == 0:
                continue
            x[u, g] = m.NewIntVar(0, ub, "")
            y[u, g] = m.NewBoolVar("")
            m.Add(x[u, g] <= ub * y[u, g])
            row.append(x[u, g])
        m.Add(sum(row) == w)
        p = previous[u]
        if p is not None:
            keep[u] = m.NewBoolVar("")
            prev_count = np.bincount(layout.server_of[p], minlength=S)
            for g in range(S):
                if (u, g) in x:
                    m.Add(x[u, g] == int(prev_count[g])).OnlyEnforceIf(keep[u])
    singles = [u for u in range(len(widths)) if widths[u] == 1]
    cont1 = np.zeros(S, dtype=np.int64)
    for u in singles:
        if previous[u] is not None:
            cont1[layout.server_of[previous[u][0]]] += 1
    kept1 = [m.NewIntVar(0, int(cont1[g]), "") for g in range(S)]
    new1 = [m.NewIntVar(0, int(caps[g]), "") for g in range(S)]
    m.Add(sum(kept1) + sum(new1) == len(singles))
    for g in range(S):
        m.Add(sum(x[u, g] for u in multi if (u, g) in x) + kept1[g] + new1[g] <= int(caps[g]))
    big = len(keep) + int(cont1.sum()) + 1
    m.Minimize(big * sum(y.values()) + sum(1 - k for k in keep.values()) + (int(cont1.sum()) - sum(kept1)))
    return _CpModel(m, multi, singles, x, y, keep, kept1, new1, cont1, len(widths))


def _cpsat_hint(cm: _CpModel, layout: TypeLayout, greedy: TypePlacement, previous) -> None:
    """The greedy solution as the hint (complete and feasible)."""
    m, S = cm.model, layout.S
    for u in cm.multi:
        cnt = np.bincount(layout.server_of[greedy.gpus[u]], minlength=S)
        for g in range(S):
            if (u, g) in cm.x:
                m.AddHint(cm.x[u, g], int(cnt[g]))
                m.AddHint(cm.y[u, g], int(cnt[g] > 0))
        if u in cm.keep:
            m.AddHint(cm.keep[u], int(np.array_equal(np.sort(greedy.gpus[u]), np.sort(previous[u]))))
    kept_hint = np.zeros(S, dtype=np.int64)
    new_hint = np.zeros(S, dtype=np.int64)
    for u in cm.singles:
        g = int(layout.server_of[greedy.gpus[u][0]])
        if previous[u] is not None and greedy.gpus[u][0] == previous[u][0]:
            kept_hint[g] += 1
        else:
            new_hint[g] += 1
    for g in range(S):
        m.AddHint(cm.kept1[g], int(kept_hint[g]))
        m.AddHint(cm.new1[g], int(new_hint[g]))


CPSAT_WALL_FACTOR = 30.0  # the wall-clock net of a CP-SAT placement, × its deterministic time limit


def _cpsat_solver(variables: int, time_limit: float, seed: int):
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    # Deterministic time (CP-SAT's work measure, ~seconds on an idle machine): a wall-clock limit
    # gave a different placement on a busy machine. The wall-clock net only stops a runaway solve.
    solver.parameters.max_deterministic_time = float(time_limit)
    solver.parameters.max_time_in_seconds = CPSAT_WALL_FACTOR * float(time_limit)
    solver.parameters.random_seed = int(seed)
    # Symmetry detection and full presolve cost seconds on thousand-GPU
    # models (measured: 1.6 s of presolve at 683 GPUs before any search); the
    # greedy hint is a complete feasible solution, so go straight to search.
    solver.parameters.symmetry_level = 0
    if variables > 2_000:
        solver.parameters.cp_model_presolve = False
        # One thread, but interleaving the subsolvers (LNS around the hint)
        # instead of a single tree search, which never improved on the hint here.
        solver.parameters.interleave_search = True
    return solver


def _decode(layout: TypeLayout, previous, cm: _CpModel, solver) -> list[np.ndarray]:
    free = np.ones(layout.W, dtype=bool)
    out: list[np.ndarray | None] = [None] * cm.units
    for u, k in cm.keep.items():
        if solver.Value(k):
            out[u] = previous[u]
            free[previous[u]] = False
    quota = [int(solver.Value(v)) for v in cm.kept1]
    for u in cm.singles:
        p = previous[u]
        if p is not None and quota[layout.server_of[p[0]]] > 0 and free[p[0]]:
            quota[layout.server_of[p[0]]] -= 1
            out[u] = p
            free[p] = False

    def take(g: int, c: int) -> np.ndarray:
        a = int(layout.server_start[g])
        got = a + np.flatnonzero(free[a : a + layout.server_capacity[g]])[:c]
        free[got] = False
        return got

    for u in cm.multi:
        if out[u] is None:
            out[u] = np.concatenate(
                [take(g, int(solver.Value(cm.x[u, g]))) for g in range(layout.S) if (u, g) in cm.x and solver.Value(cm.x[u, g])]
            )
    rest = [u for u in cm.singles if out[u] is None]
    i = 0
    for g, v in enumerate(cm.new1):
        for gpu in take(g, int(solver.Value(v)) + quota[g]):  # unused kept quota is free room
            if i < len(rest):
                out[rest[i]] = np.array([gpu])
                i += 1
    return out  # type: ignore[return-value]


def _note(p: TypePlacement, note: str) -> TypePlacement:
    return TypePlacement(p.gpus, p.spans, p.migrations, note)


def servers_spanned(layout: TypeLayout, gpus: np.ndarray) -> int:
    return int(len(np.unique(layout.server_of[gpus])))


__all__ = ["PLACEMENT_POLICIES", "Layout", "TypeLayout", "TypePlacement", "place", "place_cpsat", "place_greedy_fast", "servers_spanned"]
