"""optsched report: one self-contained HTML page with the sweep's plots; it
renders in headless Chromium without console errors."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from optsched.cli import app
from optsched.report.figures import unit_of
from optsched.sweep import run_sweep, spec_from_dict

SPEC = {"trace": "gavel", "policies": ["max_min_fairness", "fifo", "auto"], "loads": [4, 8], "seeds": [0],
        "cluster": "v100=2,p100=2,k80=2", "trace_options": {"jobs": 4, "length_scale": 0.1}, "auto": {"every": 5},
        "executor": "local", "workers": 2}


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    res = run_sweep(spec_from_dict(SPEC), out)
    assert res.failed == 0, res.table[["policy", "error"]]
    r = CliRunner().invoke(app, ["report", str(out)])
    assert r.exit_code == 0, r.output
    return out


def test_report_is_self_contained(report_dir):
    page = (report_dir / "report.html").read_text()
    for name in ("jct_cdf", "jct_vs_load", "utilization", "auto_choices"):
        assert (report_dir / f"{name}.png").stat().st_size > 5000, name
    srcs = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert srcs and all(s.startswith("data:") for s in srcs), srcs  # nothing outside the file
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', page)) == 4
    assert "<script" not in page
    assert "<title>optsched sweep: gavel (jobs 4, length_scale 0.1) on v100=2,p100=2,k80=2</title>" in page
    assert "avg JCT (h)" in page or "avg JCT (s)" in page
    assert "Decisions per candidate" in page


def test_units_fit_the_data():
    t = pd.DataFrame({"median_jct": [120.0, 300.0]})
    assert unit_of(t, None) == ("s", 1.0)
    assert unit_of(t, pd.DataFrame({"jct": [7200.0, 9000.0, np.nan]})) == ("h", 3600.0)


def test_report_errors(tmp_path):
    r = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 2 and "no results.parquet" in r.output


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium not installed (apt-get install chromium)")
def test_report_renders_in_headless_chromium(report_dir, tmp_path):
    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--enable-logging=stderr",
         "--v=0", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,4200", f"--screenshot={shot}",
         (report_dir / "report.html").resolve().as_uri()],
        capture_output=True, text=True, timeout=600)  # (only a hang reaches it; a busy machine is slow)
    assert shot.exists(), proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console  # no console errors (or any console message)
    import matplotlib.image as mpimg

    img = (mpimg.imread(shot)[:, :, :3] * 255).astype(int)
    # The plot lines: matplotlib's first two colors (tab:blue, tab:orange) must be on screen.
    for rgb in ((31, 119, 180), (255, 127, 14)):
        near = (np.abs(img - np.array(rgb)).sum(axis=2) < 30).sum()
        assert near > 500, (rgb, near)
    # Four figures were decoded: tall non-white regions, not a blank page.
    nonwhite_rows = (img.sum(axis=2) < 740).any(axis=1).sum()
    assert nonwhite_rows > 1500, nonwhite_rows
