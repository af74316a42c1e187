"""`optsched bench`: the scale benchmark (optsched.bench): many instances per case, CPU
seconds p50 / p99 / max beside in-run references, a table, CSV output and ratios
against an earlier run's CSV; progress on stderr."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from optsched.cli.common import app, console, output_file, user_errors
from optsched.model import OptschedError


@app.command()
@user_errors
def bench(
    quick: bool = typer.Option(False, "--quick", help="A small subset (a few minutes): n = 300-1,000, 3 instances per case."),
    csv_out: Optional[Path] = typer.Option(None, "--csv", help="Write one row per case to this CSV file."),
    compare_to: Optional[Path] = typer.Option(None, "--compare", help="An earlier run's CSV: print old/new time ratios."),
    only: Optional[str] = typer.Option(None, "--only", help="Run only cases whose key contains this text, or one of several comma-separated (e.g. sia, packing, 10000x5,/2000x)."),
    instances: Optional[int] = typer.Option(None, "--instances", help="Instances drawn per case (default 20; 3 with --quick)."),
    repeat: int = typer.Option(1, "--repeat", help="Solves per instance (the median CPU time counts)."),
    ref_budget: float = typer.Option(120.0, "--ref-budget", help="CPU seconds a reference may spend per case; then it stops."),
    memory: bool = typer.Option(True, "--memory/--no-memory", help="Peak memory of one extra solve per case (tracemalloc)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the first instance (then seed+1, ...)."),
) -> None:
    """Time the policies on many instances against peer-style references (CPU seconds, one run)."""
    import os

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from optsched.extras import require_extra

    require_extra("bench", "optsched bench")
    from optsched.bench.runner import CASES_FULL, CASES_QUICK, Context, load_average, read_csv, run_cases, stderr_say
    from optsched.cli.limits import check_bench, number

    check_bench(repeat, seed)
    count = instances if instances is not None else (3 if quick else 20)
    number("--instances", count, 1, 10_000, unit="instances")
    number("--ref-budget", ref_budget, 0.0, 1e6, unit="s")
    if compare_to is not None and not compare_to.is_file():
        raise OptschedError(f"--compare: no such file: {compare_to}")
    old_run = read_csv(str(compare_to)) if compare_to is not None else None
    output_file(csv_out, "--csv")
    cases = CASES_QUICK if quick else CASES_FULL
    if only:
        wanted = [w for w in only.split(",") if w]
        cases = [c for c in cases if any(w in c.key for w in wanted)]
        if not cases:
            raise OptschedError(f"--only: no case matches {only!r}")
    meta = {"cores": os.cpu_count(), "load_before": load_average(), "instances": count,
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "unset")}
    console.print(f"load average (1/5/15 min) at start: {meta['load_before']}; {meta['cores']} cores; "
                  f"{count} instance(s) per case; CPU seconds (time.process_time)", highlight=False)
    done = []

    def on_done(row):
        from optsched.bench.runner import summary

        done.append(row)
        console.print("  " + summary(row), highlight=False)
        if csv_out is not None:  # partial results survive an interrupted run
            from optsched.bench.runner import write_csv

            write_csv(done, str(csv_out), {"partial": True, **meta, "load_now": load_average()})

    ctx = Context(instances=count, repeat=repeat, memory=memory, seed=seed, ref_budget=ref_budget, say=stderr_say)
    rows = run_cases(cases, ctx, on_done)
    meta["load_after"] = load_average()
    _print_table(rows, quick, meta)
    if csv_out is not None:
        from optsched.bench.runner import write_csv

        write_csv(rows, str(csv_out), meta)
        console.print(f"wrote {csv_out}")
    if compare_to is not None:
        _print_compare(rows, old_run, compare_to)


def _print_table(rows, quick: bool, meta: dict) -> None:
    from rich.table import Table

    from optsched.bench.runner import fmt, fmt_e, fmt_g

    t = Table(title=f"optsched bench ({'quick' if quick else 'full'}); CPU seconds p50 / p99 / max; ratio = median "
                    f"reference CPU / median optsched CPU (same instances); gap = how much worse ours is than the "
                    f"reference, relative to it (< 0: ours better)", header_style="bold")
    for col in ("case", "n", "CPU p50", "p99", "max", "wall p50", "objective", "status", "util", "reference",
                "ref n", "ref p50", "ref p99", "ref max", "ratio", "gap p50", "gap max", "ref util", "note"):
        t.add_column(col, justify="left" if col in ("case", "status", "reference", "note") else "right")
    for r in rows:
        t.add_row(r.case, str(r.instances), fmt(r.cpu_p50), fmt(r.cpu_p99), fmt(r.cpu_max), fmt(r.wall_p50),
                  fmt_g(r.objective), r.status[:30], fmt(r.util_p50), r.reference, str(r.ref_instances or "–"),
                  fmt(r.ref_p50), fmt(r.ref_p99), fmt(r.ref_max), f"{r.speedup:.1f}×" if r.speedup == r.speedup else "–",
                  fmt_e(r.gap_p50), fmt_e(r.gap_max), fmt(r.ref_util_p50), r.note)
    console.print(t)
    console.print(f"machine: {meta['cores']} cores, load average (1/5/15 min) {meta['load_before']} at start, "
                  f"{meta['load_after']} at end; OPENBLAS_NUM_THREADS={meta['OPENBLAS_NUM_THREADS']}", highlight=False)


def _print_compare(rows, old_run, compare_to: Path) -> None:
    from rich.table import Table

    from optsched.bench.runner import compare, fmt, fmt_g

    wall = old_run.measure == "wall"
    # (the path goes in the caption: a long one wrapped the title at the table's width)
    c = Table(title="against an earlier run (ratio = old / new time: > 1 is faster now)"
                    + ("; wall seconds: the earlier CSV has no CPU columns" if wall else "; median CPU seconds"),
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
