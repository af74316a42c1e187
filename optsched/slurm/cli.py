"""Slurm's commands, machine-readable: the only place optsched runs them.

``scontrol -o show nodes|job`` (one record a line, KEY=VALUE) and ``squeue``
with a field separator that no Slurm value contains (ASCII unit separator).
``SlurmUnavailable`` is raised when the controller does not answer (being
restarted): callers wait and retry; any other failure is an OptschedError
naming the command and Slurm's own line.
"""

from __future__ import annotations

import os
import re
import subprocess

from optsched.model import OptschedError

SEP = "\x1f"
# squeue -o fields, in order (squeue(1)): id, name, state, reason, comment, nodes, tres per node,
# node count, submit time, priority, user, requested node list, partition, (expected) start time,
# working directory
SQUEUE_FIELDS = ("id", "name", "state", "reason", "comment", "nodes", "tres", "node_count", "submit", "priority",
                 "user", "req_nodes", "partition", "start", "workdir")
SQUEUE_FORMAT = SEP.join(("%i", "%j", "%T", "%r", "%k", "%N", "%b", "%D", "%V", "%Q", "%u", "%n", "%P", "%S",
                          "%Z"))
_UNAVAILABLE = ("unable to contact slurm controller", "connection refused", "socket timed out",
                "slurm_persist_conn_open", "communication connection failure", "zero bytes were transmitted",
                "slurmctld not responding", "controller not responding")


class SlurmUnavailable(OptschedError):
    """The controller did not answer (restarting, down): try again later."""


def run(argv: list[str], env: dict | None = None, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
    full = {**os.environ, **(env or {})}
    try:
        r = subprocess.run(argv, env=full, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        from optsched.slurm.localcluster import INSTALL_HINT

        raise OptschedError(f"slurm: {argv[0]} not installed ({INSTALL_HINT})") from None
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(f"slurm: {' '.join(argv[:3])} did not answer in {timeout:g} s") from None
    if check and r.returncode != 0:
        said = (r.stderr.strip() or r.stdout.strip()).splitlines()
        line = said[-1] if said else f"exit {r.returncode}"
        if any(u in line.lower() for u in _UNAVAILABLE):
            raise SlurmUnavailable(f"slurm: {argv[0]}: {line}")
        raise OptschedError(f"slurm: {' '.join(argv[:3])}: {line}")
    return r


_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_:/.]*=")


def parse_record(line: str) -> dict[str, str]:
    """One ``scontrol -o`` record: KEY=VALUE tokens; a token without its own key
    continues the previous value (values such as OS= hold spaces)."""
    out: dict[str, str] = {}
    key = None
    for tok in line.split(" "):
        if _KEY.match(tok):
            key, _, value = tok.partition("=")
            out[key] = value
        elif key is not None and tok:
            out[key] += " " + tok
    return out


def scontrol_nodes(env: dict | None = None) -> list[dict]:
    out = run(["scontrol", "-o", "show", "nodes"], env).stdout
    return [parse_record(ln) for ln in out.splitlines() if ln.startswith("NodeName=")]


def scontrol_job(job_id: str, env: dict | None = None) -> dict | None:
    """The job's record (None when Slurm no longer knows it)."""
    r = run(["scontrol", "-o", "show", "job", str(job_id)], env, check=False)
    if r.returncode != 0:
        line = (r.stderr or r.stdout).strip().lower()
        if "invalid job id" in line:
            return None
        run(["scontrol", "-o", "show", "job", str(job_id)], env)  # raises the right error
    recs = [parse_record(ln) for ln in r.stdout.splitlines() if ln.startswith("JobId=")]
    return recs[0] if recs else None


def scontrol_jobs_detail(env: dict | None = None) -> dict[str, dict]:
    """Every job Slurm knows, with ``-d`` (the GPU indices each running job holds)."""
    r = run(["scontrol", "-o", "-d", "show", "jobs"], env)
    out = {}
    for ln in r.stdout.splitlines():
        if ln.startswith("JobId="):
            rec = parse_record(ln)
            off = rec.get("HetJobOffset")  # a heterogeneous job's components share the JobId
            out[rec["JobId"] + (f"+{off}" if off is not None else "")] = rec
    return out


def squeue(env: dict | None = None, states: str = "all", user: str | None = None) -> list[dict]:
    """Jobs as dicts of SQUEUE_FIELDS (every state Slurm still lists by default)."""
    argv = ["squeue", "-h", "-t", states, "-o", SQUEUE_FORMAT]
    if user:
        argv += ["-u", user]
    out = run(argv, env).stdout
    rows = []
    for ln in out.splitlines():
        parts = ln.split(SEP)
        if len(parts) != len(SQUEUE_FIELDS):
            continue
        rows.append(dict(zip(SQUEUE_FIELDS, parts)))
    return rows


def node_gres(rec: dict) -> tuple[str, int] | None:
    """(GPU type, count) of a node record's ``Gres=gpu:TYPE:N`` (None without typed GPUs)."""
    for part in rec.get("Gres", "").split(","):
        bits = part.split("(")[0].split(":")
        if len(bits) == 3 and bits[0] == "gpu" and bits[2].isdigit():
            return bits[1], int(bits[2])
    return None


def gpu_indices(detail: dict) -> dict[str, list[int]]:
    """{node: GPU indices} a running job holds, from ``scontrol -d show job``'s
    ``Nodes=n0 CPU_IDs=0 Mem=0 GRES=gpu:v100:2(IDX:0-1)`` entries."""
    out: dict[str, list[int]] = {}
    nodes = detail.get("Nodes")
    gres = detail.get("GRES", "")
    m = re.search(r"IDX:([0-9,\-]+)", gres)
    if nodes and m:
        idx = []
        for part in m.group(1).split(","):
            a, _, b = part.partition("-")
            idx += list(range(int(a), int(b or a) + 1))
        out[nodes] = idx
    return out


__all__ = ["SEP", "SQUEUE_FIELDS", "SlurmUnavailable", "gpu_indices", "node_gres", "parse_record", "run",
           "scontrol_job", "scontrol_jobs_detail", "scontrol_nodes", "squeue"]
