"""Space sharing over identical-job classes: the simulator's packing rounds for
max_min_fairness, over *every* pair of active jobs, exactly, at the size of
the job types.

In a simulated round a job's throughputs and its pair throughputs come from
the table by its job type, so jobs of one class (job type, scale factor,
weight) are interchangeable: permuting them maps the all-pairs program
(formulations/base.py, space sharing) onto itself, and by convexity it has an
optimal solution that treats a class's members alike (average any optimum
over those permutations). In such a solution, with n_a members in class a,

    x[a, j]    each member's time alone on type j,
    T[q, j]    the pair time of class pair q = (a, b) on j, summed over its member pairs,

a member of a gets T[q, j] / n_a of q's time when b ≠ a (2 T[q, j] / n_a when
q = (a, a): each member sits in the pairs with every other one), so

    maximize z
    share_a:  Σ_j A[a, j] x[a, j] + Σ_{q ∋ a} Σ_j c[q, j, a] T[q, j] / n_a (× 2 for (a, a))  ≥ z
    time_a:   Σ_j x[a, j] + Σ_{q ∋ a} Σ_j T[q, j] / n_a (× 2 for (a, a))                   ≤ 1
    cap_j:    Σ_a n_a s_a x[a, j] + Σ_q s_q T[q, j]                                           ≤ W_j

with A and c the formulation's normalized throughputs (max_min_fairness.normalized_throughput)
and its admission rule (both members run on j, equal scale factors, packing beats time
slicing). Its optimum is the all-pairs optimum; a solution is turned back into job
pairs without the O(n²) pairs: between classes a ≠ b, the north-west-corner rule of the
transportation problem (each member of a supplies T/n_a, each of b takes T/n_b: at most
n_a + n_b − 1 pairs), within a class a cycle (i, i + 1) with T/n_a each (one pair for
two members). Measured (a 10,000-job round of Gavel's 26 job types): see docs/results/scale.md, Packing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from optsched.model import Allocation, Instance

# Two members of a job type packed together must get the same rate for the class
# program to be exact (a 2-member class forms one pair whose two roles differ).
SYMMETRIC_RTOL = 1e-9
# Beyond these (jobs of one type with different rows, weights...) the class program grows
# like the per-job one (C² class pairs) and the per-job path is taken instead. Measured
# (random class instances, HiGHS simplex): 4,600 class pairs 0.25 s, 13,800 2.1 s, 33,000 11 s.
MAX_CLASSES = 2000  # (C²/2 candidate pairs enumerated)
MAX_CLASS_PAIRS = 15_000  # pairs of classes with equal scale factors


@dataclass(frozen=True)
class ClassPairs:
    """What the class program needs beyond the round's Instance."""

    labels: np.ndarray  # (n,) job type of each job, as an int: equal labels = equal pair rates
    # (k, 2) packed throughputs of labels a and b (0: not measured); rates(b, a) is rates(a, b) with
    # the roles swapped, so only a <= b is asked
    rates: Callable[[int, int], np.ndarray]


@dataclass(frozen=True)
class ClassProgram:
    """The class program's data (module doc)."""

    first: np.ndarray  # (C,) a member of each class
    inverse: np.ndarray  # (n,) each job's class
    members: list  # class -> job indices, increasing
    counts: np.ndarray  # (C,) n_a
    A: np.ndarray  # (C, k) normalized throughput of a member
    allowed: np.ndarray  # (C, k) a member may run alone on j
    q: np.ndarray  # (Q, 2) class pairs a <= b
    coef: np.ndarray  # (Q, k, 2) normalized packed share of a member of a, of b
    rate: np.ndarray  # (Q, k, 2) packed throughput / solo throughput of each member
    admitted: np.ndarray  # (Q, k) bool


def class_program(inst: Instance, pc: ClassPairs) -> ClassProgram | None:
    """The classes and admitted class pairs; None when the jobs are not interchangeable
    within a class (a job type packed with itself at two different rates) or are too
    many classes (MAX_CLASSES, MAX_CLASS_PAIRS)."""
    from optsched.formulations.base import program_weights
    from optsched.formulations.max_min_fairness import normalized_throughput

    key = np.column_stack([pc.labels, inst.throughput, inst.scale_factor, inst.weight])
    first, inverse, counts = row_classes(key)
    if len(first) > MAX_CLASSES:
        return None
    members = np.split(np.argsort(inverse, kind="stable"), np.cumsum(counts)[:-1])
    # in max_min_fairness's program weights (weights of 1e9 put the level under the solver's tolerance)
    w, _ = program_weights(inst.weight)
    A = (normalized_throughput(inst) * (inst.weight / w)[:, None])[first]
    T, sf, allowed = inst.throughput[first], inst.scale_factor[first], inst.available[first]
    a, b = np.triu_indices(len(first))
    keep = (sf[a] == sf[b]) & ((a != b) | (counts[a] >= 2))
    if keep.sum() > MAX_CLASS_PAIRS:
        return None
    a, b = a[keep], b[keep]
    # The rates of each label pair the class pairs need, asked once (labels u <= v).
    la, lb = pc.labels[first][a], pc.labels[first][b]
    lo, hi = np.minimum(la, lb), np.maximum(la, lb)
    need, which = np.unique(np.column_stack([lo, hi]), axis=0, return_inverse=True)
    R = np.array([pc.rates(int(u), int(v)) for u, v in need], dtype=float).reshape(-1, inst.k, 2)
    r = R[which.reshape(-1)]
    swap = la > lb  # the rates were asked in the other order: swap the roles back
    r[swap] = r[swap][..., ::-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.stack([np.where(T[a] > 0, r[..., 0] / T[a], 0.0), np.where(T[b] > 0, r[..., 1] / T[b], 0.0)], -1)
    admitted = allowed[a] & allowed[b] & (ratio.sum(axis=2) > 1.0)
    if ((a == b)[:, None] & admitted & ~np.isclose(r[..., 0], r[..., 1], rtol=SYMMETRIC_RTOL, atol=0.0)).any():
        return None
    q = admitted.any(axis=1)
    a, b, ratio, admitted = a[q], b[q], ratio[q], admitted[q]
    rate = np.where(admitted[..., None], ratio, 0.0)
    coef = np.stack([A[a] * rate[..., 0], A[b] * rate[..., 1]], axis=-1)
    return ClassProgram(first, inverse, members, counts, A, allowed, np.column_stack([a, b]), coef, rate, admitted)


def _matrix(inst: Instance, cp: ClassProgram):
    """(c, A_ub, b_ub, ub, x_cols, t_cols) of the class program in solve_lp's form:
    variables x[a, j] (allowed), T[q, j] (admitted), then z; minimize −z."""
    import scipy.sparse as sp

    C, k, n_a = len(cp.first), inst.k, cp.counts.astype(float)
    xa, xj = np.nonzero(cp.allowed)
    tq, tj = np.nonzero(cp.admitted)
    nx, nt = len(xa), len(tq)
    a, b = cp.q[tq, 0], cp.q[tq, 1]
    same = a == b
    # Per unit of T: a member's time and share (both roles of a within-class pair are alike).
    time_a = np.where(same, 2.0, 1.0) / n_a[a]
    share_a = np.where(same, cp.coef[tq, tj, 0] + cp.coef[tq, tj, 1], cp.coef[tq, tj, 0]) / n_a[a]
    time_b, share_b = 1.0 / n_a[b], cp.coef[tq, tj, 1] / n_a[b]
    other = ~same
    xi, ti = np.arange(nx), nx + np.arange(nt)
    z = nx + nt
    rows = np.concatenate([xa, a, b[other], np.arange(C),  # share: −thr + z ≤ 0
                           C + xa, C + a, C + b[other],  # time ≤ 1
                           2 * C + xj, 2 * C + tj])  # capacity
    cols = np.concatenate([xi, ti, ti[other], np.full(C, z), xi, ti, ti[other], xi, ti])
    vals = np.concatenate([-cp.A[xa, xj], -share_a, -share_b[other], np.ones(C),
                           np.ones(nx), time_a, time_b[other],
                           (n_a * inst.scale_factor[cp.first])[xa], inst.scale_factor[cp.first][a]])
    A_ub = sp.csc_matrix((vals, (rows, cols)), shape=(2 * C + k, z + 1))
    b_ub = np.concatenate([np.zeros(C), np.ones(C), inst.capacity])
    c = np.zeros(z + 1)
    c[z] = -1.0
    ub = np.concatenate([np.ones(nx), np.full(nt, np.inf), [np.inf]])
    return c, A_ub, b_ub, ub, (xa, xj), (tq, tj)


def _member_pairs(ia: np.ndarray, ib: np.ndarray | None, total: float) -> tuple[list, list]:
    """Concrete pairs and their total times for one class pair with total time ``total``:
    the north-west corner between ia and ib, or a cycle within ia (ib None)."""
    if ib is None:
        if len(ia) == 2:
            return [(ia[0], ia[1])], [total]
        each = total / len(ia)
        return [(ia[t], ia[(t + 1) % len(ia)]) for t in range(len(ia))], [each] * len(ia)
    left_a, left_b = np.full(len(ia), total / len(ia)), np.full(len(ib), total / len(ib))
    tol = 1e-12 * total
    i = j = 0
    pairs, amounts = [], []
    while i < len(ia) and j < len(ib):
        f = min(left_a[i], left_b[j])
        if f > tol:
            pairs.append((ia[i], ib[j]))
            amounts.append(f)
        left_a[i] -= f
        left_b[j] -= f
        if left_a[i] <= tol:
            i += 1
        else:
            j += 1
    return pairs, amounts


def _disaggregate(inst: Instance, cp: ClassProgram, x: np.ndarray, t: np.ndarray):
    """(X (n, k), Packing, Y (p, k)) from the class solution x (C, k), t (Q, k)."""
    from optsched.formulations.base import Packing

    n, k = inst.n, inst.k
    X = x[cp.inverse]
    pairs, Y, rate, ok = [], [], [], []
    for qi, (a, b) in enumerate(cp.q):
        total = float(t[qi].sum())
        if total <= 0:
            continue
        got, amounts = _member_pairs(cp.members[a], None if a == b else cp.members[b], total)
        split = t[qi] / total
        for (i, j), f in zip(got, amounts):
            flip = i > j  # Instance pairs are (smaller, larger) index; rates follow the roles
            pairs.append((j, i) if flip else (i, j))
            Y.append(f * split)
            rate.append(cp.rate[qi][:, ::-1] if flip else cp.rate[qi])
            ok.append(cp.admitted[qi])
    P = np.array(pairs, dtype=int).reshape(-1, 2)
    pk = Packing(P, np.array(rate).reshape(-1, k, 2), np.array(ok, dtype=bool).reshape(-1, k),
                 inst.scale_factor[P[:, 0]] if len(P) else np.zeros(0), n)
    return X, pk, np.array(Y).reshape(-1, k)


def solve_packed_classes(inst: Instance, pc: ClassPairs, time_limit: float = 60.0,
                         cp: ClassProgram | None = None) -> Allocation | None:
    """max_min_fairness with packing over every pair of ``inst``'s jobs, solved over
    classes (module doc; ``cp``: its program, when the caller built it); None when the
    class program does not apply or is not solved (the caller then takes the per-job path)."""
    import time

    from optsched.formulations.base import job_share, program_weights
    from optsched.formulations.max_min_fairness import normalized_throughput
    from optsched.policy import _packed_result, clean_packed_fractions, explain
    from optsched.solvers.lp import solve_lp

    t0 = time.perf_counter()
    cp = cp or class_program(inst, pc)
    if cp is None or len(cp.q) == 0:
        return None
    c, A_ub, b_ub, ub, (xa, xj), (tq, tj) = _matrix(inst, cp)
    t1 = time.perf_counter()
    sol = solve_lp(c, A_ub, b_ub, lb=np.zeros(len(c)), ub=ub, backend="highs-simplex", time_limit=time_limit)
    t2 = time.perf_counter()
    if not sol.ok:
        return None
    x = np.zeros((len(cp.first), inst.k))
    x[xa, xj] = sol.x[: len(xa)]
    t = np.zeros(cp.admitted.shape)
    t[tq, tj] = np.maximum(sol.x[len(xa): len(xa) + len(tq)], 0.0)
    X, pk, Y = _disaggregate(inst, cp, x, t)
    X, Y = clean_packed_fractions(X, Y, inst, pk)
    share = job_share(normalized_throughput(inst), X, pk, Y)
    prices = None if sol.dual_ub is None else (  # (as solve_packed reads them), in the level's reported unit
        np.maximum(sol.dual_ub[2 * len(cp.first):], 0.0) / program_weights(inst.weight)[1])
    explanation = explain(inst, X, share, prices, float(share.min()))
    explanation["job_classes"] = int(len(cp.first))
    explanation["class_pairs"] = int(len(cp.q))
    thr, packed = _packed_result(inst, pk, X, Y, explanation)
    t3 = time.perf_counter()
    return Allocation.of(inst, "max_min_fairness", X, "optimal", float(share.min()), t3 - t0, thr, explanation,
                         build_seconds=t1 - t0, solver_seconds=t2 - t1, decode_seconds=t3 - t2, **packed)


def row_classes(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first, inverse, counts) of np.unique(key, axis=0, ...): classes in
    lexicographic row order, each class's first row, every row's class. Same
    result, without np.unique's structured-dtype detour (~0.1 ms per call)."""
    order = np.lexsort(key.T[::-1])  # stable, first column most significant
    ordered = key[order]
    new_class = np.empty(len(key), dtype=bool)
    new_class[:1] = True
    new_class[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    starts = np.flatnonzero(new_class)
    inverse = np.empty(len(key), dtype=np.int64)
    inverse[order] = np.cumsum(new_class) - 1
    counts = np.diff(np.append(starts, len(key)))
    return order[starts], inverse, counts


def candidate_pairs(labels: np.ndarray, T: np.ndarray, sf: np.ndarray, rates: Callable[[int, int], np.ndarray],
                    max_partners: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """The per-job candidate rule for pair rates given by label (job type, model): each job
    picks at most ``max_partners`` partners (and may be picked by more), the labels with the
    best packing gain t_a/T_a + t_b/T_b first (equal scale factors only; a label's gain read
    on its members' lowest throughputs, the best case: members of a label may differ, and the
    policy's admission rule then keeps each pair that gains), members of a partner label
    spread over the job's own label mates. Returns (pairs (p, 2) with a < b, pair
    throughputs (p, k, 2)): O(n · max_partners) pairs. Labels < 0 are not offered."""
    k = T.shape[1]
    members: dict[tuple, list[int]] = {}
    for pos, key in enumerate(zip(labels.tolist(), sf.tolist())):
        if key[0] >= 0:
            members.setdefault(key, []).append(pos)
    lowest = {a: np.where(T[own] > 0, T[own], np.inf).min(axis=0) for a, own in members.items()}
    pair_rates: dict[tuple, np.ndarray] = {}
    ranked: dict[tuple, list[tuple]] = {}
    for a in members:
        Ta = np.where(np.isfinite(lowest[a]), lowest[a], 0.0)
        gains = []
        for b in members:
            if a[1] != b[1]:
                continue  # equal scale factors only (GPUs shared one for one)
            r = rates(a[0], b[0])
            Tb = np.where(np.isfinite(lowest[b]), lowest[b], 0.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                g = np.where((Ta > 0) & (Tb > 0), r[:, 0] / Ta + r[:, 1] / Tb, 0.0)
            if g.max() > 1.0:
                pair_rates[a, b] = r
                gains.append((-float(g.max()), b))
        ranked[a] = [b for _, b in sorted(gains)]
    chosen: dict[tuple[int, int], np.ndarray] = {}
    for a, own in members.items():
        for i, pos in enumerate(own):
            taken = 0
            for b in ranked[a]:
                if taken >= max_partners:
                    break
                pool = members[b]
                for step in range(len(pool)):
                    if taken >= max_partners:
                        break
                    other = pool[(i + step) % len(pool)]
                    if other == pos:
                        continue
                    key = (pos, other) if pos < other else (other, pos)
                    if key not in chosen:
                        r = pair_rates[a, b]
                        chosen[key] = r if pos < other else r[:, ::-1]
                    taken += 1
                    if step >= max_partners:
                        break
    if not chosen:
        return np.zeros((0, 2), dtype=int), np.zeros((0, k, 2))
    keys = sorted(chosen)
    return np.array(keys, dtype=int).reshape(-1, 2), np.stack([chosen[key] for key in keys])


def _model_rates(inst: Instance) -> tuple[np.ndarray, Callable[[int, int], np.ndarray]]:
    labels, table = inst.extras["colocation"]
    k = inst.k

    def rates(a: int, b: int) -> np.ndarray:
        return table.get((a, b), np.zeros((k, 2)))

    return labels, rates


def with_candidate_pairs(inst: Instance, max_partners: int | None = 8) -> Instance:
    """``inst`` with pairs from its pair throughputs by model (``extras["colocation"]``)
    by the candidate rule: what every packing policy but max_min_fairness solves over."""
    import dataclasses

    labels, rates = _model_rates(inst)
    cap = inst.n if max_partners is None else max_partners  # None: every pair the table gains on
    pairs, rate = candidate_pairs(labels, inst.throughput, inst.scale_factor, rates, cap)
    extras = {key: v for key, v in inst.extras.items() if key != "colocation"}  # the table is now pairs
    return dataclasses.replace(inst, pairs=pairs, pair_throughput=rate, extras=extras)


def solve_by_model(inst: Instance, policy: str, time_limit: float, options: dict) -> tuple[Allocation | None, Instance]:
    """A snapshot's pair throughputs by model (``inst.extras["colocation"]``). max_min_fairness
    (without other options) packs over every pair of jobs through the class program; otherwise,
    or past the class program's bounds, the jobs get candidate pairs (``with_candidate_pairs``).
    Returns (the allocation, or None with the instance the per-job path solves). The equal share
    scaled to fit, with a fallback status, when the class program is not solved."""
    if inst.n < 2:
        return None, inst  # nothing to pair
    if policy == "max_min_fairness" and not set(options) - {"packing"}:
        labels, rates = _model_rates(inst)
        pc = ClassPairs(labels, rates)
        cp = class_program(inst, pc)
        if cp is not None:
            if len(cp.q) == 0:
                return None, inst
            alloc = solve_packed_classes(inst, pc, time_limit, cp)
            if alloc is None:
                from optsched.policy import _fallback

                X, status, objective, _ = _fallback(inst, policy, "highs-simplex", "the class program was not solved")
                return Allocation.of(inst, policy, X, status, objective, 0.0), inst
            alloc.explanation["colocation"] = "every pair of jobs (class program)"
            return alloc, inst
    return None, with_candidate_pairs(inst, options.get("max_partners", 8))
