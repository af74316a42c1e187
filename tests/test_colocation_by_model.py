"""A snapshot's pair throughputs by model (``colocation``): max_min_fairness --packing over
every pair of jobs, through the class program, equals the per-job program with every pair
listed in jobs[].colocated; bad tables are one-line errors naming the entry."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from optsched import parse_snapshot, solve
from optsched.cli import app
from optsched.model import OptschedError

TYPES = ("v100", "k80")


def by_model(seed: int, n: int, models: int) -> dict:
    rng = np.random.default_rng(seed)
    names = [f"m{i}" for i in range(models)]
    speed = {m: {t: float(rng.uniform(0.5, 8)) for t in TYPES if rng.random() > 0.2 or t == "v100"} for m in names}
    table: dict = {}
    for i, a in enumerate(names):
        for b in names[i:]:
            per = {}
            for t in TYPES:
                if t in speed[a] and t in speed[b] and rng.random() > 0.2:
                    ra = float(speed[a][t] * rng.uniform(0.3, 0.9))
                    rb = ra if a == b else float(speed[b][t] * rng.uniform(0.3, 0.9))
                    per[t] = [ra, rb]
            if per:
                table.setdefault(a, {})[b] = per
    jobs = [{"id": f"j{m}", "model": (mm := names[int(rng.integers(models))]), "throughput": speed[mm]}
            for m in range(n)]
    gpus = {t: int(rng.integers(1, max(2, n // 3))) for t in TYPES}
    return {"cluster": {"gpus": gpus}, "jobs": jobs, "colocation": table}


def per_pair(snap: dict) -> dict:
    """The same snapshot with every pair listed in jobs[].colocated."""
    out = copy.deepcopy(snap)
    table = out.pop("colocation")

    def rate(a, b, t):
        if t in table.get(a, {}).get(b, {}):
            return table[a][b][t]
        if t in table.get(b, {}).get(a, {}):
            return table[b][a][t][::-1]
        return None

    jobs = out["jobs"]
    for i, ja in enumerate(jobs):
        listed = {}
        for jb in jobs[i + 1:]:
            d = {t: r for t in TYPES if (r := rate(ja["model"], jb["model"], t)) is not None}
            if d:
                listed[jb["id"]] = d
        if listed:
            ja["colocated"] = listed
    return out


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 16), st.integers(1, 4))
def test_by_model_equals_every_pair_listed(seed, n, models):
    snap = by_model(seed, n, models)
    ours = solve(parse_snapshot(snap), "max_min_fairness", packing=True)
    listed = solve(parse_snapshot(per_pair(snap)), "max_min_fairness", packing=True, max_partners=None)
    assert ours.status == "optimal"
    assert ours.objective == pytest.approx(listed.objective, rel=1e-6, abs=1e-9)


def test_a_pair_split_over_its_two_orders_keeps_every_type():
    """m1→m2 lists v100 and m2→m1 lists k80: both types pack (the k80 rates were dropped: 0.7 for 0.9)."""
    jobs = [{"id": i, "model": m, "throughput": {"v100": 10, "k80": 10}}
            for i, m in (("a", "m1"), ("b", "m2"), ("c", "m2"), ("d", "m1"))]
    snap = {"cluster": {"gpus": {"v100": 1, "k80": 1}}, "jobs": jobs,
            "colocation": {"m1": {"m2": {"v100": [9, 9]}}, "m2": {"m1": {"k80": [9, 9]}}}}
    ours = solve(parse_snapshot(snap), "max_min_fairness", packing=True)
    listed = solve(parse_snapshot(per_pair(snap)), "max_min_fairness", packing=True, max_partners=None)
    assert ours.objective == pytest.approx(listed.objective, rel=1e-9) and ours.objective == pytest.approx(0.9)


def test_cli_solve_packs_by_model(tmp_path):
    snap = by_model(7, 12, 3)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(snap))
    res = CliRunner().invoke(app, ["solve", str(path), "--packing", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["status"] == "optimal" and out["explanation"]["job_classes"] >= 1 and out.get("packed_allocation")


def _with(snap: dict, fn) -> dict:
    s = copy.deepcopy(snap)
    fn(s)
    return s


@pytest.mark.parametrize("change, message", [
    (lambda s: s["jobs"][0].update(colocated={"j1": {"v100": [1.0, 1.0]}}),
     "colocation: pair throughputs are given by model here, so jobs[0].colocated"),
    (lambda s: s["colocation"].setdefault("m0", {}).setdefault("m1", {}).update(a100=[1.0, 1.0]),
     "colocation['m0']['m1']['a100']: unknown GPU type"),
    (lambda s: s["colocation"].setdefault("m0", {}).setdefault("m1", {}).update(v100=[1e-300, 1.0]),
     "colocation['m0']['m1']['v100']: rates must be finite"),
    (lambda s: (s["colocation"].setdefault("m0", {}).setdefault("m1", {}).update(v100=[1.0, 2.0]),
                s["colocation"].setdefault("m1", {}).setdefault("m0", {}).update(v100=[1.0, 2.0])),
     "colocation['m0']['m1']['v100']: [1.0, 2.0] disagrees with colocation['m1']['m0']['v100'] = [1.0, 2.0], "
     "the same pair in the other order (read in this order: [2.0, 1.0])"),
])
def test_bad_tables_are_named(change, message):
    with pytest.raises(OptschedError, match=r"^invalid snapshot: " + re.escape(message)):
        parse_snapshot(_with(by_model(1, 6, 2), change))


@pytest.mark.parametrize("policy", ["finish_time_fairness", "makespan", "max_throughput"])
@pytest.mark.parametrize("seed", [2, 5, 11])
def test_other_policies_pack_over_candidate_pairs(policy, seed):
    """Other packing policies solve over each job's candidate partners (at most 8, best packing
    gain first). With at most 9 jobs every admissible pair is a candidate, so the result is the
    program over every pair listed per job; with more it lies between no packing and every pair."""
    for n, every in ((8, True), (24, False)):
        snap = by_model(seed, n, 3)
        for m, j in enumerate(snap["jobs"]):
            j["steps_total"] = 1000.0 * (1 + m % 5)
        ours = solve(parse_snapshot(snap), policy, packing=True)
        listed = solve(parse_snapshot(per_pair(snap)), policy, packing=True, max_partners=None)
        plain = solve(parse_snapshot({k: v for k, v in snap.items() if k != "colocation"}), policy)
        assert ours.status == "optimal" and ours.explanation["colocation"].startswith("candidate pairs")
        sense = -1.0 if policy in ("finish_time_fairness", "makespan") else 1.0  # minimized: lower is better
        tol = 1e-6 * max(1.0, abs(listed.objective))
        if every:
            assert ours.objective == pytest.approx(listed.objective, rel=1e-6, abs=1e-9)
        else:
            assert sense * ours.objective <= sense * listed.objective + tol
        assert sense * ours.objective >= sense * plain.objective - tol


def test_asymmetric_self_pairs_are_refused_and_no_packing_ignores_the_table():
    snap = by_model(2, 8, 2)
    snap["colocation"] = {"m0": {"m0": {"v100": [1.0, 2.0]}}}
    with pytest.raises(OptschedError, match=r"^invalid snapshot: colocation\['m0'\]\['m0'\]\['v100'\]: two jobs of one model"):
        parse_snapshot(snap)
    # Without --packing the table is not used: the plain program.
    snap["colocation"] = {"m0": {"m0": {"v100": [1.0, 1.0]}}}
    assert solve(parse_snapshot(snap), "max_min_fairness").status == "optimal"


def test_a_session_packs_by_model_and_refuses_mixing():
    from optsched.service import Session, Store

    table = {"x": {"x": {"v100": [0.7, 0.7]}, "y": {"v100": [0.6, 0.5]}}}

    def session():
        s = Session.create({"cluster": {"gpus": {"v100": 2}}, "packing": True, "colocation": table}, Store(":memory:"))
        s.submit([{"id": f"a{i}", "model": "x", "throughput": {"v100": 1.0}} for i in range(3)]
                 + [{"id": "b", "model": "y", "throughput": {"v100": 1.0}}])
        return s

    s, twin = session(), session()
    rounds = [s.next_round()["placement"] for _ in range(3)]
    slots = [(g["server"], g["gpu"]) for j in s.state()["jobs"] for g in j["gpus"]]
    assert len(slots) > len(set(slots))  # some GPU is shared by a packed pair
    assert [twin.next_round()["placement"] for _ in range(3)] == rounds  # deterministic
    with pytest.raises(OptschedError, match=r"^jobs\[0\]\.colocated: this session gives pair throughputs by model"):
        s.submit([{"id": "c", "model": "x", "throughput": {"v100": 1.0}, "colocated": {"b": {"v100": [0.5, 0.5]}}}])
    other = Session.create({"cluster": {"gpus": {"v100": 1}}, "packing": True, "policy": "max_throughput",
                            "colocation": table}, Store(":memory:"))
    other.submit([{"id": f"a{i}", "model": "x", "throughput": {"v100": 1.0}} for i in range(2)])
    other.next_round()
    slots = [(g["server"], g["gpu"]) for j in other.state()["jobs"] for g in j["gpus"]]
    assert slots == [("v100-0", 0)] * 2  # other policies pack over candidate pairs (0.7 + 0.7 > 1)
    with pytest.raises(OptschedError, match=r"^colocation\['x'\]\['x'\]\['a100'\]: unknown GPU type"):
        Session.create({"cluster": {"gpus": {"v100": 2}}, "colocation": {"x": {"x": {"a100": [0.7, 0.7]}}}})


def test_too_many_classes_take_candidate_pairs(monkeypatch):
    """Jobs of one model with different throughputs are different classes: past the bound the
    class program is as large as the per-job one, so the jobs get candidate pairs instead."""
    import optsched.packed_classes as pcm

    monkeypatch.setattr(pcm, "MAX_CLASS_PAIRS", 50)
    snap = {"cluster": {"gpus": {"v100": 4}}, "colocation": {"x": {"x": {"v100": [0.7, 0.7]}}},
            "jobs": [{"id": f"j{i}", "model": "x", "throughput": {"v100": 1.0 + i / 100}} for i in range(20)]}
    alloc = solve(parse_snapshot(snap), "max_min_fairness", packing=True)
    plain = solve(parse_snapshot({k: v for k, v in snap.items() if k != "colocation"}), "max_min_fairness")
    assert alloc.explanation["colocation"].startswith("candidate pairs") and len(alloc.pairs)
    assert alloc.objective > plain.objective * 1.1  # 0.7 + 0.7 > 1: packing pays
    for j in snap["jobs"]:
        j["throughput"] = {"v100": 1.0}  # one class: the class program
    assert solve(parse_snapshot(snap), "max_min_fairness", packing=True).explanation["job_classes"] == 1


@pytest.mark.parametrize("jobs", [0, 1])
def test_no_pair_to_make_is_the_plain_program(jobs):
    snap = {"cluster": {"gpus": {"v100": 2}}, "colocation": {"x": {"x": {"v100": [0.7, 0.7]}}},
            "jobs": [{"id": f"j{i}", "model": "x", "throughput": {"v100": 1.0}} for i in range(jobs)]}
    alloc = solve(parse_snapshot(snap), "max_min_fairness", packing=True)
    assert len(alloc.pairs) == 0 and (jobs == 0 or alloc.status == "optimal")


def test_an_unsolved_class_program_falls_back_with_a_status(monkeypatch):
    """A solver failure (a time limit) is the documented fallback, never a silent unpacked 'optimal';
    in the simulator the per-job path over the candidate pairs takes over."""
    from optsched.solvers import lp as lp_module

    import dataclasses

    real = lp_module.solve_lp

    def failing(*args, **kwargs):  # the class program's backend hits its time limit
        sol = real(*args, **kwargs)
        return dataclasses.replace(sol, ok=False, status="time_limit") if kwargs.get("backend") == "highs-simplex" \
            else sol

    monkeypatch.setattr(lp_module, "solve_lp", failing)
    snap = by_model(3, 8, 2)
    alloc = solve(parse_snapshot(snap), "max_min_fairness", packing=True)
    assert alloc.status.startswith("fallback:") and np.isnan(alloc.objective)
    from optsched.packed_classes import solve_packed_classes
    from test_sim_packed_classes import class_instance

    inst, pc = class_instance(3, 2, 8)
    assert solve_packed_classes(inst, pc) is None


def test_candidates_read_a_model_on_its_slowest_member_and_take_max_partners():
    """Jobs of one model may differ: a2 (2 steps/s) gains with b (3/2 + 4/10 = 1.9) though a1
    (10 steps/s) does not; the rule read the model on a1 alone and offered no pair."""
    jobs = [{"id": i, "model": m, "throughput": {"v100": t}, "steps_total": 1000.0}
            for i, m, t in (("a1", "m", 10.0), ("a2", "m", 2.0), ("b", "n", 10.0))]
    snap = {"cluster": {"gpus": {"v100": 1}}, "jobs": jobs, "colocation": {"m": {"n": {"v100": [3.0, 4.0]}}}}
    for policy in ("max_throughput", "makespan", "finish_time_fairness"):
        ours = solve(parse_snapshot(snap), policy, packing=True)
        listed = solve(parse_snapshot(per_pair(snap)), policy, packing=True, max_partners=None)
        assert ours.objective == pytest.approx(listed.objective, rel=1e-6), policy
        assert "a2+b" in ours.to_dict()["packed_allocation"], policy
    # max_partners reaches the candidate rule: None offers every pair the table gains on
    big = by_model(4, 14, 2)
    n_pairs = {cap: len(solve(parse_snapshot(big), "max_throughput", packing=True, max_partners=cap).pairs)
               for cap in (1, None)}
    assert n_pairs[1] < n_pairs[None]


@pytest.mark.parametrize("bad", ["false", 2, 0.5, "no"])
def test_packing_must_be_a_flag_on_every_path(bad):
    snap = by_model(2, 6, 2)
    with pytest.raises(OptschedError, match="^packing: "):
        solve(parse_snapshot(snap), "max_min_fairness", packing=bad)


def test_packed_pair_keys_do_not_collide_when_ids_hold_a_plus():
    """(a+b, c) and (a, b+c) both read "a+b+c": one pair was lost from packed_allocation."""
    jobs = [{"id": i, "model": "m", "throughput": {"v100": 10.0}} for i in ("a+b", "a", "b+c", "c")]
    snap = {"cluster": {"gpus": {"v100": 1}}, "jobs": jobs, "colocation": {"m": {"m": {"v100": [8.0, 8.0]}}}}
    alloc = solve(parse_snapshot(snap), "max_throughput", packing=True)
    packed = alloc.to_dict()["packed_allocation"]
    assert len(packed) == len(alloc.pairs)
    used = sum(sum(fr.values()) for fr in packed.values())
    assert used == pytest.approx(float(alloc.pair_fractions.sum()))
    assert '["a+b", "c"]' in packed or '["a", "b+c"]' in packed


@pytest.mark.parametrize("scale", [1e9, 3e-9, 1e5])
def test_packing_over_job_types_is_the_same_program_at_any_weight_scale(scale):
    """The class program of max_min_fairness --packing was not scaled: weights ~1e9 gave a
    min share 0.340 against 0.371 at weight 1, 'optimal'."""
    import optsched

    def snap(w):
        jobs = [{"id": f"j{i}", "model": "A" if i % 2 else "B", "weight": w * (1 + i % 3) / 3,
                 "throughput": {"v100": 10.0 if i % 2 else 4.0, "k80": 3.0}} for i in range(6)]
        return {"cluster": {"gpus": {"v100": 2, "k80": 2}}, "jobs": jobs,
                "colocation": {"A": {"B": {"v100": [6.0, 3.0]}, "A": {"v100": [6.0, 6.0]}}, "B": {"B": {"v100": [3.0, 3.0]}}}}

    base = optsched.solve(optsched.parse_snapshot(snap(1.0)), packing=True)
    big = optsched.solve(optsched.parse_snapshot(snap(scale)), packing=True)
    assert base.status == big.status == "optimal" and base.explanation.get("job_classes")
    assert big.objective * scale == pytest.approx(base.objective, rel=1e-6)
    np.testing.assert_allclose(big.effective_throughput, base.effective_throughput, rtol=1e-6)
    for t, p in base.explanation["gpu_price"].items():
        assert big.explanation["gpu_price"][t] * scale == pytest.approx(p, rel=1e-6, abs=1e-12)
