"""The one entry point that pairs a formulation with a solver and decodes the
result into an Allocation with an explanation (DESIGN.md §2, §3).

A policy is registered as (formulation module, options). The module exposes
either ``build(inst, **options) -> Program`` (one convex program, solved here)
or ``allocate(inst, solver=, time_limit=, **options) -> Allocation`` (a custom
procedure: water filling, priority orders, MILPs with their own fallback).
"""

from __future__ import annotations

import importlib
import time

import numpy as np

from optsched.model import Allocation, Instance, OptschedError, Snapshot, parse_snapshot

POLICIES: dict[str, tuple[str, dict]] = {
    # Fractional policies over the throughput matrix (formulations/*.py).
    "max_min_fairness": ("max_min_fairness", {}),
    "max_min_fairness_agnostic": ("max_min_fairness", {"agnostic": True}),
    "max_min_fairness_water_filling": ("water_filling", {}),
    "max_min_fairness_water_filling_agnostic": ("water_filling", {"agnostic": True}),
    "max_min_fairness_hierarchical": ("hierarchical", {}),
    "finish_time_fairness": ("finish_time_fairness", {}),
    "finish_time_fairness_agnostic": ("finish_time_fairness", {"agnostic": True}),
    "makespan": ("makespan", {}),
    "makespan_agnostic": ("makespan", {"agnostic": True}),
    "max_throughput": ("max_throughput", {}),
    "max_throughput_agnostic": ("max_throughput", {"agnostic": True}),
    "proportional_fairness": ("proportional_fairness", {}),
    "proportional_fairness_agnostic": ("proportional_fairness", {"agnostic": True}),
    "min_cost": ("min_cost", {}),
    "min_cost_slo": ("min_cost", {"slo": True}),
    # Priority-order baselines returning allocations of the same shape.
    "fifo": ("priority", {"order": "fifo"}),
    "las": ("priority", {"order": "las"}),
    "srtf": ("priority", {"order": "srtf"}),
    "tiresias": ("priority", {"order": "tiresias"}),
    "gandiva": ("priority", {"order": "gandiva"}),
    # Elastic / configuration-choice policies (goodput models).
    "pollux": ("pollux", {}),
    "sia": ("sia", {}),
    "hadar": ("hadar", {}),
}

DEFAULT_POLICY = "max_min_fairness"


def register(name: str, module: str, **options) -> None:
    POLICIES[name] = (module, options)


def policy_names() -> list[str]:
    """Registered policies whose formulation module is present."""
    from importlib.util import find_spec

    return sorted(n for n, (m, _) in POLICIES.items() if find_spec(f"optsched.formulations.{m}") is not None)


# Formulation modules already imported, by module name: the simulator asks for
# its policy's module on every recomputation and importlib's lookup alone is
# ~0.1 ms. Keyed by module (not policy) so that register() stays live.
_MODULES: dict[str, object] = {}


def _module(name: str):
    if name not in POLICIES:
        raise OptschedError(f"policy: unknown policy {name!r} (choose from {', '.join(policy_names())})")
    module, options = POLICIES[name]
    mod = _MODULES.get(module)
    if mod is None:
        try:
            mod = importlib.import_module(f"optsched.formulations.{module}")
        except ModuleNotFoundError as e:
            if e.name != f"optsched.formulations.{module}":
                raise
            raise OptschedError(f"policy: {name!r} is not available in this build") from None
        _MODULES[module] = mod
    return mod, dict(options)


def solve(
    snapshot: Snapshot | dict | str,
    policy: str = DEFAULT_POLICY,
    solver: str = "clarabel",
    time_limit: float = 60.0,
    **options,
) -> Allocation:
    """Solve one policy on a snapshot (a Snapshot, a dict, or JSON text)."""
    snap = snapshot if isinstance(snapshot, Snapshot) else parse_snapshot(snapshot)
    return solve_instance(Instance.from_snapshot(snap), policy, solver, time_limit, **options)


def solve_instance(
    inst: Instance, policy: str = DEFAULT_POLICY, solver: str = "clarabel", time_limit: float = 60.0, **options
) -> Allocation:
    from optsched.solvers import SOLVERS

    fast = bool(options.pop("fast", False))
    if solver not in SOLVERS and solver not in DIRECT_SOLVERS:
        raise OptschedError(
            f"solver: unknown solver {solver!r} (choose from {', '.join((*SOLVERS, *DIRECT_SOLVERS))})"
        )
    mod, opts = _module(policy)
    opts.update(options)
    direct = (fast or solver in DIRECT_SOLVERS) and not opts.get("packing")
    if direct and inst.n and hasattr(mod, "build_lp") and not hasattr(mod, "allocate"):
        backend = DIRECT_SOLVERS.get(solver, "highs-ipm")
        return solve_matrix_program(inst, policy, mod.build_lp, backend, time_limit, **opts)
    if solver in DIRECT_SOLVERS:
        solver = "clarabel"  # the policy has no matrix form: the cvxpy path
    if inst.n == 0:
        return Allocation.of(inst, policy, np.zeros((0, inst.k)), "optimal", float("nan"), 0.0)
    if hasattr(mod, "allocate"):
        return finish_procedure(inst, mod.allocate(inst, policy=policy, solver=solver, time_limit=time_limit, **opts))
    return solve_program(inst, policy, mod.build, solver, time_limit, **opts)


def finish_procedure(inst: Instance, alloc: Allocation) -> Allocation:
    """Procedures (water filling, priority orders) return raw fractions: clean
    them like a program's and give them the same explanation keys (capacity
    use, share vs equal share); the procedure's own keys win. Allocations with
    GPU counts or pairs are the procedure's responsibility and pass unchanged."""
    import dataclasses

    if alloc.gpu_counts is not None or len(alloc.pairs) or alloc.fractions.shape != (inst.n, inst.k):
        return alloc
    X = clean_fractions(alloc.fractions.copy(), inst)
    explanation = {**explain(inst, X, None, None, None), **alloc.explanation}
    thr = (inst.throughput * X).sum(axis=1)
    return dataclasses.replace(alloc, fractions=X, effective_throughput=thr, explanation=explanation)


def solve_program(inst: Instance, policy: str, build, solver: str, time_limit: float, **opts) -> Allocation:
    """Build, solve, decode; on solver failure fall back to the equal share scaled to fit."""
    from optsched.solvers import solve as run

    t0 = time.perf_counter()
    program = build(inst, **opts)
    build_seconds = time.perf_counter() - t0
    if program.pairs is not None and solver == "clarabel" and program.problem.is_lp():
        # Pair variables couple jobs along a random graph; CLARABEL's LDL fills in
        # (max-min, 1,000 jobs, 1,900 pairs: 5.5 s vs 0.2 s with HiGHS IPM, same optimum).
        solver = "highs"
        program.info.setdefault("solver", "highs (packing LP)")
    sol = run(program.problem, solver=solver, time_limit=time_limit)
    relaxed_note = ""
    if sol.status == "infeasible" and program.relaxed is not None:
        # Documented fallback of the formulation (e.g. SLOs that cannot all be met).
        program, relaxed_note = program.relaxed(), program.relaxed_note
        sol = run(program.problem, solver=solver, time_limit=time_limit)
    Y = None
    if sol.ok and program.fractions.value is not None:
        X, Y = _decode_fractions(program, inst)
        status = sol.status + (f" ({relaxed_note})" if relaxed_note else "")
        objective = program.objective(sol.value)
        prices = program.capacity.dual_value if program.capacity is not None else None
    else:
        X, status, objective, prices = _fallback(inst, sol.message)
    thr = program.effective_throughput(X) if program.effective_throughput else (inst.throughput * X).sum(axis=1)
    share = program.share(X) if program.pairs is None else program.share(X, Y)
    explanation = explain(inst, X, share, prices, objective if sol.ok else None)
    explanation.update(program.info)
    packed = {}
    if program.pairs is not None and Y is not None:
        thr, packed = _packed_result(inst, program.pairs, X, Y, thr, explanation)
    return Allocation.of(inst, policy, X, status, objective, sol.solve_seconds, thr, explanation,
                         build_seconds=build_seconds, solver_seconds=sol.solver_seconds, **packed)


def _fallback(inst: Instance, reason: str) -> tuple[np.ndarray, str, float, None]:
    """(X, status, objective, prices) when the solver failed: the equal share of
    every usable type, each type's column scaled to fit (always feasible)."""
    from optsched.formulations.base import fallback_allocation

    return fallback_allocation(inst), f"fallback: {reason} (equal share scaled to fit)", float("nan"), None


def _decode_fractions(program, inst: Instance) -> tuple[np.ndarray, np.ndarray | None]:
    """Cleaned X (and pair fractions Y when the program packs jobs)."""
    X = np.asarray(program.fractions.value)
    pv = program.pairs
    if pv is None:
        return clean_fractions(X, inst), None
    return clean_packed_fractions(X, np.asarray(pv.Y.value), inst, pv)


def clean_packed_fractions(X: np.ndarray, Y: np.ndarray, inst: Instance, pv) -> tuple[np.ndarray, np.ndarray]:
    """clean_fractions for programs with pairs: a job's row counts its pairs too,
    and a type's capacity counts the pairs' GPUs."""
    X = np.clip(np.nan_to_num(X), 0.0, 1.0)
    Y = np.clip(np.nan_to_num(Y), 0.0, 1.0)
    X[~inst.available] = 0.0
    Y[~pv.admitted] = 0.0
    X[X < 1e-9] = 0.0
    Y[Y < 1e-9] = 0.0
    rows = np.maximum(X.sum(axis=1) + (pv.first + pv.second) @ Y.sum(axis=1), 1.0)
    X = X / rows[:, None]
    Y = Y / np.maximum(rows[pv.pairs[:, 0]], rows[pv.pairs[:, 1]])[:, None]
    used = inst.scale_factor @ X + pv.scale_factor @ Y
    over = used > inst.capacity
    if over.any():
        X[:, over] *= inst.capacity[over] / used[over]
        Y[:, over] *= inst.capacity[over] / used[over]
    return X, Y


def _packed_result(inst: Instance, pv, X: np.ndarray, Y: np.ndarray, thr: np.ndarray, explanation: dict):
    """Effective throughput, explanation and Allocation fields with the pairs counted."""
    thr = (inst.throughput * X).sum(axis=1) + pv.throughput_value(inst.throughput, Y)
    used = inst.scale_factor @ X + pv.scale_factor @ Y
    explanation["capacity_used"] = {t: float(u) for t, u in zip(inst.gpu_types, used)}
    thr_equal = (inst.throughput * inst.equal_share()).sum(axis=1) * inst.weight / inst.scale_factor  # as explain()
    rel = np.divide(thr, thr_equal, out=np.zeros_like(thr), where=thr_equal > 0)
    explanation["share_vs_equal"] = {jid: float(r) for jid, r in zip(inst.job_ids, rel)}
    keep = Y.sum(axis=1) > 0
    explanation["pairs_admitted"] = int(len(pv.pairs))
    explanation["pairs_packed"] = int(keep.sum())
    return thr, {"pairs": pv.pairs[keep], "pair_fractions": Y[keep]}


# Direct (cvxpy-free) LP backends for formulations that provide build_lp(inst, **options)
# -> solvers.lp.MatrixProgram: the simulator's fast path (thousands of recomputations).
DIRECT_SOLVERS = {"highs-direct": "highs-ipm", "highs-simplex-direct": "highs-simplex", "clarabel-direct": "clarabel"}


def solve_matrix_program(inst: Instance, policy: str, build_lp, backend: str, time_limit: float, **opts) -> Allocation:
    """Like solve_program, for a matrix-form LP solved directly by ``backend``."""
    t0 = time.perf_counter()
    program = build_lp(inst, **opts)
    build_seconds = time.perf_counter() - t0
    sol = program.solve(backend=backend, time_limit=time_limit)
    n, k = program.fractions_shape
    if sol.ok:
        X = clean_fractions(sol.x[: n * k].reshape(n, k), inst)
        status, objective = sol.status, program.objective(sol.value)
        prices = sol.dual_ub[program.capacity_rows[0] : program.capacity_rows[1]]
    else:
        X, status, objective, prices = _fallback(inst, sol.message)
    explanation = explain(inst, X, program.share(X), prices, objective if sol.ok else None)
    return Allocation.of(inst, policy, X, status, objective, sol.solve_seconds, explanation=explanation,
                         build_seconds=build_seconds)


def clean_fractions(X: np.ndarray, inst: Instance) -> np.ndarray:
    """Remove interior-point noise: clip to [0, 1], zero unusable types, and
    scale rows/columns back inside the constraints (by at most solver tolerance)."""
    X = np.clip(np.nan_to_num(X), 0.0, 1.0)
    X[~inst.available] = 0.0
    X[X < 1e-7] = 0.0  # interior-point noise, far below a round's granularity
    rows = X.sum(axis=1)
    X = X / np.maximum(rows, 1.0)[:, None]
    used = inst.scale_factor @ X
    over = used > inst.capacity
    if over.any():
        X[:, over] *= inst.capacity[over] / used[over]
    return X


def explain(inst: Instance, X: np.ndarray, share: np.ndarray, prices, objective) -> dict:
    """Why did my job get this? Prices of GPU types, the bottleneck jobs (lowest
    value of the policy's own per-job metric ``share``), and each job's share
    relative to its weighted equal share: thr_m(X) · s_m / (w_m · thr_equal_m),
    1.0 = exactly the equal share (Gavel's normalization)."""
    thr = (inst.throughput * X).sum(axis=1)
    thr_equal = (inst.throughput * inst.equal_share()).sum(axis=1) * inst.weight / inst.scale_factor
    rel = np.divide(thr, thr_equal, out=np.zeros_like(thr), where=thr_equal > 0)
    out: dict = {
        "capacity_used": {t: float(u) for t, u in zip(inst.gpu_types, inst.scale_factor @ X)},
        "capacity": {t: float(c) for t, c in zip(inst.gpu_types, inst.capacity)},
        "share_vs_equal": {jid: float(r) for jid, r in zip(inst.job_ids, rel)},
    }
    if prices is not None:
        p = np.maximum(np.asarray(prices, dtype=float).reshape(-1), 0.0)
        out["gpu_price"] = {t: float(v) for t, v in zip(inst.gpu_types, p)}
    if share is not None and len(share):
        low = float(np.min(share))
        tol = 1e-5 * max(abs(low), 1.0)
        out["bottleneck_jobs"] = [jid for jid, s in zip(inst.job_ids, share) if s <= low + tol]
    return out
