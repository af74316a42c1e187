"""Synergy (OSDI'22): GPUs plus CPU and memory per job from sensitivity
profiles, as an LP (Synergy-OPT's fractional program for the jobs a base
policy runs).

The GPU decision is the base policy's (``base``: fifo, las or srtf priority
order with backfill, formulations/priority.py). For the jobs it runs, with
s_m GPUs on type j, choose CPUs c_m and memory r_m (GB) and a relative speed
u_m ∈ [0, 1]:

    maximize    Σ_m w_m u_m  −  1e-6 Σ_m (c_m / C_j + r_m / M_j)
    subject to  u_m ≤ f_m^cpu(c_m / s_m),  u_m ≤ f_m^mem(r_m / s_m)       (profiles)
                Σ_{m on j} c_m ≤ C_j,      Σ_{m on j} r_m ≤ M_j           (per type)
                u_m ≥ min(f_m^cpu(p_j^cpu), f_m^mem(p_j^mem))             (no job below its
                                                                          GPU-proportional share)

f are the concave envelopes of the profile points ([CPUs per GPU, relative
throughput], with (0, 0) prepended; flat after the last point), so each is a
handful of linear rows; p_j = C_j/W_j (M_j/W_j) is the GPU-proportional
share per GPU. Solved with HiGHS through scipy.optimize.linprog.

Inputs: ``Server.cpus`` / ``Server.memory`` (summed per type) and
``Job.cpu_profile`` / ``Job.memory_profile`` (Instance.extras). Documented
fallbacks: a cluster without the numbers gets Synergy's testbed ratio, 3 CPUs
and 62.5 GB per GPU (servers of 8 V100, 24 cores, 500 GB); a job without a
profile is held at its GPU-proportional share of that resource (its
sensitivity is unknown, so it is neither starved nor given more). Output:
``explanation.cpus`` / ``memory`` / ``speed_factor`` per running job;
effective throughput = T·u. The allocator and executor must hand out those
CPUs and memory and run the job at that speed (docs/guide/policies.md).
"""

from __future__ import annotations

import time

import numpy as np

from optsched.formulations.priority import greedy_fit, priority_order
from optsched.model import Allocation, Instance, OptschedError

DEFAULT_CPUS_PER_GPU = 3.0
DEFAULT_MEMORY_PER_GPU = 62.5
BASES = ("fifo", "las", "srtf")


def envelope(points) -> list[tuple[float, float]]:
    """(slope, intercept) lines whose minimum is the concave envelope of the
    profile with (0, 0) prepended, flat after its last point."""
    pts = sorted({(float(x), float(y)) for x, y in points})
    if pts[0][0] > 0:
        pts = [(0.0, 0.0)] + pts
    hull: list[tuple[float, float]] = []
    for p in pts:  # upper hull (monotone chain)
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) >= 0:
                hull.pop()
            else:
                break
        hull.append(p)
    top = max(y for _, y in hull)
    lines = [(0.0, top)]
    for (x1, y1), (x2, y2) in zip(hull, hull[1:]):
        if y2 > y1:
            a = (y2 - y1) / (x2 - x1)
            lines.append((a, y1 - a * x1))
    return lines


def _value(lines, x: float) -> float:
    return min(a * x + b for a, b in lines)


# What allocate() imports, loaded (and timed as import_seconds) before its timer: optsched/policy.py.
IMPORTS = ("scipy.optimize",)


def allocate(inst: Instance, policy: str = "synergy", solver: str = "auto", time_limit: float = 60.0,
             base: str = "fifo", **_) -> Allocation:
    from scipy.optimize import linprog

    if base not in BASES:
        raise OptschedError(f"base: unknown base policy {base!r} (choose from {', '.join(BASES)})")
    t0 = time.perf_counter()
    order, _ = priority_order(inst, base)
    X = greedy_fit(inst, order)
    ex = inst.extras or {}
    C = np.asarray(ex.get("server_cpus", DEFAULT_CPUS_PER_GPU * inst.capacity), dtype=float)
    M = np.asarray(ex.get("server_memory", DEFAULT_MEMORY_PER_GPU * inst.capacity), dtype=float)
    defaults = []
    for name, arr, per in (("cpus", C, DEFAULT_CPUS_PER_GPU), ("memory", M, DEFAULT_MEMORY_PER_GPU)):
        if "server_" + name not in ex:
            defaults.append(name)
        bad = np.isnan(arr)
        if bad.any():
            raise OptschedError(f"cluster.servers: synergy needs {name} on every server of type "
                                f"{inst.gpu_types[int(np.argmax(bad))]!r} (or on none: default {per:g} per GPU)")
    cpu_prof = ex.get("cpu_profile") or [None] * inst.n
    mem_prof = ex.get("memory_profile") or [None] * inst.n
    run = np.flatnonzero(X.sum(axis=1) > 0)
    col = X[run].argmax(axis=1)
    R = len(run)
    s = inst.scale_factor[run]
    share_c = C[col] / inst.capacity[col]
    share_m = M[col] / inst.capacity[col]
    cpus, mem, speed = s * share_c, s * share_m, np.ones(R)
    status = "optimal"
    if R:
        # variables [c (R), r (R), u (R)]
        nv = 3 * R
        A, b = [], []
        lo = np.zeros(nv)
        hi = np.concatenate([np.full(R, np.inf), np.full(R, np.inf), np.ones(R)])
        for i, m in enumerate(run):
            floor = 1.0
            for off, prof, share in ((0, cpu_prof[m], share_c[i]), (R, mem_prof[m], share_m[i])):
                if prof is None:  # unknown sensitivity: pinned at the proportional share
                    lo[off + i] = hi[off + i] = s[i] * share
                    continue
                lines = envelope(prof)
                floor = min(floor, _value(lines, share))
                for a, b0 in lines:  # u - a·x/s <= b0
                    row = np.zeros(nv)
                    row[2 * R + i] = 1.0
                    row[off + i] = -a / s[i]
                    A.append(row)
                    b.append(b0)
            lo[2 * R + i] = min(floor, 1.0)
        for j in range(inst.k):
            on = col == j
            if on.any():
                for off, cap in ((0, C[j]), (R, M[j])):
                    row = np.zeros(nv)
                    row[off + np.flatnonzero(on)] = 1.0
                    A.append(row)
                    b.append(cap)
        cost = np.concatenate([1e-6 / C[col], 1e-6 / M[col], -inst.weight[run]])
        res = linprog(cost, A_ub=np.array(A) if A else None, b_ub=np.array(b) if b else None,
                      bounds=list(zip(lo, hi)), method="highs", options={"time_limit": float(time_limit)})
        if res.status == 0:
            cpus, mem, speed = res.x[:R], res.x[R:2 * R], np.clip(res.x[2 * R:], 0.0, 1.0)
        else:
            status = f"fallback: {res.message} (GPU-proportional CPUs and memory)"
            for i, m in enumerate(run):
                v = [_value(envelope(p), sh) for p, sh in ((cpu_prof[m], share_c[i]), (mem_prof[m], share_m[i])) if p]
                speed[i] = min(v) if v else 1.0
    thr = np.zeros(inst.n)
    thr[run] = inst.throughput[run, col] * speed
    ids = [inst.job_ids[m] for m in run]
    explanation = {
        "priority_order": [inst.job_ids[m] for m in order],
        "cpus": dict(zip(ids, map(float, cpus))),
        "memory": dict(zip(ids, map(float, mem))),
        "speed_factor": dict(zip(ids, map(float, speed))),
        "resource_capacity": {t: {"cpus": float(c), "memory": float(mm)} for t, c, mm in zip(inst.gpu_types, C, M)},
    }
    if defaults:
        explanation["resource_defaults"] = defaults
    return Allocation.of(inst, policy, X, status, float((inst.weight[run] * speed).sum()), time.perf_counter() - t0,
                         thr, explanation)
