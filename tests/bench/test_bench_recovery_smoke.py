"""Smoke test of ``bench/recovery.py`` (W4's recovery figure on both stores): it runs
at a tiny size, reports every documented key, and drops the stores it built.

Speed is never asserted. PostgreSQL's DSN comes from ``WF_TEST_POSTGRES_DSN``;
without a reachable server the run is SQLite only locally, and the test fails
when ``CI=true`` (CI never skips the PostgreSQL half).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from _bench_report import bench_report

from _pg import DSN_ENV, optional_postgres_dsn

RUN_TIMEOUT_S = 300


def test_tiny_recovery_benchmark_reports_both_stores_and_cleans_up(tmp_path: Path) -> None:
    dsn = optional_postgres_dsn()
    root = tmp_path / "sqlite"
    schema = f"wf_bench_rec_{uuid.uuid4().hex[:12]}"
    args = ["--queued", "2000", "--leased", "20", "--repetitions", "1"]
    args += ["--sqlite-root", str(root), "--postgres-schema", schema]
    env = dict(os.environ)
    if dsn is None:
        args += ["--stores", "sqlite"]
    else:
        env[DSN_ENV] = dsn
        args += ["--postgres-dsn", dsn]
    report = bench_report("recovery.py", *args, timeout_s=RUN_TIMEOUT_S, env=env)
    stores = ["sqlite"] if dsn is None else ["sqlite", "postgres"]
    for store in stores:
        assert report[f"{store}_recovery_s"] > 0, store
        assert len(report[f"{store}_recovery_runs_s"]) == 1
        assert report[f"{store}_recovery_start_to_lease_cpu_s"] > 0
        assert {"load", "build_snapshot", "recover"} <= report[f"{store}_recovery_phases_s"].keys()
        assert isinstance(report[f"{store}_target_met"], bool)
    assert (report["queued"], report["leased"]) == (2000, 20)
    assert not root.exists(), "without --keep the SQLite store is removed"
    if dsn is not None:
        import psycopg

        with psycopg.connect(dsn) as conn:
            found = conn.execute(
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", [schema]
            ).fetchone()
        assert found is None, "without --keep the PostgreSQL schema is dropped"
