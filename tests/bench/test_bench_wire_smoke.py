"""Smoke test of ``bench/wire.py --quick``: it runs and its last line is the report.

Speed is never asserted (CI machines vary); only that the measurement still
runs against a real server with both clients and reports every documented key.
"""

from __future__ import annotations

from _bench_report import bench_report

RUN_TIMEOUT_S = 180
CLIENT_KEYS = {"wall_us", "client_cpu_us", "server_cpu_us"}


def test_quick_wire_benchmark_ends_with_a_json_report() -> None:
    report = bench_report("wire.py", "--quick", timeout_s=RUN_TIMEOUT_S)
    assert (report["calls"], report["rounds"], report["method"]) == (
        100,
        1,
        "scheduler.queue.stats",
    )
    assert report["clients"].keys() == {"wf", "aiohttp"}
    for figures in report["clients"].values():
        assert figures.keys() == CLIENT_KEYS
        assert figures["wall_us"] > 0
        assert figures["client_cpu_us"] > 0
    assert report["client_cpu_ratio_wf_vs_aiohttp"] > 0
