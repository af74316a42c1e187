"""`optsched sweep`: the cross product of simulations, local or on Ray, resumable."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from optsched.cli.common import app, console, err_console, user_errors


def _split(value: Optional[str]) -> Optional[list[str]]:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


def _flag_numbers(value: Optional[str], flag: str, whole: bool) -> Optional[list]:
    """``--loads 0.5,1`` / ``--seeds 0,1`` as numbers, one line naming the flag for a value that is not one."""
    from optsched.model import OptschedError

    items = _split(value)
    if items is None:
        return None
    out = []
    for v in items:
        try:
            x = float(v)
        except ValueError:
            raise OptschedError(f"{flag}: {v!r} is not a {'whole ' if whole else ''}number") from None
        if whole and not (x.is_integer() and v.strip().lstrip("+-").isdigit()):
            raise OptschedError(f"{flag}: {v!r} is not a whole number")
        out.append(int(v) if whole else x)
    return out


def _parse_options(items: list[str]) -> dict:
    """``--set round_length=60 --set admission=load``: values parsed as JSON when they can be."""
    from optsched.model import DuplicateKeyError, OptschedError, loads_unique

    out = {}
    for item in items:
        if "=" not in item:
            raise OptschedError(f"--set: expected KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = loads_unique(v)
        except DuplicateKeyError as e:
            raise OptschedError(f"--set {k.strip()}: {e}") from None
        except ValueError:
            out[k.strip()] = v
    return out


def _num(x) -> str:
    """A table cell: a metric no run had (no job completed) is n/a, not nan."""
    return f"{x:,.2f}" if isinstance(x, (int, float)) and math.isfinite(x) else "n/a"


@app.command()
@user_errors(aliases={"--policy": "--policies"})  # the simulator's checks name simulate's flag
def sweep(
    trace: Optional[str] = typer.Argument(None, help="Trace file, or a generator: gavel | bursty (load = jobs/h)."),
    file: Optional[Path] = typer.Option(None, "--file", "-f", help="Sweep file (TOML, YAML, or a previous DIR/sweep.json); flags override it."),
    policies: Optional[str] = typer.Option(None, "--policies", help="Comma-separated policies (auto for policy synthesis)."),
    loads: Optional[str] = typer.Option(None, "--loads", help="Comma-separated loads: jobs/h for generators, arrival-rate multipliers for files (default 1)."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Comma-separated seeds (default 0)."),
    cluster: Optional[list[str]] = typer.Option(None, "--cluster", help="v100=8,p100=8 or 16x4; repeat for several cluster shapes."),
    prices: Optional[str] = typer.Option(None, "--prices", help="$/GPU-hour by type, v100=2.48,k80=0.45 (min_cost, min_cost_slo), for every cluster that has the type."),
    jobs: Optional[int] = typer.Option(None, "--jobs", help="Jobs: generated count, or the first N jobs of a file."),
    set_: Optional[list[str]] = typer.Option(None, "--set", help="simulate option KEY=VALUE (round_length=60, admission=load, ...); repeatable."),
    auto_every: Optional[int] = typer.Option(None, "--auto-every", help="auto: decide every K rounds (default 10)."),
    auto_horizon: Optional[float] = typer.Option(None, "--auto-horizon", help="auto: look-ahead horizon, seconds (default 2 × K rounds)."),
    auto_metric: Optional[str] = typer.Option(None, "--auto-metric", help="auto: jct | responsiveness | mix."),
    executor: Optional[str] = typer.Option(None, "--executor", help="local (process pool, default) | ray | serial."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Parallel runs (default: the machine's cores)."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray: join this cluster (else a local ray.init)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output folder (resumable: finished runs are kept). Default: sweep-out, or the folder of --file DIR/sweep.json (which then resumes)."),
    keep_failed: bool = typer.Option(False, "--keep-failed", help="Do not retry runs that failed before."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Run policies × loads × seeds × clusters; one tidy table in DIR/results.{parquet,csv}."""
    from optsched.model import OptschedError
    from optsched.sweep import read_spec_file, run_sweep, spec_from_dict

    d = dict(read_spec_file(file)) if file else {}
    from optsched.sweep.spec import TABLE_KEYS, table_of

    for key in TABLE_KEYS:  # the file's tables before flags merge into them
        if key in d:
            d[key] = table_of(d, key, str(file))
    if trace is not None:
        d["trace"] = trace
    for key, value in (("policies", _split(policies)), ("loads", _flag_numbers(loads, "--loads", False)),
                       ("seeds", _flag_numbers(seeds, "--seeds", True)),
                       ("executor", executor), ("workers", workers), ("address", address), ("prices", prices)):
        if value is not None:
            d[key] = value
    if cluster:
        d.pop("cluster", None)
        d["clusters"] = list(cluster)
    if jobs is not None:
        d["trace_options"] = {**(d.get("trace_options") or {}), "jobs": jobs}
    if set_:
        d["options"] = {**(d.get("options") or {}), **_parse_options(set_)}
    auto = dict(d.get("auto") or {})
    for key, value in (("every", auto_every), ("horizon", auto_horizon), ("metric", auto_metric)):
        if value is not None:
            auto[key] = value
    if auto:
        d["auto"] = auto
    if not d.get("trace"):
        raise OptschedError("sweep: give a TRACE (a file, or gavel | bursty) or --file")
    if not d.get("policies"):
        raise OptschedError("--policies: give at least one policy")
    from optsched.cli.limits import check_sweep
    from optsched.sweep.spec import validate

    spec = spec_from_dict(d)  # types first (a file's "2" or true is named as such), then the ranges
    check_sweep(d)
    validate(spec)  # every run's configuration and the rounds bound, once, before the progress bar
    from optsched.cli.common import output_folder

    if out is None:  # a previous sweep's own sweep.json resumes in its folder
        out = file.parent if file is not None and file.name == "sweep.json" else Path("sweep-out")
    output_folder(out)
    show = not quiet and err_console.is_terminal

    try:
        res = _run(spec, out, show, keep_failed)
    except KeyboardInterrupt:
        kept = sum(1 for _ in Path(out).glob("runs/*/done")) if out is not None else 0
        err_console.print(f"interrupted: {kept} finished run(s) kept in {out}; the same command resumes from them",
                          highlight=False)
        raise typer.Exit(130)
    t = res.table
    ok = int((t["status"] == "ok").sum()) if len(t) else 0
    console.print(f"{res.total} runs: {res.executed} executed, {res.reused} already done, "
                  f"{ok} ok, {res.total - ok} failed  wall {res.wall_seconds:.1f} s  executor {spec.executor}",
                  highlight=False)
    if len(t) and res.total - ok:
        for _, r in t[t["status"] != "ok"].iterrows():
            err_console.print(f"failed {r['run_id']} ({r['policy']}, load {r['load']:g}, seed {r['seed']}): {r['error']}",
                              highlight=False, soft_wrap=True)
    if len(t) and ok:
        cols = [c for c in ("avg_jct", "avg_responsiveness", "makespan") if c in t]
        agg = t[t["status"] == "ok"].groupby(["cluster", "policy", "load"])[cols].mean().reset_index()
        from rich.table import Table

        from optsched.report.figures import unit_of

        unit, div = unit_of(t[t["status"] == "ok"], None)
        agg[cols] = agg[cols] / div
        tab = Table(title=f"mean over seeds ({'seconds' if unit == 's' else 'hours'})")
        for c in ["cluster", "policy", "load", *cols]:
            tab.add_column(c, justify="right" if c not in ("cluster", "policy") else "left")
        for _, r in agg.iterrows():
            tab.add_row(escape(str(r["cluster"])), escape(str(r["policy"])), f"{r['load']:g}", *(_num(r[c]) for c in cols))
        console.print(tab)
    files = ["results.parquet", "results.csv", "jobs.parquet", "rounds.parquet",
             *(["auto_choices.csv"] if (Path(out) / "auto_choices.csv").exists() else []), "sweep.json", "runs/"]
    console.print(f"wrote {out}/ ({', '.join(files)})", highlight=False)
    if len(t) and res.total - ok:
        raise typer.Exit(1)  # everything is written; a script still learns that runs failed


def _run(spec, out, show: bool, keep_failed: bool):
    from optsched.sweep import run_sweep

    if show:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        from optsched.sweep.executors import concurrency

        # "running N": until the first run ends the bar has no rate (0/30, no time left), so
        # it says how many runs are in flight.
        with Progress(TextColumn("[bold]sweep"), BarColumn(), TextColumn("{task.completed}/{task.total} runs"),
                      TextColumn("running {task.fields[running]}"), TextColumn("failed {task.fields[failed]}"),
                      TimeElapsedColumn(), TimeRemainingColumn(), console=err_console, transient=True) as bar:
            task = bar.add_task("sweep", total=None, failed=0, running=0)
            state = {"failed": 0}

            def progress(done, total, row):
                if row is not None and row["status"] != "ok":
                    state["failed"] += 1
                bar.update(task, completed=done, total=total, failed=state["failed"],
                           running=concurrency(spec, total - done))

            res = run_sweep(spec, out, progress=progress, retry_failed=not keep_failed, validate=False)
    else:
        res = run_sweep(spec, out, retry_failed=not keep_failed, validate=False)
    return res
