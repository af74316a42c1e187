"""Every example in the docs site runs as written (docs/**/*.md).

The same rules as the README's (tests/test_readme.py): ```sh / ```bash blocks
run with bash (``set -e``), ```python blocks with the venv's python, and in
```text blocks every ``$ cmd`` line runs and its exit code is checked (0, or 2
when the shown output is an ``error:`` line). A block preceded by
``<!-- readme-test: skip (reason) -->`` is skipped with that reason.

Each page runs in its own scratch folder that looks like the repo root
(``examples/``, ``bench/`` ... linked, ``../shared/data`` = $OPTSCHED_PEER_DATA),
its blocks in page order, so a later block sees what an earlier one on the same
page wrote. Pages written by anyone are picked up: a new page's examples are
tested without registering it here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_readme import Block, extract_blocks, run_block, runnable, scratch_root

DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if not any(part.startswith((".", "_")) for part in p.relative_to(DOCS).parts))
CASES = [(page, b) for page in PAGES for b in extract_blocks(page.read_text()) if runnable(b)]


def _case_id(page: Path, block: Block) -> str:
    return f"{page.relative_to(DOCS).as_posix()}:L{block.line}-{block.lang}"


@pytest.fixture(scope="module")
def page_roots(tmp_path_factory):
    """One scratch repo root per page, made when its first block runs."""
    roots: dict[Path, Path] = {}

    def get(page: Path) -> Path:
        if page not in roots:
            roots[page] = scratch_root(tmp_path_factory, page.stem)
        return roots[page]

    return get


def test_docs_have_examples():
    assert PAGES, "no docs pages found"
    assert len(CASES) >= 15, f"only {len(CASES)} runnable blocks across {len(PAGES)} pages"


@pytest.mark.parametrize(("page", "block"), CASES, ids=[_case_id(p, b) for p, b in CASES])
def test_docs_block(page: Path, block: Block, page_roots):
    where = f"docs/{page.relative_to(DOCS).as_posix()} line {block.line} ({block.lang})"
    if block.skip:
        pytest.skip(f"{where}: {block.skip}")
    run_block(block, page_roots(page), where)


def test_skip_marker_needs_a_reason():
    """A bare skip marker (no reason) is not honoured: the block would run, and a
    reviewer could not tell why it was meant to be skipped."""
    page = "<!-- readme-test: skip () -->\n```sh\ntrue\n```\n<!-- readme-test: skip (needs a GPU) -->\n```sh\nfalse\n```\n"
    blocks = extract_blocks(page)
    assert [b.skip for b in blocks] == [None, "needs a GPU"]
