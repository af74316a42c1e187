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

SYMMETRIC_POLICIES = frozenset({"max_min_fairness", "max_min_fairness_agnostic"})


def choose_solver(policy: str, solver: str) -> str:
    if solver != "auto":
        return solver
    from optsched.policy import _module

    mod, _ = _module(policy)
    # CLARABEL called directly: an interior-point solution like the cvxpy path
    # (and Gavel's ECOS), and the fastest backend on these small LPs.
    return "clarabel-direct" if hasattr(mod, "build_lp") and not hasattr(mod, "allocate") else "clarabel"


def compute_allocation(inst: Instance, policy: str, solver: str, time_limit: float, aggregate: bool, **options) -> Allocation:
    from optsched.policy import solve_instance

    if not (aggregate and policy in SYMMETRIC_POLICIES and inst.n > 1):
        return solve_instance(inst, policy, solver, time_limit, **options)
    # The agnostic policy sees only where a job can run (T > 0), so jobs with
    # the same pattern are interchangeable even if their speeds differ.
    rows = (inst.throughput > 0).astype(float) if policy.endswith("_agnostic") else inst.throughput
    key = np.column_stack([rows, inst.scale_factor, inst.weight])
    uniq, first, inverse, counts = np.unique(key, axis=0, return_index=True, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    if len(uniq) == inst.n:
        return solve_instance(inst, policy, solver, time_limit, **options)
    classes = Instance(
        job_ids=tuple(f"class{c}" for c in range(len(uniq))),
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
    a = solve_instance(classes, policy, solver, time_limit, **options)
    X = a.fractions[inverse]
    return replace(
        a,
        job_ids=inst.job_ids,
        fractions=X,
        effective_throughput=(inst.throughput * X).sum(axis=1),
        explanation={"job_classes": int(len(uniq)), **{k: v for k, v in a.explanation.items() if k in ("gpu_price", "capacity", "capacity_used")}},
    )
