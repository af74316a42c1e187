"""Fuzz: corrupted traces of every format (Gavel 7/10 fields, Tiresias, Pollux/Sia,
Philly; plain and .gz) through `optsched trace describe|convert` and
`optsched simulate` (in-process CliRunner), plus the readers called directly.

Every input ends in exit 0 or 2 with one line on stderr naming the row/field:
no traceback, no bare exit, no NaN/Infinity in --json output, no hang (numbers
are validated against the documented limits in optsched.traces.trace).
Bounded in the default profile; OPTSCHED_HYPOTHESIS_PROFILE=explore for fresh cases.
"""

from __future__ import annotations

import gzip
import os
import re
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from optsched.model import OptschedError
from optsched.traces.io import read_trace
from tests.test_fuzz_snapshot import HANG_SECONDS, invoke

EXPLORE = os.environ.get("OPTSCHED_HYPOTHESIS_PROFILE") == "explore"
EXAMPLES = int(os.environ.get("FUZZ_EXPLORE", "1500")) if EXPLORE else 40
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))

MODELS = ("ResNet-50 (batch size 128)", "Transformer (batch size 64)", "LSTM-LM (batch size 40)")

BASE = {
    "gavel10": "\n".join(
        f"{MODELS[i % 3]}\tcmd\t.\t--num_steps\t1\t{500 * (i + 1)}\t{[1, 2, 1, 4][i % 4]}\t1\t-1\t{60 * i}" for i in range(4)
    ) + "\n",
    "gavel7": "\n".join(
        f"{MODELS[i % 3]}\tcmd\t--num_steps\t1\t{500 * (i + 1)}\t{60 * i}\t{[1, 2, 1, 4][i % 4]}" for i in range(4)
    ) + "\n",
    "tiresias": "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
    + "".join(f"{i},{[1, 2, 1, 4][i % 4]},{30 * i},{600 + i},vgg19,{100 + 20 * i},30\n" for i in range(4)),
    "pollux": "name,time,application,num_replicas,batch_size\n"
    + "".join(f"cifar10-{i},{10 * i},cifar10,{1 + i % 2},128\n" for i in range(3)),
    "philly": "timestamp,duration,num_gpus,gpu_time,cluster\n"
    + "".join(f"2017-10-09 0{i}:01:55,{60.0 * (i + 1)},{[1, 2, 1, 4][i % 4]},{60.0 * (i + 1)},c1\n" for i in range(4)),
}
SUFFIX = {"gavel10": ".trace", "gavel7": ".trace", "tiresias": ".csv", "pollux": ".csv", "philly": ".csv"}

BAD_CELLS = ["", " ", "nan", "NaN", "inf", "-inf", "1e999", "-1", "0", "0.5", "1e308", "9223372036854775808",
             str(10**20), "100001", "abc", "\ud800".encode("utf-8", "surrogatepass").decode("latin-1"),
             "2017-13-45 99:99:99", "2017-10-09T07:01:55+05:00", "1677-01-01", "9999-12-31 23:59:59",
             '"', "a,b", "\t", "é", "1e10", "4.0"]


@st.composite
def corrupted_trace(draw) -> tuple[str, bytes, str]:
    kind = draw(st.sampled_from(sorted(BASE)))
    text = BASE[kind]
    lines = text.splitlines()
    sep = "\t" if kind.startswith("gavel") else ","
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["cell", "cell", "cell", "drop_line", "dup_line", "header_only", "extra_cell", "blank"]))
        if op == "cell" and lines:
            i = draw(st.integers(0, len(lines) - 1))
            cells = lines[i].split(sep)
            c = draw(st.integers(0, len(cells) - 1))
            cells[c] = draw(st.sampled_from(BAD_CELLS) | st.text(max_size=5))
            lines[i] = sep.join(cells)
        elif op == "drop_line" and lines:
            del lines[draw(st.integers(0, len(lines) - 1))]
        elif op == "dup_line" and lines:
            lines.append(lines[draw(st.integers(0, len(lines) - 1))])
        elif op == "header_only":
            lines = lines[:1]
        elif op == "extra_cell" and lines:
            i = draw(st.integers(0, len(lines) - 1))
            lines[i] += sep + "x"
        elif op == "blank":
            lines.insert(draw(st.integers(0, len(lines))), "")
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    byte_op = draw(st.sampled_from(["none", "none", "truncate", "garbage", "gzip", "gzip_truncated", "bom", "nul"]))
    suffix = SUFFIX[kind]
    if byte_op == "truncate" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif byte_op == "garbage":
        pos = draw(st.integers(0, len(data)))
        data = data[:pos] + draw(st.sampled_from([b"\xff\xfe", b"\x80", b"\xc3", b"\xed\xa0\x80"])) + data[pos:]
    elif byte_op in ("gzip", "gzip_truncated"):
        data = gzip.compress(data)
        suffix += ".gz"
        if byte_op == "gzip_truncated":
            data = data[: draw(st.integers(0, len(data) - 1))]
    elif byte_op == "bom":
        data = b"\xef\xbb\xbf" + data
    elif byte_op == "nul":
        data = data.replace(b",", b"\x00", 1)
    return kind, data, suffix


CLUSTER = ["--cluster", "v100=4,p100=4,k80=4"]


def command_for(kind: str, path: Path, out: Path, choice: int) -> tuple[list[str], bool]:
    if choice == 0:
        return ["trace", "describe", str(path), "--json"], True
    if choice == 1:
        to = ["gavel", "tiresias", "pollux", "philly"][hash(kind) % 4]
        return ["trace", "convert", str(path), str(out / f"converted.{to}"), "--to", to], False
    # simulate: elastic (pollux) workloads fit JAX models, so they get the small default servers
    extra = [] if kind == "pollux" else CLUSTER
    return ["simulate", str(path), "--json", "--quiet", *extra], True


def run_trace(kind, data, suffix, choice):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"t{suffix}"
        path.write_bytes(data)
        args, as_json = command_for(kind, path, Path(d), choice)
        # an elastic simulation's first run in a process imports JAX and compiles its fit: slow, not a hang
        return invoke(args, as_json=as_json, hang_seconds=600.0 if kind == "pollux" and choice == 2 else HANG_SECONDS)


# Found failing: the list (truncated .gz, garbled Philly timestamp, bad Pollux
# time in simulate, header-only workload) and this suite's finds.
@example(trace=("philly", gzip.compress(BASE["philly"].encode())[:40], ".csv.gz"), choice=0)
@example(trace=("philly", gzip.compress(BASE["philly"].encode())[:40], ".csv.gz"), choice=2)
@example(trace=("philly", BASE["philly"].replace("2017-10-09 01:01:55", "2017-10-09T01:01:55+05:00").encode(), ".csv"), choice=0)
@example(trace=("philly", BASE["philly"].replace("2017-10-09 01:01:55", "2017-1x-09 01:0").encode(), ".csv"), choice=2)
@example(trace=("pollux", BASE["pollux"].replace(",10,", ",1e999,").encode(), ".csv"), choice=2)
@example(trace=("pollux", BASE["pollux"].replace(",10,", ",abc,").encode(), ".csv"), choice=2)
@example(trace=("pollux", BASE["pollux"].splitlines()[0].encode() + b"\n", ".csv"), choice=2)
@example(trace=("tiresias", BASE["tiresias"].encode()[:-30] + b"\xff\n", ".csv"), choice=2)
@example(trace=("gavel10", BASE["gavel10"].replace("\t60\n", "\tinf\n").encode(), ".trace"), choice=2)
@example(trace=("tiresias", BASE["tiresias"].replace(",120,", ",1e300,").encode(), ".csv"), choice=2)
@FUZZ
@given(trace=corrupted_trace(), choice=st.sampled_from([0, 0, 1, 2]))
def test_fuzz_trace_cli(trace, choice):
    kind, data, suffix = trace
    if kind == "pollux" and choice == 2 and not EXPLORE:
        choice = 0  # elastic simulation fits JAX models: seconds per case; the pinned examples cover it
    run_trace(kind, data, suffix, choice)


@example(trace=("gavel10", ('"' + BASE["gavel10"].replace("\t-1\t0\n", '\t-1\t0\tx"\n', 1)).encode(), ".trace"),
         fmt="tiresias")  # a quoted header spanning lines: the message must stay one line
@FUZZ
@given(trace=corrupted_trace(), fmt=st.sampled_from([None, "gavel", "tiresias", "pollux", "philly"]))
def test_fuzz_trace_readers(trace, fmt):
    """Any reader on any file: a Trace or one-line OptschedError (no other exception)."""
    kind, data, suffix = trace
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"t{suffix}"
        path.write_bytes(data)
        t0 = time.perf_counter()
        try:
            tr = read_trace(path, fmt)
            tr.describe()
            assert len(tr) > 0
        except OptschedError as e:
            assert str(e) and "\n" not in str(e), repr(e)
        assert time.perf_counter() - t0 < HANG_SECONDS


def test_convert_warns_or_refuses_what_the_target_cannot_carry(tmp_path, peer_data):
    """Tiresias → Gavel warns (unknown job types, durations dropped); Gavel → Pollux warns
    (no application, no batch size); Gavel → Tiresias derives durations from the throughput
    table, and refuses job types the table lacks, naming --throughputs; a .parquet output is
    refused, and a .gz one round-trips."""
    from typer.testing import CliRunner

    from optsched.cli import app

    r = CliRunner()
    res = r.invoke(app, ["trace", "convert", str(peer_data / "tiresias" / "60_job.csv"), str(tmp_path / "g.trace"),
                         "--to", "gavel"])
    assert res.exit_code == 0 and "not in the default throughput table" in res.stderr, res.stderr
    gen = tmp_path / "gen.trace"
    assert r.invoke(app, ["trace", "generate", str(gen), "--jobs", "5"]).exit_code == 0
    res = r.invoke(app, ["trace", "convert", str(gen), str(tmp_path / "p.csv"), "--to", "pollux"])
    assert res.exit_code == 0 and "not profiled applications" in res.stderr and "no batch sizes" in res.stderr
    res = invoke(["trace", "convert", str(gen), str(tmp_path / "t.csv"), "--to", "tiresias"])
    assert res.exit_code == 0 and read_trace(tmp_path / "t.csv").jobs["duration"].gt(0).all()
    res = invoke(["trace", "convert", str(tmp_path / "g.trace"), str(tmp_path / "t2.csv"), "--to", "tiresias"])
    assert res.exit_code == 2 and "--throughputs" in res.stderr
    res = invoke(["trace", "generate", str(tmp_path / "x.parquet"), "--jobs", "5"])
    assert res.exit_code == 2 and "parquet" in res.stderr and not (tmp_path / "x.parquet").exists()
    res = invoke(["trace", "generate", str(tmp_path / "x.trace.gz"), "--jobs", "5"])
    assert res.exit_code == 0
    assert len(read_trace(tmp_path / "x.trace.gz")) == 5


def test_generate_from_a_given_table_does_not_warn_about_the_default_one(tmp_path, peer_data):
    """`trace generate --throughputs T` draws job types from T: warning that they are not in
    the built-in table (as it did) reads like an error; without --throughputs, nothing to warn."""
    from typer.testing import CliRunner

    from optsched.cli import app

    table = peer_data / "gavel" / "simulation_throughputs.json"
    r = CliRunner()
    res = r.invoke(app, ["trace", "generate", str(tmp_path / "g.trace"), "--jobs", "40", "--rate", "30",
                         "--throughputs", str(table)])
    assert res.exit_code == 0 and "writer" not in res.stderr, res.stderr
    res = r.invoke(app, ["trace", "generate", str(tmp_path / "d.trace"), "--jobs", "40"])
    assert res.exit_code == 0 and "writer" not in res.stderr, res.stderr


@pytest.mark.parametrize("fmt,header,row", [
    ("tiresias", "job_id,num_gpu,submit_time,iterations,model_name,duration,interval,duration",
     "0,1,0,100,vgg19,100,30,5000"),
    ("pollux", "name,time,application,num_replicas,batch_size,time", "j0,0,cifar10,1,128,50"),
])
def test_a_repeated_column_is_refused_not_read_first_copy_wins(tmp_path, fmt, header, row):
    """pandas renames a repeated header cell ("duration.1"), so the first copy silently won."""
    path = tmp_path / "t.csv"
    path.write_text(f"{header}\n{row}\n")
    with pytest.raises(OptschedError, match=r"duplicate column '(duration|time)' in the header"):
        read_trace(path, fmt)


@pytest.mark.parametrize("stamp", ["now", "today", "12:00", "Oct 9", "2017", "-0", "1 Jan"])
def test_philly_timestamps_need_a_calendar_date(tmp_path, stamp):
    """pandas reads these against the wall clock (the same trace gave another JCT on every run);
    they are refused, naming the row that holds them."""
    path = tmp_path / "p.csv"
    path.write_text(BASE["philly"].replace("2017-10-09 01:01:55", stamp))
    row = 3  # the second data row (the header is row 1)
    with pytest.raises(OptschedError, match=rf"row {row}: timestamp '{re.escape(stamp)}' is not a date-time"):
        read_trace(path)


@pytest.mark.parametrize("iterations, duration", [("1e-300", "1e10"), ("100", "1e-20")])
def test_trace_rates_outside_the_snapshot_range_are_refused(tmp_path, iterations, duration):
    """1e-300 steps over 1e10 s finished in 1 s (the rate underflowed); 1e-20 s was floored to 1e-12 s."""
    from optsched.model import Cluster
    from optsched.sim.jobs import resolve_jobs

    path = tmp_path / "t.csv"
    path.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                    f"a,1,0,{iterations},m,{duration},0\n")
    with pytest.raises(OptschedError, match=r"row 2: iterations / duration = .* steps/s, outside 1e-12 to 1e\+15"):
        resolve_jobs(read_trace(path), Cluster(gpus={"v100": 1}))


def test_philly_rows_may_mix_iso_forms_and_invalid_times_are_refused(tmp_path):
    """pandas took the first row's format and turned later forms into NaT (refused); 07:01:61
    after a valid row was read as 07:02:01."""
    path = tmp_path / "p.csv"
    head = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,a\n"
    for stamp, arrival in (("2017-10-09 07:11", 545.0), ("2017-10-10", 61_085.0),
                           ("2017-10-09T07:05:00", 185.0), ("2017-10-09 07:01:55.5", 0.5)):
        path.write_text(head + f"{stamp},600.0,1,600.0,a\n")
        assert read_trace(path).jobs["arrival_time"].tolist() == [0.0, pytest.approx(arrival)], stamp
    for stamp in ("2017-10-09 07:01:61", "2017-02-30 01:00"):
        path.write_text(head + f"{stamp},600.0,1,600.0,a\n")
        with pytest.raises(OptschedError, match=rf"row 3: timestamp '{re.escape(stamp)}' is not a valid date-time"):
            read_trace(path)
