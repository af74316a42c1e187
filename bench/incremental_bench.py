"""Incremental rounds over a simulated trace: warm water-filling levels vs cold.

Each water-filling (or hierarchical) round after the first starts from the
previous round's prices and certifies the new optimum by a crossover
(solvers/block_exact.py); ``warm_levels=False`` solves every round cold. Both
runs simulate the same trace, so the schedules (and JCTs) should agree to
solver tolerance, and the ratio of solver seconds is the gain.

    python bench/incremental_bench.py [--jobs 3000] [--rate 30] [--policy max_min_fairness_hierarchical]
    python bench/incremental_bench.py --single 10000 --types 5     # one large solve, warm vs cold levels

Prints one table (solver seconds, wall seconds, rounds, average JCT) with the
cold/warm ratios from one run. Warm starts apply to programs above
AUTO_IPM_ENTRIES entries after identical jobs merge; Gavel-table traces merge
into a few dozen classes per round, so there both runs solve the same small
programs (ratio ~1): the gain is in large rounds (``--single``).
"""

from __future__ import annotations

import argparse
import time


def run(jobs: int, rate: float, policy: str, seed: int, warm: bool) -> dict:
    from optsched.sim import simulate
    from optsched.traces.generate import generate_gavel
    from optsched.traces.throughputs import default_throughputs

    trace = generate_gavel(default_throughputs(), jobs, rate, seed=seed, multi_gpu=True)
    cluster = {"v100": 64, "p100": 64, "k80": 64}
    t0 = time.perf_counter()
    r = simulate(trace, cluster, policy=policy, seed=seed, policy_options={"warm_levels": warm})
    s = r.summary
    return {"wall": time.perf_counter() - t0, "solver": float(s.get("solver_seconds", float("nan"))),
            "solves": int(s.get("recomputations", 0)), "jct_h": float(s.get("avg_jct", float("nan"))) / 3600}


def single(n: int, k: int, policy: str, seed: int) -> None:
    from optsched.bench.instances import rigid
    from optsched.policy import solve_instance

    inst = rigid(n, k, seed)
    print(f"{policy}, one round, {n} jobs x {k} types (optsched.bench.instances.rigid, seed {seed})")
    print(f"{'':8} {'cpu s':>8} {'wall s':>8} {'LP levels':>10} {'objective':>10}")
    out = {}
    for name, warm in (("cold", False), ("warm", True)):
        c, t = time.process_time(), time.perf_counter()
        a = solve_instance(inst, policy, time_limit=3600.0, warm_levels=warm)
        out[name] = (time.process_time() - c, time.perf_counter() - t)
        print(f"{name:8} {out[name][0]:8.2f} {out[name][1]:8.2f} {a.explanation.get('lp_rounds', 0):10d} {a.objective:10.6f}")
    print(f"{'cold/warm':8} {out['cold'][0] / out['warm'][0]:8.2f} {out['cold'][1] / out['warm'][1]:8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--rate", type=float, default=30.0, help="arrivals per hour")
    ap.add_argument("--policy", default="max_min_fairness_water_filling")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--single", type=int, default=0, help="one round of this many jobs instead of a trace")
    ap.add_argument("--types", type=int, default=5)
    a = ap.parse_args()
    if a.single:
        return single(a.single, a.types, a.policy, a.seed)
    cold = run(a.jobs, a.rate, a.policy, a.seed, warm=False)
    warm = run(a.jobs, a.rate, a.policy, a.seed, warm=True)
    print(f"{a.policy}, {a.jobs} Gavel jobs at {a.rate}/h, 64+64+64 GPUs, seed {a.seed}")
    print(f"{'':8} {'solver s':>9} {'wall s':>8} {'solves':>7} {'avg JCT h':>10}")
    for name, r in (("cold", cold), ("warm", warm)):
        print(f"{name:8} {r['solver']:9.2f} {r['wall']:8.2f} {r['solves']:7d} {r['jct_h']:10.3f}")
    print(f"{'cold/warm':8} {cold['solver'] / max(warm['solver'], 1e-9):9.2f} {cold['wall'] / max(warm['wall'], 1e-9):8.2f}")


if __name__ == "__main__":
    main()
