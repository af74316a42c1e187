"""Fuzz: bad snapshots, allocator state and CLI options through `optsched solve`
(in-process CliRunner) and the Python API.

Every input must end in exit 0, 2 (one line on stderr naming the field) or 3
(a fallback under --strict): never a traceback, never NaN/Infinity in --json
output, never a hang (sizes are validated against the documented limits in
optsched.model before any work scales with them).

Bounded for CI (the default profile, derandomized); OPTSCHED_HYPOTHESIS_PROFILE=explore
draws FUZZ_EXPLORE fresh examples per test. Inputs found failing are pinned with @example.
"""

from __future__ import annotations

import copy
import json
import math
import os
import time

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import optsched
from optsched.cli import app
from optsched.model import MAX_GPUS, MAX_JOBS, OptschedError

EXPLORE = os.environ.get("OPTSCHED_HYPOTHESIS_PROFILE") == "explore"
EXAMPLES = int(os.environ.get("FUZZ_EXPLORE", "1500")) if EXPLORE else 40
HANG_SECONDS = 300.0  # one case: a bound only a loop without end reaches (a validated input takes < 1 s; 10x that on a busy machine)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))

runner = CliRunner()


# --------------------------------------------------------------------------
# Checks shared by every case
# --------------------------------------------------------------------------


def _no_constants(name):
    raise AssertionError(f"non-finite number {name} in JSON output")


def strict_json(text: str):
    """json.loads that refuses NaN / Infinity (invalid JSON that Python writes by default)."""
    return json.loads(text, parse_constant=_no_constants)


def check_result(res, args, strict: bool = False, as_json: bool = False, elapsed: float = 0.0,
                 hang_seconds: float = HANG_SECONDS) -> None:
    where = f"args={args!r}"
    assert elapsed < hang_seconds, f"hang: {elapsed:.1f} s, {where}"
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(res.exception))
        raise AssertionError(f"traceback ({where}):\n{tb}")
    allowed = {0, 2, 3} if strict else {0, 2}
    assert res.exit_code in allowed, f"exit {res.exit_code}: {where}\nstderr: {res.stderr!r}"
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout, where
    if res.exit_code in (2, 3):
        lines = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith(("WARNING", "INFO", "DEBUG"))]
        assert len(lines) == 1, f"stderr is not one line: {res.stderr!r} ({where})"
        line = lines[0]
        assert line.startswith("error: ") and len(line) > len("error: ") + 3, f"{line!r} ({where})"
        if res.exit_code == 2:  # names the field: "<field>: message" somewhere in the line
            assert ":" in line[len("error: "):], f"{line!r} does not name a field ({where})"
    if res.exit_code == 0 and as_json:
        strict_json(res.stdout)


class Hang(BaseException):
    """Raised by the alarm inside a case that runs past its limit (BaseException: nothing swallows it)."""


def _alarm(signum, frame):
    raise Hang()


def invoke(args, input=None, strict=False, as_json=False, hang_seconds=HANG_SECONDS):
    t0 = time.perf_counter()
    import signal
    import threading

    armed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if armed:  # a hang fails the case instead of stalling the suite
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, 2 * hang_seconds)
    try:
        res = runner.invoke(app, args, input=input)
    except Hang:
        raise AssertionError(f"hang: over {2 * hang_seconds:.0f} s, args={args!r}") from None
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    check_result(res, args, strict=strict, as_json=as_json, elapsed=time.perf_counter() - t0, hang_seconds=hang_seconds)
    return res


# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------

GPU_TYPES = ("v100", "p100", "k80")

BAD_NUMBERS = st.sampled_from([
    0, -1, -0.0, 1, 2, 0.5, 1e-300, 1e308, -1e308, 2**31, 2**63, 10**20, 10**400, MAX_GPUS, MAX_GPUS + 1,
    float("nan"), float("inf"), float("-inf"), True, False,
])
BAD_TEXT = st.sampled_from(["", " ", "\ud800", "a\udfffb", "v100", "x" * 300, "\x00", "é", "null", "NaN", "a", "b",
                           "[/]", "[bold]", "\n", "a\nb"])
LEAF = st.one_of(BAD_NUMBERS, BAD_TEXT, st.none(), st.integers(), st.floats(), st.text(max_size=8))
JSONISH = st.recursive(LEAF, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(BAD_TEXT | st.text(max_size=4), c, max_size=3)),
                       max_leaves=6)


def base_snapshot(n_jobs: int = 3) -> dict:
    jobs = []
    for i in range(n_jobs):
        jobs.append({"id": f"j{i}", "model": "m", "scale_factor": [1, 2, 1, 4][i % 4],
                     "throughput": {"v100": 4.0 + i, "p100": 2.0, "k80": 1.0 + i % 2},
                     "steps_total": 1000.0 * (i + 1), "weight": 1.0 + i % 2, "arrival_time": float(i)})
    snap = {"version": 1, "time": 10.0, "cluster": {"gpus": {"v100": 4, "p100": 4, "k80": 4},
                                                    "price_per_hour": {"v100": 2.48, "p100": 1.46, "k80": 0.45}},
            "jobs": jobs}
    if n_jobs >= 2:
        snap["jobs"][0]["colocated"] = {"j1": {"v100": [3.0, 2.0]}}
    return snap


def elastic_job(i: int) -> dict:
    return {"id": f"e{i}", "throughput": {"v100": 2.0, "k80": 1.0}, "elapsed_time": 900.0,
            "goodput": {"perf_params": {"v100": [0.05, 0.001, 0.2, 0.01, 0.05, 0.002, 2.0]}, "grad_sqr": 2.0,
                        "grad_var": 30.0, "init_batch_size": 64, "max_batch_size": 2048, "local_bsz": [8, 256],
                        "max_gpus": 8}}


def paths(obj, prefix=()):
    """Every (path) into a JSON document, containers included."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from paths(v, prefix + (i,))


def set_path(doc, path, value):
    if not path:
        return value
    cur = doc
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return doc


@st.composite
def mutated_snapshot(draw) -> dict:
    snap = base_snapshot(draw(st.integers(0, 4)))
    if draw(st.booleans()):
        snap["jobs"] += [elastic_job(i) for i in range(draw(st.integers(1, 2)))]
    if draw(st.booleans()):
        snap["cluster"]["servers"] = [{"id": f"{t}-0", "gpu_type": t, "gpus": 4} for t in GPU_TYPES]
    if draw(st.booleans()):  # allocator state, as `solve --placement` hands it back
        snap["rounds_received"] = {"j0": {"v100": 2.0}}
        snap["rounds_present"] = {"j0": 3.0}
        snap["deficits"] = {"j0": {"v100": 0.5}}
        snap["prior_allocation"] = {"j0": {"v100": 0.5}}
        snap["placement"] = {"j0": [{"server": "v100-0", "gpu_type": "v100", "gpu": 0}]}
        snap["allocator"] = {"round": 3, "credits": {}, "removed": []}
    for _ in range(draw(st.integers(0, 3))):
        all_paths = list(paths(snap))
        path = draw(st.sampled_from(all_paths))
        action = draw(st.sampled_from(["set", "set", "delete", "add"]))
        if action == "set":
            snap = set_path(snap, path, draw(JSONISH))
        elif action == "delete" and path:
            parent = snap
            for p in path[:-1]:
                parent = parent[p]
            del parent[path[-1]]
        elif action == "add":
            parent = snap
            for p in path:
                parent = parent[p]
            if isinstance(parent, dict):
                parent[draw(BAD_TEXT | st.sampled_from(GPU_TYPES + ("servers", "goodput", "j9")))] = draw(JSONISH)
            elif isinstance(parent, list):
                parent.append(copy.deepcopy(parent[0]) if parent and draw(st.booleans()) else draw(JSONISH))
        if not isinstance(snap, dict):
            break
    return snap


def dump(doc) -> str:
    return json.dumps(doc, allow_nan=True)  # NaN / Infinity as Python writes them: the parser must say no


POLICIES = ["max_min_fairness", "max_min_fairness_agnostic", "finish_time_fairness", "makespan", "max_throughput",
            "min_cost", "min_cost_slo", "proportional_fairness", "fifo", "las", "srtf", "tiresias", "gandiva",
            "pollux", "sia", "max_min_fairness_water_filling", "nope"]
TIME_LIMITS = ["10", "1", "0", "-1", "nan", "inf", "-inf", "1e-9", "1e308", "x"]


@st.composite
def solve_options(draw) -> tuple[list[str], bool, bool]:
    args = ["--policy", draw(st.sampled_from(POLICIES))]
    if draw(st.integers(0, 3)) == 0:
        args += ["--time-limit", draw(st.sampled_from(TIME_LIMITS))]
    if draw(st.booleans()):
        args += ["--placement"]
        if draw(st.booleans()):
            args += ["--placement-policy", draw(st.sampled_from(["consolidated", "first_fit", "bogus"]))]
    if draw(st.integers(0, 4)) == 0:
        args += ["--packing"]
    if draw(st.integers(0, 5)) == 0:
        args += ["--partitions", draw(st.sampled_from(["2", "0", "-1", "1000000000", "x"]))]
    if draw(st.integers(0, 5)) == 0:
        args += ["--solver", draw(st.sampled_from(["highs", "clarabel", "ipm", "highs-simplex", "nope"]))]
    strict = draw(st.booleans())
    if strict:
        args += ["--strict"]
    as_json = draw(st.booleans())
    if as_json:
        args += ["--json"]
    return args, strict, as_json


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------


def _solve(doc_text, opts):
    args, strict, as_json = opts
    return invoke(["solve", "-", *args], input=doc_text, strict=strict, as_json=as_json)


# Inputs that failed once (the list and this suite's finds).
@example(doc={"cluster": {"gpus": {"v100": 10**9}}, "jobs": [{"id": "a", "throughput": {"v100": 1}}]},
         opts=(["--policy", "max_min_fairness", "--placement"], False, True))
@example(doc={"cluster": {"gpus": {"v100": 2**63}}, "jobs": [{"id": "a", "throughput": {"v100": 1}}]},
         opts=(["--placement"], False, True))
@example(doc={"cluster": {"gpus": {"v100": 10**20}}, "jobs": [{"id": "a", "throughput": {"v100": 1}}]},
         opts=(["--placement"], False, False))
@example(doc={"cluster": {"gpus": {"v100": 2**31}}, "jobs": [elastic_job(0)]}, opts=(["--policy", "sia"], False, True))
@example(doc={"cluster": {"gpus": {"v100": 2**31}}, "jobs": [elastic_job(0)]}, opts=(["--policy", "pollux"], False, True))
@example(doc={"cluster": {"gpus": {"v100": 4, "k80": 4}, "servers": [{"id": "s", "gpu_type": "v100", "gpus": 4}]},
              "jobs": [{"id": "a", "throughput": {"v100": 1, "k80": 1}}]}, opts=(["--placement"], False, True))
@example(doc={"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "\ud800", "throughput": {"v100": 1}},
                                                         {"id": "a", "throughput": {"v100": 1}}]},
         opts=(["--placement"], False, False))
@example(doc={"cluster": {"gpus": {"v[/]100": 2}}, "jobs": [{"id": "[/]", "model": "[/x]", "throughput": {"v[/]100": 1}},
                                                             {"id": "b", "throughput": {"v[/]100": 1}}]},
         opts=(["--placement"], False, False))
@example(doc={"cluster": {"gpus": {"v100": 4, "\n": "x"}}}, opts=([], False, False))
@example(doc={"cluster": {"gpus": {"v100": 2}}, "jobs": [{"id": "[/]", "throughput": {"v100": 1}},
                                                         {"id": "[/]", "throughput": {"v100": 1}}]}, opts=([], False, False))
@example(doc={"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a", "weight": float("inf"), "throughput": {"v100": 1}}]},
         opts=([], False, True))
@example(doc={"time": float("nan"), "cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a", "throughput": {"v100": 1}}]},
         opts=([], False, True))
@example(doc=base_snapshot(), opts=(["--time-limit", "-1"], False, True))
@example(doc=base_snapshot(), opts=(["--time-limit", "nan"], False, True))
@example(doc=base_snapshot(), opts=(["--time-limit", "0"], True, True))
@example(doc=base_snapshot(), opts=(["--partitions", "0"], False, True))
@example(doc=base_snapshot(), opts=(["--partitions", "1000000000"], False, True))
@example(doc=base_snapshot(0), opts=(["--partitions", "2", "--json"], False, True))  # no jobs: min() of no partitions
@example(doc=base_snapshot(0), opts=(["--partitions", "0"], False, False))
@FUZZ
@given(doc=mutated_snapshot(), opts=solve_options())
def test_fuzz_solve_cli(doc, opts):
    _solve(dump(doc), opts)


BAD_BYTES = st.sampled_from([
    b"", b"\xff\xfe\xfa", b'{"cluster": {"gpus": {"v\xff100": 4}}}', b"[" * 1000 + b"]" * 1000, b"{" * 100000,
    b'{"a":' * 1000 + b"1" + b"}" * 1000, b"null", b"[]", b"1", b'"x"', b"\x00" * 10, b"{", b'{"version": 2}',
    b'{"cluster": {"gpus": {"v100": 1e999}}}', b'{"cluster": {"gpus": {"v100": NaN}}}',
])


@example(raw=b"\xff\xfe\xfa", opts=([], False, False))
@example(raw=b"[" * 1000 + b"]" * 1000, opts=([], False, False))
@FUZZ
@given(raw=BAD_BYTES | st.binary(max_size=64), opts=solve_options())
def test_fuzz_solve_bytes(raw, opts):
    args, strict, as_json = opts
    res = invoke(["solve", "-", *args], input=raw, strict=strict, as_json=as_json)
    assert res.exit_code != 0 or raw.strip().startswith(b"{")


@FUZZ
@given(doc=mutated_snapshot(), policy=st.sampled_from(POLICIES), placement=st.booleans())
def test_fuzz_python_api(doc, policy, placement):
    """The API raises OptschedError (one line) or returns an allocation whose JSON is finite."""
    t0 = time.perf_counter()
    try:
        snap = optsched.parse_snapshot(dump(doc))
        alloc = optsched.solve(snap, policy=policy, time_limit=10)
        out = alloc.to_dict()
        if placement:
            from optsched.allocator import Allocator

            allocator = Allocator.from_snapshot(snap)
            out.update(allocator.next_round(snap, alloc).to_dict())
            out["allocator_state"] = allocator.state()
        strict_json(json.dumps(out, allow_nan=True, default=str))
    except OptschedError as e:
        assert "\n" not in str(e) and str(e), repr(e)
    assert time.perf_counter() - t0 < HANG_SECONDS


def test_documented_limits_are_enforced_before_work():
    """Sizes just above the limits are refused at parse time, naming the field."""
    cases = [
        ({"cluster": {"gpus": {"v100": MAX_GPUS + 1}}}, "cluster.gpus"),
        ({"cluster": {"gpus": {"v100": MAX_GPUS, "k80": 1}}}, "cluster.gpus"),
        ({"cluster": {"gpus": {f"t{i}": 1 for i in range(65)}}}, "cluster.gpus"),
        ({"cluster": {"gpus": {"v100": 4}}, "jobs": [{"id": "a", "scale_factor": 2**63, "throughput": {"v100": 1}}]},
         "jobs[0].scale_factor"),
    ]
    for doc, field in cases:
        t0 = time.perf_counter()
        try:
            optsched.parse_snapshot(doc)
        except OptschedError as e:
            assert field in str(e), str(e)
        else:
            raise AssertionError(f"accepted {field}")
        assert time.perf_counter() - t0 < 30.0  # refused at parse time, not after building the jobs (seconds on any machine)
    many = {"cluster": {"gpus": {"v100": 1}}, "jobs": [{"id": str(i), "throughput": {"v100": 1}} for i in range(MAX_JOBS + 1)]}
    try:
        optsched.parse_snapshot(many)
    except OptschedError as e:
        assert str(e).startswith("invalid snapshot: jobs:"), str(e)
    else:
        raise AssertionError("accepted too many jobs")
    assert math.isfinite(MAX_GPUS)
