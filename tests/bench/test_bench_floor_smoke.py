"""Smoke test of ``bench/floor.py --quick``: it runs and its last line is the report.

Speed is never asserted (CI machines vary); only that the measurement still
runs and reports every documented key.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "floor.py"
RUN_TIMEOUT_S = 120
REQUIRED_KEYS = {
    "hop_idle_p50_us",
    "hop_idle_p99_us",
    "hop_busy_p50_us",
    "hop_busy_p99_us",
    "dispatch_floor_ms",
    "gap_ms",
    "samples",
}


def test_quick_floor_benchmark_ends_with_a_json_report() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) > 1, "progress lines come before the report"
    report = json.loads(lines[-1])
    assert report.keys() >= REQUIRED_KEYS
    assert report["samples"] == 50
    assert report["hop_idle_p50_us"] > 0
