"""Weighted hierarchical max-min fairness: fairness across tenants first, then
across the jobs of each tenant (Gavel's multi-level fairness).

Tenant e (``Job.entity``; jobs without one share the tenant "") has weight
ω_e (``Snapshot.entity_weights``, documented default 1.0 for a tenant not
listed). In each water-filling round (formulations.water_filling) an unfrozen
job m of tenant e gets the weight

    w_m^(r) = ω_e · w_m / Σ_{m' ∈ e, unfrozen} w_m',

so every tenant's weight is split among its jobs that can still grow: a
tenant with ten jobs gets as much as a tenant with one, and the share a
frozen job cannot use goes first to its own tenant's other jobs.
"""

from __future__ import annotations

import numpy as np

from optsched.formulations.base import at_minimum, no_packing
from optsched.formulations.max_min_fairness import normalized_throughput
from optsched.formulations.water_filling import check_water_fill_options, water_fill
from optsched.model import Allocation, Instance


def tenant_weights(inst: Instance):
    """The per-round weight function w^(r)(frozen) of the docstring."""
    names = [e or "" for e in inst.entity] if inst.entity else [""] * inst.n
    tenants, tenant_of = np.unique(np.array(names, dtype=object), return_inverse=True)
    omega = np.array([(inst.entity_weights or {}).get(e, 1.0) for e in tenants], dtype=float)

    def weights(frozen: np.ndarray) -> np.ndarray:
        live = np.where(frozen, 0.0, inst.weight)
        total = np.bincount(tenant_of, weights=live, minlength=len(tenants))
        return omega[tenant_of] * inst.weight / np.maximum(total[tenant_of], 1e-300)

    return weights


# What allocate() imports, loaded (and timed as import_seconds) before its timer: optsched/policy.py.
IMPORTS = ("optsched.solvers.lp", "clarabel", "highspy", "scipy.sparse")


def allocate(
    inst: Instance,
    policy: str = "max_min_fairness_hierarchical",
    solver: str = "auto",
    time_limit: float = 60.0,
    agnostic: bool = False,
    packing: bool = False,
    max_rounds: int | None = None,
    warm_levels: bool = True,
) -> Allocation:
    no_packing(policy, packing)
    max_rounds, warm_levels = check_water_fill_options(max_rounds, warm_levels)
    A0 = normalized_throughput(inst, agnostic) * inst.weight[:, None]
    return water_fill(inst, policy, A0, tenant_weights(inst), solver, time_limit, max_rounds, warm_levels)


def first_level(inst: Instance, X: np.ndarray, agnostic: bool = False) -> tuple[float, np.ndarray]:
    """The program's objective (its first water-filling level) for an allocation ``X`` of ``inst``:
    the least share of a job per unit of its first-round weight, and the jobs at it (within 1e-5).
    POP merges groups with it, since a group's own level counts only the tenant's jobs inside it."""
    share = (normalized_throughput(inst, agnostic) * inst.weight[:, None] * X).sum(axis=1)
    w = tenant_weights(inst)(np.zeros(inst.n, dtype=bool))
    live = w > 0
    if not live.any():
        return float("nan"), np.zeros(0, dtype=int)
    level, low = at_minimum(np.where(live, share / np.where(live, w, 1.0), np.inf))
    return level, np.flatnonzero(low)
