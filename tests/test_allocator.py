"""The round-based allocator: invariants over random clusters and job mixes,
convergence of time fractions to X, stability, state round trips, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import random_instance
from optsched.allocator import Allocator, Placement
from optsched.model import Allocation, Cluster, Instance, OptschedError, Server, parse_snapshot
from optsched.policy import solve_instance


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def allocation(inst: Instance, X: np.ndarray, pairs=None, pair_fractions=None, gpu_counts=None) -> Allocation:
    extra = {}
    if pairs is not None:
        extra = {"pairs": np.asarray(pairs, dtype=int), "pair_fractions": np.asarray(pair_fractions, dtype=float)}
    return Allocation(
        "test", "optimal", 0.0, 0.0, inst.job_ids, inst.gpu_types, np.asarray(X, float), np.zeros(inst.n),
        gpu_counts=gpu_counts, **extra,
    )


def random_cluster(rng: np.random.Generator, inst: Instance) -> Cluster:
    """Servers of random sizes (1..8 GPUs) adding up to each type's capacity."""
    servers = []
    for t, cap in zip(inst.gpu_types, inst.capacity.astype(int)):
        i, left = 0, cap
        while left:
            g = int(min(left, rng.integers(1, 9)))
            servers.append(Server(id=f"{t}-{i}", gpu_type=t, gpus=g))
            left -= g
            i += 1
    return Cluster(gpus={t: int(c) for t, c in zip(inst.gpu_types, inst.capacity)}, servers=servers)


def subset(inst: Instance, keep: np.ndarray) -> Instance:
    keep = np.asarray(keep, bool)
    return Instance(
        job_ids=tuple(j for j, k in zip(inst.job_ids, keep) if k),
        gpu_types=inst.gpu_types,
        throughput=inst.throughput[keep],
        scale_factor=inst.scale_factor[keep],
        weight=inst.weight[keep],
        capacity=inst.capacity,
        steps_remaining=inst.steps_remaining[keep],
        elapsed_time=inst.elapsed_time[keep],
        attained_service=inst.attained_service[keep],
        arrival_time=inst.arrival_time[keep],
    )


def check_round(p: Placement, inst: Instance, cluster: Cluster, alloc: Allocation) -> None:
    """Invariants of one round."""
    sf = dict(zip(inst.job_ids, inst.scale_factor.astype(int)))
    caps = {s.id: s.gpus for s in cluster.servers}
    server_type = {s.id: s.gpu_type for s in cluster.servers}
    holders: dict[tuple[str, int], list[str]] = {}
    for job, slots in p.assignments.items():
        assert job in sf
        assert len(slots) == sf[job], f"{job} holds {len(slots)} GPUs, scale factor {sf[job]}"
        assert len({s.gpu_type for s in slots}) == 1, f"{job} spans GPU types"
        assert len(set(slots)) == len(slots)
        for s in slots:
            assert s.server in caps and 0 <= s.gpu < caps[s.server] and server_type[s.server] == s.gpu_type
            holders.setdefault((s.server, s.gpu), []).append(job)
    used: dict[str, int] = {}
    for (server, _), jobs in holders.items():
        used[server] = used.get(server, 0) + 1
        if len(jobs) > 1:
            a, b = jobs
            assert len(jobs) == 2 and set(p.assignments[a]) == set(p.assignments[b])
            pos = {j: m for m, j in enumerate(alloc.job_ids)}
            t = alloc.gpu_types.index(p.gpu_type(a))
            allowed = {frozenset((alloc.job_ids[x], alloc.job_ids[y])) for (x, y), pf in zip(alloc.pairs, alloc.pair_fractions) if pf[t] > 0}
            assert frozenset((a, b)) in allowed and pos, f"{a} and {b} share GPUs without an allocated pair"
    for server, u in used.items():
        assert u <= caps[server]


def run(allocator: Allocator, inst: Instance, alloc: Allocation, rounds: int) -> np.ndarray:
    """Empirical fraction of rounds each job spent on each type."""
    col = {t: c for c, t in enumerate(inst.gpu_types)}
    pos = {j: m for m, j in enumerate(inst.job_ids)}
    counts = np.zeros((inst.n, inst.k))
    for _ in range(rounds):
        p = allocator.next_round(inst, alloc)
        for job in p.assignments:
            counts[pos[job], col[p.gpu_type(job)]] += 1
    return counts / rounds


def cluster_of(inst: Instance) -> Cluster:
    return Cluster(gpus={t: int(c) for t, c in zip(inst.gpu_types, inst.capacity)})


# --------------------------------------------------------------------------
# invariants
# --------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), placement=st.sampled_from(["consolidated", "first_fit", "cpsat"]))
def test_rounds_respect_servers_scale_factors_and_pairs(seed, placement):
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, int(rng.integers(1, 40)), int(rng.integers(1, 4)))
    cluster = random_cluster(rng, inst)
    # Any non-negative X with rows summing to at most 1 — not necessarily
    # within capacity: the mechanism must stay safe on any input.
    X = rng.random((inst.n, inst.k)) * inst.available
    X /= np.maximum(X.sum(axis=1, keepdims=True), 1.0)
    X[rng.random(inst.n) < 0.2] = 0.0
    pairs, pf = [], []
    for _ in range(int(rng.integers(0, 4))):
        a, b = rng.choice(inst.n, 2, replace=False) if inst.n > 1 else (0, 0)
        if a != b:
            pairs.append((a, b))
            pf.append(rng.random(inst.k) * (rng.random(inst.k) < 0.7))
    alloc = allocation(inst, X, pairs or None, pf or None) if pairs else allocation(inst, X)
    allocator = Allocator(cluster, placement=placement, seed=seed % 1000, placement_time_limit=0.2)
    active = np.ones(inst.n, bool)
    for r in range(6):
        view = subset(inst, active)
        p = allocator.next_round(view, alloc)
        check_round(p, view, cluster, alloc)
        assert set(p.started) | set(p.continued) == set(p.assignments)
        # A job finishes now and then; its GPUs must be freed.
        if active.sum() > 1 and rng.random() < 0.5:
            m = int(rng.choice(np.flatnonzero(active)))
            active[m] = False
            allocator.remove([inst.job_ids[m]])
            assert inst.job_ids[m] not in allocator.state()["placement"]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_idle_gpus_are_filled_when_work_conserving(seed):
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, int(rng.integers(5, 60)), 3)
    alloc = allocation(inst, np.zeros((inst.n, inst.k)))  # X = 0 for everyone
    p = Allocator(cluster_of(inst)).next_round(inst, alloc)
    assert p.assignments, "work conservation runs jobs even when X is 0"
    # Every job left waiting could not have fitted on any type it can use.
    free = inst.capacity.copy()
    for job, slots in p.assignments.items():
        free[inst.gpu_types.index(slots[0].gpu_type)] -= len(slots)
    for m, job in enumerate(inst.job_ids):
        if job not in p.assignments:
            assert not np.any(inst.available[m] & (inst.scale_factor[m] <= free))


# --------------------------------------------------------------------------
# convergence and stability
# --------------------------------------------------------------------------


def feasible_rounds_average(inst: Instance, rng: np.random.Generator, samples: int = 10) -> np.ndarray:
    """X in the convex hull of whole rounds: the average of random rounds that
    each pack every type as full as the scale factors allow."""
    X = np.zeros((inst.n, inst.k))
    sf = inst.scale_factor.astype(int)
    for _ in range(samples):
        used = np.zeros(inst.n, bool)
        for j in rng.permutation(inst.k):
            left = int(inst.capacity[j])
            for m in rng.permutation(inst.n):
                if not used[m] and inst.available[m, j] and sf[m] <= left:
                    used[m], left = True, left - sf[m]
                    X[m, j] += 1
    return X / samples


@pytest.mark.parametrize("seed,queue", [(0, "phased"), (1, "phased"), (2, "phased"), (0, "gavel")])
def test_time_fractions_converge_to_the_max_min_allocation(seed, queue):
    """500 rounds, fixed X from the max-min LP on a contended cluster (more
    demand than GPUs, scale factors 1/2/4/8): every job's fraction of rounds on
    every type is within 0.02 of X."""
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, 150, 3)
    alloc = solve_instance(inst, "max_min_fairness")
    F = run(Allocator(cluster_of(inst), queue=queue), inst, alloc, 500)
    assert np.abs(F - alloc.fractions).max() <= 0.02


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), multi_gpu=st.booleans())
def test_time_fractions_converge_for_any_realizable_allocation(seed, multi_gpu):
    """X = an average of whole feasible rounds on a contended cluster (so
    integrality cannot be the excuse): after 500 rounds every |fraction − X|
    ≤ 0.02. (X > 0 makes a job eligible on a type: when X leaves GPUs idle,
    allocated jobs use them and run more than X — work conservation.)"""
    rng = np.random.default_rng(seed)
    inst = random_instance(rng, 200, 3, multi_gpu=multi_gpu)  # ≤ 120 GPUs: contended
    X = feasible_rounds_average(inst, rng)
    F = run(Allocator(cluster_of(inst), work_conserving=False), inst, allocation(inst, X), 500)
    assert np.abs(F - X).max() <= 0.02


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), queue=st.sampled_from(["phased", "per_type", "gavel"]),
       cost=st.sampled_from([0.0, 1.0]))
def test_solver_noise_in_x_does_not_change_the_rounds(seed, queue, cost):
    """Equal shares as an LP returns them (0.33333333309 and 0.33333333427: relative noise
    ~1e-9, fresh each solve) are equal: 40 rounds place every job exactly as with the exact
    shares. (Ranking by the noise made a 6-job schedule turn on a job's speed's 5th digit.)"""
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(3, 12)), int(rng.integers(1, 3))
    types = tuple(f"t{c}" for c in range(k))
    cap = rng.integers(1, 4, size=k).astype(float)
    inst = Instance(job_ids=tuple(f"j{m}" for m in range(n)), gpu_types=types, throughput=np.ones((n, k)),
                    scale_factor=rng.choice([1, 1, 2], size=n).astype(float), weight=np.ones(n),
                    capacity=np.maximum(cap, 2.0), steps_remaining=np.full(n, 1e9), elapsed_time=np.zeros(n),
                    attained_service=np.zeros(n), arrival_time=rng.integers(0, 2, size=n).astype(float))
    # equal time shares on every type, from a few small denominators (the LP's usual vertices)
    X = np.full((n, k), 1.0 / (k * int(rng.integers(n, 2 * n + 1))))
    exact, noisy = (Allocator(cluster_of(inst), queue=queue, migration_cost=cost) for _ in range(2))
    for _ in range(40):
        jitter = X * (1.0 + rng.uniform(-3e-9, 3e-9, size=X.shape))
        a, b = exact.next_round(inst, allocation(inst, X)), noisy.next_round(inst, allocation(inst, jitter))
        assert a.assignments == b.assignments


def test_tie_classes_merge_noise_only():
    """Within 1e-7 (relative; absolute below 1) is one value; anything farther, and an infinity
    beside a finite value, is a step; the classes keep the values' order."""
    from optsched.allocator.walk import tie_classes

    v = np.array([0.33333333309, 0.33333333427, 0.5, 1e9, 1e9 * (1 + 5e-8), np.inf, np.inf, -np.inf, 0.3334])
    assert tie_classes(v).tolist() == [1, 1, 3, 4, 4, 5, 5, 0, 2]
    assert tie_classes(np.array([])).tolist() == [] and tie_classes(np.array([2.0])).tolist() == [0]


def test_integrality_gap_is_shared_in_proportion_to_x():
    """An 8-GPU job at X = 0.5 and a 1-GPU job at X = 1 on 8 GPUs: the LP
    capacity (4 + 1 ≤ 8) holds but they never fit together, so X is not
    realizable. The gap is integrality, and the priorities X / fraction share
    it evenly: both get the same share of their X, 1 / (0.5 + 1) = 2/3, and
    the GPUs never idle."""
    inst = random_instance(np.random.default_rng(0), 2, 1, multi_gpu=False)
    inst = Instance(**{**inst.__dict__, "scale_factor": np.array([8.0, 1.0]), "capacity": np.array([8.0]),
                       "throughput": np.ones((2, 1))})
    X = np.array([[0.5], [1.0]])
    F = run(Allocator(cluster_of(inst), work_conserving=False), inst, allocation(inst, X), 500)
    assert F.sum() == pytest.approx(1.0)  # every round one of them runs
    assert F[:, 0] / X[:, 0] == pytest.approx([2 / 3, 2 / 3], abs=0.02)


def test_gavel_queue_fills_the_first_type_in_the_walk_and_new_jobs_wait():
    """Gavel's walk (queue="gavel"): with room on the first type, jobs allocated
    elsewhere (X = 0 there) are taken on it in the same walk; a job the
    allocation does not name waits for the next allocation."""
    inst = random_instance(np.random.default_rng(0), 4, 2, multi_gpu=False)
    inst = Instance(**{**inst.__dict__, "throughput": np.ones((4, 2)), "capacity": np.array([4.0, 4.0])})
    X = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    p = Allocator(cluster_of(inst), queue="gavel").next_round(inst, allocation(inst, X))
    assert {p.gpu_type(j) for j in inst.job_ids} == {"t0"}
    ours = Allocator(cluster_of(inst)).next_round(inst, allocation(inst, X))
    assert [ours.gpu_type(j) for j in inst.job_ids] == ["t0", "t0", "t1", "t1"]

    named = subset(inst, [True, False, True, False])  # the allocation names j0 and j2 only
    alloc = allocation(named, np.array([[1.0, 0.0], [0.0, 1.0]]))
    p = Allocator(cluster_of(inst), queue="gavel").next_round(inst, alloc)
    assert set(p.assignments) == {"j0", "j2"}  # j1 and j3 wait although GPUs are idle
    p = Allocator(cluster_of(inst)).next_round(inst, alloc)
    assert set(p.assignments) == set(inst.job_ids)


@pytest.mark.parametrize("placement", ["consolidated", "first_fit", "cpsat"])
def test_continuing_jobs_are_never_migrated_when_nothing_changes(placement):
    rng = np.random.default_rng(7)
    inst = random_instance(rng, 80, 3)
    cluster = random_cluster(rng, inst)
    alloc = solve_instance(inst, "max_min_fairness")
    allocator = Allocator(cluster, placement=placement)
    prev = allocator.next_round(inst, alloc)
    continuing = migrated = 0
    for _ in range(60):
        p = allocator.next_round(inst, alloc)
        same_type = [j for j in p.continued if p.gpu_type(j) == prev.gpu_type(j)]
        continuing += len(same_type)
        migrated += len(set(same_type) & set(p.migrated))
        assert set(p.migrated) <= set(p.continued)
        prev = p
    assert continuing > 100
    if placement != "cpsat":
        assert migrated == 0
    else:
        # CP-SAT may move a job only to span fewer servers; never gratuitously.
        assert migrated / continuing < 0.05


def test_a_fresh_instance_each_round_gives_the_same_rounds_and_content_changes_count():
    """The allocator caches what it derives from the jobs while their content
    is unchanged: a new but equal Instance every round (the simulator's way)
    gives the rounds one reused Instance gives; a changed throughput or scale
    factor under the same job ids is seen at once."""
    rng = np.random.default_rng(11)
    inst = random_instance(rng, 40, 3)
    cluster = random_cluster(rng, inst)
    alloc = solve_instance(inst, "max_min_fairness")
    reused, fresh = Allocator(cluster), Allocator(cluster)
    for _ in range(20):
        p, q = reused.next_round(inst, alloc), fresh.next_round(subset(inst, np.ones(inst.n, bool)), alloc)
        assert (p.assignments, p.started, p.preempted, p.continued, p.migrated) == (
            q.assignments, q.started, q.preempted, q.continued, q.migrated)
    assert reused.state() == fresh.state()
    # Job 0 can no longer run on any type but the last: it must not be placed elsewhere.
    T = inst.throughput.copy()
    T[0, :-1] = 0.0
    T[0, -1] = max(T[0, -1], 1.0)
    changed = Instance(**{**inst.__dict__, "throughput": T, "scale_factor": np.ones(inst.n)})
    for _ in range(5):
        p = fresh.next_round(changed, alloc)
        if inst.job_ids[0] in p.assignments:
            assert p.gpu_type(inst.job_ids[0]) == inst.gpu_types[-1]
        assert all(len(slots) == 1 for slots in p.assignments.values())


def test_state_survives_an_allocation_change_for_surviving_jobs():
    rng = np.random.default_rng(3)
    inst = random_instance(rng, 30, 3)
    allocator = Allocator(cluster_of(inst))
    a1 = solve_instance(inst, "max_min_fairness")
    for _ in range(5):
        allocator.next_round(inst, a1)
    # Same content in a new object: no reset, counters keep growing.
    before = allocator.state()["rounds_received"]
    a1_copy = allocation(inst, a1.fractions.copy())
    running = dict(allocator.next_round(inst, a1_copy).assignments)
    after = allocator.state()["rounds_received"]
    assert sum(map(sum, (d.values() for d in after.values()))) > sum(map(sum, (d.values() for d in before.values())))
    # Different X: a reset; surviving jobs keep deficits and, when scheduled, GPUs.
    X2 = a1.fractions[::-1].copy() * inst.available
    a2 = allocation(inst, X2 / np.maximum(X2.sum(1, keepdims=True), 1))
    p2 = allocator.next_round(inst, a2)
    st2 = allocator.state()
    assert st2["deficits"], "a reset folds the closing period into the deficits"
    # Counters restarted at the prior (half a round per type) plus this round.
    assert max(sum(v.values()) for v in st2["rounds_received"].values()) <= 0.5 * inst.k + 1
    assert set(st2["rounds_present"]) == set(inst.job_ids)
    for job in p2.continued:
        if p2.gpu_type(job) == running[job][0].gpu_type:
            assert p2.assignments[job] == running[job], "a surviving job keeps its GPUs across a reset"


# --------------------------------------------------------------------------
# packed pairs and configuration policies
# --------------------------------------------------------------------------


def test_packed_pair_shares_gpus_only_on_allocated_types():
    inst = random_instance(np.random.default_rng(1), 6, 2, multi_gpu=False)
    inst = Instance(**{**inst.__dict__, "throughput": np.ones((6, 2)), "capacity": np.array([2.0, 2.0])})
    X = np.full((6, 2), 0.05)
    alloc = allocation(inst, X, pairs=[(0, 1)], pair_fractions=[[0.9, 0.0]])
    allocator = Allocator(cluster_of(inst))
    shared = 0
    for _ in range(20):
        p = allocator.next_round(inst, alloc)
        check_round(p, inst, Cluster(gpus={"t0": 2, "t1": 2}, servers=[Server(id="t0-0", gpu_type="t0", gpus=2), Server(id="t1-0", gpu_type="t1", gpus=2)]), alloc)
        if "j0" in p.assignments and p.assignments.get("j1") == p.assignments["j0"]:
            shared += 1
            assert p.gpu_type("j0") == "t0"
    assert shared >= 15  # the pair's priority (X = 0.9) wins most rounds


def test_gpu_counts_place_every_configured_job_on_exactly_its_counts():
    inst = random_instance(np.random.default_rng(2), 5, 2, multi_gpu=False)
    inst = Instance(**{**inst.__dict__, "throughput": np.ones((5, 2)), "capacity": np.array([8.0, 4.0])})
    counts = np.array([[4, 0], [2, 2], [0, 0], [1, 0], [0, 2]])
    alloc = allocation(inst, (counts > 0).astype(float), gpu_counts=counts)
    p = Allocator(cluster_of(inst)).next_round(inst, alloc)
    assert set(p.assignments) == {"j0", "j1", "j3", "j4"}
    for m, job in enumerate(inst.job_ids):
        for j, t in enumerate(inst.gpu_types):
            assert sum(s.gpu_type == t for s in p.assignments.get(job, ())) == counts[m, j]
    over = allocation(inst, np.ones((5, 2)), gpu_counts=counts * 3)
    with pytest.raises(OptschedError, match="gpu_counts: .* GPUs requested"):
        Allocator(cluster_of(inst)).next_round(inst, over)


# --------------------------------------------------------------------------
# executor events and state
# --------------------------------------------------------------------------


def test_record_replaces_the_full_round_credit():
    inst = random_instance(np.random.default_rng(4), 3, 1, multi_gpu=False)
    allocator = Allocator(cluster_of(inst), round_length=360.0)
    p = allocator.next_round(inst, allocation(inst, np.full((3, 1), 0.3)))
    job = next(iter(p.assignments))
    allocator.record(job, p.gpu_type(job), 90.0)
    # Half a round of prior (Gavel) + a quarter round actually run.
    assert allocator.state()["rounds_received"][job][p.gpu_type(job)] == pytest.approx(0.5 + 0.25)
    with pytest.raises(OptschedError, match="record: unknown job"):
        allocator.record("nope", "t0", 1.0)
    # More than the round cannot have run (1e6 s credited 2,778 rounds); the whole round can.
    with pytest.raises(OptschedError, match=r"record: seconds \(1e\+06\) exceed the round \(360 s\)"):
        allocator.record(job, p.gpu_type(job), 1e6)
    allocator.record(job, p.gpu_type(job), 360.0)


def test_a_job_id_that_reads_as_a_pair_key_is_refused():
    """The state names a packed pair '["x", "y"]': a job with that id made a state no
    allocator could load back (and would collide with the pair x+y)."""
    import dataclasses

    inst = random_instance(np.random.default_rng(4), 3, 1, multi_gpu=False)
    inst = dataclasses.replace(inst, job_ids=(inst.job_ids[0], '["x", "y"]', inst.job_ids[2]))
    with pytest.raises(OptschedError, match=r"jobs\[1\]\.id: .* reads as a packed pair's key"):
        Allocator(cluster_of(inst)).next_round(inst, allocation(inst, np.full((3, 1), 0.3)))
    ok = dataclasses.replace(inst, job_ids=(inst.job_ids[0], "[not-a-pair", inst.job_ids[2]))
    a = Allocator(cluster_of(ok))
    a.next_round(ok, allocation(ok, np.full((3, 1), 0.3)))
    Allocator(cluster_of(ok)).load_state(a.state())  # an id merely starting with "[" round-trips


def test_state_round_trips_through_a_snapshot():
    """An allocator rebuilt from its own state() carried in a snapshot makes
    the same choices as the original."""
    rng = np.random.default_rng(5)
    inst = random_instance(rng, 25, 3)
    cluster = random_cluster(rng, inst)
    alloc = solve_instance(inst, "max_min_fairness")
    a = Allocator(cluster)
    for _ in range(4):
        a.next_round(inst, alloc)
    jobs = [
        {"id": j, "scale_factor": int(s), "throughput": {t: float(x) for t, x in zip(inst.gpu_types, row) if x > 0}}
        for j, s, row in zip(inst.job_ids, inst.scale_factor, inst.throughput)
    ]
    snap = parse_snapshot(json.loads(json.dumps({"cluster": cluster.model_dump(), "jobs": jobs, **a.state()})))
    b = Allocator.from_snapshot(snap)
    for _ in range(3):
        pa, pb = a.next_round(inst, alloc), b.next_round(inst, alloc)
        assert pa.assignments == pb.assignments
        assert pa.preempted == pb.preempted and pa.started == pb.started


# --------------------------------------------------------------------------
# bad input: clear errors, state unchanged
# --------------------------------------------------------------------------


def warmed_up():
    inst = random_instance(np.random.default_rng(6), 12, 2)
    allocator = Allocator(cluster_of(inst))
    alloc = solve_instance(inst, "max_min_fairness")
    allocator.next_round(inst, alloc)
    return inst, allocator, alloc


def test_allocation_naming_an_unknown_job_is_an_error_and_changes_nothing():
    inst, allocator, alloc = warmed_up()
    before = allocator.state()
    ghost = Instance(**{**inst.__dict__, "job_ids": inst.job_ids[:-1] + ("ghost",)})
    bad = allocation(ghost, alloc.fractions)
    with pytest.raises(OptschedError, match="allocation: job 'ghost'"):
        allocator.next_round(inst, bad)
    assert allocator.state() == before
    twin = Allocator(cluster_of(inst))
    twin.next_round(inst, alloc)
    assert allocator.next_round(inst, alloc).assignments == twin.next_round(inst, alloc).assignments


def test_job_wider_than_every_type_it_can_use_is_an_error_and_changes_nothing():
    inst, allocator, alloc = warmed_up()
    before = allocator.state()
    sf = inst.scale_factor.copy()
    sf[3] = inst.capacity.max() + 1
    wide = Instance(**{**inst.__dict__, "scale_factor": sf})
    with pytest.raises(OptschedError, match=r"jobs\[3\]\.scale_factor: job 'j3' needs"):
        allocator.next_round(wide, alloc)
    assert allocator.state() == before


def test_stale_placement_is_an_error_and_changes_nothing():
    inst, allocator, alloc = warmed_up()
    before = allocator.state()
    stale = {**before, "placement": {"j0": [{"server": "retired-3", "gpu_type": "t0", "gpu": 0}]}}
    with pytest.raises(OptschedError, match="placement\\['j0'\\]\\[0\\]: unknown server 'retired-3'"):
        allocator.load_state(stale)
    assert allocator.state() == before
    clash = {**before, "placement": {"j0": [{"server": "t0-0", "gpu_type": "t0", "gpu": 0}],
                                     "j1": [{"server": "t0-0", "gpu_type": "t0", "gpu": 0}, {"server": "t0-0", "gpu_type": "t0", "gpu": 1}]}}
    with pytest.raises(OptschedError, match="held by"):
        allocator.load_state(clash)
    assert allocator.state() == before


def test_unknown_placement_policy_and_removal_are_errors():
    inst, allocator, _ = warmed_up()
    with pytest.raises(OptschedError, match="placement: unknown policy 'best'"):
        Allocator(cluster_of(inst), placement="best")
    with pytest.raises(OptschedError, match="remove: unknown job 'zz'"):
        allocator.remove(["j0", "zz"])
    assert "j0" in allocator.state()["rounds_present"]  # nothing removed


def test_cli_prints_next_round_placement_as_json():
    from typer.testing import CliRunner

    from optsched.cli import app

    res = CliRunner().invoke(app, ["solve", "--placement", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["placement"] and isinstance(out["started"], list) and isinstance(out["preempted"], list)
    for slots in out["placement"].values():
        assert {"server", "gpu_type", "gpu"} <= set(slots[0])


def test_cli_rejects_a_snapshot_with_a_stale_placement(tmp_path):
    from typer.testing import CliRunner

    from optsched.cli import app, example_snapshot_text

    snap = json.loads(example_snapshot_text())
    snap["placement"] = {snap["jobs"][0]["id"]: [{"server": "gone", "gpu_type": "v100", "gpu": 0}]}
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snap))
    res = CliRunner().invoke(app, ["solve", str(path), "--placement"])
    assert res.exit_code == 2
    assert "unknown server 'gone'" in res.output
