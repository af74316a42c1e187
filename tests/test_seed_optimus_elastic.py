"""Optimus on elastic (Pollux) jobs in the simulator: GPU counts by marginal
gain from a fixed-batch speed model and a convergence model; the batch size
never adapts."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from optsched.formulations.optimus import fixed_batch_split
from optsched.sim.goodput_jobs import GoodputJob
from optsched.sim.goodput_jobs import fixed_batch_split as scalar_split


@pytest.fixture(scope="module")
def apps():
    from conftest import peer_data_dir

    from optsched.goodput.profiles import pollux_applications

    root = peer_data_dir() / "pollux" / "profiles"
    if not root.is_dir():
        pytest.skip(f"peer data not found at {root} (set OPTSCHED_PEER_DATA)")
    return pollux_applications(peer_data_dir())


def test_vectorized_split_equals_the_simulators_rule(apps):
    for app, batch, g in itertools.product(apps.values(), (8, 96, 320, 640, 2048, 32768), (1, 2, 3, 4, 8, 16)):
        b = min(batch, app.max_batch_size)
        a, s = fixed_batch_split(np.array([b]), np.array([g]), np.array([app.init_batch_size]),
                                 np.array([app.max_batch_size]), np.array([app.max_local_bsz]))
        assert (int(a[0]), int(s[0])) == scalar_split(app, b, g), (app.name, batch, g)


def test_remaining_iterations_known_answers(apps):
    from optsched.sim.stages import remaining_iterations

    app = apps["cifar10"]
    # at the initial batch size the statistical gain is 1: iterations left = progress left
    job = GoodputJob(app.init_batch_size)
    assert remaining_iterations(job, app, app.init_batch_size) == pytest.approx(app.total_progress, rel=1e-9)
    job.epoch, job.progress = 3, app.progress_target(3) + 5.0
    assert remaining_iterations(job, app, app.init_batch_size) == pytest.approx(app.total_progress - job.progress,
                                                                               rel=1e-9)
    # a larger batch gains more per iteration: fewer iterations, never more progress than left
    big = remaining_iterations(job, app, 4 * app.init_batch_size)
    assert 0 < big < app.total_progress - job.progress
    job.epoch, job.progress = app.max_epochs, app.total_progress
    assert remaining_iterations(job, app, 4 * app.init_batch_size) == 0.0


def _workload(tmp_path, rows):
    df = pd.DataFrame(rows, columns=["name", "time", "application", "num_replicas", "batch_size"])
    df.to_csv(tmp_path / "w.csv", index=False)
    return tmp_path / "w.csv"


def test_optimus_in_the_simulator_keeps_batch_sizes_and_limits(apps, tmp_path, monkeypatch):
    from optsched.sim import simulate
    import optsched.formulations.optimus as opt

    seen = []
    real = opt.allocate

    def spy(inst, **kw):
        a = real(inst, **kw)
        seen.append((inst, a))
        return a

    monkeypatch.setattr(opt, "allocate", spy)
    path = _workload(tmp_path, [("cifar10-0", 0, "cifar10", 2, 512), ("ncf-1", 0, "ncf", 1, 32768),
                                ("bert-2", 30, "bert", 4, 96), ("cifar10-3", 60, "cifar10", 1, 128)])
    r = simulate(path, "gpu=8", policy="optimus", seed=0, max_time=3 * 3600)
    assert seen
    batch = {"cifar10-0": 512, "ncf-1": 32768, "bert-2": 96, "cifar10-3": 128}
    for inst, a in seen:
        fb = dict(zip(inst.job_ids, inst.extras["fixed_batch_size"]))
        counts = dict(zip(inst.job_ids, a.gpu_counts.sum(axis=1)))
        assert a.gpu_counts.sum() <= 8
        for jid, b in fb.items():
            assert b == min(batch[jid], apps[jid.split("-")[0]].max_batch_size)
            app = apps[jid.split("-")[0]]
            assert counts[jid] <= (1 if app.name == "ncf" else b // app.min_local_bsz)
        assert all(c >= 1 for c in counts.values())  # 8 GPUs, at most 4 jobs: everyone runs
        # the global batch a placed job runs at is its own batch size (not re-chosen)
        for jid, row in a.explanation["batch_size"].items():
            app = apps[jid.split("-")[0]]
            assert row["batch_size"] >= fb[jid] * 0.5 and row["batch_size"] <= max(fb[jid], app.max_batch_size)
    assert r.summary["policy"] == "optimus"


def test_marginal_gain_prefers_the_job_that_scales(apps):
    """Two fixed-batch jobs, one profiled to scale linearly and one that does
    not gain from a second GPU: after one GPU each, the spare GPUs go to the first."""
    from optsched.model import ElasticInfo, Instance
    from optsched.policy import solve_instance

    n, k = 2, 1
    # params: alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma (Pollux's throughput model)
    scal = np.array([0.0, 0.01, 1e-4, 0.0, 1e-4, 0.0, 1.0])  # compute-bound: step time ∝ micro-batch
    flat = np.array([0.0, 0.01, 5.0, 5.0, 5.0, 5.0, 1.0])  # heavy network: more GPUs slow it down
    el = ElasticInfo(is_elastic=np.ones(n, bool), params=np.stack([scal, flat])[:, None, :],
                     grad_sqr=np.ones(n), grad_var=np.ones(n), init_batch_size=np.full(n, 64.0),
                     max_batch_size=np.full(n, 4096.0), min_local_bsz=np.full(n, 16.0), max_local_bsz=np.full(n, 512.0),
                     min_gpus=np.ones(n), max_gpus=np.full(n, 8.0), num_restarts=np.zeros(n),
                     restart_seconds=np.zeros(n), current_gpus=np.zeros((n, k), int), current_nodes=np.zeros((n, k), int),
                     server_gpus=np.array([4]))
    inst = Instance(job_ids=("a", "b"), gpu_types=("gpu",), throughput=np.array([[100.0], [100.0]]),
                    scale_factor=np.ones(n), weight=np.ones(n), capacity=np.array([4.0]),
                    steps_remaining=np.full(n, np.nan), elapsed_time=np.zeros(n), attained_service=np.zeros(n),
                    arrival_time=np.zeros(n), elastic=el,
                    extras={"fixed_batch_size": np.array([256.0, 256.0]), "remaining_iterations": np.array([1e4, 1e4])})
    a = solve_instance(inst, "optimus")
    assert list(a.gpu_counts[:, 0]) == [2, 1] or list(a.gpu_counts[:, 0]) == [3, 1]
    assert a.gpu_counts[0, 0] > a.gpu_counts[1, 0]
