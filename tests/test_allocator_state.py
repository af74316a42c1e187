"""The allocator's state restores exactly: a live allocator, one rebuilt from
its own state() after every round (load_state, through JSON), and one rebuilt
from a snapshot carrying that state (Allocator.from_snapshot) make identical
decisions over long random sequences. Plus the executor-event checks:
record() only for jobs that ran, jobs that vanish without remove(),
allocations computed for other jobs, malformed state."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import random_instance
from test_allocator import allocation, random_cluster, subset
from optsched.allocator import Allocator
from optsched.model import Allocation, Instance, OptschedError, parse_snapshot

ROUND = 360.0


# --------------------------------------------------------------------------
# a random scheduler loop
# --------------------------------------------------------------------------


def random_allocation(rng: np.random.Generator, inst: Instance, kind: str) -> Allocation:
    """Fractions (some rows zero), fractions plus packed pairs, or the GPU
    counts of a configuration policy that fit the cluster."""
    n, k = inst.n, inst.k
    X = rng.random((n, k)) * inst.available * (rng.random((n, k)) < 0.8)
    X /= np.maximum(X.sum(axis=1, keepdims=True), 1.0)
    X[rng.random(n) < 0.15] = 0.0
    if kind == "gpu_counts":
        counts, left = np.zeros((n, k), dtype=int), inst.capacity.astype(int).copy()
        for m in rng.permutation(n):
            fits = np.flatnonzero(inst.available[m] & (left >= 1))
            if fits.size and rng.random() < 0.7:
                j = int(rng.choice(fits))
                counts[m, j] = int(rng.integers(1, min(left[j], 4) + 1))
                left[j] -= counts[m, j]
        return allocation(inst, (counts > 0).astype(float), gpu_counts=counts)
    if kind == "pairs" and n >= 2:
        pairs, pf = [], []
        for _ in range(int(rng.integers(1, 4))):
            a, b = sorted(rng.choice(n, 2, replace=False).tolist())
            if (a, b) not in pairs:
                pairs.append((a, b))
                pf.append(rng.random(k) * (rng.random(k) < 0.7) * 0.8)
        return allocation(inst, X * 0.5, pairs, pf)
    return allocation(inst, X)


def snapshot_of(inst: Instance, cluster, state: dict):
    jobs = [
        {"id": j, "scale_factor": int(s), "throughput": {t: float(x) for t, x in zip(inst.gpu_types, row) if x > 0}}
        for j, s, row in zip(inst.job_ids, inst.scale_factor, inst.throughput)
    ]
    return parse_snapshot(json.dumps({"cluster": cluster.model_dump(), "jobs": jobs, **state}))


def decisions(p):
    return p.assignments, p.started, p.preempted, p.continued, p.migrated, p.round


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    queue=st.sampled_from(["phased", "per_type", "global", "gavel"]),
    kind=st.sampled_from(["fractions", "pairs", "gpu_counts"]),
    placement=st.sampled_from(["consolidated", "first_fit"]),
    type_order=st.sampled_from(["fixed", "shuffle"]),
    migration_cost=st.sampled_from([0.0, 0.0, 120.0]),
)
def test_restored_allocators_decide_exactly_like_the_live_one(seed, queue, kind, placement, type_order, migration_cost):
    run_sequence(seed, queue, kind, placement, type_order, migration_cost=migration_cost)


def run_sequence(seed: int, queue: str, kind: str, placement: str, type_order: str, rounds: int = 40,
                 migration_cost: float = 0.0) -> None:
    """Arrivals, departures (remove or vanishing), allocation changes and
    record() calls (some twice); after every round two allocators are rebuilt
    from their own state. Decisions (round numbers included) and states must
    stay identical to the live one's."""
    rng = np.random.default_rng(seed)
    pool = random_instance(rng, int(rng.integers(4, 30)), int(rng.integers(1, 4)))
    cluster = random_cluster(rng, pool)
    options = dict(placement=placement, seed=seed % 97, queue=queue, type_order=type_order, round_length=ROUND,
                   migration_cost=migration_cost)
    live, loaded, merged = (Allocator(cluster, **options) for _ in range(3))
    active = rng.random(pool.n) < 0.6
    active[0] = True
    inst = subset(pool, active)
    alloc = random_allocation(rng, inst, kind)
    logging.getLogger("optsched.allocator").setLevel(logging.ERROR)  # vanishing jobs warn; expected here
    for r in range(rounds):
        ps = [a.next_round(inst, alloc) for a in (live, loaded, merged)]
        assert decisions(ps[0]) == decisions(ps[1]), f"round {r}: load_state diverged"
        assert decisions(ps[0]) == decisions(ps[2]), f"round {r}: snapshot merge diverged"
        assert live.state() == merged.state(), f"round {r}: snapshot merge remembers otherwise"
        # The executor: some jobs ran less than the round (finished, failed);
        # a second record() after a restore corrects from the first.
        for j in ps[0].assignments:
            if rng.random() < 0.2:
                t, s = ps[0].gpu_type(j), float(rng.uniform(0, ROUND))
                for a in (live, loaded, merged):
                    a.record(j, t, s)
        # (Solo jobs only: a packed job whose partner vanishes is credited to the
        # pair by the live allocator and to itself by one restored without it.)
        shared = {g for j, slots in ps[0].assignments.items() for g in slots
                  if sum(g in o for o in ps[0].assignments.values()) > 1}
        again = [j for j, slots in ps[0].assignments.items() if rng.random() < 0.1 and not shared & set(slots)]
        # Departures (remove), vanishing jobs (no remove), arrivals.
        leaving = [m for m in np.flatnonzero(active) if rng.random() < 0.08]
        if len(leaving) < active.sum():
            removed = [pool.job_ids[m] for m in leaving if rng.random() < 0.8]
            for a in (live, loaded, merged):
                a.remove(removed)
            active[leaving] = False
        arriving = [m for m in np.flatnonzero(~active) if rng.random() < 0.05]
        active[arriving] = True
        previous = inst
        inst = subset(pool, active)
        if leaving or arriving or rng.random() < 0.15:
            alloc = random_allocation(rng, inst, kind) if rng.random() < 0.8 else alloc_copy(alloc, previous, inst)
        # Rebuild the other two from their own state, through JSON.
        state = json.loads(json.dumps(loaded.state()))
        loaded = Allocator(cluster, **options)
        loaded.load_state(state)
        merged = Allocator.from_snapshot(snapshot_of(inst, cluster, json.loads(json.dumps(merged.state()))), **options)
        assert live.state() == loaded.state()
        known = live.state()["rounds_present"]
        for j in (j for j in again if j in inst.job_ids and j in known):  # after the restore: its first credit too
            t, s = ps[0].gpu_type(j), float(rng.uniform(0, ROUND))
            for a in (live, loaded, merged):
                a.record(j, t, s)
        assert live.state() == loaded.state()
        # A removed job removed again after a restore: still a no-op.
        if removed_before := sorted(live.state()["allocator"]["removed"]):
            for a in (live, loaded, merged):
                a.remove(removed_before[:1])


def alloc_copy(alloc: Allocation, before: Instance, now: Instance) -> Allocation:
    """The same fractions in a new object, for the jobs still here: no reset."""
    pos = {j: m for m, j in enumerate(before.job_ids)}
    X = np.array([alloc.fractions[pos[j]] if j in pos and j in alloc.job_ids else np.zeros(now.k) for j in now.job_ids])
    return allocation(now, X.reshape(now.n, now.k))


# --------------------------------------------------------------------------
# exactness of the JSON form
# --------------------------------------------------------------------------


def warmed(rounds: int = 6, pairs: bool = True):
    rng = np.random.default_rng(8)
    inst = random_instance(rng, 12, 2, multi_gpu=False)
    inst = Instance(**{**inst.__dict__, "capacity": np.array([4.0, 3.0]), "throughput": inst.throughput + 1.0})
    cluster = random_cluster(rng, inst)  # 7 GPUs for 12 jobs: some wait
    alloc = random_allocation(rng, inst, "pairs" if pairs else "fractions")
    a = Allocator(cluster, type_order="shuffle")
    for _ in range(rounds):
        p = a.next_round(inst, alloc)
    j = next(iter(p.assignments))
    a.record(j, p.gpu_type(j), 123.456789)
    return inst, cluster, alloc, a


def test_state_round_trips_bit_for_bit_through_json():
    inst, cluster, alloc, a = warmed()
    state = a.state()
    b = Allocator(cluster, type_order="shuffle")
    b.load_state(json.loads(json.dumps(state)))
    assert b.state() == state
    assert any(k.startswith("[") for k in state["rounds_present"]), "packed pairs are units of their own"
    for _ in range(10):
        assert decisions(a.next_round(inst, alloc)) == decisions(b.next_round(inst, alloc))


def test_a_job_that_never_ran_keeps_its_priority_after_a_restore():
    """Gavel's X·1e9 for a job that never ran: rounds_received lists only jobs
    that ran, so a restored allocator still knows who never did."""
    inst = random_instance(np.random.default_rng(0), 3, 1, multi_gpu=False)
    inst = Instance(**{**inst.__dict__, "capacity": np.array([1.0]), "throughput": np.ones((3, 1))})
    cluster = random_cluster(np.random.default_rng(0), inst)
    alloc = allocation(inst, np.full((3, 1), 1 / 3))
    a = Allocator(cluster)
    a.next_round(inst, alloc)
    state = a.state()
    assert len(state["rounds_received"]) == 1 and len(state["rounds_present"]) == 3
    b = Allocator(cluster)
    b.load_state(state)
    for _ in range(6):
        assert decisions(a.next_round(inst, alloc)) == decisions(b.next_round(inst, alloc))


# --------------------------------------------------------------------------
# executor events
# --------------------------------------------------------------------------


def test_record_refuses_a_job_that_did_not_run_last_round():
    inst, cluster, alloc, a = warmed(pairs=False)
    p = a.next_round(inst, alloc)
    idle = next(j for j in inst.job_ids if j not in p.assignments)
    before = a.state()
    with pytest.raises(OptschedError, match=f"record: job '{idle}' did not run"):
        a.record(idle, inst.gpu_types[0], 10.0)
    running = next(iter(p.assignments))
    other = next(t for t in inst.gpu_types if t != p.gpu_type(running))
    with pytest.raises(OptschedError, match=f"record: job '{running}' did not run on {other}"):
        a.record(running, other, 10.0)
    assert a.state() == before


def test_a_job_missing_from_the_jobs_without_remove_is_removed_with_a_warning(caplog):
    inst, cluster, alloc, a = warmed(pairs=False)
    gone = inst.job_ids[3]
    keep = np.array([j != gone for j in inst.job_ids])
    with caplog.at_level(logging.WARNING, logger="optsched.allocator"):
        a.next_round(subset(inst, keep), alloc)  # the allocation in force still names it: fine
    assert any(gone in r.getMessage() and "without remove()" in r.getMessage() for r in caplog.records)
    assert gone not in a.state()["rounds_present"]
    a.remove(gone)  # removing it now is a no-op


def test_a_new_allocation_naming_a_job_not_in_the_round_is_an_error_naming_it():
    inst, cluster, alloc, a = warmed(pairs=False)
    before = a.state()
    fewer = subset(inst, np.arange(inst.n) != 5)
    stale = allocation(inst, np.roll(alloc.fractions, 1, axis=0))  # new X, computed for all 12 jobs
    with pytest.raises(OptschedError, match=f"allocation: job '{inst.job_ids[5]}' is not among the active jobs"):
        a.next_round(fewer, stale)
    assert a.state() == before


# --------------------------------------------------------------------------
# malformed state: one OptschedError naming the field, nothing changed
# --------------------------------------------------------------------------


@pytest.mark.parametrize("edit,message", [
    (lambda s: s.update(round_counter=3), "state: unknown field 'round_counter'"),
    (lambda s: s.update(rounds_present=[1, 2]), "rounds_present: expected a mapping"),
    (lambda s: s["rounds_present"].update(j0="many"), r"rounds_present\['j0'\]: expected a number"),
    (lambda s: s["rounds_present"].update(j0=-1.0), r"rounds_present\['j0'\]: must be a finite non-negative"),
    (lambda s: s["rounds_present"].update(j0=float("nan")), r"rounds_present\['j0'\]: must be a finite"),
    (lambda s: s["rounds_received"].update(j0={"t0": float("inf")}), r"rounds_received\['j0'\]\['t0'\]: must be a finite"),
    (lambda s: s["rounds_received"].update(j0={"t0": -0.5}), r"rounds_received\['j0'\]\['t0'\]: must be a finite non-negative"),
    (lambda s: s["deficits"].update(j0={"t9": 1.0}), r"deficits\['j0'\]: unknown GPU type 't9'"),
    (lambda s: s["prior_allocation"].update(j0=0.5), r"prior_allocation\['j0'\]: expected a mapping"),
    (lambda s: s["placement"].update(j0=[{"server": "t0-0", "gpu_type": "t0", "gpu": 99}]), r"placement\['j0'\]\[0\]: GPU 99"),
    (lambda s: s["placement"].update(j0=[{"server": "x", "gpu": 0}]), r"placement\['j0'\]\[0\]: expected"),
    (lambda s: s["placement"].update(j0=[{"server": "t0-0", "gpu_type": "t0", "gpu": 0}],
                                     j1=[{"server": "t0-0", "gpu_type": "t0", "gpu": 0},
                                         {"server": "t0-0", "gpu_type": "t0", "gpu": 1}]), "held by 'j0', 'j1'"),
    (lambda s: s.update(allocator=[1]), "allocator: expected a mapping"),
    (lambda s: s["allocator"].update(rounds=3), "allocator: unknown field 'rounds'"),
    (lambda s: s["allocator"].update(round=-1), "allocator.round: expected a non-negative whole number"),
    (lambda s: s["allocator"].update(round=2.5), "allocator.round: expected a non-negative whole number"),
    (lambda s: s["allocator"].update(removed="j0"), "allocator.removed: expected a list of job ids"),
    (lambda s: s["allocator"].update(adopt_allocation="yes"), "allocator.adopt_allocation: expected true or false"),
    (lambda s: s["allocator"].update(credits={"j0": {"t9": 0.5}}), r"allocator.credits\['j0'\]: unknown GPU type 't9'"),
    (lambda s: s["allocator"].update(credits={"nobody": {"t0": 0.5}}), r"allocator.credits\['nobody'\]: job 'nobody' did not run on t0"),
])
def test_malformed_state_is_an_error_naming_the_field(edit, message):
    inst, cluster, alloc, a = warmed(pairs=False)
    before = a.state()
    bad = json.loads(json.dumps(before))
    edit(bad)
    with pytest.raises(OptschedError, match=message):
        a.load_state(bad)
    assert a.state() == before


def test_round_counter_credits_and_removals_survive_a_snapshot():
    """What five fields lost: Placement.round, a second record() in the same
    round, removing a removed job again — all carried by ``allocator``."""
    inst, cluster, alloc, a = warmed(pairs=False)
    p = a.next_round(inst, alloc)
    j = next(iter(p.assignments))
    a.record(j, p.gpu_type(j), 100.0)
    gone = next(x for x in inst.job_ids if x != j)
    a.remove(gone)
    state = json.loads(json.dumps(a.state()))
    assert state["allocator"]["round"] == p.round + 1 and state["allocator"]["removed"] == [gone]
    keep = np.array([x != gone for x in inst.job_ids])
    b = Allocator.from_snapshot(snapshot_of(subset(inst, keep), cluster, state), type_order="shuffle")
    a.record(j, p.gpu_type(j), 200.0)  # corrects the 100 s, not a full round
    b.record(j, p.gpu_type(j), 200.0)
    a.remove(gone)
    b.remove(gone)  # a no-op, as on the live one
    assert a.state() == b.state()
    pa, pb = a.next_round(subset(inst, keep), alloc), b.next_round(subset(inst, keep), alloc)
    assert decisions(pa) == decisions(pb) and pb.round == p.round + 1


def test_an_older_state_without_the_allocator_field_still_loads():
    inst, cluster, alloc, a = warmed(pairs=False)
    state = a.state()
    del state["allocator"]
    b = Allocator(cluster, type_order="shuffle")
    b.load_state(state)
    assert b.state()["allocator"] == {"round": 0, "credits": {}, "removed": []}
    assert decisions(a.next_round(inst, alloc))[:5] == decisions(b.next_round(inst, alloc))[:5]


def test_a_placement_handed_out_does_not_change_when_jobs_are_removed_later():
    from optsched.allocator import Allocator
    from optsched.model import parse_snapshot
    from optsched.policy import solve

    snap = parse_snapshot({"version": 1, "cluster": {"gpus": {"v100": 4}},
                           "jobs": [{"id": f"j{m}", "throughput": {"v100": 1.0}} for m in range(3)]})
    allocator = Allocator(snap.cluster)
    placement = allocator.next_round(snap, solve(snap))
    before = dict(placement.assignments)
    allocator.remove(list(before))
    assert placement.assignments == before
