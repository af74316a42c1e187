"""A light core and optional extras: `pip install optsched` gives the solve path,
the allocator and the client; a command or function that needs a missing
extra says in one line which one to install (exit 2), never a traceback.

A missing package is simulated by ``sys.modules[name] = None`` in a fresh
interpreter (what Python does for a module that cannot be imported), so the
checks hold whatever this environment has installed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from optsched.extras import EXTRA_OF_MODULE, EXTRAS, MissingExtra, extra_of, message

ROOT = Path(__file__).resolve().parents[1]
# Every optional module: what a core install lacks.
OPTIONAL = sorted(EXTRA_OF_MODULE)
# The distribution that provides each optional module (pyproject names distributions).
DISTRIBUTION = {"yaml": "pyyaml", "sklearn": "scikit-learn", "interpret": "interpret-core", "starlette": "fastapi"}


def run_blocked(blocked, code: str, cwd: Path) -> subprocess.CompletedProcess:
    """``code`` in a new interpreter where the ``blocked`` modules cannot be imported."""
    pre = f"import sys\nfor _m in {sorted(blocked)!r}:\n    sys.modules[_m] = None\n"
    return subprocess.run([sys.executable, "-c", pre + textwrap.dedent(code)], cwd=cwd, capture_output=True,
                          text=True, timeout=600)  # (only a hang reaches it; a busy machine is slow)


def cli_blocked(blocked, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return run_blocked(blocked, f"sys.argv = ['optsched', *{args!r}]\nfrom optsched.cli import main\nmain()\n", cwd)


def _requirement_names(reqs: list[str]) -> set[str]:
    import re

    return {re.split(r"[<>=!\[; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}


def test_pyproject_core_is_light_and_every_optional_module_has_its_extra():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _requirement_names(project["dependencies"])
    heavy = {"jax", "jaxlib", "cvxpy", "ortools", "pandas", "pyarrow", "matplotlib", "fastapi", "uvicorn", "ray",
             "scikit-learn", "protobuf"}
    assert not core & heavy, f"heavy packages in the core: {sorted(core & heavy)}"
    extras = project["optional-dependencies"]
    for module, extra in EXTRA_OF_MODULE.items():
        assert extra in extras and extra in EXTRAS, extra
        # The extra lists the module's distribution, itself or through another extra of optsched.
        names = set(_requirement_names(extras[extra]))
        for req in extras[extra]:
            if req.startswith("optsched["):
                for sub in req[len("optsched["):-1].split(","):
                    names |= _requirement_names(extras[sub])
        assert DISTRIBUTION.get(module, module).replace("_", "-") in names, (module, extra)
    # [test] brings every extra; [all] every user-facing one.
    selves = [r[len("optsched["):-1].split(",") for r in extras["test"] if r.startswith("optsched[")]
    assert any("all" in names for names in selves), extras["test"]
    listed = extras["all"][0][len("optsched["):-1].split(",")
    assert set(EXTRAS) <= set(listed)
    # The pin that keeps highspy and ortools from loading two libhighs.so.1 in one process.
    assert any(r.replace(" ", "").startswith("highspy>=1.14,<1.15") for r in project["dependencies"])


def test_the_solve_path_allocator_and_client_run_without_any_extra(tmp_path):
    r = run_blocked(OPTIONAL, """
        import json
        import httpx
        import optsched
        from optsched.cli.solve import example_snapshot_text
        snap = optsched.parse_snapshot(example_snapshot_text())
        alloc = optsched.solve(snap)
        placement = optsched.Allocator.from_snapshot(snap).next_round(snap, alloc)
        reply = {**alloc.to_dict(), "explanation": {}}
        transport = httpx.MockTransport(lambda request: httpx.Response(200, json=reply))
        remote = optsched.Client("http://test", transport=transport).solve(snap)
        loaded = sorted(m for m, v in sys.modules.items() if v is not None and m.split(".")[0] in %r)
        print(json.dumps({"status": alloc.status, "placed": len(placement.assignments),
                          "remote": remote.objective == alloc.objective, "loaded": loaded}))
        """ % (OPTIONAL,), tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out == {"status": "optimal", "placed": out["placed"], "remote": True, "loaded": []}
    assert out["placed"] > 0
    cli = cli_blocked(OPTIONAL, ["solve", "--json"], tmp_path)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["status"] == "optimal"


@pytest.mark.parametrize("blocked, args, extra", [
    (["fastapi", "uvicorn"], ["serve", "--port", "0"], "service"),
    (["pandas"], ["simulate"], "sim"),
    (["pandas"], ["sweep", "gavel", "--policies", "fifo"], "sim"),
    (["pandas"], ["report", "."], "sim"),
    (["cvxpy"], ["solve", "--policy", "hadar"], "milp"),
    (["cvxpy"], ["bench", "--quick"], "bench"),
])
def test_a_command_without_its_extra_names_it_in_one_line(blocked, args, extra, tmp_path):
    r = cli_blocked(blocked, args, tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("error: ") and lines[0].endswith(f"pip install 'optsched[{extra}]'"), lines[0]
    assert f"needs the '{extra}' extra" in lines[0]


def test_serve_names_the_service_extra_exactly(tmp_path):
    r = cli_blocked(["fastapi"], ["serve", "--port", "0"], tmp_path)
    assert r.stderr.strip() == "error: optsched serve needs the 'service' extra: pip install 'optsched[service]'"
    assert r.returncode == 2


def test_python_api_raises_missing_extra_naming_it(tmp_path):
    r = run_blocked(["pandas"], """
        import optsched
        try:
            optsched.simulate()
        except optsched.MissingExtra as e:
            assert isinstance(e, ModuleNotFoundError) and isinstance(e, optsched.OptschedError)
            print(e)
        """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "optsched.simulate needs the 'sim' extra: pip install 'optsched[sim]'"
    r = run_blocked(["pandas"], """
        import optsched
        try:
            optsched.report
        except optsched.MissingExtra as e:
            print(e)
        """, tmp_path)
    assert r.stdout.strip() == "optsched.report needs the 'sim' extra: pip install 'optsched[sim]'", r.stderr


def test_extra_of_and_message_in_process(monkeypatch):
    assert extra_of("matplotlib.pyplot") == "sim" and extra_of("jax.numpy") == "goodput"
    assert extra_of("numpy") is None and extra_of(None) is None
    assert message("x", "milp") == "x needs the 'milp' extra: pip install 'optsched[milp]'"
    from optsched.extras import require

    monkeypatch.setitem(sys.modules, "cvxpy", None)
    with pytest.raises(MissingExtra, match=r"^hadar needs the 'milp' extra"):
        require("cvxpy", "hadar")
    monkeypatch.setitem(sys.modules, "not_an_optional_module_xyz", None)
    with pytest.raises(ModuleNotFoundError) as e:
        require("not_an_optional_module_xyz", "x")
    assert not isinstance(e.value, MissingExtra)


def test_a_sweep_run_that_needs_a_missing_extra_fails_naming_it(monkeypatch):
    """A run of a sweep (in a worker) that reaches a missing module records which extra brings it."""
    import optsched.sim
    from optsched.sweep.worker import execute

    def needs_jax(*args, **kwargs):
        import jax  # noqa: F401

    monkeypatch.setitem(sys.modules, "jax", None)
    monkeypatch.setattr(optsched.sim, "simulate_flags", needs_jax)
    out = execute({"trace": "gavel", "trace_options": {"jobs": 3}, "load": 5.0, "seed": 0, "cluster": None,
                   "options": {}, "policy": "fifo"})
    assert out["status"] == "failed"
    assert out["error"] == "MissingExtra: the run needs the 'goodput' extra: pip install 'optsched[goodput]'"


def test_cpsat_placement_without_ortools_names_the_milp_extra_in_any_round(monkeypatch):
    """Without OR-Tools, cpsat failed only in rounds the greedy could not settle (a raw ModuleNotFoundError)."""
    import numpy as np

    from optsched.model import Cluster
    from optsched.placement import Layout, place

    monkeypatch.setitem(sys.modules, "ortools", None)
    layout = Layout.from_cluster(Cluster(gpus={"v100": 8})).types["v100"]
    with pytest.raises(MissingExtra, match=r"^placement cpsat needs the 'milp' extra"):
        place(layout, np.array([1]), [None], policy="cpsat")
