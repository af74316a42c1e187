"""What every command shares: the typer app, the consoles, and the rule that a
user error is one line on stderr and exit code 2 (never a traceback)."""

from __future__ import annotations

import functools

import typer
from rich.console import Console

from optsched.model import OptschedError

app = typer.Typer(add_completion=False, no_args_is_help=False, help="Optimization-based GPU cluster scheduling.")
console = Console()
err_console = Console(stderr=True)


def user_errors(fn):
    """Turn OptschedError (and unreadable files) into one line on stderr, exit 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except OptschedError as e:
            err_console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
            raise typer.Exit(2)
        except (FileNotFoundError, IsADirectoryError, PermissionError) as e:
            err_console.print(f"[bold red]error:[/] {e.strerror}: {e.filename}", highlight=False, soft_wrap=True)
            raise typer.Exit(2)

    return wrapper
