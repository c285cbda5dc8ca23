"""A store holding 10^5 runs, written in one SQLite transaction (no server needed).

Runs are built as the runtime stores them (:func:`wf.runtime.runs.run_row`), all
final (recovery has nothing to resume), and spread so that each console filter has
a common and a rare case:

- one run every :data:`SPACING_S` seconds up to ``now`` (about 410 in the last hour);
- deployments ``scale-0.default`` .. ``scale-9.default`` in turn, and ``rare.default``
  every :data:`RARE_EVERY`-th run;
- schedule ``sched-<i % 100>`` on every fourth run, the rest manual;
- status ``completed``, ``failed`` every :data:`FAILED_EVERY`-th run;
- tenant ``default``, ``acme`` every :data:`ACME_EVERY`-th run.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from wf.runtime.runs import Run, RunStatus, Trigger, run_row
from wf.scheduler.model import Priority
from wf.store.sqlite import SQLiteStore
from wf.store.sqlite_files import DB_NAME

SPACING_S = 8.64
"""Seconds between two runs' creation (10^5 runs span ten days)."""
RARE_EVERY = 10_000
FAILED_EVERY = 1_000
ACME_EVERY = 1_000


def run_at(i: int, count: int, now: float) -> Run:
    """Run number ``i`` (1-based) of ``count``, the last created at ``now``."""
    created = now - (count - i) * SPACING_S
    scheduled = i % 4 == 0
    failed = i % FAILED_EVERY == 0
    return Run(
        run_id=f"run-{i:06d}",
        deployment_id="rare.default" if i % RARE_EVERY == 0 else f"scale-{i % 10}.default",
        deployment_revision=1,
        artifact_id="scale",
        artifact_version=1,
        content_hash="sha256:" + "0" * 64,
        tenant="acme" if i % ACME_EVERY == 7 else "default",
        priority=Priority.NORMAL,
        inputs={"n": i},
        created_at=created,
        status=RunStatus.FAILED if failed else RunStatus.COMPLETED,
        trigger=Trigger(kind="schedule", schedule_id=f"sched-{i % 100}", occurrence=created)
        if scheduled
        else Trigger(),
        started_at=created + 0.1,
        finished_at=created + 1.0,
        output=None if failed else {"n": i},
        revision=3,
    )


def build_runs_store(root: Path, count: int, now: float) -> None:
    """A new SQLite store in ``root`` (migrated by the store itself) holding ``count``
    runs, inserted directly in one transaction; the run counter is set past them."""

    async def create() -> None:
        store = SQLiteStore(root, durability="process")
        await store.open()
        await store.close()

    asyncio.run(create())
    conn = sqlite3.connect(root / DB_NAME, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO runs (run_id, seq, deployment_id, tenant, status, schedule_id, body,"
            " revision, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (r.run_id, r.seq, r.deployment_id, r.tenant, r.status, r.schedule_id,
                 r.body, r.revision, r.created_at, r.updated_at)
                for r in (
                    run_row(run, seq=i, updated_at=run.finished_at or run.created_at)
                    for i in range(1, count + 1)
                    for run in (run_at(i, count, now),)
                )
            ),
        )  # fmt: skip
        conn.execute("UPDATE counters SET value = ? WHERE name = 'run_seq'", (count,))
        conn.execute("COMMIT")
    finally:
        conn.close()
