"""Trace readers on the peers' own files, writers round-trip, generators, bad input."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from optsched.model import OptschedError
from optsched.traces.generate import default_trace, generate_gavel
from optsched.traces.io import detect_format, read_trace, write_trace
from optsched.traces.philly import assign_models, sample_philly
from optsched.traces.throughputs import default_throughputs, gavel_throughputs, parse_throughputs


def _raw_lines(path):
    return [line.rstrip("\n").split("\t") for line in open(path) if line.strip()]


# ---------------------------------------------------------------- peer files


def test_gavel_10_field_trace_matches_file(peer_data):
    path = peer_data / "gavel" / "traces" / "max_min_fairness.trace"
    raw = _raw_lines(path)
    t = read_trace(path)
    assert t.format == "gavel" and len(t) == len(raw) == 96
    j = t.jobs.sort_values("row")
    assert list(j["model"]) == [r[0] for r in raw]
    assert np.array_equal(j["steps_total"], [float(r[5]) for r in raw])
    assert np.array_equal(j["scale_factor"], [int(r[6]) for r in raw])
    assert np.array_equal(j["weight"], [float(r[7]) for r in raw])
    assert np.array_equal(j["arrival_time"], [float(r[9]) for r in raw])


def test_gavel_7_field_msr_trace_matches_file(peer_data):
    path = peer_data / "gavel" / "traces" / "msr-seed0" / "7f04ca.trace"
    raw = _raw_lines(path)
    t = read_trace(path)
    j = t.jobs.sort_values("row")
    assert len(t) == len(raw)
    assert np.array_equal(j["arrival_time"], [float(r[5]) for r in raw])
    assert np.array_equal(j["scale_factor"], [int(r[6]) for r in raw])
    assert j["scale_factor"].max() == 32  # beyond the table's 8: extrapolated when simulated
    assert (np.diff(t.jobs["arrival_time"]) >= 0).all()


def test_tiresias_trace_matches_file(peer_data):
    path = peer_data / "tiresias" / "60_job.csv"
    raw = pd.read_csv(path)
    t = read_trace(path)
    assert t.format == "tiresias" and t.speed == "duration" and len(t) == 60
    j = t.jobs.set_index("job_id").loc[raw["job_id"].astype(str)]
    assert np.array_equal(j["arrival_time"], raw["submit_time"])
    assert np.array_equal(j["scale_factor"], raw["num_gpu"])
    assert np.array_equal(j["duration"], raw["duration"])
    assert np.array_equal(j["steps_total"], raw["iterations"])


@pytest.mark.parametrize("rel", ["pollux/workloads/workload-1.csv", "sia/workloads/saturn/workload-3.csv"])
def test_pollux_workload_matches_file(peer_data, rel):
    raw = pd.read_csv(peer_data / rel)
    t = read_trace(peer_data / rel)
    assert t.format == "pollux" and len(t) == len(raw) == 160
    j = t.jobs.set_index("job_id").loc[raw["name"]]
    assert np.array_equal(j["arrival_time"], raw["time"])
    assert np.array_equal(j["scale_factor"], raw["num_replicas"])
    assert np.array_equal(j["batch_size"], raw["batch_size"])
    assert list(j["model"]) == list(raw["application"])


def test_philly_trace_matches_file(peer_data):
    path = peer_data / "philly" / "philly.csv.gz"
    raw = pd.read_csv(path)
    t = read_trace(path, cluster="6214e9")
    sel = raw[raw["cluster"] == "6214e9"]
    assert len(t) == len(sel) == 41226
    ts = pd.to_datetime(sel["timestamp"])
    expected = np.sort((ts - ts.min()).dt.total_seconds().to_numpy())
    assert np.allclose(t.jobs["arrival_time"].to_numpy(), expected)
    assert t.jobs["scale_factor"].sum() == sel["num_gpus"].sum()
    assert t.jobs["duration"].sum() == pytest.approx(sel["duration"].sum())


def test_gavel_throughput_table_reads_measured_values(peer_data):
    table = gavel_throughputs(peer_data)
    raw = json.loads((peer_data / "gavel" / "simulation_throughputs.json").read_text())
    assert table.gpu_types == ("k80", "p100", "v100") and len(table.models) == 26
    key = "('ResNet-50 (batch size 64)', 4)"
    row, extrapolated = table.lookup("ResNet-50 (batch size 64)", 4)
    assert not extrapolated and row["v100"] == raw["v100"][key]["null"]
    big, extrapolated = table.lookup("ResNet-50 (batch size 64)", 32)
    assert extrapolated and big["v100"] == pytest.approx(raw["v100"]["('ResNet-50 (batch size 64)', 8)"]["null"] * 4)


# ---------------------------------------------------------------- writers, generators


@pytest.mark.parametrize("fmt", ["gavel", "tiresias", "philly", "pollux"])
def test_writers_round_trip_counts_arrivals_and_demands(tmp_path, fmt):
    t = generate_gavel(default_throughputs(), 50, 10.0, seed=3, multi_gpu=True)
    path = tmp_path / ("t.trace" if fmt == "gavel" else "t.csv")
    write_trace(t, path, fmt)
    back = read_trace(path)
    assert back.format == fmt and len(back) == 50
    assert np.array_equal(back.jobs["scale_factor"], t.jobs["scale_factor"])
    assert np.allclose(back.jobs["arrival_time"], t.jobs["arrival_time"], atol=1.0)


def test_generator_is_deterministic_and_follows_gavel_distributions():
    table = default_throughputs()
    a = generate_gavel(table, 4000, 2.0, seed=7, multi_gpu=True)
    b = generate_gavel(table, 4000, 2.0, seed=7, multi_gpu=True)
    pd.testing.assert_frame_equal(a.jobs, b.jobs)
    j = a.jobs
    gaps = np.diff(j["arrival_time"])
    assert gaps.mean() == pytest.approx(1800.0, rel=0.06)  # 2 jobs/hour
    d = j["duration"].to_numpy()
    assert d.min() >= 60 * 10**1.5 and d.max() <= 60 * 10**4
    assert (d > 60 * 1000).mean() == pytest.approx(0.2, abs=0.03)  # long-job share
    shares = j["scale_factor"].value_counts(normalize=True)
    assert shares[1] == pytest.approx(0.70, abs=0.03) and shares[8] == pytest.approx(0.05, abs=0.02)
    # every multi-GPU job has a distributed profile; steps = duration × V100 throughput
    assert all((m, s) in table.alone for m, s in zip(j["model"], j["scale_factor"]))
    v100 = np.array([table.alone[(m, s)]["v100"] for m, s in zip(j["model"], j["scale_factor"])])
    assert np.allclose(j["steps_total"], d * v100)


def test_philly_sampling_and_model_assignment_are_seeded(peer_data):
    t = read_trace(peer_data / "philly" / "philly.csv.gz", cluster="11cb48")
    s1 = assign_models(sample_philly(t, 300, seed=1), default_throughputs(), seed=2)
    s2 = assign_models(sample_philly(t, 300, seed=1), default_throughputs(), seed=2)
    pd.testing.assert_frame_equal(s1.jobs, s2.jobs)
    assert len(s1) == 300 and (s1.jobs["model"] != "").all() and (s1.jobs["steps_total"] > 0).all()


def test_default_trace_and_format_detection(tmp_path):
    t = default_trace()
    assert len(t) == 120
    p = tmp_path / "x.csv"
    write_trace(t, p, "philly")
    assert detect_format(p) == "philly"
    gz = tmp_path / "x.csv.gz"
    with gzip.open(gz, "wt") as f:
        f.write(p.read_text())
    assert detect_format(gz) == "philly"


# ---------------------------------------------------------------- bad input


def test_missing_field_names_the_row(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,1,0,10,vgg,5,0\n1,,3,10,vgg,5,3\n")
    with pytest.raises(OptschedError, match=r"row 3: num_gpu is missing"):
        read_trace(p)


def test_negative_field_names_the_row(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("name,time,application,num_replicas,batch_size\na,0,bert,1,32\nb,-5,bert,1,32\n")
    with pytest.raises(OptschedError, match=r"row 3: time must be >= 0, got -5"):
        read_trace(p)


def test_gavel_line_with_wrong_field_count_names_the_row(tmp_path):
    p = tmp_path / "t.trace"
    p.write_text("A3C\tcmd\tdir\t-n\t1\t100\t1\t1\t-1\t0\nA3C\tcmd\t1\t100\n")
    with pytest.raises(OptschedError, match=r"row 2: expected 10 tab-separated fields, got 4"):
        read_trace(p)


def test_unknown_format_is_a_clear_error(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(OptschedError, match="cannot detect the format"):
        read_trace(p)


def test_an_undetected_format_names_the_way_to_give_it_in_each_interface(tmp_path):
    """The message said "pass --format" to the Python API and to sweep, which have no such flag."""
    import optsched
    from optsched.sweep.traces import _read

    p = tmp_path / "t.csv"
    p.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(OptschedError, match=r"pass --format \(format= in Python\)$"):
        read_trace(p)
    from optsched.runtime.loop import run

    with pytest.raises(OptschedError, match=r"convert it with optsched trace convert --format"):
        run(str(p))
    with pytest.raises(OptschedError, match=r"read_trace\(path, format=\.\.\.\) as the trace$"):
        optsched.simulate(str(p), cluster="v100=2")
    with pytest.raises(OptschedError, match=r"set format in the sweep file's \[trace_options\]$"):
        _read(str(p), None, None)


def test_bad_throughput_table_names_the_entry():
    with pytest.raises(OptschedError, match=r"\['v100'\]\[\"\('A', 1\)\"\]"):
        parse_throughputs({"v100": {"('A', 1)": {"null": -1.0}}})


@pytest.mark.parametrize("batch", ["-1", "-128"])
def test_a_pollux_batch_size_must_not_be_negative(tmp_path, batch):
    """It is the goodput model's M0 (0: the application's default); a negative one was
    silently replaced (JCT 85,323 s vs 4,058 s)."""
    p = tmp_path / "w.csv"
    p.write_text(f"name,time,application,num_replicas,batch_size\ncifar10-0,0,cifar10,1,0\ncifar10-1,5,cifar10,1,{batch}\n")
    with pytest.raises(OptschedError, match=r"row 3: batch_size must be >= 0"):
        read_trace(p, format="pollux")


def test_a_pollux_workload_converts_to_gavel_with_one_line_not_a_traceback(tmp_path):
    """A Pollux job has no step count (steps_total inf): int(inf) raised OverflowError in the writer."""
    src = tmp_path / "p.csv"
    src.write_text("name,time,application,num_replicas,batch_size\ncifar10-0,0,cifar10,1,128\n")
    with pytest.raises(OptschedError, match="gavel writer: every job needs total steps; job 'cifar10-0' has no length"):
        write_trace(read_trace(src), tmp_path / "p.trace", "gavel")


def test_a_row_longer_than_the_header_is_named_as_such(tmp_path):
    """pandas turned the extra leading cells into an index: 'submit_time is not a finite number ('vgg19')'."""
    p = tmp_path / "t.csv"
    p.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,1,0,100,vgg19,10,0,5,6\n")
    with pytest.raises(OptschedError, match=r"row 2: 9 fields where the header has 7$"):
        read_trace(p)


@pytest.mark.parametrize("content", [b"", b"\n\n  \n", b"\xef\xbb\xbf", b"\xef\xbb\xbf\n\n"])
def test_an_empty_trace_says_so_before_format_detection(tmp_path, content):
    """It said 'cannot detect the format ... pass --format'; with --format, 'empty file'."""
    import gzip

    for p, data in ((tmp_path / "t.csv", content), (tmp_path / "t.csv.gz", gzip.compress(content))):
        p.write_bytes(data)
        with pytest.raises(OptschedError, match=r": empty file$"):
            read_trace(p)
