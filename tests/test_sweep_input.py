"""Bad sweep files end in one line naming the field and exit code 2: a file that
is not UTF-8 (a UnicodeDecodeError traceback), ``[trace_options] sample = -3``
(a ValueError traceback from numpy), and values of the wrong type that were
converted silently (``seeds = [1.5]`` ran seed 1, ``[true]`` seed 1,
``loads = ["2"]`` load 2, ``jobs = "5"`` 5 jobs)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from optsched.cli import app
from optsched.model import OptschedError
from optsched.sweep import spec_from_dict

HEAD = 'trace = "gavel"\npolicies = ["fifo"]\ncluster = "v100=1,k80=1"\n'


def sweep_file(tmp_path, body: str | bytes, name: str = "s.toml"):
    p = tmp_path / name
    p.write_bytes(body if isinstance(body, bytes) else body.encode())
    return p


def run(tmp_path, *args):
    return CliRunner().invoke(app, ["sweep", *args, "--out", str(tmp_path / "out"), "--quiet"])


def one_error_line(res) -> str:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    assert lines[0].startswith("error: ")
    return lines[0][len("error: "):]


def test_a_sweep_file_that_is_not_utf8_is_one_line(tmp_path):
    f = sweep_file(tmp_path, HEAD.encode() + b"# caf\xe9 au lait\n")
    assert one_error_line(run(tmp_path, "--file", str(f))) == \
        f"sweep file {f}: not UTF-8 text (byte 0xe9 on line 4); save it as UTF-8"
    # A UTF-8 byte-order mark is not an error (some editors write one).
    bom = sweep_file(tmp_path, b"\xef\xbb\xbf" + (HEAD + "[trace_options]\njobs = 3\n").encode(), "bom.toml")
    res = run(tmp_path, "--file", str(bom))
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("body, message", [
    ("[trace_options]\nsample = -3\n", "trace_options.sample: must be >= 1, got -3"),
    ("[trace_options]\nsample = 2.5\n", "trace_options.sample: must be a whole number, got 2.5"),
    ('[trace_options]\njobs = "5"\n', "trace_options.jobs: must be a whole number, got '5'"),
    ("[trace_options]\njobs = true\n", "trace_options.jobs: must be a whole number, got true"),
    ("[trace_options]\nskip = -1\n", "trace_options.skip: must be >= 0, got -1"),
    ("[trace_options]\nlength_scale = 0\n", "trace_options.length_scale: must be positive, got 0"),
    ('[trace_options]\nmulti_gpu = "yes"\n', "trace_options.multi_gpu: must be true or false (or 1/0), got 'yes'"),
    ("[trace_options]\nformat = 3\n", "trace_options.format: must be text (a string), got 3"),
    ("seeds = [1.5]\n", "seeds[0]: must be a whole number, got 1.5"),
    ("seeds = [true]\n", "seeds[0]: must be a whole number, got true"),
    ('seeds = [0, "1"]\n', "seeds[1]: must be a whole number, got '1'"),
    ('loads = ["2"]\n', "loads[0]: must be a number, got '2'"),
    ("loads = [false]\n", "loads[0]: must be a number, got false"),
])
def test_a_sweep_file_value_of_the_wrong_type_or_range_names_its_field(tmp_path, body, message):
    f = sweep_file(tmp_path, HEAD + body)
    assert one_error_line(run(tmp_path, "--file", str(f))) == message
    assert not (tmp_path / "out" / "runs").exists()  # refused before any run


def test_sample_below_one_on_a_real_trace_file_is_refused_not_a_numpy_traceback(tmp_path):
    trace = tmp_path / "t.csv"
    gen = CliRunner().invoke(app, ["trace", "generate", str(trace), "--jobs", "6"])
    assert gen.exit_code == 0, gen.output
    f = sweep_file(tmp_path, f'trace = "{trace}"\npolicies = ["fifo"]\ncluster = "v100=2,p100=2,k80=2"\n'
                             "[trace_options]\nsample = -3\n")
    assert one_error_line(run(tmp_path, "--file", str(f))) == "trace_options.sample: must be >= 1, got -3"
    with pytest.raises(OptschedError, match=r"^trace_options\.sample: must be >= 1, got 0$"):
        spec_from_dict({"trace": str(trace), "policies": ["fifo"], "trace_options": {"sample": 0}})


def test_flags_are_read_as_numbers_and_named_when_they_are_not(tmp_path):
    assert one_error_line(run(tmp_path, "gavel", "--policies", "fifo", "--seeds", "0,1.5")) == \
        "--seeds: '1.5' is not a whole number"
    assert one_error_line(run(tmp_path, "gavel", "--policies", "fifo", "--loads", "2,x")) == \
        "--loads: 'x' is not a number"
    # Well-typed values keep their run ids: a file's [6] and the flag's "6" are the same run.
    a = spec_from_dict({"trace": "gavel", "policies": ["fifo"], "loads": [6], "seeds": [0, 1]}).runs()
    b = spec_from_dict({"trace": "gavel", "policies": ["fifo"], "loads": [6.0], "seeds": [0.0, 1]}).runs()
    assert [r["run_id"] for r in a] == [r["run_id"] for r in b]
    spec = spec_from_dict({"trace": "gavel", "policies": ["fifo"], "trace_options": {"jobs": 3, "multi_gpu": 0}})
    assert spec.trace_options == {"jobs": 3, "multi_gpu": False}
