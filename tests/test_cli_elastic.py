"""`optsched simulate` on a Pollux workload CSV: elastic jobs in the one simulator."""

from __future__ import annotations

import json

import pandas as pd
from typer.testing import CliRunner

import optsched.cli  # noqa: F401  (registers every command)
from optsched.cli import app


def _small(peer_data, tmp_path, apps=("cifar10", "ncf"), n=6):
    wl = pd.read_csv(peer_data / "pollux" / "workloads" / "workload-1.csv")
    small = wl[wl.application.isin(apps) & (wl.num_replicas <= 8)].head(n)
    path = tmp_path / "workload.csv"
    small.to_csv(path, index=False)
    return small, path


def test_simulate_pollux_workload_runs_elastic_jobs_to_completion(peer_data, tmp_path):
    small, path = _small(peer_data, tmp_path)
    res = CliRunner().invoke(app, ["simulate", str(path), "--format", "pollux", "--policy", "pollux",
                                   "--servers", "2x4", "--json", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["jobs"] == len(small) and summary["jobs_completed"] == len(small)
    assert summary["elastic_jobs"] == len(small) and summary["schema_version"] == 1
    jobs = pd.read_csv(tmp_path / "out" / "jobs.csv")
    # No job completes before it is submitted, and JCT is completion - arrival.
    assert (jobs.completion_time >= jobs.arrival_time).all()
    assert (jobs.kind == "elastic").all()
    assert abs(summary["avg_jct"] - (jobs.completion_time - jobs.arrival_time).mean()) < 1e-6
    rounds = pd.read_csv(tmp_path / "out" / "rounds.csv")
    assert len(rounds) == summary["rounds"] and (rounds.duration <= 60.0 + 1e-9).all()


def test_elastic_simulation_rejects_policies_that_need_job_lengths(peer_data, tmp_path):
    _, path = _small(peer_data, tmp_path, n=3)
    res = CliRunner().invoke(app, ["simulate", str(path), "--format", "pollux", "--policy", "makespan"])
    assert res.exit_code == 2
    assert "--policy: makespan needs job lengths" in res.stderr


def test_gavel_baseline_on_a_workload_runs_through_the_allocator(peer_data, tmp_path):
    # max_min_fairness on a workload CSV: rigid-sized elastic jobs (the trace's
    # GPUs and batch size) through optsched.Allocator; every job finishes, none
    # before it was submitted.
    small, path = _small(peer_data, tmp_path)
    res = CliRunner().invoke(app, ["simulate", str(path), "--format", "pollux", "--policy", "max_min_fairness",
                                   "--servers", "2x4", "--json", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["jobs_completed"] == len(small)
    jobs = pd.read_csv(tmp_path / "out" / "jobs.csv")
    assert (jobs.completion_time > jobs.arrival_time).all()


def test_compare_takes_a_workload(peer_data, tmp_path):
    _, path = _small(peer_data, tmp_path, n=4)
    res = CliRunner().invoke(app, ["compare", str(path), "--policies", "pollux,sia,max_min_fairness",
                                   "--servers", "2x4", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"pollux", "sia", "max_min_fairness"}
    assert all(s["jobs_completed"] == 4 for s in out.values())


def test_cluster_type_alone_names_the_default_servers_gpus_on_a_workload(peer_data, tmp_path):
    """docs/guide/simulate.md: Pollux/Sia workloads default to --servers 16x4, of type `gpu` unless --cluster
    names it; `--cluster v100` alone was refused as 'not TYPE=COUNT'."""
    small, path = _small(peer_data, tmp_path, n=3)
    res = CliRunner().invoke(app, ["simulate", str(path), "--format", "pollux", "--policy", "pollux",
                                   "--cluster", "v100", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert set(summary["utilization"]) == {"v100"} and summary["jobs_completed"] == len(small)
    # A rigid trace has no default servers: a type alone is still refused, saying what it means.
    res = CliRunner().invoke(app, ["simulate", "--cluster", "v100"])
    assert res.exit_code == 2 and "a type alone names the GPUs of --servers" in res.output
