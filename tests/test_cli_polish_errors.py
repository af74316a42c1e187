"""Errors name the option the user typed (or the file's column), once: the library's
keywords (queue, type_order) become the command's flags (--queue, --type-order)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from optsched.cli import app
from optsched.cli.common import as_flags, option_flags
from optsched.traces.generate import generate_gavel
from optsched.traces.io import write_trace
from optsched.traces.throughputs import default_throughputs

runner = CliRunner()
CLUSTER = ["--cluster", "v100=4,p100=4,k80=4"]


@pytest.fixture(scope="module")
def tiny_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("errors") / "tiny.trace"
    write_trace(generate_gavel(default_throughputs(), 3, 30.0, seed=1), path, "gavel")
    return str(path)


def error_line(args) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0].removeprefix("error: ")


def test_a_commands_options_by_keyword():
    def cmd(type_order: str = typer.Option(None, "--type-order"), quiet: bool = typer.Option(False, "--quiet", "-q"),
            log: bool = typer.Option(True, "--access-log/--no-access-log"), trace: str = typer.Argument(None)):
        pass

    assert option_flags(cmd) == {"type_order": "--type-order", "quiet": "--quiet", "log": "--access-log"}
    names = option_flags(cmd)
    assert as_flags("type_order: must list each GPU type once", names) == "--type-order: must list each GPU type once"
    assert as_flags("trace x.csv: no such file", names) == "trace x.csv: no such file"  # an argument, not a keyword
    assert as_flags("queue: unknown", names) == "queue: unknown"  # not an option of this command


def test_compare_names_policies(tiny_trace):
    assert error_line(["compare", tiny_trace, "--policies", "fifo,lass", *CLUSTER]).startswith(
        "--policies: unknown policy 'lass'")
    # the simulator's own check (check_run) names simulate's --policy too
    assert error_line(["compare", tiny_trace, "--policies", "fifo,pollux", *CLUSTER]).startswith(
        "--policies: pollux co-adapts elastic jobs")


def test_simulate_names_queue_and_type_order(tiny_trace):
    assert error_line(["simulate", tiny_trace, "-q", *CLUSTER, "--queue", "phase"]).startswith(
        "--queue: unknown queue discipline 'phase'")
    assert error_line(["simulate", tiny_trace, "-q", *CLUSTER, "--type-order", "k80,v100"]).startswith(
        "--type-order: must list each GPU type once")


@pytest.mark.parametrize("flag,value", [("--migration-cost", "300"), ("--hysteresis", "5"), ("--queue", "gavel")])
def test_allocator_options_a_configuration_policy_would_ignore_are_refused(tiny_trace, flag, value):
    """hadar and optimus place every job themselves: these options changed nothing (same JCT, same migrations)."""
    for policy in ("hadar", "optimus"):
        assert error_line(["simulate", tiny_trace, "-q", *CLUSTER, "--policy", policy, flag, value]) == (
            f"{flag}: policy {policy} chooses every job's GPUs itself; the allocator's walk does not apply")


def test_sweep_names_the_cluster_once(tmp_path):
    msg = error_line(["sweep", "gavel", "--policies", "fifo", "--cluster", "v100=x", "--out", str(tmp_path)])
    assert msg == "--cluster 'v100=x': count 'x' for 'v100' is not an integer"
    msg = error_line(["sweep", "gavel", "--policies", "fifo", "--cluster", "16x0", "--out", str(tmp_path)])
    assert msg == "--cluster '16x0': '16x0' needs positive numbers"


def test_sweep_accepts_a_server_shape():
    """`--cluster 16x4` is documented for sweeps (the runs read it as --servers): the check reads it the same way."""
    from optsched.sweep.spec import spec_from_dict, validate

    validate(spec_from_dict({"trace": "gavel", "policies": ["fifo"], "clusters": ["16x4"],
                             "trace_options": {"jobs": 3}}))


@pytest.mark.parametrize("fmt, header, row, column", [
    ("tiresias", "job_id,num_gpu,submit_time,iterations,model_name,duration,interval", "2,0,5,100,m,50,5", "num_gpu"),
    ("pollux", "name,time,application,num_replicas,batch_size", "b,5,cifar10,0,128", "num_replicas"),
    ("philly", "timestamp,duration,num_gpus,gpu_time,cluster", "2017-10-01 00:00:05,50,0,0,c", "num_gpus"),
])
def test_a_trace_cell_is_named_by_its_column(tmp_path, fmt, header, row, column):
    first = {"tiresias": "1,1,0,100,m,50,0", "pollux": "a,0,cifar10,1,128",
             "philly": "2017-10-01 00:00:00,50,1,50,c"}[fmt]
    path = tmp_path / f"t.csv"
    path.write_text(f"{header}\n{first}\n{row}\n")
    msg = error_line(["trace", "describe", str(path), "--format", fmt])
    assert msg == f"{fmt} trace {path}: row 3: {column} must be positive, got 0"


def test_a_gavel_cell_is_named_by_its_field(tmp_path):
    path = tmp_path / "t.trace"
    path.write_text("ResNet-18 (batch size 256)\tcmd\t.\t--n\t1\t100\t1\t0\t-1\t0\n")
    assert error_line(["trace", "describe", str(path)]) == f"gavel trace {path}: row 1: priority weight must be >= 1e-09, got 0"


def test_an_unknown_queue_in_a_sweep_is_refused_before_any_run(tmp_path):
    """It used to be recorded as a failed run for every run of the sweep."""
    res = runner.invoke(app, ["sweep", "gavel", "--policies", "fifo", "--jobs", "5", "--loads", "1", "--quiet",
                              "--set", 'allocator_options={"queue": "phase"}', "--out", str(tmp_path / "sw")])
    assert res.exit_code == 2, res.output
    assert "unknown queue discipline 'phase'" in (res.stderr or res.output)
    assert not (tmp_path / "sw" / "runs").exists()


def test_a_type_or_policy_given_twice_is_refused(tiny_trace):
    """`--cluster v100=4,v100=1` ran on v100=1 (the last count won); `compare --policies fifo,fifo` printed one column."""
    assert error_line(["simulate", tiny_trace, "-q", "--cluster", "v100=4,v100=1"]) == "--cluster: v100 is given twice"
    assert error_line(["compare", tiny_trace, "-q", *CLUSTER, "--policies", "fifo,fifo"]) == (
        "--policies: 'fifo' is listed twice")


@pytest.mark.parametrize("weight,ok", [(5e8, True), (2e9, False), (1e-10, False)])
def test_a_trace_weight_has_the_snapshots_limits(tmp_path, weight, ok):
    """A trace capped weights at 1e6 and took any positive one; a snapshot takes [1e-9, 1e9]."""
    path = tmp_path / "t.trace"
    path.write_text(f"ResNet-18 (batch size 256)\tcmd\t.\t--n\t1\t100\t1\t{weight:g}\t-1\t0\n")
    res = runner.invoke(app, ["trace", "describe", str(path)])
    assert (res.exit_code == 0) == ok, res.output
    if not ok:
        assert "priority weight" in (res.stderr or res.output)


def test_a_path_that_cannot_be_opened_is_named_by_its_argument(tmp_path):
    """It printed "Is a directory: examples" without saying which argument the path was."""
    res = runner.invoke(app, ["solve", str(tmp_path)])
    assert res.exit_code == 2
    assert (res.stderr or res.output).strip() == f"error: snapshot {tmp_path}: is a directory"
    out = tmp_path / "missing" / "x.trace"
    res = runner.invoke(app, ["trace", "generate", str(out)])
    assert res.exit_code == 2
    assert (res.stderr or res.output).strip() == f"error: output {out}: no such file or directory"


def test_placement_policy_without_placement_is_refused():
    """`solve --placement-policy cpsat` without --placement was ignored (exit 0, no placement)."""
    res = CliRunner().invoke(app, ["solve", "--placement-policy", "cpsat"])
    assert res.exit_code == 2 and "--placement-policy: only applies with --placement" in res.output
    res = CliRunner().invoke(app, ["solve", "--placement", "--placement-policy", "first_fit", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["placement"]


def test_python_simulate_names_a_misspelled_option_and_the_known_ones():
    """It raised 'SimConfig.__init__() got an unexpected keyword argument', naming an internal class."""
    import optsched
    from optsched.model import OptschedError

    with pytest.raises(OptschedError, match=r"^simulate: unknown option 'round_lenght' \(did you mean 'round_length'\?\); "
                                            r"options: .*\bround_length\b.*\bseed\b"):
        optsched.simulate(None, "v100=4", round_lenght=5)
    with pytest.raises(OptschedError, match=r"^simulate: unknown option 'polcy' \(did you mean 'policy'\?\); options: trace, "):
        optsched.simulate(None, "v100=4", polcy="fifo")


def test_a_root_option_after_the_command_says_where_it_goes():
    """`optsched solve --log-level info` said 'No such option (Possible options: --solver)'."""
    res = CliRunner().invoke(app, ["solve", "--log-level", "info"])
    assert res.exit_code == 2
    assert "--log-level is an option of optsched itself: put it before the command" in res.output
    res = CliRunner().invoke(app, ["solve", "--no-such-flag"])
    assert res.exit_code == 2 and "No such option: --no-such-flag" in res.output
    res = CliRunner().invoke(app, ["trace", "generate", "--log-level", "info", "x.csv"])  # a nested command
    assert res.exit_code == 2 and "(optsched --log-level ... trace generate ...)" in res.output
