"""The README runs as written.

Every ```sh / ```bash block is run with bash (``set -e``), every ```python block
with the venv's python, and in ```text blocks every ``$ cmd`` line is run (its
output below it is illustrative: only the exit code is checked — 0, or 2 when the
shown output is an ``error:`` line). Blocks run in README order in one scratch
folder that looks like the repo root (``examples/``, ``bench/`` ... linked, and
``../shared/data`` = $OPTSCHED_PEER_DATA), so a later block sees the files an
earlier one wrote, with the venv's ``optsched`` first on PATH and a timeout per block.

A block preceded by ``<!-- readme-test: skip (reason) -->`` is not run (a server,
Ray, the whole suite, a long bench); the reason is required and shown as the skip.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, peer_data_dir

README = ROOT / "README.md"
BLOCK_TIMEOUT = float(os.environ.get("OPTSCHED_README_TIMEOUT", "600"))
RUN_LANGS = {"sh", "bash", "shell", "console", "python", "text"}
SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s*\((?P<reason>.*\S.*)\)\s*-->")


@dataclass
class Block:
    line: int  # 1-based line of the opening fence
    lang: str
    body: str
    skip: str | None


def extract_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, lang = len(m.group(1)), m.group(2).lower()
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        body = "\n".join(ln[indent:] if ln[:indent].strip() == "" else ln for ln in lines[i + 1 : j])
        prev = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        sk = SKIP.search(prev)
        blocks.append(Block(i + 1, lang, body, sk.group("reason") if sk else None))
        i = j + 1
    return blocks


def text_commands(body: str) -> list[tuple[str, int]]:
    """``$ cmd`` lines of a text block and the exit code their shown output implies."""
    out: list[tuple[str, int]] = []
    lines = body.splitlines()
    for k, ln in enumerate(lines):
        if ln.startswith("$ "):
            following = next((x for x in lines[k + 1 :] if x.strip()), "")
            expect = 2 if following.startswith("error:") and not following.startswith("$ ") else 0
            out.append((ln[2:], expect))
    return out


def runnable(block: Block) -> bool:
    if block.lang not in RUN_LANGS:
        return False
    if block.lang == "text":
        return bool(text_commands(block.body))
    return True


BLOCKS = [b for b in extract_blocks(README.read_text()) if runnable(b)]


def scratch_root(tmp_path_factory, name: str) -> Path:
    """A scratch repo root: the repo's folders linked, ../shared/data = the peer data
    (when present; blocks that name it are skipped otherwise, see ``run_block``)."""
    peer = peer_data_dir()
    base = tmp_path_factory.mktemp(name)
    root = base / "main"
    root.mkdir()
    for entry in os.listdir(ROOT):
        if entry.startswith(".") and entry != ".venv":
            continue
        (root / entry).symlink_to(ROOT / entry)
    (base / "shared").mkdir()
    if peer.is_dir():
        (base / "shared" / "data").symlink_to(peer)
    return root


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return scratch_root(tmp_path_factory, "readme")


def _env() -> dict:
    env = dict(os.environ)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    env["OPTSCHED_PEER_DATA"] = str(peer_data_dir())
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["PYTHONPATH"] = str(ROOT)
    return env


def _run(cmd: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=_env(), input=stdin, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)


def test_readme_has_blocks_and_few_skips():
    assert len(BLOCKS) >= 6
    skipped = [b for b in BLOCKS if b.skip]
    assert len(skipped) <= len(BLOCKS) // 2, [(b.line, b.skip) for b in skipped]


def run_block(block: Block, workdir: Path, where: str) -> None:
    """Run one block in ``workdir`` by the rules of the module docstring; fail naming ``where``.
    Without the peer data, a block that reads it (names ``shared/data`` or
    ``OPTSCHED_PEER_DATA``) is skipped: the others show what works without it."""
    if not peer_data_dir().is_dir() and ("shared/data" in block.body or "PEER_DATA" in block.body):
        pytest.skip(f"{where}: peer data not found at {peer_data_dir()} (set OPTSCHED_PEER_DATA)")
    if block.lang == "python":
        res = _run([sys.executable, "-"], workdir, stdin=block.body)
        assert res.returncode == 0, f"{where}:\n{block.body}\n--- stderr:\n{res.stderr[-3000:]}"
        return
    if block.lang == "text":
        for cmd, expect in text_commands(block.body):
            res = _run(["bash", "-c", cmd], workdir)
            assert res.returncode == expect, (
                f"{where}: `{cmd}` exited {res.returncode}, expected {expect}\n--- stderr:\n{res.stderr[-3000:]}")
            assert "Traceback" not in res.stderr, f"{where}: `{cmd}`\n{res.stderr[-3000:]}"
        return
    script = "set -e\n" + "\n".join(ln for ln in block.body.splitlines())
    res = _run(["bash", "-c", script], workdir)
    assert res.returncode == 0, f"{where}:\n{block.body}\n--- stderr:\n{res.stderr[-3000:]}"
    assert "Traceback" not in res.stderr, f"{where}\n{res.stderr[-3000:]}"


@pytest.mark.parametrize("block", BLOCKS, ids=[f"L{b.line}-{b.lang}" for b in BLOCKS])
def test_readme_block(block: Block, workdir: Path):
    if block.skip:
        pytest.skip(f"README line {block.line}: {block.skip}")
    run_block(block, workdir, f"README.md line {block.line} ({block.lang})")


def _snapshot_blocks() -> list[tuple[str, Block]]:
    """JSON blocks shaped like a snapshot, in the README and every docs page."""
    files = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    return [(f.relative_to(ROOT).as_posix(), b) for f in files for b in extract_blocks(f.read_text())
            if b.lang == "json" and '"cluster"' in b.body and '"jobs"' in b.body]


SNAPSHOT_BLOCKS = _snapshot_blocks()


@pytest.mark.parametrize(("where", "block"), SNAPSHOT_BLOCKS, ids=[f"{w}:L{b.line}-snapshot" for w, b in SNAPSHOT_BLOCKS])
def test_snapshot_examples_are_valid(where: str, block: Block):
    """A JSON block shaped like a snapshot is one ``optsched solve`` accepts (the
    documented example once broke its own rule that servers add up to ``gpus``)."""
    from optsched.model import parse_snapshot

    snap = parse_snapshot(block.body)
    assert snap.jobs, f"{where} line {block.line}: a snapshot example without jobs"


def test_docs_have_a_snapshot_example():
    assert SNAPSHOT_BLOCKS
