"""`optsched simulate` on a Pollux workload CSV runs the elastic simulator."""

from __future__ import annotations

import json

import pandas as pd
from typer.testing import CliRunner

import optsched.cli  # noqa: F401  (registers every command)
from optsched.cli import app


def test_simulate_pollux_workload_runs_elastic_jobs_to_completion(peer_data, tmp_path):
    wl = pd.read_csv(peer_data / "pollux" / "workloads" / "workload-1.csv")
    small = wl[wl.application.isin(["cifar10", "ncf"])].head(6)
    path = tmp_path / "workload.csv"
    small.to_csv(path, index=False)
    res = CliRunner().invoke(app, ["simulate", str(path), "--format", "pollux", "--policy", "pollux",
                                   "--servers", "2x4", "--json", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["jobs"] == len(small) and summary["finished"] == len(small)
    jobs = pd.read_csv(tmp_path / "out" / "jobs.csv")
    # No job completes before it is submitted, and JCT is completion - submission.
    assert (jobs.completion >= jobs.submission).all()
    assert abs(summary["avg_jct"] - (jobs.completion - jobs.submission).mean()) < 1e-6


def test_elastic_simulation_rejects_rigid_only_policies(peer_data, tmp_path):
    wl = pd.read_csv(peer_data / "pollux" / "workloads" / "workload-1.csv").head(3)
    path = tmp_path / "workload.csv"
    wl.to_csv(path, index=False)
    res = CliRunner().invoke(app, ["simulate", str(path), "--format", "pollux", "--policy", "makespan"])
    assert res.exit_code == 2
    assert "not supported by the elastic simulator" in res.stderr


def test_gavel_baseline_in_the_elastic_simulator_runs_through_the_allocator(peer_data, tmp_path):
    # max_min_fairness on a workload CSV goes through optsched.Allocator; every
    # job that fits the 8 GPUs finishes (rigid jobs keep their trace size), none
    # before it was submitted.
    wl = pd.read_csv(peer_data / "pollux" / "workloads" / "workload-1.csv")
    small = wl[wl.application.isin(["cifar10", "ncf"]) & (wl.num_replicas <= 8)].head(6)
    path = tmp_path / "workload.csv"
    small.to_csv(path, index=False)
    res = CliRunner().invoke(app, ["simulate", str(path), "--format", "pollux", "--policy", "max_min_fairness",
                                   "--servers", "2x4", "--json", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["finished"] == len(small)
    jobs = pd.read_csv(tmp_path / "out" / "jobs.csv")
    assert (jobs.completion > jobs.submission).all()
