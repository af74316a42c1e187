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


README_TOUR = "the README's tour"


def test_tour_blocks_are_the_readmes():
    """The site's home repeats the README's tour; its blocks are skipped here
    because tests/test_readme.py runs them, so each must be a README block verbatim."""
    readme = {b.body for b in extract_blocks((ROOT / "README.md").read_text()) if not b.skip}
    tour = [(page, b) for page, b in CASES if b.skip and b.skip.startswith(README_TOUR)]
    assert tour, "docs/index.md has no tour blocks"
    for page, b in tour:
        assert b.body in readme, f"docs/{page.relative_to(DOCS)} line {b.line}: not a README block, so not tested"


def test_readme_links_exist():
    """The README is read on its own (GitHub, PyPI): its relative links must point at files."""
    import re

    text = (ROOT / "README.md").read_text()
    targets = [m.split("#")[0] for m in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in m and not m.startswith("#")]
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_skip_marker_needs_a_reason():
    """A bare skip marker (no reason) is not honoured: the block would run, and a
    reviewer could not tell why it was meant to be skipped."""
    page = "<!-- readme-test: skip () -->\n```sh\ntrue\n```\n<!-- readme-test: skip (needs a GPU) -->\n```sh\nfalse\n```\n"
    blocks = extract_blocks(page)
    assert [b.skip for b in blocks] == [None, "needs a GPU"]
