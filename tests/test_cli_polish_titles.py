"""Run titles name the trace as the user knows it: a file by its name, a generated
trace by its description (which may contain a slash: "8/h")."""

from __future__ import annotations

from typer.testing import CliRunner

from optsched.cli import app
from optsched.cli.simulate import _source
from optsched.traces.generate import default_trace, generate_gavel
from optsched.traces.io import write_trace
from optsched.traces.throughputs import default_throughputs

runner = CliRunner()


def test_generated_trace_keeps_its_description():
    tr = default_trace()
    assert "/" in tr.source  # "... at 8/h ...": the case that was cut to "h, seed 0"
    assert _source(tr) == tr.source == "gavel-style: 120 jobs at 8/h, seed 0"


def test_a_file_is_named_without_its_folder(tmp_path):
    path = tmp_path / "sub" / "tiny.trace"
    path.parent.mkdir()
    write_trace(generate_gavel(default_throughputs(), 3, 30.0, seed=1), path, "gavel")
    res = runner.invoke(app, ["simulate", str(path), "--quiet", "--policy", "fifo", "--cluster", "v100=4,p100=4,k80=4"])
    assert res.exit_code == 0, res.output
    assert "3 jobs from tiny.trace on 4 v100, 4 p100, 4 k80" in res.stdout
    assert str(tmp_path) not in res.stdout


def test_markup_in_a_file_name_prints_as_is(tmp_path):
    path = tmp_path / "[bold]x.trace"
    write_trace(generate_gavel(default_throughputs(), 2, 30.0, seed=1), path, "gavel")
    res = runner.invoke(app, ["simulate", str(path), "--quiet", "--policy", "fifo", "--cluster", "v100=4,p100=4,k80=4"])
    assert res.exit_code == 0, res.output
    assert "from [bold]x.trace on" in res.stdout
