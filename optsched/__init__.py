"""optsched: optimization-based scheduling for deep-learning GPU clusters.

Public API (heavy dependencies load lazily):
    optsched.solve(snapshot, policy="max_min_fairness") -> Allocation
    optsched.parse_snapshot(json_or_dict) -> Snapshot
"""

from optsched.model import Allocation, Instance, OptschedError, Snapshot, parse_snapshot

__version__ = "0.1.0"


def solve(snapshot, policy: str = "max_min_fairness", solver: str = "auto", time_limit: float = 60.0, **options):
    from optsched.policy import solve as _solve

    return _solve(snapshot, policy=policy, solver=solver, time_limit=time_limit, **options)


def __getattr__(name):
    # Lazy so that `import optsched` stays light.
    if name == "Allocator":
        from optsched.allocator import Allocator

        return Allocator
    if name == "simulate":
        from optsched.sim import simulate

        return simulate
    raise AttributeError(name)


__all__ = ["Allocation", "Instance", "OptschedError", "Snapshot", "parse_snapshot", "solve", "__version__"]
