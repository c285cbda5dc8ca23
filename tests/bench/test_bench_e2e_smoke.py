"""Smoke test of the end-to-end benchmark: ``bench/e2e.py --quick`` runs and reports.

Speed is never asserted here (CI machines vary); only that the benchmark
still starts a real server and real workers, measures every figure in both
durability modes, and that its last line is the JSON report with every
documented key.
"""

from __future__ import annotations

from _bench_report import bench_report

RUN_TIMEOUT_S = 300
FIGURES = {
    "dispatch_p50_ms",
    "dispatch_p99_ms",
    "dispatch_after_ack_p99_ms",
    "submit_p99_ms",
    "throughput_per_s",
    "register_p99_ms",
    "renew_p99_ms",
}
"""Measured in each durability mode (``fsync`` bare, ``process`` with a suffix)."""
CONTEXT_KEYS = {
    "durability",
    "durability_modes",
    "python",
    "machine_cores",
    "date",
    "repetitions",
    "workers",
    "worker_concurrency",
    "throughput_count",
    "throughput_runs_per_s",
    "throughput_cpu_us_per_activity",
    "throughput_submission_overlapped",
}


def test_quick_benchmark_ends_with_a_json_report() -> None:
    report = bench_report("e2e.py", "--quick", timeout_s=RUN_TIMEOUT_S)
    wanted = FIGURES | {f"{key}_process" for key in FIGURES} | CONTEXT_KEYS
    missing = wanted - report.keys()
    assert not missing, f"report lacks {sorted(missing)}"
    assert report["durability"] == "fsync"
    assert report["durability_modes"] == ["fsync", "process"]
    for key in FIGURES:
        for name in (key, f"{key}_process"):
            assert isinstance(report[name], int | float), name
            if key != "dispatch_after_ack_p99_ms":  # may be negative: see bench/e2e.py
                assert report[name] > 0, name
