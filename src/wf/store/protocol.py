"""The store port: one protocol, two backends (SQLite embedded, PostgreSQL shared).

Theory of operation
-------------------
The scheduler core returns *records* (``wf.scheduler.outputs.Record``) for
every state change. The shell hands them to :meth:`Store.append` and tells
nobody about the change until that call returns: a returned ``append`` means
the records are committed durably, in order, all or nothing. Backends batch
concurrent appends into one transaction (group commit), so throughput comes
from batching, never from weaker durability.

The durable state is deliberately small: activities (the submission plus
lifecycle columns), the append-only transition history, workers'
registrations and statuses, cron entries, and the core's counters. Anything
else in the core (rate-limiter buckets, backpressure level, heartbeat
figures, poll demand) is soft state that recovery rebuilds. :meth:`Store.load`
returns exactly what :func:`wf.store.loader.build_snapshot` needs to rebuild
the core as it stood at the last committed record.

Exactly one scheduler owns a store at a time: :meth:`Store.acquire_ownership`
takes an OS file lock (SQLite, ``<store_root>/scheduler.lock``) or a
PostgreSQL advisory lock, and a second owner is refused with
:class:`~wf.errors.OwnershipConflict` naming the holder.

Corrupt rows never crash a load: they come back as :class:`Diagnostic`
entries naming the record, the affected activity is left out of the live
state (blocked, fail closed), and everything else loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from wf.scheduler.model import Activity, ActivityState, WorkerInfo, WorkerStatus
from wf.scheduler.outputs import Record, Transition


class OwnerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Who holds a store's ownership lock."""

    host: str
    """Host name of the owning process."""
    pid: int
    """Process id of the owner."""
    since: str
    """When ownership was taken (ISO-8601 UTC)."""


class StoredWorker(msgspec.Struct, frozen=True, kw_only=True):
    """A worker row."""

    info: WorkerInfo
    """Latest registration."""
    seq: int
    """Registration sequence number."""
    status: WorkerStatus
    """Last persisted status."""
    registered_at: float
    """First registration instant."""


class StoredCron(msgspec.Struct, frozen=True, kw_only=True):
    """A cron row."""

    cron_id: str
    expression: str
    timezone: str
    next_fire_at: float
    template: Activity


class Diagnostic(msgspec.Struct, frozen=True, kw_only=True):
    """A stored record that failed validation (fail closed)."""

    kind: str
    """Stable kind: ``malformed_row``, ``unknown_activity``, ``duplicate_lease``,
    ``unknown_worker``, ``counter_behind``, ``state_mismatch``."""
    table: str
    """Table of the offending row."""
    key: str
    """Primary key of the offending row."""
    message: str
    """What is wrong, for an operator."""
    activity_id: str | None = None
    """The activity blocked because of it, if any."""


class StoredState(msgspec.Struct, kw_only=True):
    """Everything recovery needs, as loaded from a store."""

    seq: int
    """Highest activity sequence number ever assigned."""
    token: int
    """Highest fencing token ever granted."""
    worker_seq: int
    """Highest worker registration sequence number."""
    activities: list[Activity]
    """Unfinished activities, in ``seq`` order, with their lifecycle columns."""
    finished: list[tuple[str, ActivityState]]
    """The most recently finished activities (oldest first), for late-call answers."""
    workers: list[StoredWorker]
    """Every worker, in ``seq`` order."""
    crons: list[StoredCron]
    """Every cron entry, by id."""
    diagnostics: list[Diagnostic]
    """Corrupt or contradictory records found while loading."""


class ArtifactRow(msgspec.Struct, frozen=True, kw_only=True):
    """One stored artifact version (the runtime's plan, opaque to the store)."""

    artifact_id: str
    """Artifact id."""
    version: int
    """Version, at least 1; (artifact_id, version) is the primary key."""
    plan: bytes
    """The plan's canonical JSON."""
    content_hash: str
    """``sha256:<hex>`` of ``plan``; equal hashes mean equal content."""
    created_at: float
    """When the version was first stored (POSIX seconds)."""


class DeploymentRow(msgspec.Struct, frozen=True, kw_only=True):
    """One stored deployment (its body is the runtime's, opaque to the store)."""

    deployment_id: str
    """Deployment id (``<artifact_id>.<name>``)."""
    body: bytes
    """The deployment's canonical JSON."""
    revision: int
    """Raised by one on every save, starting at 1."""
    updated_at: float
    """When this revision was stored (POSIX seconds)."""


class Store(Protocol):
    """The persistence port. Every method is a coroutine; none may be called before
    :meth:`open` or after :meth:`close`."""

    async def open(self) -> None:
        """Connect and apply pending migrations.

        Raises :class:`~wf.errors.CorruptRecord` if the schema is newer than this
        code understands.
        """
        ...

    async def close(self) -> None:
        """Flush pending appends, release ownership if held, and disconnect."""
        ...

    async def schema_version(self) -> int:
        """The highest applied migration version."""
        ...

    async def acquire_ownership(self, owner: OwnerInfo) -> None:
        """Become the one scheduler of this store, or raise
        :class:`~wf.errors.OwnershipConflict` naming the current holder.
        Held until :meth:`release_ownership`, :meth:`close` or process death."""
        ...

    async def release_ownership(self) -> None:
        """Give ownership up (idempotent)."""
        ...

    async def append(self, records: Sequence[Record]) -> None:
        """Persist records durably, in order, atomically; return only once committed.

        Concurrent calls may share one transaction (group commit) but keep their
        relative order. Raises :class:`~wf.errors.StoreUnavailable` if the
        commit failed; then nothing of that call is stored, and the store is
        fenced (see :meth:`clear_write_fence`).
        """
        ...

    async def clear_write_fence(self) -> None:
        """Accept appends again after a failed commit.

        A failed commit *fences* the store: every later append fails with
        :class:`~wf.errors.StoreUnavailable` too, because it was computed from
        state that included the failed one. The owner calls this only after it
        discarded its in-memory state; it returns once every append queued
        before it has been settled (refused), and then reloads with :meth:`load`.
        """
        ...

    async def load(self, *, finished_max: int = 100_000) -> StoredState:
        """The durable state as of the last committed append (see module docstring)."""
        ...

    async def existing_activity_ids(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` were ever stored (ids are never reused)."""
        ...

    async def history(self, activity_id: str) -> list[Transition]:
        """The activity's transitions, oldest first (append-only audit trail)."""
        ...

    async def check(self) -> list[Diagnostic]:
        """Integrity check: every contradiction in the stored records."""
        ...

    # -- runtime catalog: artifacts and deployments (docs/workflows.md) --------
    # Catalog writes run in their own short transactions on the backend's write
    # path; they are independent of ``append`` (neither waits for nor fences the
    # other) because no core record is computed from them.

    async def put_artifact(self, row: ArtifactRow) -> ArtifactRow:
        """Store an artifact version; returns the stored row.

        Idempotent by content: if ``(artifact_id, version)`` exists with the same
        ``content_hash`` nothing changes and the *existing* row (its original
        ``created_at``) is returned. With another hash it raises
        :class:`~wf.errors.AlreadyExists` and nothing changes. The primary key and
        the hash comparison run in one transaction, so two concurrent writers of
        one version cannot both win. Raises :class:`~wf.errors.StoreUnavailable`
        if the store could not commit.
        """
        ...

    async def get_artifact(
        self, artifact_id: str, version: int | None = None
    ) -> ArtifactRow | None:
        """One artifact version (``None``: the highest), or ``None`` if there is none."""
        ...

    async def list_artifacts(self, artifact_id: str | None = None) -> list[ArtifactRow]:
        """Every version of ``artifact_id`` (or of every artifact), by id then version."""
        ...

    async def put_deployment(self, row: DeploymentRow, *, expected_revision: int) -> None:
        """Store a deployment's next revision under optimistic concurrency.

        ``expected_revision`` is the revision the caller based its change on (0: the
        deployment must not exist yet) and ``row.revision`` must be exactly one more.
        If the stored revision differs, raises :class:`~wf.errors.Conflict` with
        ``current_revision`` in its details and nothing changes; the check and the
        write are one statement inside one transaction.
        """
        ...

    async def get_deployment(self, deployment_id: str) -> DeploymentRow | None:
        """One deployment, or ``None``."""
        ...

    async def list_deployments(self) -> list[DeploymentRow]:
        """Every deployment, by id."""
        ...
