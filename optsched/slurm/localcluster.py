"""A real Slurm cluster on this machine: ``slurmctld``, one ``slurmd`` per node
and ``munged``, every file under one folder.

    python -m optsched.slurm.localcluster up [--dir D] [--nodes v100=2,k80=2] [--gpus 4]
    python -m optsched.slurm.localcluster status | down
    optsched slurm cluster up | status | down          (the same, through the CLI)
    export SLURM_CONF=D/slurm.conf                     (then sbatch, squeue, scontrol ... talk to it)

Debian's packages (``apt-get install slurm-wlm munge``, Slurm 22.05). Each node
is a ``slurmd -N NAME`` on its own port (Slurm allows several per host); its
GPUs are typed *fake* GPUs: gres.conf points at plain files, so Slurm does the
whole GRES bookkeeping (``--gres=gpu:v100:2`` is counted, placed and freed by
Slurm itself) without any hardware. Jobs run as processes of this machine, so
the folder is a shared filesystem by construction.

``up`` is idempotent (a running cluster is checked and left alone), ``down``
stops only the daemons whose pid files this folder holds. Run as root the
daemons run as root and munged as ``munge`` (the packages' layout); as another
user everything runs as that user.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from optsched.model import OptschedError

DEFAULT_DIR = "/tmp/optsched-slurm"
DEFAULT_NODES = {"v100": 2, "k80": 2}
DEFAULT_GPUS = 4
DEFAULT_PORT = 17000  # slurmctld; node i listens on PORT + 100 + i
NEEDED = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel")
# Seconds a daemon's start, the nodes' readiness or the controller's stop may take: a bound only a hang
# reaches (a start takes a second or two idle, far more on a busy machine; 15-60 s bounds were reachable).
HANG = 600.0
INSTALL_HINT = "apt-get install -y slurm-wlm munge (Debian/Ubuntu, as root)"


def missing_programs() -> list[str]:
    """The Slurm/munge programs not on PATH (also /usr/sbin, where Debian puts the daemons)."""
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin"
    return [p for p in NEEDED if shutil.which(p, path=path) is None]


def require_slurm(env: dict | None = None) -> None:
    """Slurm's programs are installed, and the configuration named by SLURM_CONF (``env``'s, else
    the process's) exists: Slurm's commands would retry a missing one for a minute."""
    miss = missing_programs()
    if miss:
        raise OptschedError(f"slurm: {', '.join(miss)} not installed ({INSTALL_HINT})")
    conf = (env or {}).get("SLURM_CONF") or os.environ.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):
        raise OptschedError(f"SLURM_CONF: {conf}: no such file (optsched slurm cluster up prints the line to use)")


def _prog(name: str) -> str:
    return shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin") or name


def unavailable_reason() -> str | None:
    """Why a local cluster cannot start here (for tests to skip with), or None."""
    miss = missing_programs()
    if miss:
        return f"Slurm not installed ({', '.join(miss)} missing; {INSTALL_HINT}; .ci/run does it)"
    if os.geteuid() != 0:
        return "the local Slurm cluster's daemons run as root (SlurmUser=root, munged as munge)"
    return None


def parse_nodes(spec: str) -> dict[str, int]:
    """``v100=2,k80=2`` → {type: number of nodes}."""
    out: dict[str, int] = {}
    for part in spec.split(","):
        name, eq, count = part.strip().partition("=")
        if not eq or not name.strip() or not count.strip().isdigit() or int(count) < 1:
            raise OptschedError(f"--nodes: {part.strip()!r} is not TYPE=COUNT with COUNT >= 1 (e.g. v100=2,k80=2)")
        if not name.replace("_", "").replace("-", "").isalnum():
            raise OptschedError(f"--nodes: GPU type {name!r} must be letters, digits, '-' or '_'")
        out[name.strip()] = int(count)
    return out


@dataclass(frozen=True)
class LocalCluster:
    """The cluster in ``dir``: ``nodes`` = {GPU type: node count}, ``gpus`` per node."""

    dir: str = DEFAULT_DIR
    nodes: dict = field(default_factory=lambda: dict(DEFAULT_NODES))
    gpus: int = DEFAULT_GPUS
    port: int = DEFAULT_PORT

    # -- paths ---------------------------------------------------------------
    @property
    def conf(self) -> str:
        return os.path.join(self.dir, "slurm.conf")

    @property
    def env(self) -> dict:
        """What a client (sbatch, squeue, the agent) needs to reach this cluster."""
        return {"SLURM_CONF": self.conf}

    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(sum(self.nodes.values()))]

    def node_types(self) -> dict[str, str]:
        names, out = iter(self.node_names()), {}
        for t, c in self.nodes.items():
            for _ in range(c):
                out[next(names)] = t
        return out

    def _pidfile(self, daemon: str) -> str:
        return os.path.join(self.dir, "run", f"{daemon}.pid")

    # -- files ---------------------------------------------------------------
    def _users(self) -> tuple[str, str]:
        """(slurm user, munge user)."""
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("munge")
                return "root", "munge"
            except KeyError:
                return "root", "root"
        me = pwd.getpwuid(os.geteuid()).pw_name
        return me, me

    def slurm_conf(self) -> str:
        host = socket.gethostname()
        slurm_user, _ = self._users()
        d = self.dir
        lines = [
            "# Written by optsched.slurm.localcluster: a test cluster on one host.",
            "ClusterName=optsched",
            f"SlurmctldHost={host}",
            f"SlurmctldPort={self.port}",
            f"SlurmUser={slurm_user}",
            f"SlurmdUser={slurm_user}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={d}/munge/munge.socket.2",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/run/slurmctld.pid",
            f"SlurmdPidFile={d}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log",
            f"SlurmdLogFile={d}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SchedulerType=sched/backfill",
            # A released job that was requeued waited ~2 s for the next scheduling pass (and 2 min without
            # the agent's StartTime=now): test the whole queue every second, it is a small cluster.
            "SchedulerParameters=sched_interval=1,bf_interval=1,batch_sched_delay=0",
            "SlurmdParameters=config_overrides",  # CPUs below may exceed this machine's cores
            "ReturnToService=2",
            "MinJobAge=3600",  # finished jobs stay visible to scontrol for an hour (exit codes; no slurmdbd)
            "KillWait=2",
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=120",
            "JobRequeue=1",
            "PropagateResourceLimits=NONE",
        ]
        for i, (name, t) in enumerate(self.node_types().items()):
            lines.append(f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={self.port + 100 + i} "
                         f"CPUs={max(2 * self.gpus, 2)} RealMemory=4000 Gres=gpu:{t}:{self.gpus} State=UNKNOWN")
        lines.append("PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO")
        return "\n".join(lines) + "\n"

    def gres_conf(self) -> str:
        last = self.gpus - 1
        return "".join(f"NodeName={n} Name=gpu Type={t} File={self.dir}/gpus/{n}/gpu[0-{last}]\n"
                       if last > 0 else f"NodeName={n} Name=gpu Type={t} File={self.dir}/gpus/{n}/gpu0\n"
                       for n, t in self.node_types().items())

    def _check_dir(self, munge_user: str) -> None:
        """munged (another user) must reach its folder: every parent searchable by others."""
        if munge_user == pwd.getpwuid(os.geteuid()).pw_name:
            return
        p = os.path.dirname(os.path.abspath(self.dir))
        while True:
            if os.path.exists(p) and not os.stat(p).st_mode & 0o001:
                raise OptschedError(f"slurm cluster: --dir {self.dir}: its parent {p} is not searchable by the "
                                    f"{munge_user} user (mode {oct(os.stat(p).st_mode & 0o777)}); "
                                    f"use a folder such as {DEFAULT_DIR}")
            if p == os.path.dirname(p):
                return
            p = os.path.dirname(p)

    def _write_files(self) -> None:
        slurm_user, munge_user = self._users()
        self._check_dir(munge_user)
        for sub in ("state", "run", "log", "spool", "gpus"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        os.chmod(self.dir, 0o755)
        for n in self.node_names():
            os.makedirs(os.path.join(self.dir, "spool", n), exist_ok=True)
            os.makedirs(os.path.join(self.dir, "gpus", n), exist_ok=True)
            for g in range(self.gpus):
                open(os.path.join(self.dir, "gpus", n, f"gpu{g}"), "a").close()
        mdir = os.path.join(self.dir, "munge")
        os.makedirs(mdir, exist_ok=True)
        key = os.path.join(mdir, "munge.key")
        if not os.path.exists(key):
            with open(key, "wb") as f:
                f.write(os.urandom(1024))
        pw = pwd.getpwnam(munge_user)
        for p in (mdir, key):
            os.chown(p, pw.pw_uid, pw.pw_gid)
        os.chmod(mdir, 0o700)
        os.chmod(key, 0o400)
        for name, text in (("slurm.conf", self.slurm_conf()), ("gres.conf", self.gres_conf())):
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(text)

    # -- processes -------------------------------------------------------------
    def _pid(self, daemon: str) -> int | None:
        """The pid in the daemon's pid file when that process is alive."""
        try:
            with open(self._pidfile(daemon)) as f:
                pid = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        try:  # a recycled pid is not our daemon
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if daemon.split("-")[0].encode() not in f.read():
                    return None
        except OSError:
            pass
        return pid

    def _daemons(self) -> list[str]:
        return ["munged", "slurmctld"] + [f"slurmd-{n}" for n in self.node_names()]

    def _run(self, argv: list[str], what: str) -> None:
        env = {**os.environ, **self.env}
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=HANG)
        if r.returncode != 0:
            said = (r.stderr or r.stdout).strip().splitlines()
            raise OptschedError(f"slurm cluster: {what} failed: {said[-1] if said else f'exit {r.returncode}'} "
                                f"(logs in {self.dir}/log)")

    def _start_munged(self) -> None:
        if self._pid("munged"):
            return
        _, munge_user = self._users()
        m = os.path.join(self.dir, "munge")
        argv = [_prog("munged"), f"--socket={m}/munge.socket.2", f"--key-file={m}/munge.key",
                f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed", "--force"]
        if os.geteuid() == 0 and munge_user != "root":
            argv = [_prog("runuser"), "-u", munge_user, "--"] + argv
        self._run(argv, "munged")
        # munged writes its pid file in its own (private) folder; keep a copy beside the others
        deadline = time.monotonic() + HANG
        while time.monotonic() < deadline:
            try:
                with open(os.path.join(m, "munged.pid")) as f:
                    pid = f.read().strip()
                if pid:
                    with open(self._pidfile("munged"), "w") as g:
                        g.write(pid + "\n")
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise OptschedError(f"slurm cluster: munged did not start (see {m}/munged.log)")

    def start_controller(self) -> None:
        if not self._pid("slurmctld"):
            self._run([_prog("slurmctld"), "-f", self.conf], "slurmctld")
            self._wait_pid("slurmctld")

    def _start_slurmd(self, node: str) -> None:
        if not self._pid(f"slurmd-{node}"):
            self._run([_prog("slurmd"), "-f", self.conf, "-N", node], f"slurmd -N {node}")
            self._wait_pid(f"slurmd-{node}")

    def _wait_pid(self, daemon: str, timeout: float = HANG) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._pid(daemon):
                return
            time.sleep(0.05)
        raise OptschedError(f"slurm cluster: {daemon} did not start (see {self.dir}/log)")

    def up(self, timeout: float = HANG) -> dict:
        """Start whatever is not running and wait until every node is idle or in use.
        Idempotent: a running cluster is only checked."""
        require_slurm()
        existing = os.path.join(self.dir, "slurm.conf")
        if os.path.exists(existing) and self._pid("slurmctld"):
            with open(existing) as f:
                if f.read() != self.slurm_conf():
                    raise OptschedError(f"slurm cluster: {self.dir} already runs a cluster with other nodes or "
                                        "ports; run 'down' first or use another --dir")
        self._write_files()
        self._start_munged()
        self.start_controller()
        for n in self.node_names():
            self._start_slurmd(n)
        return self.wait_ready(timeout)

    def wait_ready(self, timeout: float = HANG) -> dict:
        """Wait until slurmctld answers and no node is down or unknown."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                st = self.node_states()
                last = st
                if st and all(s.split("+")[0].split("*")[0] in ("IDLE", "MIXED", "ALLOCATED", "COMPLETING")
                              for s in st.values()):
                    return st
            except OptschedError:
                pass
            if time.monotonic() > deadline:
                raise OptschedError(f"slurm cluster: nodes not ready after {timeout:g} s ({last}); "
                                    f"see {self.dir}/log")
            time.sleep(0.2)

    def node_states(self) -> dict[str, str]:
        from optsched.slurm.cli import scontrol_nodes

        return {n["NodeName"]: n.get("State", "") for n in scontrol_nodes(self.env)}

    def down(self, timeout: float = 20) -> list[str]:
        """Stop the daemons this folder started (slurmd, slurmctld, munged); returns what was stopped."""
        stopped = []
        for daemon in reversed(self._daemons()):
            pid = self._pid(daemon)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self._alive(pid):
                time.sleep(0.05)
            if self._alive(pid):
                os.kill(pid, signal.SIGKILL)
            stopped.append(daemon)
        return stopped

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        try:  # a zombie child of ours counts as gone
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
        return True

    def restart_controller(self) -> None:
        """Stop slurmctld (SIGTERM: it saves its state) and start it again."""
        pid = self._pid("slurmctld")
        if pid:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + HANG  # (it saves its state first: a second one must not start before)
            while time.monotonic() < deadline and self._alive(pid):
                time.sleep(0.05)
        self.start_controller()
        self.wait_ready()

    def leaked_gpus(self) -> dict[str, list[int]]:
        """{node: GPU indices} Slurm counts as used that no running job holds. Slurm 22.05 leaks a
        job's GPUs when slurmctld stops right after allocating it (seen in tests/test_slurm_agent.py:
        the job ended, its 2 GPUs stayed used, and a 4-GPU job placed there pended forever); a
        restart of the controller recounts them."""
        from optsched.slurm.cli import gpu_indices, parse_record, run, scontrol_jobs_detail

        def held() -> dict[str, set]:
            out: dict[str, set] = {}
            for rec in scontrol_jobs_detail(self.env).values():
                if rec.get("JobState") in ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"):
                    for node, idx in gpu_indices(rec).items():
                        out.setdefault(node, set()).update(idx)
            return out

        before = held()  # (jobs read before and after the nodes: one that starts or ends meanwhile is held)
        nodes = [parse_record(ln) for ln in run(["scontrol", "-o", "-d", "show", "nodes"], self.env).stdout.splitlines()
                 if ln.startswith("NodeName=")]
        after = held()
        leaked = {}
        for rec in nodes:
            n = rec["NodeName"]
            used = set(gpu_indices({"Nodes": n, "GRES": rec.get("GresUsed", "")}).get(n, []))
            extra = used - before.get(n, set()) - after.get(n, set())
            if extra:
                leaked[n] = sorted(extra)
        return leaked

    def remove(self) -> None:
        """Stop it and delete its folder (a test's cluster)."""
        self.down()
        shutil.rmtree(self.dir, ignore_errors=True)

    def status(self) -> dict:
        """{daemon: pid or None} and the nodes' states when the controller answers."""
        out = {"dir": self.dir, "conf": self.conf, "daemons": {d: self._pid(d) for d in self._daemons()}}
        try:
            out["nodes"] = self.node_states() if out["daemons"]["slurmctld"] else {}
        except OptschedError as e:
            out["nodes"] = {"error": str(e)}
        return out


def from_dir(dir: str = DEFAULT_DIR, nodes: str | None = None, gpus: int | None = None,
             port: int | None = None) -> LocalCluster:
    """The cluster of ``dir``: its options, else those its slurm.conf was written with, else the defaults."""
    kw = {}
    conf = os.path.join(dir, "slurm.conf")
    if os.path.exists(conf) and nodes is None and gpus is None and port is None:
        types, count = {}, None
        with open(conf) as f:
            for line in f:
                if line.startswith("SlurmctldPort="):
                    kw["port"] = int(line.split("=", 1)[1])
                elif line.startswith("NodeName="):
                    gres = next(w for w in line.split() if w.startswith("Gres="))
                    _, t, c = gres.split("=", 1)[1].split(":")
                    types[t] = types.get(t, 0) + 1
                    count = int(c)
        if types:
            kw["nodes"], kw["gpus"] = types, count
    if nodes is not None:
        kw["nodes"] = parse_nodes(nodes)
    if gpus is not None:
        if gpus < 1:
            raise OptschedError(f"--gpus: must be >= 1, got {gpus}")
        kw["gpus"] = gpus
    if port is not None:
        kw["port"] = port
    return LocalCluster(dir=os.path.abspath(dir), **kw)


def fresh(dir: str, nodes: str = "v100=2,k80=2", gpus: int = DEFAULT_GPUS, port: int = DEFAULT_PORT) -> LocalCluster:
    """A new cluster in ``dir`` (whatever ran there before is stopped and deleted), up."""
    c = from_dir(dir, nodes, gpus, port)
    c.remove()
    c.up()
    return c


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m optsched.slurm.localcluster", description=__doc__.splitlines()[0])
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--dir", default=DEFAULT_DIR)
    p.add_argument("--nodes", default=None, help="GPU type=node count, e.g. v100=2,k80=2 (default)")
    p.add_argument("--gpus", type=int, default=None, help="GPUs per node (default 4)")
    p.add_argument("--port", type=int, default=None, help="slurmctld's port (nodes: PORT+100+i; default 17000)")
    a = p.parse_args(argv)
    try:
        print(act(a.action, a.dir, a.nodes, a.gpus, a.port))
    except OptschedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def act(action: str, dir: str, nodes=None, gpus=None, port=None) -> str:
    c = from_dir(dir, nodes, gpus, port)
    if action == "up":
        st = c.up()
        return (f"slurm cluster up in {c.dir}: " + ", ".join(f"{n} {t}x{c.gpus} {st.get(n, '?').lower()}"
                                                              for n, t in c.node_types().items())
                + f"\nexport SLURM_CONF={c.conf}")
    if action == "down":
        stopped = c.down()
        return f"stopped {', '.join(stopped)}" if stopped else f"nothing running in {c.dir}"
    st = c.status()
    lines = [f"{d}: {'pid ' + str(pid) if pid else 'not running'}" for d, pid in st["daemons"].items()]
    nodes_ = st.get("nodes") or {}
    lines += [f"node {n}: {s}" for n, s in nodes_.items()]
    lines.append(f"export SLURM_CONF={c.conf}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
