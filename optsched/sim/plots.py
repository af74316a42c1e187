"""PNG figures of simulated runs (matplotlib, Agg backend): JCT CDF per policy
and cluster utilization over time per GPU type."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def jct_cdf(results: dict, path: str | Path, window: bool = False) -> Path:
    """``results``: {policy: SimResult}. JCT in hours (seconds when every run is
    second-scale), log x axis."""
    plt = _plt()
    secs = all(r.summary.get("display_time_unit") == "s" for r in results.values())
    scale, unit = (1.0, "s") if secs else (3600.0, "h")
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for name, r in results.items():
        df = r.jobs
        if window and r.summary.get("window"):
            lo, hi = r.summary["window"]
            df = df.iloc[lo:hi]
        jct = np.sort(df.loc[df["completion_time"].notna() & ~df["failed"], "jct"].to_numpy() / scale)
        if jct.size:
            ax.step(jct, np.arange(1, jct.size + 1) / jct.size, where="post",
                    label=f"{name} (avg {jct.mean():.2f} {unit})")
    ax.set_xscale("log")
    ax.set_xlabel(f"job completion time ({'seconds' if secs else 'hours'})")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.01)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("JCT CDF" + (" (steady-state window)" if window else ""))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def utilization(result, path: str | Path, bucket_hours: float | None = None) -> Path:
    """Busy fraction of each GPU type over simulated time (duration-weighted
    averages over buckets, ~200 buckets by default)."""
    plt = _plt()
    r = result.rounds
    secs = result.summary.get("display_time_unit") == "s"
    scale = 1.0 if secs else 3600.0
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    cols = [c for c in r.columns if c.startswith("util_")]
    if len(r):
        t = r["time"].to_numpy() / scale
        w = r["duration"].to_numpy()
        span = max(t[-1] - t[0], 1e-9)
        width = (bucket_hours * 3600.0 / scale if bucket_hours else None) or span / 200
        b = np.floor((t - t[0]) / width).astype(int)
        centers = t[0] + (np.arange(b.max() + 1) + 0.5) * width
        for c in cols:
            num = np.bincount(b, weights=r[c].to_numpy() * w)
            den = np.bincount(b, weights=w)
            ok = den > 0
            ax.plot(centers[ok], num[ok] / den[ok], label=c[5:], lw=1.2)
    ax.set_xlabel(f"simulated time ({'seconds' if secs else 'hours'})")
    ax.set_ylabel("GPUs busy (fraction)")
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"utilization per GPU type — {result.summary.get('policy', '')}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
