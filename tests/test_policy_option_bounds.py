"""Policy options out of their range are refused by the formulation itself
(Python API, simulator and ``--policy-option`` alike) with one line that starts
with the option's name: negative, zero, infinite or NaN numbers where they make
no sense, counts that are not whole numbers, thresholds that do not increase,
and flags given as other numbers (a flag is true/false, or 1/0)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import optsched
from optsched.model import OptschedError

SNAPSHOT = Path(__file__).resolve().parents[1] / "examples" / "snapshot.json"
INF, NAN = math.inf, math.nan


@pytest.fixture(scope="module")
def snap():
    return optsched.parse_snapshot(SNAPSHOT.read_text())


BAD = [
    # Tiresias: queue limits (GPU-seconds) finite, positive, strictly increasing.
    ("tiresias", "thresholds", (-5, 10)),
    ("tiresias", "thresholds", (7200, 3600)),
    ("tiresias", "thresholds", (3600, 3600)),
    ("tiresias", "thresholds", (-1,)),
    ("tiresias", "thresholds", (1e308,)),
    ("tiresias", "thresholds", (INF,)),
    ("tiresias", "thresholds", (NAN, 10)),
    ("tiresias", "thresholds", ()),
    ("tiresias", "thresholds", "3600,7200"),
    ("tiresias_gittins", "thresholds", (-5, 10)),
    ("tiresias_gittins", "thresholds", (7200, 3600)),
    ("tiresias_gittins", "thresholds", (1e308,)),
    ("tiresias", "starvation_factor", -1),
    ("tiresias", "starvation_factor", INF),
    ("tiresias", "starvation_factor", NAN),
    ("tiresias_gittins", "starvation_factor", -1),
    # Water filling: a whole number of rounds, at least one.
    ("max_min_fairness_water_filling", "max_rounds", -1),
    ("max_min_fairness_water_filling", "max_rounds", 0),
    ("max_min_fairness_water_filling", "max_rounds", 1.5),
    ("max_min_fairness_water_filling", "max_rounds", INF),
    ("max_min_fairness_hierarchical", "max_rounds", -1),
    ("max_min_fairness_hierarchical", "max_rounds", 0),
    ("max_min_fairness_water_filling", "warm_levels", 2),
    # Partner caps: a whole number >= 0, as max_min_fairness's.
    ("gandiva", "max_partners", -1),
    ("gandiva", "max_partners", 1.5),
    ("gandiva_fifo", "max_partners", -1),
    ("max_min_fairness", "max_partners", -1),
    ("max_throughput", "max_partners", 2.5),
    # Flags: true/false (or 1/0), not any other number.
    ("pollux", "agnostic", -1),
    ("pollux", "agnostic", 1e308),
    ("pollux", "agnostic", 2),
    ("pollux", "agnostic", "x"),
    ("pollux", "restart_penalty", -1),
    ("max_min_fairness", "agnostic", 5),
    ("fifo", "sticky", 3),
    ("gandiva", "time_slicing", -1),
    ("qssf", "preemptive", -1),
    ("lucid", "binding", 2),
    ("min_cost", "with_slos", 3),
    # Lucid: a whole number of GPUs, finite minutes and seconds.
    ("lucid", "profile_gpus", 1e308),
    ("lucid", "profile_gpus", -1),
    ("lucid", "profile_gpus", 1.5),
    ("lucid", "profile_minutes", 1e308),
    ("lucid", "profile_minutes", -1),
    ("lucid", "profile_minutes", NAN),
    ("lucid", "age_seconds", 1e308),
    ("lucid_ageing", "age_seconds", 0),
    ("lucid_ageing", "age_seconds", -60),
    ("lucid_ageing", "age_seconds", INF),
    # Other formulations' numbers.
    ("allox", "max_jobs", -1),
    ("allox", "max_jobs", 0),
    ("allox", "max_jobs", 1.5),
    ("allox", "alpha", "x"),
    ("sia", "lambda_n", -1),
    ("sia", "lambda_n", INF),
    ("sia", "p", NAN),
    ("sia", "p", -INF),
    ("pollux", "p", NAN),
    ("pollux", "p", -1e308),
]


@pytest.mark.parametrize("policy,key,value", BAD, ids=[f"{p}-{k}={v!r}" for p, k, v in BAD])
def test_bad_value_is_refused_naming_the_option(snap, policy, key, value):
    with pytest.raises(OptschedError) as e:
        optsched.solve(snap, policy, **{key: value})
    msg = str(e.value)
    assert msg.startswith(f"{key}: "), msg
    assert "\n" not in msg


def test_messages_say_what_is_expected(snap):
    def message(policy, **options):
        with pytest.raises(OptschedError) as e:
            optsched.solve(snap, policy, **options)
        return str(e.value)

    assert message("tiresias", thresholds=(-5, 10)) == "thresholds: must be positive and increasing, got [-5, 10]"
    assert message("max_min_fairness_water_filling", max_rounds=-1) == "max_rounds: must be >= 1, got -1"
    assert message("gandiva", max_partners=-1) == "max_partners: must be >= 0, got -1"
    assert message("pollux", agnostic=-1).startswith("agnostic: must be true, false")
    assert message("lucid", profile_gpus=1e308) == "profile_gpus: must be <= 100,000 GPUs, got 1e+308"


GOOD = [
    ("tiresias", {"thresholds": (3600, 7200)}),
    ("tiresias", {"thresholds": [0.001]}),
    ("tiresias", {"thresholds": np.array([100.0, 200.0, 400.0]), "starvation_factor": 0}),
    ("tiresias_gittins", {"starvation_factor": 2.0}),
    ("max_min_fairness_water_filling", {"max_rounds": 1}),
    ("max_min_fairness_water_filling", {"max_rounds": 50, "warm_levels": False}),
    ("max_min_fairness_hierarchical", {"max_rounds": 2}),
    ("gandiva", {"max_partners": 0}),
    ("gandiva", {"max_partners": np.int64(2), "time_slicing": 0}),
    ("gandiva_fifo", {"max_partners": 1}),
    ("max_min_fairness", {"max_partners": None, "agnostic": np.bool_(True)}),
    ("pollux", {"agnostic": True}),
    ("pollux", {"agnostic": 0}),
    ("pollux", {"agnostic": None, "p": -0.5}),
    ("lucid", {"profile_gpus": 0}),
    ("lucid", {"profile_gpus": 4.0, "profile_minutes": 10}),
    ("lucid", {"profile_gpus": 10_000}),  # more than the cluster holds: the whole profiling type
    ("lucid_ageing", {"age_seconds": 60}),
    ("allox", {"max_jobs": 1}),
    ("sia", {"lambda_n": 0}),
    ("qssf", {"preemptive": 1}),
]


@pytest.mark.parametrize("policy,options", GOOD, ids=[f"{p}-{o}" for p, o in GOOD])
def test_good_values_still_solve(snap, policy, options):
    alloc = optsched.solve(snap, policy, **options)
    assert alloc.policy == policy
    assert not alloc.status.startswith("fallback"), alloc.status
    assert alloc.fractions.shape[0] == len(snap.jobs)


def test_good_values_change_the_schedule(snap):
    # the checks pass values through: a job that ran 100 GPU-seconds is in queue 0 under the
    # default thresholds, in queue 1 under a first threshold of 50
    data = json.loads(SNAPSHOT.read_text())
    data["jobs"][0]["attained_service"] = 100.0
    ran = optsched.parse_snapshot(data)

    def queue(**o):
        return optsched.solve(ran, "tiresias", starvation_factor=0, **o).explanation["tiresias_queue"]["job00"]

    assert queue() == 0 and queue(thresholds=(50.0, 7200.0)) == 1
    rounds = optsched.solve(snap, "max_min_fairness_water_filling", max_rounds=1)
    assert math.isfinite(rounds.objective)


def run_cli(*args):
    from optsched.cli import app

    return CliRunner().invoke(app, ["solve", str(SNAPSHOT), *args])


@pytest.mark.parametrize("policy,item", [
    ("tiresias", "thresholds=-5,10"),
    ("tiresias_gittins", "thresholds=7200,3600"),
    ("max_min_fairness_water_filling", "max_rounds=-1"),
    ("gandiva", "max_partners=-1"),
    ("pollux", "agnostic=-1"),
    ("lucid", "profile_minutes=1e308"),
])
def test_cli_exits_2_with_one_line(policy, item):
    r = run_cli("--policy", policy, "--policy-option", item)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    key = item.split("=")[0]
    assert len(lines) == 1 and key in lines[0] and "--policy-option" in lines[0], r.output
    assert "Traceback" not in r.output


def test_cli_reads_flags_by_their_declared_type():
    # pollux's agnostic defaults to None (decided by the cluster): still a flag on the command line
    assert run_cli("--policy", "pollux", "--policy-option", "agnostic=yes", "--json").exit_code == 0
    r = run_cli("--policy", "gandiva", "--policy-option", "max_partners=1.5")
    assert r.exit_code == 2 and "max_partners='1.5': max_partners: must be a whole number" in r.output, r.output
    # hadar runs its allocate(): the MILP builder's relax is not an option of the policy
    r = run_cli("--policy", "hadar", "--policy-option", "relax=true")
    assert r.exit_code == 2 and "unknown key 'relax' for policy hadar" in r.output, r.output


def test_tiresias_gittins_refuses_thresholds_it_would_ignore():
    snap = optsched.parse_snapshot(SNAPSHOT.read_text())
    with pytest.raises(OptschedError, match=r"^thresholds: tiresias_gittins computes its queue thresholds"):
        optsched.solve(snap, "tiresias_gittins", thresholds=(100.0, 200.0))
    assert optsched.solve(snap, "tiresias_gittins").status == "ok"


def test_tiresias_prior_is_a_path_or_samples_and_only_for_gittins():
    """A list prior read the default prior's cache entry once the default had been used; -1 and nan
    gave a pandas traceback; plain tiresias accepted and ignored a prior."""
    from optsched.formulations.priority import gittins_thresholds, gpu_time_prior

    snap = optsched.parse_snapshot(SNAPSHOT.read_text())
    optsched.solve(snap, "tiresias_gittins")  # the default prior, cached
    samples = [100.0, 200.0, 300.0, 5000.0]
    assert gittins_thresholds(gpu_time_prior(samples)) == gittins_thresholds(np.sort(np.array(samples)))
    assert gittins_thresholds(gpu_time_prior(samples)) != gittins_thresholds(gpu_time_prior(None))
    for bad, msg in ((-1, "a CSV path or a list"), (NAN, "a CSV path or a list"), ("/", "cannot read '/' as CSV")):
        with pytest.raises(OptschedError, match=f"^prior: {msg}"):
            optsched.solve(snap, "tiresias_gittins", prior=bad)
    with pytest.raises(OptschedError, match="^prior: only tiresias_gittins"):
        optsched.solve(snap, "tiresias", prior="x.csv")


def test_none_on_the_command_line_only_where_the_option_takes_none():
    """`--policy-option max_partners=none` puts every pair in at once, as max_partners=None does in Python;
    an option that has no None (Tiresias's starvation_factor is a number) still refuses the word."""
    from optsched.policy_options import parse_policy_options

    for word in ("none", "None", "null"):
        assert parse_policy_options("max_min_fairness", [f"max_partners={word}"]) == {"max_partners": None}
    assert parse_policy_options("max_min_fairness_water_filling", ["max_rounds=null"]) == {"max_rounds": None}
    with pytest.raises(OptschedError, match="starvation_factor='none'"):
        parse_policy_options("tiresias", ["starvation_factor=none"])


def test_the_summary_names_its_display_unit_apart_from_its_seconds():
    """The summary's values are seconds; the unit tables show was called time_unit and read as theirs."""
    import optsched

    r = optsched.simulate(policy="fifo")
    assert "time_unit" not in r.summary and r.summary["display_time_unit"] == "h"
    assert r.summary["avg_jct"] == pytest.approx(float(r.jobs["jct"].mean()))
