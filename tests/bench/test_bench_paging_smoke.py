"""Smoke test of ``bench/paging.py --quick``: it runs and its last line is the report.

Speed is never asserted (CI machines vary); only that the benchmark still
drives a real ``wf-rpc-server`` with four paging clients and a probe, that
every walk saw every schedule once in order, page by page, and that the
report holds every documented key.
"""

from __future__ import annotations

from _bench_report import bench_report

RUN_TIMEOUT_S = 300
LATENCIES = {
    f"{prefix}_{stat}_ms"
    for prefix, stats in (
        ("page", ("p50", "p99")),
        ("probe_idle", ("p50", "p99")),
        ("probe", ("p50", "p99", "max", "mean")),
    )
    for stat in stats
}
KEYS = LATENCIES | {
    "schedules",
    "clients",
    "limit",
    "pages_per_walk",
    "walks_complete",
    "walk_s_max",
    "page_bytes_max",
    "probe_calls",
    "store",
    "durability",
    "mode",
    "machine_cores",
    "python",
    "date",
}


def test_quick_paging_benchmark_ends_with_a_json_report() -> None:
    report = bench_report("paging.py", "--quick", timeout_s=RUN_TIMEOUT_S)
    assert report.keys() == KEYS
    assert (report["schedules"], report["clients"], report["limit"]) == (1_000, 4, 100)
    assert report["mode"] == "quick"
    assert report["walks_complete"] is True
    assert report["pages_per_walk"] == 10
    assert 0 < report["page_bytes_max"] < 1_000_000  # a page, never the whole listing
    for key in LATENCIES:
        assert report[key] >= 0, key
    assert report["probe_p50_ms"] <= report["probe_p99_ms"] <= report["probe_max_ms"]
