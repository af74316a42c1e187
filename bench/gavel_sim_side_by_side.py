"""The same trace through Gavel's own simulator and through ``optsched simulate`` (by hand,
never in CI): per job JCT on both sides, per round who ran on which GPU type, and the first
divergence named.

    # Gavel's repository checked out OUTSIDE the project (the `fetch` tool, or git clone), and a
    # venv for it beside the project's (Gavel's scheduler needs psutil; grpc and
    # matrix_completion are stubbed: its simulation never calls them):
    /work/main/.venv/bin/python -m venv /work/peers/venv
    echo "import site; site.addsitedir('/work/main/.venv/lib/python3.11/site-packages')" \\
        > /work/peers/venv/lib/python3.11/site-packages/project_venv.pth
    /work/peers/venv/bin/pip install psutil
    OPENBLAS_NUM_THREADS=1 python bench/gavel_sim_side_by_side.py --gavel /work/peers/gavel \\
        --python /work/peers/venv/bin/python --rates 2.0 --seeds 0 --jobs 1500 --window 700 1200 --gavel-quirks
    # Gavel's own experiment (window jobs 4000-4999; ~25-40 min of Gavel's simulator per policy):
    python bench/gavel_sim_side_by_side.py --jobs 5600 --window 4000 5000 --policies aware --gavel-quirks

Each trace is drawn by Gavel's own generator (``utils.generate_job`` with the streams its
``Scheduler`` seeds: jobs from ``random.Random(seed + 2)``, inter-arrival times from
``random.Random(seed + 3)``, the first job at t = 0 — exactly the jobs its
``simulate_scheduler_with_generated_jobs.py`` makes) and written in Gavel's 10-field
``.trace`` format; Gavel's ``Scheduler.simulate`` then runs it from the file (the
``simulate_scheduler_with_trace.py`` path: cluster 36:36:36, one GPU per server as its
drivers default to, rounds of 360 s, allocation resets at most every 1,920 s), and optsched
reads the same file (``traces/gavel.py``) and simulates it with Gavel's mechanism
(``bench/fidelity.py``'s GAVEL_ALLOCATOR: the ``gavel`` queue, v100-first for the aware
policy, a shuffled type order for the agnostic one). Gavel's side runs in a subprocess of
the peer venv (this file with ``--worker``), so nothing of Gavel is imported here.

Policies: ``aware`` = Gavel ``max_min_fairness_perf`` / optsched ``max_min_fairness``;
``agnostic`` = Gavel ``max_min_fairness`` / optsched ``max_min_fairness_agnostic``.
``--gavel-quirks`` runs optsched a second time with what Gavel's code does and optsched does
not by default: ``simulate(gavel_zero_reset=True)``, Gavel's LAS program solved as Gavel
solves it (``gavel_lp_fractions``: cvxpy + ECOS, its interior optimum, no fill of idle
capacity) and Gavel's type-shuffle stream for the agnostic policy (``gavel_type_shuffle``);
the last two patch optsched for the run only (bench emulations, not optsched options).
Both sides' results are cached in ``--work`` (keyed by trace, window and options).

Output: per trace the average JCT on each side (all jobs, and ``--window`` jobs if given),
the per-job JCT ratio's spread, the first round whose (job → GPU type, GPUs) differs, and
the first job (in arrival order) whose JCT differs by more than 1 %; ``--out DIR`` writes
per-job CSVs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

PEER = Path(os.environ.get("OPTSCHED_PEER_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
POLICIES = {"aware": ("max_min_fairness_perf", "max_min_fairness"),
            "agnostic": ("max_min_fairness", "max_min_fairness_agnostic")}


# ---------------------------------------------------------------- Gavel's side (peer venv)

def _gavel_imports(root: Path):
    """Gavel's scheduler modules from its checkout; the RPC and matrix-completion modules its
    simulation never calls are stubbed (grpc / matrix_completion are not installed)."""
    import types

    sys.path.insert(0, str(root / "scheduler"))
    for name in ("matrix_completion", "runtime.rpc", "runtime.rpc.scheduler_server", "runtime.rpc.scheduler_client"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["runtime.rpc"].scheduler_server = sys.modules["runtime.rpc.scheduler_server"]
    sys.modules["runtime.rpc"].scheduler_client = sys.modules["runtime.rpc.scheduler_client"]
    import scheduler
    import utils

    return scheduler, utils


def gavel_generate(root: Path, throughputs: str, n_jobs: int, rate: float, seed: int, multi_gpu: bool, out: str) -> None:
    """Gavel's generator, its streams seeded as its Scheduler seeds them, written as a .trace."""
    import math
    import random

    _, utils = _gavel_imports(root)
    oracle = utils.read_all_throughputs_json_v2(throughputs)
    jobs_rng, gaps_rng = random.Random(), random.Random()
    jobs_rng.seed(seed + 2)
    gaps_rng.seed(seed + 3)
    t, lines = 0.0, []
    for _ in range(n_jobs):
        job = utils.generate_job(throughputs=oracle, reference_worker_type="v100", rng=jobs_rng,
                                 generate_multi_gpu_jobs=multi_gpu)
        lines.append(f"{job}\t{t:f}\n")
        t += -math.log(1.0 - gaps_rng.random()) * 3600.0 / rate
    Path(out).write_text("".join(lines))


def gavel_simulate(root: Path, throughputs: str, trace: str, policy: str, seed: int, window) -> dict:
    """Gavel's Scheduler.simulate on the trace; per-job JCT and per-round job → (type, GPUs)."""
    import io
    import contextlib

    import logging

    scheduler, utils = _gavel_imports(root)
    from job_id_pair import JobIdPair

    logging.disable(logging.CRITICAL)  # its per-round DEBUG lines cost more than the rounds

    jobs, arrivals = utils.parse_trace(trace)
    sched = scheduler.Scheduler(utils.get_policy(policy, solver="ECOS", seed=seed), throughputs_file=throughputs,
                                simulate=True, seed=seed, time_per_iteration=360)
    rounds = []
    inner = sched._schedule_jobs_on_workers

    def record():
        out = inner()
        kinds = sched._worker_id_to_worker_type_mapping
        rounds.append([sched.get_current_timestamp(),
                       {str(j[0]): [kinds[w[0]], len(w)] for j, w in out.items() if not j.is_pair()}])
        return out

    sched._schedule_jobs_on_workers = record
    todo = {JobIdPair(i, None) for i in range(*window)} if window else None
    with contextlib.redirect_stdout(io.StringIO()):
        sched.simulate({"v100": 36, "p100": 36, "k80": 36}, arrivals, jobs,
                       num_gpus_per_server={"v100": 1, "p100": 1, "k80": 1}, jobs_to_complete=todo)
    jct = {str(j[0]): c for j, c in sched._job_completion_times.items() if c is not None}
    return {"jct": jct, "rounds": rounds, "end": sched.get_current_timestamp()}


def worker(argv) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gavel", type=Path)
    p.add_argument("--throughputs")
    p.add_argument("--generate", nargs=5, metavar=("N", "RATE", "SEED", "MULTI", "OUT"))
    p.add_argument("--simulate", nargs=3, metavar=("TRACE", "POLICY", "SEED"))
    p.add_argument("--window", type=int, nargs=2)
    p.add_argument("--json")
    a = p.parse_args(argv)
    if a.generate:
        n, rate, seed, multi, out = a.generate
        gavel_generate(a.gavel, a.throughputs, int(n), float(rate), int(seed), multi == "1", out)
    else:
        tr, pol, seed = a.simulate
        Path(a.json).write_text(json.dumps(gavel_simulate(a.gavel, a.throughputs, tr, pol, int(seed), a.window)))


# ---------------------------------------------------------------- optsched's side

def gavel_type_shuffle(seed: int):
    """Bench-only emulation of Gavel's agnostic type order: ``random.Random(seed + 5)``
    shuffles [v100, p100, k80] afresh every round, one stream over the run (optsched's
    ``type_order="shuffle"`` draws each round's permutation from (seed, state digest) instead,
    so a restored allocator shuffles alike). Patches the walk's type order for one run;
    returns the undo."""
    import random

    from optsched.allocator.walk import WalkOptions

    rng, original = random.Random(seed + 5), WalkOptions.type_walk

    def type_walk(self, digest):
        if not self.shuffle:
            return original(self, digest)
        order = list(self.order)  # the cluster's order, v100, p100, k80 as the harness gives it
        rng.shuffle(order)
        pos = np.empty(len(order), dtype=np.int64)
        pos[order] = np.arange(len(order))
        return order, pos

    WalkOptions.type_walk = type_walk
    return lambda: setattr(WalkOptions, "type_walk", original)


def gavel_lp_fractions(inst, agnostic: bool) -> np.ndarray:
    """Gavel's LAS program as its policy states it (max_min_fairness.py: maximize the least
    throughput relative to the proportional share, times the scale factor, under the base
    constraints), solved as Gavel solves it: cvxpy with ECOS, the raw optimum clipped to
    [0, 1], no second stage. ECOS is an interior-point method: where the optimum is a face
    (every job above the least one), it returns a point inside it, not a vertex."""
    import cvxpy as cp

    order = np.argsort(inst.gpu_types)  # Gavel's columns: the types' names sorted
    T = np.asarray(inst.throughput, dtype=float)[:, order]
    T = np.ones_like(T) if agnostic else T  # Gavel's agnostic LAS: every throughput 1.0
    W = np.asarray(inst.capacity, dtype=float)[order]
    s = np.asarray(inst.scale_factor, dtype=float)
    n = T.shape[0]
    prop = T @ (W / n) / (W / n).sum()  # its proportional policy's throughput (the 1/max row sum cancels)
    coef = s / (np.asarray(inst.weight, dtype=float) * prop)
    x = cp.Variable(T.shape)
    S = np.repeat(s[:, None], T.shape[1], axis=1)
    cp.Problem(cp.Maximize(cp.min(cp.sum(cp.multiply(T * coef[:, None], x), axis=1))),
               [x >= 0, cp.sum(cp.multiply(S, x), axis=0) <= W, cp.sum(x, axis=1) <= 1]).solve(solver="ECOS")
    X = np.empty_like(T)
    X[:, order] = np.clip(x.value, 0.0, 1.0)
    return X


def gavel_lp(policy: str):
    """Bench-only: optsched's LAS allocations replaced by Gavel's program solved as Gavel does
    (``gavel_lp_fractions``); returns the undo."""
    import dataclasses

    from optsched.core import RoundCore

    original = RoundCore.solve

    def solve(self, inst, pair_classes=None):
        a = original(self, inst, pair_classes)
        if inst.scale_factor.size and list(a.job_ids) == list(inst.job_ids):
            a = dataclasses.replace(a, fractions=gavel_lp_fractions(inst, policy.endswith("agnostic")))
        return a

    RoundCore.solve = solve
    return lambda: setattr(RoundCore, "solve", original)


def ours_simulate(trace: str, policy: str, seed: int, window, gavel_shuffle: bool = False, gavel_program: bool = False,
                  **options) -> dict:
    """optsched simulate on the same .trace with Gavel's mechanism (bench/fidelity.py);
    ``gavel_shuffle``: Gavel's own shuffle stream for the agnostic type order."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fidelity import GAVEL_ALLOCATOR

    from optsched.sim import simulate
    from optsched.traces.io import read_trace
    from optsched.traces.throughputs import gavel_throughputs

    rounds = []

    def on_round(info):
        a = info["decision"].placement.assignments
        rounds.append([info["start"], {j: [s[0].gpu_type, len(s)] for j, s in a.items() if s}])

    undos = ([gavel_type_shuffle(seed)] if gavel_shuffle else []) + ([gavel_lp(policy)] if gavel_program else [])
    try:
        r = simulate(read_trace(trace), {"v100": 36, "p100": 36, "k80": 36}, policy=policy,
                     throughputs=gavel_throughputs(PEER), round_length=360.0, min_recompute_interval=1920.0,
                     seed=seed, window=tuple(window) if window else None, on_round=on_round,
                     allocator_options=GAVEL_ALLOCATOR.get(policy, {}), **options)
    finally:
        for undo in undos:
            undo()
    j = r.jobs.dropna(subset=["jct"])
    return {"jct": dict(zip(j["job_id"].astype(str), j["jct"].astype(float))), "rounds": rounds,
            "end": float(r.summary.get("end_time", np.nan))}


# ---------------------------------------------------------------- comparison

def first_round_divergence(g_rounds, o_rounds) -> str:
    """The first round (by start time) whose job → [type, GPUs] differs, described."""
    for k, ((tg, ag), (to, ao)) in enumerate(zip(g_rounds, o_rounds)):
        # Gavel's rounds end when the last scheduled job ends: int(steps/s × 360) steps, a
        # fraction of a step short of 360 s, so its round starts drift ahead of ours by
        # milliseconds a round (~50 s over 7,000 rounds): rounds pair by index, a minute apart at most
        if abs(tg - to) > 60.0 or ag != ao:
            only_g = {j: v for j, v in ag.items() if ao.get(j) != v}
            only_o = {j: v for j, v in ao.items() if ag.get(j) != v}
            return (f"round {k} (Gavel t={tg:.0f} s, ours t={to:.0f} s): Gavel {dict(sorted(only_g.items())[:6])} "
                    f"ours {dict(sorted(only_o.items())[:6])}")
    return f"none in {min(len(g_rounds), len(o_rounds))} rounds"


def service(rounds, ids) -> dict:
    """Per GPU type: the mean GPUs busy per round, and the job-rounds the ``ids`` jobs ran there
    (a systematic difference in how much of the cluster a simulator uses shows up here, where
    per-job JCTs only show the trajectories drifting apart)."""
    ids = set(ids)
    busy, runs = {}, {}
    for _, assigned in rounds:
        for j, (kind, n) in assigned.items():
            busy[kind] = busy.get(kind, 0) + n
            if j in ids:
                runs[kind] = runs.get(kind, 0) + 1
    n = max(len(rounds), 1)
    return {"rounds": len(rounds), **{f"busy_{k}": busy.get(k, 0) / n for k in ("v100", "p100", "k80")},
            **{f"runs_{k}": runs.get(k, 0) for k in ("v100", "p100", "k80")}}


def compare(g: dict, o: dict, window) -> dict:
    ids = sorted(set(g["jct"]) & set(o["jct"]), key=int)
    if window:
        ids = [i for i in ids if window[0] <= int(i) < window[1]]
    gj = np.array([g["jct"][i] for i in ids])
    oj = np.array([o["jct"][i] for i in ids])
    ratio = oj / gj
    off = np.flatnonzero(np.abs(ratio - 1) > 0.01)
    first = (f"job {ids[off[0]]}: Gavel {gj[off[0]] / 3600:.2f} h, ours {oj[off[0]] / 3600:.2f} h"
             if off.size else "none above 1 %")
    return {"n": len(ids), "gavel_h": gj.mean() / 3600, "ours_h": oj.mean() / 3600,
            "diff": oj.mean() / gj.mean() - 1, "ratio_p50": float(np.median(ratio)),
            "ratio_p10": float(np.quantile(ratio, 0.1)), "ratio_p90": float(np.quantile(ratio, 0.9)),
            "jobs_off": int(off.size), "first_job": first,
            "first_round": first_round_divergence(g["rounds"], o["rounds"]),
            "missing": len(set(g["jct"]) ^ set(o["jct"])),
            "gavel_service": service(g["rounds"], ids), "ours_service": service(o["rounds"], ids)}


QUIRKS = {"gavel_zero_reset": True, "gavel_program": True}  # + gavel_shuffle for the agnostic LAS


def ours_cached(args, trace: Path, name: str, opol: str, seed: int, options: dict) -> dict:
    """optsched's side of one trace, kept as JSON beside Gavel's (keyed by its options)."""
    import hashlib

    key = hashlib.sha1(json.dumps([opol, seed, args.window, sorted(options.items())]).encode()).hexdigest()[:10]
    out = trace.parent / f"{trace.stem}_{name}_ours_{key}.json"
    if not out.exists():
        out.write_text(json.dumps(ours_simulate(str(trace), opol, seed, args.window, **options)))
    return json.loads(out.read_text())


def run_trace(args, rate: float, seed: int, multi: bool, label: str, tmp: Path) -> list[dict]:
    trace = tmp / f"gavel_{'multi' if multi else 'single'}_{rate:g}_{seed}_{args.jobs}.trace"
    base = [args.python, __file__, "--worker", "--gavel", str(args.gavel), "--throughputs", str(args.throughputs)]
    if not trace.exists():
        subprocess.run(base + ["--generate", str(args.jobs), str(rate), str(seed), "1" if multi else "0", str(trace)],
                       check=True)
    arrival = [float(line.rsplit("\t", 1)[1]) for line in trace.read_text().splitlines()]
    rows = []
    for name in args.policies:
        gpol, opol = POLICIES[name]
        out = tmp / f"{trace.stem}_{name}{'_w%d-%d' % tuple(args.window) if args.window else ''}.json"
        if not out.exists():
            cmd = base + ["--simulate", str(trace), gpol, str(seed), "--json", str(out)]
            subprocess.run(cmd + (["--window", *map(str, args.window)] if args.window else []), check=True)
        g = json.loads(out.read_text())
        variants = {"optsched": dict(args.option)}
        if args.gavel_quirks:
            variants["optsched + Gavel's quirks"] = {**dict(args.option), **QUIRKS, "gavel_shuffle": name == "agnostic"}
        for variant, options in variants.items():
            o = ours_cached(args, trace, name, opol, seed, options)
            c = compare(g, o, args.window)
            c.update(trace=label, rate=rate, seed=seed, policy=name, variant=variant, jobs=len(arrival))
            # Gavel keeps generating jobs until the window completes; a trace whose arrivals stop
            # sooner lightens the load on its last measured jobs (both sides alike), so say so
            done = max(arrival[int(i)] + max(g["jct"][i], o["jct"][i]) for i in g["jct"] if i in o["jct"]
                       and (not args.window or args.window[0] <= int(i) < args.window[1]))
            c["arrivals_ended_early"] = arrival[-1] < done
            rows.append(c)
            report(args, c, g, o, trace, name, variant)
    return rows


def report(args, c: dict, g: dict, o: dict, trace: Path, name: str, variant: str) -> None:
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        ids = sorted(set(g["jct"]) | set(o["jct"]), key=int)
        tag = "" if variant == "optsched" else "_quirks"
        (args.out / f"{trace.stem}_{name}{tag}.csv").write_text(
            "job_id,gavel_jct,ours_jct\n" + "".join(f"{i},{g['jct'].get(i, '')},{o['jct'].get(i, '')}\n" for i in ids))
    print(f"{c['trace']} {c['rate']:g}/h seed {c['seed']} {name} [{variant}]: Gavel {c['gavel_h']:.2f} h, ours "
          f"{c['ours_h']:.2f} h ({c['diff']:+.1%}), per-job ratio p10/p50/p90 {c['ratio_p10']:.3f}/"
          f"{c['ratio_p50']:.3f}/{c['ratio_p90']:.3f}, {c['jobs_off']}/{c['n']} jobs off >1 %; first job: "
          f"{c['first_job']}; first round: {c['first_round']}"
          + ("; ARRIVALS ENDED BEFORE THE WINDOW COMPLETED" if c["arrivals_ended_early"] else ""), flush=True)
    for side in ("gavel", "ours"):
        sv = c[f"{side}_service"]
        print(f"  {side}: {sv['rounds']} rounds, GPUs busy per round v100/p100/k80 "
              f"{sv['busy_v100']:.1f}/{sv['busy_p100']:.1f}/{sv['busy_k80']:.1f}; measured jobs' rounds "
              f"{sv['runs_v100']}/{sv['runs_p100']}/{sv['runs_k80']}", flush=True)


def main() -> None:
    if "--worker" in sys.argv:
        sys.argv.remove("--worker")
        return worker(sys.argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gavel", type=Path, default=Path("/work/peers/gavel"))
    p.add_argument("--python", default="/work/peers/venv/bin/python", help="the peer venv's interpreter")
    p.add_argument("--throughputs", type=Path, default=PEER / "gavel" / "simulation_throughputs.json")
    p.add_argument("--rates", type=float, nargs="+", default=[2.0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--jobs", type=int, default=300)
    p.add_argument("--window", type=int, nargs=2, default=None, help="measure jobs [START, END) only")
    p.add_argument("--streams", nargs="+", default=["multi"], choices=["single", "multi"])
    p.add_argument("--policies", nargs="+", default=["aware", "agnostic"], choices=list(POLICIES))
    p.add_argument("--option", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                   help="an optsched simulate option (value as JSON), e.g. --option restart_overhead 0")
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "gavel_sim_side_by_side",
                   help="traces and Gavel's results (reused when present)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--gavel-quirks", action="store_true",
                   help="also run optsched with Gavel's quirks: gavel_zero_reset, Gavel's LAS program solved "
                        "by ECOS (bench emulation), and Gavel's shuffle stream for the agnostic type order")
    args = p.parse_args()
    args.option = [(k, json.loads(v)) for k, v in args.option]
    args.work.mkdir(parents=True, exist_ok=True)
    rows = [r for s in args.streams for rate in args.rates for seed in args.seeds
            for r in run_trace(args, rate, seed, s == "multi", s, args.work)]
    print("\n| trace | jobs/h | seed | LAS | jobs measured (of trace) | Gavel's simulator (h) | optsched (h) | difference "
          "| optsched + Gavel's quirks (h) | difference |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["variant"] != "optsched":
            continue
        q = next((x for x in rows if x["variant"] != "optsched" and all(x[k] == r[k] for k in
                                                                        ("trace", "rate", "seed", "policy"))), None)
        tail = f" {q['ours_h']:.2f} | {q['diff']:+.1%} |" if q else " – | – |"
        print(f"| {r['trace']} | {r['rate']:g} | {r['seed']} | {r['policy']} | {r['n']:,} ({r['jobs']:,}) | "
              f"{r['gavel_h']:.2f} | {r['ours_h']:.2f} | {r['diff']:+.1%} |" + tail
              + (" arrivals ended before the window completed" if r["arrivals_ended_early"] else ""))

if __name__ == "__main__":
    main()
