"""What every command shares: the typer app, the consoles, and the rule that a
user error is one line on stderr and exit code 2 (never a traceback)."""

from __future__ import annotations

import functools
import os
import re
import sys

import typer
from rich.console import Console
from typer._click import exceptions as _click_errors  # typer vendors click: its exceptions, not click's
from typer.core import TyperGroup
from typer.exceptions import Abort as _Abort

from pydantic import ValidationError

from optsched.model import OptschedError

# A console whose output is piped or redirected: tables and lines as wide as their
# content (a script or a file wants whole rows, not wrapping at 80 columns).
NOT_A_TERMINAL_WIDTH = 10_000
# What git and coreutils report when the reader of their output goes away
# (`optsched solve | head -1`): killed by SIGPIPE, status 128 + 13, no message.
BROKEN_PIPE_EXIT = 141


def exit_on_broken_pipe():
    """End quietly with BROKEN_PIPE_EXIT; stdout is pointed at /dev/null first, so
    the interpreter's final flush cannot raise a second BrokenPipeError."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout without a file descriptor (a test runner's buffer)
        pass
    raise SystemExit(BROKEN_PIPE_EXIT)


def write_out(text: str) -> None:
    """``text`` and a newline on stdout, every byte or exit BROKEN_PIPE_EXIT. A large
    single write to a pipe whose reader leaves (``--json | head -1``) is cut short
    without an error through sys.stdout (the kernel takes part of it, then the rest
    is dropped), so the bytes go through os.write until all are taken."""
    data = (text + "\n").encode()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a test runner's buffer: no descriptor
        typer.echo(text)
        return
    try:
        sys.stdout.flush()
        view, done = memoryview(data), 0
        while done < len(data):
            done += os.write(fd, view[done:])
    except BrokenPipeError:
        exit_on_broken_pipe()


class _Console(Console):
    def on_broken_pipe(self) -> None:  # rich's own exits with 1, like a failure
        exit_on_broken_pipe()


def make_console(stderr: bool = False) -> Console:
    """A terminal's console as rich sizes it; otherwise a wide one (an explicit
    COLUMNS still wins)."""
    c = _Console(stderr=stderr)
    if c.is_terminal or "COLUMNS" in os.environ:
        return c
    return _Console(stderr=stderr, width=NOT_A_TERMINAL_WIDTH)


console = make_console()
err_console = make_console(stderr=True)


def _plain_flags(command) -> None:
    """Boolean flags take no value: no ``<bool>`` placeholder in --help (typer
    shows the type of every option), for every command and subcommand, --help included."""
    for sub in getattr(command, "commands", {}).values():
        _plain_flags(sub)
    for param in getattr(command, "params", ()):
        _no_placeholder(param)
    make_help_option = command.get_help_option  # (made on first use: it depends on the context)
    command.get_help_option = lambda ctx: _no_placeholder(make_help_option(ctx))


def _no_placeholder(param):
    if getattr(param, "is_bool_flag", False) and param.metavar is None:
        param.metavar = ""
    return param


class OneLineErrors(TyperGroup):
    """The root command: a usage error (unknown option, a value of the wrong
    type) is one line on stderr naming the option, exit code 2, like every
    other user error; `--help` still shows the full usage."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _plain_flags(self)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # typer.echo's output (rich's: _Console.on_broken_pipe)
            exit_on_broken_pipe()
        except ModuleNotFoundError as e:  # an optional dependency: name the extra that installs it
            from optsched.extras import missing

            command = " ".join(["optsched", *([ctx.invoked_subcommand] if ctx.invoked_subcommand else [])])
            err = missing(command, e)
            if err is None:
                raise
            if ctx.invoked_subcommand == "bench":  # its cases need several extras: the one that brings them all
                from optsched.extras import message

                err = message(command, "bench")
            err_console.print(f"[bold red]error:[/] {_one_line(str(err))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        if not (sys.argv[1:] if args is None else args):  # bare `optsched`: the help, not "Missing command."
            args = ["--help"]
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _click_errors.NoArgsIsHelpError as e:  # `optsched trace`: the group's help, as before
            typer.echo(e.ctx.get_help() if e.ctx else str(e), err=True)
            sys.exit(e.exit_code)
        except _click_errors.ClickException as e:  # UsageError, BadParameter, NoSuchOption, ...
            msg = e.format_message()
            if isinstance(e, _click_errors.NoSuchOption) and e.possibilities:  # click's "(Possible options: ...)"
                from optsched.suggest import did_you_mean

                best = did_you_mean(e.option_name, e.possibilities) or sorted(e.possibilities)[0]
                msg = f"No such option: {e.option_name}; did you mean {best}?"
            own = {o for p in self.params for o in p.opts}
            if isinstance(e, _click_errors.NoSuchOption) and e.option_name in own and e.ctx is not None:
                command = e.ctx.command_path.split(" ", 1)[-1]  # (without the program's name: `trace generate`)
                msg = (f"{e.option_name} is an option of optsched itself: put it before the command "
                       f"(optsched {e.option_name} ... {command} ...)")
            err_console.print(f"[bold red]error:[/] {_one_line(msg)}", highlight=False, soft_wrap=True)
            sys.exit(e.exit_code)
        except _Abort:
            err_console.print("[bold red]error:[/] aborted", highlight=False, soft_wrap=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(cls=OneLineErrors, add_completion=False, no_args_is_help=False,
                  help="Optimization-based GPU cluster scheduling.")


def user_errors(fn=None, *, aliases: dict[str, str] | None = None):
    """Turn OptschedError (and unreadable files) into one line on stderr, exit 2.

    The library names a value by its keyword (``queue: unknown ...``); a message
    that starts with the keyword of one of the command's options is shown with
    the option's flag instead (``--queue: ...``). ``aliases`` renames flags the
    library uses that this command spells differently ({"--policy": "--policies"})."""
    if fn is None:
        return functools.partial(user_errors, aliases=aliases)
    names = {**option_flags(fn), **(aliases or {})}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except OptschedError as e:
            from optsched.suggest import with_suggestion

            msg = with_suggestion(as_flags(str(e), names))
            err_console.print(f"[bold red]error:[/] {_one_line(msg)}", highlight=False, soft_wrap=True)
            raise typer.Exit(2)
        except ValidationError as e:  # a typed object built from options (e.g. a Cluster from --cluster)
            err_console.print(f"[bold red]error:[/] {_validation_line(e)}", highlight=False, soft_wrap=True, markup=True)
            raise typer.Exit(2)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, FileExistsError, PermissionError) as e:
            where = _path_argument(e.filename, kwargs, names)
            what = (e.strerror or type(e).__name__)
            line = f"{where} {e.filename}: {what[:1].lower()}{what[1:]}" if where else f"{what}: {e.filename}"
            err_console.print(f"[bold red]error:[/] {_one_line(line)}", highlight=False, soft_wrap=True)
            raise typer.Exit(2)

    return wrapper


def _path_argument(filename, kwargs: dict, names: dict[str, str]) -> str | None:
    """The flag (or argument name) whose value is ``filename``, to name it in the message."""
    if filename is None:
        return None
    for key, value in kwargs.items():
        if isinstance(value, (str, os.PathLike)) and os.fspath(value) == os.fspath(filename):
            return names.get(key, key)
    return None


def option_flags(fn) -> dict[str, str]:
    """{keyword: flag} of a command function's options, e.g. {"type_order": "--type-order"}."""
    import inspect

    from typer.models import OptionInfo

    out = {}
    for name, p in inspect.signature(fn).parameters.items():
        info = p.default
        if isinstance(info, OptionInfo):
            decls = [d for part in (info.param_decls or ()) for d in part.split("/") if d.startswith("--")]
            out[name] = decls[0] if decls else "--" + name.replace("_", "-")
    return out


_LEADING_NAME = re.compile(r"^(--?[A-Za-z][\w-]*|[A-Za-z_]\w*):")


def as_flags(msg: str, names: dict[str, str]) -> str:
    """``msg`` with its leading ``name:`` replaced by the command's flag for it, if any."""
    m = _LEADING_NAME.match(msg)
    if m and m.group(1) in names:
        return names[m.group(1)] + msg[m.end(1):]
    return msg


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


def output_file(path, flag: str):
    """Refuse, before any work, an output file that could not be written at the end:
    a folder, or a file in a folder that does not exist."""
    from pathlib import Path

    if path is None:
        return None
    path = Path(path)
    if path.is_dir():
        raise OptschedError(f"{flag}: {path} is a folder, not a file")
    if not path.parent.is_dir():
        raise OptschedError(f"{flag}: folder {path.parent} does not exist")
    return path


def output_folder(path, flag: str = "--out"):
    """Create the output folder before any work (a run's results must not be
    lost to a bad --out at the end): a one-line error if it is a file, lies
    under a file, or cannot be created."""
    from pathlib import Path

    if path is None:
        return None
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OptschedError(f"{flag}: {path} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OptschedError(f"{flag}: cannot create folder {path} ({e.strerror})") from None
    return path
