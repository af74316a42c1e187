"""The policy solve of a round lives in the scheduling core (optsched/core.py:
``compute_allocation``, ``ClassSolveCache``); this module keeps the old import path."""

from optsched.core import SYMMETRIC_POLICIES, ClassSolveCache, compute_allocation

__all__ = ["SYMMETRIC_POLICIES", "ClassSolveCache", "compute_allocation"]
