"""`optsched bench`: the scale benchmark (optsched.bench) with a progress bar,
a table, CSV output and ratios against an earlier run's CSV."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from optsched.cli.common import app, console, output_file, user_errors
from optsched.model import OptschedError


@app.command()
@user_errors
def bench(
    quick: bool = typer.Option(False, "--quick", help="A small subset (about a minute): n = 1,000, small MILPs."),
    csv_out: Optional[Path] = typer.Option(None, "--csv", help="Write one row per case to this CSV file."),
    compare_to: Optional[Path] = typer.Option(None, "--compare", help="An earlier run's CSV: print old/new time ratios."),
    only: Optional[str] = typer.Option(None, "--only", help="Run only cases whose key contains this text (e.g. sia, packing, 10000x5)."),
    repeat: int = typer.Option(3, "--repeat", help="Runs per case (median); 1 at n = 100,000."),
    memory: bool = typer.Option(True, "--memory/--no-memory", help="Peak memory of one extra run per case (tracemalloc)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the generated instances."),
) -> None:
    """Time every policy at scale against naive / peer-style references (ratios from one run)."""
    import os

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from optsched.bench.runner import (CASES_FULL, CASES_QUICK, Context, compare, fmt, fmt_g, machine, read_csv, run_cases,
                                       write_csv)

    from optsched.cli.limits import check_bench

    check_bench(repeat, seed)
    if compare_to is not None and not compare_to.is_file():
        raise OptschedError(f"--compare: no such file: {compare_to}")
    old_run = read_csv(str(compare_to)) if compare_to is not None else None
    output_file(csv_out, "--csv")
    cases = CASES_QUICK if quick else CASES_FULL
    if only:
        cases = [c for c in cases if only in c.key]
        if not cases:
            raise OptschedError(f"--only: no case matches {only!r}")
    before = machine()
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("bench", total=len(cases))
        done = []

        def on_done(row):
            done.append(row)
            progress.update(task, advance=1, description=f"{row.case} {row.total_s:.2f}s")
            progress.console.print(f"  {row.case}: {fmt(row.total_s)} s, objective {fmt_g(row.objective, 'n/a')}"
                                   + (f", {row.reference} {fmt(row.ref_s, 2)} s" if row.reference else ""),
                                   highlight=False)
            if csv_out is not None:  # partial results survive an interrupted run
                write_csv(done, str(csv_out), {"partial": True, **machine()})

        rows = run_cases(cases, Context(repeat=repeat, memory=memory, seed=seed), on_done)
    after = machine()
    meta = {"cores": before["cores"], "load_before": before["load"], "load_after": after["load"],
            "OPENBLAS_NUM_THREADS": before["OPENBLAS_NUM_THREADS"]}
    t = Table(title=f"optsched bench ({'quick' if quick else 'full'}); seconds; speedup = reference / optsched; "
                    f"loss = (reference − ours) / reference", header_style="bold")
    for col in ("case", "variant", "parse", "build", "solver", "decode", "total", "p99", "objective", "status",
                "peak MB", "reference", "ref s", "speedup", "loss", "note"):
        t.add_column(col, justify="left" if col in ("case", "variant", "status", "reference", "note") else "right")
    for r in rows:
        t.add_row(r.case, r.variant, fmt(r.parse_s), fmt(r.build_s), fmt(r.solver_s), fmt(r.decode_s), fmt(r.total_s),
                  fmt(r.p99_s), fmt_g(r.objective), r.status[:30], fmt(r.peak_mb, 0), r.reference, fmt(r.ref_s, 2),
                  (f"{r.speedup:.1f}×" if r.speedup == r.speedup else "–"),
                  (f"{r.loss:.2e}" if r.loss == r.loss else "–"), r.note)
    console.print(t)
    console.print(f"machine: {meta['cores']} cores, load average (1/5/15 min) {meta['load_before']} before, "
                  f"{meta['load_after']} after; OPENBLAS_NUM_THREADS={meta['OPENBLAS_NUM_THREADS']}")
    if csv_out is not None:
        write_csv(rows, str(csv_out), meta)
        console.print(f"wrote {csv_out}")
    if compare_to is not None:
        # (the path goes in the caption: a long one wrapped the title at the table's width)
        c = Table(title="against an earlier run (ratio = old / new time: > 1 is faster now)",
                  caption=f"earlier run: {compare_to}", header_style="bold")
        for col in ("case", "old s", "new s", "ratio", "old objective", "new objective", "note"):
            c.add_column(col, justify="left" if col in ("case", "note") else "right")
        paired = compare(rows, old_run)
        for case, ot, nt, ratio, oo, no in paired:
            differs = oo == oo and no == no and abs(oo - no) > 1e-6 * max(abs(oo), abs(no), 1e-12)
            c.add_row(case, fmt(ot), fmt(nt), f"{ratio:.2f}×" if ratio == ratio else "–", fmt_g(oo), fmt_g(no),
                      "objective differs: another instance (seed?) or solution" if differs else "")
        if paired:
            console.print(c)
        else:
            n_old = len(old_run)
            console.print(f"--compare: no case of this run is in {compare_to} (it has {n_old} case{'s' * (n_old != 1)})")
