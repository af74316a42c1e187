"""A private local Slurm cluster for one test module: its own folder and its own ports, so two
test processes (xdist workers, two developers' runs, a helper's suite beside yours) never share
or tear down each other's cluster (the fixed folders and ports they used did: a second run's
``fresh()`` stopped the first run's daemons mid-test)."""

from __future__ import annotations

import os
import socket
import tempfile

from optsched.slurm.localcluster import fresh, parse_nodes


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def free_port_block(nodes: int) -> int:
    """A slurmctld port P with P and the nodes' P+100+i all free. The search starts at a point
    derived from the process id, so concurrent processes start apart."""
    span = 200 + nodes
    slots = (40000 - 20000) // span
    start = os.getpid() % slots
    for k in range(slots):
        p = 20000 + ((start + k) % slots) * span
        if _free(p) and all(_free(p + 100 + i) for i in range(nodes)):
            return p
    raise RuntimeError("no free port block for a local Slurm cluster in 20000-40000")


def private_cluster(name: str, nodes: str = "v100=2,k80=2", gpus: int = 4):
    """Up, in a fresh folder under /tmp (munged must reach it, so not pytest's private tmp_path)."""
    d = tempfile.mkdtemp(prefix=f"optsched-slurm-{name}-", dir="/tmp")
    os.chmod(d, 0o755)
    return fresh(d, nodes=nodes, gpus=gpus, port=free_port_block(sum(parse_nodes(nodes).values())))

