"""`optsched report DIR`: one self-contained HTML page from a sweep's folder."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from optsched.cli.common import app, console, user_errors


@app.command()
@user_errors
def report(
    sweep_dir: Path = typer.Argument(..., help="A sweep's output folder (optsched sweep --out DIR)."),
    out: Optional[Path] = typer.Option(None, "--out", help="HTML file (default DIR/report.html; PNGs beside it)."),
    title: Optional[str] = typer.Option(None, "--title", help="Page title (default: the trace and the cluster)."),
) -> None:
    """Summary table, JCT CDFs, JCT/responsiveness vs load, utilization, auto's choices."""
    from optsched.report import write_report

    path, figures = write_report(sweep_dir, out, title=title)
    console.print(f"wrote {path} ({len(figures)} figures: {', '.join(p.name for p in figures)})", highlight=False)
