"""`trace convert` to a format with durations (tiresias, philly) derives each job's
duration from its total steps as `trace generate` relates them (runtime alone on v100),
and says which option fixes it when it cannot."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from optsched.cli import app
from optsched.traces.io import read_trace
from optsched.traces.throughputs import read_throughputs, reference_rates

runner = CliRunner()


def ok(args):
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return res


def error_line(args) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


def test_convert_gives_back_the_generated_durations(tmp_path):
    """generate → gavel (durations dropped) → convert to tiresias = generate → tiresias."""
    gen = ["trace", "generate", "--jobs", "12", "--rate", "30", "--multi-gpu", "--seed", "3"]
    ok([*gen[:2], str(tmp_path / "g.trace"), *gen[2:]])
    ok([*gen[:2], str(tmp_path / "direct.csv"), *gen[2:], "--to", "tiresias"])
    ok(["trace", "convert", str(tmp_path / "g.trace"), str(tmp_path / "converted.csv"), "--to", "tiresias"])
    direct, converted = (pd.read_csv(tmp_path / f) for f in ("direct.csv", "converted.csv"))
    pd.testing.assert_frame_equal(direct, converted)


@pytest.mark.parametrize("to", ["tiresias", "philly"])
def test_convert_a_gavel_trace_with_its_table(peer_data, tmp_path, to):
    trace = peer_data / "gavel" / "traces" / "artifact_evaluation.trace"
    table_path = peer_data / "gavel" / "simulation_throughputs.json"
    out = tmp_path / f"out.{to}.csv"
    ok(["trace", "convert", str(trace), str(out), "--to", to, "--throughputs", str(table_path)])
    src, got = read_trace(trace), read_trace(out)
    rate, ref = reference_rates(read_throughputs(table_path), src.jobs["model"], src.jobs["scale_factor"])
    assert ref == "v100" and len(got) == len(src)
    expected = src.jobs["steps_total"].to_numpy() / rate
    assert np.allclose(got.jobs["duration"].to_numpy(), expected, atol=0.5)  # tiresias rounds to seconds


def test_convert_without_the_jobs_table_names_throughputs(peer_data, tmp_path):
    trace = peer_data / "gavel" / "traces" / "artifact_evaluation.trace"
    msg = error_line(["trace", "convert", str(trace), str(tmp_path / "o.csv"), "--to", "tiresias"])
    assert "is not in the throughput table" in msg and "pass --throughputs" in msg


def test_a_job_without_length_says_so(tmp_path):
    src = tmp_path / "w.csv"
    src.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,1,128\n")
    msg = error_line(["trace", "convert", str(src), str(tmp_path / "o.csv"), "--to", "philly"])
    assert msg == "error: philly writer: every job needs a duration; job 'a' has no length (a Pollux/Sia job runs " \
                  "to an epoch count)"


def test_writer_says_how_to_get_durations(tmp_path):
    from optsched.model import OptschedError
    from optsched.traces.generate import generate_gavel
    from optsched.traces.io import write_trace
    from optsched.traces.throughputs import default_throughputs

    tr = generate_gavel(default_throughputs(), 2, 30.0)
    tr = type(tr)(**{**tr.__dict__, "jobs": tr.jobs.assign(duration=np.nan)})
    with pytest.raises(OptschedError, match=r"--throughputs TABLE.*with_durations"):
        write_trace(tr, tmp_path / "o.csv", "tiresias")


@pytest.mark.parametrize("command", [["convert", "IN"], ["generate"]])
def test_unknown_target_format_names_to(tmp_path, command):
    src = tmp_path / "g.trace"
    ok(["trace", "generate", str(src), "--jobs", "2"])
    args = ["trace", command[0], *([str(src)] if len(command) > 1 else []), str(tmp_path / "o.csv"), "--to", "tiresia"]
    assert error_line(args).startswith("error: --to: unknown trace format 'tiresia'; did you mean 'tiresias'? "
                                       "(choose from gavel, tiresias")
