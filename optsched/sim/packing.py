"""Space sharing in the simulator (Gavel §3.1): candidate pairs of active jobs
with their measured pair throughputs, and the packed rates progress uses.

The throughput table gives, per GPU type, the throughputs of two job types
packed on the same GPUs (traces/throughputs.py ``pairs``). Every active job is
offered a bounded set of partners — at most ``max_partners`` per job, the job
types with the best packing gain t_a/T_a + t_b/T_b first, members of a partner
type spread over the job's own members — so a round's Instance carries O(n·d)
pairs, never all O(n²). The policy's admission rule (formulations/base.py
``admitted_pairs``) then keeps the pairs worth packing. (max_min_fairness
does better: every pair, solved over job types, optsched/packed_classes.py;
these candidates are then its fallback.)
"""

from __future__ import annotations

import numpy as np


def _class_rates(jobs, a: tuple, b: tuple) -> np.ndarray:
    """(k, 2) packed throughputs of job types a, b per GPU type (0 where unmeasured)."""
    got = jobs.pair_table.pair(a, b) if jobs.pair_table is not None else {}
    return np.array([got.get(t, (0.0, 0.0)) for t in jobs.gpu_types], dtype=float).reshape(len(jobs.gpu_types), 2)


def candidate_pairs(jobs, act: np.ndarray, max_partners: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """(pairs (p, 2) as positions in ``act`` with a < b, pair_throughput (p, k, 2)):
    optsched.packed_classes.candidate_pairs over the active rigid jobs' job types."""
    from optsched.packed_classes import candidate_pairs as by_label

    k = len(jobs.gpu_types)
    if jobs.pair_table is None or len(act) < 2:
        return np.zeros((0, 2), dtype=int), np.zeros((0, k, 2))
    labels, rates = _labels(jobs, act)  # (over the active jobs: O(active), not O(trace), per call)
    if jobs.any_elastic:
        labels[jobs.is_elastic[act]] = -1  # elastic jobs are not packed
    return by_label(labels, jobs.throughput[act], jobs.scale_factor[act], rates, max_partners)


def packed_rate(jobs, m: np.ndarray, partner: np.ndarray, col: np.ndarray) -> np.ndarray:
    """Steps/s of job m packed with ``partner`` on type ``col`` at its scale factor."""
    out = np.zeros(len(m))
    for i, (a, b, c) in enumerate(zip(m.tolist(), partner.tolist(), col.tolist())):
        out[i] = _class_rates(jobs, jobs.job_type[a], jobs.job_type[b])[c, 0]
    return out


def by_job_type(jobs):
    """active job indices -> ClassPairs (optsched.packed_classes): each job labelled by its
    job type, pair rates from the table by job type."""
    from optsched.packed_classes import ClassPairs

    of_job, rates = _labels(jobs, np.arange(jobs.n))  # once per run: labels stay the same across rounds
    return lambda active: ClassPairs(of_job[np.asarray(active)], rates)


def _labels(jobs, index: np.ndarray):
    """(int label per job of ``index``, rates(label_a, label_b) -> (k, 2)): job types numbered in
    sorted order, pair rates from the table by job type."""
    kinds = sorted(set(jobs.job_type[m] for m in index.tolist()))
    label = {t: i for i, t in enumerate(kinds)}
    labels = np.array([label[jobs.job_type[m]] for m in index.tolist()], dtype=np.int64)

    def rates(a: int, b: int) -> np.ndarray:
        return _class_rates(jobs, kinds[a], kinds[b])

    return labels, rates
