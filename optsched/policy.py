"""The one entry point that pairs a formulation with a solver and decodes the
result into an Allocation with an explanation (docs/architecture.md §1, §3).

A policy is registered as (formulation module, options). The module exposes
either ``build(inst, **options) -> Formulation`` (a block LP and how to read
it, formulations/base.py: one path build → solve → decode, here) or
``allocate(inst, solver=, time_limit=, **options) -> Allocation`` (a custom
procedure: water filling, priority orders, MILPs with their own fallback).
Nothing on this path imports cvxpy.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
import time

import numpy as np

from optsched.model import Allocation, Instance, OptschedError, Snapshot, parse_snapshot
from optsched.solvers import SOLVERS, block_backend, solver_name
from optsched.solvers.block_lp import load_modules, preload

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
    "gandiva": ("gandiva", {}),  # FIFO + packing + time slicing (formulations/gandiva.py)
    "gandiva_fifo": ("priority", {"order": "gandiva"}),  # the FIFO-plus-packing order alone
    "tiresias_gittins": ("priority", {"order": "tiresias", "discretization": "gittins"}),
    # The seeds' schedulers (docs/guide/policies.md "The seeds' schedulers"; predictions: optsched/predict).
    "qssf": ("qssf", {}),
    "allox": ("allox", {}),
    "optimus": ("optimus", {}),
    "synergy": ("synergy", {}),
    "lucid": ("lucid", {}),
    "lucid_ageing": ("lucid", {"ageing": True}),
    # Elastic / configuration-choice policies (goodput models).
    "pollux": ("pollux", {}),
    "sia": ("sia", {}),
    "hadar": ("hadar", {}),
}

DEFAULT_POLICY = "max_min_fairness"
# Policies whose program reads every job's steps left (a job without steps_total is refused).
NEEDS_STEPS = frozenset({"srtf", "makespan", "makespan_agnostic", "finish_time_fairness",
                         "finish_time_fairness_agnostic"})
COST_POLICIES = frozenset({"min_cost", "min_cost_slo"})  # a price per hour for every GPU type

# Policies whose allocation reads per-round state (attained service, waiting
# time, goodput fits, running configurations, predicted remaining work): every
# executor — simulator, service session, runtime — re-decides them each round
# instead of only when jobs arrive or leave.
PER_ROUND_POLICIES = frozenset({
    "pollux", "sia", "tiresias", "tiresias_gittins", "las", "fifo", "srtf", "gandiva", "gandiva_fifo",
    "lucid", "lucid_ageing", "qssf", "allox", "synergy", "optimus",
})
# Policies that choose elastic jobs' configurations from goodput models, refit
# from reported iterations (simulator and service sessions alike); optimus
# keeps each job's batch size fixed and chooses only GPU counts.
GOODPUT_POLICIES = frozenset({"pollux", "sia", "optimus"})
FIXED_BATCH_POLICIES = frozenset({"optimus"})
# Procedures whose allocation is time fractions of an objective monotone in every job's
# rate (water filling, hierarchical): like every block-LP policy, their idle usable
# capacity goes to jobs with time left (formulations/base.fill_idle, ``fill_idle=``).
# The priority orders and the seeds' and elastic schedulers place whole jobs by their
# own rules (a job waits in FIFO by design): no fill.
FILLED_PROCEDURES = frozenset({"water_filling", "hierarchical"})


# Policies from other packages: an entry point in this group names a module
# (``mypkg.mypolicy``) with ``build(inst, **options)`` (a block LP formulation,
# see formulations/max_min_fairness.py) or ``allocate(inst, ...)`` (a procedure
# returning an Allocation). Built-in names win over plugins of the same name.
POLICY_ENTRY_POINTS = "optsched.policies"


def register(name: str, module: str, **options) -> None:
    """Add a policy: ``module`` is a formulations/ module name or a dotted module path."""
    POLICIES[name] = (module, options)


def _module_path(module: str) -> str:
    return module if "." in module else f"optsched.formulations.{module}"


def _plugin_policies() -> dict[str, tuple[str, dict]]:
    from importlib.metadata import entry_points

    return {ep.name: (ep.value.split(":")[0], {}) for ep in entry_points(group=POLICY_ENTRY_POINTS)
            if ep.name not in POLICIES}


def policy_names() -> list[str]:
    """Registered policies whose module is present (built-in and plugins)."""
    from importlib.util import find_spec

    def present(module: str) -> bool:
        try:
            return find_spec(_module_path(module)) is not None
        except (ImportError, ValueError):
            return False

    known = {**_plugin_policies(), **POLICIES}
    return sorted(n for n, (m, _) in known.items() if present(m))


# Formulation modules already imported, by module name: the simulator asks for
# its policy's module on every recomputation and importlib's lookup alone is
# ~0.1 ms. Keyed by module (not policy) so that register() stays live.
_MODULES: dict[str, object] = {}


def _module(name: str):
    entry = POLICIES.get(name) or _plugin_policies().get(name)  # plugins are looked up only for unknown names
    if entry is None:
        from optsched.suggest import with_suggestion

        raise OptschedError(with_suggestion(f"policy: unknown policy {name!r} (choose from {', '.join(policy_names())})"))
    module, options = entry
    mod = _MODULES.get(module)
    if mod is None:
        try:
            mod = importlib.import_module(_module_path(module))
        except ModuleNotFoundError as e:
            if e.name != _module_path(module):
                raise
            raise OptschedError(f"policy: {name!r} is not available in this build") from None
        if not (hasattr(mod, "build") or hasattr(mod, "allocate")):
            raise OptschedError(f"policy: module {module!r} of {name!r} has neither build() nor allocate()")
        _MODULES[module] = mod
    return mod, dict(options)


def solve(
    snapshot: Snapshot | dict | str,
    policy: str = DEFAULT_POLICY,
    solver: str = "auto",
    time_limit: float = 60.0,
    **options,
) -> Allocation:
    """Solve one policy on a snapshot (a Snapshot, a dict, or JSON text)."""
    snap = snapshot if isinstance(snapshot, Snapshot) else parse_snapshot(snapshot)
    return solve_instance(Instance.from_snapshot(snap), policy, solver, time_limit, **options)


# Old solver names (the simulator's and scripts'): kept as aliases of the user names.
log = logging.getLogger("optsched.policy")


@functools.cache
def supports_packing(policy: str) -> bool:
    """The policy has pair variables (or packs by itself, gandiva)."""
    import inspect

    if policy == "gandiva":
        return True
    mod, _ = _module(policy)
    if getattr(mod, "SPACE_SHARING", False):  # a procedure that binds pairs itself (lucid)
        return True
    build = getattr(mod, "build", None)
    if build is None or "packing" not in inspect.signature(build).parameters:
        return False
    return "no_packing(" not in inspect.getsource(mod)


def check_packing(policy: str, packing: bool, field: str = "packing") -> None:
    """One line naming ``field`` when ``packing`` is asked of a policy without space sharing
    (it was ignored by some, failed every round of a session with others)."""
    if packing and not supports_packing(policy):
        packers = ", ".join(p for p in POLICIES if not p.endswith("_agnostic") and supports_packing(p))
        raise OptschedError(f"{field}: policy {policy} has no space sharing (policies with it: {packers})")


def solve_instance(
    inst: Instance, policy: str = DEFAULT_POLICY, solver: str = "auto", time_limit: float = 60.0, warm=None,
    **options,
) -> Allocation:
    """``solver``: auto | ipm | clarabel | highs | highs-simplex (optsched.solvers);
    ``fast`` is accepted and ignored (every policy takes the fast path now).
    ``warm``: (prices per type, level[, crossover slacks]) of a similar program,
    for policies that are one block LP (POP's sibling partitions); others ignore it.
    ``fill_idle`` (default True): the fractional policies' second stage, which gives
    capacity the optimum leaves idle to jobs with time left without worsening the
    objective (formulations/base.fill_idle); False returns the solver's raw optimum."""
    options.pop("fast", None)
    fill = fill_option(options.pop("fill_idle", True))
    if "packing" in options:  # "false" or 2 would read as true on the colocation path below
        from optsched.checks import check_flag

        options["packing"] = check_flag("packing", options["packing"])
    check_packing(policy, bool(options.get("packing")))
    if options.get("packing") and "colocation" in inst.extras:
        from optsched.packed_classes import solve_by_model

        packed, inst = solve_by_model(inst, policy, time_limit, options)
        if packed is not None:
            return fill_allocation(inst, packed, is_agnostic(policy, options)) if fill else packed
        if "colocation" not in inst.extras:  # the table became candidate pairs (else: nothing to pair)
            alloc = solve_instance(inst, policy, solver, time_limit, warm, fill_idle=fill, **options)
            cap = options.get("max_partners", 8)
            alloc.explanation["colocation"] = (f"candidate pairs ({len(inst.pairs):,}; each job picks "
                                               + ("every partner" if cap is None else f"at most {cap} partners") + ")")
            return alloc
    try:
        solver = solver_name(solver)
    except ValueError:
        raise OptschedError(f"solver: unknown solver {solver!r} (choose from {', '.join(SOLVERS)})") from None
    from optsched.checks import check_number

    if time_limit != float("inf"):  # (inf: no limit; 0, -1 and nan ran as "optimal")
        check_number("time_limit", time_limit, 0.0, lo_open=True, unit="s")
    imports = time.perf_counter()
    mod, opts = _module(policy)
    imports = time.perf_counter() - imports
    unknown = unknown_options(policy, options)
    if unknown:  # (a TypeError from the formulation before)
        takes = ", ".join(sorted(_option_names(entry_point(mod)))) or "none"
        raise OptschedError(f"{unknown[0]}: not an option of policy {policy} (it takes: {takes})")
    opts.update(options)
    try:
        imports += load_modules(policy_imports(mod, opts))
    except ModuleNotFoundError as e:  # (an optional extra's module, or a plugin's IMPORTS this environment lacks)
        from optsched.extras import missing

        raise (missing(f"policy: {policy}", e)
               or OptschedError(f"policy: {policy!r} needs the module {e.name!r}, which is not installed")) from None
    started = time.perf_counter()
    if hasattr(mod, "allocate"):
        if inst.n == 0:
            alloc = Allocation.of(inst, policy, np.zeros((0, inst.k)), "optimal", float("nan"), 0.0)
        else:
            alloc = finish_procedure(inst, mod.allocate(inst, policy=policy, solver=solver, time_limit=time_limit,
                                                        **opts))
            said = time_limit_said(alloc.status, time_limit)
            if said != alloc.status:
                alloc = dataclasses.replace(alloc, status=said)
            if fill and POLICIES.get(policy, ("",))[0] in FILLED_PROCEDURES:
                alloc = fill_allocation(inst, alloc, is_agnostic(policy, opts))
    else:
        alloc = solve_formulation(inst, policy, mod.build, solver, time_limit, warm=warm, fill_idle=fill, **opts)
    if time.perf_counter() - started >= time_limit:  # every deadline inside counts from here: one may have cut a path
        alloc = dataclasses.replace(alloc, status=time_limit_said(alloc.status, time_limit, True))
    # The policy's module and what its solve imports (IMPORTS), loaded before any timer: a cold process.
    return dataclasses.replace(alloc, import_seconds=alloc.import_seconds + imports) if imports else alloc


PLUMBING = frozenset({"inst", "policy", "solver", "time_limit"})  # what solve_instance passes itself


def is_agnostic(policy: str, options: dict) -> bool:
    """The policy reads no type differences (``*_agnostic``, or agnostic=True): the fill then
    ranks a job's usable types alike (most idle GPUs first) instead of by its throughput."""
    return bool(options.get("agnostic", POLICIES.get(policy, ("", {}))[1].get("agnostic", False)))


# How the backends say that a wall-clock limit stopped them (CLARABEL, HiGHS, the block LP).
_TIMED_OUT = ("MaxTime", "time_limit", "Time limit reached", "kTimeLimit")


def time_limit_said(status: str, time_limit: float, timed_out: bool = False) -> str:
    """``status`` naming the user's time limit when it stopped a solve: the one path whose
    answer depends on the machine's speed and load (architecture §5), so it is always said
    in the same words, whatever backend hit it. solve_instance also says it whenever the
    solve ran past the limit (a deadline inside may have changed the path without failing)."""
    if "time limit of" in status or not (timed_out or any(m in status for m in _TIMED_OUT)):
        return status
    return f"{status} (time limit of {time_limit:g}s reached)"


def fill_option(value) -> bool:
    from optsched.checks import check_flag

    return check_flag("fill_idle", value)


def fill_allocation(inst: Instance, alloc: Allocation, agnostic: bool = False) -> Allocation:
    """``alloc`` with its idle usable capacity given to jobs with time left
    (formulations/base.fill_idle; pairs keep their fractions): effective throughputs,
    capacity use, shares and utilization follow; the objective, prices and bottleneck
    marks are the solve's (the fill cannot lower a job's rate). Allocations of GPU
    counts pass unchanged."""
    from optsched.formulations.base import fill_idle, utilization

    if alloc.gpu_counts is not None or alloc.fractions.shape != (inst.n, inst.k):
        return alloc
    t0 = time.perf_counter()
    pair_time, pair_gpus = _pair_use(inst, alloc.pairs, alloc.pair_fractions)
    rate = inst.available.astype(float) if agnostic else inst.throughput
    X = fill_idle(inst, alloc.fractions, rate, pair_time, pair_gpus)
    thr = np.asarray(alloc.effective_throughput, dtype=float) + (inst.throughput * (X - alloc.fractions)).sum(axis=1)
    explanation = {**alloc.explanation, **_relative_shares(inst, thr),
                   "capacity_used": {t: float(u) for t, u in zip(inst.gpu_types, inst.scale_factor @ X + pair_gpus)},
                   "utilization": utilization(inst, X, pair_time, pair_gpus)}
    decode = time.perf_counter() - t0
    return dataclasses.replace(alloc, fractions=X, effective_throughput=thr, explanation=explanation,
                               decode_seconds=alloc.decode_seconds + decode, solve_seconds=alloc.solve_seconds + decode)


def _pair_use(inst: Instance, pairs: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(time per job, GPUs per type) that space-shared pairs take."""
    if len(pairs) == 0 or Y.size == 0:
        return np.zeros(inst.n), np.zeros(inst.k)
    time_ = np.bincount(np.asarray(pairs).reshape(-1), weights=np.repeat(Y.sum(axis=1), 2), minlength=inst.n)
    return time_, inst.scale_factor[np.asarray(pairs)[:, 0]].astype(float) @ Y


def entry_point(mod):
    """The function ``solve_instance`` calls: ``allocate`` when the module has one (hadar's
    ``build`` is its program, whose ``relax`` is no option of the policy), else ``build``."""
    return getattr(mod, "allocate", None) or mod.build


def unknown_options(policy: str, options) -> list[str]:
    """The keys of ``options`` that ``policy``'s entry point does not take, sorted (none when it
    takes any keyword)."""
    takes = _option_names(entry_point(_module(policy)[0]))
    return [] if takes is None else sorted(k for k in options if k not in takes)


@functools.lru_cache(maxsize=256)  # per function (not module: a test may swap a module's allocate)
def _option_names(fn) -> frozenset | None:
    """The keywords a policy's entry point takes besides the plumbing (None: it takes any, **kwargs)."""
    import inspect

    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.name not in PLUMBING)


def policy_imports(mod, options: dict) -> tuple[str, ...]:
    """The modules a policy's solve imports (``imports(options)`` or ``IMPORTS`` of its
    module): solve_instance loads them before any timer, so a cold process reports
    them as import_seconds instead of solve time."""
    fn = getattr(mod, "imports", None)
    return tuple(fn(options)) if callable(fn) else tuple(getattr(mod, "IMPORTS", ()))


def check_job_inputs(policy: str, jobs, where: str = "jobs") -> None:
    """The fields ``policy`` needs of each job (dicts or objects with ``id``,
    ``steps_total``, ``slo``), refused when a job arrives or changes rather than as
    a failure of every later round (a service session). ``where=""``: one job, its
    fields named bare (a PATCH body)."""
    for i, j in enumerate(jobs):
        get = j.get if isinstance(j, dict) else (lambda k, _j=j: getattr(_j, k, None))
        field = f"{where}[{i}].steps_total" if where else "steps_total"
        if get("steps_total") is None and policy in NEEDS_STEPS:
            raise OptschedError(f"{field}: policy {policy} needs the total steps of every job "
                                f"(job {get('id')!r} has none)")
        if get("steps_total") is None and get("slo") is not None and policy == "min_cost_slo":
            raise OptschedError(f"{field}: job {get('id')!r} has an SLO, which needs its total steps")


def check_prices_for(policy: str, gpu_types, price_per_hour: dict | None) -> None:
    """A cost policy needs a price above 0 for every GPU type: min_cost's own rule, applied
    when a session is created rather than at its first round."""
    if policy in COST_POLICIES:
        from optsched.formulations.min_cost import check_prices

        prices = price_per_hour or {}
        check_prices(list(gpu_types), [float(prices.get(t, float("nan"))) for t in gpu_types], hint="")


def finish_procedure(inst: Instance, alloc: Allocation) -> Allocation:
    """Procedures (water filling, priority orders) return raw fractions: clean
    them like a program's and give them the same explanation keys (capacity
    use, share vs equal share); the procedure's own keys win. Allocations with
    GPU counts or pairs are the procedure's responsibility and pass unchanged."""
    if alloc.status.startswith("fallback"):  # as a program's fallback is: a warning on the log
        log.warning("%s: %s", alloc.policy, alloc.status)
    if alloc.build_seconds == alloc.solver_seconds == alloc.decode_seconds == 0.0:
        # A procedure that does not split its time: all of it is its "solver" (build + solver + decode = solve).
        alloc = dataclasses.replace(alloc, solver_seconds=alloc.solve_seconds)
    if alloc.gpu_counts is not None or len(alloc.pairs) or alloc.fractions.shape != (inst.n, inst.k):
        return alloc
    t0 = time.perf_counter()
    X = clean_fractions(alloc.fractions.copy(), inst)
    explanation = {**explain(inst, X, None, None, None), **alloc.explanation}
    from optsched.formulations.base import utilization

    explanation["utilization"] = utilization(inst, X)
    thr = (inst.throughput * X).sum(axis=1)
    decode = time.perf_counter() - t0
    return dataclasses.replace(alloc, fractions=X, effective_throughput=thr, explanation=explanation,
                               decode_seconds=alloc.decode_seconds + decode, solve_seconds=alloc.solve_seconds + decode)


def solve_formulation(inst: Instance, policy: str, build, solver: str, time_limit: float, warm=None,
                      fill_idle: bool = True, **opts) -> Allocation:
    """Build → solve → decode; on solver failure (or a time limit) fall back to
    the equal share scaled to fit, with a logged warning. ``fill_idle``: the second
    stage (formulations/base.fill_idle) before the explanation, on the fallback too."""
    t0 = time.perf_counter()
    form = build(inst, **opts)
    build_seconds = time.perf_counter() - t0
    if inst.n == 0:
        return Allocation.of(inst, policy, np.zeros((0, inst.k)), "optimal", float("nan"), build_seconds,
                             build_seconds=build_seconds)
    # auto: HiGHS IPM when pair columns couple the jobs, else block_lp's size rule (measured: solvers/__init__.py).
    backend = block_backend(solver, form.lp.pairs is not None)
    preloaded = preload(form.lp, backend)  # (a formulation's own loop of solves would time its imports)
    sol = form.solve(backend, time_limit, warm=warm)
    solver_seconds = sol.seconds
    relaxed_note = ""
    if sol.status == "infeasible" and form.relaxed is not None:
        # Documented fallback of the formulation (e.g. SLOs that cannot all be met).
        t1 = time.perf_counter()
        form, relaxed_note = form.relaxed(), form.relaxed_note
        build_seconds += time.perf_counter() - t1
        sol = form.solve(backend, max(time_limit - solver_seconds, 1e-3))
        solver_seconds += sol.seconds
    t2 = time.perf_counter()
    pk = form.packing
    Y = None
    if sol.ok and sol.X is not None:
        if pk is None:
            X = clean_fractions(sol.X, inst)
        else:
            X, Y = clean_packed_fractions(sol.X, sol.Y, inst, pk)
        status = sol.status + (f" ({relaxed_note})" if relaxed_note else "")
        objective = form.objective(sol) / form.unit
        prices = form.prices(sol) if form.prices is not None else (
            None if sol.price is None else sol.price / form.unit)
    else:
        X, status, objective, prices = _fallback(inst, policy, sol.backend,
                                                 time_limit_said(sol.message or sol.status, time_limit,
                                                                 sol.status == "time_limit"))
    pair_time, pair_gpus = (np.zeros(inst.n), np.zeros(inst.k)) if Y is None else (pk.time(Y), pk.gpus(Y))
    if fill_idle:
        from optsched.formulations.base import fill_idle as fill

        X = fill(inst, X, inst.available.astype(float) if opts.get("agnostic") else inst.throughput,
                 pair_time, pair_gpus)
    # A fallback's lowest shares are not a bottleneck of the policy: no marks.
    explanation = explain(inst, X, form.share(X, Y) if sol.ok else None, prices, objective if sol.ok else None)
    from optsched.formulations.base import utilization

    explanation["utilization"] = utilization(inst, X, pair_time, pair_gpus)
    explanation.update(form.info)
    explanation["backend"] = sol.backend  # what solved it (proportional_fairness: clarabel whatever --solver says)
    log.info("%s: %d jobs x %d types, %s backend %s: %s in %.3f s", policy, inst.n, inst.k, solver, sol.backend,
             status, solver_seconds)
    thr, packed = (inst.throughput * X).sum(axis=1), {}
    if pk is not None and Y is not None:
        thr, packed = _packed_result(inst, pk, X, Y, explanation)
    t3 = time.perf_counter()
    imports = float(sol.info.get("import_seconds", 0.0)) + preloaded  # a cold process loading the backend
    return Allocation.of(inst, policy, X, status, objective, t3 - t0 - imports, thr, explanation,
                         build_seconds=build_seconds, solver_seconds=solver_seconds, decode_seconds=t3 - t2,
                         import_seconds=imports, **packed)


def _fallback(inst: Instance, policy: str, backend: str, reason: str) -> tuple[np.ndarray, str, float, None]:
    """(X, status, objective, prices) when the solver failed: the equal share of
    every usable type, each type's column scaled to fit (always feasible)."""
    from optsched.formulations.base import fallback_allocation

    log.warning("%s: no solution (%s); using the equal share scaled to fit", policy, reason)
    return fallback_allocation(inst), f"fallback: {reason} (equal share scaled to fit)", float("nan"), None


def clean_packed_fractions(X: np.ndarray, Y: np.ndarray, inst: Instance, pk) -> tuple[np.ndarray, np.ndarray]:
    """clean_fractions for programs with pairs: a job's row counts its pairs too,
    and a type's capacity counts the pairs' GPUs."""
    X = np.clip(np.nan_to_num(X), 0.0, 1.0)
    Y = np.clip(np.nan_to_num(Y), 0.0, 1.0)
    X[~inst.available] = 0.0
    Y[~pk.admitted] = 0.0
    X[X < 1e-9] = 0.0
    Y[Y < 1e-9] = 0.0
    rows = np.maximum(X.sum(axis=1) + pk.time(Y), 1.0)
    X = X / rows[:, None]
    Y = Y / np.maximum(rows[pk.pairs[:, 0]], rows[pk.pairs[:, 1]])[:, None]
    used = inst.scale_factor @ X + pk.gpus(Y)
    over = used > inst.capacity
    if over.any():
        X[:, over] *= inst.capacity[over] / used[over]
        Y[:, over] *= inst.capacity[over] / used[over]
    return X, Y


def _packed_result(inst: Instance, pk, X: np.ndarray, Y: np.ndarray, explanation: dict):
    """Effective throughput, explanation and Allocation fields with the pairs counted."""
    thr = (inst.throughput * X).sum(axis=1) + pk.throughput(inst.throughput, Y)
    used = inst.scale_factor @ X + pk.gpus(Y)
    explanation["capacity_used"] = {t: float(u) for t, u in zip(inst.gpu_types, used)}
    explanation.update(_relative_shares(inst, thr))
    keep = Y.sum(axis=1) > 0
    explanation["pairs_admitted"] = int(len(pk.pairs))
    explanation["pairs_packed"] = int(keep.sum())
    return thr, {"pairs": pk.pairs[keep], "pair_fractions": Y[keep]}


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


def _relative_shares(inst: Instance, thr: np.ndarray) -> dict:
    """Each job's throughput against two references.

    share_vs_fair: against its weighted fair share of the cluster — GPUs
    ΣW · w_m / Σ_l w_l, i.e. the time fraction e_m = min(1, ΣW w_m / (s_m Σ_l w_l))
    on a proportional mix of every usable type. 1.0 = exactly its fair share
    (two identical jobs halving one GPU: 1.0 each); the table's "vs fair".
    share_vs_equal: Gavel's normalized share thr_m · s_m / (w_m · thr_prop_m),
    thr_prop_m = throughput on the proportional mix all of the time: the unit of
    the max-min objective; uncapped, share_vs_fair = share_vs_equal · Σw / ΣW.
    """
    thr_prop = (inst.throughput * inst.equal_share()).sum(axis=1)
    total_weight = float(inst.weight.sum())
    fair_time = np.minimum(1.0, inst.capacity.sum() * inst.weight / (inst.scale_factor * max(total_weight, 1e-300)))
    equal = thr_prop * inst.weight / inst.scale_factor
    fair = thr_prop * fair_time
    rel_equal = np.divide(thr, equal, out=np.zeros_like(thr), where=equal > 0)
    rel_fair = np.divide(thr, fair, out=np.zeros_like(thr), where=fair > 0)
    return {  # (tolist: the same floats, 0.3 ms sooner at 1,000 jobs than float() per entry)
        "share_vs_fair": dict(zip(inst.job_ids, rel_fair.tolist())),
        "share_vs_equal": dict(zip(inst.job_ids, rel_equal.tolist())),
    }


PRICE_NOISE = 1e-8


def explain(inst: Instance, X: np.ndarray, share: np.ndarray, prices, objective) -> dict:
    """Why did my job get this? Prices of GPU types, the bottleneck jobs (lowest
    value of the policy's own per-job metric ``share``), and each job's
    throughput relative to two references (_relative_shares)."""
    thr = (inst.throughput * X).sum(axis=1)
    out: dict = {
        "capacity_used": {t: float(u) for t, u in zip(inst.gpu_types, inst.scale_factor @ X)},
        "capacity": {t: float(c) for t, c in zip(inst.gpu_types, inst.capacity)},
        **_relative_shares(inst, thr),
    }
    if prices is not None:
        p = np.maximum(np.nan_to_num(np.asarray(prices, dtype=float).reshape(-1)), 0.0)
        # An uncontended type's price is 0; an interior-point solver leaves ~1e-11
        # there. Weak duality bounds Σ π_j W_j by the objective, so a price below
        # 1e-8 of objective / ΣW (or of the largest price) is solver noise.
        scale = max(float(p.max(initial=0.0)), abs(objective or 0.0) / max(float(inst.capacity.sum()), 1.0))
        p[p < PRICE_NOISE * scale] = 0.0
        out["gpu_price"] = {t: float(v) for t, v in zip(inst.gpu_types, p)}
    if share is not None and len(share):
        from optsched.formulations.base import at_minimum

        _, low = at_minimum(np.asarray(share, dtype=float))
        out["bottleneck_jobs"] = [inst.job_ids[m] for m in np.flatnonzero(low)]  # (not a loop over numpy bools)
    return out
