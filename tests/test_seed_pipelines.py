"""Every seed policy runs unchanged through optsched solve (CLI), simulate,
compare and a service session."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from optsched.cli import app
from optsched.service import Session, workload
from optsched.sim import simulate
from optsched.traces.generate import default_trace

SEEDS = ["lucid", "lucid_ageing", "qssf", "optimus", "allox", "synergy", "gandiva", "tiresias_gittins"]


@pytest.fixture(scope="module")
def small_trace():
    return default_trace().head(30)


@pytest.mark.parametrize("policy", SEEDS)
def test_seed_policy_simulates_every_job_to_completion(policy, small_trace):
    r = simulate(small_trace, "v100=8,p100=8,k80=8", policy=policy, recompute_every=1)
    assert r.summary["jobs_completed"] == 30
    assert r.summary["progress_violation_steps"] <= 1e-6
    util = r.rounds[[c for c in r.rounds.columns if c.startswith("util_")]].to_numpy()
    assert np.all(util <= 1 + 1e-9)


@pytest.mark.parametrize("policy", SEEDS)
def test_seed_policy_solves_from_the_cli(policy):
    res = CliRunner().invoke(app, ["solve", "--policy", policy, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["policy"] == policy


def test_compare_runs_the_seed_policies_on_one_trace(tmp_path, small_trace):
    path = tmp_path / "t.trace"
    from optsched.traces.io import write_trace

    write_trace(small_trace, path, "gavel")
    res = CliRunner().invoke(app, ["compare", str(path), "--cluster", "v100=8,p100=8,k80=8", "--policies",
                                   "fifo,lucid,qssf,allox", "--json", "--quiet"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert {p: out[p]["jobs_completed"] for p in out} == {p: 30 for p in ("fifo", "lucid", "qssf", "allox")}


@pytest.mark.parametrize("policy", ["lucid", "qssf", "allox", "gandiva", "tiresias_gittins"])
def test_seed_policy_runs_in_a_service_session(policy):
    s = Session.create({"cluster": workload.CLUSTER, "policy": policy, "recompute_every": 1})
    workload.run(s, 25, seed=3)
    assert s.state()["finished_jobs"] > 0
