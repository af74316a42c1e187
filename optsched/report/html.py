"""Assembling the page: tables as HTML, figures as embedded PNGs."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from optsched.model import OptschedError

CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 2em auto; max-width: 1200px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f4f4f4; } td.l, th.l { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; } .note { color: #666; font-size: 0.85em; }
.failed { color: #b00; }
"""


def _trace_name(t: str) -> str:
    return t if "/" not in t else Path(t).name


def _fmt(x, digits=2) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "–"
    if isinstance(x, (int, np.integer)):
        return f"{x:,}"
    return f"{x:,.{digits}f}"


def summary_table(table: pd.DataFrame, unit: tuple[str, float]) -> str:
    ok = table[table["status"] == "ok"]
    u, div = unit
    cols = [("avg_jct", f"avg JCT ({u})", div), ("p99_jct", f"p99 JCT ({u})", div),
            ("avg_responsiveness", f"avg responsiveness ({u})", div), ("makespan", f"makespan ({u})", div),
            ("utilization", "utilization", 1.0), ("jobs_completed", "jobs completed", 1.0)]
    cols = [c for c in cols if c[0] in ok]
    keys = ["cluster", "policy", "load"]
    head = "".join(f'<th class="l">{k}</th>' for k in keys) + "<th>seeds</th>" + "".join(f"<th>{n}</th>" for _, n, _ in cols)
    body = []
    grouped = table.groupby(keys, sort=True)
    for key, g in grouped:
        gok = g[g["status"] == "ok"]
        cells = "".join(f'<td class="l">{html.escape(str(v) if not isinstance(v, float) else f"{v:g}")}</td>' for v in key)
        nfail = int((g["status"] != "ok").sum())
        cells += f"<td>{len(gok)}" + (f' <span class="failed">({nfail} failed)</span>' if nfail else "") + "</td>"
        for col, _, d in cols:
            v = gok[col].astype(float) / d
            digits = 0 if col == "jobs_completed" else 2
            txt = _fmt(float(v.mean()), digits) if len(v) else "–"
            if len(v) > 1:
                txt += f" ± {_fmt(float(v.std(ddof=1)), digits)}"
            cells += f"<td>{txt}</td>"
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def failures_table(table: pd.DataFrame) -> str:
    bad = table[table["status"] != "ok"]
    if not len(bad):
        return ""
    rows = "".join(
        f'<tr><td class="l">{r.run_id}</td><td class="l">{html.escape(str(r.policy))}</td><td>{r.load:g}</td>'
        f'<td>{r.seed}</td><td class="l failed">{html.escape(str(r.error))}</td></tr>' for r in bad.itertuples())
    return ('<h2>Failed runs</h2><table><tr><th class="l">run</th><th class="l">policy</th><th>load</th><th>seed</th>'
            f'<th class="l">error</th></tr>{rows}</table>')


def choices_table(choices: pd.DataFrame) -> str:
    if choices is None or not len(choices):
        return ""
    counts = choices.groupby(["cluster", "load", "seed", "chosen"]).size().unstack(fill_value=0)
    head = "".join(f'<th class="l">{k}</th>' for k in ("cluster", "load", "seed")) + "".join(
        f"<th>{html.escape(str(c))}</th>" for c in counts.columns)
    rows = "".join("<tr>" + "".join(f'<td class="l">{html.escape(str(v))}</td>' for v in idx) +
                   "".join(f"<td>{int(x)}</td>" for x in r) + "</tr>" for idx, r in counts.iterrows())
    return f"<p>Decisions per candidate (count):</p><table><tr>{head}</tr>{rows}</table>"


def write_report(sweep_dir, out=None, title: str | None = None) -> tuple[Path, list[Path]]:
    from optsched.report import figures as F

    d = Path(sweep_dir)
    if not (d / "results.parquet").exists():
        raise OptschedError(f"report: {d} has no results.parquet (run optsched sweep --out {d} first)")
    table = pd.read_parquet(d / "results.parquet")
    if not len(table):
        raise OptschedError(f"report: {d}/results.parquet has no runs")
    jobs = pd.read_parquet(d / "jobs.parquet") if (d / "jobs.parquet").exists() else None
    rounds = pd.read_parquet(d / "rounds.parquet") if (d / "rounds.parquet").exists() else None
    choices = pd.read_csv(d / "auto_choices.csv") if (d / "auto_choices.csv").exists() else None
    spec = json.loads((d / "sweep.json").read_text()).get("spec", {}) if (d / "sweep.json").exists() else {}
    capacities = {}
    for run_id in table["run_id"]:
        s = d / "runs" / run_id / "summary.json"
        if s.exists():
            capacities[run_id] = json.loads(s.read_text()).get("config", {}).get("cluster", {})
    traces = sorted({_trace_name(t) for t in table["trace"]})
    clusters = sorted({str(c) for c in table["cluster"]})
    if "default" in clusters and capacities:
        cap = next(iter(capacities.values()))
        clusters = [", ".join(f"{k}={v}" for k, v in cap.items()) if c == "default" else c for c in clusters]
    topts = sorted({str(t) for t in table.get("trace_options", pd.Series(dtype=str))} - {"{}"})
    detail = ""
    if len(topts) == 1:
        o = json.loads(topts[0])
        detail = " (" + ", ".join(f"{k} {v}" for k, v in sorted(o.items()) if k != "throughputs") + ")"
    what = f"{' + '.join(traces)}{detail} on {' | '.join(clusters)}"
    title = title or f"optsched sweep: {what}"
    unit = F.unit_of(table, jobs)
    out_path = Path(out) if out else d / "report.html"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    figs = [("jct_cdf", "JCT distribution per policy",
             F.jct_cdf(jobs, unit, what) if jobs is not None and len(jobs) else None),
            ("jct_vs_load", "Average JCT and responsiveness against load", F.metrics_vs_load(table, unit, what)),
            ("utilization", "Utilization over time",
             F.utilization(rounds, capacities, unit, what) if rounds is not None else None),
            ("auto_choices", "Choices of auto", F.auto_choices(choices, what))]
    import io

    import matplotlib.pyplot as plt

    written, sections = [], []
    for name, heading, fig in figs:
        if fig is None:
            continue
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
        png = buf.getvalue()
        p = out_path.parent / f"{name}.png"
        p.write_bytes(png)
        written.append(p)
        extra = choices_table(choices) if name == "auto_choices" else ""
        sections.append(f'<h2>{html.escape(heading)}</h2><img alt="{html.escape(heading)}" '
                        f'src="data:image/png;base64,{base64.b64encode(png).decode()}">{extra}')
    ok = int((table["status"] == "ok").sum())
    meta = (f"{len(table)} runs ({ok} ok) · policies {', '.join(sorted(table['policy'].unique()))} · loads "
            f"{', '.join(f'{x:g}' for x in sorted(table['load'].unique()))} · seeds "
            f"{', '.join(str(x) for x in sorted(table['seed'].unique()))} · times in "
            f"{'seconds' if unit[0] == 's' else 'hours'}")
    load_note = ("load = arrival rate in jobs/h (generated trace)" if spec.get("trace") in ("gavel", "bursty")
                 else "load = arrival-rate multiplier (inter-arrival times scaled by 1/load)")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">
<title>{html.escape(title)}</title><style>{CSS}</style></head>
<body><h1>{html.escape(title)}</h1>
<p class="note">{html.escape(meta)}; {html.escape(load_note)}. Mean ± standard deviation over seeds.</p>
<h2>Summary</h2>{summary_table(table, unit)}
{failures_table(table)}
{''.join(sections)}
<h2>Configuration</h2><pre class="note">{html.escape(json.dumps(spec, indent=2, default=str))}</pre>
</body></html>
"""
    out_path.write_text(page)
    return out_path, written
