"""Sia (SOSP'23): heterogeneity-aware, goodput-optimized configurations (type,
GPUs) per job, as Sia's MILP (solved exactly with HiGHS, utilities not rounded).

    Ĝ[m, c] = G[m, c] / min_{c' feasible} G[m, c']          (normalized goodput ≥ 1)
    Ĝ[m, c] ← Ĝ[m, c] · f_m  for c ≠ current configuration   (restart factor, S per application;
                                                              jobs younger than S are not penalized)
    A[m, c] = max(Ĝ, 1e-4)^p,  p = −0.5

p < 0: minimize Σ A·y + λ_n (n − Σ y)  ⇔  maximize Σ y (λ_n − A)      (λ_n = 1.1: the
bonus for scheduling a queued job; a configuration with A > λ_n is never worth it);
p > 0: maximize Σ y (A + λ_n). Jobs weigh w_m. Same assignment constraints as every
configuration policy (formulations/configurations.py).
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
from optsched.model import Allocation, Instance
from optsched.checks import check_flag, check_number

ZERO_ALLOC_GAIN = 1e-4  # Sia's floor on normalized goodput


MAX_LAMBDA_N = 1e6


def utilities(inst: Instance, G: np.ndarray, current: np.ndarray, p: float, lambda_n: float,
              restart_penalty: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(U for the MILP, normalized goodput Ĝ after the restart factor)."""
    feasible = G > 0
    gmin = np.where(feasible, G, np.inf).min(axis=1, keepdims=True)
    Gn = np.where(feasible, G / gmin, 0.0)
    if restart_penalty:
        f = restart_factor(inst, grace=True)
        change = (np.arange(G.shape[1])[None, :] != current[:, None]) & (current[:, None] >= 0)
        Gn = np.where(change, Gn * f[:, None], Gn)
    A = np.maximum(Gn, ZERO_ALLOC_GAIN) ** p
    U = (lambda_n - A) if p < 0 else (A + lambda_n)
    return np.where(feasible, inst.weight[:, None] * U, 0.0), Gn


# What allocate() imports, loaded (and timed as import_seconds) before its timer: optsched/policy.py.
IMPORTS = ("optsched.solvers.lp", "highspy", "scipy.sparse")


def allocate(inst: Instance, policy: str = "sia", solver: str = "highs", time_limit: float = 60.0,
             p: float = -0.5, lambda_n: float = 1.1, restart_penalty: bool = True,
             force_fallback: bool = False, **_) -> Allocation:
    from optsched.formulations.pollux import check_p

    p = check_p(p, zero=False)
    # λ_n: the cost of leaving a job without GPUs (negative: leaving jobs out would pay). Sia uses
    # 1.1; past MAX_LAMBDA_N the utilities lose every other term to rounding (1e30 made HiGHS fail).
    lambda_n = check_number("lambda_n", lambda_n, 0.0, MAX_LAMBDA_N)
    restart_penalty = check_flag("restart_penalty", restart_penalty)
    force_fallback = check_flag("force_fallback", force_fallback)
    gm = goodput_matrix(inst)
    check_feasible(inst, gm.goodput)
    U, Gn = utilities(inst, gm.goodput, gm.current, p, lambda_n, restart_penalty)
    a = solve_assignment(U, gm.configs, inst.capacity, time_limit, solver, force_fallback=force_fallback,
                         start=gm.current)  # the running configurations: a warm start
    chosen = np.where(a.choice >= 0, Gn[np.arange(inst.n), np.maximum(a.choice, 0)], 0.0)
    # Reported objective: Sia's (minimized for p < 0) Σ A y + λ_n · (unscheduled jobs).
    on = a.choice >= 0
    A = np.maximum(chosen[on], ZERO_ALLOC_GAIN) ** p
    objective = float(A.sum() + lambda_n * (~on).sum()) if p < 0 else float(A.sum() - lambda_n * (~on).sum())
    from optsched.formulations.pollux import fair_share_goodput

    rel = np.where(a.choice >= 0, gm.goodput[np.arange(inst.n), np.maximum(a.choice, 0)] / fair_share_goodput(inst, gm), 0.0)
    return allocation_from_choice(inst, policy, gm, a, objective=objective, share=rel,
                                  extra={"normalized_goodput": chosen, "fairness_p": p, "lambda_n": lambda_n,
                                         "milp_value": a.objective})
