"""Priority-order baselines in the allocation shape of the fractional policies.

Jobs are sorted by a priority key; walking that order, each job takes its
scale factor's worth of GPUs of the fastest type it can run on that still has
room (X[m, j] = 1), or waits (row of zeros) — later jobs that fit may still
start (backfilling). Ties: arrival time, then job id. The orders:

- ``fifo``: arrival time.
- ``las``: least attained service (GPU-seconds) first.
- ``srtf``: shortest remaining time first, R_m / max_j T[m, j] (needs ``steps_total``).
- ``tiresias``: discretized 2D-LAS (Tiresias, NSDI'19): attained GPU-service
  (GPU count × time = ``attained_service``) places a job in queue q, the first
  q with service < thresholds[q]; defaults 3,250 and 7,200 GPU-seconds (three
  queues), the Tiresias simulator's ``queue_limit``. FIFO by arrival within a
  queue. Starvation: a job in a lower queue that has waited at least
  ``starvation_factor`` × its executed time (service / s_m) since it last ran
  is promoted to queue 0 (the simulator's ``solve_starvation`` knob, which it
  runs at 1, 2, 4, 8, …; default 8, 0 disables). Waiting time is
  ``now − last_run_time`` when the snapshot has it, else elapsed time − executed
  time (the total waiting since arrival).
  ``discretization="gittins"`` (``tiresias_gittins``, Tiresias's
  dlas-gpu-gittins): the queue thresholds come from the Gittins index of a
  GPU-time prior (``prior``: a CSV with a ``duration`` column of GPU-seconds,
  default ``$OPTSCHED_PEER_DATA/tiresias/yarn-gput1000.csv``; without it a
  documented fallback, a log-normal with that file's median 2,227 s and σ = 2,
  with a warning). The index of a job with attained service a and quantum Δ is
  G(a, Δ) = P(S − a ≤ Δ | S > a) / E[min(S − a, Δ) | S > a] over the prior's
  samples S. Threshold q is the first a where G(a, Δ₀) ≤ G(0, Δ₀) / ratio^q
  (Δ₀ = 3,250 GPU-s, Tiresias's first limit; ratio 2): each queue holds jobs
  whose chance of finishing within the next quantum has halved again — on
  the Yarn prior this gives 2,519 and 5,356 GPU-s, near Tiresias's hand-set
  3,250 and 7,200. Within a queue jobs are ordered by G(a, threshold − a),
  highest first (the last queue uses Δ₀), then arrival.
- ``gandiva``: FIFO placement, then Gandiva-style packing: a job left waiting
  joins a running job of the same width on that job's GPUs when the pair is
  admitted (formulations.base admission rule), best packing gain first; each
  running job takes at most one partner. The pair then holds the GPUs all the
  time (pair fraction 1).

``agnostic=True`` places on any type with room, in type order, instead of the
fastest. The objective reported is the number of jobs running.

``fifo`` re-picks every round, as Gavel's FIFO_Perf re-decides at every
arrival and completion: a running job moves to a faster type when one frees
up. ``sticky=True`` (``fifo`` only) keeps running jobs in place as Gavel's
base FIFOPolicy does (which picks a random type for a job it starts; we
pick the fastest, or type order with ``agnostic``): a running job
(``Instance.extras["current_type"]``: the column it runs on, −1 when
waiting; the simulator fills it) keeps its type and is not preempted, and
the waiting jobs take what the running ones leave, in FIFO order. On
Gavel's static makespan experiment (100 multi-GPU jobs on 36:36:36, seeds
0–2; ``bench/fidelity.py --only static``) sticky runs have no migrations but
a makespan of 484–873 h against 149–163 h re-picking: a long job that
started on a K80 stays there (5.9× slower for ResNet-18).
"""

from __future__ import annotations

import numpy as np

from optsched.formulations.base import admitted_pairs, require_steps_remaining
from optsched.model import Allocation, Instance, OptschedError
from optsched.checks import MAX_GPU_SECONDS, check_flag, check_increasing, check_number

ORDERS = ("fifo", "las", "srtf", "tiresias", "gandiva")
TIRESIAS_THRESHOLDS = (3250.0, 7200.0)  # GPU-seconds, Tiresias simulator jobs.py
STARVATION_FACTOR = 8.0


GITTINS_QUANTUM = 3250.0
GITTINS_RATIO = 2.0
DISCRETIZATIONS = ("fixed", "gittins")


def gpu_time_prior(prior=None) -> np.ndarray:
    """Sorted GPU-time samples (seconds) of the Gittins prior (see module doc); cached per path."""
    import os

    if isinstance(prior, (list, tuple, np.ndarray)):
        return _read_prior(prior)  # samples: not cached (a list would have read the default's entry)
    if prior is not None and not isinstance(prior, (str, os.PathLike)):
        raise OptschedError(f"prior: a CSV path or a list of GPU-seconds, not {type(prior).__name__} ({prior!r})")
    key = None if prior is None else str(prior)
    if key not in _PRIORS:
        _PRIORS[key] = _read_prior(prior)
    return _PRIORS[key]


_PRIORS: dict = {}


def _read_prior(prior) -> np.ndarray:
    import logging
    import os

    path = prior
    if path is None:
        root = os.environ.get("OPTSCHED_PEER_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
        path = os.path.join(root, "tiresias", "yarn-gput1000.csv")
        if not os.path.exists(path):
            logging.getLogger("optsched.policy").warning(
                "tiresias gittins: no GPU-time prior at %s; using a log-normal (median 2,227 s, sigma 2)", path)
            q = (np.arange(1000) + 0.5) / 1000
            from scipy.stats import norm

            return np.sort(2227.0 * np.exp(2.0 * norm.ppf(q)))
    if isinstance(path, (list, tuple, np.ndarray)):
        S = np.asarray(path, dtype=float)
    else:
        import pandas as pd

        try:
            df = pd.read_csv(path)
        except FileNotFoundError:
            raise OptschedError(f"prior: no such file {str(path)!r}") from None
        except (OSError, ValueError, UnicodeDecodeError) as e:  # a directory, a binary file, malformed CSV
            raise OptschedError(f"prior: cannot read {str(path)!r} as CSV ({type(e).__name__})") from None
        if "duration" not in df:
            raise OptschedError(f"prior: {path} has no 'duration' column (GPU-seconds per job)")
        S = pd.to_numeric(df["duration"], errors="coerce").to_numpy(dtype=float)
    S = S[np.isfinite(S) & (S > 0)]
    if not len(S):
        raise OptschedError("prior: no positive GPU-time samples")
    return np.sort(S)


def gittins_index(S: np.ndarray, attained: np.ndarray, quantum: np.ndarray) -> np.ndarray:
    """G(a, Δ) = P(S − a ≤ Δ | S > a) / E[min(S − a, Δ) | S > a] (0 past the prior's largest sample)."""
    a = np.asarray(attained, dtype=float)[:, None]
    d = np.broadcast_to(np.asarray(quantum, dtype=float), a.shape[:1])[:, None]
    alive = S[None, :] > a
    r = S[None, :] - a
    cnt = alive.sum(axis=1)
    p = ((r <= d) & alive).sum(axis=1) / np.maximum(cnt, 1)
    e = (np.minimum(r, d) * alive).sum(axis=1) / np.maximum(cnt, 1)
    return np.where(cnt > 0, p / np.maximum(e, 1e-300), 0.0)


_THRESHOLDS: dict = {}


def gittins_thresholds(S: np.ndarray, queues: int = 3, quantum: float = GITTINS_QUANTUM,
                       ratio: float = GITTINS_RATIO) -> tuple[float, ...]:
    key = (len(S), float(S[0]), float(S[-1]), float(S.sum()), queues, quantum, ratio)
    if key not in _THRESHOLDS:
        _THRESHOLDS[key] = _gittins_thresholds(S, queues, quantum, ratio)
    return _THRESHOLDS[key]


def _gittins_thresholds(S: np.ndarray, queues: int, quantum: float, ratio: float) -> tuple[float, ...]:
    grid = np.unique(np.concatenate([[0.0], S]))
    g = gittins_index(S, grid, np.full(len(grid), quantum))
    out = []
    for q in range(1, queues):
        below = np.flatnonzero(g <= g[0] / ratio ** q)
        out.append(float(grid[below[0]]) if len(below) else float(grid[-1]))
    return tuple(out)


def priority_order(
    inst: Instance, order: str, thresholds=TIRESIAS_THRESHOLDS, starvation_factor: float = STARVATION_FACTOR,
    discretization: str = "fixed", prior=None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Job indices, highest priority first (and the Tiresias queue of each job)."""
    ids = np.array(inst.job_ids, dtype=object)
    id_rank = np.argsort(np.argsort(ids, kind="stable"), kind="stable")  # lexicographic rank of the id
    queue = None
    if order in ("fifo", "gandiva"):
        primary = np.zeros(inst.n)
    elif order == "las":
        primary = inst.attained_service
    elif order == "srtf":
        primary = require_steps_remaining(inst, "srtf") / inst.throughput.max(axis=1)
    elif order == "tiresias":
        if discretization not in DISCRETIZATIONS:
            raise OptschedError(f"discretization: unknown {discretization!r} (choose from {', '.join(DISCRETIZATIONS)})")
        if discretization == "gittins":
            S = gpu_time_prior(prior)
            thresholds = gittins_thresholds(S)
            queue = tiresias_queues(inst, thresholds, starvation_factor)
            limits = np.asarray(sorted(thresholds) + [np.inf])
            upper = limits[queue]
            quantum = np.where(np.isfinite(upper), upper - inst.attained_service, GITTINS_QUANTUM)
            g = gittins_index(S, inst.attained_service, np.maximum(quantum, 1e-9))
            # queue first, then the higher index; both in one float key
            primary = queue.astype(float) + 0.5 * (1.0 - g / max(g.max(), 1e-300))
            return np.lexsort((id_rank, inst.arrival_time, primary)), queue
        queue = tiresias_queues(inst, thresholds, starvation_factor)
        primary = queue.astype(float)
    else:
        raise OptschedError(f"order: unknown priority order {order!r} (choose from {', '.join(ORDERS)})")
    return np.lexsort((id_rank, inst.arrival_time, primary)), queue


def tiresias_queues(inst: Instance, thresholds=TIRESIAS_THRESHOLDS, starvation_factor: float = STARVATION_FACTOR) -> np.ndarray:
    """Queue index per job: discretized attained GPU-service, with starvation promotion."""
    limits = np.asarray(sorted(thresholds), dtype=float)
    queue = np.searchsorted(limits, inst.attained_service, side="right")
    if starvation_factor > 0:
        executed = inst.attained_service / inst.scale_factor
        waited = np.maximum(inst.elapsed_time - executed, 0.0)
        if inst.last_run_time is not None:
            since = inst.time - inst.last_run_time
            waited = np.where(np.isnan(since), waited, np.maximum(since, 0.0))
        queue = np.where((queue > 0) & (executed > 0) & (waited >= starvation_factor * executed), 0, queue)
    return queue


def current_types(inst: Instance) -> np.ndarray | None:
    """The column each job runs on now (−1: waiting), when the caller says."""
    cur = (inst.extras or {}).get("current_type")
    if cur is None:
        return None
    cur = np.asarray(cur)
    if cur.shape != (inst.n,) or not np.issubdtype(cur.dtype, np.integer) or ((cur < -1) | (cur >= inst.k)).any():
        raise OptschedError(f"extras.current_type: expected {inst.n} type columns in [-1, {inst.k - 1}]")
    return cur


def greedy_fit(inst: Instance, order: np.ndarray, agnostic: bool = False, current: np.ndarray | None = None) -> np.ndarray:
    """X[m, j] = 1 for the jobs that fit, walking ``order``; fastest usable type first.
    ``current`` (sticky, non-preemptive): running jobs keep their type first."""
    X = np.zeros((inst.n, inst.k))
    free = inst.capacity.copy()
    # Per job, types by descending throughput (ties: type order); agnostic: type order.
    pref = np.tile(np.arange(inst.k), (inst.n, 1)) if agnostic else np.argsort(-inst.throughput, axis=1, kind="stable")
    placed = np.zeros(inst.n, dtype=bool)
    if current is not None:
        for m in order:
            c, s = current[m], inst.scale_factor[m]
            if c >= 0 and inst.throughput[m, c] > 0 and free[c] >= s:
                X[m, c] = 1.0
                free[c] -= s
                placed[m] = True
    for m in order:
        if placed[m]:
            continue
        s = inst.scale_factor[m]
        for j in pref[m]:
            if inst.throughput[m, j] > 0 and free[j] >= s:
                X[m, j] = 1.0
                free[j] -= s
                break
        if not free.any():
            break
    return X


def gandiva_pack(inst: Instance, X: np.ndarray, max_partners: int | None = None):
    """Pair each waiting job with at most one running job on the running job's GPUs."""
    pairs, rate, ok = admitted_pairs(inst, max_partners)
    running = X.sum(axis=1) > 0
    on_type = X.argmax(axis=1)
    a, b = pairs[:, 0], pairs[:, 1]
    # Candidate (pair, type): exactly one member running, on a type the pair is admitted on.
    host = np.where(running[a], a, b)
    cand = np.flatnonzero((running[a] ^ running[b]) & ok[np.arange(len(pairs)), on_type[host]])
    gain = rate[cand, on_type[host[cand]]].sum(axis=1)
    busy = np.zeros(inst.n, dtype=bool)
    chosen = []
    for p in cand[np.lexsort((cand, -gain))]:
        if not busy[a[p]] and not busy[b[p]]:
            busy[a[p]] = busy[b[p]] = True
            chosen.append(p)
    chosen = np.array(chosen, dtype=int)
    Y = np.zeros((len(chosen), inst.k))
    if len(chosen):
        Y[np.arange(len(chosen)), on_type[host[chosen]]] = 1.0
        X = X.copy()
        X[host[chosen]] = 0.0  # the host's GPUs now run the pair
    thr = (inst.throughput * X).sum(axis=1)
    for q, p in enumerate(chosen):  # few pairs: a short loop over chosen pairs only
        j = on_type[host[p]]
        thr[a[p]] += inst.throughput[a[p], j] * rate[p, j, 0]
        thr[b[p]] += inst.throughput[b[p], j] * rate[p, j, 1]
    return X, pairs[chosen].reshape(-1, 2), Y, thr


# Options that mean something only under some orders (``--policy-option``
# refuses them elsewhere, as an unknown key, rather than ignoring them).
OPTIONS_ONLY_FOR = {
    "thresholds": ("order", ("tiresias",)), "starvation_factor": ("order", ("tiresias",)),
    "discretization": ("order", ("tiresias",)), "prior": ("order", ("tiresias",)),
    "sticky": ("order", ("fifo",)), "max_partners": ("order", ("gandiva",)),
}



def imports(options: dict) -> tuple[str, ...]:
    """What allocate() imports with these options, loaded (and timed as import_seconds)
    before its timer (optsched/policy.py): the Gittins prior is a CSV read by pandas."""
    return ("pandas",) if options.get("discretization") == "gittins" else ()

def allocate(
    inst: Instance,
    policy: str = "fifo",
    solver: str = "clarabel",
    time_limit: float = 60.0,
    order: str = "fifo",
    agnostic: bool = False,
    packing: bool = False,
    thresholds=TIRESIAS_THRESHOLDS,
    starvation_factor: float = STARVATION_FACTOR,
    max_partners: int | None = None,
    discretization: str = "fixed",
    prior=None,
    sticky: bool = False,
) -> Allocation:
    """solver and time_limit are unused: a priority order needs no solver."""
    agnostic, sticky = check_flag("agnostic", agnostic), check_flag("sticky", sticky)
    if discretization != "gittins" and prior is not None:  # (it would be ignored)
        raise OptschedError("prior: only tiresias_gittins reads a GPU-time prior")
    if discretization == "gittins" and thresholds is not TIRESIAS_THRESHOLDS:  # (they would be ignored)
        raise OptschedError("thresholds: tiresias_gittins computes its queue thresholds from the GPU-time prior "
                            "(Gittins index); give prior=<CSV> instead")
    thresholds = check_increasing("thresholds", thresholds, MAX_GPU_SECONDS, unit="GPU-seconds")
    starvation_factor = check_number("starvation_factor", starvation_factor, 0.0)
    max_partners = check_number("max_partners", max_partners, 0, whole=True, none=True)
    if sticky and order != "fifo":
        raise OptschedError(f"sticky: only the fifo order keeps running jobs in place (policy {policy})")
    if packing and order != "gandiva":
        raise OptschedError(f"packing: policy {policy} does not support space sharing (gandiva packs by itself)")
    import time

    t0 = time.perf_counter()
    ranked, queue = priority_order(inst, order, thresholds, starvation_factor, discretization, prior)
    X = greedy_fit(inst, ranked, agnostic, current_types(inst) if sticky else None)
    explanation: dict = {"priority_order": [inst.job_ids[m] for m in ranked]}
    if queue is not None:
        explanation["tiresias_queue"] = {jid: int(q) for jid, q in zip(inst.job_ids, queue)}
        if discretization == "gittins":
            explanation["tiresias_thresholds"] = list(gittins_thresholds(gpu_time_prior(prior)))
    pairs, Y, thr = np.zeros((0, 2), dtype=int), np.zeros((0, inst.k)), (inst.throughput * X).sum(axis=1)
    if order == "gandiva":
        X, pairs, Y, thr = gandiva_pack(inst, X, max_partners)
        explanation["capacity_used"] = {t: float(u) for t, u in zip(inst.gpu_types, inst.scale_factor @ X + inst.scale_factor[pairs[:, 0]] @ Y)}
        explanation["capacity"] = {t: float(c) for t, c in zip(inst.gpu_types, inst.capacity)}
        thr_equal = (inst.throughput * inst.equal_share()).sum(axis=1) * inst.weight / inst.scale_factor  # as explain()
        rel = np.divide(thr, thr_equal, out=np.zeros_like(thr), where=thr_equal > 0)
        explanation["share_vs_equal"] = {jid: float(r) for jid, r in zip(inst.job_ids, rel)}
    running = int((X.sum(axis=1) > 0).sum() + 2 * len(pairs))
    return Allocation.of(inst, policy, X, "ok", float(running), time.perf_counter() - t0, thr, explanation,
                         pairs=pairs, pair_fractions=Y)
