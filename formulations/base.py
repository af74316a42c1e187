"""What every fractional formulation shares: the Program a formulation returns
and the base constraints of DESIGN.md §4.

    X >= 0,   X[m, j] = 0 where job m cannot run on type j,
    Σ_j X[m, j] <= 1            (a job runs at most all of the time)
    Σ_m s_m X[m, j] <= W_j      (capacity of type j)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import cvxpy as cp
import numpy as np

from optsched.model import Instance


@dataclass
class Program:
    problem: cp.Problem
    fractions: cp.Expression  # (n, k) time fractions of each job alone on each type
    capacity: cp.Constraint | None  # its dual is the price of a GPU of each type
    share: Callable[[np.ndarray], np.ndarray]  # per-job fairness metric of an allocation
    objective: Callable[[float], float] = lambda v: v  # problem value -> reported objective
    effective_throughput: Callable[[np.ndarray], np.ndarray] | None = None
    info: dict = field(default_factory=dict)


def allocation_variable(inst: Instance) -> tuple[cp.Variable, list[cp.Constraint], cp.Constraint]:
    """X with the base constraints; returns (X, constraints, capacity constraint)."""
    X = cp.Variable((inst.n, inst.k), nonneg=True, name="X")
    capacity = inst.scale_factor @ X <= inst.capacity
    constraints = [
        cp.sum(X, axis=1) <= 1,
        X <= inst.available.astype(float),
        capacity,
    ]
    return X, constraints, capacity


def heterogeneity_agnostic(throughput: np.ndarray) -> np.ndarray:
    """Every type a job can run on counts as throughput 1 (LAS without heterogeneity)."""
    return (throughput > 0).astype(float)


def equal_share_throughput(inst: Instance, throughput: np.ndarray) -> np.ndarray:
    """thr_equal_m = Σ_j T[m, j] W_j / Σ_j' W_j' (Gavel's proportional share)."""
    return throughput @ inst.capacity / max(inst.capacity.sum(), 1e-12)


def fallback_allocation(inst: Instance) -> np.ndarray:
    """Equal share of every usable type, then each type's column scaled down to
    fit its capacity. Always feasible; used when a solver fails or times out."""
    X = inst.equal_share()
    demand = inst.scale_factor @ X
    scale = np.where(demand > inst.capacity, inst.capacity / np.maximum(demand, 1e-12), 1.0)
    return X * scale[None, :]
