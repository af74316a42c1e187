"""The same Saturn workload through Sia's own simulator and through ``optsched simulate`` (by
hand, never in CI): per job JCT on both sides, per round who ran on which GPU type with how
many GPUs, and the first divergence named.

    # Sia's artifact (github.com/siasosp23/artifacts, ``sia-simulator/``) OUTSIDE the project;
    # the `fetch` tool's mirror lacks two unused large CSVs, so leave them out of the archive:
    mkdir -p /work/peers/sia_sim && git --git-dir=<mirror>/repo archive HEAD sia-simulator \\
        ':(exclude)sia-simulator/traces/helios_saturn.csv' ':(exclude)sia-simulator/traces/philly.csv' \\
        | tar -x -C /work/peers/sia_sim
    # its goodput.py imports autograd; its MILP asks cvxpy for CBC (cylp ships CBC in its wheel):
    /work/peers/venv/bin/pip install --no-deps --target /work/peers/pylib autograd
    /work/peers/venv/bin/pip install --no-deps --target /work/peers/pylib_cylp cylp
    OPENBLAS_NUM_THREADS=1 python bench/sia_sim_side_by_side.py --workload 1 --jobs 40

The peer side runs in a subprocess of the peer venv (``--python``; this file with
``--worker``), so nothing of Sia's is imported here. It is Sia's own driver,
``multi_simulator.multi_simulate``, with the arguments of the artifact's
``run_experiment.sh`` for Sia (``--policy=sia --policy_p_val=-0.5 --mip_lambda_a=0.01
--mip_lambda_n=1.1 --interval=60 --project_throughput --share_max_replicas``) on its default
cluster (``simulator_config.py``: 6 × 4 T4 "aws", 2 × 8 A100 "dgx-ext", 3 × 8 RTX 2080Ti
"rtx"), with two changes: CBC runs on one thread (the artifact asks for 8; this machine has 2
shared cores, and a multi-threaded branch and bound need not return the same answer twice)
and its per-round console table goes to /dev/null. ``Cluster.step`` is wrapped to record,
after each step, the time and every job's (GPU type, GPUs) for the next interval.

optsched's side is ``bench/fidelity_sia.py``'s configuration of ``sia`` (p = -0.5,
λ_n = 1.1, 60 s rounds, per-application restore seconds, the same 64 GPUs as servers) on
the same CSV (``traces/pollux.py`` reads Sia's workloads as they are). ``--jobs N`` keeps the
first N jobs of the workload (in arrival order) on both sides: Sia's simulator costs
seconds per round on a loaded machine, so a whole workload takes tens of minutes.

Grids: Sia's simulator steps every job 60 s from t = 0 and then decides, so a job that
arrives at t is first placed at the next multiple of 60 s; optsched's rounds start at the
first arrival. The variant ``grid`` runs optsched with every arrival moved up to Sia's grid
(JCTs still counted from the true arrival), which removes that difference; with the
first arrival on the grid and no round ending early, the two sides' rounds then start at
the same times.

``--variants``: optsched runs, each ``plain`` or a ``+``-joined set of ``grid`` and bench
emulations of Sia's simulator (patched for the one run, never optsched options; each
function's docstring says what it reproduces): ``ratios`` (Sia's cross-type projection
ratio), ``round`` (its MILP's 2-decimal utilities), ``flat`` (its view of a job that has
never run), ``fit`` (the peers' single L-BFGS-B throughput fit), ``eager`` (refit on every
new observation, batch re-chosen every interval), ``mbs`` (a probe: yolov3's policy-side
micro-batch limit at Sia's A100 value), ``types`` (Sia's per-type micro-batch limits in the
policy's goodput table), ``pin`` (a job restoring at a decision keeps its configuration).
docs/results/fidelity.md has the table.

Output: per-job JCT table (``--out DIR`` writes it as CSV), average JCT on each side and the
difference, restarts per job on each side, the first round whose job → (type, GPUs) differs,
and the first job (in arrival order) whose JCT differs by more than 1 %, GPU-rounds per
application and GPU type on each side.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

PEER = Path(os.environ.get("OPTSCHED_PEER_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
SIA_ARGS = {"policy": "sia", "policy_p_val": -0.5, "mip_lambda_a": 0.01, "mip_lambda_n": 1.1, "interval": 60,
            "project_throughputs": True, "share_max_replicas": True, "disable_bsz_tuning": False,
            "cluster_scale": None, "oracle_num_nodes": 0, "oracle_num_replicas": 0, "output": None, "debug": False}
INTERVAL = 60.0


def workload_subset(workload: int, jobs: int | None, out: Path) -> Path:
    """The first ``jobs`` rows of Saturn workload ``workload`` (arrival order), as Sia's CSV."""
    import pandas as pd

    df = pd.read_csv(PEER / "sia" / "workloads" / "saturn" / f"workload-{workload}.csv")
    df = df.sort_values("time", kind="stable")
    if jobs:
        df = df.head(jobs)
    path = out / f"saturn-{workload}-{len(df)}.csv"
    df.to_csv(path, index=False)
    return path


# ---------------------------------------------------------------- Sia's side (peer venv)

def sia_simulate(root: Path, extra: list[str], workload: str) -> dict:
    """Sia's multi_simulate on ``workload``; per-job JCT, restarts, per-round job → (type, GPUs)."""
    sys.path[:0] = [str(root)]
    sys.path.extend(extra)
    np.int = int  # goodput.py's numpy-1 alias (np.zeros_like(..., dtype=np.int))
    import pandas as pd

    if not hasattr(pd.DataFrame, "append"):  # applications.py's off-profile interpolation (pandas < 2)
        pd.DataFrame.append = lambda self, other, ignore_index=False: pd.concat([self, other],
                                                                                 ignore_index=ignore_index)
    import cluster as sia_cluster
    import multi_simulator
    import simulator_config

    simulator_config.sia_solver_num_threads = 1
    simulator_config.sia_solver_verbose = False  # (CBC's log only)
    simulator_config.num_parallel_jobs = 1
    rounds, jobs_seen = [], {}
    inner = sia_cluster.Cluster.step

    def step(self, seconds=60):
        inner(self, seconds)
        jobs_seen["jobs"] = self.jobs
        rounds.append([float(self.current_time),
                       {name: [c, len(alloc)] for name, (c, alloc) in sorted(self.allocations.items()) if alloc}])

    sia_cluster.Cluster.step = step
    args = argparse.Namespace(workload=workload, **SIA_ARGS)
    t0, c0 = time.perf_counter(), time.process_time()
    with quiet():
        _, jct = multi_simulator.multi_simulate(args)
    jobs = {j.name: {"restarts": int(j.num_restarts or 0), "migrations": int(getattr(j, "num_migrations", 0) or 0),
                     "gpu_seconds": float(j.attained_service)} for j in jobs_seen.get("jobs", [])}
    return {"jct": {k: float(v) for k, v in jct.items()}, "rounds": rounds, "jobs": jobs,
            "wall_seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
            "load": os.getloadavg()}


@contextlib.contextmanager
def quiet():
    """Sia's driver prints a table per round, and CBC writes to the C stdout: both to /dev/null."""
    sys.stdout.flush()
    saved, sink = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    os.dup2(sink, 1)
    try:
        with open(os.devnull, "w") as text, contextlib.redirect_stdout(text):
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(sink)


def worker(argv) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sia", type=Path)
    p.add_argument("--extra", action="append", default=[])
    p.add_argument("--workload")
    p.add_argument("--json")
    a = p.parse_args(argv)
    Path(a.json).write_text(json.dumps(sia_simulate(a.sia, a.extra, a.workload)))


# ---------------------------------------------------------------- optsched's side

def sia_cluster():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fidelity_sia import cluster

    return cluster()


def on_sia_grid(path: Path) -> tuple[Path, dict]:
    """The workload with every arrival moved up to the next multiple of 60 s (Sia's decision
    grid); returns the new CSV and each job's shift (added back to its JCT)."""
    import pandas as pd

    df = pd.read_csv(path)
    grid = np.ceil(df["time"].to_numpy(float) / INTERVAL) * INTERVAL
    shift = dict(zip(df["name"].astype(str), grid - df["time"].to_numpy(float)))
    df["time"] = grid
    out = path.with_name(path.stem + "-grid.csv")
    df.to_csv(out, index=False)
    return out, shift


def sia_atomic_throughput(app, gpu: str) -> float:
    """Sia's per-application speed of one GPU type (cluster.py, ``compute_throughputs``): the
    largest profiled micro-batch over the longest step time among the 1-GPU placements."""
    prof = app.profiles[gpu]
    one = np.asarray(prof.placement) == "1"
    return float(prof.local_bsz[one].max() / prof.step_time[one].max())


def sia_ratios():
    """Bench emulation of Sia's cross-type projection: a co-adapted job's throughput row (what
    optsched's bootstrap scales a measured type's model by, for types the job has not run on)
    becomes Sia's per-application 1-GPU speed of each type (``sia_atomic_throughput``) instead
    of the job's 1-GPU speed at its smallest micro-batch. Patches the simulator's row for one
    run; returns the undo."""
    from optsched.sim import goodput_jobs

    original = goodput_jobs.throughput_row

    def throughput_row(app, batch_size, replicas, gpu_types, capacity, server_gpus, co_adapt):
        if not co_adapt or not isinstance(app, goodput_jobs.SiaApplication):
            return original(app, batch_size, replicas, gpu_types, capacity, server_gpus, co_adapt)
        return np.array([sia_atomic_throughput(app, gpu) for gpu in gpu_types])

    goodput_jobs.throughput_row = throughput_row
    return lambda: setattr(goodput_jobs, "throughput_row", original)


def flat_prior(prefer: str = "rtx"):
    """Bench emulation of Sia's view of a job that has never run (``optimize_mip`` with
    ``sia_read_throughputs_before_first_run = False``): 1 GPU, equal normalized goodput on every
    type; Sia's MILP leaves the tie to CBC, which put every such job on ``prefer`` in the runs
    here (a 1e-6 edge reproduces that). Patches ``formulations.sia.utilities``; returns the undo."""
    from optsched.formulations import sia

    original = sia.utilities

    def utilities(inst, G, current, p, lambda_n, restart_penalty=True):
        U, Gn = original(inst, G, current, p, lambda_n, restart_penalty)
        el = inst.elastic
        fresh = el.is_elastic & ~np.isfinite(el.params).all(axis=2).any(axis=1)
        if fresh.any():
            from optsched.formulations.configurations import goodput_matrix

            cfg = goodput_matrix(inst).configs
            edge = np.where(np.asarray(inst.gpu_types)[cfg.gpu_type] == prefer, 0.0, 1e-6)
            A = np.where(G[fresh] > 0, 1.0 + edge[None, :], 0.0)  # Ĝ = 1 → A = 1 (+ the edge)
            U[fresh] = np.where(G[fresh] > 0, inst.weight[fresh, None] * (lambda_n - A), 0.0)
            Gn[fresh] = np.where(G[fresh] > 0, 1.0, 0.0)
        return U, Gn

    sia.utilities = utilities
    return lambda: setattr(sia, "utilities", original)


def rounded_utilities(prefer_more: bool = True):
    """Bench emulation of Sia's MILP coefficients (``__solve_mip_rescaled``): A = Ĝ^p rounded to
    2 decimals, so configurations whose A agree to 2 decimals tie, and CBC broke the ties
    seen here towards the larger allocation (a 1e-7 per GPU edge reproduces that; optsched's
    ``sia`` keeps A unrounded). Patches ``formulations.sia.utilities``; returns the undo."""
    from optsched.formulations import sia

    original = sia.utilities

    def utilities(inst, G, current, p, lambda_n, restart_penalty=True):
        U, Gn = original(inst, G, current, p, lambda_n, restart_penalty)
        from optsched.formulations.configurations import goodput_matrix

        gpus = goodput_matrix(inst).configs.gpus
        A = np.round(np.maximum(Gn, sia.ZERO_ALLOC_GAIN) ** p, 2) - (1e-7 * gpus[None, :] if prefer_more else 0.0)
        V = (lambda_n - A) if p < 0 else (A + lambda_n)
        return np.where(G > 0, inst.weight[:, None] * V, 0.0), Gn

    sia.utilities = utilities
    return lambda: setattr(sia, "utilities", original)


SIA_START = np.array([1e-1, 1e-2] * 3 + [1.0 + 1e-3])  # goodput.py fit_perf_params: its fixed start


def lbfgsb_fit():
    """Bench emulation of the peers' throughput fit (Pollux/Sia ``fit_perf_params``): the same
    objective, bounds and freezing rules as ``optsched.goodput.fit`` (which states them), but one
    local L-BFGS-B run from the peers' fixed start with their tolerance (1e-5), exact gradient
    (JAX here, autograd there) — where the data leave the parameters unidentified (the first
    observations of a job on a type), the local point it stops at is the peers' model, while
    optsched's multi-start BFGS finds a lower loss elsewhere. Patches ``fit_params``; returns
    the undo."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from scipy.optimize import Bounds, minimize

    from optsched.goodput import fit

    original = fit.fit_params

    def loss(p, nodes, replicas, bsz, log_acc, log_step):
        t_acc = p[0] + p[1] * bsz
        inter, intra = nodes > 1, replicas > 1
        alpha = jnp.where(inter, p[2], jnp.where(intra, p[4], 1e-8))
        beta = jnp.where(inter, p[3], jnp.where(intra, p[5], 1e-8))
        t_net = alpha + beta * jnp.maximum(replicas - 2, 1e-8)
        log_sync = jnp.log(t_acc ** p[6] + t_net ** p[6]) / p[6]
        rmse = lambda a, b: jnp.sqrt(jnp.mean((a - b) ** 2))  # noqa: E731
        return (rmse(jnp.log(t_acc), log_acc) + rmse(log_sync, log_step) + 1e-3 * (p[6] - 1) ** 2
                + 1e-2 * ((p[3] / p[2]) ** 2 + (p[5] / p[4]) ** 2))

    value_and_grad = jax.jit(jax.value_and_grad(loss))

    def fit_params(obs, prior=None, min_observations=1):
        clean = obs.valid()
        if len(clean) < max(min_observations, 1):
            return original(obs, prior, min_observations)
        free, fixed = fit.frozen_parameters(clean)
        lower = np.where(free, np.append(np.full(6, fit.LOWER), 1.0), fixed)
        upper = np.where(free, np.append(np.full(6, np.inf), fit.GAMMA_MAX), fixed)
        data = tuple(jnp.asarray(a, dtype=float) for a in (clean.nodes, clean.replicas, clean.atomic_bsz,
                                                           np.log(clean.accum_time), np.log(clean.step_time)))

        def f(x):
            v, g = value_and_grad(jnp.asarray(x), *data)
            return float(v), np.asarray(g, dtype=float)

        x0 = np.where(free, SIA_START, fixed)
        res = minimize(f, x0, jac=True, method="L-BFGS-B", bounds=Bounds(lower, upper, keep_feasible=True), tol=1e-5)
        return fit.FitResult(fit.enforce_prior(res.x, clean), float(res.fun), False, "")

    fit.fit_params = fit_params
    return lambda: setattr(fit, "fit_params", original)


def eager_refit():
    """Bench emulation of when Sia's jobs refit and re-tune (job.py ``update_params`` /
    ``step``): a new (nodes, GPUs, micro-batch) observation is fitted at once, and the batch
    size is re-chosen from that fresh model after every epoch boundary *and* at the end of every
    interval; optsched refits once per round (before the policy) and re-chooses the batch at
    (re)allocation and epoch boundaries with the round's model. Wraps the simulator's
    ``choose_batch`` / ``advance``; returns the undo."""
    from optsched.sim import goodput_jobs as gj

    choose, advance = gj.choose_batch, gj.advance

    def choose_batch(job, app, gpu, gpus, nodes):
        if job.dirty:
            gj.refit([job])
        return choose(job, app, gpu, gpus, nodes)

    def advance_then_retune(job, app, gpu, gpus, nodes, per_server, seconds):
        used, done = advance(job, app, gpu, gpus, nodes, per_server, seconds)
        if not done and seconds > 0:
            choose_batch(job, app, gpu, gpus, nodes)
        return used, done

    gj.choose_batch, gj.advance = choose_batch, advance_then_retune

    def undo():
        gj.choose_batch, gj.advance = choose, advance

    return undo


def yolov3_microbatch(cap: float = 32.0):
    """Bench probe of the policy's micro-batch limit: optsched's goodput table gives a job one
    largest micro-batch for every type (``ElasticInfo.max_local_bsz``: yolov3 8, Pollux's
    figure; bert 48, cifar10 4,096 — the largest of any type), where Sia's policy uses each
    type's (yolov3: T4 16, A100 32, RTX 8). Sets yolov3's to 32 (its A100 value) for one run
    (the simulated runs keep their per-placement limits); returns the undo."""
    import dataclasses

    from optsched.sim import goodput_jobs

    original = goodput_jobs.applications_for

    def applications_for(*args, **kwargs):
        apps = original(*args, **kwargs)
        if "yolov3" in apps:
            apps["yolov3"] = dataclasses.replace(apps["yolov3"], max_local_bsz=cap)
        return apps

    goodput_jobs.applications_for = applications_for
    return lambda: setattr(goodput_jobs, "applications_for", original)


def sia_type_cap(app, gpu: str) -> float:
    """The largest micro-batch Sia's policy lets a job use on a GPU type: its application's
    ``max_local_bsz`` for that type, the largest in the type's placements (applications.py;
    deepspeech2 on RTX set to 57 there)."""
    if app.name == "deepspeech2" and gpu == "rtx":
        return 57.0
    prof = app.profiles[gpu]
    return float(prof.local_bsz[np.asarray(prof.placement) != ""].max())


def per_type_microbatch():
    """Bench emulation of Sia's per-type micro-batch limit in the policy's goodput table:
    optsched's table gives a job one limit for every type (``ElasticInfo.max_local_bsz``, the
    largest of any type, yolov3 8); here each type's columns are computed with that type's
    limit (``sia_type_cap``). Patches ``formulations.sia.goodput_matrix``; returns the undo."""
    import dataclasses

    from optsched.formulations import sia
    from optsched.sim.goodput_jobs import applications_for

    original = sia.goodput_matrix
    apps = applications_for(sia_cluster(), ["bert", "cifar10", "deepspeech2", "imagenet", "yolov3"])

    def goodput_matrix(inst, *args, **kwargs):
        el = inst.elastic
        names = [str(j).rsplit("-", 1)[0] for j in inst.job_ids]  # Saturn names: <application>-<index>
        if el is None or not all(n in apps for n in names):
            return original(inst, *args, **kwargs)
        out = None
        for t, gpu in enumerate(inst.gpu_types):
            caps = np.array([sia_type_cap(apps[n], gpu) for n in names])
            gm = original(dataclasses.replace(inst, elastic=dataclasses.replace(el, max_local_bsz=caps)), *args, **kwargs)
            if out is None:
                out = gm
            cols = gm.configs.gpu_type == t
            for name in ("goodput", "atomic_bsz", "accum_steps"):
                if hasattr(out, name):
                    getattr(out, name)[:, cols] = getattr(gm, name)[:, cols]
        return out

    sia.goodput_matrix = goodput_matrix
    return lambda: setattr(sia, "goodput_matrix", original)


_ROUND_HOOKS: list = []  # emulations that watch the simulation's state after each round


def pin_restoring():
    """Bench emulation of Sia's ``preserve_ckpt_allocs``: a job still paying its
    checkpoint-restore at a decision keeps its configuration (a hard constraint in Sia's MILP;
    with 60 s rounds that pins imagenet 250 s, bert 120 s and yolov3 80 s for rounds after every
    change). optsched's ``sia`` may change such a job at once. Watches the simulator's restore
    seconds left after each round and forces those jobs' current configuration through
    ``formulations.sia.utilities``; returns the undo."""
    from optsched.formulations import sia

    original, restoring = sia.utilities, set()

    def watch(info):
        run, st = info["live"]
        busy = (st.overhead_left > 1e-9) & (st.config[:, 0] >= 0)
        restoring.clear()
        restoring.update(run.jobs.job_ids[m] for m in np.flatnonzero(busy))

    def utilities(inst, G, current, p, lambda_n, restart_penalty=True):
        U, Gn = original(inst, G, current, p, lambda_n, restart_penalty)
        for m, job in enumerate(inst.job_ids):
            if job in restoring and current[m] >= 0:
                U[m] = np.where(G[m] > 0, -1e3, 0.0)
                U[m, current[m]] = 1e3
        return U, Gn

    sia.utilities = utilities
    _ROUND_HOOKS.append(watch)

    def undo():
        sia.utilities = original
        _ROUND_HOOKS.remove(watch)

    return undo


EMULATIONS = {"ratios": sia_ratios, "round": rounded_utilities, "flat": flat_prior, "fit": lbfgsb_fit,
              "eager": eager_refit, "mbs": yolov3_microbatch, "types": per_type_microbatch,
              "pin": pin_restoring}  # applied in this order


def ours_simulate(path: Path, sia_grid: bool = False, emulate: tuple = (), **options) -> dict:
    from optsched.sim import simulate

    shift = {}
    if sia_grid:
        path, shift = on_sia_grid(path)
    rounds = []

    def on_round(info):
        a = info["decision"].placement.assignments
        rounds.append([info["start"], {j: [s[0].gpu_type, len(s)] for j, s in sorted(a.items()) if s}])
        for hook in _ROUND_HOOKS:
            hook(info)

    t0, c0 = time.perf_counter(), time.process_time()
    undos = [EMULATIONS[name]() for name in EMULATIONS if name in emulate]  # (flat overrides round's fresh rows)
    try:
        r = simulate(str(path), sia_cluster(), policy="sia", round_length=INTERVAL, restart_overhead="application",
                     skip_unrunnable=True, on_round=on_round, **options)
    finally:
        for undo in undos:
            undo()
    j = r.jobs
    done = j.dropna(subset=["jct"])
    jct = {str(k): float(v) + shift.get(str(k), 0.0) for k, v in zip(done["job_id"], done["jct"])}
    jobs = {str(k): {"restarts": int(rs), "gpu_seconds": float(g)}
            for k, rs, g in zip(j["job_id"], j["restarts"], j["gpu_seconds"])}
    return {"jct": jct, "rounds": rounds, "jobs": jobs, "wall_seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0, "load": os.getloadavg()}


# ---------------------------------------------------------------- comparison

def first_round_divergence(s_rounds, o_rounds) -> str:
    """The first decision whose job → [type, GPUs] differs. Rounds without any job placed on
    either side are dropped; the rest pair by order (their times are printed: on different
    grids they are up to 60 s apart)."""
    s = [r for r in s_rounds if r[1]]
    o = [r for r in o_rounds if r[1]]
    for k, ((ts, a_s), (to, a_o)) in enumerate(zip(s, o)):
        if a_s != a_o:
            only_s = {j: v for j, v in a_s.items() if a_o.get(j) != v}
            only_o = {j: v for j, v in a_o.items() if a_s.get(j) != v}
            return (f"decision {k} (Sia t={ts:.0f} s, ours t={to:.0f} s): Sia {dict(list(only_s.items())[:6])} "
                    f"ours {dict(list(only_o.items())[:6])}")
    return f"none in {min(len(s), len(o))} decisions"


def usage(rounds) -> dict:
    """GPU-rounds per application and GPU type over the run (each side's own rounds; Saturn's
    job names start with their application)."""
    out = {}
    for _, assigned in rounds:
        for job, (kind, n) in assigned.items():
            key = f"{job.rsplit('-', 1)[0]}@{kind}"
            out[key] = out.get(key, 0) + n
    return dict(sorted(out.items()))


def compare(s: dict, o: dict, arrival: dict) -> dict:
    ids = sorted(set(s["jct"]) & set(o["jct"]), key=lambda i: (arrival[i], i))
    sj = np.array([s["jct"][i] for i in ids])
    oj = np.array([o["jct"][i] for i in ids])
    ratio = oj / sj
    off = np.flatnonzero(np.abs(ratio - 1) > 0.01)
    first = (f"{ids[off[0]]}: Sia {sj[off[0]]:.0f} s, ours {oj[off[0]]:.0f} s" if off.size else "none above 1 %")
    rs = np.array([s["jobs"].get(i, {}).get("restarts", np.nan) for i in ids], float)
    ro = np.array([o["jobs"].get(i, {}).get("restarts", np.nan) for i in ids], float)
    return {"ids": ids, "sia": sj, "ours": oj, "n": len(ids), "sia_h": sj.mean() / 3600, "ours_h": oj.mean() / 3600,
            "diff": oj.mean() / sj.mean() - 1, "ratio_p10": float(np.quantile(ratio, 0.1)),
            "ratio_p50": float(np.median(ratio)), "ratio_p90": float(np.quantile(ratio, 0.9)),
            "jobs_off": int(off.size), "first_job": first, "first_round": first_round_divergence(s["rounds"], o["rounds"]),
            "missing": sorted(set(s["jct"]) ^ set(o["jct"])), "restarts_sia": float(np.nanmean(rs)),
            "restarts_ours": float(np.nanmean(ro)), "usage_sia": usage(s["rounds"]), "usage_ours": usage(o["rounds"])}


def report(c: dict, label: str, s: dict, o: dict, out: Path | None) -> None:
    print(f"\n{label}: Sia {c['sia_h']:.3f} h, ours {c['ours_h']:.3f} h ({c['diff']:+.1%}) over {c['n']} jobs; "
          f"per-job ratio p10/p50/p90 {c['ratio_p10']:.3f}/{c['ratio_p50']:.3f}/{c['ratio_p90']:.3f}; "
          f"{c['jobs_off']} jobs off > 1 %; first job: {c['first_job']}", flush=True)
    print(f"  first round: {c['first_round']}")
    print(f"  restarts per job: Sia {c['restarts_sia']:.2f}, ours {c['restarts_ours']:.2f}; GPU-rounds per type: "
          f"Sia {c['usage_sia']}, ours {c['usage_ours']}; unfinished on one side: {c['missing'] or 'none'}")
    print(f"  wall / CPU s: Sia {s['wall_seconds']:.0f} / {s['cpu_seconds']:.0f}, ours {o['wall_seconds']:.0f} / "
          f"{o['cpu_seconds']:.0f}; load average at the end {s['load'][0]:.1f} / {o['load'][0]:.1f}")
    print("| job | Sia JCT (s) | ours (s) | ratio | restarts Sia / ours |\n|---|---|---|---|---|")
    for i, a, b in zip(c["ids"], c["sia"], c["ours"]):
        print(f"| {i} | {a:,.0f} | {b:,.0f} | {b / a:.3f} | {s['jobs'].get(i, {}).get('restarts', '–')} / "
              f"{o['jobs'].get(i, {}).get('restarts', '–')} |")
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{label}.csv").write_text("job_id,sia_jct,ours_jct\n" + "".join(
            f"{i},{a},{b}\n" for i, a, b in zip(c["ids"], c["sia"], c["ours"])))


def main() -> None:
    if "--worker" in sys.argv:
        sys.argv.remove("--worker")
        return worker(sys.argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sia", type=Path, default=Path("/work/peers/sia_sim/sia-simulator"))
    p.add_argument("--python", default="/work/peers/venv/bin/python", help="the peer venv's interpreter")
    p.add_argument("--extra", nargs="+", default=["/work/peers/pylib", "/work/peers/pylib_cylp"],
                   help="folders appended to the peer's sys.path (autograd, cylp)")
    p.add_argument("--workload", type=int, default=1, help="Saturn workload 1-10")
    p.add_argument("--jobs", type=int, default=None, help="the first N jobs only (default: all 160)")
    p.add_argument("--variants", nargs="+", default=["plain"],
                   help="optsched runs, each 'plain' or a '+'-joined set of grid (arrivals on Sia's 60 s grid), "
                        "ratios, round, flat (bench emulations of Sia's simulator, see the docstring), "
                        "e.g. plain grid grid+ratios grid+ratios+round+flat")
    p.add_argument("--option", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                   help="an optsched simulate option (value as JSON)")
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sia_sim_side_by_side",
                   help="workload subsets and Sia's results (reused when present)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    options = {k: json.loads(v) for k, v in args.option}
    args.work.mkdir(parents=True, exist_ok=True)
    path = workload_subset(args.workload, args.jobs, args.work)
    peer = args.work / f"{path.stem}_sia.json"
    if not peer.exists():
        cmd = [args.python, __file__, "--worker", "--sia", str(args.sia), "--workload", str(path), "--json", str(peer)]
        for e in args.extra:
            cmd += ["--extra", e]
        subprocess.run(cmd, check=True)
    s = json.loads(peer.read_text())
    import pandas as pd

    df = pd.read_csv(path)
    arrival = dict(zip(df["name"].astype(str), df["time"].astype(float)))
    rows = []
    for variant in args.variants:
        parts = set(variant.split("+")) - {"plain"}
        unknown = parts - {"grid", *EMULATIONS}
        if unknown:
            p.error(f"--variants: unknown {sorted(unknown)[0]!r} in {variant!r}")
        o = ours_simulate(path, sia_grid="grid" in parts, emulate=tuple(parts - {"grid"}), **options)
        c = compare(s, o, arrival)
        report(c, f"{path.stem}_{variant}", s, o, args.out)
        rows.append((variant, c))
    print(f"\n| workload | jobs | variant | Sia's simulator (h) | optsched (h) | difference | restarts/job Sia / ours |"
          "\n|---|---|---|---|---|---|---|")
    for variant, c in rows:
        print(f"| Saturn {args.workload} | {c['n']} | {variant} | {c['sia_h']:.3f} | {c['ours_h']:.3f} | "
              f"{c['diff']:+.1%} | {c['restarts_sia']:.2f} / {c['restarts_ours']:.2f} |")


if __name__ == "__main__":
    main()
