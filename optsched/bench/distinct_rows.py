"""Max-min instances where no two jobs are alike and capacity binds.

Identical-job classes (solvers/block_lp.identical_rows) shrink programs whose
jobs come from a table of a few dozen job types; these instances give every
job a row of its own, so the program's size is the number of jobs:

* ``random``: distinct random throughputs (``instances.rigid``), some jobs
  unable to run on some types, weights 1 or 2;
* ``gavel``: rows drawn from Gavel's measured throughput table (model, scale
  factor; k80, p100, v100) with per-job multiplicative noise (each entry ×
  U(1 − NOISE, 1 + NOISE)), so every row is distinct. Types beyond Gavel's
  three are derived from the v100 column per job: a100 = v100 × U(1.4, 2.2),
  h100 = v100 × U(2.2, 3.6) (our assumption, not measured data).

Capacity is CONGESTED GPUs per job spread over the types (as ``instances.rigid``),
so at the max-min optimum every type has a price (``binds`` checks a solution).
"""

from __future__ import annotations

import ast
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from optsched.bench import instances
from optsched.model import Instance, OptschedError

KINDS = ("random", "gavel")
SIZES = (1024, 2048, 10000)
TYPES = (3, 5)
NOISE = 0.1
GAVEL_TYPES = ("k80", "p100", "v100")
DERIVED = {"a100": (1.4, 2.2), "h100": (2.2, 3.6)}  # × the job's v100 throughput


def table_path() -> Path:
    return Path(os.environ.get("OPTSCHED_PEER_DATA", "../shared/data")) / "gavel" / "simulation_throughputs.json"


@lru_cache(maxsize=2)
def gavel_rows(path: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(throughputs (rows, 3) on k80, p100, v100; scale factors) of every (model, scale
    factor) entry of Gavel's table with a positive v100 throughput."""
    import json

    p = Path(path) if path else table_path()
    if not p.is_file():
        raise OptschedError(f"distinct rows: {p} not found (Gavel's table; set OPTSCHED_PEER_DATA)")
    raw = json.loads(p.read_text())
    keys = sorted(raw["v100"])
    T = np.array([[float(raw[t].get(key, {}).get("null", 0.0)) for t in GAVEL_TYPES] for key in keys])
    sf = np.array([float(ast.literal_eval(key)[1]) for key in keys])
    keep = T[:, 2] > 0
    return T[keep], sf[keep]


def random_instance(n: int, k: int, seed: int, gpus_per_job: float = instances.CONGESTED) -> Instance:
    return instances.rigid(n, k, seed, gpus_per_job=gpus_per_job)


def gavel_instance(n: int, k: int, seed: int, path: str | None = None,
                   gpus_per_job: float = instances.CONGESTED) -> Instance:
    """n jobs drawn from Gavel's table with per-job noise; k = 3 (Gavel's types) to 5."""
    if not 1 <= k <= len(GAVEL_TYPES) + len(DERIVED):
        raise OptschedError(f"distinct rows: types must be 1..{len(GAVEL_TYPES) + len(DERIVED)}, got {k}")
    rows, sfs = gavel_rows(path)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(rows), n)
    T3, sf = rows[pick], sfs[pick]
    extra = [T3[:, 2] * rng.uniform(lo, hi, n) for lo, hi in DERIVED.values()]
    T = np.concatenate([T3, np.stack(extra, axis=1)], axis=1)[:, :k]
    T = T * rng.uniform(1 - NOISE, 1 + NOISE, T.shape)
    base = random_instance(n, k, seed, gpus_per_job)  # weights, ages, tenants: as the random rows
    import dataclasses

    names = (GAVEL_TYPES + tuple(DERIVED))[:k]
    capacity = np.full(k, float(max(8, int(n * gpus_per_job) // k)))
    return dataclasses.replace(base, gpu_types=names, throughput=T, scale_factor=sf, capacity=capacity)


def instance(kind: str, n: int, k: int, seed: int, gpus_per_job: float = instances.CONGESTED) -> Instance:
    """``gpus_per_job``: CONGESTED (capacity binds), or e.g. 0.5 (the bench's uncongested clusters)."""
    if kind == "random":
        return random_instance(n, k, seed, gpus_per_job)
    if kind == "gavel":
        return gavel_instance(n, k, seed, gpus_per_job=gpus_per_job)
    raise OptschedError(f"distinct rows: kind must be one of {', '.join(KINDS)}, got {kind!r}")


def distinct(inst: Instance) -> bool:
    """Every job's throughput row differs from every other's."""
    return len(np.unique(inst.throughput, axis=0)) == inst.n


def binds(prices) -> bool:
    """Capacity binds at the optimum: some type has a positive price (an array, or
    an explanation's {type: price})."""
    if isinstance(prices, dict):
        prices = [v for v in prices.values() if v is not None]
    return prices is not None and bool(np.any(np.asarray(prices, dtype=float) > 0))
