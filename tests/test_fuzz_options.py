"""Fuzz: option values of every command but solve (simulate, compare, trace
generate/convert, sweep, serve, run, bench) on tiny inputs: exit 0 or 2 with one
line naming the option, no traceback, no NaN/Infinity in --json output, no hang.
Numbers are checked against the documented limits in optsched.cli.limits
(docs/guide/simulate.md: "Options and their limits") before any work scales with them.

Bounded for CI (the default profile, derandomized, a few cases per test);
OPTSCHED_HYPOTHESIS_PROFILE=explore draws FUZZ_EXPLORE // 5 fresh cases per test.
Inputs found failing once are pinned with @example. The last test scans each
command's text output for Python reprs ({'..., ['..., [], None, nan, inf).
"""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.test_fuzz_snapshot import invoke

EXPLORE = os.environ.get("OPTSCHED_HYPOTHESIS_PROFILE") == "explore"
EXAMPLES = int(os.environ.get("FUZZ_EXPLORE", "1500")) // 5 if EXPLORE else 8
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
SIM_SECONDS = 600.0  # one simulate/compare case on the 4-job trace (compare runs two policies)

NUMBERS = ["0", "-1", "nan", "inf", "-inf", "1e308", "1e-300", "x", "", "2", "100000000", "0.5", "1e7", "-0"]
SIM_OPTIONS = {
    "--round-length": NUMBERS + ["360", "60", "1e-3", "0.01", "10000000", "10000001"],
    "--min-recompute-interval": NUMBERS + ["1920", "1e10", "1e11"],
    "--recompute-every": NUMBERS + ["1", "3", "100000", "100001"],
    "--restart-overhead": NUMBERS + ["0", "10", "359", "360", "application"],
    "--sample": NUMBERS + ["1", "3"],
    "--window": ["0:2", "2:0", "x", "1:1", "0:100000000000", "-1:2", "0:1e3", ":"],
    "--policy": ["max_min_fairness", "fifo", "las", "srtf", "tiresias", "gandiva", "nope", "", "sia"],
    "--queue": ["phased", "per_type", "global", "gavel", "nope"],
    "--type-order": ["fixed", "shuffle", "v100,p100,k80", "v100", "nope,x"],
    "--placement": ["consolidated", "first_fit", "nope"],
    "--cluster": ["v100=2,p100=2,k80=2", "v100=0", "v100=-1", "v100=nan", "v100=1000000000", "=", "v100", "x=1e999",
                  "v100=100000"],
    "--servers": ["2x4", "0x4", "x", "1x0", "100000x100000", "100000000x4", "25000x4", "25001x4"],
    "--solver": ["auto", "highs", "nope"],
    "--seed": ["0", "-1", "x", str(2**63 - 1), str(2**63), str(2**70)],
    "--admission": ["load", "accept-all", "nope"],
    "--load-factor": NUMBERS + ["2", "1000000", "1000001"],
    "--migration-cost": NUMBERS + ["120", "3600", "10000000", "10000001"],
    "--hysteresis": NUMBERS + ["3", "1000000", "1000001"],
}


@pytest.fixture(scope="module")
def tiny_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("opts") / "tiny.trace"
    res = invoke(["trace", "generate", str(path), "--jobs", "4", "--rate", "30", "--seed", "1"])
    assert res.exit_code == 0
    return path


def draw_options(draw, table: dict) -> tuple[list[str], list[str]]:
    """One to three distinct options of ``table`` with a value each: (keys, args)."""
    keys = draw(st.lists(st.sampled_from(sorted(table)), min_size=1, max_size=3, unique=True))
    return keys, [x for k in keys for x in (k, draw(st.sampled_from(table[k])))]


@st.composite
def sim_args(draw):
    keys, args = draw_options(draw, SIM_OPTIONS)
    if "--cluster" not in keys and "--servers" not in keys:
        args += ["--cluster", "v100=2,p100=2,k80=2"]
    return args


# The list (excluded from the previous run: hangs, Infinity in --json,
# 10^8 servers built before the cluster was checked) and this suite's finds.
@example(args=["--round-length", "inf", "--cluster", "v100=2"], compare=False)
@example(args=["--round-length", "1e-300", "--cluster", "v100=2"], compare=False)
@example(args=["--round-length", "0.01", "--cluster", "v100=2"], compare=False)  # 10^7 rounds: over the bound
@example(args=["--round-length", "0.5", "--cluster", "v100=2"], compare=False)  # 2.8·10^5 rounds (~2 min): over it
@example(args=["--restart-overhead", "inf", "--cluster", "v100=2"], compare=False)
@example(args=["--restart-overhead", "1e308", "--cluster", "v100=2"], compare=False)
@example(args=["--restart-overhead", "100000000", "--cluster", "v100=1"], compare=True)
@example(args=["--restart-overhead", "400", "--cluster", "v100=1"], compare=False)  # livelock: restarted every round
@example(args=["--servers", "100000000x4"], compare=False)
@example(args=["--servers", "100000000x4"], compare=True)
@example(args=["--min-recompute-interval", "inf", "--cluster", "v100=2"], compare=False)
@example(args=["--admission", "load", "--load-factor", "inf", "--cluster", "v100=2"], compare=False)
@example(args=["--migration-cost", "1e308", "--cluster", "v100=2"], compare=False)  # H = 20·cost/round overflows
@example(args=["--hysteresis", "inf", "--cluster", "v100=2"], compare=True)
@example(args=["--recompute-every", "100000000", "--cluster", "v100=2"], compare=False)
@example(args=["--seed", "-1", "--cluster", "v100=2"], compare=False)
@FUZZ
@given(args=sim_args(), compare=st.booleans())
def test_fuzz_simulate_options(tiny_trace, args, compare):
    if "--cluster" in args and "--servers" in args:
        args = args[: args.index("--servers")] + args[args.index("--servers") + 2 :]
    # an accepted run needs at most MAX_ROUNDS (100,000) rounds by its lower bound: up to a minute here, not a hang
    if compare:
        args = [a if a != "--policy" else "--policies" for a in args]
        invoke(["compare", str(tiny_trace), "--json", "--quiet", *args], as_json=True, hang_seconds=SIM_SECONDS)
    else:
        invoke(["simulate", str(tiny_trace), "--json", "--quiet", *args], as_json=True, hang_seconds=SIM_SECONDS)


def test_documented_simulation_limits_name_the_option(tiny_trace):
    """Each limit is refused by name before the first round; the edge inside it runs."""
    cl = ["--cluster", "v100=2,p100=2,k80=2"]
    for args, option in ((["--round-length", "inf"], "--round-length"), (["--round-length", "1e-300"], "--round-length"),
                         (["--round-length", "0.01"], "--round-length"), (["--restart-overhead", "inf"], "--restart-overhead"),
                         (["--restart-overhead", "360"], "--restart-overhead"),
                         (["--servers", "100000000x4"], "--servers"), (["--migration-cost", "nan"], "--migration-cost")):
        res = invoke(["simulate", str(tiny_trace), "--json", "--quiet", *cl, *args], as_json=True)
        assert res.exit_code == 2 and option in res.stderr, (args, res.stderr)
    res = invoke(["simulate", str(tiny_trace), "--json", "--quiet", *cl, "--restart-overhead", "359"], as_json=True)
    assert res.exit_code == 0, res.stderr


@example(jobs="100000000000", rate="2", seed="0", to="gavel", name="g.trace")
@example(jobs="3", rate="1e-300", seed="0", to="gavel", name="g.trace")
@example(jobs="3", rate="2", seed="-1", to="gavel", name="g.trace")
@FUZZ
@given(jobs=st.sampled_from(["0", "-1", "3", "x", "1000001", "100000000000", "1e3"]),
       rate=st.sampled_from(["0", "-1", "nan", "inf", "2", "x", "1e-300", "1e308", "0.001"]),
       seed=st.sampled_from(["0", "-1", "7", str(2**70), str(2**128)]),
       to=st.sampled_from(["gavel", "tiresias", "philly", "pollux", "nope"]),
       name=st.sampled_from(["g.trace", "g.csv", "g.parquet", "g.trace.gz", "g.json"]))
def test_fuzz_trace_generate_options(tmp_path_factory, jobs, rate, seed, to, name):
    out = tmp_path_factory.mktemp("gen") / name
    invoke(["trace", "generate", str(out), "--jobs", jobs, "--rate", rate, "--seed", seed, "--to", to])


@FUZZ
@given(seed=st.sampled_from(["0", "-1", "3", str(2**70), "x"]), to=st.sampled_from(["gavel", "tiresias", "philly", "nope"]))
def test_fuzz_trace_convert_options(tiny_trace, tmp_path_factory, seed, to):
    out = tmp_path_factory.mktemp("conv") / "c.out"
    invoke(["trace", "convert", str(tiny_trace), str(out), "--to", to, "--seed", seed])


SWEEP_OPTIONS = {
    "--loads": ["4", "inf", "nan", "-1", "0", "1e-300", "1e308", "4,8", "x"],
    "--seeds": ["0", "-1", "0,1", "x", str(2**70)],
    "--jobs": ["3", "0", "-1", "1000001", "100000000000"],
    "--workers": ["1", "0", "-1", "100000"],
    "--cluster": ["v100=2,p100=2,k80=2", "2x2", "100000000x4", "v100=nan"],
    "--set": ["round_length=360", "round_length=1e-300", "round_length=0.01", "round_length=1e999",
              "restart_overhead=1e308", "restart_overhead=10", "min_recompute_interval=-1", "load_factor=nan",
              "recompute_every=0", "round_lenght=3", "x"],
    "--auto-every": ["10", "0", "-1", "100000000"],  # (1 is slow, not wrong: a look-ahead per round)
    "--auto-horizon": ["100", "inf", "nan", "-1", "1e308"],
}


@st.composite
def sweep_args(draw):
    # auto's look-ahead runs take tens of seconds on a loaded machine: explored, not in the bounded CI profile
    keys, args = draw_options(draw, SWEEP_OPTIONS if EXPLORE else
                              {k: v for k, v in SWEEP_OPTIONS.items() if not k.startswith("--auto")})
    if "--jobs" not in keys:
        args += ["--jobs", "3"]
    if "--cluster" not in keys:
        args += ["--cluster", "v100=2,p100=2,k80=2"]
    auto = any(k.startswith("--auto") for k in keys)
    return ["--policies", "auto,fifo" if auto else "fifo", *args]


@example(args=["--policies", "fifo", "--set", "round_length=1e-300", "--jobs", "3"])
@example(args=["--policies", "fifo", "--set", "restart_overhead=1e308", "--jobs", "3"])
@example(args=["--policies", "fifo", "--jobs", "100000000000"])
@example(args=["--policies", "fifo", "--seeds", str(2**70), "--jobs", "3"])  # OverflowError writing results.parquet
@example(args=["--policies", "fifo", "--loads", "inf", "--jobs", "3"])
@example(args=["--policies", "auto,fifo", "--auto-horizon", "inf", "--jobs", "3"])
@FUZZ
@given(args=sweep_args())
def test_fuzz_sweep_options(tmp_path_factory, args):
    out = tmp_path_factory.mktemp("sweep")
    # auto's look-ahead simulates its candidates every K rounds: slow on purpose (41 s seen), bounded by the rounds
    invoke(["sweep", "gavel", "--executor", "serial", "--quiet", "--out", str(out), *args], hang_seconds=SIM_SECONDS)


@pytest.fixture
def no_server(monkeypatch):
    """serve: everything up to listening (options, database, warm-up, the bound socket), then return
    instead of serving."""
    import optsched.cli.serve as serve

    monkeypatch.setattr(serve, "_serve_on", lambda *a, **k: None)


SERVE_OPTIONS = {
    "--port": ["0", "8080", "-1", "65536", "100000000000"],
    "--max-body-bytes": ["1", "0", "-1", "2147483649", "100000000000000"],
    "--max-jobs": ["1", "0", "100000", "100001", "-5"],
    "--max-gpus": ["1", "0", "100000", "100001"],
    "--max-time-limit": ["1", "0", "nan", "inf", "-1", "1e308", "1e-300"],
    "--sessions-cached": ["1", "0", "1000001"],
    "--threads": ["1", "0", "-1", "1025", "100000000"],
}


@example(opts=[("--max-time-limit", "inf")])
@example(opts=[("--threads", "100000000")])
@FUZZ
@given(opts=st.lists(st.sampled_from([(k, v) for k, vs in SERVE_OPTIONS.items() for v in vs]), min_size=1, max_size=3))
def test_fuzz_serve_options(no_server, tmp_path_factory, opts):
    db = tmp_path_factory.mktemp("serve") / "s.db"
    invoke(["serve", "--db", str(db), *[x for kv in opts for x in kv]])


@pytest.fixture
def no_jobs(monkeypatch):
    """run: the command up to its configuration check; no real process starts."""
    import optsched.runtime.loop as loop
    from optsched.model import OptschedError

    def fake_run(trace, executor, cfg, **kw):
        cfg.validate()
        raise OptschedError("run: stopped before the first job (test)")

    monkeypatch.setattr(loop, "run", fake_run)


RUN_OPTIONS = {
    "--round-length": ["2", "0", "nan", "inf", "-1", "1e-300", "1e308", "0.01"],
    "--grace": ["5", "-1", "nan", "inf", "1e308"],
    "--step-scale": ["1", "0", "-1", "nan", "inf", "1e308", "1e-300"],
    "--max-time": ["10", "0", "-1", "nan", "inf"],
    "--seed": ["0", "-1", str(2**70)],
    "--slot-speed": ["slow=0.5", "slow=nan", "slow=inf", "slow=0", "slow", "=0.5"],
}


@example(opts=[("--step-scale", "inf")])
@example(opts=[("--step-scale", "nan")])
@FUZZ
@given(opts=st.lists(st.sampled_from([(k, v) for k, vs in RUN_OPTIONS.items() for v in vs]), min_size=1, max_size=3))
def test_fuzz_run_options(no_jobs, opts):
    invoke(["run", "--quiet", *[x for kv in opts for x in kv]])


@FUZZ
@given(repeat=st.sampled_from(["1", "0", "-1", "1000", "1001", "100000000000"]),
       seed=st.sampled_from(["0", "-1", str(2**70)]))
def test_fuzz_bench_options(monkeypatch, repeat, seed):
    import optsched.bench.runner as runner

    monkeypatch.setattr(runner, "run_cases", lambda cases, ctx, on_done: [])  # the options, not the cases
    invoke(["bench", "--quick", "--repeat", repeat, "--seed", seed])


# --------------------------------------------------------------------------
# No Python reprs in text output
# --------------------------------------------------------------------------

REPR = re.compile(r"\{'|\['|\[\]|\bNone\b|\bnan\b|\bNaN\b|\binf\b|\bInfinity\b|\{\d+: ")


def _text_of(args, tmp_path):
    res = invoke(args)
    assert res.exit_code == 0, (args, res.stderr)
    return res.stdout


def test_text_output_has_no_python_reprs(tmp_path, tiny_trace):
    from conftest import ROOT, peer_data_dir

    ex = ROOT / "examples"
    tiny = ["--cluster", "v100=2,p100=2,k80=2", "--quiet"]
    commands = [
        ["solve", str(ex / "snapshot.json")],
        ["solve", str(ex / "snapshot.json"), "--placement"],
        ["solve", str(ex / "packing.json"), "--packing"],
        ["policies"],
        ["simulate", str(tiny_trace), *tiny],
        ["simulate", str(tiny_trace), *tiny, "--migration-cost", "120", "--window", "0:2"],
        ["compare", str(tiny_trace), *tiny, "--policies", "fifo,max_min_fairness"],
        ["trace", "describe"],
        ["trace", "describe", str(tiny_trace)],
        ["trace", "generate", str(tmp_path / "g.trace"), "--jobs", "3"],
        ["trace", "convert", str(tiny_trace), str(tmp_path / "c.trace"), "--to", "gavel"],
        ["sweep", "gavel", "--policies", "fifo", "--jobs", "3", "--loads", "4", "--executor", "serial", "--quiet",
         "--out", str(tmp_path / "sw"), "--cluster", "v100=2,p100=2,k80=2"],
        ["report", str(tmp_path / "sw")],
    ]
    peer = peer_data_dir()
    for rel in ("tiresias/60_job.csv", "pollux/workloads/workload-1.csv", "philly/philly.csv.gz"):
        if (peer / rel).is_file():
            commands.append(["trace", "describe", str(peer / rel)])
    for args in commands:
        text = _text_of(args, tmp_path)
        assert text.strip(), args
        bad = REPR.search(text)
        assert bad is None, f"{args}: Python repr {bad.group(0)!r} in\n{text}"
    describe = _text_of(["trace", "describe", str(tiny_trace)], tmp_path)
    assert "1 GPU: 4 jobs" in describe and "notes" in describe
