"""CLI commands for the simulator and traces, registered on the shared app (optsched.cli.common):
``optsched simulate``, ``optsched compare``, ``optsched trace``.

Heavy imports stay inside the commands (``optsched --help`` stays fast).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from optsched.cli.common import app, console, err_console, user_errors

trace_app = typer.Typer(add_completion=False, help="Traces: describe, convert, generate.")
app.add_typer(trace_app, name="trace")

SUMMARY_ROWS = (
    ("jobs completed", "jobs_completed", "n"),
    ("avg JCT", "avg_jct", "h"),
    ("median JCT", "median_jct", "h"),
    ("p95 JCT", "p95_jct", "h"),
    ("p99 JCT", "p99_jct", "h"),
    ("window avg JCT", "window_avg_jct", "h"),
    ("makespan", "makespan", "h"),
    ("avg responsiveness", "avg_responsiveness", "h"),
    ("FTF ρ median / p95", ("ftf_rho_median", "ftf_rho_p95"), "x"),
    ("GPU-hours", "gpu_hours", "n"),
    ("preemptions", "preemptions", "n"),
    ("migrations", "migrations", "n"),
    ("rounds / recomputations", ("rounds", "recomputations"), "n"),
    ("solver time", "solver_seconds", "s"),
    ("wall time", "wall_seconds", "s"),
    ("skipped jobs", "skipped_jobs", "n"),
)


def _fmt(v, unit: str) -> str:
    if v is None:
        return "–"
    if unit == "h":
        return f"{v / 3600:.2f} h"
    if unit == "s":
        return f"{v:.2f} s"
    if unit == "x":
        return f"{v:.2f}"
    return f"{v:,.0f}" if isinstance(v, (int, float)) and float(v).is_integer() else f"{v:,.2f}"


def _cell(summary: dict, key, unit: str) -> str:
    if isinstance(key, tuple):
        return " / ".join(_fmt(summary.get(k), unit) for k in key)
    return _fmt(summary.get(key), unit)


def _summary_table(summaries: dict[str, dict], title: str) -> Table:
    t = Table(title=title, show_edge=False, header_style="bold")
    t.add_column("metric")
    for name in summaries:
        t.add_column(name, justify="right")
    for label, key, unit in SUMMARY_ROWS:
        if key == "window_avg_jct" and not any("window_avg_jct" in s for s in summaries.values()):
            continue
        t.add_row(label, *[_cell(s, key, unit) for s in summaries.values()])
    util = {n: s.get("utilization", {}) for n, s in summaries.items()}
    for gpu in next(iter(util.values()), {}):
        t.add_row(f"utilization {gpu}", *[f"{u.get(gpu, 0):.0%}" for u in util.values()])
    return t


def _load(trace_path: Optional[Path], fmt: Optional[str], cluster: Optional[str], servers: Optional[str],
          throughputs: Optional[Path], sample: Optional[int], seed: int):
    from optsched.sim.jobs import parse_cluster
    from optsched.traces.generate import default_trace
    from optsched.traces.io import read_trace
    from optsched.traces.throughputs import read_throughputs

    trace = default_trace() if trace_path is None else read_trace(trace_path, fmt)
    if sample:
        if trace.format == "philly":
            from optsched.traces.philly import sample_philly

            trace = sample_philly(trace, sample, seed)
        else:
            trace = trace.head(sample)
    if cluster is None and servers is None:
        cluster = "v100=36,p100=36,k80=36"
    table = read_throughputs(throughputs) if throughputs else None
    return trace, parse_cluster(cluster, servers), table


def _run(trace, cl, table, policy: str, quiet: bool, progress_label: str = "", **config):
    from optsched.sim import simulate

    show = not quiet and sys.stderr.isatty()
    if not show:
        return simulate(trace, cl, policy=policy, throughputs=table, **config)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed:,.0f}/{task.total:,.0f} jobs"),
        TextColumn("sim {task.fields[sim]}"), TextColumn("solver {task.fields[solver]:.1f}s"), TimeElapsedColumn(),
        console=err_console, transient=True,
    ) as bar:
        task = bar.add_task(progress_label or policy, total=len(trace), sim="0 h", solver=0.0)
        state = {"n": 0}

        def on_round(info: dict) -> None:
            state["n"] += 1
            if state["n"] % 25 == 0:
                bar.update(task, completed=info["completed"], total=info["jobs"], sim=f"{info['time'] / 3600:,.0f} h",
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


def _is_workload(trace: Path, fmt: Optional[str]) -> bool:
    """Pollux/Sia workload CSVs carry no job lengths: jobs run a fixed number of
    epochs under their application's goodput model (the elastic simulator)."""
    from optsched.traces.io import detect_format

    return (fmt or detect_format(trace)) == "pollux"


def _simulate_elastic(trace: Path, policy: str, cluster: Optional[str], servers: Optional[str],
                      out: Optional[Path], as_json: bool) -> None:
    from optsched.goodput.profiles import SIA_GPU_TYPES, pollux_applications, sia_applications
    from optsched.model import OptschedError
    from optsched.sim.elastic import ElasticSimulator, read_workload, summarize
    from optsched.sim.jobs import parse_cluster

    if cluster is None and servers is None:
        servers = "16x4"  # the Pollux artifact's cluster
    cl = parse_cluster(cluster, servers)
    shape: dict[str, tuple[int, int]] = {}
    for t, count in cl.gpus.items():
        per = max((s.gpus for s in cl.servers or [] if s.gpu_type == t), default=SIA_GPU_TYPES.get(t, 4))
        shape[t] = (count // per, per)
    if set(shape) <= set(SIA_GPU_TYPES):
        apps = sia_applications(gpu_types=tuple(shape))
    elif len(shape) == 1:
        apps = pollux_applications(gpu_type=next(iter(shape)))
    else:
        raise OptschedError(f"--cluster: elastic workloads run on one GPU type or on Sia's types ({', '.join(SIA_GPU_TYPES)})")
    sim = ElasticSimulator(read_workload(trace), apps, shape, policy,
                           restart_seconds="application" if len(shape) > 1 else 30.0)
    if not as_json:
        err_console.print(f"elastic simulation of {trace.name} with {policy} on {shape} (servers, GPUs/server) ...")
    jobs = sim.run()
    summary = summarize(jobs)
    summary["solver_seconds"] = float(sum(sim.solve_seconds))
    summary["fit_seconds"] = float(sum(sim.fit_seconds))
    if out:
        out.mkdir(parents=True, exist_ok=True)
        jobs.to_csv(out / "jobs.csv", index=False)
        jobs.to_parquet(out / "jobs.parquet", index=False)
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    t = Table(title=f"{len(jobs)} elastic jobs from {trace.name}", show_edge=False, header_style="bold")
    t.add_column("metric")
    t.add_column(policy, justify="right")
    for key in ("jobs", "finished"):
        t.add_row(key, f"{summary[key]}")
    for key in ("avg_jct", "p99_jct", "makespan"):
        t.add_row(key.replace("_", " "), f"{summary[key]:,.0f} s ({summary[key] / 3600:.2f} h)")
    t.add_row("solver / refit time", f"{summary['solver_seconds']:.1f} s / {summary['fit_seconds']:.1f} s")
    console.print(t)


COMMON = dict(
    fmt=typer.Option(None, "--format", help="gavel | tiresias | pollux | philly (detected from the file if omitted)."),
    cluster=typer.Option(None, "--cluster", help="GPUs per type, e.g. v100=36,p100=36,k80=36 (the default)."),
    servers=typer.Option(None, "--servers", help="Homogeneous cluster as SERVERSxGPUS, e.g. 16x4."),
    round_length=typer.Option(360.0, "--round-length", help="Round length, seconds."),
    seed=typer.Option(0, "--seed", help="Seed (allocator ties, Philly job types and sampling)."),
    throughputs=typer.Option(None, "--throughputs", help="Throughput table JSON (Gavel's format); default: the built-in one."),
    min_interval=typer.Option(0.0, "--min-recompute-interval", help="Seconds between allocation recomputations at least (Gavel: 1920)."),
    every=typer.Option(None, "--recompute-every", help="Recompute the allocation at least every K rounds."),
    overhead=typer.Option(0.0, "--restart-overhead", help="Seconds lost when a job (re)starts or migrates."),
    admission=typer.Option("accept-all", "--admission", help="accept-all | load"),
    load_factor=typer.Option(2.0, "--load-factor", help="With --admission load: admit while GPU demand <= this × GPUs."),
    window=typer.Option(None, "--window", help="Steady-state window START:END of job indices; stop when it completes."),
    sample=typer.Option(None, "--sample", help="Use only N jobs (Philly: a seeded sample; others: the first N)."),
    skip=typer.Option(False, "--skip-unrunnable", help="Drop jobs the cluster can never run (counted) instead of failing."),
    solver=typer.Option("auto", "--solver", help="auto | highs-direct | clarabel | highs | ..."),
    queue=typer.Option("phased", "--queue", help="Allocator walk: phased (default) | per_type | global | gavel (Gavel's code)."),
    type_order=typer.Option("fixed", "--type-order", help="fixed (cluster order) | shuffle (every round) | v100,p100,k80."),
)


def _allocator_options(queue: str, type_order: str) -> dict:
    order = type_order if type_order in ("fixed", "shuffle") else [t.strip() for t in type_order.split(",") if t.strip()]
    return {"queue": queue, "type_order": order}


@app.command()
@user_errors
def simulate(
    trace: Optional[Path] = typer.Argument(None, help="Trace file; the built-in example if omitted."),
    policy: str = typer.Option("max_min_fairness", "--policy", "-p", help="Scheduling policy."),
    fmt: Optional[str] = COMMON["fmt"],
    cluster: Optional[str] = COMMON["cluster"],
    servers: Optional[str] = COMMON["servers"],
    round_length: float = COMMON["round_length"],
    seed: int = COMMON["seed"],
    throughputs: Optional[Path] = COMMON["throughputs"],
    min_recompute_interval: float = COMMON["min_interval"],
    recompute_every: Optional[int] = COMMON["every"],
    restart_overhead: float = COMMON["overhead"],
    admission: str = COMMON["admission"],
    load_factor: float = COMMON["load_factor"],
    window: Optional[str] = COMMON["window"],
    sample: Optional[int] = COMMON["sample"],
    skip_unrunnable: bool = COMMON["skip"],
    solver: str = COMMON["solver"],
    queue: str = COMMON["queue"],
    type_order: str = COMMON["type_order"],
    placement: str = typer.Option("consolidated", "--placement", help="consolidated | first_fit | cpsat"),
    out: Optional[Path] = typer.Option(None, "--out", help="Write jobs/rounds CSV + Parquet and summary.json here."),
    plot: bool = typer.Option(False, "--plot", help="With --out: JCT CDF and utilization PNGs."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON (seconds throughout)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
):
    """Simulate a policy on a trace: progress bar, summary table, optional CSV/Parquet/PNG output."""
    if trace is not None and _is_workload(trace, fmt):
        return _simulate_elastic(trace, policy, cluster, servers, out, as_json)
    tr, cl, table = _load(trace, fmt, cluster, servers, throughputs, sample, seed)
    r = _run(tr, cl, table, policy, quiet or as_json, round_length=round_length, seed=seed,
             min_recompute_interval=min_recompute_interval, recompute_every=recompute_every,
             restart_overhead=restart_overhead, admission=admission, load_factor=load_factor,
             window=_window(window), skip_unrunnable=skip_unrunnable, solver=solver, placement=placement,
             allocator_options=_allocator_options(queue, type_order))
    if out:
        r.write(out)
        if plot:
            from optsched.sim.plots import jct_cdf, utilization

            jct_cdf({policy: r}, out / "jct_cdf.png")
            utilization(r, out / "utilization.png")
    if as_json:
        typer.echo(json.dumps(r.summary, indent=2))
        return
    console.print(_summary_table({policy: r.summary}, f"{len(tr)} jobs from {tr.source} on {dict(cl.gpus)}"))
    if out:
        console.print(f"wrote {out}/jobs.(csv|parquet), rounds.(csv|parquet), summary.json" + (", jct_cdf.png, utilization.png" if plot else ""))


@app.command()
@user_errors
def compare(
    trace: Optional[Path] = typer.Argument(None, help="Trace file; the built-in example if omitted."),
    policies: str = typer.Option("max_min_fairness,max_min_fairness_agnostic", "--policies", help="Comma-separated policies."),
    fmt: Optional[str] = COMMON["fmt"],
    cluster: Optional[str] = COMMON["cluster"],
    servers: Optional[str] = COMMON["servers"],
    round_length: float = COMMON["round_length"],
    seed: int = COMMON["seed"],
    throughputs: Optional[Path] = COMMON["throughputs"],
    min_recompute_interval: float = COMMON["min_interval"],
    window: Optional[str] = COMMON["window"],
    sample: Optional[int] = COMMON["sample"],
    skip_unrunnable: bool = COMMON["skip"],
    queue: str = COMMON["queue"],
    type_order: str = COMMON["type_order"],
    out: Optional[Path] = typer.Option(None, "--out", help="Write per-policy tables and jct_cdf.png here."),
    as_json: bool = typer.Option(False, "--json", help="Print {policy: summary} as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
):
    """Run several policies on the same trace; one table (and one CDF plot with --out)."""
    tr, cl, table = _load(trace, fmt, cluster, servers, throughputs, sample, seed)
    results = {}
    for p in [x.strip() for x in policies.split(",") if x.strip()]:
        results[p] = _run(tr, cl, table, p, quiet or as_json, round_length=round_length, seed=seed,
                          min_recompute_interval=min_recompute_interval, window=_window(window),
                          skip_unrunnable=skip_unrunnable, allocator_options=_allocator_options(queue, type_order))
    if out:
        from optsched.sim.plots import jct_cdf

        for p, r in results.items():
            r.write(out, name=p)
        jct_cdf(results, out / "jct_cdf.png", window=bool(window))
    if as_json:
        typer.echo(json.dumps({p: r.summary for p, r in results.items()}, indent=2))
        return
    console.print(_summary_table({p: r.summary for p, r in results.items()}, f"{len(tr)} jobs from {tr.source} on {dict(cl.gpus)}"))


@trace_app.command("describe")
@user_errors
def trace_describe(
    trace: Optional[Path] = typer.Argument(None, help="Trace file; the built-in example if omitted."),
    fmt: Optional[str] = COMMON["fmt"],
    as_json: bool = typer.Option(False, "--json"),
):
    """Counts, arrival span, GPU demands and job types of a trace."""
    from optsched.traces.generate import default_trace
    from optsched.traces.io import read_trace

    d = (default_trace() if trace is None else read_trace(trace, fmt)).describe()
    if as_json:
        typer.echo(json.dumps(d, indent=2))
        return
    t = Table(show_header=False, show_edge=False)
    for k, v in d.items():
        t.add_row(k, str(v))
    console.print(t)


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
    """Convert between trace formats (Philly → Gavel assigns job types from the seed)."""
    from optsched.traces.io import read_trace, write_trace
    from optsched.traces.throughputs import default_throughputs, read_throughputs

    tr = read_trace(trace, fmt)
    if tr.format == "philly" and to == "gavel":
        from optsched.traces.philly import assign_models

        tr = assign_models(tr, read_throughputs(throughputs) if throughputs else default_throughputs(), seed)
    write_trace(tr, output, to)
    console.print(f"wrote {len(tr)} jobs to {output} ({to})")


@trace_app.command("generate")
@user_errors
def trace_generate(
    output: Path = typer.Argument(..., help="Output trace file."),
    jobs: int = typer.Option(500, "--jobs", help="Number of jobs."),
    rate: float = typer.Option(2.0, "--rate", help="Arrivals per hour (Poisson)."),
    multi_gpu: bool = typer.Option(False, "--multi-gpu", help="Scale factors 1/2/4/8 with p = .70/.10/.15/.05."),
    to: str = typer.Option("gavel", "--to", help="Output format: gavel | tiresias | philly"),
    throughputs: Optional[Path] = COMMON["throughputs"],
    seed: int = COMMON["seed"],
):
    """Gavel-style continuous arrivals with job types from a throughput table."""
    from optsched.traces.generate import generate_gavel
    from optsched.traces.io import write_trace
    from optsched.traces.throughputs import default_throughputs, read_throughputs

    table = read_throughputs(throughputs) if throughputs else default_throughputs()
    tr = generate_gavel(table, jobs, rate, seed=seed, multi_gpu=multi_gpu)
    write_trace(tr, output, to)
    console.print(f"wrote {len(tr)} jobs to {output} ({to})")
