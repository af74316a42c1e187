"""``optsched slurm``: the agent in front of a Slurm cluster (optsched/slurm/agent.py),
its result table and twin check, and the local test cluster.

    optsched slurm cluster up | status | down     a real Slurm on this machine (root)
    optsched slurm --db agent.db [--policy P]     the agent: rounds until stopped (Ctrl-C, SIGTERM)
    optsched slurm status --db agent.db           the jobs it managed, as a table
    optsched slurm replay --db agent.db           its decisions vs a fresh session fed its recorded inputs
"""

from __future__ import annotations

import json
import signal
import threading
from typing import Optional

import typer
from rich.table import Table

from optsched.cli.common import app, console, err_console, user_errors
from optsched.cli.dashboard import OPTIONS as DASHBOARD
from optsched.model import OptschedError

slurm_app = typer.Typer(add_completion=False, help="optsched in front of Slurm: the agent, its results, a local "
                        "test cluster.")
cluster_app = typer.Typer(add_completion=False, help="A real Slurm cluster on this machine (slurmctld, one slurmd "
                          "per node, munged; typed fake GPUs), every file under --dir.")
slurm_app.add_typer(cluster_app, name="cluster")
app.add_typer(slurm_app, name="slurm")

DB_HELP = "The agent's SQLite file (its session and its own bookkeeping)."


def _env(slurm_conf: Optional[str]) -> dict:
    return {"SLURM_CONF": slurm_conf} if slurm_conf else {}


@slurm_app.callback(invoke_without_command=True)
@user_errors
def agent_command(
    ctx: typer.Context,
    db: str = typer.Option("optsched-slurm.db", "--db", help=DB_HELP),
    policy: str = typer.Option("max_min_fairness", "--policy", help="Scheduling policy (see `optsched policies`)."),
    round_length: float = typer.Option(60.0, "--round-length", help="Seconds between rounds (also the session's "
                                       "round length)."),
    partition: Optional[str] = typer.Option(None, "--partition", help="Manage every job of this partition (and only "
                                            "its nodes); default: the jobs whose comment starts with 'optsched:'."),
    throughputs: Optional[str] = typer.Option(None, "--throughputs", help="JSON file {model: {gpu_type: steps/s}} "
                                              "for jobs that name model=NAME."),
    rounds: Optional[int] = typer.Option(None, "--rounds", help="Stop after this many rounds (default: run until "
                                         "stopped)."),
    until_done: bool = typer.Option(False, "--until-done", help="Stop once every job it manages has ended."),
    slurm_conf: Optional[str] = typer.Option(None, "--slurm-conf", help="Slurm's configuration (default: "
                                             "$SLURM_CONF, else Slurm's own default)."),
    dashboard: Optional[int] = DASHBOARD["port"],
    dashboard_host: str = DASHBOARD["host"],
    dashboard_token: Optional[str] = DASHBOARD["token"],
) -> None:
    """The agent: each round reads Slurm's jobs, decides with optsched and applies it with scontrol."""
    if ctx.invoked_subcommand is not None:
        return
    from optsched.checks import check_number
    from optsched.model import loads_unique
    from optsched.slurm.agent import Agent, AgentConfig
    from optsched.slurm.localcluster import require_slurm

    from optsched.cli import dashboard as dash

    check_number("round_length", round_length, 0.05, 1e7)
    dash.check(dashboard, dashboard_host, dashboard_token)
    if rounds is not None and rounds < 1:
        raise OptschedError(f"--rounds: must be >= 1, got {rounds}")
    table = {}
    if throughputs:
        with open(throughputs) as f:
            table = loads_unique(f.read())
        if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
            raise OptschedError("--throughputs: must be a JSON object {model: {gpu_type: steps/s}}")
        for model, row in table.items():
            for t, v in row.items():
                check_number(f"--throughputs: {model}.{t}", v, 0, 1e12, lo_open=True)
    require_slurm(_env(slurm_conf))
    from optsched.policy import policy_names

    if policy not in policy_names():
        raise OptschedError(f"--policy: unknown policy {policy!r} (choose from {', '.join(policy_names())})")
    agent = Agent(AgentConfig(db=db, policy=policy, round_length=round_length, partition=partition,
                              throughputs=table, env=_env(slurm_conf)))
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    err_console.print(f"optsched slurm: {policy}, rounds of {round_length:g} s, state in {db}", highlight=False)
    feed = server = on_round = None
    try:
        if dashboard is not None:
            feed, server, on_round = _agent_dashboard(agent, dash, dashboard, dashboard_host, dashboard_token)
        agent.run(rounds=rounds, stop=stop.is_set, until_done=until_done, on_round=on_round)
    finally:
        if server is not None:
            feed.end("stopped")
            server.stop()
        agent.close()


def _agent_dashboard(agent, dash, port: int, host: str, token: Optional[str]):
    """The agent's session on a live page: its state now (after a restart, the recorded rounds), then a
    view after every applied round, built in the agent's thread."""
    from optsched.service.dashboard import recent_rounds
    from optsched.service.dashboard.live import session_feed_view
    from optsched.slurm.agent import SESSION_ID

    feed, server = dash.start(SESSION_ID, port, host, token, lambda line: err_console.print(line, highlight=False))
    feed.seed(recent_rounds(agent.store, SESSION_ID))
    publish = dash.guarded(lambda decision: feed.publish(session_feed_view(agent.session)))
    publish(None)
    return feed, server, publish


@slurm_app.command("status")
@user_errors
def status_command(db: str = typer.Option("optsched-slurm.db", "--db", help=DB_HELP),
                   as_json: bool = typer.Option(False, "--json", help="JSON instead of the table.")) -> None:
    """The jobs the agent managed: Slurm id, state, rounds run, preemptions, JCT (session seconds)."""
    from optsched.slurm.agent import results

    rows, summary = results(db)
    if as_json:
        typer.echo(json.dumps({"jobs": rows, "summary": summary}, indent=2))
        return
    t = Table(title=f"optsched slurm · {summary['policy']} · {summary['rounds']} rounds of "
                    f"{summary['round_length']:g} s")
    for col in ("slurm job", "status", "GPUs", "rounds run", "preemptions", "requeues", "JCT (s)"):
        t.add_column(col, justify="left" if col in ("slurm job", "status") else "right")
    for r in rows:
        t.add_row(r["slurm_id"], r["status"], str(r["gpus"]), str(r["rounds_run"]), str(r["preemptions"]),
                  str(r["requeues"]), "–" if r["jct"] is None else f"{r['jct']:.1f}")
    console.print(t)
    console.print(f"{summary['finished']} finished, {summary['active']} active, {summary['noted']} left to Slurm; "
                  f"avg JCT {summary['avg_jct']:.1f} s" if summary["avg_jct"] is not None else
                  f"{summary['finished']} finished, {summary['active']} active, {summary['noted']} left to Slurm",
                  highlight=False)


@slurm_app.command("replay")
@user_errors
def replay_command(db: str = typer.Option("optsched-slurm.db", "--db", help=DB_HELP)) -> None:
    """Check the agent's decisions against its twin: a fresh session fed the recorded inputs (exit 1 if they differ)."""
    from optsched.slurm.agent import AgentDB, replay

    adb = AgentDB(_existing(db))
    try:
        recorded = [r["decision"] for r in adb.rounds() if r["decision"] is not None]
    finally:
        adb.close()
    twin = replay(db)
    for a, b in zip(recorded, twin):
        if a != b:
            err_console.print(f"round {a['round']}: the agent decided {a['placement']}, the twin {b['placement']}",
                              highlight=False)
            raise typer.Exit(1)
    console.print(f"{len(recorded)} rounds: the agent's decisions equal its twin's", highlight=False)


def _existing(db: str) -> str:
    import os

    if not os.path.isfile(db):
        raise OptschedError(f"--db: {db}: no such file")
    return db


@cluster_app.command("up")
@user_errors
def cluster_up(dir: str = typer.Option("/tmp/optsched-slurm", "--dir", help="Every file of the cluster."),
               nodes: Optional[str] = typer.Option(None, "--nodes", help="GPU type=node count (default v100=2,k80=2)."),
               gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs per node (default 4)."),
               port: Optional[int] = typer.Option(None, "--port", help="slurmctld's port (nodes: PORT+100+i; "
                                                  "default 17000).")) -> None:
    """Start the cluster (idempotent) and print the SLURM_CONF line to use it."""
    from optsched.slurm.localcluster import act

    console.print(act("up", dir, nodes, gpus, port), highlight=False, soft_wrap=True)


@cluster_app.command("status")
@user_errors
def cluster_status(dir: str = typer.Option("/tmp/optsched-slurm", "--dir", help="Every file of the cluster.")) -> None:
    """Its daemons and nodes."""
    from optsched.slurm.localcluster import act

    console.print(act("status", dir), highlight=False, soft_wrap=True)


@cluster_app.command("down")
@user_errors
def cluster_down(dir: str = typer.Option("/tmp/optsched-slurm", "--dir", help="Every file of the cluster.")) -> None:
    """Stop the daemons this folder started."""
    from optsched.slurm.localcluster import act

    console.print(act("down", dir), highlight=False, soft_wrap=True)
