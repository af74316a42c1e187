"""The report's figures (matplotlib, Agg). Each function returns a Figure or None."""

from __future__ import annotations

import numpy as np
import pandas as pd


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def unit_of(table: pd.DataFrame, jobs: pd.DataFrame | None) -> tuple[str, float]:
    """("s", 1) for second-scale sweeps (median JCT under an hour), else ("h", 3600)."""
    jct = None
    if jobs is not None and "jct" in jobs:
        jct = jobs["jct"].dropna()
    if jct is None or not len(jct):
        jct = table.get("median_jct", pd.Series(dtype=float)).dropna()
    med = float(jct.median()) if len(jct) else 0.0
    return ("s", 1.0) if med < 3600 else ("h", 3600.0)


def _label(policy: str, cluster: str, many_clusters: bool) -> str:
    return f"{policy} @ {cluster}" if many_clusters else policy


def _legend(ax, axes=None, **kwargs) -> None:
    """A legend on ``ax`` of the labelled lines of ``axes`` (default: ``ax`` alone), one
    entry per label; none when nothing is labelled (a sweep in which no job completed:
    matplotlib would warn "No artists with labels found")."""
    entries = {}
    for a in axes if axes is not None else [ax]:
        for handle, label in zip(*a.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    if entries:
        ax.legend(list(entries.values()), list(entries), **kwargs)


def _pick_loads(loads: list[float], k: int = 4) -> list[float]:
    if len(loads) <= k:
        return loads
    idx = np.unique(np.linspace(0, len(loads) - 1, k).round().astype(int))
    return [loads[i] for i in idx]


def jct_cdf(jobs: pd.DataFrame, unit: tuple[str, float], title: str):
    plt = _plt()
    loads = _pick_loads(sorted(jobs["load"].unique().tolist()))
    many = jobs["cluster"].nunique() > 1
    fig, axes = plt.subplots(1, len(loads), figsize=(4.2 * len(loads) + 1, 3.6), squeeze=False, sharey=True)
    for ax, load in zip(axes[0], loads):
        sub = jobs[jobs["load"] == load]
        for (cluster, policy), g in sub.groupby(["cluster", "policy"], sort=True):
            x = np.sort(g["jct"].dropna().to_numpy()) / unit[1]
            if not len(x):
                continue
            ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=_label(policy, cluster, many))
        ax.set_xscale("log")
        from matplotlib.ticker import NullFormatter

        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"JCT ({unit[0]})")
        ax.set_title(f"load {load:g}")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("fraction of jobs")
    _legend(axes[0][-1], axes[0], fontsize=8, loc="lower right")
    fig.suptitle(f"JCT CDF (all seeds) — {title}", fontsize=10)
    fig.tight_layout()
    return fig


def metrics_vs_load(table: pd.DataFrame, unit: tuple[str, float], title: str):
    plt = _plt()
    ok = table[table["status"] == "ok"]
    many = ok["cluster"].nunique() > 1
    metrics = [(c, n) for c, n in (("avg_jct", "average JCT"), ("avg_responsiveness", "average responsiveness"))
               if c in ok]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 3.8), squeeze=False)
    for ax, (col, name) in zip(axes[0], metrics):
        for (cluster, policy), g in ok.groupby(["cluster", "policy"], sort=True):
            s = g.groupby("load")[col].agg(["mean", "min", "max"]).sort_index() / unit[1]
            line, = ax.plot(s.index, s["mean"], marker="o", label=_label(policy, cluster, many))
            ax.fill_between(s.index, s["min"], s["max"], color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_xlabel("load")
        ax.set_ylabel(f"{name} ({unit[0]})")
        ax.set_title(f"{name} (mean; band: min–max over seeds)", fontsize=9)
        ax.grid(alpha=0.3)
    _legend(axes[0][0], fontsize=8)
    fig.suptitle(f"{title}", fontsize=10)
    fig.tight_layout()
    return fig


def utilization(rounds: pd.DataFrame, capacities: dict, unit: tuple[str, float], title: str):
    """Cluster utilization (capacity-weighted over GPU types) against time, one
    line per policy, at the median load and the first seed."""
    plt = _plt()
    util_cols = [c for c in rounds.columns if c.startswith("util_")]
    if not util_cols or not len(rounds):
        return None
    loads = sorted(rounds["load"].unique().tolist())
    load = loads[len(loads) // 2]
    seed = sorted(rounds["seed"].unique().tolist())[0]
    sub = rounds[(rounds["load"] == load) & (rounds["seed"] == seed)]
    many = sub["cluster"].nunique() > 1
    fig, ax = plt.subplots(figsize=(10, 3.6))
    xunit = ("h", 3600.0) if float(sub["time"].max()) > 4 * 3600 else ("s", 1.0)
    for (cluster, policy, run_id), g in sub.groupby(["cluster", "policy", "run_id"], sort=True):
        cap = capacities.get(run_id, {})
        w = np.array([float(cap.get(c[5:], 1.0)) for c in util_cols])
        u = g[util_cols].to_numpy(dtype=float)
        u = np.nan_to_num(u) @ w / w.sum()
        t = (g["time"].to_numpy() + g["duration"].to_numpy()) / xunit[1]
        ax.step(t, u, where="pre", label=_label(policy, cluster, many), linewidth=1)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel(f"simulated time ({xunit[0]})")
    ax.set_ylabel("GPU utilization")
    ax.set_title(f"utilization over time — load {load:g}, seed {seed} — {title}", fontsize=10)
    ax.grid(alpha=0.3)
    _legend(ax, fontsize=8, ncol=3)
    fig.tight_layout()
    return fig


def auto_choices(choices: pd.DataFrame, title: str):
    plt = _plt()
    if choices is None or not len(choices):
        return None
    cands = sorted(choices["chosen"].unique().tolist())
    groups = list(choices.groupby(["cluster", "load", "seed"], sort=True))[:8]
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(groups) + 2.0))
    xunit = ("h", 3600.0) if float(choices["time"].max()) > 4 * 3600 else ("s", 1.0)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, ((cluster, load, seed), g) in enumerate(groups):
        g = g.sort_values("time")
        t = g["time"].to_numpy() / xunit[1]
        ends = np.append(t[1:], t[-1] + (t[1] - t[0] if len(t) > 1 else 1.0))
        for t0, t1, c in zip(t, ends, g["chosen"]):
            ax.barh(i, t1 - t0, left=t0, color=colors[cands.index(c) % len(colors)], height=0.7)
    ax.set_yticks(range(len(groups)), [f"load {l:g} seed {s}" + (f" {c}" if len(set(k[0] for k, _ in groups)) > 1 else "")
                                      for (c, l, s), _ in groups])
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=colors[i % len(colors)], label=c) for i, c in enumerate(cands)], fontsize=8,
              loc="upper right")
    ax.set_xlabel(f"simulated time ({xunit[0]})")
    ax.set_title(f"auto: policy chosen at each decision — {title}", fontsize=10)
    fig.tight_layout()
    return fig
