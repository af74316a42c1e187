"""The docs site builds with ``mkdocs build --strict`` (a broken link, a nav entry
to a missing page, a docstring mkdocstrings cannot render: each fails), and its
generated reference covers the code: every CLI command and option, every HTTP
path, every exported name."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
    reason="mkdocs / mkdocstrings not installed (pip install -e '.[docs]')",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", OPENBLAS_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"mkdocs build --strict failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}"
    return out


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def test_every_nav_page_is_built(site: Path):
    import yaml

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for v in node.values():
                yield from pages(v)
        elif isinstance(node, list):
            for v in node:
                yield from pages(v)

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    for md in pages(nav):
        built = site / (md[:-3] + ".html" if md.endswith("index.md") else md[:-3] + "/index.html")
        assert built.is_file(), f"{md} in the nav but not built ({built})"


def test_cli_reference_has_every_command_and_option(site: Path):
    import typer.main

    from optsched.cli import app

    text = _text(site / "reference" / "cli" / "index.html")
    root = typer.main.get_command(app)

    def walk(cmd, ctx, path):
        yield path, cmd
        if hasattr(cmd, "list_commands"):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    yield from walk(sub, sub.context_class(sub, info_name=name, parent=ctx), path + [name])

    n_options = 0
    for path, cmd in walk(root, root.context_class(root, info_name="optsched"), ["optsched"]):
        assert " ".join(path) in text, f"`{' '.join(path)}` missing from the CLI reference"
        for p in cmd.params:
            if p.param_type_name == "option" and not getattr(p, "hidden", False):
                n_options += 1
                assert p.opts[0] in text, f"{' '.join(path)} {p.opts[0]} missing from the CLI reference"
    assert n_options > 50


def test_http_reference_has_every_path(site: Path):
    from optsched.service import create_app

    text = _text(site / "reference" / "http" / "index.html")
    spec = create_app(":memory:").openapi()
    for path, methods in spec["paths"].items():
        for method in methods:
            assert f"{method.upper()} {path}" in text, f"{method.upper()} {path} missing from the HTTP reference"
    assert (site / "reference" / "openapi.json").is_file()


def test_python_reference_renders_docstrings(site: Path):
    import optsched

    text = _text(site / "reference" / "python" / "index.html")
    for name in ("parse_snapshot", "Session", "Client", "simulate"):
        assert name in text
    raw = (site / "reference" / "python" / "index.html").read_text()
    assert "<blockquote>\n<blockquote>" not in raw, "a docstring's >>> example rendered as nested quotes"
    for obj in (optsched.parse_snapshot, optsched.Allocator):
        first_line = " ".join((obj.__doc__ or "").strip().splitlines()[0].split())
        assert first_line and first_line in " ".join(text.split()), f"{obj.__name__}'s docstring is not on the page"
