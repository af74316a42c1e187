"""What a round reads: the jobs (an Instance or a Snapshot) and the
allocation, in the allocator's columns, validated. Results are cached while
the inputs are the same objects or carry the same content: the simulator
builds a new Instance every round, mostly with the same jobs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optsched.allocator.state import Columns
from optsched.model import Allocation, Instance, OptschedError, Snapshot


@dataclass(frozen=True)
class JobsView:
    """The round's jobs: ids, scale factors and usable types, in our columns."""

    inst: Instance
    key: tuple  # (job ids, gpu types, throughput shape/dtype, scale factor dtype, their bytes)
    ids: tuple[str, ...]
    sf: np.ndarray  # (n,) int64
    widths: list[int]
    usable: np.ndarray  # (n, k) bool: positive throughput and enough GPUs of the type
    order: np.ndarray  # (n,) in [0, 1): rank by (arrival time, job id), the documented tie-break


@dataclass(frozen=True)
class AllocationView:
    """An allocation over the round's jobs."""

    x: np.ndarray  # (n, k) zero on types a job cannot use
    covered: np.ndarray  # (n,) bool: the allocation names the job
    pairs: list[tuple[int, int, np.ndarray]]  # (a, b, pair fractions (k,)) among the round's jobs
    counts: np.ndarray | None  # (n, k) GPU counts of a configuration policy
    absent: tuple[str, ...]  # jobs it names that are not in the round
    notes: tuple[str, ...]


class InputReader:
    """Reads and validates a round's inputs against the cluster's columns."""

    def __init__(self, cols: Columns):
        self.cols = cols
        self._cache: dict = {}

    def jobs(self, jobs) -> JobsView:
        return self._view(self._instance(jobs))

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

    def _view(self, inst: Instance) -> JobsView:
        T, sf = np.asarray(inst.throughput), np.asarray(inst.scale_factor)
        hit = self._cache.get("view")
        if hit is not None and hit.inst is inst:
            return hit
        arrival = np.asarray(inst.arrival_time, dtype=float)
        key = (inst.job_ids, inst.gpu_types, T.shape, T.dtype, sf.dtype, T.tobytes(), sf.tobytes(), arrival.tobytes())
        if hit is not None and hit.key == key:
            return hit
        view = _jobs_view(inst, key, T, sf, self.cols)
        self._cache["view"] = view
        return view

    def allocation(self, allocation: Allocation, view: JobsView) -> AllocationView:
        if not isinstance(allocation, Allocation):
            raise OptschedError(f"allocation: expected an Allocation, got {type(allocation).__name__}")
        hit = self._cache.get("allocation")
        if hit is not None and hit[0] is allocation and hit[1] is view:
            return hit[2]
        out = _allocation_view(allocation, view, self._checked(allocation), self.cols)
        self._cache["allocation"] = (allocation, view, out)
        return out

    def _checked(self, allocation: Allocation):
        """Columns and fractions of an allocation, validated (per object: the
        job set changes more often than the allocation)."""
        hit = self._cache.get("checked")
        if hit is not None and hit[0] is allocation:
            return hit[1]
        out = _checked_allocation(allocation, self.cols)
        self._cache["checked"] = (allocation, out)
        return out


def _jobs_view(inst: Instance, key: tuple, T: np.ndarray, sf: np.ndarray, cols: Columns) -> JobsView:
    n, k, ids = inst.n, cols.k, inst.job_ids
    unknown = [t for t in inst.gpu_types if t not in cols.index]
    if unknown:
        raise OptschedError(f"jobs: unknown GPU type {unknown[0]!r} (cluster has {', '.join(cols.gpu_types)})")
    if inst.gpu_types == cols.gpu_types and T.shape == (n, k):
        Tk = T  # already in our columns (only read here)
    else:
        Tk = np.zeros((n, k))
        Tk[:, [cols.index[t] for t in inst.gpu_types]] = T
    whole = np.isfinite(sf) & (sf >= 1) & (sf == np.round(sf))
    if not whole.all():
        m = int(np.flatnonzero(~whole)[0])
        raise OptschedError(f"jobs[{m}].scale_factor: job {ids[m]!r} needs a positive whole number of GPUs (got {sf[m]})")
    sfi = sf.astype(np.int64)
    for m in (m for m, j in enumerate(ids) if j[:1] == "["):  # (such ids are rare)
        from optsched.allocator.state import _unit_of

        if isinstance(_unit_of(ids[m], "jobs"), tuple):
            raise OptschedError(f"jobs[{m}].id: {ids[m]!r} reads as a packed pair's key in the allocator's state "
                                "(a JSON list of two ids); rename the job")
    usable = (Tk > 0) & (sfi[:, None] <= cols.capacity[None, :])
    stuck = ~usable.any(axis=1)
    if stuck.any():
        m = int(np.flatnonzero(stuck)[0])
        have = ", ".join(f"{t} {int(c)}" for t, c in zip(cols.gpu_types, cols.capacity) if Tk[m, cols.index[t]] > 0)
        raise OptschedError(
            f"jobs[{m}].scale_factor: job {ids[m]!r} needs {sfi[m]} GPUs but no GPU type it can run on has "
            f"that many ({have or 'it has no positive throughput'})"
        )
    return JobsView(inst, key, ids, sfi, sfi.tolist(), usable, arrival_rank(inst.arrival_time, ids))


def arrival_rank(arrival, ids: tuple[str, ...]) -> np.ndarray:
    """Each job's place among the round's jobs by (arrival time, job id),
    scaled to [0, 1): the last key of every ranking, so equal-priority jobs
    go earlier arrival first, then by id — the same order whoever names the
    jobs (a session, the simulator, a caller's own ids)."""
    n = len(ids)
    arr = np.asarray(arrival, dtype=float).tolist()
    rank = np.empty(n)
    rank[sorted(range(n), key=lambda m: (arr[m], ids[m]))] = np.arange(n) / max(n, 1)
    return rank


def _checked_allocation(allocation: Allocation, cols: Columns):
    """(columns, fractions, what is wrong with the GPU counts or "")."""
    acols = []
    for t in allocation.gpu_types:
        if t not in cols.index:
            raise OptschedError(f"allocation: unknown GPU type {t!r} (cluster has {', '.join(cols.gpu_types)})")
        acols.append(cols.index[t])
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
    return acols, F, counts_error


def _allocation_view(allocation: Allocation, view: JobsView, checked, cols: Columns) -> AllocationView:
    ids, n, k = view.ids, len(view.ids), cols.k
    acols, F, counts_error = checked
    pos = {j: m for m, j in enumerate(ids)}
    where = np.fromiter((pos.get(j, -1) for j in allocation.job_ids), dtype=np.int64, count=len(allocation.job_ids))
    ok = where >= 0
    absent = tuple(allocation.job_ids[a] for a in np.flatnonzero(~ok)) if not ok.all() else ()
    X = np.zeros((n, k))
    X[np.ix_(where[ok], acols)] = F[ok]
    covered = np.zeros(n, dtype=bool)
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
        over = counts.sum(axis=0) > cols.capacity
        if over.any():
            c = int(np.flatnonzero(over)[0])
            raise OptschedError(f"allocation.gpu_counts: {int(counts[:, c].sum())} {cols.gpu_types[c]} GPUs requested, "
                                f"{int(cols.capacity[c])} exist")
    notes = []
    outside = X[~view.usable]
    if outside.size and (outside > 0).any():
        notes.append("allocation gives time on types some jobs cannot use; ignored")
        X = np.where(view.usable, X, 0.0)
    return AllocationView(X, covered, pairs, counts, absent, tuple(notes))
