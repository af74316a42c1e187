"""Scale pieces (not timed): POP's merged allocation is feasible for the full
problem; cached goodput rounds decide like cold ones; packing's candidate rule
(column generation) reaches the all-pairs optimum; the configuration MILP's
shortcut stays within its documented gap; `optsched bench` runs, writes CSV and
compares."""

from __future__ import annotations

import numpy as np
import pytest

from optsched.bench import instances
from optsched.model import Instance, parse_snapshot
from optsched.policy import solve_instance


def feasible(inst: Instance, X: np.ndarray, tol: float = 1e-7) -> None:
    assert X.shape == (inst.n, inst.k)
    assert (X >= -tol).all()
    assert (X[~inst.available] <= tol).all()
    assert (X.sum(axis=1) <= 1 + tol).all()
    assert (inst.scale_factor @ X <= inst.capacity * (1 + tol) + tol).all()


@pytest.mark.parametrize("policy", ["max_min_fairness", "max_throughput", "makespan"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pop_merged_allocation_satisfies_the_full_problem(policy, seed):
    from optsched.pop import solve_partitioned

    inst = instances.rigid(300 + 37 * seed, 3 + seed % 3, seed)
    for k in (2, 3, 7):
        alloc = solve_partitioned(inst, policy, k)
        feasible(inst, alloc.fractions)
        exact = solve_instance(inst, policy)
        if policy == "max_min_fairness":  # POP can only lose against the exact solve
            assert alloc.objective <= exact.objective * (1 + 1e-6)


def test_pop_never_makes_more_groups_than_jobs_and_explains_like_the_exact_solve():
    """More partitions than jobs used to leave empty groups holding their 1/k of
    the cluster idle (objective 0.06 against 1.5, status "optimal")."""
    from optsched.pop import solve_partitioned

    inst = instances.rigid(6, 3, 4)
    capped = solve_partitioned(inst, "max_min_fairness", 100)
    same = solve_partitioned(inst, "max_min_fairness", 6)
    ex = capped.explanation
    assert ex["partitions"] == 6 and ex["partitions_requested"] == 100
    assert capped.objective == pytest.approx(same.objective, rel=1e-9) and np.allclose(capped.fractions, same.fractions)
    assert len(ex["partition_status"]) == 6
    # The table's columns: capacity use of the merged allocation, shares, prices, bottleneck marks.
    used = inst.scale_factor @ capped.fractions
    assert [ex["capacity_used"][t] for t in inst.gpu_types] == pytest.approx(used)
    assert set(ex["share_vs_fair"]) == set(inst.job_ids)
    assert set(ex["gpu_price"]) == set(inst.gpu_types)
    assert ex["bottleneck_jobs"] and set(ex["bottleneck_jobs"]) <= set(inst.job_ids)
    # The bottleneck jobs are those of the partition that sets the (minimum) objective.
    alloc = solve_partitioned(instances.rigid(400, 3, 5), "max_min_fairness", 4)
    share = alloc.explanation["share_vs_equal"]
    low = min(share[j] for j in alloc.explanation["bottleneck_jobs"])
    assert low == pytest.approx(min(share.values()), rel=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_pop_sibling_partitions_warm_from_the_first_reach_their_own_optimum(seed, monkeypatch):
    """The partitions after the first start an exact crossover from its prices:
    each must reach the optimum a cold solve of that partition reaches, and the
    warm start must have certified some (congested, so every type has a price;
    5,000 jobs per partition: at 1,500 the siblings' prices differ by more than
    the widest slack and every partition is solved cold)."""
    from optsched import pop
    from optsched.solvers import block_exact

    inst = instances.rigid(20_000, 3 + 2 * seed, seed, gpus_per_job=instances.CONGESTED)
    vertices = []
    crossover = block_exact.crossover

    def counted(lp, price, level, slack, deadline):
        out = crossover(lp, price, level, slack, deadline)
        vertices.append(out is not None and slack in pop.SIBLING_SLACKS)  # a sibling's warm start certified
        return out

    monkeypatch.setattr(block_exact, "crossover", counted)
    alloc = pop.solve_partitioned(inst, "max_min_fairness", 4, workers=1)
    monkeypatch.undo()
    assert any(vertices)
    feasible(inst, alloc.fractions)
    groups = [g for g in pop.partition(inst, 4) if len(g)]
    cold = [solve_instance(pop.sub_instance(inst, g, 4), "max_min_fairness") for g in groups]
    assert alloc.objective == pytest.approx(min(a.objective for a in cold), rel=1e-6)


def _rounds(seed, n=40, rounds=3):
    types = (("t4", 64, 4), ("a100", 32, 8), ("rtx", 32, 8))
    return [Instance.from_snapshot(parse_snapshot(s)) for s in instances.elastic_rounds(seed, n, types, rounds, churn=0.1)]


@pytest.mark.parametrize("policy", ["sia", "pollux"])
@pytest.mark.parametrize("seed", [3, 4])
def test_cached_goodput_rounds_decide_like_cold_rounds(policy, seed):
    from optsched.formulations import configurations as C

    C.GOODPUT_CACHE.clear()
    for inst in _rounds(seed):
        warm = solve_instance(inst, policy, solver="highs")
        hits = C.GOODPUT_CACHE.hits
        cold_cache = C.GoodputCache()
        a = C.goodput_matrix(inst, agnostic=(policy == "pollux"), cache=cold_cache)
        b = C.goodput_matrix(inst, agnostic=(policy == "pollux"))
        for x, y in ((a.goodput, b.goodput), (a.atomic_bsz, b.atomic_bsz), (a.accum_steps, b.accum_steps)):
            np.testing.assert_array_equal(x, y)
        C.GOODPUT_CACHE.clear()
        cold = solve_instance(inst, policy, solver="highs")
        np.testing.assert_array_equal(warm.gpu_counts, cold.gpu_counts)
        assert warm.objective == pytest.approx(cold.objective, rel=1e-12)
        C.GOODPUT_CACHE.clear()
        solve_instance(inst, policy, solver="highs")  # warm the cache again for the next round
    assert hits > 0  # later rounds reused rows of jobs that stayed


def test_goodput_cache_misses_when_a_model_changes():
    import dataclasses

    from optsched.formulations import configurations as C

    inst = _rounds(5, rounds=1)[0]
    cache = C.GoodputCache()
    C.goodput_matrix(inst, cache=cache)
    el = inst.elastic
    changed = dataclasses.replace(inst, elastic=dataclasses.replace(el, grad_var=el.grad_var * 2.0))
    before = cache.misses
    got = C.goodput_matrix(changed, cache=cache)
    assert cache.misses - before == int(el.is_elastic.sum())
    np.testing.assert_array_equal(got.goodput, C.goodput_matrix(changed, cache=C.GoodputCache()).goodput)


@pytest.mark.parametrize("seed", range(6))
def test_packing_candidate_rule_reaches_the_all_pairs_optimum(seed, monkeypatch):
    import optsched.formulations.base as B

    inst = instances.packing(60 + 10 * seed, seed, pairs_per_job=6, k=2 + seed % 2)
    exact = solve_instance(inst, "max_min_fairness", packing=True, max_partners=None).objective
    capped = solve_instance(inst, "max_min_fairness", packing=True, max_partners=2).objective
    default = solve_instance(inst, "max_min_fairness", packing=True)
    assert default.status == "optimal"
    assert default.objective >= exact * (1 - B.CG_GAP) - 1e-9
    assert default.objective <= exact * (1 + 1e-6)
    monkeypatch.setattr(B, "CG_GAP", 0.0)
    monkeypatch.setattr(B, "CG_START_WITH_CAP", False)  # a start far from the optimum: pricing does the work
    monkeypatch.setattr(B, "CG_START_PER_JOB", 1)
    assert solve_instance(inst, "max_min_fairness", packing=True).objective == pytest.approx(exact, rel=1e-6)
    assert capped <= exact * (1 + 1e-6)


@pytest.mark.parametrize("policy", ["sia", "pollux"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_configuration_milp_within_its_gap_of_the_exact_optimum(policy, seed):
    from optsched.bench.references import milp_before
    from optsched.formulations import configurations as C

    types = (("t4", 96, 4), ("a100", 48, 8), ("rtx", 48, 8)) if policy == "sia" else (("t4", 128, 4),)
    inst = Instance.from_snapshot(parse_snapshot(instances.elastic_snapshot(seed, 90, types)))
    alloc = solve_instance(inst, policy, solver="highs")
    exact = milp_before(inst, policy)
    ours = alloc.explanation["milp_value"]
    assert ours <= exact * (1 + 1e-6) + 1e-9
    assert ours >= exact - C.MIP_REL_GAP * max(abs(alloc.explanation["lp_bound"]), 1.0) - 1e-9
    counts = alloc.gpu_counts.sum(axis=0)
    assert (counts <= inst.capacity).all()


def test_undominated_pairs_keep_the_optimum():
    from optsched.formulations import configurations as C

    rng = np.random.default_rng(0)
    cfg = C.configurations(np.array([16.0, 16.0]), np.array([4, 8]))
    U = np.where(rng.random((30, len(cfg.gpus))) < 0.8, rng.uniform(0.1, 2.0, (30, len(cfg.gpus))), 0.0)
    keep = C.undominated(U, cfg)
    assert keep.sum() < (U > 0).sum()
    a = C.solve_assignment(U, cfg, np.array([16.0, 16.0]), rel_gap=0.0)
    b = C.solve_assignment(np.where(keep, U, 0.0), cfg, np.array([16.0, 16.0]), rel_gap=0.0)
    assert a.objective == pytest.approx(b.objective, rel=1e-9)


def test_bench_cli_table_csv_and_compare(tmp_path):
    from typer.testing import CliRunner

    from optsched.cli import app

    out = tmp_path / "a.csv"
    r = CliRunner().invoke(app, ["bench", "--quick", "--only", "allocator", "--repeat", "1", "--no-memory", "--csv", str(out)])
    assert r.exit_code == 0, r.output
    assert "allocator/1000jobs/256gpu" in r.output and "load average" in r.output
    text = out.read_text()
    assert text.startswith("# cores=") and "total_s" in text
    r = CliRunner().invoke(app, ["bench", "--quick", "--only", "allocator", "--repeat", "1", "--no-memory",
                                 "--compare", str(out)])
    assert r.exit_code == 0, r.output
    assert "old / new" in r.output
    r = CliRunner().invoke(app, ["bench", "--only", "no-such-case"])
    assert r.exit_code == 2


@pytest.mark.parametrize("text, says", [
    ("a,b\n1,2\n", "not an optsched bench CSV (no case, total_s, objective column)"),
    ("case,total_s,objective\nx,fast,1\n", "line 2 ('x'): total_s and objective must be numbers, got 'fast', '1'"),
    ("# cores=2\ncase,total_s,objective\na,1,2\nb,x,3\n", "line 4 ('b'): total_s and objective must be numbers"),
    (b"\xff\xfe", "cannot read"),
])
def test_bench_compare_refuses_a_wrong_file_before_running(tmp_path, text, says):
    """A wrong --compare file is refused before the bench runs (it used to print an
    empty table, or a traceback, after minutes of cases)."""
    from typer.testing import CliRunner

    from optsched.cli import app

    old = tmp_path / "old.csv"
    old.write_bytes(text if isinstance(text, bytes) else text.encode())
    r = CliRunner().invoke(app, ["bench", "--only", "allocator/1000jobs", "--compare", str(old)])
    assert r.exit_code == 2 and "--compare:" in r.output and says in r.output, r.output
    assert "allocator/1000jobs" not in r.output  # no case ran


@pytest.mark.parametrize("where, says", [("folder", "is a folder, not a file"), ("missing/x.csv", "does not exist")])
def test_bench_refuses_an_unwritable_csv_before_running(tmp_path, where, says):
    from typer.testing import CliRunner

    from optsched.cli import app

    (tmp_path / "folder").mkdir()
    r = CliRunner().invoke(app, ["bench", "--only", "allocator/1000jobs", "--csv", str(tmp_path / where)])
    assert r.exit_code == 2 and "--csv:" in r.output and says in r.output, r.output
    assert "allocator/1000jobs" not in r.output


def test_bench_compare_says_when_no_case_matches(tmp_path):
    from typer.testing import CliRunner

    from optsched.cli import app

    old = tmp_path / "old.csv"
    old.write_bytes("\ufeff# cores=2\ncase,total_s,objective\nother/case,1.0,\n".encode())  # a BOM: read too
    r = CliRunner().invoke(app, ["bench", "--quick", "--only", "allocator", "--repeat", "1", "--no-memory",
                                 "--compare", str(old)])
    assert r.exit_code == 0, r.output
    assert "no case of this run is in" in r.output and "(it has 1 case)" in r.output


def test_packing_round_of_job_types_is_the_every_pair_optimum(peer_data):
    """The bench's simulated packing round (Gavel's 26 job types): the class program's
    objective equals the per-job program over every pair of the round's jobs, and beats
    the program over the simulator's 8 candidate partners per job (what it solved before)."""
    from optsched.bench.references import packing_all_pairs
    from optsched.policy import solve_instance
    from optsched.packed_classes import solve_packed_classes

    inst, pc = instances.packing_round(120, seed=3, table_path=str(peer_data / "gavel" / "simulation_throughputs.json"))
    ours = solve_packed_classes(inst, pc)
    exact = packing_all_pairs(instances.with_every_pair(inst, pc))
    assert ours.objective == pytest.approx(exact, rel=1e-7)
    assert ours.objective >= solve_instance(inst, "max_min_fairness", packing=True).objective - 1e-9


def test_pop_reports_its_groups_timings_and_keeps_imports_apart():
    """POP reported build/solver/decode/import as 0.0 and folded a cold import into solve_seconds."""
    from optsched.pop import solve_partitioned

    inst = instances.rigid(300, 3, 1)
    alloc = solve_partitioned(inst, "max_min_fairness", 3)
    parts = alloc.explanation["partition_solve_seconds"]
    assert alloc.solver_seconds > 0 and alloc.build_seconds > 0 and alloc.decode_seconds > 0
    # in one process the groups' intervals are disjoint parts of the whole solve
    assert alloc.build_seconds + alloc.solver_seconds + alloc.decode_seconds <= alloc.solve_seconds * (1 + 1e-9)
    assert sum(parts) <= alloc.solve_seconds * (1 + 1e-9)
    assert alloc.import_seconds >= 0
