"""Embedding, the last items of issue 30: ties broken by arrival then job id
(not by a hash of the id), idempotent progress from the client, job ids
``.``/``..`` refused at submit."""

from __future__ import annotations

import numpy as np

from optsched.allocator import Allocator
from optsched.model import Allocation, Cluster, Instance


def _instance(ids, arrival, gpus=2) -> Instance:
    n = len(ids)
    return Instance(job_ids=tuple(ids), gpu_types=("v100",), throughput=np.ones((n, 1)),
                    scale_factor=np.ones(n), weight=np.ones(n), capacity=np.array([float(gpus)]),
                    steps_remaining=np.full(n, 1e6), elapsed_time=np.zeros(n), attained_service=np.zeros(n),
                    arrival_time=np.asarray(arrival, float))


def _equal_share(inst: Instance) -> Allocation:
    X = np.full((inst.n, 1), float(inst.capacity[0]) / inst.n)
    return Allocation("test", "optimal", 0.0, 0.0, inst.job_ids, inst.gpu_types, X, np.zeros(inst.n))


def test_equal_priority_jobs_go_by_arrival_then_id():
    inst = _instance(["z", "m", "a", "b"], [0.0, 1.0, 1.0, 2.0])
    for seed in (0, 1, 7):  # the rule does not depend on the seed
        p = Allocator(Cluster(gpus={"v100": 2}), seed=seed).next_round(inst, _equal_share(inst))
        assert sorted(p.assignments) == ["a", "z"]  # z arrived first; a before m by id; b last


def test_a_callers_own_ids_give_the_same_schedule():
    """Distinct arrivals: renaming every job (which reorders any hash of the
    ids) leaves the rounds unchanged, job for job."""
    rng = np.random.default_rng(3)
    n = 12
    arrival = rng.permutation(n).astype(float)
    ours = [f"job-{m}" for m in range(n)]
    theirs = [f"{rng.integers(10**6):06d}-{m}" for m in range(n)]
    rename = dict(zip(ours, theirs))
    a, b = _instance(ours, arrival, gpus=5), _instance(theirs, arrival, gpus=5)
    alloc_a, alloc_b = _equal_share(a), _equal_share(b)
    A, B = Allocator(Cluster(gpus={"v100": 5})), Allocator(Cluster(gpus={"v100": 5}))
    for _ in range(20):
        pa, pb = A.next_round(a, alloc_a), B.next_round(b, alloc_b)
        assert sorted(rename[j] for j in pa.assignments) == sorted(pb.assignments)
