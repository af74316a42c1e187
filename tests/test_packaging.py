"""The distribution ships every package: a subpackage missing from
pyproject's explicit list works in an editable install (CI's) and breaks a
plain `pip install .` — so the list is checked against the tree."""

from __future__ import annotations

import tomllib
from pathlib import Path

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
