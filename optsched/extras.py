"""Optional dependencies ("extras") and the one-line message a missing one gets.

``pip install optsched`` installs the solve path, the allocator and the client
(numpy, scipy, HiGHS, Clarabel, pydantic, typer, rich, httpx). Everything else
is an extra of pyproject.toml; this table says which extra brings which
top-level module, so a command or function that reaches a missing module says
what to install instead of showing a traceback:

    error: optsched serve needs the 'service' extra: pip install 'optsched[service]'

The CLI's root command (optsched.cli.common.OneLineErrors) turns any
ModuleNotFoundError of a module listed here into that line and exit code 2;
the Python API raises :class:`MissingExtra` (an ``OptschedError`` and a
``ModuleNotFoundError``) with the same text.
"""

from __future__ import annotations

import importlib

from optsched.model import OptschedError

# Top-level module -> the extra that installs it (pyproject.toml [project.optional-dependencies]).
EXTRA_OF_MODULE: dict[str, str] = {
    "pandas": "sim",
    "pyarrow": "sim",
    "matplotlib": "sim",
    "yaml": "sim",
    "jax": "goodput",
    "jaxlib": "goodput",
    "fastapi": "service",
    "starlette": "service",
    "uvicorn": "service",
    "cvxpy": "milp",
    "ortools": "milp",
    "ecos": "bench",
    "ray": "ray",
    "sklearn": "predict",
    "interpret": "predict",
}

# What each extra is for (docs/guide/install.md shows the same table).
EXTRAS: dict[str, str] = {
    "sim": "simulate, compare, trace, sweep, report, run (pandas, pyarrow, matplotlib, pyyaml)",
    "goodput": "refitting goodput models of elastic jobs from observations (JAX)",
    "service": "optsched serve (fastapi, uvicorn)",
    "milp": "hadar's MILP and the cpsat placement (cvxpy, OR-Tools)",
    "predict": "duration predictors of lucid and qssf (scikit-learn, interpret-core)",
    "ray": "the Ray executor of optsched run and optsched sweep",
    "bench": "optsched bench and its Gavel-style references (sim + milp + ECOS)",
}


class MissingExtra(OptschedError, ModuleNotFoundError):
    """An optional dependency is not installed; the message names the extra to install."""


def extra_of(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name is looked up by its top level)."""
    if not module:
        return None
    return EXTRA_OF_MODULE.get(module.split(".", 1)[0])


def message(what: str, extra: str) -> str:
    """``<what> needs the '<extra>' extra: pip install 'optsched[<extra>]'``."""
    return f"{what} needs the {extra!r} extra: pip install 'optsched[{extra}]'"


def missing(what: str, error: ModuleNotFoundError) -> MissingExtra | None:
    """A MissingExtra for ``error`` when its module belongs to an extra, else None."""
    extra = extra_of(error.name)
    if extra is None:
        return None
    out = MissingExtra(message(what, extra))
    out.name = error.name  # (ModuleNotFoundError's field; its __init__ is ValueError's here)
    return out


def require(module: str, what: str):
    """``import module``, or raise MissingExtra naming the extra that brings it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        err = missing(what, e)
        if err is None:
            raise
        raise err from None


def require_extra(extra: str, what: str) -> None:
    """Raise MissingExtra before any work when a module of ``extra`` (or of the extras it
    includes: bench = sim + milp + ECOS) is not installed, so a command fails on its first
    line rather than after printing a header. Looks modules up without importing them."""
    from importlib.util import find_spec

    wanted = {"bench": ("sim", "milp", "bench")}.get(extra, (extra,))
    for module, owner in EXTRA_OF_MODULE.items():
        if owner in wanted and module != "jaxlib" and find_spec(module) is None:
            raise MissingExtra(message(what, extra))


__all__ = ["EXTRAS", "EXTRA_OF_MODULE", "MissingExtra", "extra_of", "message", "missing", "require",
           "require_extra"]
