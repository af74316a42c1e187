"""Gavel's own policy classes and optsched's, side by side on the same instances (by hand,
not in CI): CPU seconds p50 / p99 / max of each, the ratio of medians, the objective of
each allocation scored the same way, and utilization of usable capacity.

    git clone ... or use the `fetch` tool: Gavel's repository checked out OUTSIDE the
    project (its code is never copied here), e.g. /work/peers/gavel
    OPENBLAS_NUM_THREADS=1 python bench/gavel_side_by_side.py --gavel /work/peers/gavel
    OPENBLAS_NUM_THREADS=1 python bench/gavel_side_by_side.py --gavel /work/peers/gavel \\
        --policies max_min_fairness --sources distinct --sizes 1000 2000 --congested --instances 20

Gavel's classes (scheduler/policies/*.py) are imported from the checkout via sys.path
and called with Gavel's own input format: throughputs {job id: {worker type: steps/s}},
scale factors and priority weights {job id: value}, cluster_spec {worker type: GPUs}.
Building those dicts (and our Instance) is outside the timers; each side's
``get_allocation`` / ``solve_instance`` call is timed in CPU seconds (time.process_time)
and wall seconds. Gavel's classes are created once per policy and size (warm, as its
scheduler keeps them), and both sides solve one small instance first (imports, caches).

Both allocations are scored by the same functions (``score``): max-min and water filling
by the lowest normalized share (Gavel's objective; water filling also by the largest
difference of the sorted share vectors), finish-time fairness by the largest ρ, makespan
by the largest remaining time. FTF instances have elapsed time 0 (a fresh Gavel policy
has no cumulative isolated time, so ρ's denominator is R / isolated throughput on both
sides). Gavel's water filling solves its MILP with GLPK_MI, which this cvxpy lacks: the
script swaps in HIGHS for that one call (a solver choice, not a change of its code).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from optsched.bench import measure, references
from optsched.bench.runner import draw_rigid, load_average
from optsched.formulations.base import isolated_throughput

GAVEL_CLASSES = {  # policy: (module, class, constructor kwargs)
    "max_min_fairness": ("max_min_fairness", "MaxMinFairnessPolicyWithPerf", {"solver": "ECOS"}),
    "finish_time_fairness": ("finish_time_fairness", "FinishTimeFairnessPolicyWithPerf", {"solver": "ECOS"}),
    "makespan": ("min_total_duration", "MinTotalDurationPolicyWithPerf", {"solver": "ECOS"}),
    "max_min_fairness_water_filling": ("max_min_fairness_water_filling", "MaxMinFairnessWaterFillingPolicyWithPerf", {}),
}
BUDGET = 300.0  # CPU seconds Gavel's side may spend per (policy, source, size); then it stops


def load_gavel(root: Path):
    """Gavel's policy modules from its checkout (scheduler/ and scheduler/policies/ on sys.path)."""
    import importlib

    import cvxpy as cp

    for sub in ("scheduler", "scheduler/policies"):
        p = str(root / sub)
        if p not in sys.path:
            sys.path.insert(0, p)
    solve = cp.Problem.solve

    def solve_with_highs(self, *args, **kw):  # GLPK_MI is not installed; HIGHS solves the same MILP
        if kw.get("solver") == "GLPK_MI":
            kw["solver"] = "HIGHS"
            kw.pop("warm_start", None)
        return solve(self, *args, **kw)

    cp.Problem.solve = solve_with_highs
    return {p: getattr(importlib.import_module(mod), cls) for p, (mod, cls, _) in GAVEL_CLASSES.items()}


def gavel_inputs(inst):
    """The instance in Gavel's input format (job ids are Gavel's JobIdPair singletons)."""
    from job_id_pair import JobIdPair

    ids = [JobIdPair(m, None) for m in range(inst.n)]
    T = inst.throughput
    throughputs = {j: {t: float(T[m, c]) for c, t in enumerate(inst.gpu_types)} for m, j in enumerate(ids)}
    return {"ids": ids, "throughputs": throughputs,
            "scale_factors": {j: int(inst.scale_factor[m]) for m, j in enumerate(ids)},
            "priority_weights": {j: float(inst.weight[m]) for m, j in enumerate(ids)},
            "times_since_start": {j: float(inst.elapsed_time[m]) for m, j in enumerate(ids)},
            "steps": {j: float(inst.steps_remaining[m]) for m, j in enumerate(ids)},
            "cluster_spec": {t: int(w) for t, w in zip(inst.gpu_types, inst.capacity)}}


def gavel_call(policy: str, obj, g: dict):
    if policy in ("max_min_fairness", "max_min_fairness_water_filling"):
        return obj.get_allocation(g["throughputs"], g["scale_factors"], g["priority_weights"], g["cluster_spec"])
    if policy == "finish_time_fairness":
        return obj.get_allocation(g["throughputs"], g["scale_factors"], g["priority_weights"], g["times_since_start"],
                                  g["steps"], g["cluster_spec"])
    return obj.get_allocation(g["throughputs"], g["scale_factors"], g["steps"], g["cluster_spec"])


def gavel_matrix(inst, g: dict, allocation) -> np.ndarray:
    return np.array([[allocation[j][t] for t in inst.gpu_types] for j in g["ids"]])


def score(policy: str, inst, X: np.ndarray):
    """(objective, sorted normalized shares) of time fractions X, the same for both sides."""
    T = inst.throughput
    rate = (T * X).sum(axis=1)
    shares = np.sort((references._normalized(inst) * X).sum(axis=1))
    if policy == "finish_time_fairness":
        iso = isolated_throughput(inst, T)
        D = inst.elapsed_time + inst.steps_remaining / iso
        return float(np.max((inst.elapsed_time + inst.steps_remaining / np.maximum(rate, 1e-300)) / D)), shares
    if policy == "makespan":
        return float(np.max(inst.steps_remaining / np.maximum(rate, 1e-300))), shares
    return float(shares[0]), shares


def instance(source: str, n: int, k: int, congested: bool, policy: str, seed: int):
    inst = draw_rigid(source, n, k, congested, policy.startswith("max_min_fairness"))(seed)
    if policy == "finish_time_fairness":
        inst = dataclasses.replace(inst, elapsed_time=np.zeros(inst.n))
    return inst


def run(policy, cls, source, n, k, congested, args, console) -> list:
    from optsched.policy import solve_instance

    kwargs = GAVEL_CLASSES[policy][2]
    gavel_obj = cls(**kwargs)
    ours, theirs, rows, spent = [], [], [], 0.0
    # Our path depends on the program's size and kind (CLARABEL, the exact shortcuts, the IPM):
    # one untimed solve of this case's kind first, so no instance pays a first call's imports.
    # (Gavel's path, cvxpy + ECOS, is the same at every size: main() warms it once.)
    solve_instance(instance(source, n, k, congested, policy, args.seed + 100_000), policy, time_limit=600.0)
    for i in range(args.instances):
        inst = instance(source, n, k, congested, policy, args.seed + i)
        g = gavel_inputs(inst)
        if policy == "finish_time_fairness":
            gavel_obj = cls(**kwargs)  # a fresh policy: no cumulative isolated time from other instances
        a = measure.timed(lambda: solve_instance(inst, policy, time_limit=600.0))
        ours.append(a)
        if spent > args.budget:
            continue
        b = measure.timed(lambda: gavel_call(policy, gavel_obj, g))
        spent += b.cpu
        Xg = gavel_matrix(inst, g, b.out)
        (vo, so), (vg, sg) = score(policy, inst, a.out.fractions), score(policy, inst, Xg)
        maximize = policy not in ("finish_time_fairness", "makespan")
        rows.append((i, b, measure.gap(vo, vg, maximize), float(np.abs(so - sg).max()),
                     measure.allocation_utilization(inst, a.out), measure.utilization(inst, Xg)))
        console.print(f"  {policy}/{source}/{n}x{k}{'/congested' if congested else ''} #{i}: ours {a.cpu:.3f} CPU s, "
                      f"Gavel {b.cpu:.3f} CPU s, gap {rows[-1][2]:.1e}", style="dim", highlight=False)
    return [ours, rows]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gavel", type=Path, default=Path(os.environ.get("GAVEL_CHECKOUT", "/work/peers/gavel")),
                    help="Gavel's repository, checked out outside the project")
    ap.add_argument("--policies", nargs="*", default=list(GAVEL_CLASSES))
    ap.add_argument("--sources", nargs="*", default=["gavel", "distinct"], help="gavel, philly, distinct")
    ap.add_argument("--sizes", type=int, nargs="*", default=[1000, 2000])
    ap.add_argument("--types", type=int, default=3, help="GPU types of distinct-row instances (Gavel's table: 3)")
    ap.add_argument("--congested", action="store_true", help="capacity binds (0.15 GPUs per job)")
    ap.add_argument("--instances", type=int, default=20)
    ap.add_argument("--budget", type=float, default=BUDGET, help="CPU seconds for Gavel's side per case")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not (args.gavel / "scheduler" / "policies" / "max_min_fairness.py").is_file():
        print(f"--gavel: no Gavel checkout at {args.gavel} (scheduler/policies/max_min_fairness.py)", file=sys.stderr)
        return 2
    console = Console(width=200)
    classes = load_gavel(args.gavel)
    console.print(f"load average at start {load_average()}; {os.cpu_count()} cores; "
                  f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}", highlight=False)
    table = Table(title="Gavel's own policies vs optsched, same instances; CPU seconds; ratio = Gavel p50 / ours p50 "
                        "(same instances); gap = how much worse ours scores (< 0: better)", header_style="bold")
    for c in ("policy", "source", "n×k", "inst", "ours p50", "p99", "max", "Gavel n", "Gavel p50", "p99", "max",
              "ratio", "gap p50", "gap max", "share diff max", "util ours", "util Gavel"):
        table.add_column(c, justify="left" if c in ("policy", "source") else "right")
    for policy in args.policies:
        warm = instance("distinct", 30, args.types, False, policy, 99)  # imports and caches of both sides
        from optsched.policy import solve_instance

        solve_instance(warm, policy)
        gavel_call(policy, classes[policy](**GAVEL_CLASSES[policy][2]), gavel_inputs(warm))
        for source in args.sources:
            k = 3 if source != "distinct" else args.types
            for n in args.sizes:
                ours, rows = run(policy, classes[policy], source, n, k, args.congested, args, console)
                o = measure.spread(s.cpu for s in ours)
                g = measure.spread(b.cpu for _, b, *_ in rows)
                paired = float(np.median([ours[i].cpu for i, *_ in rows])) if rows else float("nan")
                gaps = measure.spread(r[2] for r in rows)
                table.add_row(policy, source + (" cong." if args.congested else ""), f"{n}×{k}", str(len(ours)),
                              *(f"{v:.3f}" for v in o), str(len(rows)), *(f"{v:.3f}" for v in g),
                              f"{g[0] / paired:.1f}×" if rows else "–", f"{gaps[0]:.1e}", f"{gaps[2]:.1e}",
                              f"{max((r[3] for r in rows), default=float('nan')):.1e}",
                              f"{np.median([r[4] for r in rows]) if rows else float('nan'):.3f}",
                              f"{np.median([r[5] for r in rows]) if rows else float('nan'):.3f}")
    console.print(table)
    console.print(f"load average at end {load_average()}", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
