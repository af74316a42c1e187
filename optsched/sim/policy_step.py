"""Computing an allocation for the simulator: the policy call, with two speed-ups
that do not change the optimum.

1. The direct LP path (``solver="highs-direct"``, solvers/lp.py) for policies
   with a matrix form: no cvxpy canonicalization per recomputation.
2. Identical-job classes for policies whose program depends only on
   (throughput row, scale factor, weight) — max-min fairness, aware and
   agnostic (which sees only the row's pattern T > 0). Jobs with equal rows are interchangeable, so by convexity the
   program has an optimal solution that gives them equal fractions
   (average any optimum over permutations of identical jobs). We solve one row
   per class with scale factor count·s (capacity counts every member) and
   weight count·w (which keeps the normalized share s/(w·thr_equal) of a
   member). In Gavel's continuous experiment (26 job types) this turns a
   ~100-job LP into a ≤ 26-row one.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from optsched.model import Allocation, Instance
from optsched.packed_classes import row_classes

SYMMETRIC_POLICIES = frozenset({"max_min_fairness", "max_min_fairness_agnostic"})


class ClassSolveCache:
    """The last class-merged solve of one simulation, keyed by everything the
    class program reads. When a recomputation finds the same classes (rows,
    merged scale factors and weights, capacities, policy, solver, options) it
    reuses that solution instead of solving again: the solvers are
    deterministic, so a re-solve of the identical program returns the same
    class fractions, and members are mapped to them exactly as after a solve.
    Only optimal solves are kept (a time-limited one could end elsewhere)."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.allocation: Allocation | None = None
        self.hits = 0


def compute_allocation(
    inst: Instance, policy: str, solver: str, time_limit: float, aggregate: bool,
    cache: ClassSolveCache | None = None, partitions: int = 1, pair_classes=None, **options,
) -> Allocation:
    """``partitions`` > 1: POP's merged solve over job groups (never class-merged: POP splits jobs).
    ``pair_classes`` (optsched.packed_classes.ClassPairs): max_min_fairness with packing over
    every pair of jobs, solved over job types (the per-job path over the instance's candidate
    pairs only when the class program does not apply)."""
    from optsched.policy import solve_instance

    if pair_classes is not None and inst.n > 1:
        from optsched.packed_classes import solve_packed_classes

        a = solve_packed_classes(inst, pair_classes, time_limit)
        if a is not None:
            return a

    if partitions > 1:
        from optsched.pop import solve_maybe_partitioned

        return solve_maybe_partitioned(inst, policy, partitions, solver, time_limit, workers=1, **options)
    if not (aggregate and policy in SYMMETRIC_POLICIES and inst.n > 1):
        return solve_instance(inst, policy, solver, time_limit, **options)
    # The agnostic policy sees only where a job can run (T > 0), so jobs with
    # the same pattern are interchangeable even if their speeds differ.
    rows = (inst.throughput > 0).astype(float) if policy.endswith("_agnostic") else inst.throughput
    key = np.column_stack([rows, inst.scale_factor, inst.weight])
    first, inverse, counts = row_classes(key)
    if len(first) == inst.n:
        return solve_instance(inst, policy, solver, time_limit, **options)
    classes = Instance(
        job_ids=tuple(f"class{c}" for c in range(len(first))),
        gpu_types=inst.gpu_types,
        throughput=inst.throughput[first],
        scale_factor=inst.scale_factor[first] * counts,
        weight=inst.weight[first] * counts,
        capacity=inst.capacity,
        steps_remaining=inst.steps_remaining[first],
        elapsed_time=inst.elapsed_time[first],
        attained_service=inst.attained_service[first],
        arrival_time=inst.arrival_time[first],
    )
    cache_key = None
    if cache is not None:
        cache_key = (policy, solver, time_limit, repr(sorted(options.items())), classes.gpu_types,
                     classes.throughput.tobytes(), classes.scale_factor.tobytes(), classes.weight.tobytes(),
                     classes.capacity.tobytes())
    if cache is not None and cache_key == cache.key:
        a = replace(cache.allocation, solve_seconds=0.0, build_seconds=0.0)  # nothing was solved
        cache.hits += 1
    else:
        a = solve_instance(classes, policy, solver, time_limit, **options)
        if cache is not None:
            cache.key, cache.allocation = (cache_key, a) if a.status == "optimal" else (None, None)
    X = a.fractions[inverse]
    return replace(
        a,
        job_ids=inst.job_ids,
        fractions=X,
        effective_throughput=(inst.throughput * X).sum(axis=1),
        explanation={"job_classes": int(len(first)), **{k: v for k, v in a.explanation.items() if k in ("gpu_price", "capacity", "capacity_used")}},
    )
