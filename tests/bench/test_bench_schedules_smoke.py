"""Smoke test of the schedules benchmark: ``bench/schedules.py --quick`` runs and reports.

Speed is never asserted here (CI machines vary); only that the benchmark
still drives a real server and admission service, at its smallest sizes, and
that its last line is the JSON report with every documented key and sane
counts: every one-shot admitted, nothing misfired, none of the idle daily
schedules admitted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "schedules.py"
RUN_TIMEOUT_S = 300
ONESHOTS = 10
SCHEDULES = 200
LATENCIES = {
    f"{prefix}_{stat}_ms"
    for prefix in (
        "admission_lateness",
        "admission_lateness_created",
        "admission_lateness_service",
        "start_lateness",
    )
    for stat in ("p50", "p99", "max")
}
FIGURES = LATENCIES | {
    "cpu_s_per_s_10k_schedules",
    "cpu_s_per_s_schedules",
    "cpu_s_per_s_baseline",
    "cpu_s_per_s_schedules_none_due",
    "schedules_active",
    "schedules_daily",
    "schedule_create_per_s",
    "idle_ticks_per_s",
    "idle_due_expected",
    "idle_due_admitted",
    "idle_due_lateness_max_ms",
    "idle_unexpected_admissions",
    "idle_scheduler_misfires",
    "oneshots",
    "oneshots_admitted",
    "lateness_samples",
    "scheduler_misfires",
    "scheduler_skipped_overlap",
}
CONTEXT_KEYS = {"mode", "durability", "python", "machine_cores", "date", "repetitions"}


def test_quick_benchmark_ends_with_a_json_report() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--quick",
            "--oneshots",
            str(ONESHOTS),
            "--schedules",
            str(SCHEDULES),
            "--window-s",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) > 1, "progress lines come before the report"
    report = json.loads(lines[-1])
    missing = (FIGURES | CONTEXT_KEYS) - report.keys()
    assert not missing, f"report lacks {sorted(missing)}"
    assert report["mode"] == "quick-custom"
    assert report["durability"] == "fsync"
    # Every one-shot admitted, by the scheduler's own doing never a misfire.
    assert report["oneshots"] == report["oneshots_admitted"] == ONESHOTS
    assert report["lateness_samples"] == ONESHOTS
    assert report["scheduler_misfires"] == report["scheduler_skipped_overlap"] == 0
    for key in LATENCIES:
        assert isinstance(report[key], int | float), key
        assert report[key] >= 0, key
    assert report["admission_lateness_p50_ms"] <= report["admission_lateness_p99_ms"]
    assert report["admission_lateness_p99_ms"] <= report["admission_lateness_max_ms"]
    # The idle phase: its size is honest, nothing daily fired, the due ones did.
    assert report["schedules_daily"] == SCHEDULES
    assert report["schedules_active"] > SCHEDULES
    assert report["cpu_s_per_s_10k_schedules"] is None  # only measured at 10,000
    assert report["cpu_s_per_s_schedules"] >= 0
    assert report["cpu_s_per_s_baseline"] >= 0
    assert report["cpu_s_per_s_schedules_none_due"] >= 0
    assert report["schedule_create_per_s"] > 0
    assert report["idle_unexpected_admissions"] == 0
    assert report["idle_scheduler_misfires"] == 0
    assert report["idle_due_expected"] > 0
    assert report["idle_due_admitted"] == report["idle_due_expected"]
