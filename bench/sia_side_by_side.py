"""Sia's own policy code beside ours on the same realistic rounds (run by hand, not in CI).

Sia's simulator (github.com/siasosp23/artifacts, ``sia-simulator/``) is never copied
into the project: check it out beside it, e.g.

    git --git-dir=<mirror> archive HEAD sia-simulator | tar -x -C /work/peers/sia
    pip install --no-deps --target /work/peers/pylib autograd   # its goodput.py imports it

and point ``--sia`` at that folder. Its ``SiaPolicy.optimize_mip`` runs as published
(goodput per configuration through its own ``GoodputFunction``/``SpeedupFunction``,
normalization, restart factors, the cvxpy MILP, placement), with one change: cvxpy's
CBC is not installed here, so its ``problem.solve(solver=cp.CBC, ...,
allowablePercentageGap=g)`` runs HiGHS through cvxpy with ``mip_rel_gap = g/100``
(the same 1e-4 gap). Its jobs carry our instance's data: per-type throughput
parameters, gradient statistics, batch limits, GPU caps, ages, restarts, and the
running configuration (``prev_allocs_v2``).

Per round both run in this process and are timed in CPU seconds (time.process_time):
ours is ``solve_instance(inst, "sia")`` (goodput table, cache kept across rounds as
Sia memoizes each job's speedups); Sia's is building its jobs' speedup functions plus
``optimize_mip``. Both choices are then scored on Sia's objective — Σ A[m, c] + λ_n ·
(jobs left out), A = Ĝ^p from Sia's own speedup matrix after its restart factors,
minimized — unrounded (Sia's MILP rounds A to 2 decimals; the rounded score is
printed too).

    python bench/sia_side_by_side.py --sia /work/peers/sia/sia-simulator --gpus 2048 --jobs 1024 --count 20
    python bench/sia_side_by_side.py --sia ... --gpus 2048 --jobs 1024 --rounds 50    # a stream with 2 % churn

``--alone``: ours only, no peer code (``--policy sia``, ``pollux`` or ``optimus``; cold rounds or
``--rounds`` for a stream), the same p50 / p99 / max CPU seconds.

``--types K`` (with ``--alone``; 3 … 10): rounds on a cluster of K GPU types instead of Sia's three
(``ManyTypeStream``): Sia's six measured types (aws, azure, dgx, dgx-ext, quad, rtx; fits of
``placements-<type>.csv``/``scalability-<type>.csv``, GPUs per node and the shares of Sia's
physical cluster from its ``simulator_config.py``), then up to four types extrapolated from a
measured one: its compute terms (α_c, β_c: the time of a micro-batch) scaled by a speed factor,
its network terms and overlap γ kept (another GPU generation in the same kind of node). Every
policy (sia, pollux, optimus) runs on the same Sia-profile jobs there.

``--policy pollux``: Pollux's genetic algorithm as Sia's repository carries it
(``pollux_unaware_fix.PolluxPolicyUnawareFix``, NSGA-II from pymoo 0.4: ``pip install
--target /work/peers/pylib_pymoo pymoo==0.4.2.2``; its ``np.int``/``np.float`` are
given back to numpy 2 here) beside our ``pollux`` on Pollux-profile rounds (one type of
4-GPU T4 nodes); both allocations are scored by the GA's own ``Problem._evaluate``
(the power mean of scaled speedups, p = -1, its restart factor), ours packed onto
nodes first-fit decreasing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import time

import numpy as np


# Sia's six measured GPU types: (name, GPUs per node, GPUs in Sia's physical cluster)
MEASURED_TYPES = (("aws", 4, 64), ("azure", 8, 40), ("dgx", 8, 16), ("dgx-ext", 8, 16), ("quad", 4, 4), ("rtx", 8, 24))
# Extrapolated types: (name, measured type, factor on its compute terms α_c and β_c, GPUs per node, share)
DERIVED_TYPES = (("h100", "dgx-ext", 0.5, 8, 16), ("l4", "aws", 0.7, 4, 32), ("a10", "rtx", 0.8, 4, 24),
                 ("p100", "azure", 1.5, 4, 16))
_MEASURED_APPS: dict = {}


def many_type_apps(types: tuple[str, ...], server: dict) -> list:
    """Sia's five applications with a model for every type of ``types`` (see the module docstring)."""
    import dataclasses

    from optsched.bench.profile_instances import SIA_APPS, _apps, sia_cluster
    from optsched.goodput.profiles import sia_applications

    if not _MEASURED_APPS:  # fitted once per process (~17 CPU s for the six types)
        _MEASURED_APPS.update(sia_applications(gpu_types=tuple(t for t, _, _ in MEASURED_TYPES)))
    t3, cap3, _ = sia_cluster(64)
    out = []
    for base, name in zip(_apps("sia", t3, cap3), SIA_APPS):
        measured = _MEASURED_APPS[name]
        params, profiles = {}, {}
        for t in types:
            if t in measured.params:
                params[t], profiles[t] = measured.params[t], measured.profiles.get(t)
            else:
                _, src, factor, _, _ = next(d for d in DERIVED_TYPES if d[0] == t)
                params[t] = np.array(measured.params[src], float)
                params[t][:2] *= factor
        profiles = {t: v for t, v in profiles.items() if v is not None}
        out.append(dataclasses.replace(base, params=params, profiles=profiles, server_gpus=dict(server)))
    return out


def many_type_stream_class():
    from optsched.bench.profile_instances import Stream

    class ManyTypeStream(Stream):
        """Sia-profile rounds on ``n_types`` GPU types (3 … 10), shares as in Sia's cluster."""

        def __init__(self, n_types: int, n_gpus: int, n_jobs: int, seed: int = 0, churn: float = 0.02):
            spec = [(t, node, share) for t, node, share in MEASURED_TYPES]
            spec += [(t, node, share) for t, _, _, node, share in DERIVED_TYPES]
            spec = sorted(spec[:n_types])
            total = sum(s for _, _, s in spec)
            self.types = tuple(t for t, _, _ in spec)
            self.server = np.array([node for _, node, _ in spec], int)
            self.capacity = np.array([max(node, int(round(n_gpus * s / total / node)) * node) for _, node, s in spec],
                                     float)
            self.kind, self.churn = "sia", churn
            self.apps = many_type_apps(self.types, dict(zip(self.types, self.server.tolist())))
            self._populate(seed, n_jobs)

    return ManyTypeStream


def load_sia(folder: str, extra_path: str | None):
    sys.path.insert(0, folder)
    if extra_path:  # Sia's goodput.py imports autograd (for its fits): installed beside the checkout
        sys.path.append(extra_path)
    import cvxpy as cp

    import sia as sia_module  # noqa: F401  (Sia's policy module)
    from goodput import GoodputFunction
    from speedup import UncachedSpeedupFunction as SpeedupFunction  # what Sia's simulator uses (cache_speedups=False)

    original = cp.Problem.solve

    def solve(self, *args, solver=None, allowablePercentageGap=None, numberThreads=None, **kw):
        if solver == cp.CBC:  # not installed here: HiGHS at the same gap
            kw.pop("verbose", None)
            return original(self, solver=cp.HIGHS, mip_rel_gap=(allowablePercentageGap or 0.01) / 100.0)
        return original(self, *args, solver=solver, **kw)

    cp.Problem.solve = solve
    return sia_module, GoodputFunction, SpeedupFunction


class _Node:
    def __init__(self, gpus):
        self.resources = {"nvidia.com/gpu": gpus}


class _Job:
    """What SiaPolicy.optimize_mip reads of a job."""

    def __init__(self, speedup_fn, cap, age, restarts, clusters):
        self.category = "adaptive"
        self.speedup_fn = speedup_fn
        self.scale_unit = {c: 1 for c in clusters}
        self.max_replicas = {c: cap for c in clusters}
        self.min_replicas = {c: 1 for c in clusters}
        self.age = age
        self.num_restarts = restarts
        self.scaling_underway = False


def sia_round(mods, inst, policy):
    """Sia's jobs for ``inst`` (its speedup functions built here, as its simulator does each
    round) and its decision: (choice as {job: (type, gpus)}, Sia's speedup matrix, config map)."""
    sia_module, GoodputFunction, SpeedupFunction = mods
    el = inst.elastic
    clusters = list(inst.gpu_types)
    jobs = {}
    for m, jid in enumerate(inst.job_ids):
        fns = {}
        for j, c in enumerate(clusters):
            fn = GoodputFunction(el.params[m, j], (el.grad_sqr[m], el.grad_var[m]), el.init_batch_size[m])
            fns[c] = SpeedupFunction(fn, max_batch_size=el.max_batch_size[m],
                                     atomic_bsz_range=(el.min_local_bsz[m], el.max_local_bsz[m]), accumulation=True)
        jobs[jid] = _Job(fns, int(el.max_gpus[m]), float(inst.elapsed_time[m]), int(el.num_restarts[m]), clusters)
    policy.prev_allocs_v2 = {"rigid": {}, "adaptive": {}}
    for m, jid in enumerate(inst.job_ids):
        if el.current_gpus[m].sum() > 0:
            j = int(np.argmax(el.current_gpus[m]))
            key = (clusters[j], int(el.current_nodes[m, j]), int(el.current_gpus[m, j]))
            if key in policy.config_to_idx_map:
                policy.prev_allocs_v2["adaptive"][jid] = policy.config_to_idx_map[key]
    nodes = {c: {i: _Node(int(el.server_gpus[j])) for i in range(int(inst.capacity[j] // el.server_gpus[j]))}
             for j, c in enumerate(clusters)}
    captured = {}
    name = "_SiaPolicy__solve_mip_rescaled"
    inner = getattr(type(policy), name)

    def spy(self, optim_params, *a, **kw):
        captured["S"] = np.copy(optim_params["adaptive"][1])
        captured["f"] = np.asarray(optim_params["adaptive"][2])
        captured["prev"] = dict(self.prev_allocs_v2["adaptive"])
        return inner(self, optim_params, *a, **kw)

    setattr(type(policy), name, spy)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # Sia prints per job
            placements = policy.optimize_mip(jobs, nodes, {})
    finally:
        setattr(type(policy), name, inner)
    return placements, captured


def sia_objective(captured, policy, inst, choice_idx, p, lambda_n, rounded=False):
    """Sia's objective (minimized for p < 0) of a choice given as Sia config indices (-1: none)."""
    S = captured["S"].copy()
    for i, jid in enumerate(inst.job_ids):
        prev = captured["prev"].get(jid)
        keep = S[i, prev] if prev is not None else None
        S[i] *= captured["f"][i]
        if prev is not None:
            S[i, prev] = keep
    A = np.power(S, p)
    if rounded:
        A = np.round(A, 2)
    on = choice_idx >= 0
    return float(A[np.flatnonzero(on), choice_idx[on]].sum() + lambda_n * (~on).sum())


def ours_as_sia(alloc, inst, policy):
    idx = np.full(inst.n, -1)
    for m in range(inst.n):
        row = alloc.gpu_counts[m]
        if row.sum() > 0:
            j = int(np.argmax(row))
            idx[m] = policy.config_to_idx_map[(inst.gpu_types[j], int(alloc.nodes[m, j]), int(row[j]))]
    return idx


def sia_as_idx(placements, inst, policy):
    idx = np.full(inst.n, -1)
    for m, jid in enumerate(inst.job_ids):
        got = policy.prev_allocs_v2["adaptive"].get(jid)
        idx[m] = -1 if got is None else got
    return idx


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sia", default="/work/peers/sia/sia-simulator")
    ap.add_argument("--pylib", default="/work/peers/pylib", help="where autograd is (pip install --target)")
    ap.add_argument("--policy", choices=("sia", "pollux", "optimus"), default="sia")
    ap.add_argument("--alone", action="store_true", help="ours only (no peer code): p50/p99/max CPU s")
    ap.add_argument("--pymoo", default="/work/peers/pylib_pymoo", help="where pymoo 0.4 is (pip install --target)")
    ap.add_argument("--gpus", type=int, default=2048)
    ap.add_argument("--jobs", type=int, default=1024)
    ap.add_argument("--count", type=int, default=20, help="independent cold rounds")
    ap.add_argument("--rounds", type=int, default=0, help="a stream of this many rounds instead")
    ap.add_argument("--churn", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--types", type=int, default=0, help="with --alone: a cluster of this many GPU types (3-10)")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from optsched.bench.profile_instances import Stream
    from optsched.formulations import configurations as C
    from optsched.policy import solve_instance

    if args.alone or args.policy == "optimus" or args.types:
        return alone_main(args)
    if args.policy == "pollux":
        return pollux_main(args)
    mods = load_sia(args.sia, args.pylib)
    p, lambda_n = -0.5, 1.1
    first = Stream("sia", args.gpus, args.jobs, args.seed, args.churn)

    def new_policy(inst):
        pol = mods[0].SiaPolicy(p_fairness=p, lambda_n=lambda_n)
        per = dict(zip(inst.gpu_types, inst.elastic.server_gpus.tolist()))
        nn = {t: int(w // per[t]) for t, w in zip(inst.gpu_types, inst.capacity)}
        with contextlib.redirect_stdout(io.StringIO()):
            pol.populate_valid_configs(nn, per, nn)
        return pol

    if args.rounds:
        stream, insts = first, None
    else:
        insts = [first.instance] + [Stream("sia", args.gpus, args.jobs, args.seed + i, args.churn).instance
                                    for i in range(1, args.count)]
    ours_t, sia_t, gaps, rgaps, statuses = [], [], [], [], []
    C.GOODPUT_CACHE.clear()
    total = args.rounds or args.count
    solve_instance(first.instance, "sia")  # imports and the first HiGHS load outside the timers (both sides)
    C.GOODPUT_CACHE.clear()
    for r in range(total):
        inst = stream.instance if args.rounds else insts[r]
        if not args.rounds:
            C.GOODPUT_CACHE.clear()
        t = time.process_time()
        ours = solve_instance(inst, "sia")
        ours_t.append(time.process_time() - t)
        statuses.append(ours.status)
        pol = new_policy(inst)
        t = time.process_time()
        placements, cap = sia_round(mods, inst, pol)
        sia_t.append(time.process_time() - t)
        a, b = ours_as_sia(ours, inst, pol), sia_as_idx(placements, inst, pol)
        so, ss = sia_objective(cap, pol, inst, a, p, lambda_n), sia_objective(cap, pol, inst, b, p, lambda_n)
        gaps.append((so - ss) / abs(ss))
        ro, rs = (sia_objective(cap, pol, inst, x, p, lambda_n, rounded=True) for x in (a, b))
        rgaps.append((ro - rs) / abs(rs))
        print(f"round {r:3d}: ours {ours_t[-1]:.3f} s  sia {sia_t[-1]:.3f} s  Sia's objective ours {so:.4f} "
              f"sia {ss:.4f} ({gaps[-1]:+.2e}; rounded A {rgaps[-1]:+.2e})  {ours.status}", flush=True)
        if args.rounds and r + 1 < total:
            stream.advance(np.asarray(ours.gpu_counts), np.asarray(ours.nodes))

    def q(x, f):
        return float(np.quantile(np.asarray(x), f, method="higher"))

    load = os.getloadavg()[0]
    print(f"\n{'stream of ' + str(total) + ' rounds' if args.rounds else str(total) + ' cold rounds'}, "
          f"{args.gpus} GPUs / {args.jobs} jobs, load average {load:.1f}")
    for name, x in (("ours", ours_t), ("Sia", sia_t)):
        print(f"  {name:5s} p50 {statistics.median(x):.3f}  p99 {q(x, 0.99):.3f}  max {max(x):.3f} CPU s")
    ratio = statistics.median(sia_t) / statistics.median(ours_t)
    print(f"  median ratio Sia/ours {ratio:.1f}x; Sia's objective, ours vs Sia's (minimized; < 0 = ours better): "
          f"worst {max(gaps):+.2e}, median {statistics.median(gaps):+.2e}; rounded-A worst {max(rgaps):+.2e}; "
          f"statuses {sorted(set(statuses))}")


def alone_main(args) -> None:
    """Ours alone on the same rounds: cold rounds (goodput cache cleared before each) or a
    stream (cache kept, each round's running configurations our previous decision); the
    first solve of the process (imports, HiGHS's first load) is outside the timers."""
    from optsched.bench.profile_instances import Stream
    from optsched.formulations import configurations as C
    from optsched.policy import solve_instance

    kind = "sia" if args.policy == "sia" else "pollux"  # optimus: Pollux-profile rounds
    if args.types:  # every policy on Sia-profile jobs over that many GPU types
        many = many_type_stream_class()
        Stream = lambda kind, *a: many(args.types, *a)  # noqa: E731
    solve_instance(Stream(kind, 64, 32, 10_000).instance, args.policy)
    C.GOODPUT_CACHE.clear()
    total = args.rounds or args.count
    stream = Stream(kind, args.gpus, args.jobs, args.seed, args.churn)
    times, statuses = [], []
    for r in range(total):
        if not args.rounds:
            stream = stream if r == 0 else Stream(kind, args.gpus, args.jobs, args.seed + r, args.churn)
            C.GOODPUT_CACHE.clear()
        t = time.process_time()
        alloc = solve_instance(stream.instance, args.policy)
        times.append(time.process_time() - t)
        statuses.append(str(alloc.status))
        print(f"round {r:3d}: ours {times[-1]:.3f} s  {alloc.status}", flush=True)
        if args.rounds and r + 1 < total:
            stream.advance(np.asarray(alloc.gpu_counts), np.asarray(alloc.nodes))
    q = float(np.quantile(np.asarray(times), 0.99, method="higher"))
    print(f"\n{args.policy} alone, {'stream of ' + str(total) + ' rounds' if args.rounds else str(total) + ' cold rounds'}, "
          f"{args.gpus} GPUs / {args.jobs} jobs{f', {args.types} GPU types' if args.types else ''}, "
          f"load average {os.getloadavg()[0]:.1f}\n"
          f"  ours  p50 {statistics.median(times):.3f}  p99 {q:.3f}  max {max(times):.3f} CPU s; statuses {sorted(set(statuses))}")


# -- Pollux's genetic algorithm --------------------------------------------------------------


class _PolluxJob:
    """What Pollux's Problem reads of a job (adaptdl's JobInfo)."""

    def __init__(self, speedup_fn, cap, age, restarts, created):
        self.resources = {"nvidia.com/gpu": 1}
        self.speedup_fn = speedup_fn
        self.creation_timestamp = created
        self.attained_service = 0.0
        self.min_replicas = 0
        self.max_replicas = cap
        self.preemptible = True
        self.num_restarts = restarts
        self.age = age


class _PolluxNode:
    def __init__(self, gpus):
        self.resources = {"nvidia.com/gpu": gpus}
        self.preemptible = False


def _pack(counts, nodes_per_job, node_gpus, n_nodes):
    """(jobs × nodes) replica counts for GPU counts per job: first fit decreasing, whole nodes first."""
    state = np.zeros((len(counts), n_nodes), dtype=int)
    free = np.full(n_nodes, node_gpus)
    for m in np.argsort(-np.asarray(counts), kind="stable"):
        left = int(counts[m])
        for nd in range(n_nodes):
            if left == 0:
                break
            if left >= node_gpus and free[nd] < node_gpus:
                continue
            take = min(left, free[nd])
            state[m, nd] += take
            free[nd] -= take
            left -= take
    return state


def pollux_main(args) -> None:
    np.int, np.float = int, float  # pymoo 0.4 and the GA name these numpy-1 aliases
    sys.path.insert(0, args.sia)
    for extra in (args.pylib, args.pymoo):
        sys.path.append(extra)
    import pollux_unaware_fix as ga
    from goodput import GoodputFunction
    from speedup import SpeedupFunction

    from optsched.bench.profile_instances import Stream
    from optsched.formulations import configurations as C
    from optsched.policy import solve_instance

    first = Stream("pollux", args.gpus, args.jobs, args.seed, args.churn)
    total = args.rounds or args.count
    insts = None if args.rounds else [first.instance] + [
        Stream("pollux", args.gpus, args.jobs, args.seed + i, args.churn).instance for i in range(1, total)]
    solve_instance(first.instance, "pollux")
    ours_t, ga_t, gaps = [], [], []
    policy = ga.PolluxPolicyUnawareFix(p_fairness=-1)
    for r in range(total):
        inst = first.instance if args.rounds else insts[r]
        el = inst.elastic
        S = int(el.server_gpus[0])
        n_nodes = int(inst.capacity[0] // S)
        if not args.rounds:
            C.GOODPUT_CACHE.clear()
        t = time.process_time()
        ours = solve_instance(inst, "pollux")
        ours_t.append(time.process_time() - t)
        nodes = {f"n{i:05d}": _PolluxNode(S) for i in range(n_nodes)}
        keys = list(nodes)
        base = _pack(el.current_gpus[:, 0], None, S, n_nodes)
        t = time.process_time()
        jobs = {}
        for m, jid in enumerate(inst.job_ids):
            fn = GoodputFunction(el.params[m, 0], (el.grad_sqr[m], el.grad_var[m]), el.init_batch_size[m])
            jobs[jid] = _PolluxJob(SpeedupFunction(fn, max_batch_size=el.max_batch_size[m],
                                                   atomic_bsz_range=(el.min_local_bsz[m], el.max_local_bsz[m]),
                                                   accumulation=True),
                                   int(el.max_gpus[m]), float(inst.elapsed_time[m]), int(el.num_restarts[m]),
                                   float(inst.arrival_time[m]))
        base_alloc = {jid: [keys[nd] for nd in range(n_nodes) for _ in range(base[m, nd])]
                      for m, jid in enumerate(inst.job_ids)}
        with contextlib.redirect_stdout(io.StringIO()):
            allocs, _ = policy.optimize(jobs, nodes, base_alloc, _PolluxNode(S))
        ga_t.append(time.process_time() - t)
        # both scored by the GA's own objective, jobs in our order
        prob = ga.Problem(list(jobs.values()), list(nodes.values()), base, -1)
        theirs = np.zeros_like(base)
        index = {k: i for i, k in enumerate(keys)}
        for m, jid in enumerate(inst.job_ids):
            for key in allocs.get(jid, []):
                theirs[m, index[key]] += 1
        mine = _pack(np.asarray(ours.gpu_counts)[:, 0], None, S, n_nodes)
        out = {}
        prob._evaluate(np.stack([mine.ravel(), theirs.ravel()]), out)
        vo, vg = -out["F"][0, 0], -out["F"][1, 0]  # power means, maximized
        gaps.append((vg - vo) / abs(vg))
        print(f"round {r:3d}: ours {ours_t[-1]:.3f} s  GA {ga_t[-1]:.3f} s  Pollux's objective ours {vo:.4f} "
              f"GA {vg:.4f} ({gaps[-1]:+.2e})  {ours.status}", flush=True)
        if args.rounds and r + 1 < total:
            first.advance(np.asarray(ours.gpu_counts), np.asarray(ours.nodes))

    def q(x, f):
        return float(np.quantile(np.asarray(x), f, method="higher"))

    print(f"\n{'stream of ' + str(total) + ' rounds' if args.rounds else str(total) + ' cold rounds'} (pollux), "
          f"{args.gpus} GPUs / {args.jobs} jobs, load average {os.getloadavg()[0]:.1f}")
    for name, x in (("ours", ours_t), ("GA", ga_t)):
        print(f"  {name:5s} p50 {statistics.median(x):.3f}  p99 {q(x, 0.99):.3f}  max {max(x):.3f} CPU s")
    print(f"  median ratio GA/ours {statistics.median(ga_t) / statistics.median(ours_t):.0f}x; Pollux's objective, "
          f"GA vs ours (maximized; < 0 = ours better): worst {max(gaps):+.2e}, median {statistics.median(gaps):+.2e}")


if __name__ == "__main__":
    main()
