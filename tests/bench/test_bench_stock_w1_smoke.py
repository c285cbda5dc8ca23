"""Smoke test of ``bench/stock_w1.py`` (W1 as shipped, wf alone, CPU per task): at a
tiny size it drives a real stock ``wf-rpc-server`` and two ``wf worker`` processes
and reports every documented key. Speed is never asserted."""

from __future__ import annotations

from _bench_report import bench_report

RUN_TIMEOUT_S = 300


def test_tiny_stock_w1_reports_throughput_and_cpu_per_task() -> None:
    report = bench_report(
        "stock_w1.py", "--tasks", "200", "--repetitions", "1", timeout_s=RUN_TIMEOUT_S
    )
    assert report["store"] == "sqlite"
    assert report["tasks"] == 200
    assert report["shape"] == "2x4"
    assert len(report["runs"]) == 1
    assert report["runs_per_s"] == [report["runs"][0]["throughput_per_s"]]
    for key in ("throughput_per_s", "server_cpu_us_per_task", "worker_cpu_us_per_task"):
        assert report[key] == report["runs"][0][key]
    assert report["throughput_per_s"] > 0
    assert report["server_cpu_us_per_task"] > 0
