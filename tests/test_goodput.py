"""Goodput model, JAX fit vs scipy least_squares, batch-size choice, profiles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from optsched.goodput.bootstrap import CROSS_JOB, MEASURED, OWN_RATIO, fill_params
from optsched.goodput.fit import Observations, _padded, bucket_size, fit_params, fit_reference
from optsched.goodput.model import GoodputModel, accum_time, efficiency, iteration_time
from optsched.model import OptschedError, parse_snapshot

CONFIGS = [(1, 1), (1, 2), (1, 3), (1, 4), (2, 5), (2, 8), (3, 12), (4, 16)]


def synthetic(params, batch=(8, 16, 32, 64, 128), noise=0.0, seed=0) -> Observations:
    rng = np.random.default_rng(seed)
    rows = np.array([(n, r, b) for n, r in CONFIGS for b in batch], dtype=float)
    t_acc = accum_time(params, rows[:, 2])
    step = iteration_time(params, rows[:, 0], rows[:, 1], rows[:, 2], 0)
    if noise:
        t_acc = t_acc * np.exp(rng.normal(0, noise, len(rows)))
        step = np.maximum(step * np.exp(rng.normal(0, noise, len(rows))), t_acc * 1.0001)
    return Observations(rows[:, 0], rows[:, 1], rows[:, 2], t_acc, step)


params_strategy = st.tuples(
    st.floats(0.005, 0.2), st.floats(1e-4, 0.01), st.floats(0.05, 0.5), st.floats(1e-3, 0.02),
    st.floats(0.005, 0.1), st.floats(1e-4, 0.005), st.floats(1.2, 3.0),
).map(np.array)
# Network terms comparable to compute, so every parameter is identifiable.
identifiable = st.tuples(
    st.floats(0.01, 0.05), st.floats(2e-4, 1e-3), st.floats(0.05, 0.2), st.floats(0.005, 0.02),
    st.floats(0.03, 0.1), st.floats(0.003, 0.01), st.floats(1.5, 2.5),
).map(np.array)


def _loss_at(params, obs):
    """The peers' objective evaluated directly (numpy), an independent check of both fits."""
    t_acc = accum_time(params, obs.atomic_bsz)
    step = iteration_time(params, obs.nodes, obs.replicas, obs.atomic_bsz, 0)
    rmse = lambda a, b: np.sqrt(np.mean((np.log(a) - np.log(b)) ** 2))  # noqa: E731
    return (rmse(t_acc, obs.accum_time) + rmse(step, obs.step_time) + 1e-3 * (params[6] - 1) ** 2
            + 1e-2 * ((params[3] / params[2]) ** 2 + (params[5] / params[4]) ** 2))


@settings(max_examples=5, deadline=None)
@given(identifiable)
def test_jax_fit_and_least_squares_recover_known_parameters(true):
    obs = synthetic(true)
    jx, ref = fit_params(obs), fit_reference(obs)
    # Both recover the generating parameters (noise-free data, every parameter identifiable).
    # gamma (the overlap) is the least identified: 10 %; the rest 5 %.
    rtol = np.r_[[0.05] * 6, 0.10]
    for p in (jx.params, ref.params):
        assert (np.abs(p - true) <= rtol * true).all(), (p, true)
    pred = lambda p: iteration_time(p, obs.nodes, obs.replicas, obs.atomic_bsz, 0)  # noqa: E731
    np.testing.assert_allclose(pred(jx.params), obs.step_time, rtol=1e-3)


@settings(max_examples=5, deadline=None)
@given(params_strategy)
# Found by a randomized run: BFGS stopped at γ ≈ 1 with 4× the reference loss
# (fixed by data-driven starts per network term and a multi-start, fit.STARTS).
@example(np.array([0.1484375, 1.78807462e-04, 0.5, 0.00390625, 0.015625, 0.00390625, 2.0]))
@example(np.array([0.125, 1.78807462e-04, 0.5, 0.00390625, 0.0625, 0.00390625, 3.0]))
def test_jax_fit_reaches_the_reference_optimum_on_any_parameters(true):
    obs = synthetic(true)
    jx, ref = fit_params(obs), fit_reference(obs)
    # Weakly identified network terms may differ; the objective and the predictions may not.
    assert _loss_at(jx.params, obs) <= max(_loss_at(ref.params, obs), _loss_at(true, obs)) * 1.5 + 2e-3
    pred = lambda p: iteration_time(p, obs.nodes, obs.replicas, obs.atomic_bsz, 0)  # noqa: E731
    np.testing.assert_allclose(pred(jx.params), obs.step_time, rtol=0.02)


def test_noisy_fit_agrees_with_least_squares_reference():
    true = np.array([0.03, 0.002, 0.2, 0.01, 0.04, 0.002, 2.0])
    obs = synthetic(true, noise=0.03, seed=3)
    jx, ref = fit_params(obs), fit_reference(obs)
    # Same objective, two solvers: same optimum up to solver tolerance.
    assert jx.loss <= ref.loss * 1.01 + 1e-9
    pred = lambda p: iteration_time(p, obs.nodes, obs.replicas, obs.atomic_bsz, 0)  # noqa: E731
    np.testing.assert_allclose(pred(jx.params), pred(ref.params), rtol=0.02)


def test_padding_to_a_larger_bucket_does_not_change_the_fit():
    from optsched.goodput.fit import _compiled_fit, _to_unconstrained, frozen_parameters, initial_params

    obs = synthetic(np.array([0.02, 0.004, 0.15, 0.01, 0.03, 0.004, 2.0]), batch=(16,))  # 8 rows
    free, fixed = frozen_parameters(obs)
    u0 = _to_unconstrained(np.where(free, initial_params(obs), fixed))
    fit = _compiled_fit()
    a, la = fit(u0, free, fixed, *_padded(obs, bucket_size(len(obs))))
    b, lb = fit(u0, free, fixed, *_padded(obs, 64))
    # Masked rows contribute nothing: same objective value; (reduction order may move
    # weakly identified parameters a little, never the predictions).
    np.testing.assert_allclose(float(la), float(lb), rtol=1e-2, atol=1e-5)
    pred = lambda p: iteration_time(np.asarray(p), obs.nodes, obs.replicas, obs.atomic_bsz, 0)  # noqa: E731
    np.testing.assert_allclose(pred(a), pred(b), rtol=1e-2)
    assert not free[0]  # one micro-batch size: alpha_c frozen, as the peers do


def test_unidentifiable_parameters_are_frozen_and_prior_enforced():
    obs = synthetic(np.array([0.02, 0.004, 0.15, 0.01, 0.03, 0.004, 2.0]))
    single_node = Observations(*(a[obs.nodes == 1] for a in (obs.nodes, obs.replicas, obs.atomic_bsz, obs.accum_time, obs.step_time)))
    p = fit_params(single_node).params
    assert p[2] >= 1.1 * p[4] - 1e-12 and p[3] >= 1.1 * p[5] - 1e-12


def test_too_few_observations_fall_back_to_the_profile_prior():
    empty = Observations(*(np.zeros(0) for _ in range(5)))
    prior = np.array([0.02, 0.004, 0.15, 0.01, 0.03, 0.004, 2.0])
    res = fit_params(empty, prior=prior)
    assert res.used_prior and "prior" in res.message
    np.testing.assert_array_equal(res.params, prior)
    bad = Observations(np.ones(2), np.ones(2), np.ones(2), np.array([-1.0, np.nan]), np.ones(2))
    with pytest.raises(OptschedError, match="usable observations"):
        fit_params(bad)


@settings(max_examples=25, deadline=None)
@given(params_strategy, st.floats(0.1, 10), st.floats(0.0, 50), st.sampled_from([(1, 1), (1, 2), (1, 4), (2, 8), (4, 16)]))
# Found by CI and randomized runs: refining only the best coarse candidate missed a higher tooth.
@example(np.array([0.125, 1e-4, 0.5, 0.015625, 0.0625, 0.00390625, 2.0]), 0.125, 2.0, (4, 16))
@example(np.array([0.125, 0.001953125, 0.5, 0.015625, 0.0625, 0.00390625, 1.25]), 0.125, 17.0, (4, 16))
def test_chosen_batch_size_maximizes_goodput_against_a_grid(params, sqr, var, config):
    nodes, replicas = config
    m = GoodputModel.single(params, sqr, var, init_batch_size=64, max_batch_size=8192, local_bsz=(8, 256))
    g, b, s = m.optimize(np.array([[nodes]]), np.array([[replicas]]))
    # The returned (micro-batch, accumulation) really has that goodput...
    np.testing.assert_allclose(m.goodput(np.array([nodes]), np.array([replicas]), b[0], s[0]), g[0], rtol=1e-9)
    # ...and no batch size on a 4,000-point grid does better than the 50 candidates by > 1 %.
    M = np.geomspace(max(64, 8 * replicas), 8192, 4000)
    local = M / replicas
    steps = np.maximum(np.ceil(local / 256 - 1e-8) - 1, 0)
    steps = np.where((replicas == 1) & (local > 64 + 1e-8), np.maximum(steps, 1), steps)
    micro = np.ceil(local / (steps + 1) - 1e-8)
    ok = (micro >= 8) & (micro <= 256)
    grid = np.where(ok, m.goodput(np.full(len(M), nodes), np.full(len(M), replicas), micro[None, :], steps[None, :])[0], 0)
    assert g[0, 0] >= grid.max() * 0.99
    assert g[0, 0] <= grid.max() * (1 + 1e-9) or ok.sum() == 0


def test_efficiency_is_the_gradient_noise_scale_formula():
    sqr, var, M0 = 2.0, 30.0, 128.0
    phi = M0 * var / sqr
    M = np.array([128.0, 512.0, 4096.0])
    np.testing.assert_allclose(efficiency(sqr, var, M0, M), (phi + M0) / (phi + M))


def test_bootstrap_scales_a_measured_type_by_the_job_throughput_ratio():
    p = np.array([0.02, 0.004, 0.15, 0.01, 0.03, 0.004, 2.0])
    params = np.full((3, 2, 7), np.nan)
    params[0, 0] = p  # job 0 measured on type 0 only, throughput says type 1 is 2x faster
    params[1] = [p, p / np.r_[[3.0] * 6, 1.0]]  # job 1 measured on both: type 1 is 3x faster
    params[1, 1, 6] = 2.0
    params[2, 0] = p  # job 2: no throughput on type 1 -> cross-job factor (3x)
    T = np.array([[1.0, 2.0], [1.0, 3.0], [1.0, 0.0]])
    filled, source = fill_params(params, T, np.full(3, 32.0))
    np.testing.assert_allclose(filled[0, 1, :6], p[:6] / 2)
    np.testing.assert_allclose(filled[2, 1, :6], p[:6] / 3, rtol=1e-9)
    assert source[0, 1] == OWN_RATIO and source[2, 1] == CROSS_JOB and source[1, 1] == MEASURED


def test_batch_size_limits_that_exclude_every_configuration_are_rejected():
    snap = {
        "cluster": {"gpus": {"t4": 8}},
        "jobs": [{"id": "a", "throughput": {"t4": 1.0},
                  "goodput": {"init_batch_size": 64, "max_batch_size": 128, "local_bsz": [256, 512]}}],
    }
    with pytest.raises(OptschedError, match=r"jobs\[0\]\.goodput.*exclude every configuration"):
        parse_snapshot(snap)


def test_pollux_profiles_fit_within_published_error(peer_data):
    from optsched.goodput.profiles import fit_error, pollux_applications

    apps = pollux_applications(peer_data)
    errors = {name: fit_error(app, "gpu") for name, app in apps.items()}
    # Pollux reports <= 10 % average iteration-time error for its model (OSDI'21 §5).
    assert set(errors) == {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
    assert all(e <= 0.10 for e in errors.values()), errors


def test_sia_profiles_fit_per_gpu_type(peer_data):
    from optsched.goodput.profiles import fit_error, sia_applications

    apps = sia_applications(peer_data)
    errors = {(n, g): fit_error(a, g) for n, a in apps.items() for g in a.params}
    assert len(errors) == 18
    assert np.mean(list(errors.values())) <= 0.10, errors
