"""Instances of the bench: synthetic and seeded, no peer data needed.

Rigid jobs have *distinct* random throughput rows (no two jobs alike), so
identical-job classes cannot shrink the programs: the sizes are the sizes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from optsched.model import Instance

TYPE_NAMES = ("k80", "p100", "v100", "a100", "h100")
SPEED = np.array([0.3, 0.6, 1.0, 1.6, 2.4])


CONGESTED = 0.15  # GPUs per job where capacity binds at the max-min optimum (prices > 0)


def rigid(n: int, k: int, seed: int = 0, tenants: int = 10, gpus_per_job: float = 0.5) -> Instance:
    """n jobs × k types: distinct throughputs, Gavel's scale-factor mix, ``gpus_per_job``
    GPUs per job (0.5: max-min is set by the first job to run out of time, capacity
    does not bind; CONGESTED: capacity binds, every type has a price)."""
    rng = np.random.default_rng(seed)
    types = TYPE_NAMES[:k]
    sf = rng.choice([1, 2, 4, 8], n, p=[0.70, 0.10, 0.15, 0.05]).astype(float)
    T = rng.uniform(0.5, 20.0, (n, k)) * SPEED[:k] * sf[:, None] ** 0.8
    T[rng.random((n, k)) < 0.1] = 0.0  # some jobs cannot run on some types
    T[np.arange(n), rng.integers(0, k, n)] = rng.uniform(0.5, 20.0, n)  # at least one type each
    capacity = np.full(k, float(max(8, int(n * gpus_per_job) // k)))
    steps = rng.uniform(1e3, 1e6, n)
    return Instance(
        job_ids=tuple(f"job{m:06d}" for m in range(n)), gpu_types=types, throughput=T, scale_factor=sf,
        weight=rng.choice([1.0, 2.0], n, p=[0.8, 0.2]), capacity=capacity, steps_remaining=steps,
        elapsed_time=rng.uniform(0, 3600, n), attained_service=rng.uniform(0, 2e4, n),
        arrival_time=np.sort(rng.uniform(0, 3600, n)),
        entity=tuple(f"team{t}" for t in rng.integers(0, tenants, n)),
        entity_weights={f"team{t}": float(1 + t % 3) for t in range(tenants)}, time=3600.0,
    )


def packing(n: int, seed: int = 0, pairs_per_job: int = 16, k: int = 3, unit_weights: bool = True) -> Instance:
    """Single-GPU jobs, each with measured co-location throughputs with ``pairs_per_job``
    random partners (packed rate 0.3–0.9 of solo per member, so most pairs beat time slicing)."""
    inst = rigid(n, k, seed)
    rng = np.random.default_rng(seed + 1)
    a = np.repeat(np.arange(n), pairs_per_job)
    b = rng.integers(0, n, n * pairs_per_job)
    keep = a != b
    P = np.unique(np.sort(np.stack([a[keep], b[keep]], axis=1), axis=1), axis=0)
    T = inst.throughput
    sf = np.ones(n)
    rate = rng.uniform(0.3, 0.9, (len(P), k, 2)) * np.stack([T[P[:, 0]], T[P[:, 1]]], axis=2)
    return dataclasses.replace(inst, scale_factor=sf, weight=np.ones(n) if unit_weights else inst.weight,
                               capacity=np.full(k, float(max(4, n // (3 * k)))), pairs=P, pair_throughput=rate)


def elastic_snapshot(seed: int, n: int, types, max_gpus: int = 32, first_id: int = 0) -> dict:
    """Elastic jobs with random 7-parameter goodput models (as bench/milp_bench.py)."""
    rng = np.random.default_rng(seed)
    names = [t for t, _, _ in types]
    return {"cluster": _cluster(types), "jobs": [_elastic_job(rng, f"j{first_id + i}", names, max_gpus) for i in range(n)]}


def _cluster(types) -> dict:
    servers = [{"id": f"{t}{s}", "gpu_type": t, "gpus": per} for t, W, per in types for s in range(W // per)]
    return {"gpus": {t: W for t, W, _ in types}, "servers": servers}


def _elastic_job(rng, jid: str, names, max_gpus: int) -> dict:
    base = np.array([rng.uniform(0.01, 0.1), rng.uniform(1e-4, 2e-3), rng.uniform(0.05, 0.4), rng.uniform(1e-3, 0.02),
                     rng.uniform(0.01, 0.1), rng.uniform(1e-4, 5e-3), rng.uniform(1.0, 3.0)])
    speed = {t: rng.uniform(0.5, 2.0) for t in names}
    perf = {t: (base * np.r_[[1 / speed[t]] * 6, 1.0]).tolist() for t in names if rng.random() < 0.7} or {names[0]: base.tolist()}
    M0 = float(rng.choice([32, 64, 128]))
    return {
        "id": jid, "throughput": {t: float(speed[t]) for t in names}, "elapsed_time": float(rng.uniform(0, 20_000)),
        "goodput": {"perf_params": perf, "grad_sqr": float(rng.uniform(0.5, 5)), "grad_var": float(rng.uniform(0, 50)),
                    "init_batch_size": M0, "max_batch_size": M0 * float(rng.choice([8, 32, 128])),
                    "local_bsz": [8, 256], "max_gpus": max_gpus, "num_restarts": int(rng.integers(0, 4))},
    }


def elastic_rounds(seed: int, n: int, types, rounds: int, churn: float = 0.02) -> list[dict]:
    """Successive rounds' snapshots: each round ``churn``·n jobs leave and as many arrive;
    the others keep their models (what a cached goodput table reuses)."""
    rng = np.random.default_rng(seed + 7)
    snap = elastic_snapshot(seed, n, types)
    names = [t for t, _, _ in types]
    out, next_id = [snap], n
    for _ in range(rounds - 1):
        jobs = list(out[-1]["jobs"])
        leave = set(rng.choice(len(jobs), max(1, int(churn * n)), replace=False).tolist())
        jobs = [j for i, j in enumerate(jobs) if i not in leave]
        for _ in range(len(leave)):
            jobs.append(_elastic_job(rng, f"j{next_id}", names, 32))
            next_id += 1
        out.append({"cluster": snap["cluster"], "jobs": jobs})
    return out


def snapshot_json(inst: Instance) -> bytes:
    """The instance as `optsched solve` input (rigid jobs)."""
    import json

    T = inst.throughput
    jobs = [{"id": inst.job_ids[m], "scale_factor": int(inst.scale_factor[m]), "weight": float(inst.weight[m]),
             "throughput": {t: float(T[m, j]) for j, t in enumerate(inst.gpu_types) if T[m, j] > 0}}
            for m in range(inst.n)]
    return json.dumps({"cluster": {"gpus": {t: int(w) for t, w in zip(inst.gpu_types, inst.capacity)}},
                       "jobs": jobs}).encode()


def packing_round(n: int, seed: int = 0, table_path: str | None = None):
    """A simulated packing round of n active single-GPU jobs of Gavel's job types, as
    `simulate --packing` builds it (Gavel's table: throughputs and pair throughputs by job
    type; capacity n/9 per type): (Instance with the simulator's 8 candidate partners per job,
    ClassPairs of the job types). ``table_path``: Gavel's simulation_throughputs.json
    (default: $OPTSCHED_PEER_DATA/gavel/...; OptschedError when absent)."""
    import os
    from pathlib import Path

    from optsched.model import OptschedError
    from optsched.sim.jobs import parse_cluster, resolve_jobs
    from optsched.sim.packing import by_job_type
    from optsched.sim.stages import ActiveSet
    from optsched.traces.generate import generate_gavel
    from optsched.traces.throughputs import read_throughputs

    path = Path(table_path or Path(os.environ.get("OPTSCHED_PEER_DATA", "../shared/data")) / "gavel"
                / "simulation_throughputs.json")
    if not path.is_file():
        raise OptschedError(f"packing round: {path} not found (Gavel's table; set OPTSCHED_PEER_DATA)")
    table = read_throughputs(path)
    W = max(4, n // 9)
    cluster = parse_cluster(f"v100={W},p100={W},k80={W}")
    jobs = resolve_jobs(generate_gavel(table, n, 1e6, seed=seed), cluster, table, seed=seed, pair_table=table)
    act = ActiveSet.of(jobs, list(range(n)), True, 8)
    types = tuple(jobs.gpu_types)
    inst = Instance(job_ids=act.job_ids, gpu_types=types, throughput=act.throughput, scale_factor=act.scale_factor,
                    weight=act.weight, capacity=np.array([cluster.gpus[t] for t in types], float),
                    steps_remaining=np.full(n, 1e6), elapsed_time=np.zeros(n), attained_service=np.zeros(n),
                    arrival_time=act.arrival, time=0.0, pairs=act.pairs, pair_throughput=act.pair_throughput)
    return inst, by_job_type(jobs)(act.index)


def with_every_pair(inst: Instance, pc) -> Instance:
    """``inst`` with every pair of its jobs listed at the class rates (O(n²): small n only)."""
    n = inst.n
    P = np.array([(i, j) for i in range(n) for j in range(i + 1, n)], dtype=int).reshape(-1, 2)
    rates = np.stack([pc.rates(int(pc.labels[i]), int(pc.labels[j])) for i, j in P]) if len(P) else np.zeros((0, inst.k, 2))
    return dataclasses.replace(inst, pairs=P, pair_throughput=rates)


# -- instances from the peers' own data ($OPTSCHED_PEER_DATA) ---------------------------------

GAVEL_TYPES = ("k80", "p100", "v100")
GAVEL_SIZES = ((1, 2, 4, 8), (0.70, 0.10, 0.15, 0.05))  # Gavel's generator: scale factors and their odds


def peer_file(*parts: str):
    """A file of the peers' data under $OPTSCHED_PEER_DATA (default ../shared/data);
    OptschedError naming the path when it is absent (the bench skips the case)."""
    import os
    from pathlib import Path

    from optsched.model import OptschedError

    path = Path(os.environ.get("OPTSCHED_PEER_DATA", "../shared/data"), *parts)
    if not path.is_file():
        raise OptschedError(f"{path} not found (peer data; set OPTSCHED_PEER_DATA)")
    return path


def gavel_rows(path=None) -> dict:
    """Gavel's measured throughput table as {(job type, scale factor): steps/s on k80, p100, v100}
    (the solo ("null") entries; 26 job types at 1 GPU, 19 of them at 2, 4 and 8)."""
    import ast
    import json

    raw = json.loads((path or peer_file("gavel", "simulation_throughputs.json")).read_text())
    rows = {}
    for key in raw["v100"]:
        if all(key in raw[t] for t in GAVEL_TYPES):
            rows[ast.literal_eval(key)] = np.array([raw[t][key]["null"] for t in GAVEL_TYPES], float)
    return rows


def philly_sizes(path=None) -> np.ndarray:
    """Every job's GPU count in the Philly trace (Jeon et al., ATC'19): 93 % ask for 1 GPU,
    the rest 2–128."""
    import pandas as pd

    return pd.read_csv(path or peer_file("philly", "philly.csv.gz"), usecols=["num_gpus"])["num_gpus"].to_numpy(int)


def from_table(n: int, seed: int = 0, congested: bool = False, sizes: str = "gavel", rows=None,
               philly=None) -> Instance:
    """n jobs of Gavel's measured job types on k80/p100/v100: a job of s GPUs has the table's row
    for (type, s) when measured, else the largest measured size's row × (s / size)^0.8. Scale
    factors from Gavel's generator (``sizes="gavel"``) or drawn from the Philly trace's GPU
    counts (``"philly"``, sizes above a type's capacity left out). Rows repeat (26 types × a few
    sizes × 2 weights): the identical-job classes apply, unlike ``rigid``'s distinct rows."""
    rows = rows if rows is not None else gavel_rows()
    rng = np.random.default_rng(seed)
    k = len(GAVEL_TYPES)
    W = float(max(8, int(n * (CONGESTED if congested else 0.5)) // k))
    if sizes == "philly":
        pool = philly if philly is not None else philly_sizes()
        sf = rng.choice(pool[pool <= W], n).astype(float)
    else:
        sf = rng.choice(GAVEL_SIZES[0], n, p=GAVEL_SIZES[1]).astype(float)
    names = sorted({name for name, _ in rows})
    kinds = rng.integers(0, len(names), n)
    T = np.stack([_table_row(rows, names[c], int(s)) for c, s in zip(kinds, sf)])
    base = rigid(n, k, seed)  # the rest of a job (steps, ages, tenants) as the synthetic instances
    return dataclasses.replace(base, gpu_types=GAVEL_TYPES, throughput=T, scale_factor=sf,
                               capacity=np.full(k, W))


def _table_row(rows: dict, name: str, s: int) -> np.ndarray:
    if (name, s) in rows:
        return rows[(name, s)]
    size = max(q for (m, q) in rows if m == name and q <= max(s, 1))
    return rows[(name, size)] * (s / size) ** 0.8
