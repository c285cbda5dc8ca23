"""Smoke test of the core benchmark: ``bench/core.py --quick`` runs and reports.

Speed is never asserted here (CI machines vary); only that the benchmark
still runs against the current core and that its last line is the JSON
report with every documented key.
"""

from __future__ import annotations

from _bench_report import bench_report

RUN_TIMEOUT_S = 300
REQUIRED_KEYS = {
    "queue_op_us",
    "core_cycles_per_s",
    "bytes_per_queued_activity",
    "python",
    "machine_cores",
    "date",
    "repetitions",
}


def test_quick_benchmark_ends_with_a_json_report() -> None:
    report = bench_report("core.py", "--quick", timeout_s=RUN_TIMEOUT_S)
    missing = REQUIRED_KEYS - report.keys()
    assert not missing, f"report lacks {sorted(missing)}"
    assert set(report["queue_op_us"]) == {"1000", "10000"}
    assert all(us > 0 for us in report["queue_op_us"].values())
    assert report["core_cycles_per_s"] > 0
    assert report["bytes_per_queued_activity"] > 0
