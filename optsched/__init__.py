"""optsched: optimization-based scheduling for deep-learning GPU clusters.

The public API (``import optsched`` stays light: numpy and pydantic; the rest
loads on first use)::

    optsched.parse_snapshot(json_or_dict) -> Snapshot
    optsched.solve(snapshot, policy="max_min_fairness") -> Allocation
    optsched.Allocator(cluster).next_round(snapshot, allocation) -> Placement
    optsched.simulate(trace=None, cluster=None, policy=...) -> SimResult   # the 'sim' extra
    optsched.Session(config)                                               # a scheduling session, in process
    optsched.Client(url).solve(snapshot) -> Allocation                     # the same over HTTP
    optsched.policies() -> list of policy names

Submodules are attributes too (``optsched.policy.solve_instance``), imported
on first access. A feature whose optional dependency is missing raises
:class:`MissingExtra` naming the extra to install (``pip install 'optsched[sim]'``).
"""

from __future__ import annotations

import importlib
import os as _os
from typing import TYPE_CHECKING, Any, Callable

# A checkout keeps formulations/, solvers/ and traces/ beside this folder (pyproject's package-dir
# maps them to optsched.*). Python started in the checkout's root imports this folder, not the
# installed package, and then found no optsched.solvers (a traceback on the first solve): look
# beside it too. An installed package has them inside and skips this.
_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(__path__[0], "solvers")) and _os.path.isfile(
        _os.path.join(_checkout, "solvers", "block_lp.py")):
    __path__.append(_checkout)
del _checkout, _os

from optsched.extras import MissingExtra  # noqa: E402
from optsched.model import Allocation, Cluster, Instance, Job, OptschedError, Snapshot, parse_snapshot  # noqa: E402

if TYPE_CHECKING:  # what the lazy names are, for type checkers
    import pandas  # noqa: F401

    from optsched.allocator import Allocator, Placement
    from optsched.client import Client
    from optsched.service.session import Session
    from optsched.sim import SimResult
    from optsched.traces.trace import Trace

__version__ = "0.1.0"


def solve(
    snapshot: Snapshot | dict | str,
    policy: str = "max_min_fairness",
    solver: str = "auto",
    time_limit: float = 60.0,
    **options: Any,
) -> Allocation:
    """Solve one scheduling policy on a snapshot of the cluster and its jobs.

    ``snapshot``: a :class:`Snapshot`, a dict, or JSON text (``optsched schema``
    prints its JSON Schema). ``policy``: a name from :func:`policies`.
    ``solver``: ``auto`` | ``ipm`` | ``clarabel`` | ``highs`` | ``highs-simplex``.
    ``time_limit``: seconds for the solver (a fallback answers when it runs out).
    ``options``: the policy's own keywords (``packing=True``, ...).

    Returns an :class:`Allocation`: time fractions per job and GPU type
    (``fractions``), effective throughputs, the objective and an
    ``explanation`` (prices, bottlenecks, timings). Raises
    :class:`OptschedError`, one line naming the field, on bad input.
    """
    from optsched.policy import solve as _solve

    return _solve(snapshot, policy=policy, solver=solver, time_limit=time_limit, **options)


def policies() -> list[str]:
    """The names of the policies :func:`solve` accepts (built-in and registered by plugins)."""
    from optsched.policy import policy_names

    return [p for p in policy_names() if not p.startswith("_")]


def simulate(
    trace: Trace | str | None = None,
    cluster: Cluster | dict | str | None = None,
    policy: str = "max_min_fairness",
    throughputs: Any = None,
    progress_rate: Callable | None = None,
    on_round: Callable | None = None,
    apps: dict | None = None,
    **config: Any,
) -> SimResult:
    """Simulate ``policy`` on a trace, round by round (needs the 'sim' extra).

    ``trace``: a Trace, a path to a trace file, or None for the built-in example.
    ``cluster``: a :class:`Cluster`, ``{"v100": 36, ...}`` or ``"v100=36,p100=36,k80=36"``
    (default 36 of each of v100/p100/k80, or 16 servers × 4 GPUs for a Pollux/Sia
    workload). ``throughputs``: a ThroughputTable or a path to one. ``config``: the
    simulator's options (``round_length``, ``seed``, ``admission``, ...; see
    ``optsched simulate --help``). Returns a ``SimResult`` with ``jobs`` and
    ``rounds`` tables and a ``summary`` dict. Deterministic in ``seed``.
    """
    try:
        from optsched.sim import simulate as _simulate

        return _simulate(trace, cluster, policy, throughputs, progress_rate, on_round, apps, **config)
    except ModuleNotFoundError as e:  # pandas (sim), JAX for goodput refits (goodput), ...
        raise _missing("optsched.simulate", e) from None


# Lazy names: (module, attribute). Heavy or optional imports happen on first access.
_LAZY = {
    "Allocator": ("optsched.allocator", "Allocator"),
    "Placement": ("optsched.allocator", "Placement"),
    "Client": ("optsched.client", "Client"),
    "Session": ("optsched.service.session", "Session"),
    "SimResult": ("optsched.sim", "SimResult"),
}


def _missing(what: str, e: ModuleNotFoundError) -> ModuleNotFoundError:
    from optsched.extras import missing

    return missing(what, e) or e


def __getattr__(name: str) -> Any:
    """``optsched.Allocator``, ``optsched.policy`` (any submodule): imported on first access."""
    if name in _LAZY:
        module, attr = _LAZY[name]
        try:
            value = getattr(importlib.import_module(module), attr)
        except ModuleNotFoundError as e:
            raise _missing(f"optsched.{name}", e) from None
    elif not name.startswith("_") and _is_submodule(name):
        try:
            value = importlib.import_module(f"optsched.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"optsched.{name}":
                raise AttributeError(f"module 'optsched' has no attribute {name!r}") from None
            raise _missing(f"optsched.{name}", e) from None
    else:
        raise AttributeError(f"module 'optsched' has no attribute {name!r}")
    globals()[name] = value  # (next access is a plain attribute)
    return value


def _is_submodule(name: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(f"optsched.{name}") is not None
    except (ImportError, ValueError):
        return False


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Allocation",
    "Allocator",
    "Client",
    "Cluster",
    "Instance",
    "Job",
    "MissingExtra",
    "OptschedError",
    "Placement",
    "Session",
    "Snapshot",
    "__version__",
    "parse_snapshot",
    "policies",
    "simulate",
    "solve",
]
