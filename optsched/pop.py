"""POP partitioning (Narayanan et al., SOSP'21): split one large allocation
problem into k sub-problems, solve them in parallel, merge.

Jobs are dealt into k groups balanced by scale factor and weight (sorted, then
dealt round-robin from a seeded shuffle within ties), and every group gets 1/k
of each GPU type. Each group is an ordinary Instance solved by the policy entry
point: the first alone, the others (in a process pool when that pays) warm from
its GPU prices, which for max-min policies start an exact crossover. The merged allocation satisfies every
constraint of the full problem: a job's row is its group's row, and the groups'
capacities add up to the cluster's. What it gives up is the exchange between
groups (a fast job in one group cannot take a GPU from another group's program),
which the bench measures as the loss against the exact solve. GPUs a group
leaves idle are not lost: the merged allocation gets the same second stage as
an exact solve (``fill_idle``, formulations/base.fill_idle), across groups.

Objectives merge by the policy's family: max-min policies take the minimum over
groups (the normalized share depends on capacity ratios only, which every
group keeps), min-max policies (makespan, finish-time fairness) the maximum,
additive ones (max throughput, cost, proportional fairness) the sum.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time

import numpy as np

from optsched.model import Allocation, Instance, OptschedError

MAX_PARTITIONS = 1024


def _family(policy: str) -> str:
    if policy.startswith("max_min_fairness"):
        return "min"
    if policy.startswith(("makespan", "finish_time_fairness")):
        return "max"
    if policy.startswith(("max_throughput", "min_cost", "proportional_fairness")):
        return "sum"
    raise OptschedError(f"partitions: policy {policy!r} cannot be partitioned (fractional policies only)")


def check_partitions(policy: str, partitions: int, packing: bool = False, field: str = "partitions") -> None:
    """One-line OptschedError naming ``field`` when ``partitions`` cannot apply: out of
    [1, MAX_PARTITIONS], or above 1 with a policy POP cannot split or with space sharing."""
    if isinstance(partitions, bool) or not isinstance(partitions, (int, np.integer)) \
            or not 1 <= partitions <= MAX_PARTITIONS:
        raise OptschedError(f"{field}: must be an integer between 1 and {MAX_PARTITIONS}, got {partitions!r}")
    if partitions == 1:
        return
    if packing:
        raise OptschedError(f"{field}: space sharing (packing) cannot be partitioned (a pair may span two groups)")
    try:
        _family(policy)
    except OptschedError:
        raise OptschedError(f"{field}: policy {policy!r} cannot be partitioned (the max-min, finish-time, "
                            "makespan, throughput, cost and proportional-fairness families only)") from None


def has_elastic(inst: Instance) -> bool:
    return inst.elastic is not None and bool(np.any(inst.elastic.is_elastic))


def solve_maybe_partitioned(inst: Instance, policy: str, partitions: int, solver: str = "auto",
                            time_limit: float = 60.0, workers: int | None = None, **options) -> Allocation:
    """The exact solve for ``partitions`` = 1 or no jobs (nothing to split), POP's merged one
    above (the policy stage of the simulator, sessions and the service's solve; they pass
    ``workers=1``: no process pool inside a server or a run)."""
    if partitions <= 1 or inst.n == 0 or has_elastic(inst):
        from optsched.policy import solve_instance

        alloc = solve_instance(inst, policy, solver, time_limit, **options)
        if partitions > 1 and inst.n:  # documented fallback: POP's groups carry no goodput models
            alloc.explanation["partitions_note"] = "elastic jobs: solved exactly, not partitioned"
        return alloc
    return solve_partitioned(inst, policy, partitions, solver=solver, time_limit=time_limit, workers=workers, **options)


def partition(inst: Instance, k: int, seed: int = 0) -> list[np.ndarray]:
    """Job indices of each group, balanced by (scale factor, weight)."""
    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.permutation(inst.n), inst.weight, inst.scale_factor))
    return [np.sort(order[g::k]) for g in range(k)]


def sub_instance(inst: Instance, jobs: np.ndarray, k: int) -> Instance:
    def pick(v):
        return None if v is None else v[jobs]

    return dataclasses.replace(
        inst,
        job_ids=tuple(inst.job_ids[m] for m in jobs),
        throughput=inst.throughput[jobs],
        scale_factor=inst.scale_factor[jobs],
        weight=inst.weight[jobs],
        capacity=inst.capacity / k,
        steps_remaining=inst.steps_remaining[jobs],
        elapsed_time=inst.elapsed_time[jobs],
        attained_service=inst.attained_service[jobs],
        arrival_time=inst.arrival_time[jobs],
        entity=tuple(inst.entity[m] for m in jobs) if inst.entity else (),
        isolated_time=pick(inst.isolated_time),
        slo=pick(inst.slo),
        last_run_time=pick(inst.last_run_time),
        pairs=np.zeros((0, 2), dtype=int),
        pair_throughput=np.zeros((0, inst.k, 2)),
        elastic=None,
    )


def _solve_one(args):
    from optsched.policy import solve_instance

    sub, policy, solver, time_limit, options, warm = args
    return solve_instance(sub, policy, solver=solver, time_limit=time_limit, warm=warm, **options)


# Sibling partitions are statistically alike, so the first one's GPU prices
# start an exact crossover on the others (solvers/block_exact.py): measured at
# 100k x 5 congested, k = 4: 0.23-0.25 s per partition against 1.7-1.8 s cold,
# the same optimum. A rung that fails costs ~0.03 s; the widest one is needed
# (the partitions' prices differ by ~1 %).
SIBLING_SLACKS = (3e-3, 1e-2, 3e-2)


def _sibling_warm(first: Allocation, types) -> tuple | None:
    prices = first.explanation.get("gpu_price")
    if not prices or not np.isfinite(first.objective) or not any(prices.values()):
        return None
    return np.array([prices.get(t, 0.0) for t in types]), float(first.objective), SIBLING_SLACKS


def _in_snapshot_terms(solve, group: np.ndarray) -> Allocation:
    """``solve()``, with a group's ``jobs[i]`` in an error renamed to the job's index in
    the full instance (a user fixes the snapshot, not a sub-problem they never saw)."""
    try:
        return solve()
    except OptschedError as e:
        msg = re.sub(r"jobs\[(\d+)\]", lambda m: f"jobs[{int(group[int(m.group(1))])}]"
                     if int(m.group(1)) < len(group) else m.group(0), str(e))
        e.args = (msg, *e.args[1:])
        raise


def solve_partitioned(
    inst: Instance, policy: str, partitions: int, solver: str = "auto", time_limit: float = 60.0,
    seed: int = 0, workers: int | None = None, **options,
) -> Allocation:
    """Solve ``policy`` on ``partitions`` groups and merge (see the module docstring)."""
    check_partitions(policy, partitions, bool(options.get("packing")))
    if policy.startswith(("makespan", "finish_time_fairness")):  # the whole instance's error, before any group runs
        from optsched.formulations.base import require_steps_remaining

        require_steps_remaining(inst, policy)
    family = _family(policy)
    t0 = time.perf_counter()
    # Never more groups than jobs: each group gets 1/k of every type, so an
    # empty group would leave its share of the cluster idle.
    k = max(1, min(partitions, inst.n))
    groups = partition(inst, k, seed)
    tasks = [(sub_instance(inst, g, k), policy, solver, time_limit, options, None) for g in groups]
    # The first partition alone, then the rest warm from its prices (see SIBLING_SLACKS).
    t_split = time.perf_counter() - t0
    parts = [_in_snapshot_terms(lambda: _solve_one(tasks[0]), groups[0])]
    warm = _sibling_warm(parts[0], inst.gpu_types) if family == "min" else None  # max-min: objective = level z
    rest = [(*t[:-1], warm) for t in tasks[1:]]
    workers = min(len(rest), workers or os.cpu_count() or 1)
    pooled = workers > 1 and inst.n >= 2000  # below that, process start-up costs more than the solves
    if pooled:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_solve_one, t) for t in rest]
            parts += [_in_snapshot_terms(f.result, g) for f, g in zip(futures, groups[1:])]
    else:
        parts += [_in_snapshot_terms(lambda t=t: _solve_one(t), g) for t, g in zip(rest, groups[1:])]
    t_merge = time.perf_counter()
    X = np.zeros((inst.n, inst.k))
    for g, a in zip(groups, parts):
        X[g] = a.fractions
    from optsched.formulations.base import fill_idle, utilization
    from optsched.policy import fill_option, is_agnostic

    if fill_option(options.get("fill_idle", True)):  # each group filled its own 1/k; another group's jobs may use its idle GPUs
        X = fill_idle(inst, X, inst.available.astype(float) if is_agnostic(policy, options) else inst.throughput)
    objectives = [a.objective for a in parts]
    objective = {"min": min, "max": max, "sum": sum}[family](objectives)
    at_level = None
    if policy.startswith("max_min_fairness_hierarchical"):  # a group's level counts only its part of each tenant
        from optsched.formulations.hierarchical import first_level

        objective, at_level = first_level(inst, X, bool(options.get("agnostic", False)))
    distinct = sorted({a.status for a in parts})
    status = distinct[0] if len(distinct) == 1 else "mixed: " + ", ".join(distinct)
    explanation = {**_merged_explanation(inst, X, parts, family, objective), "partitions": k,
                   "utilization": utilization(inst, X),
                   **({"bottleneck_jobs": [inst.job_ids[m] for m in at_level]} if at_level is not None else {}),
                   "partition_status": [a.status for a in parts],
                   "partition_solve_seconds": [a.solve_seconds for a in parts]}
    if k != partitions:
        explanation["partitions_requested"] = partitions
    t_end = time.perf_counter()
    # The groups' timings summed (pooled groups overlap, so the sums can exceed the wall time);
    # splitting counts as build and merging as decode; imports in this process are reported apart.
    total = {f: sum(getattr(a, f) for a in parts) for f in ("build_seconds", "solver_seconds", "decode_seconds",
                                                            "import_seconds")}
    here = sum(a.import_seconds for a in (parts[:1] if pooled else parts))
    return Allocation.of(inst, policy, X, status, float(objective), t_end - t0 - here, explanation=explanation,
                         build_seconds=total["build_seconds"] + t_split, solver_seconds=total["solver_seconds"],
                         decode_seconds=total["decode_seconds"] + t_end - t_merge,
                         import_seconds=total["import_seconds"])


def _merged_explanation(inst: Instance, X: np.ndarray, parts: list[Allocation], family: str, objective: float) -> dict:
    """The exact solve's explanation keys for the merged allocation: capacity use and
    relative shares of the whole; GPU prices as the partitions' mean (each partition
    prices its 1/k of the cluster; siblings' prices differ by ~1 % at scale); the
    bottleneck jobs of the partitions that set the merged objective (min or max
    family), of every partition for additive objectives."""
    from optsched.policy import explain

    out = explain(inst, X, None, None, None)
    prices = [p.explanation["gpu_price"] for p in parts if "gpu_price" in p.explanation]
    if len(prices) == len(parts):
        out["gpu_price"] = {t: float(np.mean([p.get(t, 0.0) for p in prices])) for t in inst.gpu_types}
    setting = parts
    if family != "sum" and np.isfinite(objective):
        tol = 1e-5 * max(abs(objective), 1.0)
        setting = [p for p in parts if abs(p.objective - objective) <= tol]
    if any("bottleneck_jobs" in p.explanation for p in setting):
        marked = {j for p in setting for j in p.explanation.get("bottleneck_jobs", [])}
        out["bottleneck_jobs"] = [j for j in inst.job_ids if j in marked]  # in job order, O(n)
    return out
