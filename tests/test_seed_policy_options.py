"""--policy-option KEY=VALUE on solve / simulate / compare: parsed by the
parameter's type, passed to the formulation, refused by name when unknown or
bad (one line, exit 2)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

import optsched.cli  # noqa: F401
from optsched.cli import app
from optsched.model import OptschedError
from optsched.policy_options import accepted_options, parse_policy_options


def test_values_are_parsed_by_the_defaults_type():
    assert parse_policy_options("lucid", ["ageing=true", "age_seconds=60", "profile_gpus=4"]) == {
        "ageing": True, "age_seconds": 60.0, "profile_gpus": 4}
    assert parse_policy_options("tiresias", ["thresholds=100, 200"]) == {"thresholds": (100.0, 200.0)}
    assert parse_policy_options("fifo", ["sticky=no"]) == {"sticky": False}
    assert parse_policy_options(["tiresias", "tiresias_gittins"], ["starvation_factor=2"]) == {"starvation_factor": 2.0}
    assert parse_policy_options("max_min_fairness", []) == {}


def test_fixed_and_api_only_keys_are_not_offered():
    assert "order" not in accepted_options("fifo")  # fifo's order is its name
    assert "discretization" not in accepted_options("tiresias_gittins")
    assert "agnostic" not in accepted_options("max_min_fairness_agnostic")
    assert {"predictor", "explain", "packing"}.isdisjoint(accepted_options("lucid"))


@pytest.mark.parametrize("policy,item,match", [
    ("lucid", "nokey=1", "unknown key 'nokey' for policy lucid"),
    ("lucid", "ageing", "'ageing' is not KEY=VALUE"),
    ("lucid", "ageing=maybe", "ageing='maybe': expected true or false"),
    ("lucid", "profile_minutes=nan", "profile_minutes='nan': expected a finite number"),
    ("lucid", "age_seconds=-5", "age_seconds='-5': must be >= 0"),
    ("lucid", "profile_gpus=two", "profile_gpus='two'"),
    ("tiresias", "thresholds=1,x", "thresholds='1,x': expected comma-separated numbers"),
    ("tiresias", "discretization=nosuch", "discretization='nosuch': discretization: unknown"),
    ("synergy", "base=nosuch", "base='nosuch'"),
    ("allox", "alpha=2", "alpha='2'"),
    ("fifo", "order=las", "unknown key 'order' for policy fifo"),
    ("optimus", "x=1", "unknown key 'x' for policy optimus"),
    ("gandiva_fifo", "max_partners=[1,2]", "max_partners='[1,2]': expected a number or true/false"),
    # Options another order uses are not fifo's (they were accepted and ignored).
    ("fifo", "thresholds=1,2", "unknown key 'thresholds' for policy fifo"),
    ("las", "starvation_factor=2", "unknown key 'starvation_factor' for policy las"),
    ("fifo", "max_partners=2", "unknown key 'max_partners' for policy fifo"),
    ("tiresias", "sticky=true", "unknown key 'sticky' for policy tiresias"),
    ("max_min_fairness_water_filling", "weights=2", "unknown key 'weights'"),
    ("tiresias_gittins", "prior=/no/such.csv", "prior='/no/such.csv': no such file"),
])
def test_bad_keys_and_values_are_named(policy, item, match):
    with pytest.raises(OptschedError, match=re.escape(match)) as e:
        parse_policy_options(policy, [item])
    assert str(e.value).startswith("--policy-option: ") and "\n" not in str(e.value)


def test_cli_passes_options_and_refuses_bad_ones(tmp_path):
    run = CliRunner().invoke
    # solve: thresholds change Tiresias's queues (a job above the only threshold drops to queue 2)
    a = json.loads(run(app, ["solve", "--policy", "tiresias", "--json"]).stdout)
    b = run(app, ["solve", "--policy", "tiresias", "--json", "--policy-option", "thresholds=0.001"])
    assert b.exit_code == 0, b.output
    assert json.loads(b.stdout)["policy"] == "tiresias" and a["policy"] == "tiresias"
    for cmd in (["solve", "--policy", "lucid"], ["simulate", "--policy", "lucid", "-q"],
                ["compare", "--policies", "fifo,lucid", "-q"]):
        r = run(app, cmd + ["--policy-option", "binding=maybe"])
        assert r.exit_code == 2, r.output
        assert "--policy-option" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    # compare: a key must be valid for every policy of the run
    r = run(app, ["compare", "--policies", "fifo,lucid", "-q", "--policy-option", "binding=false"])
    assert r.exit_code == 2 and "for policy fifo" in r.output


def test_simulate_honours_an_option(tmp_path):
    from conftest import peer_data_dir

    trace = peer_data_dir() / "tiresias" / "60_job.csv"
    if not trace.exists():
        pytest.skip("peer data not found (set OPTSCHED_PEER_DATA)")
    base = ["simulate", str(trace), "--cluster", "gpu=8", "--policy", "tiresias", "--json", "-q", "--sample", "20"]
    r0 = CliRunner().invoke(app, base)
    r1 = CliRunner().invoke(app, base + ["--policy-option", "thresholds=1", "--policy-option", "starvation_factor=0"])
    assert r0.exit_code == 0 and r1.exit_code == 0, r1.output
    s0, s1 = json.loads(r0.stdout), json.loads(r1.stdout)
    # a 1 GPU-second threshold demotes every job after its first round: the schedule (and JCT) changes
    assert s0["avg_jct"] != s1["avg_jct"]
