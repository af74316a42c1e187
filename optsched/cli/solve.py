"""`optsched solve | schema | policies`: one snapshot in, an allocation out."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from optsched.cli.common import app, console, err_console, user_errors, write_out
from optsched.model import OptschedError


def example_snapshot_text() -> str:
    return resources.files("optsched").joinpath("data/example_snapshot.json").read_text()



# What the '*' marks mean: the jobs with the lowest value of the policy's per-job measure
# (explain's bottleneck_jobs). Only for max-min objectives is that a bottleneck.
_MAX_MIN = ("max_min_fairness", "max_min_fairness_agnostic", "max_min_fairness_water_filling",
            "max_min_fairness_water_filling_agnostic", "max_min_fairness_hierarchical", "finish_time_fairness",
            "finish_time_fairness_agnostic", "makespan", "makespan_agnostic")
BOTTLENECK_NOTE = {p: "bottleneck: these jobs' share cannot rise without lowering another's" for p in _MAX_MIN}

@app.command()
@user_errors
def solve(
    snapshot: Optional[Path] = typer.Argument(None, help="Snapshot JSON (`-` for stdin); the built-in example if omitted."),
    policy: str = typer.Option("max_min_fairness", "--policy", "-p", help="Scheduling policy (see `optsched policies`)."),
    solver: str = typer.Option("auto", "--solver", help="auto (block IPM or CLARABEL by size; HiGHS IPM with --packing) | ipm | clarabel | highs (IPM) | highs-simplex"),
    time_limit: float = typer.Option(60.0, "--time-limit", help="Solver time limit, seconds."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    packing: bool = typer.Option(False, "--packing", help="Allow space sharing (policies that support it)."),
    placement: bool = typer.Option(False, "--placement", help="Also compute the next round's GPU placement."),
    placement_policy: Optional[str] = typer.Option(None, "--placement-policy", help="With --placement: consolidated (default) | first_fit | cpsat"),
    partitions: int = typer.Option(1, "--partitions", help="POP: solve k balanced sub-problems in parallel and merge (large snapshots)."),
    strict: bool = typer.Option(False, "--strict", help="Exit with code 3 when the solver fell back (status neither optimal nor ok: a time limit, a fallback)."),
    policy_option: Optional[list[str]] = typer.Option(None, "--policy-option", help="KEY=VALUE for the policy's formulation (repeatable); unknown keys and bad values are refused by name."),
    rows: int = typer.Option(50, "--rows", help="Jobs shown in the table (bottleneck jobs first; 0: all). --json always has every job."),
    no_fill_idle: bool = typer.Option(False, "--no-fill-idle", help="The solver's raw optimum: fractional policies otherwise give GPUs it leaves idle to jobs with time left, at the same objective."),
):
    """Solve a policy on a cluster snapshot: allocation, explanation (and placement)."""
    from optsched.model import parse_snapshot

    if not (math.isfinite(time_limit) and time_limit > 0):
        raise OptschedError(f"--time-limit: must be a positive number of seconds ({time_limit})")
    if rows < 0:
        raise OptschedError(f"--rows: must be >= 0 ({rows})")
    if snapshot is None:
        text = example_snapshot_text()
    elif str(snapshot) == "-":
        text = sys.stdin.buffer.read()  # bytes: parse_snapshot names a bad encoding in one line
    elif not snapshot.exists():
        raise OptschedError(f"snapshot {snapshot}: no such file")
    else:
        text = snapshot.read_bytes()
    t_parse = time.perf_counter()
    with _working(f"parsing the snapshot ({len(text) / 1e6:,.1f} MB)"):
        snap = parse_snapshot(text)
    parse_seconds = time.perf_counter() - t_parse
    if placement_policy is not None and not placement:  # (it was ignored without a word)
        raise OptschedError("--placement-policy: only applies with --placement (the next round's GPU placement)")
    placement_policy = placement_policy or "consolidated"
    if placement:
        from optsched.placement import placement_policies

        if placement_policy not in placement_policies():  # fail before a long solve, not after
            raise OptschedError(
                f"--placement-policy: unknown policy {placement_policy!r} (choose from {', '.join(placement_policies())})"
            )
    options = {"packing": True} if packing else {}
    if no_fill_idle:
        options["fill_idle"] = False
    if policy_option:
        from optsched.policy import _module
        from optsched.policy_options import parse_policy_options

        _module(policy)  # an unknown policy is named before its options
        options.update(parse_policy_options(policy, policy_option))
    from optsched.model import Instance
    from optsched.pop import check_partitions, solve_maybe_partitioned

    if partitions != 1:
        from optsched.policy import _module

        _module(policy)  # an unknown policy is named as such, not as one POP cannot split
        # Before the solve, as POST /v1/solve does: also a snapshot with no jobs refuses what POP cannot split.
        check_partitions(policy, partitions, packing, "--partitions")
    # No jobs or elastic ones: the exact solve (solve_maybe_partitioned); else POP over a process pool.
    what = f"solving {policy} over {len(snap.jobs):,} jobs" + (" with packing" if packing else "")
    # Not around POP's process pool: its workers are forked, and a fork while the
    # spinner's thread holds stderr's lock would leave a worker that warns hung.
    with _working(what) if partitions == 1 else contextlib.nullcontext():
        alloc = solve_maybe_partitioned(Instance.from_snapshot(snap), policy, partitions, solver, time_limit, **options)
    out = alloc.to_dict()
    # Honest timings: parsing is the caller's cost too, and never hides in another field.
    out["parse_seconds"] = parse_seconds
    out["total_seconds"] = time.perf_counter() - t_parse
    if placement:
        from optsched.allocator import Allocator

        allocator = Allocator.from_snapshot(snap, placement=placement_policy)
        out.update(allocator.next_round(snap, alloc).to_dict())
        # The state after this round, named like the snapshot fields: merge it
        # into the next round's snapshot to keep the mechanism's memory.
        out["allocator_state"] = allocator.state()
    if as_json:
        from optsched.cli.json_out import dumps_indented

        write_out(dumps_indented(out))  # json.dumps(out, indent=2), the same text
    else:
        _print_solution(snap, out, rows)
    if strict and not str(out["status"]).startswith(("optimal", "ok")):
        err_console.print(f"[bold red]error:[/] --strict: status is {out['status']!r}", highlight=False, soft_wrap=True)
        raise typer.Exit(3)


def _working(what: str):
    """A spinner on stderr while a long step runs, in a terminal only (it
    leaves nothing behind; pipes and --json output see no change)."""
    if not err_console.is_terminal:
        return contextlib.nullcontext()
    return err_console.status(f"{what}…", spinner="dots")


_CONTROL_CHARS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}


def _print_solution(snap, out: dict, rows: int = 50) -> None:
    from rich.markup import escape

    ex = out["explanation"]
    obj = out["objective"]
    console.print(
        f"[bold]{escape(str(out['policy']))}[/]  status [green]{escape(str(out['status']))}[/]  objective "
        f"{'n/a' if obj is None else f'{obj:.6g}'}  parse {out['parse_seconds'] * 1000:.1f} ms, "
        f"solve {out['solve_seconds'] * 1000:.1f} ms"
    )
    def esc(text) -> str:
        """User text (ids, models, types) is never rich markup, and its control
        characters (a terminal escape in a job id) are shown, not sent."""
        return escape(str(text).translate(_CONTROL_CHARS))

    types = list(snap.cluster.gpus)
    table = Table(show_edge=False, header_style="bold")
    table.add_column("job")
    table.add_column("model")
    table.add_column("s", justify="right")
    for t in types:
        table.add_column(esc(t), justify="right")
    from optsched.policy import GOODPUT_POLICIES

    # Goodput policies report each job's goodput (Pollux: examples/s × statistical efficiency), not steps/s.
    table.add_column("goodput" if out.get("policy") in GOODPUT_POLICIES else "steps/s", justify="right")
    table.add_column("vs fair", justify="right")
    bottleneck = set(ex.get("bottleneck_jobs", []))
    counts = out.get("gpu_counts")  # configuration policies: GPUs per type, not time fractions
    shown = _shown_jobs(snap.jobs, bottleneck, rows)
    for job in shown:
        fr = out["allocation"].get(job.id, {})
        cells = (
            [f"{counts[job.id][t]} GPU" + ("s" if counts[job.id][t] > 1 else "") if counts.get(job.id, {}).get(t) else "·" for t in types]
            if counts is not None
            else [f"{fr[t]:.3f}" if fr.get(t, 0.0) >= 5e-4 else "·" for t in types]  # shown to 3 decimals
        )
        mark = " [yellow]*[/]" if job.id in bottleneck else ""
        table.add_row(
            esc(job.id) + mark,
            esc(job.model),
            str(job.scale_factor),
            *cells,
            f"{out['effective_throughput'][job.id]:.3g}",
            f"{ex['share_vs_fair'][job.id]:.2f}×" if job.id in ex.get("share_vs_fair", {}) else "·",
        )
    console.print(table)
    if len(shown) < len(snap.jobs):  # a table row costs rich ~1.7 ms: 100,000 jobs took minutes
        console.print(f"… {len(snap.jobs) - len(shown):,} more jobs (--rows 0 shows all; --json has every job)")
    prices = ex.get("gpu_price", {})
    used = ex.get("capacity_used", {})
    console.print(
        "GPUs used: "
        + (", ".join(f"{esc(t)} {used.get(t, 0):.1f}/{ex.get('capacity', snap.cluster.gpus).get(t, 0):.0f}" for t in types)
           or "none (the cluster has no GPU types)")
        + ("   price per GPU: " + ", ".join(f"{esc(t)} {prices[t]:.3g}" for t in types if t in prices) if prices else "")
    )
    util = ex.get("utilization") or {}
    if util.get("total") is not None:  # GPUs used / GPUs some job with time left could use
        console.print(f"utilization of usable GPUs: {100 * util['total']:.1f} %"
                      + ("" if util.get("of_capacity") is None else f" ({100 * util['of_capacity']:.1f} % of all GPUs)"))
    packed = out.get("packed_allocation") or {}
    if packed:  # space sharing: pairs of jobs on the same GPUs, time fraction per type
        shown = [f"{esc(pair)} " + " ".join(f"{esc(t)} {f:.3f}" for t, f in fr.items()) for pair, fr in list(packed.items())[:20]]
        more = f" … ({len(packed)} pairs)" if len(packed) > 20 else ""
        console.print("packed: " + ", ".join(shown) + more)
    if bottleneck:
        console.print("[yellow]*[/] " + BOTTLENECK_NOTE.get(out.get("policy", ""), "lowest value of the policy's per-job measure"))
    if "placement" in out:
        pt = Table(title="next round placement", show_edge=False, header_style="bold")
        pt.add_column("job")
        pt.add_column("GPUs")
        placed = list(out["placement"].items())
        for jid, slots in placed[: rows or len(placed)]:
            pt.add_row(esc(jid), esc(", ".join(f"{s['server']}:{s['gpu']}" for s in slots)))
        console.print(pt)
        if rows and len(placed) > rows:
            console.print(f"… {len(placed) - rows:,} more placed jobs")
        console.print(f"started: {esc(', '.join(out.get('started', []))) or '-'}; "
                      f"preempted: {esc(', '.join(out.get('preempted', []))) or '-'}")


def _shown_jobs(jobs, bottleneck: set, rows: int) -> list:
    """The table's jobs: all (rows = 0), else the bottleneck jobs first, then the
    others, up to ``rows``, in snapshot order."""
    if not rows or len(jobs) <= rows:
        return list(jobs)
    first = [j for j in jobs if j.id in bottleneck][:rows]
    keep = {j.id for j in first}
    rest = [j for j in jobs if j.id not in keep][: rows - len(first)]
    keep |= {j.id for j in rest}
    return [j for j in jobs if j.id in keep]


@app.command()
def schema():
    """Print the snapshot JSON Schema (version 1)."""
    from optsched.model import snapshot_schema

    write_out(json.dumps(snapshot_schema(), indent=2))


@app.command()
def policies():
    """List the available policies."""
    from optsched.policy import policy_names

    for name in policy_names():
        typer.echo(name)
