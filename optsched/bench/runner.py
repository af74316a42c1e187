"""The cases of `optsched bench`, their measurement, the table, the CSV and `--compare`.

A case is one policy on one family of instances (a source — the peers' own data:
Gavel's throughput table, Philly's job sizes, Sia's and Pollux's application
profiles — or distinct random rows; congested or not — and a size). Each case
draws ``instances`` instances (seeds seed, seed+1, ...; a stream case: that
many successive rounds) and solves each with optsched and, where the bench has
one, a reference (peer-style formulation or search, or the exact solve a faster
path approximates) in the same process, on the same instance. It reports CPU
seconds (the primary measure) and wall seconds as p50 / p99 / max, the median
objective, the utilization of usable capacity, the ratio of the reference's
median CPU time to ours over the instances both solved, and the objective gap
(how much worse ours is, relative to the reference: < 0 is better).

A reference gets ``ref_budget`` CPU seconds per case: once spent, it stops and
``ref_instances`` says on how many instances it ran.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import statistics
import sys
import time
import tracemalloc
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from optsched.bench import instances
from optsched.bench.measure import allocation_utilization, gap, spread, timed, utilization

REF_BUDGET = 120.0  # CPU seconds a reference may spend per case
MEMORY_SKIP_SECONDS = 30.0  # a case slower than this is not run again for its peak memory
NAN = float("nan")


@dataclass
class BenchRow:
    case: str
    policy: str
    jobs: int
    types: int
    gpus: int
    source: str = "distinct"
    variant: str = "optsched"
    instances: int = 0
    cpu_p50: float = NAN
    cpu_p99: float = NAN
    cpu_max: float = NAN
    wall_p50: float = NAN
    wall_p99: float = NAN
    wall_max: float = NAN
    total_s: float = NAN  # = cpu_p50: the column --compare reads
    objective: float = NAN  # median over the instances
    status: str = ""
    util_p50: float = NAN
    util_min: float = NAN
    peak_mb: float = NAN
    reference: str = ""
    ref_instances: int = 0
    ref_p50: float = NAN
    ref_p99: float = NAN
    ref_max: float = NAN
    ref_wall_p50: float = NAN
    speedup: float = NAN  # median reference CPU / median optsched CPU over the same instances
    gap_p50: float = NAN  # (reference − ours) / |reference| for maximized objectives (< 0: ours better)
    gap_max: float = NAN
    ref_util_p50: float = NAN
    note: str = ""


@dataclass
class Case:
    key: str
    run: Callable[["Context"], BenchRow]
    quick: bool = False


@dataclass
class Context:
    instances: int = 20
    repeat: int = 1
    memory: bool = True
    seed: int = 0
    ref_budget: float = REF_BUDGET
    say: Callable[[str], None] = field(default=lambda msg: None)  # progress (stderr)


@dataclass(frozen=True)
class Outcome:
    """What one solve gave: objective, status and utilization of usable capacity."""
    objective: float
    status: str = "ok"
    utilization: float = NAN


@dataclass(frozen=True)
class Spec:
    """A sampled case: ``draw(seed)`` one instance, ``ours(inst)`` and ``ref(inst)`` solve it."""
    key: str
    policy: str
    jobs: int
    types: int
    source: str
    draw: Callable[[int], object]
    ours: Callable[[object], Outcome]
    ref: Callable[[object], Outcome] | None = None
    ref_label: str = ""
    maximize: bool = True
    gpus: Callable[[object], int] = lambda inst: int(inst.capacity.sum())
    variant: str = "optsched"
    note: Callable[[list], str] = lambda outs: ""
    max_instances: int | None = None  # a case too large for ``instances`` draws (noted)


def _skipped(spec_or_key, why: str, **kw) -> BenchRow:
    return BenchRow(spec_or_key, kw.pop("policy", ""), kw.pop("jobs", 0), kw.pop("types", 0), 0,
                    status="skipped", note=why, **kw)


def run_spec(spec: Spec, ctx: Context) -> BenchRow:
    """Draw the case's instances and measure both sides on each (see the module's docstring)."""
    from optsched.model import OptschedError

    count = min(ctx.instances, spec.max_instances or ctx.instances)
    ours, refs, outs, ref_outs, gpus = [], [], [], [], 0
    ref_cpu, last_say = 0.0, time.perf_counter()
    for i in range(count):
        try:
            inst = spec.draw(ctx.seed + i)
        except (OptschedError, ImportError, AttributeError) as e:
            return _skipped(spec.key, str(e), policy=spec.policy, jobs=spec.jobs, types=spec.types, source=spec.source)
        gpus = spec.gpus(inst)
        s = timed(lambda: spec.ours(inst), ctx.repeat)
        ours.append(s)
        outs.append(s.out)
        if spec.ref is not None and ref_cpu <= ctx.ref_budget:
            r = timed(lambda: _guarded(spec.ref, inst), 1)
            ref_cpu += r.cpu
            refs.append((i, r))
            ref_outs.append(r.out)
        if time.perf_counter() - last_say > 10.0:
            last_say = time.perf_counter()
            ctx.say(f"    {spec.key}: {i + 1}/{count} instances")
    row = BenchRow(spec.key, spec.policy, spec.jobs, spec.types, gpus, source=spec.source, variant=spec.variant,
                   instances=count)
    _fill_ours(row, ours, outs)
    row.note = spec.note(outs) + (f"; {count} instances (case size)" if count < ctx.instances else "")
    if spec.ref is not None:
        _fill_ref(row, spec, ours, refs, outs)
    if ctx.memory and row.cpu_max <= MEMORY_SKIP_SECONDS:
        row.peak_mb = _peak_mb(lambda: spec.ours(spec.draw(ctx.seed)))
    return row


def _guarded(ref: Callable[[object], Outcome], inst) -> Outcome:
    """A reference that fails on an instance (ECOS's numerical failures, a MILP's time limit)
    counts as failed there (NaN objective, counted in the note), not as the end of the run."""
    try:
        return ref(inst)
    except Exception as e:  # noqa: BLE001 — the references are other people's methods
        return Outcome(NAN, f"failed: {type(e).__name__}")


def _fill_ours(row: BenchRow, ours: list, outs: list) -> None:
    row.cpu_p50, row.cpu_p99, row.cpu_max = spread(s.cpu for s in ours)
    row.wall_p50, row.wall_p99, row.wall_max = spread(s.wall for s in ours)
    row.total_s = row.cpu_p50
    row.objective = float(np.median([o.objective for o in outs])) if outs else NAN
    row.util_p50, _, _ = spread(o.utilization for o in outs)
    utils = [o.utilization for o in outs if np.isfinite(o.utilization)]
    row.util_min = min(utils) if utils else NAN
    counts = {}
    for o in outs:
        counts[o.status] = counts.get(o.status, 0) + 1
    row.status = ", ".join(f"{k} {v}" if len(counts) > 1 else k for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def _fill_ref(row: BenchRow, spec: Spec, ours: list, refs: list, outs: list) -> None:
    row.reference, row.ref_instances = spec.ref_label, len(refs)
    failed = [r.out.status for _, r in refs if r.out.status.startswith("failed")]
    refs = [(i, r) for i, r in refs if not r.out.status.startswith("failed")]  # times of solves that ended
    notes = [f"reference failed on {len(failed)} ({failed[0][8:]})"] if failed else []
    if refs:
        row.ref_p50, row.ref_p99, row.ref_max = spread(r.cpu for _, r in refs)
        row.ref_wall_p50 = spread(r.wall for _, r in refs)[0]
        paired = statistics.median(ours[i].cpu for i, _ in refs)
        row.speedup = row.ref_p50 / paired if paired > 0 else NAN
        row.gap_p50, _, row.gap_max = spread(gap(outs[i].objective, r.out.objective, spec.maximize) for i, r in refs)
        row.ref_util_p50 = spread(r.out.utilization for _, r in refs)[0]
    if row.ref_instances < row.instances:
        notes.append(f"reference on the first {row.ref_instances} (CPU budget)")
    row.note = "; ".join([row.note] * bool(row.note) + notes)


def _peak_mb(fn) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def sampled(spec: Spec) -> Case:
    return Case(spec.key, lambda ctx: run_spec(spec, ctx))


# -- instances --------------------------------------------------------------------------------

_PEER: dict = {}


def _peer(name: str, load: Callable[[], object]):
    """Peer data read once per process (every case draws from it)."""
    if name not in _PEER:
        _PEER[name] = load()
    return _PEER[name]


def draw_rigid(source: str, n: int, k: int, congested: bool, family: bool = False) -> Callable[[int], object]:
    """Instances of one source: ``gavel`` / ``philly`` (Gavel's measured rows; Gavel's or
    Philly's job sizes), ``distinct`` (random rows, no two alike: ``instances.rigid``), and for
    the max-min family congested the distinct-row instances of optsched/bench/distinct_rows.py:
    ``distinct`` (its random rows) and ``gavel-noisy`` (Gavel's rows, each job's entries × U(0.9, 1.1))."""
    if source in ("distinct", "gavel-noisy") and congested and family:
        return _distinct_rows("random" if source == "distinct" else "gavel", n, k)
    if source == "distinct":
        return lambda seed: instances.rigid(n, k, seed, gpus_per_job=instances.CONGESTED if congested else 0.5)
    rows = lambda: _peer("gavel", instances.gavel_rows)  # noqa: E731
    if source == "philly":
        return lambda seed: instances.from_table(n, seed, congested, "philly", rows(),
                                                 _peer("philly", instances.philly_sizes))
    return lambda seed: instances.from_table(n, seed, congested, "gavel", rows())


def _distinct_rows(kind: str, n: int, k: int) -> Callable[[int], object]:
    def draw(seed):
        from optsched.model import OptschedError

        try:
            from optsched.bench import distinct_rows
        except ImportError:
            raise OptschedError("needs optsched/bench/distinct_rows.py (distinct-row congested instances), "
                                "not present") from None
        return distinct_rows.instance(kind, n, k, seed)
    return draw


def _solve(policy: str, **options) -> Callable[[object], Outcome]:
    def ours(inst) -> Outcome:
        from optsched.policy import solve_instance

        alloc = solve_instance(inst, policy, time_limit=600.0, **options)
        return Outcome(float(alloc.objective), str(alloc.status), allocation_utilization(inst, alloc))
    return ours


def _fractional_ref(fn) -> Callable[[object], Outcome]:
    def ref(inst) -> Outcome:
        value, X = fn(inst)
        return Outcome(float(value), "ok", utilization(inst, X))
    return ref


# policy: (label, reference, objective maximized)
REFS = {
    "max_min_fairness": ("Gavel-style cvxpy + ECOS", "max_min", True),
    "max_min_fairness_water_filling": ("Gavel-style LP + MILP per level", "water_filling", True),
    "finish_time_fairness": ("Gavel-style inv_pos per job, ECOS", "finish_time_fairness", False),
    "makespan": ("Gavel-style bisection, ECOS", "makespan", False),
}
FAMILY = ("max_min_fairness", "max_min_fairness_water_filling", "max_min_fairness_hierarchical")


def policy_case(policy: str, n: int, k: int, source: str = "distinct", congested: bool = False,
                ref: bool = True) -> Case:
    from optsched.bench import references

    key = f"{policy}/{source}/{n}x{k}" + ("/congested" if congested else "")
    label, fn, maximize = REFS.get(policy, ("", None, True))
    spec = Spec(key, policy, n, k, source, draw_rigid(source, n, k, congested, policy in FAMILY), _solve(policy),
                _fractional_ref(getattr(references, fn)) if ref and fn else None, label if ref else "", maximize,
                variant="optsched" + (", congested" if congested else ""))
    return sampled(spec)


def pop_case(policy: str, n: int, k: int, partitions: int, congested: bool = False) -> Case:
    key = f"{policy}/distinct/{n}x{k}/pop{partitions}" + ("/congested" if congested else "")

    def ours(inst) -> Outcome:
        from optsched.pop import solve_partitioned

        alloc = solve_partitioned(inst, policy, partitions, time_limit=600.0)
        return Outcome(float(alloc.objective), str(alloc.status), allocation_utilization(inst, alloc))

    spec = Spec(key, policy, n, k, "distinct", draw_rigid("distinct", n, k, congested), ours, _solve(policy),
                "exact solve", variant=f"POP k={partitions}" + (", congested" if congested else ""),
                max_instances=5 if n > 10_000 else None)
    return sampled(spec)


def e2e_case(policy: str, n: int, k: int, congested: bool = False) -> Case:
    """`optsched solve` in-process: parse the JSON snapshot, build, solve, decode."""
    key = f"solve-e2e/{policy}/distinct/{n}x{k}" + ("/congested" if congested else "")

    def draw(seed):
        inst = instances.rigid(n, k, seed, gpus_per_job=instances.CONGESTED if congested else 0.5)
        return inst, instances.snapshot_json(inst)

    def ours(drawn) -> Outcome:
        from optsched.model import parse_snapshot
        from optsched.policy import solve as solve_policy

        alloc = solve_policy(parse_snapshot(drawn[1]), policy=policy, time_limit=600.0)
        return Outcome(float(alloc.objective), str(alloc.status), NAN)

    spec = Spec(key, policy, n, k, "distinct", draw, ours, gpus=lambda d: int(d[0].capacity.sum()),
                variant="optsched solve" + (", congested" if congested else ""), max_instances=5,
                note=lambda outs: "parse + solve of the JSON snapshot")
    return sampled(spec)


def packing_case(n: int, k: int = 3) -> Case:
    def ref(inst) -> Outcome:
        from optsched.bench.references import packing_all_pairs

        return Outcome(packing_all_pairs(inst))

    spec = Spec(f"packing/distinct/{n}x{k}", "max_min_fairness --packing", n, k, "distinct",
                lambda seed: instances.packing(n, seed, k=k), _solve("max_min_fairness", packing=True), ref,
                "all pairs", note=lambda outs: "16 measured partners per job")
    return sampled(spec)


def packing_types_case(n: int) -> Case:
    """A simulated packing round of Gavel's job types, solved over the job types
    (optsched/packed_classes.py); reference: the per-job program over the simulator's 8
    candidate partners per job (what `simulate --packing` solved before)."""
    def ours(drawn) -> Outcome:
        from optsched.packed_classes import solve_packed_classes

        alloc = solve_packed_classes(drawn[0], drawn[1], 600.0)
        return Outcome(float(alloc.objective), str(alloc.status))

    def ref(drawn) -> Outcome:
        from optsched.policy import solve_instance

        return Outcome(float(solve_instance(drawn[0], "max_min_fairness", packing=True, time_limit=600.0).objective))

    spec = Spec(f"packing-types/gavel/{n}x3", "max_min_fairness --packing", n, 3, "gavel",
                lambda seed: instances.packing_round(n, seed), ours, ref, "8 candidates per job",
                gpus=lambda d: int(d[0].capacity.sum()), note=lambda outs: "Gavel's 26 job types; gap < 0: better")
    return sampled(spec)


# -- configuration policies ----------------------------------------------------------------


def _config_ours(policy: str):
    def ours(inst) -> Outcome:
        from optsched.policy import solve_instance

        alloc = solve_instance(inst, policy, time_limit=60.0)
        value = float(alloc.explanation.get("milp_value", alloc.objective))
        return Outcome(value, str(alloc.status), allocation_utilization(inst, alloc)), alloc
    return ours


def _config_ref(policy: str):
    from optsched.bench import references

    if policy == "pollux":
        return "Pollux-style GA (100 × 100)", lambda inst: Outcome(references.pollux_ga(inst))
    return "Sia-style MILP (HiGHS, gap 1e-6)", lambda inst: Outcome(references.milp_before(inst, policy))


def profile_case(policy: str, gpus: int, jobs: int) -> Case:
    """Independent cold rounds of jobs from the peers' application profiles
    (optsched/bench/profile_instances.py)."""
    key = f"{policy}/profiles/{gpus}gpu/{jobs}jobs"
    label, ref = _config_ref(policy)
    ours = _config_ours(policy)

    def draw(seed):
        from optsched.bench import profile_instances
        from optsched.formulations.configurations import GOODPUT_CACHE

        GOODPUT_CACHE.clear()  # a cold round
        return getattr(profile_instances, f"{policy}_instances")(gpus, jobs, seed)[0]

    spec = Spec(key, policy, jobs, 3 if policy == "sia" else 1, "profiles", draw, lambda inst: ours(inst)[0], ref,
                label, variant="optsched, cold round", note=lambda outs: "objective = Σ utility (the MILP's)")
    return sampled(spec)


def stream_case(policy: str, gpus: int, jobs: int, rounds: int = 50, source: str = "profiles") -> Case:
    """Successive rounds with 2 % churn, each round's running configurations our previous
    decision: per-round CPU p50 / p99 / max over the stream (``rounds`` rounds, or the
    bench's instance count when larger)."""
    key = f"{policy}/{source}/{gpus}gpu/{jobs}jobs/stream{rounds}"

    def run(ctx: Context) -> BenchRow:
        from optsched.formulations.configurations import GOODPUT_CACHE
        from optsched.model import OptschedError

        label, ref = _config_ref(policy)
        try:
            rounds_of = _rounds(policy, gpus, jobs, source, ctx.seed)
        except (OptschedError, ImportError, AttributeError) as e:
            return _skipped(key, str(e), policy=policy, jobs=jobs, source=source)
        GOODPUT_CACHE.clear()
        ours, outs, refs, ref_cpu, inst = [], [], [], 0.0, None
        solve = _config_ours(policy)
        for r, inst in enumerate(rounds_of(rounds, lambda inst: _record(ours, outs, timed(lambda: solve(inst))))):
            if ref_cpu <= ctx.ref_budget:
                s = timed(lambda: _guarded(ref, inst))
                ref_cpu += s.cpu
                refs.append((r, s))
            if r % 10 == 9:
                ctx.say(f"    {key}: round {r + 1}/{rounds}")
        row = BenchRow(key, policy, jobs, int(inst.k), int(inst.capacity.sum()), source=source,
                       variant="optsched, successive rounds", instances=len(ours))
        _fill_ours(row, ours, outs)
        row.note = f"{len(ours)} rounds, 2% churn; first round {ours[0].cpu:.2f} CPU s"
        _fill_ref(row, Spec(key, policy, jobs, inst.k, source, None, None, ref, label), ours, refs, outs)
        return row

    return Case(key, run)


def _record(ours: list, outs: list, sample):
    ours.append(sample)
    outs.append(sample.out[0])
    return sample.out[1]


def _rounds(policy: str, gpus: int, jobs: int, source: str, seed: int):
    """rounds_of(count, decide) -> an iterator of the stream's instances, each decided by
    ``decide`` (which measures our solve) before the next is drawn."""
    if source == "profiles":
        from optsched.bench import profile_instances

        make = getattr(profile_instances, f"{policy}_stream")
        return lambda count, decide: _decided(make(gpus, jobs, count, seed=seed, decide=decide), decide)
    from optsched.model import Instance, parse_snapshot

    types = THREE(gpus) if policy == "sia" else (("t4", gpus, 4),)

    def synthetic(count, decide):
        for snap in instances.elastic_rounds(seed, jobs, types, count):
            inst = Instance.from_snapshot(parse_snapshot(snap))
            yield inst
            decide(inst)
    return synthetic


def _decided(stream, decide):
    """The profile stream calls ``decide`` on every round but its last; the last is decided here."""
    inst = None
    for inst in stream:
        yield inst
    if inst is not None:
        decide(inst)


def THREE(W: int):
    """Three types: 30 % / 30 % in servers of 8 (a100, rtx), the rest in servers of 4 (t4)."""
    e = int(W * 0.3) // 8 * 8
    return (("t4", W - 2 * e, 4), ("a100", e, 8), ("rtx", e, 8))


# -- mechanism and end to end ----------------------------------------------------------------


def allocator_case(n: int, gpus: int) -> Case:
    """Allocator.next_round on one max-min allocation per instance (after a first round)."""
    key = f"allocator/{n}jobs/{gpus}gpu"

    def draw(seed):
        from optsched.allocator import Allocator
        from optsched.model import Cluster
        from optsched.policy import solve_instance

        inst = instances.rigid(n, 3, seed)
        cap = np.floor(np.array([0.5, 0.25, 0.25]) * gpus / 8) * 8
        cap[0] += gpus - cap.sum()
        inst = dataclasses.replace(inst, capacity=cap)
        alloc = solve_instance(inst, "max_min_fairness")
        allocator = Allocator(Cluster(gpus={t: int(c) for t, c in zip(inst.gpu_types, cap)}))
        allocator.next_round(inst, alloc)
        return inst, alloc, allocator

    def ours(drawn) -> Outcome:
        inst, alloc, allocator = drawn
        allocator.next_round(inst, alloc)
        return Outcome(NAN, "ok")

    return sampled(Spec(key, "Allocator.next_round", n, 3, "distinct", draw, ours, gpus=lambda d: gpus))


def simulation_case(n: int, policy: str = "max_min_fairness") -> Case:
    """A whole simulation (not a round): one trace per seed, few of them."""
    key = f"simulate/gavel/{n}jobs/{policy}"

    def draw(seed):
        from optsched.traces.generate import generate_gavel
        from optsched.traces.throughputs import default_throughputs

        return generate_gavel(default_throughputs(), n, 60.0, seed=seed, multi_gpu=True), seed

    def ours(drawn) -> Outcome:
        from optsched.sim import simulate

        r = simulate(drawn[0], {"v100": 1024, "p100": 512, "k80": 512}, policy=policy,
                     min_recompute_interval=1920.0, seed=drawn[1])
        return Outcome(float(r.summary.get("avg_jct", NAN)) / 3600, "ok")

    return sampled(Spec(key, f"simulate {policy}", n, 3, "gavel", draw, ours, gpus=lambda d: 2048,
                        variant="end to end", max_instances=3, note=lambda outs: "objective = avg JCT (h)"))


def _policies(sizes, sources=(("gavel", 3), ("philly", 3), ("distinct", 3), ("distinct", 5)),
              policies=("max_min_fairness",), congested=(False, True), ref=True) -> list[Case]:
    return [policy_case(p, n, k, s, c, ref) for p in policies for c in congested for s, k in sources for n in sizes]


QUICK_SOURCES = (("gavel", 3), ("distinct", 3))
CASES_QUICK = [
    *_policies((500,), QUICK_SOURCES),
    *_policies((300,), QUICK_SOURCES, ("max_min_fairness_water_filling", "makespan", "finish_time_fairness"), (False,)),
    policy_case("max_min_fairness_hierarchical", 500, 3),
    pop_case("max_min_fairness", 1000, 5, 4),
    packing_case(500),
    packing_types_case(300),
    profile_case("sia", 256, 128),
    stream_case("sia", 256, 128, rounds=5),
    profile_case("pollux", 128, 32),
    stream_case("sia", 512, 256, rounds=3, source="synthetic"),
    allocator_case(1000, 256),
]

DISTINCT_ROWS = (1024, 2048, 10_000)  # the sizes of the distinct-row congested max-min instances

CASES_FULL = [
    *_policies((1000, 2000, 10_000), (("gavel", 3), ("philly", 3)), congested=(False, True)),
    *_policies((1000, 2000, 10_000), (("distinct", 3), ("distinct", 5)), congested=(False,)),
    *_policies(DISTINCT_ROWS, (("distinct", 3), ("distinct", 5), ("gavel-noisy", 3), ("gavel-noisy", 5)),
               congested=(True,)),
    *_policies((1000, 2000), (("gavel", 3), ("distinct", 3)),
               ("max_min_fairness_water_filling", "makespan", "finish_time_fairness")),
    *_policies((10_000,), (("gavel", 3), ("distinct", 3)),
               ("max_min_fairness_water_filling", "makespan", "finish_time_fairness")),
    *_policies((1000, 10_000), (("distinct", 3), ("distinct", 5)), ("max_min_fairness_hierarchical",), ref=False),
    *(pop_case("max_min_fairness", n, 5, 4, congested=c) for c in (False, True) for n in (10_000, 100_000)),
    *(e2e_case("max_min_fairness", 100_000, 5, congested=c) for c in (False, True)),
    *(packing_case(n) for n in (1000, 2000, 10_000)),
    *(packing_types_case(n) for n in (300, 2000, 10_000)),
    *(profile_case(p, g, g // 2) for p in ("sia", "pollux") for g in (1024, 2048)),
    *(stream_case(p, g, g // 2) for p in ("sia", "pollux") for g in (1024, 2048)),
    *(stream_case("sia", g, g // 2, rounds=20, source="synthetic") for g in (512, 2048)),
    allocator_case(10_000, 2048),
    simulation_case(10_000),
]


def run_cases(cases: list[Case], ctx: Context, on_done: Callable[[BenchRow], None] | None = None) -> list[BenchRow]:
    """Run ``cases`` in order after one untimed warm-up of both sides (imports, caches)."""
    from optsched.bench import references
    from optsched.policy import solve_instance

    warm = instances.rigid(50, 3, 1)
    solve_instance(warm, "max_min_fairness")
    if any(REFS.get(c.key.split("/")[0]) for c in cases):
        references.max_min(warm)
    # the configuration policies' own first call (their modules, the goodput model, HiGHS's first
    # load) would otherwise land in the first instance's CPU time, and so in the case's p99
    from optsched.model import Instance, parse_snapshot

    for policy in sorted({c.key.split("/")[0] for c in cases} & {"sia", "pollux"}):
        solve_instance(Instance.from_snapshot(parse_snapshot(instances.elastic_snapshot(0, 8, THREE(64)))), policy)
    rows = []
    for i, case in enumerate(cases, start=1):
        ctx.say(f"[{i}/{len(cases)}] {case.key} ...")
        t0 = time.perf_counter()
        row = case.run(ctx)
        rows.append(row)
        ctx.say(f"[{i}/{len(cases)}] {case.key}: done in {time.perf_counter() - t0:.0f} s")
        if on_done:
            on_done(row)
    return rows


def summary(r: BenchRow) -> str:
    """One line of a finished case (the CLI prints it as the case ends)."""
    if r.status == "skipped":
        return f"{r.case}: skipped ({r.note})"
    out = (f"{r.case}: CPU p50 {fmt(r.cpu_p50)} / p99 {fmt(r.cpu_p99)} / max {fmt(r.cpu_max)} s over {r.instances}, "
           f"objective {fmt_g(r.objective, 'n/a')}")
    if r.reference:
        out += f"; {r.reference} p50 {fmt(r.ref_p50)} s ({r.ref_instances}), ratio {fmt(r.speedup, 1)}×, gap {fmt_e(r.gap_p50)}"
    return out


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


@dataclass(frozen=True)
class OldRun:
    """An earlier run's CSV: {case: (seconds, objective)} and what its seconds are: ``cpu``
    (this bench's total_s, the median CPU seconds over the instances) or ``wall`` (a CSV of
    the bench before it drew many instances: the wall seconds of one instance)."""
    cases: dict
    measure: str

    def __len__(self) -> int:
        return len(self.cases)

    def __contains__(self, case) -> bool:
        return case in self.cases

    def __getitem__(self, case):
        return self.cases[case]


def read_csv(path: str) -> OldRun:
    """An earlier run's CSV (``OldRun``; NaN where empty). Read before the bench runs, so a
    wrong file is refused (OptschedError naming ``--compare``) before minutes of work, not after."""
    from optsched.model import OptschedError

    try:  # (utf-8-sig: a CSV re-saved by a spreadsheet starts with a BOM)
        with open(path, newline="", encoding="utf-8-sig") as f:
            numbered = [(i, ln) for i, ln in enumerate(f, start=1) if not ln.startswith("#")]
    except (OSError, UnicodeDecodeError) as e:
        raise OptschedError(f"--compare: cannot read {path}: {e}") from None
    reader = csv.DictReader(ln for _, ln in numbered)
    fields = reader.fieldnames or []
    missing = [c for c in ("case", "total_s", "objective") if c not in fields]
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
    return OldRun(out, "cpu" if "cpu_p50" in fields else "wall")


def compare(rows: list[BenchRow], old) -> list[tuple[str, float, float, float, float, float]]:
    """(case, old seconds, new seconds, old/new, old objective, new objective) for cases in both
    runs (``old`` from ``read_csv``). New seconds are the CPU median, or the wall median when the
    earlier CSV has wall seconds only (``old.measure == "wall"``)."""
    wall = getattr(old, "measure", "cpu") == "wall"
    out = []
    for r in rows:
        if r.case not in old or r.status == "skipped":
            continue
        ot, oo = old[r.case]
        nt = r.wall_p50 if wall else r.total_s
        out.append((r.case, ot, nt, ot / nt if nt > 0 else float("nan"), oo, r.objective))
    return out


def fmt(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{digits}f}"


def fmt_e(x: float) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.1e}"


def fmt_g(x: float, missing: str = "–") -> str:
    """An objective to 6 significant digits; ``missing`` when there is none (an allocator
    round has no objective)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return missing
    return f"{x:.6g}"


def load_average() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return "/".join(f"{v:.2f}" for v in load)


def machine() -> dict:
    return {"cores": os.cpu_count(), "load": load_average(),
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "unset")}


def stderr_say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
