"""The simulator: invariants, published Tiresias numbers, the direct LP path
against cvxpy, determinism, bad input and the CLI."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optsched.model import OptschedError
from optsched.policy import solve_instance
from optsched.sim import simulate
from optsched.sim.jobs import parse_cluster
from optsched.sim.policy_step import ClassSolveCache, compute_allocation
from optsched.traces.generate import generate_gavel
from optsched.traces.throughputs import default_throughputs
from optsched.traces.trace import make_trace

from conftest import random_instance

POLICIES = ["max_min_fairness", "max_min_fairness_agnostic"]


# ---------------------------------------------------------------- direct LP path


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40), policy=st.sampled_from(POLICIES))
def test_direct_lp_matches_cvxpy_optimum(seed, n, policy):
    inst = random_instance(np.random.default_rng(seed), n)
    ref = solve_instance(inst, policy)  # cvxpy + CLARABEL
    for solver in ("highs-direct", "highs-simplex-direct", "clarabel-direct"):
        a = solve_instance(inst, policy, solver=solver)
        assert a.status == "optimal"
        assert a.objective == pytest.approx(ref.objective, rel=1e-6)
        X = a.fractions
        assert (X.sum(axis=1) <= 1 + 1e-9).all()
        assert (inst.scale_factor @ X <= inst.capacity + 1e-7).all()
        assert (X[~inst.available] == 0).all()


def test_direct_lp_duals_price_a_binding_capacity():
    # 4 single-GPU jobs on 2 GPUs of one type: capacity binds, its price is positive.
    rng = np.random.default_rng(0)
    inst = random_instance(rng, 4, k=1, multi_gpu=False, sparsity=0.0)
    inst = type(inst)(**{**inst.__dict__, "capacity": np.array([2.0])})
    a = solve_instance(inst, "max_min_fairness", solver="highs-direct")
    assert a.explanation["gpu_price"]["t0"] > 0


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), policy=st.sampled_from(POLICIES))
def test_identical_job_classes_keep_the_optimum(seed, policy):
    rng = np.random.default_rng(seed)
    base = random_instance(rng, 6, multi_gpu=True)
    pick = rng.integers(0, 6, 30)  # 30 jobs, 6 distinct rows
    inst = type(base)(
        job_ids=tuple(f"j{i}" for i in range(30)), gpu_types=base.gpu_types, throughput=base.throughput[pick],
        scale_factor=base.scale_factor[pick], weight=base.weight[pick], capacity=base.capacity,
        steps_remaining=base.steps_remaining[pick], elapsed_time=base.elapsed_time[pick],
        attained_service=base.attained_service[pick], arrival_time=base.arrival_time[pick],
    )
    full = solve_instance(inst, policy)
    agg = compute_allocation(inst, policy, "clarabel-direct", 60.0, aggregate=True)
    assert agg.explanation["job_classes"] <= 6
    assert agg.objective == pytest.approx(full.objective, rel=1e-6)
    assert (inst.scale_factor @ agg.fractions <= inst.capacity + 1e-7).all()


@pytest.mark.parametrize("policy", POLICIES)
def test_class_solve_cache_gives_the_fresh_solves_allocation(policy):
    # The same job classes under other job ids and order: served from the cache,
    # and equal to a fresh solve; a change of capacity is a new solve.
    rng = np.random.default_rng(7)
    base = random_instance(rng, 5, multi_gpu=True)

    def jobs(pick, prefix, capacity=base.capacity):
        return type(base)(
            job_ids=tuple(f"{prefix}{i}" for i in range(len(pick))), gpu_types=base.gpu_types,
            throughput=base.throughput[pick], scale_factor=base.scale_factor[pick], weight=base.weight[pick],
            capacity=capacity, steps_remaining=base.steps_remaining[pick], elapsed_time=base.elapsed_time[pick],
            attained_service=base.attained_service[pick], arrival_time=base.arrival_time[pick],
        )

    pick = rng.integers(0, 5, 20)
    cache = ClassSolveCache()
    compute_allocation(jobs(pick, "a"), policy, "clarabel-direct", 60.0, True, cache=cache)
    again = jobs(rng.permutation(pick), "b")
    hit = compute_allocation(again, policy, "clarabel-direct", 60.0, True, cache=cache)
    fresh = compute_allocation(again, policy, "clarabel-direct", 60.0, True)
    assert cache.hits == 1
    assert hit.job_ids == fresh.job_ids and hit.status == fresh.status and hit.objective == fresh.objective
    assert np.array_equal(hit.fractions, fresh.fractions)
    assert np.array_equal(hit.effective_throughput, fresh.effective_throughput)
    assert hit.explanation == fresh.explanation
    compute_allocation(jobs(pick, "c", base.capacity + 1), policy, "clarabel-direct", 60.0, True, cache=cache)
    assert cache.hits == 1


# ---------------------------------------------------------------- published numbers / invariants


@pytest.fixture
def tiresias_run(peer_data):
    return simulate(peer_data / "tiresias" / "60_job.csv", parse_cluster(None, "16x4"), round_length=1.0)


def test_tiresias_60_jobs_have_no_queueing_and_jct_equals_duration(tiresias_run, peer_data):
    raw = pd.read_csv(peer_data / "tiresias" / "60_job.csv")
    j = tiresias_run.jobs.set_index("job_id").loc[raw["job_id"].astype(str)]
    assert np.allclose(j["jct"], raw["duration"], atol=1e-6)
    assert np.allclose(j["responsiveness"], 0.0)
    # Tiresias' simulator reports an average JCT of 178.4 s on this trace.
    assert tiresias_run.summary["avg_jct"] == pytest.approx(178.4, abs=0.05)


def test_total_gpu_seconds_equal_the_traces_work(tiresias_run, peer_data):
    raw = pd.read_csv(peer_data / "tiresias" / "60_job.csv")
    assert tiresias_run.jobs["gpu_seconds"].sum() == pytest.approx((raw["duration"] * raw["num_gpu"]).sum())
    assert tiresias_run.summary["gpu_hours"] == pytest.approx((raw["duration"] * raw["num_gpu"]).sum() / 3600)


def _small_trace(seed: int, n: int = 40, rate: float = 30.0):
    return generate_gavel(default_throughputs(), n, rate, seed=seed, multi_gpu=True)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 1000), policy=st.sampled_from(POLICIES), overhead=st.sampled_from([0.0, 30.0]))
def test_simulation_invariants_on_random_traces(seed, policy, overhead):
    r = simulate(_small_trace(seed), "v100=4,p100=4,k80=8", policy=policy, round_length=360.0,
                 restart_overhead=overhead, seed=seed)
    j = r.jobs
    assert r.summary["jobs_completed"] == len(j)  # everything finishes
    assert (j["first_start"] >= j["arrival_time"]).all()  # no job runs before it arrives
    assert (j["completion_time"] > j["first_start"]).all()
    assert r.summary["progress_violation_steps"] <= 1e-6  # progress <= throughput × time
    assert np.allclose(j["steps_done"], j["steps_total"])
    util = r.rounds[[c for c in r.rounds.columns if c.startswith("util_")]].to_numpy()
    assert (util <= 1 + 1e-9).all()  # never more GPUs than exist
    assert (r.rounds["duration"] <= 360.0 + 1e-9).all()


def test_a_job_is_never_faster_than_alone_on_its_best_gpu():
    table = default_throughputs()
    trace = _small_trace(3)
    r = simulate(trace, "v100=4,p100=4,k80=8", throughputs=table)
    T, _ = table.matrix(trace.jobs["model"], trace.jobs["scale_factor"], ("k80", "p100", "v100"))
    best = trace.jobs["steps_total"].to_numpy() / T.max(axis=1)
    jct = r.jobs.set_index("job_id").loc[trace.jobs["job_id"], "jct"].to_numpy()
    assert (jct >= best - 1e-6).all()


def test_simulation_is_deterministic_given_a_seed():
    a = simulate(_small_trace(5), "v100=4,p100=4,k80=8", seed=1)
    b = simulate(_small_trace(5), "v100=4,p100=4,k80=8", seed=1)
    pd.testing.assert_frame_equal(a.jobs, b.jobs)
    pd.testing.assert_frame_equal(a.rounds.drop(columns="solver_seconds"), b.rounds.drop(columns="solver_seconds"))


def test_heterogeneity_aware_beats_agnostic_on_gavel_stream(peer_data):
    from optsched.traces.throughputs import gavel_throughputs

    table = gavel_throughputs(peer_data)
    trace = generate_gavel(table, 260, 3.0, seed=0)
    jct = {
        p: simulate(trace, "v100=12,p100=12,k80=12", policy=p, throughputs=table, min_recompute_interval=1920.0,
                    window=(100, 200)).summary["window_avg_jct"]
        for p in POLICIES
    }
    assert jct["max_min_fairness"] < jct["max_min_fairness_agnostic"]


def test_allocator_options_reach_the_allocator():
    a = simulate(_small_trace(3, n=40), "v100=4,p100=4,k80=8", min_recompute_interval=1920.0)
    b = simulate(_small_trace(3, n=40), "v100=4,p100=4,k80=8", min_recompute_interval=1920.0,
                 allocator_options={"queue": "gavel", "type_order": "shuffle"})
    assert b.summary["jobs_completed"] == 40
    # Gavel's queue: arrivals wait for the next allocation instead of idle GPUs.
    assert b.jobs["responsiveness"].mean() > a.jobs["responsiveness"].mean()
    with pytest.raises(OptschedError, match="queue"):
        simulate(_small_trace(3, n=5), "v100=4,p100=4,k80=8", allocator_options={"queue": "nope"})
    with pytest.raises(OptschedError, match="allocator_options"):
        simulate(_small_trace(3, n=5), "v100=4,p100=4,k80=8", allocator_options={"qeue": "gavel"})


def test_restart_overhead_delays_completion():
    a = simulate(_small_trace(2), "v100=4,p100=4,k80=8")
    b = simulate(_small_trace(2), "v100=4,p100=4,k80=8", restart_overhead=60.0)
    assert b.summary["avg_jct"] > a.summary["avg_jct"]


def test_load_based_admission_holds_jobs_back_and_still_finishes_them():
    r = simulate(_small_trace(4, n=60, rate=200.0), "v100=8,p100=8,k80=8", admission="load", load_factor=1.0)
    assert r.rounds["waiting_jobs"].max() > 0
    assert r.summary["jobs_completed"] == 60


def test_recomputation_respects_minimum_interval():
    r = simulate(_small_trace(6, n=60), "v100=4,p100=4,k80=8", min_recompute_interval=1920.0)
    t = r.rounds.loc[r.rounds["recomputed"], "time"].to_numpy()
    assert (np.diff(t) >= 1920.0 - 1e-6).all()


def test_failed_jobs_leave_and_are_counted_apart():
    trace = make_trace({"arrival_time": [0.0, 10.0], "duration": [100.0, 50.0], "failed": [False, True],
                        "scale_factor": [1, 1]}, "tiresias", speed="duration")
    r = simulate(trace, parse_cluster(None, "1x2"), round_length=10.0)
    assert r.summary["jobs_completed"] == 1 and r.summary["jobs_failed"] == 1
    assert r.jobs.loc[1, "jct"] == pytest.approx(50.0)


# ---------------------------------------------------------------- bad input


def test_unknown_job_type_names_the_row(tmp_path):
    p = tmp_path / "t.trace"
    p.write_text("NoSuchModel\tcmd\tdir\t-n\t1\t100\t1\t1\t-1\t0\n")
    with pytest.raises(OptschedError, match=r"row 1: unknown job type 'NoSuchModel'"):
        simulate(p)


def test_job_the_cluster_can_never_run_is_an_error_or_a_counted_skip():
    trace = _small_trace(3, n=30)  # seed 3 draws one 8-GPU job in its first 30
    wide = int(np.argmax(trace.jobs["scale_factor"].to_numpy()))
    assert trace.jobs["scale_factor"].iat[wide] == 8
    with pytest.raises(OptschedError, match=rf"row {trace.jobs['row'].iat[wide]}: job .* can never run"):
        simulate(trace, "v100=4,p100=4,k80=4")
    r = simulate(trace, "v100=4,p100=4,k80=4", skip_unrunnable=True)
    n_wide = int((trace.jobs["scale_factor"] > 4).sum())
    assert r.summary["skipped_jobs"] == n_wide and r.summary["jobs"] == 30 - n_wide


def test_goodput_workload_under_a_policy_needing_lengths_is_refused_by_name(peer_data):
    with pytest.raises(OptschedError, match="^policy: srtf needs job lengths"):
        simulate(peer_data / "pollux" / "workloads" / "workload-1.csv", policy="srtf")


@pytest.mark.parametrize("spec", ["v100=0", "v100", "v100=x", ""])
def test_bad_cluster_spec_is_a_clear_error(spec):
    with pytest.raises(OptschedError, match="--cluster"):
        parse_cluster(spec)


# ---------------------------------------------------------------- CLI


def _cli():
    import optsched.cli  # noqa: F401  (registers the commands)
    from typer.testing import CliRunner

    from optsched.cli import app

    return CliRunner(), app


def test_cli_simulate_json_has_the_summary_keys(peer_data):
    runner, app = _cli()
    res = runner.invoke(app, ["simulate", str(peer_data / "tiresias" / "60_job.csv"), "--servers", "16x4",
                              "--round-length", "1", "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)
    for key in ("avg_jct", "median_jct", "p99_jct", "makespan", "jobs_completed", "avg_responsiveness", "solver_seconds"):
        assert key in s
    assert s["avg_jct"] == pytest.approx(178.4, abs=0.05)


def test_cli_simulate_writes_tables_and_plots(tmp_path, peer_data):
    runner, app = _cli()
    res = runner.invoke(app, ["simulate", str(peer_data / "tiresias" / "60_job.csv"), "--servers", "16x4",
                              "--out", str(tmp_path), "--plot", "--quiet"])
    assert res.exit_code == 0, res.output
    for f in ("jobs.csv", "jobs.parquet", "rounds.csv", "rounds.parquet", "summary.json", "jct_cdf.png", "utilization.png"):
        assert (tmp_path / f).stat().st_size > 0
    assert len(pd.read_parquet(tmp_path / "jobs.parquet")) == 60


def test_cli_compare_prints_one_table(peer_data):
    runner, app = _cli()
    res = runner.invoke(app, ["compare", str(peer_data / "tiresias" / "60_job.csv"), "--servers", "16x4",
                              "--policies", "max_min_fairness,max_min_fairness_agnostic", "--json"])
    assert res.exit_code == 0, res.output
    assert set(json.loads(res.output)) == set(POLICIES)


def test_cli_bad_input_exits_2_with_one_line(tmp_path):
    runner, app = _cli()
    p = tmp_path / "t.trace"
    p.write_text("NoSuchModel\tcmd\tdir\t-n\t1\t100\t1\t1\t-1\t0\n")
    res = runner.invoke(app, ["simulate", str(p), "--quiet"])
    assert res.exit_code == 2
    res = runner.invoke(app, ["simulate", "--cluster", "v100=-3", "--quiet"])
    assert res.exit_code == 2


def test_remaining_iterations_cache_is_not_fooled_by_a_reused_id(monkeypatch):
    """The gains cache was keyed by id(application): once an application was freed, a new
    one could get its id and read its numbers (237 of 300 lookups wrong in a repro)."""
    from types import SimpleNamespace

    from optsched.sim import stages

    def app(epochs: int, scale: float):
        return SimpleNamespace(max_epochs=epochs, init_batch_size=64.0, progress_target=lambda k: float(k),
                               grad_stats=lambda batch, k: (scale, 0.0))

    job = SimpleNamespace(epoch=0, progress=0.0)
    b = app(5, 1.0)
    fresh = stages.remaining_iterations(job, b, 64.0)
    monkeypatch.setattr(stages, "_GAINS", {})
    other = app(50, 1.0)  # another application's entry under b's id (as after id reuse)
    stages.remaining_iterations(job, other, 64.0)
    stages._GAINS[(id(b), 64.0)] = stages._GAINS.pop((id(other), 64.0))
    assert stages.remaining_iterations(job, b, 64.0) == fresh


def test_an_unknown_application_names_its_first_row_and_every_profiled_one(peer_data, tmp_path):
    """It named the alphabetically first unknown application's row and listed only the trace's own
    profiled applications (empty when none was known)."""
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\nj1,0,cifar10,1,128\nj2,10,zzz,1,128\n"
                    "j3,20,aaa,1,128\n")
    with pytest.raises(OptschedError) as e:
        simulate(path, "gpu=4")
    assert str(e.value).endswith("row 3: no goodput profile for application 'zzz' (profiled for gpu: bert, cifar10, "
                                 "deepspeech2, imagenet, ncf, yolov3)")


def test_an_elastic_job_wider_than_the_cluster_is_named_by_its_width(peer_data, tmp_path):
    """Under a rigid policy a 12-replica Pollux job on 8 GPUs was said to have 'no throughput on any GPU type'."""
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\ndeepspeech2-3,262,deepspeech2,12,640\n")
    with pytest.raises(OptschedError, match=r"can never run: needs 12 GPUs of one type; the cluster has 8 gpu"):
        simulate(path, "gpu=8", policy="tiresias")


@pytest.mark.parametrize("name", ["", "..", "../pollux", "profiles/cifar10"])
def test_an_application_name_is_one_profile_folder(peer_data, tmp_path, name):
    """An empty application loaded the profiles' root ("no validation-*.csv curves in ..."),
    and a path reached outside it; both are unknown applications, named by their row."""
    path = tmp_path / "w.csv"
    path.write_text(f"name,time,application,num_replicas,batch_size\nj1,0,{name},1,128\n")
    with pytest.raises(OptschedError, match=rf"row 2: no goodput profile for application {re.escape(repr(name))}"):
        simulate(path, "gpu=4")
