"""--help: boolean flags show no value placeholder, and every option says what it does."""

from __future__ import annotations

import pytest
import typer.main
from typer.testing import CliRunner

from optsched.cli import app

runner = CliRunner()


def commands(cmd=None, path=()):
    cmd = cmd or typer.main.get_command(app)
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from commands(sub, (*path, name))


ALL = [" ".join(p) for p, _ in commands()]


@pytest.mark.parametrize("command", ALL)
def test_no_bool_placeholder(command):
    res = runner.invoke(app, [*command.split(), "--help"])
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.output
    assert "--help" in res.output


def test_flags_still_show_their_help_and_defaults():
    out = runner.invoke(app, ["serve", "--help"]).output
    assert "--access-log" in out and "--no-access-log" in out and "Log every request" in out
    out = runner.invoke(app, ["solve", "--help"]).output
    assert "--json" in out and "Print the result as JSON." in out and "<float>" in out  # typed options keep theirs


def test_every_option_has_help():
    missing = [f"{' '.join(path)} {p.opts[0]}" for path, cmd in commands() for p in cmd.params
               if getattr(p, "param_type_name", "") == "option" and not p.help]
    assert not missing, missing
