"""Command line: `optsched solve | schema | policies | simulate | compare | trace
| serve | run | sweep | report | bench`.

Thin commands over the library. Heavy libraries (cvxpy, jax, ortools) are
imported inside the commands that need them, so `optsched --help` and a plain
`optsched solve` stay fast. Exit codes: 0 success; 2 a user error — bad input
or a bad option value, printed as one line on stderr naming the field
(optsched.cli.common: OptschedError, unreadable files, usage errors, a
pydantic ValidationError from an option), never a traceback; 3 a solver
fallback under `solve --strict`. tests/test_fuzz_*.py hold every command to it.
"""

from __future__ import annotations

import logging
import typer

from optsched.cli import simulate as _simulate  # noqa: F401  (registers simulate, compare, trace)
from optsched.cli import serve as _serve  # noqa: F401  (registers serve)
from optsched.cli import solve as _solve  # noqa: F401  (registers solve, schema, policies)
from optsched.cli import run as _run  # noqa: F401  (registers run)
from optsched.cli import sweep as _sweep  # noqa: F401  (registers sweep)
from optsched.cli import report as _report  # noqa: F401  (registers report)
from optsched.cli import bench as _bench  # noqa: F401  (registers bench)
from optsched.cli import slurm as _slurm  # noqa: F401  (registers slurm)
from optsched.cli.common import app, console, err_console, user_errors
from optsched.cli.solve import example_snapshot_text

LOG_LEVELS = ("debug", "info", "warning", "error")


def _version(value: bool) -> None:
    if value:
        from optsched import __version__

        typer.echo(f"optsched {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    log_level: str = typer.Option(
        "warning", "--log-level", help="debug | info | warning | error (solver fallbacks and time limits are warnings)."
    ),
) -> None:
    """Optimization-based GPU cluster scheduling."""
    if log_level.lower() not in LOG_LEVELS:
        err_console.print(f"[bold red]error:[/] --log-level: unknown level {log_level!r} (choose from {', '.join(LOG_LEVELS)})")
        raise typer.Exit(2)
    logging.basicConfig(
        level=getattr(logging, log_level.upper()), format="%(levelname)s %(name)s: %(message)s", force=True
    )


def main() -> None:
    _one_blas_thread()
    app()


def _one_blas_thread() -> None:
    """Small, many numpy calls gain nothing from BLAS or OpenMP threads (numpy,
    scikit-learn's GBDT), which on a busy machine spin waiting for cores; a
    user's OPENBLAS/OMP/MKL_NUM_THREADS still wins."""
    import os

    if any(v in os.environ for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")):
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(1)


__all__ = ["app", "console", "err_console", "example_snapshot_text", "main", "user_errors"]
