"""The batch-size search shared across jobs of one application (GoodputModel.optimize) against
the plain per-job search it replaced, bit for bit, on many random instances."""

from __future__ import annotations

import numpy as np
import pytest

from optsched.goodput.model import N_BATCH_CANDIDATES, GoodputModel, _EPS, efficiency, iteration_time


def per_job_search(model: GoodputModel, nodes, replicas, params=None):
    """The search one job at a time (each job's candidates and throughput computed for it alone):
    the code GoodputModel.optimize had before jobs shared their units."""
    n = model.n
    nodes = np.broadcast_to(np.asarray(nodes, dtype=float), np.broadcast_shapes(np.shape(nodes), np.shape(replicas)))
    replicas = np.broadcast_to(np.asarray(replicas, dtype=float), nodes.shape)
    C = nodes.shape[1]
    col = lambda a: np.asarray(a, dtype=float)[:, None]  # noqa: E731
    r = np.maximum(replicas, 1.0)
    lo = np.maximum(col(model.init_batch_size), col(model.min_local_bsz) * r)
    hi = np.broadcast_to(col(model.max_batch_size), (n, C))
    feasible = (replicas >= 1) & (lo <= hi * (1 + 1e-9))
    hi = np.maximum(hi, lo)
    bmax = col(model.max_local_bsz)[..., None]
    n3, r3 = nodes[..., None], r[..., None]
    P = model.params[:, None, None, :] if params is None else np.asarray(params, dtype=float)[:, :, None, :]

    def evaluate(M):
        local = M / r3
        if model.accumulation:
            s = np.ceil(local / bmax - _EPS) - 1
            single = (r3 == 1) & (local > col(model.init_batch_size)[..., None] + _EPS)
            s = np.maximum(np.where(single, np.maximum(s, 1), s), 0)
        else:
            s = np.zeros_like(local)
        b = np.ceil(local / (s + 1) - _EPS)
        batch = r3 * b * (s + 1)
        E = efficiency(model.grad_sqr[:, None, None], model.grad_var[:, None, None],
                       model.init_batch_size[:, None, None], batch)
        g = batch / iteration_time(P, n3, r3, b, s) * E
        ok = (b >= col(model.min_local_bsz)[..., None]) & (b <= bmax) & feasible[..., None]
        return np.where(ok & np.isfinite(g), g, 0.0), b, s

    u = np.linspace(0.0, 1.0, N_BATCH_CANDIDATES)
    log_lo, log_hi = np.log(lo)[..., None], np.log(hi)[..., None]
    M = np.exp(log_lo + (log_hi - log_lo) * u)
    g, b, s = evaluate(M)
    top = np.argsort(-g, axis=-1, kind="stable")[..., :3]
    v = np.linspace(0.0, 1.0, 20)
    near_lo = np.log(np.take_along_axis(M, np.maximum(top - 1, 0), axis=-1))[..., None]
    near_hi = np.log(np.take_along_axis(M, np.minimum(top + 1, N_BATCH_CANDIDATES - 1), axis=-1))[..., None]
    M2 = np.exp(near_lo + (near_hi - near_lo) * v).reshape(*M.shape[:-1], -1)
    ends = r3 * bmax * np.arange(1, 17)
    M3 = np.clip(ends, lo[..., None], hi[..., None])
    g, b, s = (np.concatenate(parts, axis=-1) for parts in zip((g, b, s), evaluate(M2), evaluate(M3)))
    best = np.argmax(g, axis=-1)[..., None]
    take = lambda a: np.take_along_axis(a, best, axis=-1)[..., 0]  # noqa: E731
    return take(g), take(b).astype(int), take(s).astype(int)


def _random_case(seed: int):
    """Jobs of a few applications (shared parameters and batch limits, own gradient statistics:
    the case the sharing serves) beside jobs of their own, on random configurations."""
    rng = np.random.default_rng(seed)
    apps = int(rng.integers(1, 5))
    n = int(rng.integers(1, 40))
    C = int(rng.integers(1, 12))
    base = np.column_stack([rng.uniform(0.005, 0.3, apps), rng.uniform(1e-4, 0.05, apps), rng.uniform(0.01, 1.5, apps),
                            rng.uniform(1e-4, 0.03, apps), rng.uniform(0.005, 0.4, apps),
                            rng.uniform(1e-4, 0.1, apps), rng.uniform(1.0, 3.5, apps)])
    m0 = rng.choice([32.0, 64.0, 128.0, 256.0], apps)
    app = rng.integers(0, apps, n)
    own = rng.random(n) < 0.2  # a few jobs with parameters of their own
    params = base[app] * np.where(own[:, None], rng.uniform(0.8, 1.2, (n, 7)), 1.0)
    model = GoodputModel(
        params=params, grad_sqr=rng.choice([0.0, 1e-3, 0.02, 1.0], n) * rng.uniform(0.5, 2, n),
        grad_var=rng.choice([0.0, 0.05, 1.0, 30.0], n) * rng.uniform(0.5, 2, n),
        init_batch_size=m0[app], max_batch_size=m0[app] * rng.choice([1.0, 8.0, 64.0], apps)[app],
        min_local_bsz=rng.choice([1.0, 4.0, 16.0], apps)[app], max_local_bsz=rng.choice([32.0, 64.0, 256.0], apps)[app],
        accumulation=bool(seed % 5),
    )
    replicas = rng.choice([0.0, 1.0, 2.0, 3.0, 4.0, 8.0, 16.0, 64.0], C)
    nodes = np.maximum(np.ceil(replicas / rng.choice([1, 4, 8], C)), 1.0)
    per_type = rng.uniform(0.5, 2.0, (apps, C, 1)) * np.ones(7)  # parameters per configuration (GPU type)
    P = params[:, None, :] * per_type[app]
    return model, np.broadcast_to(nodes, (n, C)), np.broadcast_to(replicas, (n, C)), P, rng


@pytest.mark.parametrize("chunk", range(4))
def test_shared_search_is_the_per_job_search_bit_for_bit(chunk):
    for seed in range(chunk * 100, chunk * 100 + 100):
        model, nodes, replicas, P, rng = _random_case(seed)
        for params in (None, P):
            want = per_job_search(model, nodes, replicas, params)
            got = model.optimize(nodes, replicas, params=params)
            for w, g in zip(want, got):
                np.testing.assert_array_equal(g, w, err_msg=f"seed {seed}")
        # a subset of the configurations per job: those the same, the rest 0
        cols = rng.random(nodes.shape) < 0.6
        got = model.optimize(nodes, replicas, params=P, columns=cols)
        for w, g in zip(per_job_search(model, nodes, replicas, P), got):
            np.testing.assert_array_equal(g[cols], w[cols], err_msg=f"seed {seed}")
            assert not g[~cols].any()


def test_shared_search_on_profile_jobs():
    """Sia's applications at many epochs on Sia's cluster: the shared search equals the per-job one."""
    pytest.importorskip("pandas")
    from optsched.bench.profile_instances import sia_instances
    from optsched.formulations import configurations as C

    try:
        inst = sia_instances(256, 128, seed=3)[0]
    except Exception as e:  # noqa: BLE001  (the peer data is optional)
        pytest.skip(f"Sia's profiles not available: {e}")
    gm = C.goodput_matrix(inst, cache=C.GoodputCache())
    cfg = gm.configs
    P = np.nan_to_num(gm.params[:, cfg.gpu_type, :], nan=1.0)
    shape = (inst.n, len(cfg.gpus))
    nodes, gpus = np.broadcast_to(cfg.nodes, shape), np.broadcast_to(cfg.gpus, shape)
    for w, g in zip(per_job_search(gm.model, nodes, gpus, P), gm.model.optimize(nodes, gpus, params=P)):
        np.testing.assert_array_equal(g, w)
