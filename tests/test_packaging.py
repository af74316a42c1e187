"""The distribution ships every package: a subpackage missing from
pyproject's explicit list works in an editable install (CI's) and breaks a
plain `pip install .` — so the list is checked against the tree. And the
public API: py.typed, LICENSE, `import optsched` light with submodules as
attributes, every export documented and typed, `python -m optsched`, bare
`optsched` printing its help, suggestions for misspelled names."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_in_the_tree_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    dirs = {pkg: ROOT / d for pkg, d in config["package-dir"].items()}
    in_tree = set()
    for top, path in dirs.items():
        for init in path.rglob("__init__.py"):
            rel = init.parent.relative_to(path).parts
            if "__pycache__" not in rel:
                in_tree.add(".".join((top, *rel)))
    missing = sorted(in_tree - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
    # Data-only packages (no __init__.py) are listed so setuptools ships their files quietly.
    data_only = {pkg for pkg in config.get("package-data", {}) if (ROOT / pkg.replace(".", "/")).is_dir()}
    assert not sorted(listed - in_tree - data_only), "pyproject lists packages that do not exist"


# ---------------------------------------------------------------- the public API

def test_py_typed_and_license_ship():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert (ROOT / "optsched" / "py.typed").is_file()
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["optsched"]
    text = (ROOT / "LICENSE").read_text()
    assert config["project"]["license"] == "Apache-2.0"
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text


def test_import_optsched_is_light_and_submodules_are_attributes():
    code = ("import sys, optsched; light = not {'scipy', 'pandas', 'httpx', 'fastapi'} & set(sys.modules); "
            "f = optsched.policy.solve_instance; g = optsched.allocator.Allocator; "
            "print(light, f.__module__, g is optsched.Allocator, optsched.Client.__module__)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "optsched.policy", "True", "optsched.client"]
    import optsched

    with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
        optsched.no_such_thing  # noqa: B018


def test_everything_exported_is_documented_and_typed():
    import inspect

    import optsched

    assert {"Allocator", "simulate", "solve", "Client", "Session", "parse_snapshot"} <= set(optsched.__all__)
    for name in optsched.__all__:
        obj = getattr(optsched, name)
        if name == "__version__":
            continue
        # Its own docstring: inspect.getdoc would find pydantic's BaseModel's for an undocumented model.
        own = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
        assert own and own.strip(), f"optsched.{name} has no docstring"
        if inspect.isfunction(obj):
            sig = inspect.signature(obj)
            assert sig.return_annotation is not inspect.Signature.empty, f"optsched.{name}: no return type"
            for p in sig.parameters.values():
                assert p.kind is p.VAR_KEYWORD or p.annotation is not inspect.Parameter.empty, (name, p.name)
        if inspect.isclass(obj):
            for meth, fn in inspect.getmembers(obj, inspect.isfunction):
                if not meth.startswith("_") and fn.__module__.startswith("optsched"):
                    assert inspect.getdoc(fn), f"optsched.{name}.{meth} has no docstring"


def test_python_m_optsched_and_bare_optsched_print_help():
    r = subprocess.run([sys.executable, "-m", "optsched", "--version"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().startswith("optsched ")
    r = subprocess.run([sys.executable, "-m", "optsched"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "Usage:" in r.stdout and "solve" in r.stdout and "Missing command" not in r.stdout + r.stderr


@pytest.mark.parametrize("args, line", [
    (["solv"], "error: No such command 'solv'. Did you mean 'solve'?"),
    (["solve", "--polcy", "fifo"], "error: No such option: --polcy; did you mean --policy?"),
    (["solve", "--policy", "max_min_fairnes"], "error: --policy: unknown policy 'max_min_fairnes'; did you mean "
                                               "'max_min_fairness'? (choose from "),
])
def test_a_misspelled_command_option_or_policy_gets_a_suggestion(args, line):
    from typer.testing import CliRunner

    from optsched.cli import app

    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1].startswith(line), res.output


def test_the_python_api_suggests_a_policy_too():
    import optsched

    snap = (ROOT / "examples" / "snapshot.json").read_text()
    with pytest.raises(optsched.OptschedError, match=r"^policy: unknown policy 'lass'; did you mean 'las'\? \(choose"):
        optsched.solve(snap, policy="lass")
    with pytest.raises(optsched.OptschedError, match=r"^policy: unknown policy 'fifoo'; did you mean 'fifo'\? \(choose"):
        optsched.Session.create({"cluster": {"gpus": {"v100": 1}}, "policy": "fifoo"})  # a session, in process


# Python started in a checkout's root imports ./optsched, not the installed package; solvers/,
# formulations/ and traces/ sit beside it (pyproject's package-dir), so with a plain
# `pip install .` the first solve was `No module named 'optsched.solvers'`. The editable
# install's finder hid that; the child drops it to see what a plain install sees.
WITHOUT_EDITABLE_FINDER = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", type(f).__module__)]
sys.path_hooks[:] = [h for h in sys.path_hooks if "__editable__" not in getattr(h, "__module__", "")]
sys.path_importer_cache.clear()
import optsched, optsched.solvers.block_lp, optsched.formulations.base, optsched.traces.trace
a = optsched.solve(open("examples/snapshot.json").read())
print(a.status, optsched.solvers.__file__)
"""


def test_python_in_the_checkout_root_finds_the_subpackages_beside_optsched():
    r = subprocess.run([sys.executable, "-c", WITHOUT_EDITABLE_FINDER], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    status, where = r.stdout.split()
    assert status == "optimal" and Path(where) == ROOT / "solvers" / "__init__.py"
