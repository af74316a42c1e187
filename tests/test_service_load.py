"""A bounded load test of a real `optsched serve` (the bench script, shortened):
20 concurrent clients for 3 s, each on its own session, zero errors; p50/p99
latency printed (`bench/service_load.py` runs 100 clients × 30 s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_twenty_clients_for_three_seconds_without_errors():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "service_load.py"), "--clients", "20", "--seconds", "3",
                          "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode in (0, 1), out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"\n20 clients × 3 s: {result['requests']} requests ({result['requests_per_second']:.0f}/s), "
          f"p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, errors {result['errors']}")
    assert result["errors"] == 0, result["error_samples"]
    assert out.returncode == 0
    # every client created its session, submitted and took a round at least (the bench's loop runs once
    # past its deadline if need be: counts, not throughput, whatever the machine's speed)
    assert result["requests"] >= 20 * 3
    assert result["by_kind"]["round"]["n"] >= 20
