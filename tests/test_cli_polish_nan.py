"""A metric no run has (no job completed, no objective) is null in JSON, n/a in
text, an empty CSV field: never NaN."""

from __future__ import annotations

import csv
import json
import math
import warnings

import pytest
from typer.testing import CliRunner

from optsched.cli import app

runner = CliRunner()


def strict_json(text: str):
    def refuse(token):
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def no_completion_sweep(tmp_path_factory):
    """Five jobs, ten simulated seconds: none completes, so JCTs and the makespan do not exist."""
    out = tmp_path_factory.mktemp("sweep") / "sw"
    res = runner.invoke(app, ["sweep", "gavel", "--policies", "fifo", "--jobs", "5", "--loads", "1", "--set",
                              "max_time=10", "--cluster", "v100=2,p100=2,k80=2", "--executor", "serial",
                              "--quiet", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out, res


def test_sweep_table_shows_n_a(no_completion_sweep):
    _, res = no_completion_sweep
    assert "nan" not in res.stdout.lower()
    row = next(line for line in res.stdout.splitlines() if "fifo" in line)
    assert row.count("n/a") == 2  # avg_jct and makespan; avg_responsiveness exists (0.00)


def test_sweep_row_json_is_strict_json(no_completion_sweep):
    out, _ = no_completion_sweep
    rows = list((out / "runs").glob("*/row.json"))
    assert len(rows) == 1
    row = strict_json(rows[0].read_text())
    assert row["jobs_completed"] == 0 and row["avg_jct"] is None and row["makespan"] is None


def test_gathered_table_keeps_missing_as_nan(no_completion_sweep):
    """row.json's null is NaN again in results.parquet (a float column, as before)."""
    import pandas as pd

    out, _ = no_completion_sweep
    t = pd.read_parquet(out / "results.parquet")
    assert t["avg_jct"].dtype == float and math.isnan(t["avg_jct"].iat[0])


def test_report_without_completed_jobs_warns_nothing(no_completion_sweep):
    from optsched.report import write_report

    out, _ = no_completion_sweep
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "No artists with labels found" fails the test
        path, figures = write_report(out)
    assert path.exists() and figures


def test_legend_gathers_every_panel():
    """The CDF panels share one legend on the last panel: a policy drawn only in an
    earlier panel is still in it; nothing drawn, no legend."""
    from optsched.report.figures import _legend, _plt

    plt = _plt()
    fig, axes = plt.subplots(1, 2)
    _legend(axes[-1], axes)
    assert axes[-1].get_legend() is None
    axes[0].plot([0, 1], [0, 1], label="fifo")
    _legend(axes[-1], axes)
    assert [t.get_text() for t in axes[-1].get_legend().get_texts()] == ["fifo"]
    plt.close(fig)


def test_bench_csv_has_empty_fields_for_nan(tmp_path):
    from optsched.bench.runner import BenchRow, fmt_g, read_csv, write_csv

    row = BenchRow("allocator/x", "Allocator.next_round", 10, 3, 8, total_s=0.5)  # no objective
    path = tmp_path / "b.csv"
    write_csv([row], str(path), {"cores": 2})
    text = path.read_text()
    assert "nan" not in text.lower()
    total, objective = read_csv(str(path))["allocator/x"]
    assert total == 0.5 and math.isnan(objective)
    assert next(csv.reader(text.splitlines()[1:]))[0] == "case"
    assert fmt_g(float("nan"), "n/a") == "n/a" and fmt_g(1.5) == "1.5"


def test_bench_prints_n_a_for_no_objective(tmp_path):
    res = runner.invoke(app, ["bench", "--quick", "--only", "allocator/", "--repeat", "1", "--no-memory",
                              "--csv", str(tmp_path / "b.csv")])
    assert res.exit_code == 0, res.output
    assert "objective n/a" in res.stdout
    assert "nan" not in res.stdout.lower()
