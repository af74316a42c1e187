"""Pollux (OSDI'21): co-adapt each job's GPU count and batch size to its goodput,
as an exact MILP over configurations instead of Pollux's genetic algorithm.

With speedup_mc = G[m, c] / G_m(fair share) (the batch size chosen per
configuration by the goodput model), scaled by servers/W as Pollux does,
and a re-allocation factor on every configuration other than the current one,

    f_m = max(age_m − restarts_m · S_m, 0) / (age_m + S_m)     (S_m: restart seconds, 30)

maximize the generalized mean (1/n Σ_m (f·speedup_m + ε)^p)^(1/p), p = −1, ε = 1e-3.
For p < 0 this is minimize Σ_m (·)^p; a job without GPUs contributes ε^p, so

    maximize Σ_{m,c} y[m,c] · w_m · u[m,c],
    u = ε^p − (f·s + ε)^p  (p < 0),   (f·s + ε)^p − ε^p  (0 < p ≤ 1),   log((f·s + ε)/ε)  (p = 0),

subject to the assignment constraints (formulations/configurations.py). Exact:
the objective is separable over jobs, so it is linear in the one-hot y.

The fair share, as Pollux's simulator normalizes speedups (simulator/pollux.py,
``Problem.__init__``): ceil(1 / (dominant share · n)) = ceil(W / n) replicas
on ceil(nodes · dominant share) = ceil(N / W) = 1 node, whatever W / n is
(the goodput model is evaluated there even when ceil(W / n) exceeds a
server). Spreading it over ceil(W / n / S) servers instead gave a lower
base goodput, so higher speedups: at 1,024 GPUs and 128 jobs the objective
reported 0.2592 where Pollux's scoring of the same allocation gives 0.1995.

A job that has just arrived (age 0, no restarts, not running) has f = 0 in
Pollux's formula, so it gained nothing from GPUs and the MILP left it at
zero while reporting optimal. Pollux never decides that case: its
scheduler places an arriving job on max(min_replicas, 1) replicas at once
(adaptdl ``PolluxPolicy.allocate_job``) and its simulator only sees jobs
after they aged one interval. We take f = 1 for such a job (starting it is
not a restart), so it gets GPUs whenever there are any to give.
``agnostic=True`` ignores GPU types (Pollux is heterogeneity-unaware).
"""

from __future__ import annotations

import numpy as np

from optsched.formulations.configurations import (
    allocation_from_choice,
    check_feasible,
    goodput_matrix,
    restart_factor,
    solve_assignment,
)
from optsched.model import Allocation, Instance, OptschedError
from optsched.checks import check_flag, check_number

EPS = 1e-3  # Pollux's offset inside the power mean
# The fairness knob's floor (Pollux and Sia): EPS^p is 1e30 at p = -10 and overflows
# a float below p ≈ -103; Pollux's and Sia's papers use p in [-1, 1].
MIN_P = -10.0
# Below this |p| (but not 0) s**p is 1 to machine precision for every speedup: the knob would
# erase the choice (p = 1e-300 scored every configuration alike). p = 0 is the geometric mean.
MIN_ABS_P = 1e-3


def check_p(p, zero: bool = True) -> float:
    """The fairness knob p of Pollux (``zero``: 0 is the geometric mean) and Sia (no 0)."""
    p = check_number("p", p, MIN_P, 1.0)
    if (p == 0 and not zero) or 0 < abs(p) < MIN_ABS_P:
        allowed = "0 (geometric mean) or " if zero else ""
        raise OptschedError(f"p: the fairness knob must be {allowed}{MIN_P:g} <= p <= {-MIN_ABS_P:g} or "
                            f"{MIN_ABS_P:g} <= p <= 1 (got {p:g})")
    return p


def fair_share_goodput(inst: Instance, gm) -> np.ndarray:
    """G_m at the fair share: ceil(W/n) GPUs on one node (Pollux's normalization);
    rigid jobs and jobs whose model excludes that size: the best configuration
    with at most ceil(W/n) GPUs, else the smallest feasible one."""
    W = inst.capacity.sum()
    fair = np.ceil(W / max(inst.n, 1))
    cfg = gm.configs
    # Best configuration no larger than the fair share; else the smallest feasible one.
    G = gm.goodput
    small = np.where(cfg.gpus[None, :] <= fair, G, 0.0).max(axis=1)
    smallest = np.where(G > 0, G, np.inf).min(axis=1)
    base = np.where(small > 0, small, smallest)
    if gm.model is not None and inst.elastic is not None:
        el = inst.elastic
        r = np.full(inst.n, fair)
        ref = np.argmax(np.where(np.isfinite(gm.params).all(axis=2), inst.throughput + 1e-12, -1), axis=1)
        P = gm.params[np.arange(inst.n), ref][:, None, :]
        # one search per distinct row (jobs of one application and epoch share it)
        mo = gm.model
        key = np.column_stack([np.nan_to_num(P[:, 0], nan=1.0), mo.grad_sqr, mo.grad_var, mo.init_batch_size,
                               mo.max_batch_size, mo.min_local_bsz, mo.max_local_bsz])
        _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
        g, _, _ = mo.take(first).optimize(np.ones((len(first), 1)), r[first, None],
                                          params=np.nan_to_num(P[first], nan=1.0))
        g = g[inv.ravel()]
        use = el.is_elastic & np.isfinite(P[:, 0]).all(axis=1) & (g[:, 0] > 0)
        base = np.where(use, g[:, 0], base)
    return base


def utilities(speedup: np.ndarray, p: float) -> np.ndarray:
    s = np.maximum(speedup, 0.0) + EPS
    if p < 0:
        return EPS ** p - s ** p
    if p == 0:
        return np.log(s / EPS)
    return s ** p - EPS ** p


# What allocate() imports, loaded (and timed as import_seconds) before its timer: optsched/policy.py.
IMPORTS = ("optsched.solvers.lp", "highspy", "scipy.sparse")


def allocate(inst: Instance, policy: str = "pollux", solver: str = "highs", time_limit: float = 60.0,
             p: float = -1.0, restart_penalty: bool = True, agnostic: bool | None = None,
             force_fallback: bool = False, **_) -> Allocation:
    p = check_p(p)
    restart_penalty = check_flag("restart_penalty", restart_penalty)
    force_fallback = check_flag("force_fallback", force_fallback)
    agnostic = check_flag("agnostic", agnostic, none=True)
    if agnostic is None:
        agnostic = inst.k > 1
    gm = goodput_matrix(inst, agnostic=agnostic)
    check_feasible(inst, gm.goodput)
    U, speedup, base = utility_matrix(inst, gm, p, restart_penalty)
    a = solve_assignment(U, gm.configs, inst.capacity, time_limit, solver, force_fallback=force_fallback,
                         start=gm.current, type_blind=agnostic)  # the running configurations: a warm start
    chosen = np.where(a.choice >= 0, speedup[np.arange(inst.n), np.maximum(a.choice, 0)], 0.0)
    terms = (chosen + EPS) ** p if p != 0 else np.log(chosen + EPS)
    mean = float(np.mean(terms) ** (1 / p)) if p != 0 else float(np.exp(np.mean(terms)))
    rel = np.where(a.choice >= 0, gm.goodput[np.arange(inst.n), np.maximum(a.choice, 0)] / base, 0.0)
    return allocation_from_choice(inst, policy, gm, a, objective=mean, share=rel,
                                  extra={"speedup": chosen, "fairness_p": p, "milp_value": a.objective})


def utility_matrix(inst: Instance, gm, p: float = -1.0, restart_penalty: bool = True):
    """(U, speedup, fair-share goodput base): Pollux's objective per (job,
    configuration), the weighted utility of the speedup over the fair share,
    a restart's cost charged to every configuration but the running one
    (none for a job that just arrived). The MILP maximizes Σ U."""
    base = fair_share_goodput(inst, gm)
    n_servers = (inst.capacity / np.maximum(_server_gpus(inst), 1)).sum()
    speedup = gm.goodput / base[:, None] * (n_servers / inst.capacity.sum())
    if restart_penalty:
        f = np.where(just_arrived(inst, gm), 1.0, restart_factor(inst))
        change = np.arange(len(gm.configs.gpus))[None, :] != gm.current[:, None]
        speedup = np.where(change, speedup * f[:, None], speedup)
    U = np.where(gm.goodput > 0, inst.weight[:, None] * utilities(speedup, p), 0.0)
    return U, speedup, base


def just_arrived(inst: Instance, gm) -> np.ndarray:
    """Jobs of age 0 that never ran: no restarts and no current configuration."""
    restarts = inst.elastic.num_restarts if inst.elastic is not None else np.zeros(inst.n)
    return (inst.elapsed_time <= 0) & (restarts == 0) & (gm.current < 0)


def _server_gpus(inst: Instance) -> np.ndarray:
    if inst.elastic is not None:
        return inst.elastic.server_gpus
    return np.minimum(inst.capacity, 8)
