"""In-process local servers on a test's own store, SQLite or PostgreSQL.

A test module parametrizes its ``make_server`` fixture over ``["sqlite",
"postgres"]`` and returns :func:`server_factory`'s answer: every call builds an
unstarted server on the same store (so a test can restart over it). SQLite is
a folder under the test's ``tmp_path``; PostgreSQL is the test's own schema
(``pg_dsn`` and ``pg_schema``, see ``_pg``). :func:`plant_occurrences` puts
a schedule's occurrences in the past without running its admission.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from wf.clock import Clock
from wf.schedules.model import schedule_from_row, schedule_row
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.local import LocalStaticServer, build_local_static_workflow_server
from wf.store.protocol import OccurrenceRow
from wf.worker import ActivityDefinition

ServerFactory = Callable[[], LocalStaticServer]


def server_factory(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    activities: Sequence[ActivityDefinition] = (),
    *,
    schedules: bool = False,
    clock: Clock | None = None,
) -> ServerFactory:
    """Builds (unstarted) local servers on this test's store (each call: the same store).

    ``request.param`` names the store. With ``activities``, one in-process
    worker serves them; without, the server has no in-process worker.
    """
    if request.param == "sqlite":
        return lambda: build_local_static_workflow_server(
            tmp_path / "store", activities=list(activities), schedules=schedules, clock=clock
        )
    dsn: str = request.getfixturevalue("pg_dsn")
    schema: str = request.getfixturevalue("pg_schema")
    workers, max_concurrency = (1, 4) if activities else (0, 1)

    def postgres_server() -> LocalStaticServer:
        config = ServerConfig(
            server=ServerSection(
                host="127.0.0.1",
                port=0,
                store=StoreConfig(postgres_dsn=dsn, postgres_schema=schema),
            )
        )
        return LocalStaticServer(
            config,
            list(activities),
            workers=workers,
            max_concurrency=max_concurrency,
            schedules=schedules,
            clock=clock,
        )

    return postgres_server


async def plant_occurrences(
    server: LocalStaticServer, schedule_id: str, instants: Sequence[float]
) -> None:
    """Record ``skipped-misfire`` occurrences of ``schedule_id`` at ``instants``
    straight into the store, as the admission service records occurrences (the
    schedule row's fence moves with them), without waiting for them to fall due."""
    store = server.server.node.store
    row = await store.get_schedule(schedule_id)
    assert row is not None
    schedule = schedule_from_row(row)
    schedule.fence = row.revision + 1  # the row revision record_occurrences writes
    await store.record_occurrences(
        schedule_row(schedule),
        expected_revision=row.revision,
        occurrences=[
            OccurrenceRow(
                schedule_id=schedule_id,
                instant=i,
                status="skipped-misfire",
                detail="planted by the test",
                recorded_at=i,
            )
            for i in instants
        ],
    )
