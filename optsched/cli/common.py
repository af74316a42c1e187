"""What every command shares: the typer app, the consoles, and the rule that a
user error is one line on stderr and exit code 2 (never a traceback)."""

from __future__ import annotations

import functools
import sys

import typer
from rich.console import Console
from typer._click import exceptions as _click_errors  # typer vendors click: its exceptions, not click's
from typer.core import TyperGroup
from typer.exceptions import Abort as _Abort

from pydantic import ValidationError

from optsched.model import OptschedError

console = Console()
err_console = Console(stderr=True)


class OneLineErrors(TyperGroup):
    """The root command: a usage error (unknown option, a value of the wrong
    type) is one line on stderr naming the option, exit code 2, like every
    other user error; `--help` still shows the full usage."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _click_errors.NoArgsIsHelpError as e:  # `optsched trace`: the group's help, as before
            typer.echo(e.ctx.get_help() if e.ctx else str(e), err=True)
            sys.exit(e.exit_code)
        except _click_errors.ClickException as e:  # UsageError, BadParameter, NoSuchOption, ...
            err_console.print(f"[bold red]error:[/] {_one_line(e.format_message())}", highlight=False, soft_wrap=True)
            sys.exit(e.exit_code)
        except _Abort:
            err_console.print("[bold red]error:[/] aborted", highlight=False, soft_wrap=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(cls=OneLineErrors, add_completion=False, no_args_is_help=False,
                  help="Optimization-based GPU cluster scheduling.")


def user_errors(fn):
    """Turn OptschedError (and unreadable files) into one line on stderr, exit 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except OptschedError as e:
            err_console.print(f"[bold red]error:[/] {_one_line(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2)
        except ValidationError as e:  # a typed object built from options (e.g. a Cluster from --cluster)
            err_console.print(f"[bold red]error:[/] {_validation_line(e)}", highlight=False, soft_wrap=True, markup=True)
            raise typer.Exit(2)
        except (FileNotFoundError, IsADirectoryError, PermissionError) as e:
            err_console.print(f"[bold red]error:[/] {_one_line(f'{e.strerror}: {e.filename}')}", highlight=False,
                              soft_wrap=True)
            raise typer.Exit(2)

    return wrapper


def _validation_line(err: ValidationError) -> str:
    """One line naming the field: 'invalid cluster: gpus: ...'."""
    from rich.markup import escape

    from optsched.model import _format_validation_error

    line = _format_validation_error(err).replace("invalid snapshot: ", f"invalid {err.title.lower()}: ", 1)
    return escape(" ".join(line.split()))


def _one_line(msg: str) -> str:
    """A message as one line of literal text (no rich markup inside it: a job id like '[/]' prints as is)."""
    from rich.markup import escape

    return escape(" ".join(msg.split()))
