"""`optsched report DIR`: one static, self-contained HTML page from a sweep's folder.

The page holds the summary table (mean ± standard deviation over seeds), JCT
CDFs per policy, average JCT and responsiveness against load (mean, with the
seeds' min–max band), utilization over time, and the choices of ``auto``. Every
figure is a matplotlib PNG (Agg), written beside the page and embedded in it as
base64, so the page needs no other file, no network and no JavaScript. Times
are in seconds when the median JCT of the sweep is under an hour, else hours;
titles name the trace and the cluster.
"""

from optsched.report.html import write_report

__all__ = ["write_report"]
