"""``optsched run``: a trace of real jobs under the scheduling pipeline
(optsched/runtime), on this machine's slots or on a Ray cluster."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from optsched.cli.common import app, console, err_console, user_errors
from optsched.cli.dashboard import OPTIONS as DASHBOARD
from optsched.cli.simulate import COMMON, _allocator_options
from optsched.model import OptschedError


def _num(v, fmt="{:.2f}"):
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


@app.command("run")
@user_errors
def run_command(
    trace: Optional[str] = typer.Argument(None, help="Trace file (any format; Tiresias CSV with workload models to "
                                          "run shipped workloads). Default: the built-in 6-job example."),
    executor: str = typer.Option("local", "--executor", help="local (subprocesses) | ray | slurm "
                                 "(sbatch on the cluster $SLURM_CONF names)"),
    address: Optional[str] = typer.Option(None, "--address", help="ray: join this Ray cluster (HOST:PORT or auto)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Slots: TYPE=COUNT,... (default: this machine's "
                                          "GPUs, else one slot per CPU core)."),
    policy: str = typer.Option("max_min_fairness", "--policy", help="Scheduling policy (see `optsched policies`)."),
    round_length: float = typer.Option(2.0, "--round-length", help="Seconds per round (lease length)."),
    grace: float = typer.Option(5.0, "--grace", help="Seconds a revoked job may take to checkpoint before a kill."),
    placement: str = typer.Option("consolidated", "--placement", help="consolidated | first_fit | cpsat"),
    step_scale: float = typer.Option(1.0, "--step-scale", help="Multiply every job's steps."),
    max_time: Optional[float] = typer.Option(None, "--max-time", help="Stop every job after this many seconds."),
    seed: int = typer.Option(0, "--seed", help="Seed (allocator ties)."),
    slot_speed: Optional[str] = typer.Option(None, "--slot-speed", help="Emulate slower slot types on identical "
                                             "hardware: TYPE=SPEED,... with SPEED in (0, 1] (slow=0.5: steps take "
                                             "twice as long)."),
    throughputs: str = typer.Option("measured", "--throughputs", help="What the policy sees: measured steps/s per "
                                    "slot type (the trace's estimate until a job ran), or trace (estimates only)."),
    run_dir: Optional[str] = typer.Option(None, "--run-dir", help="Job directories (lease, progress, checkpoint, "
                                          "output.log); default a new temporary directory, named at the start and "
                                          "removed at the end (--keep keeps it). A used folder needs --resume."),
    resume: bool = typer.Option(False, "--resume", help="With --run-dir of an earlier run: each job continues from "
                                "its checkpoint there."),
    keep: bool = typer.Option(False, "--keep", help="Keep the temporary run folder (checkpoints, output.log)."),
    solver: str = COMMON["solver"],
    time_limit: float = typer.Option(60.0, "--time-limit", help="Solver seconds per recomputation."),
    restart_overhead: Optional[str] = typer.Option(None, "--restart-overhead", hidden=True, help=(
        "Refused: a real run pays its jobs' real restarts (simulate models them).")),
    min_recompute_interval: float = COMMON["min_interval"],
    recompute_every: Optional[int] = COMMON["every"],
    admission: str = COMMON["admission"],
    load_factor: Optional[float] = COMMON["load_factor"],
    partitions: int = typer.Option(1, "--partitions", help="POP: each recomputation solves K job groups (each with "
                                   "1/K of every type) and merges them (fractional policies)."),
    packing: bool = typer.Option(False, "--packing", help="Space sharing: refused here (each slot runs one process; "
                                 "simulate and sessions pack)."),
    queue: Optional[str] = COMMON["queue"],
    type_order: Optional[str] = COMMON["type_order"],
    migration_cost: Optional[float] = COMMON["migration_cost"],
    hysteresis: Optional[float] = COMMON["hysteresis"],
    loss_threshold: Optional[float] = COMMON["loss_threshold"],
    policy_option: Optional[list[str]] = COMMON["policy_option"],
    out: Optional[str] = typer.Option(None, "--out", help="Write jobs/rounds/launches CSV, summary.json and "
                                      "measured_trace.csv (for optsched simulate) here."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    quiet: bool = typer.Option(False, "--quiet", help="No per-round lines."),
    dashboard: Optional[int] = DASHBOARD["port"],
    dashboard_host: str = DASHBOARD["host"],
    dashboard_token: Optional[str] = DASHBOARD["token"],
) -> None:
    """Run real jobs under the same pipeline and allocator as the simulator."""
    import shutil

    from optsched.runtime.loop import RunConfig, run
    from optsched.runtime.spec import example_trace_path

    if trace is not None and not Path(trace).exists():
        raise OptschedError(f"trace {trace}: no such file")
    from optsched.cli.limits import check_run_options, number

    check_run_options(round_length, grace, step_scale, max_time, seed)
    number("--min-recompute-interval", min_recompute_interval, 0.0, 1e9, unit="s")
    number("--recompute-every", recompute_every, 1, 1_000_000)
    number("--partitions", partitions, 1, 1024)
    number("--time-limit", time_limit, 0.0, 1e6, unit="s", lo_open=True)
    if restart_overhead is not None:  # (simulate's model of what is real here)
        raise OptschedError("--restart-overhead: a real run pays its jobs' real restarts (measured: the summary's "
                            "restart_overhead_*); --migration-cost tells the allocator what a move costs")
    if resume and run_dir is None:
        raise OptschedError("--resume: needs --run-dir (the folder of the run to continue)")
    if keep and run_dir is not None:
        raise OptschedError("--keep: applies to the temporary run folder; a --run-dir is always kept")
    policy_options = {}
    if policy_option:
        from optsched.policy_options import parse_policy_options

        policy_options = parse_policy_options(policy, policy_option)
    speeds = {}
    for part in (slot_speed or "").split(","):
        if part.strip():
            name, eq, v = part.partition("=")
            try:
                speeds[name.strip()] = float(v)
            except ValueError:
                raise OptschedError(f"--slot-speed: {part!r} is not TYPE=SPEED") from None
            if not eq:
                raise OptschedError(f"--slot-speed: {part!r} is not TYPE=SPEED")
    cfg = RunConfig(slot_speed=speeds, policy=policy, round_length=round_length, grace=grace, placement=placement, seed=seed,
                    max_time=max_time, throughputs=throughputs, solver=solver, time_limit=time_limit,
                    min_recompute_interval=min_recompute_interval, recompute_every=recompute_every,
                    admission=admission, load_factor=load_factor, partitions=partitions, packing=packing,
                    policy_options=policy_options,
                    allocator_options=_allocator_options(queue, type_order, migration_cost, hysteresis))
    cfg.validate()  # every option before a folder is made or a job started
    from optsched.cli import dashboard as dash

    dash.check(dashboard, dashboard_host, dashboard_token)
    example_dir = None
    if trace is None:
        example_dir = tempfile.mkdtemp(prefix="optsched-example-")
        trace = example_trace_path(example_dir)
    temporary = run_dir is None
    if temporary:
        run_dir = tempfile.mkdtemp(prefix="optsched-run-")
        if not quiet:  # (named again with the results: a refusal stays one line)
            err_console.print(f"run folder {run_dir} ({'kept' if keep else 'removed at the end; --keep keeps it'})",
                              highlight=False, soft_wrap=True)

    def on_round(r: dict) -> None:
        if not quiet:
            err_console.print(f"round {r['round']:>3}  t={r['time']:7.1f} s  running {r['running']}  "
                              f"done {r['done']}/{r['jobs']}", highlight=False)

    feed = server = None
    placements = dash.PlacementLog() if out else None  # the replay's cluster map (placements.csv)
    if dashboard is not None:
        feed, server = dash.start("run", dashboard, dashboard_host, dashboard_token,
                                  lambda line: err_console.print(line, highlight=False, soft_wrap=True))
    cluster_of = {}

    def observer(rt, kind: str, info: dict) -> None:
        cluster_of["layout"] = rt.allocator.layout
        if placements is not None and kind == "decided":
            placements.add(info["round"], info["placement"], info["started"], info["migrated"])
        if feed is not None:
            from optsched.service.dashboard.live import run_view

            dash.guarded(lambda: feed.publish(run_view(rt, kind, info)))()
    ended = "stopped"
    try:
        res = run(trace, executor, cfg, cluster=cluster, address=address, run_dir=run_dir, on_round=on_round,
                  step_scale=step_scale, handle_signals=True, resume=resume, loss_threshold=loss_threshold,
                  observer=observer if feed is not None or placements is not None else None)
        ended = res.summary.get("interrupted") or "finished"
    finally:
        if server is not None:  # the pages learn how the run ended, then the server stops
            feed.end(ended)
            server.stop()
        if example_dir is not None:
            shutil.rmtree(example_dir, ignore_errors=True)
        if temporary and not keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    if out:
        res.write(out)
        if "layout" in cluster_of:
            placements.write(out, layout=cluster_of["layout"])
    s = res.summary
    s["run_dir_removed"] = temporary and not keep
    if json_out:
        def clean(v):
            if isinstance(v, float) and math.isnan(v):
                return None  # strict JSON
            return {k: clean(x) for k, x in v.items()} if isinstance(v, dict) else v

        console.print_json(json.dumps(clean(s), default=str))
    else:
        t = Table(title=f"optsched run · {s['executor']} · {s['policy']} · "
                        f"{', '.join(f'{k}={v}' for k, v in s['cluster'].items())} · rounds of {s['round_length']:g} s",
                  show_edge=False, header_style="bold")
        for c in ("job", "status", "steps", "arrival", "JCT s", "launches", "preempted", "restart s", "steps/s"):
            t.add_column(c, justify="left" if c in ("job", "status") else "right")
        for r in res.jobs.itertuples(index=False):
            t.add_row(r.job_id, r.status if not r.error else f"{r.status}: {r.error}", f"{r.steps_done}/{r.steps_total}",
                      _num(r.arrival_time, "{:.1f}"), _num(r.jct), str(r.launches), str(r.preemptions),
                      _num(r.restart_overhead_mean), _num(r.measured_throughput, "{:.0f}"))
        console.print(t)
        by = s.get("restart_overhead_by_reason", {})  # (none when no job restarted)
        console.print(
            f"completed {s['jobs_completed']}/{s['jobs']}  failed {s['jobs_failed']}  avg JCT {_num(s['avg_jct'])} s  "
            f"makespan {_num(s['makespan'])} s  preemptions {s['preemptions']}  migrations {s['migrations']}\n"
            f"restart overhead {_num(s['restart_overhead_mean'])} s "
            f"({''.join(f'{k} {v:.2f}' + (', ' if i + 1 < len(by) else '; ') for i, (k, v) in enumerate(by.items()))}"
            f"launch → first step "
            f"{_num(s['launch_overhead_mean'])} s, checkpoint + exit {_num(s['stop_latency_mean'])} s)  "
            f"solver {s['solver_seconds']:.3f} s  wall {s['wall_seconds']:.1f} s", highlight=False)
        if out:
            console.print(f"wrote {out}/ (jobs.csv, rounds.csv, launches.csv, summary.json, measured_trace.csv, "
                          "placements.csv, servers.csv)",
                          highlight=False)
        console.print(f"run folder {run_dir} " + ("removed (--keep keeps it)" if s["run_dir_removed"] else "kept"),
                      highlight=False, soft_wrap=True)
    if s.get("interrupted") == "interrupted":
        err_console.print("interrupted: every job was stopped (checkpoints saved where the job honoured its lease)")
        raise typer.Exit(130)
    if s["jobs_failed"]:  # the others went on; a script sees it in the exit code
        failed = res.jobs[res.jobs.status == "failed"]
        first = "; ".join(f"{r.job_id}: {r.error}" for r in failed.head(3).itertuples(index=False))
        more = f"; … {len(failed) - 3} more" if len(failed) > 3 else ""
        err_console.print(f"{s['jobs_failed']} of {s['jobs']} jobs failed — {first}{more}", highlight=False,
                          soft_wrap=True)
        raise typer.Exit(1)
