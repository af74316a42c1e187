"""CLI commands for the simulator and traces, registered on the shared app (optsched.cli.common):
``optsched simulate``, ``optsched compare``, ``optsched trace``.

Heavy imports stay inside the commands (``optsched --help`` stays fast).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from optsched.cli.common import app, console, err_console, user_errors, write_out

trace_app = typer.Typer(add_completion=False, help="Traces: describe, convert, generate.")
app.add_typer(trace_app, name="trace")

SUMMARY_ROWS = (
    ("jobs completed", "jobs_completed", "n"),
    ("avg JCT", "avg_jct", "t"),
    ("median JCT", "median_jct", "t"),
    ("p95 JCT", "p95_jct", "t"),
    ("p99 JCT", "p99_jct", "t"),
    ("window avg JCT", "window_avg_jct", "t"),
    ("makespan", "makespan", "t"),
    ("avg responsiveness", "avg_responsiveness", "t"),
    ("FTF ρ median / p95", ("ftf_rho_median", "ftf_rho_p95"), "x"),
    ("GPU-hours", "gpu_hours", "n"),
    ("preemptions", "preemptions", "n"),
    ("migrations", "migrations", "n"),
    ("rounds / recomputations", ("rounds", "recomputations"), "n"),
    ("solver time", "solver_seconds", "s"),
    ("goodput refit time", "fit_seconds", "s"),
    ("wall time", "wall_seconds", "s"),
    ("skipped jobs", "skipped_jobs", "n"),
)


def _fmt(v, unit: str, time_unit: str = "h") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if unit == "t":
        return f"{v / 3600:,.2f} h" if time_unit == "h" else f"{v:,.1f} s"
    if unit == "s":
        return f"{v:.2f} s"
    if unit == "x":
        return f"{v:.2f}"
    return f"{v:,.0f}" if isinstance(v, (int, float)) and float(v).is_integer() else f"{v:,.2f}"


def _percent(v) -> str:
    return f"{v:.0%}" if isinstance(v, (int, float)) and math.isfinite(v) else "–"


def _cell(summary: dict, key, unit: str, time_unit: str) -> str:
    if isinstance(key, tuple):
        return " / ".join(_fmt(summary.get(k), unit, time_unit) for k in key)
    return _fmt(summary.get(key), unit, time_unit)


def _print_summary(summaries: dict[str, dict], title: str) -> None:
    """The title on its own line (a table's title wraps at the table's width: a long
    trace name split mid-list), then the table."""
    console.print(title, style="italic", highlight=False)
    console.print(_summary_table(summaries))


def _summary_table(summaries: dict[str, dict]) -> Table:
    """One column per run; times in seconds when every run is second-scale, else hours."""
    time_unit = "s" if all(s.get("display_time_unit") == "s" for s in summaries.values()) else "h"
    t = Table(show_edge=False, header_style="bold")
    t.add_column("metric")
    for name in summaries:
        t.add_column(name, justify="right")
    for label, key, unit in SUMMARY_ROWS:
        if key == "window_avg_jct" and not any("window_avg_jct" in s for s in summaries.values()):
            continue
        if key == "fit_seconds" and not any(s.get("fit_seconds") for s in summaries.values()):
            continue
        if key == ("ftf_rho_median", "ftf_rho_p95") and all(s.get("ftf_rho_median") is None for s in summaries.values()):
            continue
        t.add_row(label, *[_cell(s, key, unit, time_unit) for s in summaries.values()])
    util = {n: s.get("utilization", {}) for n, s in summaries.items()}
    for gpu in next(iter(util.values()), {}):
        t.add_row(f"utilization {gpu}", *[_percent(u.get(gpu, 0)) for u in util.values()])
    return t


def _check_format_has_trace(trace_path: Optional[Path], fmt: Optional[str]) -> None:
    if fmt is not None and trace_path is None:  # it would silently describe the built-in example
        from optsched.model import OptschedError

        raise OptschedError("--format: names the format of a TRACE file; give one (without a TRACE the built-in "
                            "example runs)")


def _load(trace_path: Optional[Path], fmt: Optional[str], cluster: Optional[str], servers: Optional[str],
          throughputs: Optional[Path], sample: Optional[int], seed: int, prices: Optional[str] = None):
    from optsched.sim import DEFAULT_CLUSTER, DEFAULT_ELASTIC_SERVERS
    from optsched.sim.jobs import elastic_rows, parse_cluster
    from optsched.traces.generate import default_trace
    from optsched.traces.io import read_trace
    from optsched.traces.throughputs import read_throughputs
    from optsched.cli.limits import check_seed
    from optsched.model import OptschedError

    check_seed(seed)
    _check_format_has_trace(trace_path, fmt)
    try:
        table = read_throughputs(throughputs) if throughputs else None
    except OptschedError as e:
        raise OptschedError(f"--throughputs: {e}") from None
    # the built-in example is generated from the table given, so its job types are the table's
    trace = default_trace(table) if trace_path is None else read_trace(trace_path, fmt)
    if sample is not None:
        if sample < 1:
            raise OptschedError(f"--sample: must be >= 1 job, got {sample}")
        if sample > len(trace):
            raise OptschedError(f"--sample: {sample:,} jobs asked, the trace has {len(trace):,}")
        if trace.format == "philly":
            from optsched.traces.philly import sample_philly

            trace = sample_philly(trace, sample, seed)
        else:
            trace = trace.head(sample)
    bare_type = cluster is not None and "=" not in cluster and "," not in cluster  # --cluster v100: the servers' type
    if servers is None and (cluster is None or bare_type):
        if elastic_rows(trace).all():
            servers = DEFAULT_ELASTIC_SERVERS
        elif cluster is None:
            cluster = DEFAULT_CLUSTER
    return trace, parse_cluster(cluster, servers, prices), table


def _run(trace, cl, table, policy: str, quiet: bool, progress_label: str = "", record=None, **config):
    """``record``: a ``cli.dashboard.PlacementLog`` fed each round's placement (the replay's cluster map)."""
    from optsched.sim import simulate_flags as simulate

    show = not quiet and err_console.is_terminal
    rounds = {"k": 0}

    def log_round(info: dict) -> None:
        p = info["decision"].placement
        if record is not None and p is not None:
            record.add(rounds["k"], p.assignments, p.started, p.migrated)
        rounds["k"] += 1

    if not show:
        return simulate(trace, cl, policy=policy, throughputs=table, on_round=log_round if record else None, **config)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed:,.0f}/{task.total:,.0f} jobs"),
        TextColumn("sim {task.fields[sim]}"), TextColumn("solver {task.fields[solver]:.1f}s"), TimeElapsedColumn(),
        console=err_console, transient=True,
    ) as bar:
        task = bar.add_task(progress_label or policy, total=len(trace), sim="0 h", solver=0.0)
        state = {"n": 0}

        def on_round(info: dict) -> None:
            log_round(info)
            state["n"] += 1
            if state["n"] % 5 == 0:
                bar.update(task, completed=info["completed"], total=info["jobs"], sim=f"{info['time'] / 3600:,.1f} h",
                           solver=info["solver_seconds"])

        return simulate(trace, cl, policy=policy, throughputs=table, on_round=on_round, **config)


def _window(window: Optional[str]):
    if not window:
        return None
    from optsched.model import OptschedError

    try:
        lo, hi = (int(x) for x in window.split(":"))
    except ValueError:
        raise OptschedError(f"--window: {window!r} is not START:END (job indices, e.g. 4000:5000)") from None
    return (lo, hi)


def _overhead(value: Optional[str]):
    """--restart-overhead: seconds, or "application" (elastic jobs' own restart times)."""
    if value is None or value == "application":
        return value
    from optsched.model import OptschedError

    try:
        return float(value)
    except ValueError:
        raise OptschedError(f"--restart-overhead: {value!r} is not a number of seconds or 'application'") from None


def _allocator_options(queue: Optional[str], type_order: Optional[str], migration_cost: Optional[float] = None,
                       hysteresis: Optional[float] = None) -> dict:
    out = {}
    if queue is not None:
        out["queue"] = queue
    if migration_cost is not None:
        out["migration_cost"] = migration_cost
    if hysteresis is not None:
        out["hysteresis"] = hysteresis
    if type_order is not None:
        out["type_order"] = type_order if type_order in ("fixed", "shuffle") else [
            t.strip() for t in type_order.split(",") if t.strip()]
    return out


COMMON = dict(
    fmt=typer.Option(None, "--format", help="gavel | tiresias | pollux | philly (detected from the file if omitted)."),
    cluster=typer.Option(None, "--cluster", help="GPUs per type, e.g. v100=36,p100=36,k80=36 (default; Pollux/Sia workloads: --servers 16x4)."),
    servers=typer.Option(None, "--servers", help="Homogeneous cluster as SERVERSxGPUS, e.g. 16x4."),
    prices=typer.Option(None, "--prices", help="$/GPU-hour per type, e.g. v100=2.48,k80=0.45 (min_cost, min_cost_slo)."),
    round_length=typer.Option(None, "--round-length", help="Round length, seconds (default 360; 60 for Pollux/Sia workloads)."),
    seed=typer.Option(0, "--seed", help="Seed (allocator ties, Philly job types and sampling)."),
    throughputs=typer.Option(None, "--throughputs", help="Throughput table JSON (Gavel's format); default: the built-in one."),
    min_interval=typer.Option(0.0, "--min-recompute-interval", help="Seconds between allocation recomputations at least (Gavel: 1920)."),
    every=typer.Option(None, "--recompute-every", help="Recompute the allocation at least every K rounds (default: on arrivals/completions; every round for pollux, sia, tiresias, las, fifo, srtf, gandiva)."),
    overhead=typer.Option(None, "--restart-overhead", help="Seconds lost when a job (re)starts, moves or resizes, or 'application' (default: 0; elastic jobs 30 s, per application on Sia's types)."),
    admission=typer.Option("accept-all", "--admission", help="accept-all | load"),
    load_factor=typer.Option(None, "--load-factor", help="With --admission load: admit while GPU demand <= this × GPUs (default 2)."),
    window=typer.Option(None, "--window", help="Steady-state window START:END of job indices; stop when it completes."),
    sample=typer.Option(None, "--sample", help="Use only N jobs (Philly: a seeded sample; others: the first N)."),
    skip=typer.Option(False, "--skip-unrunnable", help="Drop jobs the cluster can never run (counted) instead of failing."),
    solver=typer.Option("auto", "--solver", help="auto (default: picked per policy) | ipm | clarabel | highs (IPM) | highs-simplex"),
    queue=typer.Option(None, "--queue", help="Allocator walk: phased (default) | per_type | global | gavel (Gavel's code)."),
    type_order=typer.Option(None, "--type-order", help="fixed (cluster order, default) | shuffle (every round) | v100,p100,k80."),
    placement=typer.Option("consolidated", "--placement", help="consolidated | first_fit | cpsat"),
    packing=typer.Option(False, "--packing", help="Space sharing: pack job pairs with the throughput table's pair throughputs."),
    migration_cost=typer.Option(None, "--migration-cost", help="Seconds a restart or move costs, as the allocator sees it: running jobs stay put unless their share needs the move (hysteresis 20 × cost / round length rounds; default 0: Gavel's walk)."),
    hysteresis=typer.Option(None, "--hysteresis", help="The allocator's hysteresis H in rounds, set directly (default: from --migration-cost)."),
    loss_threshold=typer.Option(None, "--loss-threshold", help="End a job when its loss is within this relative distance of its final loss (jobs with a convergence profile: trace columns loss_initial,loss_final,loss_tau,loss_alpha)."),
    policy_option=typer.Option(None, "--policy-option", help="KEY=VALUE for the policy's formulation (repeatable), e.g. ageing=true or thresholds=3600,7200; unknown keys and bad values are refused by name."),
)

DEFAULT_OUT = Path("optsched-out")


def _outputs(out: Optional[Path], plot: bool) -> Optional[Path]:
    """--plot without --out writes into ./optsched-out (documented default)."""
    from optsched.cli.common import output_folder

    return output_folder(DEFAULT_OUT if plot and out is None else out)


def _config(round_length, seed, min_recompute_interval, recompute_every, restart_overhead, admission, load_factor,
            window, skip_unrunnable, solver, queue, type_order, placement, packing, loss_threshold=None,
            migration_cost=None, hysteresis=None) -> dict:
    return dict(loss_threshold=loss_threshold, round_length=round_length, seed=seed, min_recompute_interval=min_recompute_interval,
                recompute_every=recompute_every, restart_overhead=_overhead(restart_overhead), admission=admission,
                load_factor=load_factor, window=_window(window), skip_unrunnable=skip_unrunnable, solver=solver,
                placement=placement, packing=packing,
                allocator_options=_allocator_options(queue, type_order, migration_cost, hysteresis))


def _policy_options(policies: list[str], items) -> dict:
    """--policy-option KEY=VALUE items, checked against every policy of the run."""
    from optsched.model import OptschedError
    from optsched.policy import policy_names
    from optsched.policy_options import parse_policy_options

    for p in policies:
        if p not in policy_names():
            raise OptschedError(f"--policy: unknown policy {p!r} (choose from {', '.join(policy_names())})")
    return parse_policy_options(policies, items)


def _precheck(tr, policies, table, cfg: dict, cluster=None) -> None:
    """Every option and policy checked before the first run starts (numbers against
    the documented limits of optsched.cli.limits, the rounds a run needs included)."""
    from optsched.cli.limits import check_rounds, check_sim_options
    from optsched.model import OptschedError
    from optsched.sim import check_run
    from optsched.sim.jobs import elastic_rows
    from optsched.sim.loop import SimConfig

    check_sim_options(cfg, elastic=bool(elastic_rows(tr).any()))
    try:
        sc = SimConfig(**cfg)
    except TypeError as e:
        raise OptschedError(str(e)) from None
    sc.validate()
    from optsched.pop import check_partitions

    for p in policies:
        check_run(tr, p, sc.solver, sc.packing, table, sc.allocator_options, sc.placement)
        check_partitions(p, sc.partitions, sc.packing, "--partitions")
    if cluster is not None:
        check_rounds(tr, cluster, table, cfg)


@app.command()
@user_errors
def simulate(
    trace: Optional[Path] = typer.Argument(None, help="Trace file (gavel, tiresias, philly, or a Pollux/Sia workload CSV); the built-in example if omitted."),
    policy: str = typer.Option("max_min_fairness", "--policy", "-p", help="Scheduling policy."),
    fmt: Optional[str] = COMMON["fmt"],
    cluster: Optional[str] = COMMON["cluster"],
    servers: Optional[str] = COMMON["servers"],
    prices: Optional[str] = COMMON["prices"],
    round_length: Optional[float] = COMMON["round_length"],
    seed: int = COMMON["seed"],
    throughputs: Optional[Path] = COMMON["throughputs"],
    min_recompute_interval: float = COMMON["min_interval"],
    recompute_every: Optional[int] = COMMON["every"],
    restart_overhead: Optional[str] = COMMON["overhead"],
    admission: str = COMMON["admission"],
    load_factor: Optional[float] = COMMON["load_factor"],
    window: Optional[str] = COMMON["window"],
    sample: Optional[int] = COMMON["sample"],
    skip_unrunnable: bool = COMMON["skip"],
    solver: str = COMMON["solver"],
    queue: Optional[str] = COMMON["queue"],
    type_order: Optional[str] = COMMON["type_order"],
    placement: str = COMMON["placement"],
    packing: bool = COMMON["packing"],
    partitions: int = typer.Option(1, "--partitions", help="POP: each recomputation solves K job groups (each with 1/K of every type) and merges them (fractional policies, no --packing)."),
    migration_cost: Optional[float] = COMMON["migration_cost"],
    hysteresis: Optional[float] = COMMON["hysteresis"],
    loss_threshold: Optional[float] = COMMON["loss_threshold"],
    policy_option: Optional[list[str]] = COMMON["policy_option"],
    out: Optional[Path] = typer.Option(None, "--out", help="Write jobs/rounds CSV + Parquet and summary.json here."),
    plot: bool = typer.Option(False, "--plot", help="JCT CDF and utilization PNGs (into --out, default ./optsched-out)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON (seconds throughout)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
):
    """Simulate a policy on a trace: progress bar, summary table, optional CSV/Parquet/PNG output."""
    tr, cl, table = _load(trace, fmt, cluster, servers, throughputs, sample, seed, prices)
    cfg = _config(round_length, seed, min_recompute_interval, recompute_every, restart_overhead, admission,
                  load_factor, window, skip_unrunnable, solver, queue, type_order, placement, packing, loss_threshold,
                  migration_cost, hysteresis)
    cfg["policy_options"] = _policy_options([policy], policy_option)
    cfg["partitions"] = partitions
    _precheck(tr, [policy], table, cfg, cl)
    out = _outputs(out, plot)
    from optsched.cli.dashboard import PlacementLog

    placements = PlacementLog() if out else None
    r = _run(tr, cl, table, policy, quiet or as_json, record=placements, **cfg)
    files = []
    if out:
        files = [p.name for p in r.write(out)]
        files += placements.write(out, cl, (cfg.get("allocator_options") or {}).get("gpus_per_server"))
        if plot:
            from optsched.sim.plots import jct_cdf, utilization

            files += [jct_cdf({policy: r}, out / "jct_cdf.png").name, utilization(r, out / "utilization.png").name]
    if as_json:
        write_out(json.dumps(r.summary, indent=2, default=_json_default))
        return
    _print_summary({policy: r.summary}, f"{len(tr)} jobs from {_source(tr)} on {_cluster_text(cl)}")
    if out:
        console.print(f"wrote {out}/: {', '.join(files)}")


def _json_default(x):
    from optsched.sim import _plain

    return _plain(x)


def _source(tr) -> str:
    """The trace's file name, or its description as is: a generated trace's source is
    text ("gavel-style: 120 jobs at 8/h, ...") that may contain a slash."""
    if not tr.source:
        return tr.format
    path = Path(tr.source)
    return escape(path.name if path.is_file() else tr.source)


def _cluster_text(cl) -> str:
    return escape(", ".join(f"{n} {t}" for t, n in cl.gpus.items()))


@app.command()
@user_errors(aliases={"--policy": "--policies"})  # the simulator's checks name simulate's flag
def compare(
    trace: Optional[Path] = typer.Argument(None, help="Trace file (any kind simulate takes); the built-in example if omitted."),
    policies: str = typer.Option("max_min_fairness,max_min_fairness_agnostic", "--policies", help="Comma-separated policies."),
    fmt: Optional[str] = COMMON["fmt"],
    cluster: Optional[str] = COMMON["cluster"],
    servers: Optional[str] = COMMON["servers"],
    prices: Optional[str] = COMMON["prices"],
    round_length: Optional[float] = COMMON["round_length"],
    seed: int = COMMON["seed"],
    throughputs: Optional[Path] = COMMON["throughputs"],
    min_recompute_interval: float = COMMON["min_interval"],
    recompute_every: Optional[int] = COMMON["every"],
    restart_overhead: Optional[str] = COMMON["overhead"],
    admission: str = COMMON["admission"],
    load_factor: Optional[float] = COMMON["load_factor"],
    window: Optional[str] = COMMON["window"],
    sample: Optional[int] = COMMON["sample"],
    skip_unrunnable: bool = COMMON["skip"],
    solver: str = COMMON["solver"],
    queue: Optional[str] = COMMON["queue"],
    type_order: Optional[str] = COMMON["type_order"],
    placement: str = COMMON["placement"],
    packing: bool = typer.Option(False, "--packing", help="Also run each policy with space sharing: a column '<policy>+packing' next to it."),
    migration_cost: Optional[float] = COMMON["migration_cost"],
    hysteresis: Optional[float] = COMMON["hysteresis"],
    loss_threshold: Optional[float] = COMMON["loss_threshold"],
    policy_option: Optional[list[str]] = COMMON["policy_option"],
    out: Optional[Path] = typer.Option(None, "--out", help="Write per-policy tables, summary.json and jct_cdf.png here."),
    plot: bool = typer.Option(False, "--plot", help="jct_cdf.png (into --out, default ./optsched-out)."),
    as_json: bool = typer.Option(False, "--json", help="Print {policy: summary} as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
):
    """Run several policies on the same trace; one table (and one CDF plot with --out or --plot)."""
    from optsched.model import OptschedError

    tr, cl, table = _load(trace, fmt, cluster, servers, throughputs, sample, seed, prices)
    names = [x.strip() for x in policies.split(",") if x.strip()]
    if not names:
        raise OptschedError("--policies: give at least one policy")
    dup = [p for p in names if names.count(p) > 1]
    if dup:  # (one column for both, as sweep refuses it)
        raise OptschedError(f"--policies: {dup[0]!r} is listed twice")
    cfg = _config(round_length, seed, min_recompute_interval, recompute_every, restart_overhead, admission,
                  load_factor, window, skip_unrunnable, solver, queue, type_order, placement, False, loss_threshold,
                  migration_cost, hysteresis)
    cfg["policy_options"] = _policy_options(names, policy_option)
    _precheck(tr, names, table, cfg, cl)
    if packing:
        _precheck(tr, names, table, {**cfg, "packing": True})
    out = _outputs(out, plot)
    results = {}
    for p in names:
        results[p] = _run(tr, cl, table, p, quiet or as_json, **cfg)
        if packing:
            results[f"{p}+packing"] = _run(tr, cl, table, p, quiet or as_json, progress_label=f"{p}+packing",
                                           **{**cfg, "packing": True})
    if out:
        from optsched.sim.plots import jct_cdf

        for p, r in results.items():
            r.write(out, name=p)
        jct_cdf(results, out / "jct_cdf.png", window=bool(window))
    if as_json:
        write_out(json.dumps({p: r.summary for p, r in results.items()}, indent=2, default=_json_default))
        return
    _print_summary({p: r.summary for p, r in results.items()}, f"{len(tr)} jobs from {_source(tr)} on {_cluster_text(cl)}")
    if out:
        console.print(f"wrote {out}/: <policy>_jobs|rounds.(csv|parquet), <policy>_summary.json, jct_cdf.png")


@trace_app.command("describe")
@user_errors
def trace_describe(
    trace: Optional[Path] = typer.Argument(None, help="Trace file; the built-in example if omitted."),
    fmt: Optional[str] = COMMON["fmt"],
    as_json: bool = typer.Option(False, "--json", help="Print the description as JSON (seconds, raw keys)."),
):
    """Counts, arrival span, GPU demands and job types of a trace."""
    from optsched.traces.generate import default_trace
    from optsched.traces.io import read_trace

    _check_format_has_trace(trace, fmt)
    d = (default_trace() if trace is None else read_trace(trace, fmt)).describe()
    if as_json:
        write_out(json.dumps(d, indent=2))
        return
    from optsched.cli.text import describe_table

    console.print(describe_table(d))


# Formats that give every job a duration (the writers refuse a job without one).
DURATION_FORMATS = ("tiresias", "philly")


def _check_to(to: str) -> None:
    """--to before any work (the writer would name the reading side's --format)."""
    from optsched.model import OptschedError
    from optsched.traces.io import FORMATS

    if to not in FORMATS:
        raise OptschedError(f"--to: unknown trace format {to!r} (choose from {', '.join(FORMATS)})")


@trace_app.command("convert")
@user_errors
def trace_convert(
    trace: Path = typer.Argument(..., help="Input trace."),
    output: Path = typer.Argument(..., help="Output file."),
    to: str = typer.Option(..., "--to", help="gavel | tiresias | pollux | philly"),
    fmt: Optional[str] = COMMON["fmt"],
    throughputs: Optional[Path] = COMMON["throughputs"],
    seed: int = COMMON["seed"],
):
    """Convert between trace formats (Philly → Gavel assigns job types from the seed; to
    Tiresias or Philly, a job's duration is its total steps at its speed on v100)."""
    from optsched.cli.limits import check_seed

    check_seed(seed)
    _check_to(to)
    from optsched.traces.io import read_trace, write_trace
    from optsched.traces.throughputs import default_throughputs, read_throughputs, with_durations

    tr = read_trace(trace, fmt)
    table = read_throughputs(throughputs) if throughputs else default_throughputs()
    if tr.format == "philly" and to == "gavel":
        from optsched.traces.philly import assign_models

        tr = assign_models(tr, table, seed)
    if to in DURATION_FORMATS:
        tr = with_durations(tr, table)  # as `trace generate` relates them: steps = duration × v100 speed
    write_trace(tr, output, to, table if throughputs else None)
    console.print(f"wrote {len(tr)} jobs to {escape(str(output))} ({to})", highlight=False)


@trace_app.command("generate")
@user_errors
def trace_generate(
    output: Path = typer.Argument(..., help="Output trace file."),
    jobs: int = typer.Option(500, "--jobs", help="Number of jobs."),
    rate: float = typer.Option(2.0, "--rate", help="Arrivals per hour (Poisson)."),
    multi_gpu: bool = typer.Option(False, "--multi-gpu", help="Scale factors 1/2/4/8 with p = .70/.10/.15/.05."),
    to: str = typer.Option("gavel", "--to", help="Output format: gavel | tiresias | philly"),
    throughputs: Optional[Path] = COMMON["throughputs"],
    seed: int = typer.Option(0, "--seed", help="Seed (arrival times, job types, durations, scale factors)."),
):
    """Gavel-style continuous arrivals with job types from a throughput table."""
    from optsched.cli.limits import check_generate

    check_generate(jobs, rate, seed)
    _check_to(to)
    from optsched.traces.generate import generate_gavel
    from optsched.traces.io import write_trace
    from optsched.traces.throughputs import default_throughputs, read_throughputs

    table = read_throughputs(throughputs) if throughputs else default_throughputs()
    tr = generate_gavel(table, jobs, rate, seed=seed, multi_gpu=multi_gpu)
    write_trace(tr, output, to, table if throughputs else None)
    console.print(f"wrote {len(tr)} jobs to {escape(str(output))} ({to})", highlight=False)
