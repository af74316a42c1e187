"""The cases of `optsched bench`, their measurement, the table, the CSV and `--compare`.

A case is one policy on one instance size: parse (end-to-end cases only),
build, solver and decode seconds as the Allocation reports them, the total
wall time (median of ``repeat`` runs; per-round median and p99 for
multi-round cases), the objective, the peak memory of one extra run under
tracemalloc, and, where the bench has one, a reference (naive or peer-style
formulation, or the exact solve a faster path approximates) with its time,
the speed ratio reference / ours and the relative objective loss of ours.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import statistics
import time
import tracemalloc
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from optsched.bench import instances

# References slower than this (seconds) are not run at the next larger size.
REF_BUDGET = 60.0


@dataclass
class BenchRow:
    case: str
    policy: str
    jobs: int
    types: int
    gpus: int
    variant: str = "optsched"
    parse_s: float = float("nan")
    build_s: float = float("nan")
    solver_s: float = float("nan")
    decode_s: float = float("nan")
    total_s: float = float("nan")
    p99_s: float = float("nan")
    objective: float = float("nan")
    status: str = ""
    peak_mb: float = float("nan")
    reference: str = ""
    ref_s: float = float("nan")
    speedup: float = float("nan")
    loss: float = float("nan")  # (ref objective − ours) / |ref| for maximized objectives
    note: str = ""


@dataclass
class Case:
    key: str
    run: Callable[["Context"], BenchRow]
    quick: bool = False


@dataclass
class Context:
    repeat: int = 3
    memory: bool = True
    seed: int = 0
    skip_refs: set = field(default_factory=set)  # reference labels over budget


def _timed(fn, repeat: int):
    """(seconds, output) of the median run (the lower middle one of an even count), so a
    row's phase times (read from the output) and its total come from the same run."""
    times, outs = [], []
    for _ in range(max(repeat, 1)):
        t0 = time.perf_counter()
        outs.append(fn())
        times.append(time.perf_counter() - t0)
    mid = int(np.argsort(times, kind="stable")[(len(times) - 1) // 2])
    return times[mid], outs[mid]


MEMORY_SKIP_SECONDS = 30.0  # a case slower than this is not run again for its peak memory


def _peak_mb(fn, on: bool, seconds: float = 0.0) -> float:
    if not on or seconds > MEMORY_SKIP_SECONDS:
        return float("nan")
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def _fill(row: BenchRow, alloc) -> BenchRow:
    row.build_s, row.solver_s, row.decode_s = alloc.build_seconds, alloc.solver_seconds, alloc.decode_seconds
    row.objective, row.status = float(alloc.objective), str(alloc.status)
    return row


def _with_ref(ctx: Context, row: BenchRow, label: str, ref: Callable[[], float], larger_is_better: bool = True):
    if label in ctx.skip_refs:
        row.reference, row.note = label, (row.note + "; " if row.note else "") + "reference over budget at a smaller size"
        return row
    t, value = _timed(ref, 1)
    row.reference, row.ref_s, row.speedup = label, t, t / max(row.total_s, 1e-9)
    if value is not None and np.isfinite(value):
        row.loss = ((value - row.objective) if larger_is_better else (row.objective - value)) / max(abs(value), 1e-12)
    if t > REF_BUDGET:
        ctx.skip_refs.add(label)
    return row


# -- rigid policies ------------------------------------------------------------------------


def policy_case(policy: str, n: int, k: int, ref: str | None = None, congested: bool = False, **options) -> Case:
    key = f"{policy}/{n}x{k}" + ("/congested" if congested else "")

    def run(ctx: Context) -> BenchRow:
        from optsched.bench import references
        from optsched.policy import solve_instance

        inst = _instance(n, k, ctx.seed, congested)
        solve = lambda: solve_instance(inst, policy, time_limit=600.0, **options)  # noqa: E731
        levels = policy != "max_min_fairness"
        t, alloc = _timed(solve, ctx.repeat if n <= (1000 if levels else 10_000) else 1)
        row = _fill(BenchRow(key, policy, n, k, int(inst.capacity.sum()), variant="optsched, congested" if congested else "optsched",
                             total_s=t), alloc)
        if "lp_rounds" in alloc.explanation:
            ex = alloc.explanation
            row.note = f"{ex['lp_rounds']} levels, {ex['lp_rounds'] - ex.get('event_rounds', 0)} by LP"
        row.peak_mb = _peak_mb(solve, ctx.memory, t)
        if ref == "cvxpy":
            _with_ref(ctx, row, "Gavel-style cvxpy + ECOS", lambda: references.max_min_cvxpy(inst))
        return row

    return Case(key, run)


def _instance(n: int, k: int, seed: int, congested: bool):
    return instances.rigid(n, k, seed, gpus_per_job=instances.CONGESTED if congested else 0.5)


def pop_case(policy: str, n: int, k: int, partitions: int, congested: bool = False) -> Case:
    key = f"{policy}/{n}x{k}/pop{partitions}" + ("/congested" if congested else "")

    def run(ctx: Context) -> BenchRow:
        from optsched.policy import solve_instance
        from optsched.pop import solve_partitioned

        inst = _instance(n, k, ctx.seed, congested)
        solve = lambda: solve_partitioned(inst, policy, partitions, time_limit=600.0)  # noqa: E731
        t, alloc = _timed(solve, ctx.repeat if n <= 10_000 else 1)
        row = BenchRow(key, policy, n, k, int(inst.capacity.sum()), variant=f"POP k={partitions}" + (", congested" if congested else ""),
                       total_s=t, objective=alloc.objective, status=alloc.status)
        row.peak_mb = _peak_mb(solve, ctx.memory, t)
        return _with_ref(ctx, row, "exact solve", lambda: solve_instance(inst, policy, time_limit=600.0).objective)

    return Case(key, run)


def e2e_case(policy: str, n: int, k: int, partitions: int = 1, congested: bool = False) -> Case:
    """`optsched solve` in-process: parse the JSON snapshot, build, solve, decode."""
    key = f"solve-e2e/{policy}/{n}x{k}" + (f"/pop{partitions}" if partitions > 1 else "") + ("/congested" if congested else "")

    def run(ctx: Context) -> BenchRow:
        from optsched.model import Instance, parse_snapshot
        from optsched.policy import solve as solve_policy
        from optsched.pop import solve_partitioned

        inst = _instance(n, k, ctx.seed, congested)
        text = instances.snapshot_json(inst)

        def once():
            t0 = time.perf_counter()
            snap = parse_snapshot(text)
            parse = time.perf_counter() - t0
            if partitions > 1:
                alloc = solve_partitioned(Instance.from_snapshot(snap), policy, partitions, time_limit=600.0)
            else:
                alloc = solve_policy(snap, policy=policy, time_limit=600.0)
            return parse, alloc

        t, (parse, alloc) = _timed(once, 1)
        row = _fill(BenchRow(key, policy, n, k, int(inst.capacity.sum()), variant="optsched solve" + (f", POP k={partitions}" if partitions > 1 else "") + (", congested" if congested else ""),
                             total_s=t, parse_s=parse), alloc)
        row.peak_mb = _peak_mb(once, ctx.memory, t)
        row.note = f"snapshot {len(text) / 2**20:.0f} MB JSON"
        return row

    return Case(key, run)


def packing_case(n: int, k: int = 3) -> Case:
    def run(ctx: Context) -> BenchRow:
        from optsched.bench import references
        from optsched.policy import solve_instance

        inst = instances.packing(n, ctx.seed, k=k)
        solve = lambda: solve_instance(inst, "max_min_fairness", packing=True, time_limit=600.0)  # noqa: E731
        t, alloc = _timed(solve, ctx.repeat if n <= 1000 else 1)
        row = _fill(BenchRow(f"packing/{n}x{k}", "max_min_fairness --packing", n, k, int(inst.capacity.sum()),
                             total_s=t), alloc)
        row.note = f"{len(inst.pairs):,} measured pairs, {alloc.explanation.get('pairs_admitted', 0):,} admitted"
        if "pair_rounds" in alloc.explanation:  # column generation's rounds and certified gap to all pairs
            row.note += (f"; {alloc.explanation['pair_rounds']} CG round(s), certified gap "
                         f"{alloc.explanation['pair_gap_bound']:.1e}")
        row.peak_mb = _peak_mb(solve, ctx.memory, t)
        return _with_ref(ctx, row, "all pairs", lambda: references.packing_all_pairs(inst))

    return Case(f"packing/{n}x{k}", run)


def packing_types_case(n: int) -> Case:
    """A simulated packing round of Gavel's job types: max_min_fairness over every pair, solved
    over the job types (optsched/packed_classes.py). Reference: the per-job program over
    the simulator's 8 candidate partners per job (what `simulate --packing` solved before), and
    at n <= 300 also the per-job program over every pair (the class optimum must equal it)."""
    def run(ctx: Context) -> BenchRow:
        from optsched.bench import references
        from optsched.model import OptschedError
        from optsched.packed_classes import solve_packed_classes

        key = f"packing-types/{n}x3"
        try:
            inst, pc = instances.packing_round(n, ctx.seed)
        except OptschedError as e:
            return BenchRow(key, "max_min_fairness --packing", n, 3, 0, status="skipped", note=str(e))
        t, alloc = _timed(lambda: solve_packed_classes(inst, pc, 600.0), ctx.repeat)
        row = _fill(BenchRow(key, "max_min_fairness --packing", n, 3, int(inst.capacity.sum()), total_s=t), alloc)
        row.note = (f"{alloc.explanation['job_classes']} job types, {alloc.explanation['class_pairs']} type pairs, "
                    f"{len(alloc.pairs):,} job pairs packed; loss < 0: better than the reference")
        row.peak_mb = _peak_mb(lambda: solve_packed_classes(inst, pc, 600.0), ctx.memory, t)
        if n <= 300:
            every = instances.with_every_pair(inst, pc)
            exact = _timed(lambda: references.packing_all_pairs(every), 1)[1]
            row.note += f"; every pair per job: {exact:.6g} (rel. diff {(exact - row.objective) / exact:.1e})"
        from optsched.policy import solve_instance

        return _with_ref(ctx, row, "8 candidates per job",
                         lambda: solve_instance(inst, "max_min_fairness", packing=True, time_limit=600.0).objective)

    return Case(f"packing-types/{n}x3", run)


# -- configuration policies ----------------------------------------------------------------

def THREE(W: int):
    """Three types: 30 % / 30 % in servers of 8 (a100, rtx), the rest in servers of 4 (t4)."""
    e = int(W * 0.3) // 8 * 8
    return (("t4", W - 2 * e, 4), ("a100", e, 8), ("rtx", e, 8))


def milp_case(policy: str, gpus: int, jobs: int, rounds: int = 5) -> Case:
    # Fewer rounds (--quick) is another workload: its own name, so --compare never pairs the two.
    key = f"{policy}/{gpus}gpu/{jobs}jobs" + (f"/{rounds}rounds" if rounds != 5 else "")

    def run(ctx: Context) -> BenchRow:
        from optsched.bench import references
        from optsched.formulations.configurations import GOODPUT_CACHE
        from optsched.model import Instance, parse_snapshot
        from optsched.policy import solve_instance

        types = THREE(gpus) if policy == "sia" else (("t4", gpus, 4),)
        snaps = instances.elastic_rounds(ctx.seed, jobs, types, rounds)
        insts = [Instance.from_snapshot(parse_snapshot(s)) for s in snaps]
        GOODPUT_CACHE.clear()
        times, allocs = [], []
        for inst in insts:
            t0 = time.perf_counter()
            allocs.append(solve_instance(inst, policy, solver="highs", time_limit=60.0))
            times.append(time.perf_counter() - t0)
        warm = times[1:] or times
        row = _fill(BenchRow(key, policy, jobs, len(types), gpus, total_s=statistics.median(warm),
                             p99_s=float(np.percentile(warm, 99))), allocs[-1])
        row.objective = float(allocs[-1].explanation.get("milp_value", row.objective))
        row.build_s, row.decode_s = float("nan"), float("nan")  # a procedure: goodput table + MILP
        # the same rounds as total_s (the last round's alone could exceed the median of the walls)
        row.solver_s = float(statistics.median([a.solve_seconds for a in allocs][1:] or [allocs[0].solve_seconds]))
        row.note = f"{rounds} rounds, 2% churn; first (cold cache) {times[0]:.2f} s"
        GOODPUT_CACHE.clear()
        row.peak_mb = _peak_mb(lambda: solve_instance(insts[-1], policy, solver="highs"), ctx.memory)
        return _with_ref(ctx, row, "MILP before (no cache, gap 1e-6)", lambda: references.milp_before(insts[-1], policy))

    return Case(key, run)


# -- mechanism and end to end ----------------------------------------------------------------


def allocator_case(n: int, gpus: int) -> Case:
    key = f"allocator/{n}jobs/{gpus}gpu"

    def run(ctx: Context) -> BenchRow:
        from optsched.allocator import Allocator
        from optsched.model import Cluster
        from optsched.policy import solve_instance

        inst = instances.rigid(n, 3, ctx.seed)
        share = np.array([0.5, 0.25, 0.25])
        cap = np.floor(share * gpus / 8) * 8
        cap[0] += gpus - cap.sum()
        inst = dataclasses.replace(inst, capacity=cap)
        alloc = solve_instance(inst, "max_min_fairness")
        allocator = Allocator(Cluster(gpus={t: int(c) for t, c in zip(inst.gpu_types, cap)}))
        allocator.next_round(inst, alloc)
        times = []
        for _ in range(max(ctx.repeat, 3)):
            t0 = time.perf_counter()
            allocator.next_round(inst, alloc)
            times.append(time.perf_counter() - t0)
        row = BenchRow(key, "Allocator.next_round", n, 3, gpus, total_s=statistics.median(times),
                       p99_s=float(np.percentile(times, 99)), status="ok")
        row.peak_mb = _peak_mb(lambda: allocator.next_round(inst, alloc), ctx.memory)
        return row

    return Case(key, run)


def simulation_case(n: int, policy: str = "max_min_fairness") -> Case:
    key = f"simulate/{n}jobs/{policy}"

    def run(ctx: Context) -> BenchRow:
        from optsched.sim import simulate
        from optsched.traces.generate import generate_gavel
        from optsched.traces.throughputs import default_throughputs

        trace = generate_gavel(default_throughputs(), n, 60.0, seed=ctx.seed, multi_gpu=True)
        cluster = {"v100": 1024, "p100": 512, "k80": 512}
        t0 = time.perf_counter()
        r = simulate(trace, cluster, policy=policy, min_recompute_interval=1920.0, seed=ctx.seed)
        wall = time.perf_counter() - t0
        s = r.summary
        row = BenchRow(key, f"simulate {policy}", n, 3, 2048, variant="end to end", total_s=wall,
                       solver_s=float(s.get("solver_seconds", float("nan"))), status="ok",
                       objective=float(s.get("avg_jct", float("nan"))) / 3600)
        row.note = f"{s.get('rounds', 0):,} rounds, {s.get('recomputations', 0):,} solves; objective = avg JCT (h)"
        return row

    return Case(key, run)


CASES_QUICK = [
    policy_case("max_min_fairness", 1000, 3, ref="cvxpy"),
    policy_case("max_min_fairness", 1000, 5, ref="cvxpy"),
    policy_case("max_min_fairness", 1000, 5, ref="cvxpy", congested=True),
    pop_case("max_min_fairness", 1000, 5, 4),
    policy_case("max_min_fairness_water_filling", 1000, 5),
    policy_case("max_min_fairness_hierarchical", 1000, 5),
    packing_case(1000),
    packing_types_case(300),
    milp_case("sia", 512, 256, rounds=3),
    milp_case("pollux", 256, 32, rounds=3),
    allocator_case(1000, 256),
]

CASES_FULL = [
    *(policy_case("max_min_fairness", n, k, ref="cvxpy" if n <= 10_000 else None, congested=c)
      for c in (False, True) for n in (1000, 10_000, 100_000) for k in (3, 5)),
    *(e2e_case("max_min_fairness", 100_000, 5, congested=c) for c in (False, True)),
    *(e2e_case("max_min_fairness", 100_000, 5, partitions=4, congested=c) for c in (False, True)),
    *(pop_case("max_min_fairness", n, 5, 4, congested=c) for c in (False, True) for n in (10_000, 100_000)),
    *(milp_case("sia", g, g // 2) for g in (512, 1024, 2048)),
    milp_case("pollux", 1024, 128),
    allocator_case(10_000, 2048),
    packing_case(1000),
    packing_case(10_000),
    *(packing_types_case(n) for n in (300, 10_000)),
    *(policy_case(p, n, k) for p in ("max_min_fairness_water_filling", "max_min_fairness_hierarchical")
      for n in (1000, 10_000) for k in (3, 5)),
    simulation_case(10_000),
]


def run_cases(cases: list[Case], ctx: Context, on_done: Callable[[BenchRow], None] | None = None) -> list[BenchRow]:
    from optsched.policy import solve_instance

    solve_instance(instances.rigid(50, 3, 1), "max_min_fairness")  # imports and caches, not timed
    rows = []
    for case in cases:
        row = case.run(ctx)
        rows.append(row)
        if on_done:
            on_done(row)
    return rows


# -- output ------------------------------------------------------------------------------------

COLUMNS = [f.name for f in dataclasses.fields(BenchRow)]


def write_csv(rows: list[BenchRow], path: str, meta: dict | None = None) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        if meta:
            f.write("# " + " ".join(f"{k}={v}" for k, v in meta.items()) + "\n")
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([_csv_cell(getattr(r, c)) for c in COLUMNS])


def _csv_cell(v):
    """A value not measured (NaN) is an empty field: spreadsheets and csv readers take
    it as missing, where "nan" reads as text or as a number depending on the tool."""
    if isinstance(v, float):
        return f"{v:.6g}" if math.isfinite(v) else ""
    return v


def read_csv(path: str) -> dict[str, tuple[float, float]]:
    """An earlier run's CSV as {case: (total seconds, objective)} (NaN where empty).
    Read before the bench runs, so a wrong file is refused (OptschedError naming
    ``--compare``) before minutes of work, not after."""
    from optsched.model import OptschedError

    try:  # (utf-8-sig: a CSV re-saved by a spreadsheet starts with a BOM)
        with open(path, newline="", encoding="utf-8-sig") as f:
            numbered = [(i, ln) for i, ln in enumerate(f, start=1) if not ln.startswith("#")]
    except (OSError, UnicodeDecodeError) as e:
        raise OptschedError(f"--compare: cannot read {path}: {e}") from None
    reader = csv.DictReader(ln for _, ln in numbered)
    missing = [c for c in ("case", "total_s", "objective") if c not in (reader.fieldnames or [])]
    if missing:
        raise OptschedError(f"--compare: {path} is not an optsched bench CSV (no {', '.join(missing)} column)")
    out = {}
    for r in reader:
        line = numbered[reader.line_num - 1][0] if reader.line_num <= len(numbered) else reader.line_num
        try:
            out[r["case"]] = tuple(float(r[c]) if r[c] else float("nan") for c in ("total_s", "objective"))
        except (TypeError, ValueError):
            raise OptschedError(f"--compare: {path}: line {line} ({r['case']!r}): total_s and objective must be "
                                f"numbers, got {r['total_s']!r}, {r['objective']!r}") from None
    return out


def compare(rows: list[BenchRow], old: dict[str, tuple[float, float]]) -> list[tuple[str, float, float, float, float, float]]:
    """(case, old total, new total, old/new, old objective, new objective) for cases in both runs
    (``old`` from ``read_csv``)."""
    out = []
    for r in rows:
        if r.case not in old:
            continue
        ot, oo = old[r.case]
        out.append((r.case, ot, r.total_s, ot / r.total_s if r.total_s > 0 else float("nan"), oo, r.objective))
    return out


def fmt(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{digits}f}"


def fmt_g(x: float, missing: str = "–") -> str:
    """An objective to 6 significant digits; ``missing`` when there is none (an allocator
    round has no objective)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return missing
    return f"{x:.6g}"


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {"cores": os.cpu_count(), "load": "/".join(f"{v:.2f}" for v in load),
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "unset")}
