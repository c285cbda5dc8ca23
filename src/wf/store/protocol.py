"""The store's two ports, Journal and Catalog, and two backends (SQLite, PostgreSQL).

Theory of operation
-------------------
The store serves two masters through two ports. The :class:`Journal` is the
scheduler node's: the core's records, recovery's load, ownership and the write
fences. The :class:`Catalog` is the runtime's and the schedules layer's:
artifacts, deployments, runs, schedules and occurrences. Both read the
activities' history (:class:`History`). Each backend implements both
(:class:`Store`), and each caller is typed with the one it needs, so the node
never touches a run and the runtime never appends a record.

The scheduler core returns *records* (``wf.scheduler.outputs.Record``) for
every state change. The shell hands them to :meth:`Journal.append` and tells
nobody about the change until that call returns: a returned ``append`` means
the records are committed durably, in order, all or nothing. Backends batch
concurrent appends into one transaction (group commit), so throughput comes
from batching, never from weaker durability.

The durable state is deliberately small: activities (the submission plus
lifecycle columns), the append-only transition history, workers'
registrations and statuses, and the core's counters. Anything
else in the core (rate-limiter buckets, backpressure level, heartbeat
figures, poll demand) is soft state that recovery rebuilds. :meth:`Journal.load`
returns those rows decoded: exactly what the core's
:func:`~wf.scheduler.recovery.snapshot_from_durable` needs (through
:func:`wf.store.loader.build_snapshot`) to rebuild itself as it stood at the last
committed record.

Exactly one scheduler owns a store at a time: :meth:`Journal.acquire_ownership`
takes an OS file lock (SQLite, ``<store_root>/scheduler.lock``) or a
PostgreSQL advisory lock, and a second owner is refused with
:class:`~wf.errors.OwnershipConflict` naming the holder.

The lock decides who is active; whether a write may commit is decided inside
the write's own transaction. PostgreSQL keeps an ownership *epoch* (raised by
every :meth:`Journal.acquire_ownership`) and a commit sequence (raised by every
committed write transaction, journal and catalog alike); an owner's write
commits only if both are still what that owner last saw, so an owner whose
session was replaced writes again only after proving nobody wrote in between,
and otherwise fails with :class:`~wf.errors.OwnershipLost` until it acquires
ownership again and reloads. SQLite needs no such check: its file lock lives as
long as the owning process, and so does the only connection that writes.

Corrupt rows never crash a load: they come back as :class:`Diagnostic`
entries naming the record, the affected activity is left out of the live
state (blocked, fail closed), and everything else loads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final, Protocol

import msgspec

from wf.errors import OwnershipLost
from wf.scheduler.model import Activity, ActivityState, WorkerInfo, WorkerStatus
from wf.scheduler.outputs import Record, Transition

if TYPE_CHECKING:
    from wf.store.check import BodyDecoders


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
    updated_at: float = 0.0
    """When the row was last written; for a failed or gone worker, its departure."""


class Diagnostic(msgspec.Struct, frozen=True, kw_only=True):
    """A stored record that failed validation (fail closed)."""

    kind: str
    """Stable kind: ``malformed_row``, ``unknown_activity``, ``duplicate_lease``,
    ``unknown_worker``, ``counter_behind``, ``state_mismatch``, ``corrupt_record``
    (a record the server cannot decode), ``damaged`` (the database reports damage)."""
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
    diagnostics: list[Diagnostic]
    """Corrupt or contradictory records found while loading."""
    by_id: dict[str, Activity] | None = None
    """``activities`` keyed by id, in the same order, when the loader already holds
    them so (both stores' loads fill it as they go; a standby's warm copy keeps
    one): recovery adopts it as the core's activity table
    instead of building one (at 10^6 activities building it is about half the core's
    rebuild). ``None``: recovery builds it."""


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


RUN_LIVE_STATUSES: Final = ("admitted", "running", "interrupted")
"""Run statuses that are not final (:meth:`Catalog.live_runs` returns these)."""


class RunRow(msgspec.Struct, frozen=True, kw_only=True):
    """One stored workflow run (its body is the runtime's, opaque to the store)."""

    run_id: str
    """``run-000001`` style: ``run-`` and ``seq`` zero-padded to at least six digits."""
    seq: int
    """The run's number; assigned by :meth:`Catalog.insert_run`, never reused."""
    deployment_id: str
    """The deployment it runs."""
    tenant: str
    """Owning tenant (for listing by tenant)."""
    status: str
    """Run status (``admitted``, ``running``, ``interrupted``, ``completed``, ...)."""
    schedule_id: str | None
    """The schedule that admitted it, or ``None`` for a manual run."""
    body: bytes
    """The run document's canonical JSON."""
    revision: int
    """Raised by one on every update, starting at 1."""
    created_at: float
    """When the run was admitted (POSIX seconds)."""
    updated_at: float
    """When this revision was stored (POSIX seconds)."""
    request_id: str | None = None
    """The client's request id the run was started under (``workflow.runs.start``,
    ``workflow.schedules.trigger``), unique per tenant: a retry with it finds this run
    (:meth:`Catalog.run_for_request`) instead of starting another. Stored by
    :meth:`Catalog.insert_run`; only :meth:`Catalog.run_for_request` reads it back
    (the run's document holds it too)."""


class ScheduleRow(msgspec.Struct, frozen=True, kw_only=True):
    """One stored deployment schedule (its body is the schedules layer's, opaque here)."""

    schedule_id: str
    """Caller-chosen id; never reused (a deleted schedule keeps its row)."""
    tenant: str
    """Owning tenant."""
    deployment_id: str
    """The deployment its occurrences run."""
    status: str
    """``active``, ``paused`` or ``deleted``."""
    body: bytes
    """The schedule document's canonical JSON."""
    revision: int
    """Raised by one on every change, starting at 1."""
    created_at: float
    """When it was created (POSIX seconds)."""
    updated_at: float
    """When this revision was stored."""


class OccurrenceRow(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded occurrence: ``(schedule_id, instant)`` is unique."""

    schedule_id: str
    """Its schedule."""
    instant: float
    """The resolved UTC instant (POSIX seconds)."""
    status: str
    """``admitted``, ``coalesced``, ``superseded``, ``skipped-overlap``,
    ``skipped-misfire`` or ``preflight-rejected``."""
    run_id: str | None = None
    """The run it admitted (``admitted`` only; filled in by the store)."""
    detail: str | None = None
    """Why it was not admitted, for people."""
    recorded_at: float = 0.0
    """When it was recorded."""


class History(Protocol):
    """Read-only questions about the journal's activities, asked by the node and by the
    runtime alike (a run's trace, whether an id was ever used). Every method is a
    coroutine; none may be called before :meth:`Journal.open` or after
    :meth:`Journal.close`."""

    async def existing_activity_ids(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` were ever stored (ids are never reused)."""
        ...

    async def history(self, activity_id: str) -> list[Transition]:
        """The activity's transitions, oldest first (append-only audit trail)."""
        ...

    async def heartbeat_details(self, activity_id: str) -> bytes | None:
        """The latest heartbeat details any attempt of the activity sent with a lease
        renewal (one JSON document), or ``None`` when none did."""
        ...

    async def submitted_activities(self, ids: Sequence[str]) -> dict[str, Activity]:
        """The submissions of those of ``ids`` that were ever stored, as the core
        accepted them (state fields reset; ``not_before`` as resolved at acceptance),
        by id. A submission whose blob does not decode is left out. Compared with a
        retried submission (:func:`wf.scheduler.model.same_submission`)."""
        ...

    async def history_page(
        self, activity_id: str, *, after: int = 0, limit: int = 100
    ) -> list[tuple[int, Transition]]:
        """Up to ``limit`` (0-1,000) of the activity's transitions whose position is
        greater than ``after``, oldest first, each with its position (a number the store
        assigned, growing with every appended transition: the page key). Reads through
        an index: the cost is the page's, not the history's."""
        ...


class Journal(History, Protocol):
    """The scheduler node's port: the core's durable records (append, load), the
    store's lifecycle, ownership and the write fences, and the whole-store check.
    Every method is a coroutine, or returns an awaitable (:meth:`append`); none may
    be called before :meth:`open` or after :meth:`close`."""

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

    on_ownership_lost: Callable[[OwnershipLost], None] | None
    """Set by the owner; called on the event loop, once per loss, when the store finds
    that it may no longer write as owner (PostgreSQL: the write fence moved because
    another scheduler took ownership or wrote since this store's last commit, or a
    commit's outcome is unknown), even if the write that found it was not an
    :meth:`append` (a catalog write). Until :meth:`acquire_ownership` succeeds again,
    every write fails with :class:`~wf.errors.OwnershipLost`; the owner then reloads.
    The SQLite store never calls it (see the module docstring)."""

    async def acquire_ownership(self, owner: OwnerInfo) -> None:
        """Become the one scheduler of this store, or raise
        :class:`~wf.errors.OwnershipConflict` naming the current holder.
        Held until :meth:`release_ownership`, :meth:`close` or process death.

        Idempotent while ownership is held and unbroken. After a loss (see
        :attr:`on_ownership_lost`) it takes ownership again under a new epoch; the
        caller must then reload (:meth:`load`) before writing, because another
        scheduler may have written meanwhile.
        """
        ...

    async def release_ownership(self) -> None:
        """Give ownership up (idempotent)."""
        ...

    def append(self, records: Sequence[Record]) -> Awaitable[None]:
        """Persist records durably, in order, atomically; the awaitable returned
        resolves only once they are committed.

        A coroutine function fits; a store may also queue the append before it
        returns and hand back the commit's future (SQLite does: no task per
        append), so the caller's order of calls is the order of the appends.
        Awaiting it is then only waiting for the commit, and a caller that stops
        waiting does not withdraw the append. Concurrent calls may share one
        transaction (group commit) but keep their relative order. Raises
        :class:`~wf.errors.StoreUnavailable` if the commit failed; then nothing of
        that call is stored, and the store is fenced (see :meth:`clear_write_fence`).
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

    async def prove_writable(self) -> None:
        """Commit one write transaction that changes nothing anyone can see.

        An owner reloading after a failed commit calls it (after
        :meth:`acquire_ownership`) so that it says it accepts writes only once the
        store took one: a reload only reads, and a full disk or a read-only database
        reads fine. Raises :class:`~wf.errors.StoreUnavailable` (on PostgreSQL
        :class:`~wf.errors.OwnershipLost` if the write fence moved) if it cannot.
        """
        ...

    async def load(self, *, finished_max: int = 100_000) -> StoredState:
        """The durable state as of the last committed append (see module docstring)."""
        ...

    async def check(self, bodies: BodyDecoders | None = None) -> list[Diagnostic]:
        """Integrity check: every contradiction in the stored records, the database's
        own integrity check, and every record of every table decoded (catalog bodies
        by ``bodies``, see :mod:`wf.store.check`); a table the database cannot read
        is reported (``damaged``), not raised."""
        ...


class Catalog(History, Protocol):
    """The runtime's and the schedules layer's port: artifacts, deployments, runs,
    schedules and occurrences, and their pages (docs/workflows.md, docs/schedules.md).

    Catalog writes run in their own short transactions on the backend's write
    path; they are independent of :meth:`Journal.append` (neither waits for nor
    fences the other) because no core record is computed from them. Both pass
    PostgreSQL's ownership fence (see the module docstring): a lost fence refuses
    them alike. Each operation is written once, as a transaction body in
    :mod:`wf.store.catalog` that the backends only drive."""

    # -- artifacts and deployments ---------------------------------------------

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

    async def artifacts_page(
        self,
        *,
        after: tuple[str, int] | None = None,
        artifact_id: str | None = None,
        limit: int = 100,
    ) -> list[ArtifactRow]:
        """Up to ``limit`` (0-1,000) artifact versions after the key ``after``
        (``(artifact_id, version)``; ``None``: from the first), by id then version;
        only ``artifact_id``'s versions when given (``after`` must then name it).
        Reads through the primary key: the cost is the page's."""
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

    async def deployments_page(self, *, after: str = "", limit: int = 100) -> list[DeploymentRow]:
        """Up to ``limit`` (0-1,000) deployments whose id sorts after ``after``, by id.
        Reads through the primary key: the cost is the page's."""
        ...

    # -- runs (docs/workflows.md) ----------------------------------------------

    async def insert_run(self, row: RunRow) -> RunRow:
        """Store a new run; returns it with its assigned ``seq`` and ``run_id``.

        ``row.seq`` and ``row.run_id`` are ignored: the store takes the next
        number from a durable counter in the same transaction as the insert, so
        stored runs never share a number and a number once stored is never handed
        out again (an insert that fails rolls the counter back with it, so no one
        ever saw that number).
        The stored row has ``revision`` 1.

        A row with a ``request_id`` that ``row.tenant`` already used raises
        :class:`~wf.errors.AlreadyExists` naming that run (``run_id``,
        ``request_id`` in its details) and stores nothing: the database's unique
        key on ``(tenant, request_id)`` decides, so two concurrent retries of one
        request cannot both insert.
        """
        ...

    async def run_for_request(self, tenant: str, request_id: str) -> RunRow | None:
        """The run ``tenant``'s request id ``request_id`` started, or ``None``."""
        ...

    async def update_run(self, row: RunRow, *, expected_revision: int) -> None:
        """Store a run's next revision under optimistic concurrency.

        ``row.revision`` must be ``expected_revision + 1``
        (:class:`~wf.errors.InvalidArgument` otherwise). If the stored revision
        differs raises :class:`~wf.errors.Conflict` (``current_revision`` in its
        details); an unknown run raises :class:`~wf.errors.NotFound`. Nothing
        changes in either case.
        """
        ...

    async def get_run(self, run_id: str) -> RunRow | None:
        """One run, or ``None``."""
        ...

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
        """Up to ``limit`` runs with ``seq > after_seq``, oldest first, filtered by
        every given criterion (``None``: no filter); with ``before_seq``, runs with
        ``seq < before_seq``, newest first. ``created_after`` (inclusive) and
        ``created_before`` (exclusive) bound the creation instant."""
        ...

    async def recent_run_statuses(
        self, *, limit: int, tenants: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        """``(status, created_at)`` of the newest ``limit`` runs (of ``tenants`` when
        given), newest first (a bounded read, for counts by status)."""
        ...

    async def live_runs(self) -> list[RunRow]:
        """Every run whose status is in :data:`RUN_LIVE_STATUSES`, oldest first."""
        ...

    # -- deployment schedules (docs/schedules.md) -------------------------------

    async def put_schedule(self, row: ScheduleRow, *, expected_revision: int) -> None:
        """Create (``expected_revision`` 0) or update a schedule under optimistic
        concurrency; ``row.revision`` must be ``expected_revision + 1``.

        Creating an id that exists (deleted ones included: ids are never reused)
        raises :class:`~wf.errors.AlreadyExists`; a stale revision raises
        :class:`~wf.errors.Conflict` with ``current_revision``; updating an unknown
        id raises :class:`~wf.errors.NotFound`. Nothing changes in those cases.
        """
        ...

    async def get_schedule(self, schedule_id: str) -> ScheduleRow | None:
        """One schedule (deleted ones included), or ``None``."""
        ...

    async def list_schedules(self, *, include_deleted: bool = False) -> list[ScheduleRow]:
        """Every schedule by id (deleted ones only when asked)."""
        ...

    async def schedules_page(
        self,
        *,
        after: str = "",
        limit: int = 100,
        include_deleted: bool = False,
        tenants: Sequence[str] | None = None,
    ) -> list[ScheduleRow]:
        """Up to ``limit`` (0-1,000) schedules whose id sorts after ``after``, by id;
        deleted ones only when asked, and only those of ``tenants`` when given (the
        filters run in the database, in the same statement)."""
        ...

    async def record_occurrences(
        self,
        schedule: ScheduleRow,
        *,
        expected_revision: int,
        occurrences: Sequence[OccurrenceRow],
        run: RunRow | None = None,
    ) -> RunRow | None:
        """Record occurrences and (optionally) admit one run, in ONE transaction.

        The schedule is updated to ``schedule.revision`` (which must be
        ``expected_revision + 1``; stale: :class:`~wf.errors.Conflict`), every
        occurrence is inserted (an ``(schedule_id, instant)`` that exists:
        :class:`~wf.errors.AlreadyExists`), and if ``run`` is given it is inserted
        as by :meth:`insert_run` and its assigned ``run_id`` is set on the one
        occurrence whose status is ``admitted`` (exactly one must be; otherwise
        :class:`~wf.errors.InvalidArgument`). On any error nothing is stored.
        Returns the stored run, or ``None``.
        """
        ...

    async def list_occurrences(
        self, schedule_id: str, *, after_instant: float | None = None, limit: int = 100
    ) -> list[OccurrenceRow]:
        """Up to ``limit`` occurrences of a schedule with ``instant > after_instant``,
        oldest first."""
        ...


class Store(Journal, Catalog, Protocol):
    """Both ports: what each backend implements, and what tooling that owns the whole
    store (``wf store``, tests) is given. Callers take the port they need: the node a
    :class:`Journal`, the runtime and the schedules layer a :class:`Catalog`."""
