"""The catalog port over a backend's two drivers: :class:`DrivenCatalog`.

Each method of :class:`~wf.store.protocol.Catalog` (and the catalog.history reads of
:class:`~wf.store.protocol.History`) builds its transaction body with
:mod:`wf.store.catalog` and hands it to the backend's ``_run_write`` or
``_run_read``; a backend (:mod:`wf.store.sqlite`, :mod:`wf.store.postgres`)
subclasses this and writes its two drivers and nothing else of the catalog.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from wf.scheduler.model import Activity
from wf.scheduler.outputs import Transition
from wf.store import catalog, retention
from wf.store.protocol import ArtifactRow, DeploymentRow, OccurrenceRow, RunRow, ScheduleRow
from wf.store.query import Body

_T = TypeVar("_T")


class DrivenCatalog(abc.ABC):
    """The :class:`~wf.store.protocol.Catalog` port (and the history reads of
    :class:`~wf.store.protocol.History`) over a backend's two driver hooks: every
    method builds its body here and hands it to :meth:`_run_write` or :meth:`_run_read`, so a
    backend writes its drivers and nothing else of the catalog."""

    @abc.abstractmethod
    async def _run_write(self, body: Body[_T]) -> _T:
        """Run a write body in one write transaction (on PostgreSQL behind the write
        fence); an error it raises rolls the transaction back."""

    @abc.abstractmethod
    async def _run_read(self, body: Body[_T]) -> _T:
        """Run a read body (one query) on a read connection."""

    async def put_artifact(self, row: ArtifactRow) -> ArtifactRow:
        """Store an artifact version (see the protocol)."""
        return await self._run_write(catalog.put_artifact(row))

    async def get_artifact(
        self, artifact_id: str, version: int | None = None
    ) -> ArtifactRow | None:
        """One artifact version (``None``: the highest), or ``None``."""
        return await self._run_read(catalog.get_artifact(artifact_id, version))

    async def list_artifacts(self, artifact_id: str | None = None) -> list[ArtifactRow]:
        """Every version of ``artifact_id`` (or of every artifact), by id then version."""
        return await self._run_read(catalog.list_artifacts(artifact_id))

    async def artifacts_page(
        self,
        *,
        after: tuple[str, int] | None = None,
        artifact_id: str | None = None,
        limit: int = 100,
    ) -> list[ArtifactRow]:
        """Up to ``limit`` artifact versions after the key ``after`` (see the protocol)."""
        return await self._run_read(
            catalog.artifacts_page(after=after, artifact_id=artifact_id, limit=limit)
        )

    async def put_deployment(self, row: DeploymentRow, *, expected_revision: int) -> None:
        """Store a deployment's next revision if it is still at ``expected_revision``."""
        await self._run_write(catalog.put_deployment(row, expected_revision))

    async def get_deployment(self, deployment_id: str) -> DeploymentRow | None:
        """One deployment, or ``None``."""
        return await self._run_read(catalog.get_deployment(deployment_id))

    async def list_deployments(self) -> list[DeploymentRow]:
        """Every deployment, by id."""
        return await self._run_read(catalog.list_deployments())

    async def deployments_page(self, *, after: str = "", limit: int = 100) -> list[DeploymentRow]:
        """Up to ``limit`` deployments after the id ``after``, by id."""
        return await self._run_read(catalog.deployments_page(after=after, limit=limit))

    async def insert_run(self, row: RunRow) -> RunRow:
        """Store a new run under the next ``run_seq`` number (see the protocol)."""
        return await self._run_write(catalog.insert_run(row))

    async def run_for_request(self, tenant: str, request_id: str) -> RunRow | None:
        """The run ``tenant``'s ``request_id`` started, or ``None``."""
        return await self._run_read(catalog.run_for_request(tenant, request_id))

    async def update_run(self, row: RunRow, *, expected_revision: int) -> None:
        """Store a run's next revision if it is still at ``expected_revision``."""
        await self._run_write(catalog.update_run(row, expected_revision))

    async def get_run(self, run_id: str) -> RunRow | None:
        """One run, or ``None``."""
        return await self._run_read(catalog.get_run(run_id))

    async def list_runs(
        self,
        *,
        after_seq: int = 0,
        limit: int = 100,
        deployment_id: str | None = None,
        schedule_id: str | None = None,
        statuses: Sequence[str] | None = None,
        tenants: Sequence[str] | None = None,
        before_seq: int | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
    ) -> list[RunRow]:
        """Up to ``limit`` runs after ``after_seq`` matching every filter, oldest first
        (newest first below ``before_seq`` when given; see :func:`catalog.list_runs`)."""
        body = catalog.list_runs(
            after_seq=after_seq,
            limit=limit,
            deployment_id=deployment_id,
            schedule_id=schedule_id,
            statuses=statuses,
            tenants=tenants,
            before_seq=before_seq,
            created_after=created_after,
            created_before=created_before,
        )
        return await self._run_read(body)

    async def recent_run_statuses(
        self, *, limit: int, tenants: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        """``(status, created_at)`` of the newest ``limit`` runs, newest first."""
        return await self._run_read(catalog.recent_run_statuses(limit=limit, tenants=tenants))

    async def live_runs(self) -> list[RunRow]:
        """Every run whose status is live, oldest first."""
        return await self._run_read(catalog.live_runs())

    async def put_schedule(self, row: ScheduleRow, *, expected_revision: int) -> None:
        """Create (``expected_revision`` 0) or update a schedule (see the protocol)."""
        await self._run_write(catalog.put_schedule(row, expected_revision))

    async def get_schedule(self, schedule_id: str) -> ScheduleRow | None:
        """One schedule (deleted ones included), or ``None``."""
        return await self._run_read(catalog.get_schedule(schedule_id))

    async def list_schedules(self, *, include_deleted: bool = False) -> list[ScheduleRow]:
        """Every schedule by id (deleted ones only when asked)."""
        return await self._run_read(catalog.list_schedules(include_deleted))

    async def schedules_page(
        self,
        *,
        after: str = "",
        limit: int = 100,
        include_deleted: bool = False,
        tenants: Sequence[str] | None = None,
    ) -> list[ScheduleRow]:
        """Up to ``limit`` schedules after the id ``after``, by id, filtered in SQL."""
        body = catalog.schedules_page(
            after=after, limit=limit, include_deleted=include_deleted, tenants=tenants
        )
        return await self._run_read(body)

    async def record_occurrences(
        self,
        schedule: ScheduleRow,
        *,
        expected_revision: int,
        occurrences: Sequence[OccurrenceRow],
        run: RunRow | None = None,
    ) -> RunRow | None:
        """Update the schedule, insert the occurrences and (optionally) the run, in one
        transaction (see the protocol)."""
        return await self._run_write(
            catalog.record_occurrences(schedule, expected_revision, occurrences, run)
        )

    async def list_occurrences(
        self, schedule_id: str, *, after_instant: float | None = None, limit: int = 100
    ) -> list[OccurrenceRow]:
        """Up to ``limit`` occurrences after ``after_instant``, oldest first."""
        return await self._run_read(
            catalog.list_occurrences(schedule_id, after_instant=after_instant, limit=limit)
        )

    async def history(self, activity_id: str) -> list[Transition]:
        """The activity's transitions, oldest first."""
        return await self._run_read(catalog.history(activity_id))

    async def heartbeat_details(self, activity_id: str) -> bytes | None:
        """The latest heartbeat details any attempt of the activity sent, or ``None``."""
        return await self._run_read(catalog.heartbeat_details(activity_id))

    async def history_page(
        self, activity_id: str, *, after: int = 0, limit: int = 100
    ) -> list[tuple[int, Transition]]:
        """Up to ``limit`` of the activity's transitions after position ``after``."""
        return await self._run_read(catalog.history_page(activity_id, after=after, limit=limit))

    async def submitted_activities(self, ids: Sequence[str]) -> dict[str, Activity]:
        """The stored submissions of ``ids``, by id (see the protocol); one read per
        :data:`catalog.SPECS_PER_QUERY_MAX` ids."""
        unique = list(dict.fromkeys(ids))
        found: dict[str, Activity] = {}
        for start in range(0, len(unique), catalog.SPECS_PER_QUERY_MAX):
            chunk = unique[start : start + catalog.SPECS_PER_QUERY_MAX]
            found.update(await self._run_read(catalog.submitted_activities(chunk)))
        return found

    async def prune(
        self,
        links: retention.RunLinks,
        *,
        cutoff: float,
        batch: int = retention.BATCH_DEFAULT,
        dry_run: bool = False,
        max_batches: int | None = None,
        pause: Callable[[], Awaitable[None]] | None = None,
    ) -> retention.PruneCounts:
        """Remove what finished before ``cutoff`` in bounded batches, never what a live
        run or a schedule still needs (:mod:`wf.store.retention`)."""
        return await retention.prune(
            self._run_read,
            self._run_write,
            links,
            cutoff=cutoff,
            batch=batch,
            dry_run=dry_run,
            max_batches=max_batches,
            pause=pause,
        )
