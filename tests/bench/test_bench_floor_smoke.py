"""Smoke test of ``bench/floor.py --quick``: it runs and its last line is the report.

Speed is never asserted (CI machines vary); only that the measurement still
runs and reports every documented key.
"""

from __future__ import annotations

from _bench_report import bench_report

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
    report = bench_report("floor.py", "--quick", timeout_s=RUN_TIMEOUT_S)
    assert report.keys() >= REQUIRED_KEYS
    assert report["samples"] == 50
    assert report["hop_idle_p50_us"] > 0
