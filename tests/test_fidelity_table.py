"""Issue 14, fidelity table: the bench's emulation of Gavel's base FIFOPolicy
(bench/fidelity.py ``GavelBaseFifo``, the ``fifo`` of Gavel's static makespan
experiment) allocates as that code behaves — the type given is the last of the
alphabetically sorted types with a free GPU (v100 while it has one), even past
its capacity, and the allocation is sticky until a job completes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from optsched.model import Instance, parse_snapshot

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
fidelity = pytest.importorskip("fidelity")

TYPES = {"k80": 4, "p100": 4, "v100": 4}
SPEED = {"k80": 1.0, "p100": 2.0, "v100": 3.0}


def instance(widths, ids=None) -> Instance:
    ids = ids or [f"j{m:02d}" for m in range(len(widths))]
    snap = parse_snapshot(json.dumps({
        "version": 1, "cluster": {"gpus": TYPES},
        "jobs": [{"id": i, "scale_factor": w, "arrival_time": 0.0, "throughput": dict(SPEED)}
                 for i, w in zip(ids, widths)],
    }))
    return Instance.from_snapshot(snap)


def types_of(alloc) -> dict[str, str]:
    return {jid: alloc.gpu_types[int(np.argmax(row))] for jid, row in zip(alloc.job_ids, alloc.fractions) if row.sum() > 0}


def test_every_job_goes_to_v100_past_its_capacity():
    # 2 + 4: v100 has a free GPU when the second job is placed, so it gets v100
    # too (free count 4 - 2 - 4 < 0): v100 never leaves the list, all six go there.
    inst = instance([2, 4, 1, 1, 2, 1])
    got = types_of(fidelity.GavelBaseFifo(seed=0).allocate(inst))
    assert set(got.values()) == {"v100"} and len(got) == 6


def test_exact_fill_removes_a_random_type_then_v100_may_stay():
    # 4 exactly fills v100: the type removed is drawn among the types that fit
    # the job, so v100 stays listed (and keeps getting jobs) unless drawn.
    seen = set()
    for seed in range(20):
        got = types_of(fidelity.GavelBaseFifo(seed=seed).allocate(instance([4, 1])))
        assert got["j00"] == "v100"
        seen.add(got["j01"])
    assert seen == {"v100", "p100"}  # v100 removed -> p100 is the last left; otherwise v100 again


def test_allocation_is_sticky_and_a_completion_hands_its_type_to_the_head():
    pol = fidelity.GavelBaseFifo(seed=0)
    first = types_of(pol.allocate(instance([2, 3, 2])))  # 2 + 3 overshoots v100: no exact fill, no removal
    assert first == {"j00": "v100", "j01": "v100", "j02": "v100"}
    # j00 completes; a new job j03 arrives: it takes j00's type (it fits in
    # what is free when j00's entry is visited), the others keep theirs.
    second = types_of(pol.allocate(instance([3, 2, 2], ids=["j01", "j02", "j03"])))
    assert second == {"j01": "v100", "j02": "v100", "j03": "v100"}
