"""Smoke test of the store benchmark: ``bench/store.py --quick`` runs and reports.

Speed is never asserted here (CI machines vary); only that the benchmark
still runs against the current stores and node, and that its last line is the
JSON report with every documented key.

PostgreSQL's DSN comes from ``WF_TEST_POSTGRES_DSN``. Without it, or without a
reachable server, the benchmark runs with ``--no-postgres`` locally (the
PostgreSQL figures are then null) and the test FAILS when ``CI=true``: CI
never skips the PostgreSQL half.
"""

from __future__ import annotations

import os
from typing import Any

from _bench_report import bench_report

from _pg import DSN_ENV, optional_postgres_dsn

RUN_TIMEOUT_S = 300
SQLITE_KEYS = {
    "sqlite_transitions_per_s",
    "sqlite_transitions_per_s_process",
    "sqlite_transitions_per_s_node",
    "sqlite_recovery_s",
    "sqlite_recovery_start_to_lease_s",
    "sqlite_recovery_phases_s",
    "sqlite_bytes_per_activity",
}
POSTGRES_KEYS = {"postgres_transitions_per_s", "postgres_recovery_s"}
CONTEXT_KEYS = {"python", "machine_cores", "date", "durability", "mode"}


def _run(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    return bench_report("store.py", *args, timeout_s=RUN_TIMEOUT_S, env=env)


def test_quick_store_benchmark_ends_with_a_json_report() -> None:
    dsn = optional_postgres_dsn()
    env = dict(os.environ)
    args = ["--quick"]
    if dsn is None:
        args.append("--no-postgres")
    else:
        env[DSN_ENV] = dsn
    report = _run(args, env)
    missing = (SQLITE_KEYS | POSTGRES_KEYS | CONTEXT_KEYS) - report.keys()
    assert not missing, f"report lacks {sorted(missing)}"
    assert report["mode"] == "quick"
    assert report["durability"] == "fsync"
    for key in (
        "sqlite_transitions_per_s",
        "sqlite_transitions_per_s_process",
        "sqlite_transitions_per_s_node",
    ):
        assert report[key] > 0, key
    assert 0 < report["sqlite_recovery_start_to_lease_s"] <= report["sqlite_recovery_s"]
    assert report["sqlite_bytes_per_activity"] > 0
    assert {"load", "build_snapshot", "recover"} <= report["sqlite_recovery_phases_s"].keys()
    if dsn is None:
        assert report["postgres_transitions_per_s"] is None
        assert report["postgres_recovery_s"] is None
    else:
        assert report["postgres_transitions_per_s"] > 0
        assert report["postgres_recovery_s"] > 0
