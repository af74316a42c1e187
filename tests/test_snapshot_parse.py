"""The fast snapshot path (validation straight from the JSON bytes, vectorized
job checks, the vectorized Instance) gives exactly what the reference path gives:
the same Snapshot (classes, values, fields set), the same one-line error, the
same Instance arrays, on random valid and invalid snapshots. (Its speed is the bench's:
`optsched bench --only solve-e2e`, the parse column.)"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from pydantic import BaseModel

import optsched.model as model
from optsched.model import Instance, OptschedError, Snapshot, parse_snapshot
from tests.test_fuzz_snapshot import dump, mutated_snapshot

TYPES = ("v100", "p100", "k80", "a100")


# --------------------------------------------------------------------------
# References: the code as it was before the fast path
# --------------------------------------------------------------------------


def outcome(parse, text):
    """A comparable result: the snapshot's full structure, or the error line."""
    try:
        return deep(parse(text))
    except OptschedError as e:
        return ("error", str(e))


def deep(x):
    """Classes, fields set and values (repr: exact floats, -0.0, 1 vs 1.0, nan) all the way down."""
    if isinstance(x, BaseModel):
        return (type(x).__name__, sorted(x.model_fields_set), {k: deep(v) for k, v in x.__dict__.items()})
    if isinstance(x, dict):
        return ("dict", [(deep(k), deep(v)) for k, v in x.items()])
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [deep(v) for v in x])
    return (type(x).__name__, repr(x))


def reference_job_checks(snap_dict: dict) -> str | None:
    """The per-job loop of Snapshot._check_jobs as it was (one Python pass over
    jobs × types), on jobs and a cluster that validate on their own."""
    cluster = model.Cluster.model_validate(snap_dict["cluster"])
    jobs = [model.Job.model_validate(j) for j in snap_dict.get("jobs", [])]
    ids = [j.id for j in jobs]
    id_set = set(ids)
    if len(id_set) != len(ids):
        seen: set[str] = set()
        dup = next(i for i in ids if i in seen or seen.add(i))
        return f"jobs: duplicate job id {dup!r}"
    types = set(cluster.gpus)
    for i, j in enumerate(jobs):
        for t in j.throughput:
            if t not in types:
                return f"jobs[{i}].throughput: unknown GPU type {t!r} (cluster has {sorted(types)})"
        if not any(x > 0 for x in j.throughput.values()):
            return f"jobs[{i}].throughput: job {j.id!r} has no positive throughput on any GPU type"
        if not any(j.scale_factor <= cluster.gpus[t] for t, x in j.throughput.items() if x > 0):
            return (f"jobs[{i}].scale_factor: job {j.id!r} needs {j.scale_factor} GPUs, more than any "
                    f"type it can run on has")
        if j.steps_total is not None and j.steps_done > j.steps_total:
            return f"jobs[{i}].steps_done: {j.steps_done:g} exceeds steps_total {j.steps_total:g}"
        for other, per_type in (j.colocated or {}).items():
            if other not in id_set:
                return f"jobs[{i}].colocated: unknown job id {other!r}"
            if other == j.id:
                return f"jobs[{i}].colocated: job {j.id!r} cannot be packed with itself"
            for t, rates in per_type.items():
                if t not in types:
                    return f"jobs[{i}].colocated[{other!r}]: unknown GPU type {t!r}"
                if not all(math.isfinite(r) and (r == 0 or 1e-12 <= r <= 1e15) for r in rates):
                    return (f"jobs[{i}].colocated[{other!r}][{t!r}]: rates must be finite: 0 or between 1e-12 and "
                            f"1e+15 steps/s ({list(rates)})")
        for t in (j.goodput.perf_params if j.goodput else {}):
            if t not in types:
                return f"jobs[{i}].goodput.perf_params: unknown GPU type {t!r}"
    return None


def reference_instance(snap: Snapshot) -> dict:
    """Instance.from_snapshot's arrays as the per-job loops built them."""
    types = tuple(sorted(snap.cluster.gpus))
    n, k = len(snap.jobs), len(types)
    cap = np.array([snap.cluster.gpus[t] for t in types], dtype=float)
    T = np.zeros((n, k))
    for m, job in enumerate(snap.jobs):
        for j, t in enumerate(types):
            T[m, j] = job.throughput.get(t, 0.0)
    sf = np.array([j.scale_factor for j in snap.jobs], dtype=float)
    T[sf[:, None] > cap[None, :]] = 0.0
    opt = lambda vs: np.array([np.nan if v is None else float(v) for v in vs], dtype=float)  # noqa: E731
    return {
        "job_ids": tuple(j.id for j in snap.jobs), "gpu_types": types, "throughput": T, "scale_factor": sf,
        "weight": np.array([j.weight for j in snap.jobs], dtype=float), "capacity": cap,
        "steps_remaining": np.array([np.nan if j.steps_total is None else max(j.steps_total - j.steps_done, 0.0)
                                     for j in snap.jobs], dtype=float),
        "elapsed_time": np.array([j.elapsed_time for j in snap.jobs], dtype=float),
        "attained_service": np.array([j.attained_service for j in snap.jobs], dtype=float),
        "arrival_time": np.array([j.arrival_time for j in snap.jobs], dtype=float),
        "entity": tuple(j.entity for j in snap.jobs), "time": float(snap.time),
        "isolated_time": opt([j.isolated_time for j in snap.jobs]), "slo": opt([j.slo for j in snap.jobs]),
        "last_run_time": opt([j.last_run_time for j in snap.jobs]),
        "price": opt([(snap.cluster.price_per_hour or {}).get(t) for t in types]),
    }


def same_array(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return (a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
                and np.array_equal(np.signbit(a), np.signbit(b)))
    return a.shape == b.shape and np.array_equal(a, b)


# --------------------------------------------------------------------------
# Random snapshots
# --------------------------------------------------------------------------


def random_snapshot(rng: np.random.Generator, n: int, rich: bool = True) -> dict:
    """A valid snapshot with the optional fields drawn at random."""
    k = int(rng.integers(1, len(TYPES) + 1))
    types = list(rng.permutation(TYPES)[:k])
    gpus = {t: int(rng.choice([0, 1, 4, 8, 16])) for t in types}
    if all(c == 0 for c in gpus.values()):
        gpus[types[0]] = 8
    run_on = [t for t in types if gpus[t] > 0]
    jobs = []
    for m in range(n):
        thr = {}
        for t in types:
            u = rng.random()
            if u < 0.2:
                continue  # cannot run there
            thr[t] = 0.0 if u < 0.3 else (-0.0 if u < 0.32 else float(rng.choice([rng.uniform(0, 30), rng.integers(1, 9)])))
        best = run_on[int(rng.integers(len(run_on)))]
        thr[best] = float(rng.uniform(0.1, 20))
        items = list(thr.items())
        job = {"id": f"j{m}" if rng.random() < 0.9 else f"job é {m}",
               "throughput": dict(items[i] for i in rng.permutation(len(items)))}  # dict order varies
        if rng.random() < 0.7:
            job["scale_factor"] = int(rng.choice([1, 2, 4, 8])) if gpus[best] >= 8 else 1
        if rich:
            for f, lo, hi in (("weight", 0.5, 3), ("steps_total", 0, 1e6), ("steps_done", 0, 2e6), ("arrival_time", -10, 1e4),
                              ("elapsed_time", 0, 1e4), ("attained_service", 0, 1e5), ("isolated_time", 0, 1e4),
                              ("slo", 0, 1e5), ("last_run_time", 0, 1e4)):
                if rng.random() < 0.5:
                    job[f] = float(rng.uniform(lo, hi))
            if "steps_total" in job and rng.random() < 0.2:
                job["steps_total"] = int(job["steps_total"])  # an integer in the JSON
            if "steps_total" in job and "steps_done" in job:  # past the end is refused (corrupt_jobs)
                job["steps_done"] = min(job["steps_done"], job["steps_total"])
            if rng.random() < 0.3:
                job["entity"] = f"team{int(rng.integers(3))}"
            if rng.random() < 0.2:
                job["model"] = "resnet-50"
        jobs.append(job)
    if rich and n >= 2:
        listed: set = set()
        for m in rng.choice(n, size=min(n, 3), replace=False):
            o = int(rng.integers(n))
            if o != m and frozenset((m, o)) not in listed:  # one view per pair (two must agree)
                listed.add(frozenset((m, o)))
                jobs[m]["colocated"] = {jobs[o]["id"]: {types[0]: [float(rng.uniform(0, 5)), float(rng.uniform(0, 5))]}}
        if rng.random() < 0.5:
            jobs[0]["goodput"] = {"perf_params": {types[0]: [0.05, 0.001, 0.2, 0.01, 0.05, 0.002, 2.0]}, "init_batch_size": 64}
        if rng.random() < 0.3:
            jobs[-1]["cpu_profile"] = [[1.0, 0.5], [4.0, 1.0]]
    snap = {"version": 1, "cluster": {"gpus": gpus}, "jobs": jobs}
    if rich:
        if rng.random() < 0.5:
            snap["time"] = float(rng.uniform(0, 1e4))
        if rng.random() < 0.5:
            snap["cluster"]["price_per_hour"] = {t: float(rng.uniform(0, 3)) for t in types}
        if rng.random() < 0.3:
            snap["entity_weights"] = {"team0": 1.0, "team1": 2.0}
        if rng.random() < 0.3:
            snap["cluster"]["servers"] = [{"id": f"{t}-0", "gpu_type": t, "gpus": c} for t, c in gpus.items() if c > 0]
        if rng.random() < 0.3 and jobs:
            snap["rounds_received"] = {jobs[0]["id"]: {types[0]: 2.0}}
            snap["allocator"] = {"round": 3, "credits": {}, "removed": [], "x": [1, 2.5, None, True, "é", {"y": 10**30}]}
    return snap


def corrupt_jobs(rng: np.random.Generator, snap: dict) -> dict:
    """Break a few jobs (each still valid on its own) in ways only the snapshot-wide checks see."""
    jobs = snap["jobs"]
    types = list(snap["cluster"]["gpus"])
    for m in rng.choice(len(jobs), size=int(rng.integers(1, 4)), replace=True):
        job = jobs[m]
        what = int(rng.integers(10))
        if what == 0:
            job["throughput"]["h100"] = 1.0
        elif what == 1:
            job["throughput"] = {t: 0.0 for t in job["throughput"]}
        elif what == 2:
            job["scale_factor"] = 1000
        elif what == 3:
            job["colocated"] = {"nobody": {types[0]: [1.0, 1.0]}}
        elif what == 4:
            job["colocated"] = {job["id"]: {types[0]: [1.0, 1.0]}}
        elif what == 5:
            job["colocated"] = {jobs[0]["id"] if m else jobs[-1]["id"]: {"h100": [1.0, 1.0]}}
        elif what == 6:
            job["colocated"] = {jobs[0]["id"] if m else jobs[-1]["id"]: {types[0]: [1.0, -2.0]}}
        elif what == 8:
            job["steps_total"], job["steps_done"] = 10.0, 10.5
        elif what == 7:
            job["goodput"] = {"perf_params": {"h100": [0.05, 0.001, 0.2, 0.01, 0.05, 0.002, 2.0]}, "init_batch_size": 64}
        else:
            job["id"] = jobs[0]["id"] if m else jobs[-1]["id"]
    return snap


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------


def test_the_fast_validator_is_built():
    """The stripped schema was found (a pydantic upgrade that moves it shows here, not as a silent slowdown)."""
    assert model._fast_validator() is not None


@pytest.mark.parametrize("seed", range(40))
def test_valid_snapshots_same_snapshot_and_instance(seed):
    rng = np.random.default_rng(seed)
    doc = random_snapshot(rng, int(rng.integers(0, 40)), rich=seed % 4 != 0)
    text = json.dumps(doc).encode()
    assert model._parse_json_fast(text) is not None, "a valid snapshot must take the fast path"
    fast, ref = outcome(parse_snapshot, text), outcome(model._parse_reference, text)
    assert fast == ref
    assert outcome(parse_snapshot, text.decode()) == ref  # text input too
    snap = parse_snapshot(text)
    inst, want = Instance.from_snapshot(snap), reference_instance(snap)
    for name, value in want.items():
        got = getattr(inst, name)
        assert (same_array(got, value) if isinstance(value, np.ndarray) else got == value), name


@pytest.mark.parametrize("seed", range(60))
def test_snapshot_wide_job_checks_name_the_same_first_job(seed):
    rng = np.random.default_rng(1000 + seed)
    doc = corrupt_jobs(rng, random_snapshot(rng, int(rng.integers(2, 30))))
    want = reference_job_checks(doc)
    text = json.dumps(doc).encode()
    got = outcome(parse_snapshot, text)
    assert got == outcome(model._parse_reference, text)
    if want is None:
        assert got[0] == "Snapshot"
    else:
        assert got == ("error", f"invalid snapshot: {want}")


BAD_TEXTS = [
    b'{"version": 1, "cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "\\ud800", "throughput": {"v100": 1}}]}',
    b'{"version": 1, "cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a\\udfffb", "throughput": {"v100": 1}}]}',
    '{"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "\ud800", "throughput": {"v100": 1}}]}'.encode("utf-8", "surrogatepass"),
    b'{"cluster": {"gpus": {"v\xff100": 4}}}',
    b'\xef\xbb\xbf{"cluster": {"gpus": {"v100": 4}}}',  # a BOM: json.loads takes it
    '{"cluster": {"gpus": {"v100": 4}}}'.encode("utf-16"),  # so is UTF-16
    b'{"cluster": {"gpus": {"v100": 4}}} x',
    b'{"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a", "throughput": {"v100": NaN}}]}',
    b'{"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a", "throughput": {"v100": Infinity, "k80": -1}}]}',
    b'{"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a", "throughput": {"v100": -1}}, {"id": "b"}]}',
    b'{"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a", "throughput": {"v100": 1e400}}]}',
    b'{"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a", "throughput": {"v100": "NaN"}}]}',
    b'{"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a", "throughput": {"v100": "1.5"}}]}',
    b'{"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a", "scale_factor": true, "throughput": {"v100": true}}]}',
    b'{"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a", "scale_factor": 2.0, "throughput": {"v100": 1}}]}',
    b'{"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a", "throughput": {"v100": 1, "v100": 0}}]}',
    b'{"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a", "id": "b", "throughput": {"v100": 1}}]}',
    b'{"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a", "throughput": {"v100": 1}}], "jobs": []}',
    b'{"cluster": {"gpus": {"v100": 4}}, "time": "x", "time": 1}',
    b'{"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a\tb", "throughput": {"v100": 1}}]}',
    b'{"cluster": {"gpus": {"v100": 4}}, "version": 1.0}',
    b'{"cluster": {"gpus": {"v100": 4}}, "version": "1"}',
    b'{"cluster": {"gpus": {"v100": 01}}}',
    b'{"cluster": {"gpus": {"v100": 4}}, "allocator": {"a": 1e400, "b": NaN, "c": 100000000000000000000001}}',
    b'{"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "\\ud83d\\ude00", "throughput": {"v100": 1}}]}',
    b'[]', b'null', b'', b'{', b'[' * 5000 + b']' * 5000, b'{"a":' * 300 + b'1' + b'}' * 300,
    b' \n{"cluster": {"gpus": {"v100": 4}}}\r\n\t',
]


@pytest.mark.parametrize("text", BAD_TEXTS, ids=range(len(BAD_TEXTS)))
def test_odd_json_same_outcome(text):
    assert outcome(parse_snapshot, text) == outcome(model._parse_reference, text)
    try:
        as_str = text.decode()
    except UnicodeDecodeError:
        return
    assert outcome(parse_snapshot, as_str) == outcome(model._parse_reference, as_str)


@settings(max_examples=150, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(doc=mutated_snapshot())
def test_fuzzed_snapshots_same_outcome(doc):
    text = dump(doc)
    assert outcome(parse_snapshot, text) == outcome(model._parse_reference, text)
    assert outcome(parse_snapshot, text.encode("utf-8", "surrogatepass")) == outcome(model._parse_reference, text.encode("utf-8", "surrogatepass"))


def test_too_many_jobs_is_refused_before_validating_each_one(monkeypatch):
    """pydantic checks a list's length only after every item; the count comes first
    (a 1,000,000-job snapshot took 12 s to be refused), with the reference's message."""
    text = json.dumps({"cluster": {"gpus": {"v100": 2}},
                       "jobs": [{"id": f"j{i}", "throughput": {"v100": 1}} for i in range(model.MAX_JOBS + 1)]})
    want = outcome(model._parse_reference, text)
    assert want[0] == "error" and "at most 100000 items" in want[1]

    def no_validation(*a, **k):
        raise AssertionError("validated the jobs before counting them")

    monkeypatch.setattr(model, "_parse_json_fast", no_validation)
    monkeypatch.setattr(model, "_parse_reference", no_validation)
    assert outcome(parse_snapshot, text) == want
    assert outcome(parse_snapshot, text.encode()) == want


def test_the_key_count_is_only_a_bound():
    """Many "throughput" keys that are not jobs' (free-form allocator state) take the exact count."""
    doc = random_snapshot(np.random.default_rng(5), 3)
    doc["allocator"] = {"x": [{"throughput": i} for i in range(model.MAX_JOBS + 5)]}
    text = json.dumps(doc)
    assert outcome(parse_snapshot, text) == outcome(model._parse_reference, text)
    assert outcome(parse_snapshot, text)[0] == "Snapshot"


@pytest.mark.parametrize("top", ["list", "cluster_list"])
def test_the_count_check_leaves_other_shapes_to_the_parse(top):
    """Past the key-count bound, a top level or cluster that is not an object is the parse's error to name."""
    many = [{"throughput": 1, "gpu_type": "x"} for _ in range(model.MAX_JOBS + 1)]
    doc = many if top == "list" else {"cluster": many, "jobs": []}
    text = json.dumps(doc)
    got = outcome(parse_snapshot, text)
    assert got[0] == "error" and got == outcome(model._parse_reference, text)


DUPLICATE_KEYS = [  # (text, the key the error names); each parsed last-wins before
    (b'{"cluster": {"gpus": {"v100": 2}}, "jobs": [{"id": "a", "throughput": {"v100": 1}}],'
     b' "jobs": [{"id": "b", "throughput": {"v100": 1}}]}', "'jobs'"),
    (b'{"cluster": {"gpus": {"v100": 2}}, "jobs": [{"id": "a", "throughput": {"v100": 1}, "weight": 1,'
     b' "weight": 3}]}', "'weight' appears twice in one object (in the object with id 'a')"),
    (b'{"cluster": {"gpus": {"v100": 2, "v100": 8}}, "jobs": []}', "'v100'"),
    (b'{"cluster": {"gpus": {"v100": 2}}, "jobs": [{"id": "a", "throughput": {"v100": 1, "v100": 0}}]}', "'v100'"),
]


@pytest.mark.parametrize("text,names", DUPLICATE_KEYS, ids=range(len(DUPLICATE_KEYS)))
def test_a_repeated_key_is_refused_not_read_last_wins(text, names):
    for parse in (parse_snapshot, model._parse_reference):
        for form in (text, text.decode()):
            with pytest.raises(OptschedError, match="appears twice") as e:
                parse(form)
            assert names in str(e.value) and "\n" not in str(e.value)


def test_the_same_keys_in_different_objects_are_fine():
    text = b'{"cluster": {"gpus": {"v100": 2}}, "jobs": [{"id": "a", "throughput": {"v100": 1}}, {"id": "b", "throughput": {"v100": 1}}]}'
    assert [j.id for j in parse_snapshot(text).jobs] == ["a", "b"]


@pytest.mark.parametrize("text", [
    b'{"ab": 1, "a\\u0062": 2}',                         # the same key once unescaped
    b'{"jobs": [{"id": "x", "w": 1, "w": 2}]}',          # inside a list
    '{"a": {"b": 1}, "a": 2}',                           # str input, outer object
    b'{"a": {"b": 1, "c": {"d": [1, {"e": 0, "e": 0}]}}}',  # deep
    b'{"a": 1, "b": {"a": 1}}',                          # one key in two objects: no duplicate
    b'{"\\ud83d\\ude00": 1, "\xf0\x9f\x98\x80": 2}',     # an escaped and a raw emoji: one key
    b'not json', b'[1, 2', b'{"a": NaN}',
])
def test_the_fast_duplicate_key_scan_agrees_with_the_python_hook(text):
    """check_unique_keys (jiter, Rust) is the fast path's duplicate check; loads_unique
    (json + a hook) is the definition. Text that is not JSON passes the scan (the parse names it)."""
    from optsched.model import DuplicateKeyError, check_unique_keys, loads_unique

    try:
        loads_unique(text)
        expected = None
    except DuplicateKeyError as e:
        expected = str(e)
    except ValueError:
        expected = None  # not JSON
    if expected is None:
        check_unique_keys(text)
    else:
        with pytest.raises(DuplicateKeyError) as got:
            check_unique_keys(text)
        assert str(got.value) == expected
