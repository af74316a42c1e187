"""The local Slurm cluster tool (optsched.slurm.localcluster): a real slurmctld,
slurmd per node and munged; up is idempotent, typed fake GPUs are Slurm's GRES,
down stops exactly what this folder started."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from _slurm_private import free_port_block

from optsched.model import OptschedError
from optsched.slurm import cli as scli
from optsched.slurm.localcluster import LocalCluster, from_dir, parse_nodes, require_slurm, unavailable_reason


needs_slurm = pytest.mark.skipif(unavailable_reason() is not None, reason=unavailable_reason() or "")


def test_node_spec_is_checked():
    assert parse_nodes("v100=2,k80=1") == {"v100": 2, "k80": 1}
    for bad in ("v100", "v100=0", "=2", "v 100=1", "v100=x"):
        with pytest.raises(OptschedError, match="--nodes"):
            parse_nodes(bad)


def test_missing_slurm_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it; /usr/sbin is searched too, so hide that as well
    monkeypatch.setattr("optsched.slurm.localcluster._prog", lambda name: name)
    monkeypatch.setattr("optsched.slurm.localcluster.missing_programs", lambda: ["slurmctld", "munged"])
    with pytest.raises(OptschedError, match=r"slurmctld, munged not installed \(apt-get install"):
        require_slurm()
    r = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, ''); "
                        "import optsched.slurm.localcluster as m; m.missing_programs = lambda: ['slurmd']; "
                        "raise SystemExit(m.main(['up', '--dir', sys.argv[1]]))", str(tmp_path / "c")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "slurmd not installed" in r.stderr


def test_config_files_name_every_node_and_its_typed_gpus(tmp_path):
    c = LocalCluster(dir=str(tmp_path), nodes={"v100": 1, "k80": 2}, gpus=3, port=17900)
    conf, gres = c.slurm_conf(), c.gres_conf()
    assert "GresTypes=gpu" in conf and "SelectType=select/cons_tres" in conf
    assert [ln.split()[0] for ln in conf.splitlines() if ln.startswith("NodeName=")] == \
        ["NodeName=n0", "NodeName=n1", "NodeName=n2"]
    assert "Port=18002" in conf and "Gres=gpu:k80:3" in conf
    assert f"NodeName=n0 Name=gpu Type=v100 File={tmp_path}/gpus/n0/gpu[0-2]" in gres


@needs_slurm
def test_up_is_idempotent_and_down_stops_only_its_daemons(tmp_path):
    with pytest.raises(OptschedError, match="not searchable by the munge user"):
        from_dir(str(tmp_path / "cl"), port=17600).up()  # pytest's folders are private: munged could not reach it
    d = tempfile.mkdtemp(prefix="optsched-slurm-test-", dir="/tmp")
    os.chmod(d, 0o755)
    c = from_dir(d, nodes="v100=1,k80=1", gpus=2, port=free_port_block(2))
    try:
        states = c.up()
        assert set(states) == {"n0", "n1"}
        pids = c.status()["daemons"]
        assert all(pids.values())
        c.up()  # again: nothing restarted
        assert c.status()["daemons"] == pids
        nodes = {n["NodeName"]: scli.node_gres(n) for n in scli.scontrol_nodes(c.env)}
        assert nodes == {"n0": ("v100", 2), "n1": ("k80", 2)}
        # the folder's options are remembered: a plain from_dir reads them back
        assert from_dir(c.dir).slurm_conf() == c.slurm_conf()
        with pytest.raises(OptschedError, match="already runs a cluster"):
            from_dir(c.dir, nodes="v100=3").up()
    finally:
        stopped = c.down()
    assert set(stopped) == {"munged", "slurmctld", "slurmd-n0", "slurmd-n1"}
    assert not any(c.status()["daemons"].values())
    assert c.down() == []  # idempotent
    shutil.rmtree(d, ignore_errors=True)


@needs_slurm
def test_a_missing_slurm_conf_is_named_at_once(tmp_path):
    with pytest.raises(OptschedError, match=f"SLURM_CONF: {tmp_path}/none.conf: no such file"):
        require_slurm({"SLURM_CONF": str(tmp_path / "none.conf")})


def test_agent_options_are_checked_before_slurm_is_asked(tmp_path):
    from typer.testing import CliRunner

    from optsched.cli import app

    table = tmp_path / "t.json"
    cases = {'{"m": {"v100": "x"}}': "--throughputs: m.v100: must be a number, got 'x'",
             '{"m": {"v100": 0}}': "--throughputs: m.v100: must be",
             '["m"]': "--throughputs: must be a JSON object"}
    for text, message in cases.items():
        table.write_text(text)
        r = CliRunner().invoke(app, ["slurm", "--db", str(tmp_path / "a.db"), "--throughputs", str(table)])
        assert r.exit_code == 2 and message in r.output, r.output
    for args, message in ((["--round-length", "0"], "--round-length: must be >= 0.05"),
                          (["--rounds", "0"], "--rounds: must be >= 1")):
        r = CliRunner().invoke(app, ["slurm", "--db", str(tmp_path / "a.db"), *args])
        assert r.exit_code == 2 and message in r.output, r.output
    r = CliRunner().invoke(app, ["slurm", "status", "--db", str(tmp_path / "none.db")])
    assert r.exit_code == 2 and "--db: " in r.output and "no such file" in r.output
    assert not (tmp_path / "a.db").exists()  # refused before any state was made
