"""--out must be usable before any work: a file (or a path under one) was a
traceback after the whole simulation ran, and its results were lost."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from optsched.cli import app

runner = CliRunner()


@pytest.mark.parametrize("argv", [
    ["simulate", "--quiet"],
    ["compare", "--policies", "fifo", "--quiet"],
    ["sweep", "gavel", "--policies", "fifo", "--jobs", "5", "--loads", "1", "--quiet"],
])
@pytest.mark.parametrize("under", [False, True])
def test_an_out_that_is_a_file_is_refused_before_any_work(tmp_path, monkeypatch, argv, under):
    import optsched.sim as sim

    def no_run(*a, **k):  # the check must come first: running at all is the bug
        raise AssertionError("ran before checking --out")

    monkeypatch.setattr(sim, "simulate", no_run, raising=False)
    blocker = tmp_path / "results.csv"
    blocker.write_text("not a folder")
    out = blocker / "sub" if under else blocker
    res = runner.invoke(app, [*argv, "--out", str(out)])
    assert res.exit_code == 2, res.output
    msg = (res.stderr if res.stderr else res.output).strip()
    assert len(msg.splitlines()) == 1 and msg.startswith("error: --out:"), msg
