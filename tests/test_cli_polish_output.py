"""Output that is not a terminal: whole lines and table cells (no wrapping at 80
columns), and a reader that goes away (`| head -1`) ends the command quietly with
status 141, as git and coreutils do (killed by SIGPIPE)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from optsched.cli.common import BROKEN_PIPE_EXIT, NOT_A_TERMINAL_WIDTH, make_console

EXE = Path(sys.executable).with_name("optsched")
ROOT = Path(__file__).resolve().parents[1]


def run_piped(*args: str, close_stdout: bool = False) -> subprocess.CompletedProcess | subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    cmd = [str(EXE), *args] if EXE.exists() else [sys.executable, "-m", "optsched.cli", *args]
    if not close_stdout:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    proc.stdout.close()  # the reader is gone before the command writes a byte
    proc.wait(timeout=300)
    return proc


def test_console_is_wide_when_not_a_terminal(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert make_console().width == NOT_A_TERMINAL_WIDTH  # (pytest's stdout is not a terminal)
    monkeypatch.setenv("COLUMNS", "100")  # an explicit width still wins
    assert make_console().width == 100


def test_solve_footer_is_one_line_when_piped():
    res = run_piped("solve")
    assert res.returncode == 0, res.stderr
    footer = [line for line in res.stdout.splitlines() if line.startswith("GPUs used:")]
    assert len(footer) == 1 and "price per GPU:" in footer[0] and footer[0].rstrip().endswith(tuple("0123456789"))
    assert "k80" in footer[0].split("price per GPU:")[1]


def test_wide_table_labels_are_not_cut(capsys, monkeypatch):
    """compare's table with long policy names, printed by the CLI's console."""
    import optsched.cli.simulate as simulate
    from optsched.cli.simulate import _print_summary

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(simulate, "console", make_console())  # (as the CLI makes it for captured output)

    names = ["max_min_fairness_water_filling_agnostic", "finish_time_fairness_agnostic", "proportional_fairness"]
    summary = {"jobs_completed": 3, "avg_jct": 7200.0, "avg_responsiveness": 30.0, "makespan": 9000.0}
    _print_summary({n: dict(summary) for n in names}, "3 jobs from a-rather-long-trace-file-name.trace on 36 v100")
    out = capsys.readouterr().out
    assert "…" not in out
    for text in (*names, "avg responsiveness", "3 jobs from a-rather-long-trace-file-name.trace on 36 v100"):
        assert text in out


@pytest.mark.parametrize("args", [["solve", "examples/snapshot.json"],  # rich's console
                                  ["solve", "examples/snapshot.json", "--json"],  # typer.echo
                                  ["schema"]])
def test_broken_pipe_exits_quietly(args):
    proc = run_piped(*args, close_stdout=True)
    assert proc.returncode == BROKEN_PIPE_EXIT == 141
    assert proc.stderr.read() == b""


def test_a_reader_leaving_mid_output_gives_141_not_a_silently_cut_document(tmp_path):
    """`solve big.json --json | head -1`: the reader takes a first chunk and leaves while the
    document (~500 KB, far over a pipe's buffer) is being written. sys.stdout's single large
    write was cut short without an error (exit 0, truncated JSON); every byte is now checked."""
    from optsched.bench import instances

    big = tmp_path / "big.json"
    big.write_bytes(instances.snapshot_json(instances.rigid(3000, 3, 0)))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    cmd = [str(EXE), "solve", str(big), "--json"] if EXE.exists() else [sys.executable, "-m", "optsched.cli", "solve", str(big), "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    assert proc.stdout.readline() == b"{\n"
    proc.stdout.close()
    proc.wait(timeout=300)
    assert proc.returncode == BROKEN_PIPE_EXIT and proc.stderr.read() == b""
