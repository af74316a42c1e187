"""`optsched bench`: many instances per case, p50 <= p99 <= max, references on the same
instances, the CSV's columns, --compare against a new and an old-format CSV, the
reference budget, and the references themselves (the GA never beats the exact optimum,
Gavel-style solves agree with ours). Nothing here is timed: speed is the bench's business."""

from __future__ import annotations

import csv
import dataclasses
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from optsched.bench import instances, measure, references
from optsched.bench.runner import COLUMNS, Context, Outcome, Spec, compare, read_csv, run_spec
from optsched.cli import app


def _rows(path) -> dict:
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]
    return {r["case"]: r for r in csv.DictReader(lines)}


def test_quick_bench_reports_spread_and_references(tmp_path, peer_data):
    out = tmp_path / "b.csv"
    r = CliRunner().invoke(app, ["bench", "--quick", "--only", "max_min_fairness/gavel/500x3,max_min_fairness/distinct/500x3,"
                                 "makespan/distinct/300x3,allocator", "--instances", "2", "--no-memory", "--csv", str(out)])
    assert r.exit_code == 0, r.output
    assert "load average (1/5/15 min) at start" in r.output and "at end" in r.output
    text = out.read_text()
    assert text.startswith("# cores=") and "load_after=" in text.splitlines()[0]
    header = next(csv.reader(text.splitlines()[1:]))
    assert header == COLUMNS
    for col in ("cpu_p50", "cpu_p99", "cpu_max", "wall_p50", "ref_p50", "ref_p99", "ref_max", "speedup", "gap_p50",
                "util_p50", "ref_util_p50", "total_s", "objective"):
        assert col in header
    rows = _rows(out)
    assert {"max_min_fairness/gavel/500x3", "max_min_fairness/distinct/500x3", "makespan/distinct/300x3",
            "allocator/1000jobs/256gpu"} <= set(rows)  # (and the congested twins of max-min)
    for key, row in rows.items():
        if row["status"] == "skipped":  # a case whose instances come from a module not present
            assert row["note"] and row["instances"] == "0"
            continue
        assert row["instances"] == "2"
        p50, p99, top = (float(row[c]) for c in ("cpu_p50", "cpu_p99", "cpu_max"))
        assert 0 <= p50 <= p99 <= top
        assert float(row["total_s"]) == p50  # the column --compare reads
        if key.startswith("allocator"):
            assert row["reference"] == "" and row["objective"] == ""
            continue
        assert row["ref_instances"] == "2"
        assert float(row["ref_p50"]) <= float(row["ref_p99"]) <= float(row["ref_max"])
        assert float(row["speedup"]) > 0
        # the same instances on both sides: the optima agree (makespan's bisection stops at 1e-3)
        assert abs(float(row["gap_p50"])) < (2e-3 if key.startswith("makespan") else 1e-6)
        assert 0.0 < float(row["util_p50"]) <= 1.0 + 1e-9


def test_compare_reads_cpu_medians_and_an_old_wall_clock_csv(tmp_path):
    args = ["bench", "--quick", "--only", "allocator", "--instances", "2", "--no-memory"]
    new = tmp_path / "new.csv"
    r = CliRunner().invoke(app, args + ["--csv", str(new)])
    assert r.exit_code == 0, r.output
    assert read_csv(str(new)).measure == "cpu"
    r = CliRunner().invoke(app, args + ["--compare", str(new)])
    flat = " ".join(r.output.split())  # (the title wraps at the terminal's width)
    assert r.exit_code == 0 and "median CPU seconds" in flat and "allocator/1000jobs/256gpu" in flat, r.output
    old = tmp_path / "old.csv"  # the bench's CSV before it drew many instances: wall seconds of one
    old.write_text("# cores=2\ncase,policy,total_s,p99_s,objective\nallocator/1000jobs/256gpu,x,0.5,,\n")
    assert read_csv(str(old)).measure == "wall"
    r = CliRunner().invoke(app, args + ["--compare", str(old)])
    assert r.exit_code == 0 and "wall seconds: the earlier CSV has no CPU columns" in " ".join(r.output.split()), r.output


def test_reference_stops_at_its_budget_and_the_ratio_uses_the_same_instances():
    calls = []

    def ours(inst):
        return Outcome(float(inst), "optimal", 1.0)

    def ref(inst):
        calls.append(inst)
        sum(i * i for i in range(20_000))  # some CPU time
        return Outcome(float(inst) * 1.01, "ok", 0.5)

    spec = Spec("fake/case", "p", 1, 1, "distinct", lambda seed: seed + 1, ours, ref, "fake ref", gpus=lambda inst: 1)
    row = run_spec(spec, Context(instances=5, memory=False, ref_budget=0.0))
    assert row.instances == 5 and row.ref_instances == 1 and calls == [1]
    assert "reference on the first 1" in row.note
    assert row.gap_p50 == pytest.approx(0.01 / 1.01)  # (ref − ours) / ref on the one shared instance
    assert row.objective == 3.0 and row.util_p50 == 1.0 and row.ref_util_p50 == 0.5 and row.status == "optimal"
    row = run_spec(spec, Context(instances=4, memory=False))
    assert row.ref_instances == 4 and "budget" not in row.note

    def flaky(inst):  # a reference that fails on one instance (as ECOS can) does not end the run
        if inst == 2:
            raise ArithmeticError("solver failed")
        return ref(inst)

    row = run_spec(dataclasses.replace(spec, ref=flaky), Context(instances=3, memory=False))
    assert row.ref_instances == 3 and "reference failed on 1 (ArithmeticError)" in row.note
    assert np.isfinite(row.gap_p50) and np.isfinite(row.ref_p50)


def test_spread_gap_and_utilization():
    assert measure.spread([3.0, 1.0, 2.0, float("nan")]) == (2.0, pytest.approx(2.98), 3.0)
    assert all(math.isnan(v) for v in measure.spread([]))
    assert measure.gap(0.9, 1.0) == pytest.approx(0.1) and measure.gap(0.9, 1.0, maximize=False) == pytest.approx(-0.1)
    inst = instances.rigid(40, 3, 0)
    assert math.isnan(measure.utilization(inst, None))
    assert measure.utilization(inst, np.zeros((inst.n, inst.k))) == 0.0


def test_instances_from_gavels_table_and_phillys_sizes(peer_data):
    rows = instances.gavel_rows()
    sizes = instances.philly_sizes()
    assert (sizes >= 1).all() and (sizes == 1).mean() > 0.9
    inst = instances.from_table(300, 2, True, "philly", rows, sizes)
    assert (inst.scale_factor <= inst.capacity.min()).all() and inst.scale_factor.max() > 1
    measured = np.array(list(rows.values()))
    ones = inst.scale_factor == 1
    # a 1-GPU job's row is one of the table's rows exactly
    assert all(np.isclose(measured, t).all(axis=1).any() for t in inst.throughput[ones])
    again = instances.from_table(300, 2, True, "philly", rows, sizes)
    assert np.array_equal(inst.throughput, again.throughput)  # deterministic in the seed


def test_pollux_ga_reference_never_beats_the_exact_optimum():
    from optsched.model import Instance, parse_snapshot
    from optsched.policy import solve_instance

    inst = Instance.from_snapshot(parse_snapshot(instances.elastic_snapshot(3, 24, (("t4", 64, 4),))))
    exact = references.milp_before(inst, "pollux")
    ga = references.pollux_ga(inst, population=20, generations=20)
    ours = solve_instance(inst, "pollux", solver="highs").explanation["milp_value"]
    assert ga <= exact * (1 + 1e-9) + 1e-9
    assert ga > 0.5 * exact  # a real search, not an empty allocation
    assert ours == pytest.approx(exact, rel=1e-4)


def test_bench_without_its_extra_fails_on_its_first_line(monkeypatch):
    """A core install: one error line naming the extra, exit 2, and nothing printed before it
    (the header used to come first, as if the bench had started)."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ecos" else find_spec(name, *a))
    res = CliRunner().invoke(app, ["bench", "--quick"])
    assert res.exit_code == 2, res.output
    assert "load average" not in res.output
    assert "optsched bench needs the 'bench' extra: pip install 'optsched[bench]'" in res.output
