"""Recovery at 10^6 on both stores: issue 16's W4 figure, alone (not a test: nothing asserts).

Theory of operation
-------------------
The same measurement as W4's recovery in ``bench/peers.py`` (which calls
``bench/store.py``): a store holding ``--queued`` queued and ``--leased``
leased activities (half of them started) is built once through a core and the
store's own append path; then each repetition spawns a fresh Python process
that runs ``SchedulerNode.start()`` and one ``Poll`` of an idle worker. The
figure is spawn to first ``LeaseGranted`` (interpreter start-up and imports
count), with the in-process phases beside it (store open, load,
``build_snapshot``, ``recover``, the rest).

Unlike ``bench/store.py`` this builds the PostgreSQL store at the same size as
the SQLite one, and can keep both (``--keep``: the SQLite folder and the
PostgreSQL schema are named by ``--sqlite-root`` and ``--postgres-schema``),
so a before/after comparison reads the very same data without the long build::

    uv run python bench/recovery.py --keep                   # build once, keep
    uv run python bench/recovery.py --keep --stores postgres # reuse the schema
    uv run python bench/recovery.py --drop                   # drop what --keep kept

The last line printed is one JSON object (``sqlite_recovery_s``,
``postgres_recovery_s``: medians; ``*_runs_s``; phases).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import store as store_bench

DEFAULT_SQLITE_ROOT: Final = Path(tempfile.gettempdir()) / "wf-bench-recovery-sqlite"
DEFAULT_SCHEMA: Final = "wf_bench_recovery"
TARGET_S: Final = 3.0
"""Issue 16's target for both stores at 10^6 queued and 10^4 leased."""


def say(message: str) -> None:
    print(message, flush=True)


def postgres_built(dsn: str, schema: str) -> bool:
    """Whether ``schema`` already holds a built store (its counters row says so)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
            "AND table_name = 'activities'",
            (schema,),
        ).fetchone()
        if found is None:
            return False
        count = conn.execute(f'SELECT count(*) FROM "{schema}".activities').fetchone()
    return bool(count and count[0] > 0)


def build_postgres(dsn: str, schema: str, queued: int, leased: int, workers: int) -> float:
    """Build the PostgreSQL store in ``schema`` (reused if built); its build time."""
    if postgres_built(dsn, schema):
        say(f"reusing the PostgreSQL store in schema {schema}")
        return 0.0
    store_bench.drop_schema(dsn, schema)
    say(f"building a PostgreSQL store: {queued:,} queued + {leased:,} leased (schema {schema})")
    started = time.perf_counter()
    asyncio.run(
        store_bench.build_store(store_bench.make_postgres(dsn, schema), queued, leased, workers)
    )
    with __import__("psycopg").connect(dsn, autocommit=True) as conn:
        conn.execute(f'VACUUM ANALYZE "{schema}".activities')  # as autovacuum would, soon
    return time.perf_counter() - started


def measure(label: str, extra: list[str], repetitions: int) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for i in range(repetitions):
        runs.append(store_bench.spawn_recovery(extra))
        store_bench.say_recovery(label, i, repetitions, runs[-1])
    result = store_bench.summarize_recovery(label, runs)
    say(f"{label} recovery median {result[f'{label}_recovery_s']:.2f} s (target <= {TARGET_S} s)")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--queued", type=int, default=1_000_000)
    parser.add_argument("--leased", type=int, default=10_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated subset")
    parser.add_argument(
        "--postgres-dsn",
        default=os.environ.get(store_bench.DSN_ENV) or store_bench.DEFAULT_DSN,
    )
    parser.add_argument("--sqlite-root", type=Path, default=DEFAULT_SQLITE_ROOT)
    parser.add_argument("--postgres-schema", default=DEFAULT_SCHEMA)
    parser.add_argument("--keep", action="store_true", help="keep (and reuse) the built stores")
    parser.add_argument("--drop", action="store_true", help="only drop the kept stores")
    args = parser.parse_args(argv)
    stores = {s.strip() for s in args.stores.split(",") if s.strip()}
    if args.drop:
        shutil.rmtree(args.sqlite_root, ignore_errors=True)
        store_bench.drop_schema(args.postgres_dsn, args.postgres_schema)
        say("dropped")
        return 0
    lease_workers = max(1, min(100, args.leased))
    plan = dataclasses.replace(
        store_bench.FULL,
        sqlite_queued=args.queued,
        sqlite_leased=args.leased,
        lease_workers=lease_workers,
    )
    result: dict[str, Any] = {
        "queued": args.queued,
        "leased": args.leased,
        "repetitions": args.repetitions,
        "python": platform.python_version(),
        "machine_cores": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    if "sqlite" in stores:
        root = args.sqlite_root
        build_s = store_bench.recovery_store(plan, root)
        result["sqlite_build_s"] = round(build_s, 1)
        try:
            extra = ["--backend", "sqlite", "--root", str(root)]
            result.update(measure("sqlite", extra, args.repetitions))
        finally:
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
    if "postgres" in stores:
        dsn, schema = args.postgres_dsn, args.postgres_schema
        why = store_bench.postgres_reachable(dsn)
        if why is not None:
            result["postgres_note"] = f"PostgreSQL unreachable: {why}"
        else:
            try:
                # As W4 (bench/store.py): a tenth of the SQLite store's lease holders.
                holders = max(1, lease_workers // 10)
                build_s = build_postgres(dsn, schema, args.queued, args.leased, holders)
                result["postgres_build_s"] = round(build_s, 1)
                extra = ["--backend", "postgres", "--dsn", dsn, "--schema", schema]
                result.update(measure("postgres", extra, args.repetitions))
            finally:
                if not args.keep:
                    store_bench.drop_schema(dsn, schema)
    for label in ("sqlite", "postgres"):
        if f"{label}_recovery_s" in result:
            result[f"{label}_target_met"] = result[f"{label}_recovery_s"] <= TARGET_S
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
