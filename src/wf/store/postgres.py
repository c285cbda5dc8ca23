"""The PostgreSQL store: one schema per store, a group-commit writer, pooled reads.

Theory of operation
-------------------
Everything lives in one PostgreSQL schema (``search_path`` is set on every
connection), so several stores can share a database and a test can drop its
schema afterwards.

*Migrations* (:mod:`wf.store.postgres_schema`). :meth:`PostgresStore.open`
creates the schema and applies the files of ``sql/postgres/`` in one
transaction under an advisory lock derived from the schema name: two nodes
starting at once serialize, and the second finds nothing left to do. A schema
newer than this code is refused (:class:`~wf.errors.CorruptRecord`).

*Group commit.* One writer task owns one connection. :meth:`append` plans its
steps (:func:`wf.store.codec.plan_writes`) and queues them with a future; the
writer takes every queued append (up to :data:`WRITE_BATCH_STEPS_MAX` steps,
never splitting one), sends them as one pipelined transaction
(``executemany`` per run of equal queries), raises the counters, commits and
resolves the futures. If the transaction fails, every append of the group
fails with :class:`~wf.errors.StoreUnavailable` and nothing of any of them is
stored; appends are not retried one by one, because a later append was
computed from core state that includes the earlier ones. Two failures are
handled below the caller: a session found broken before ``COMMIT`` was sent
stored nothing, so the group is sent again once on a fresh session; a
session that broke while ``COMMIT`` was in flight leaves the outcome in
doubt, so the transaction id fetched before the commit is looked up with
``pg_xact_status`` and a group that did commit is acknowledged.

*Catalog writes* (artifacts, deployments, runs, schedules) run as their own short
transaction on the writer's session, under the writer lock, between group
commits; their reads use the pool. The operations themselves are the
transaction bodies of :mod:`wf.store.catalog`, written once for both stores;
this module only drives them (:meth:`PostgresStore._run_write`,
:meth:`PostgresStore._run_read`).

*Ownership.* :meth:`acquire_ownership` takes a session-level
``pg_try_advisory_lock`` (key derived from the schema name) on the writer's
own connection, labels it in the ``owner`` table, and starts a new ownership
*epoch* in the one-row ``fence`` table (``0006_fence.sql``), noting the
table's commit sequence. The lock decides who is active; it is not what
keeps a deposed owner from writing. A session that lost the lock (killed,
network cut) is gone, and the writer's next session takes the lock again on
its own; if another scheduler holds it, this store's writes fail from then
on and that scheduler is named. The lock dies with the session, so a killed
owner never blocks the next one.

*The write fence.* Every write transaction, group commits and catalog writes
alike, first calls ``fence_advance(epoch, commit_seq)`` inside the same
transaction (pipelined with ``BEGIN``, so it costs no round trip of its
own): it advances the commit sequence if the epoch and sequence are still
the ones this store last saw, and otherwise raises (SQLSTATE ``WF001``), so
nothing of the transaction commits. An owner whose session was replaced
therefore writes again only if nobody took ownership or wrote in between; if
somebody did, the write fails with :class:`~wf.errors.OwnershipLost`, every
later write as owner is refused the same way, and
:attr:`on_ownership_lost` tells the owner, who must call
:meth:`acquire_ownership` again (a new epoch) and reload before it writes.
A store without ownership (tooling, tests) passes no epoch: its writes only
advance the sequence, which fences an owner that did not see them.

*Reads* use a connection pool. :meth:`load` and :meth:`check` read in one
``REPEATABLE READ`` read-only transaction (a consistent snapshot); recovery's
load, built for 10^6 live activities, and the store check are
:mod:`wf.store.postgres_load`. Malformed rows come back as diagnostics and
are left out (fail closed).

*A cluster node* (docs/ha.md) refuses every write unless it owns the store
(:attr:`PostgresStore.require_ownership`), bounds its writer session on the
server's side once active (:meth:`PostgresStore.arm_liveness`: a frozen or
cut-off owner loses its lock within ``session_timeout_s``) and pings it;
every write and read on a session is cut off past its bound
(:func:`_cut_after`), because a black-holed route never ends a wait by
itself. Each group commit also logs the ids it touched for the standbys'
warm copies (:mod:`wf.store.postgres_follow`); the cluster's own table and
the fence reads are :mod:`wf.store.postgres_cluster`.

Why one module of about 1,100 lines: what could stand alone already does
(the load and the check, the schema, the cluster table, the warm copy, the
catalog bodies). What is left is one writer session and its lock: the group
commit, the catalog transaction, ownership, the fence, the in-doubt commit,
the pings and the cut-offs all use that one connection under that one lock,
and the rule that keeps a deposed node from writing (every write passes the
fence, on the session that holds the lock, under the lock) can be checked
only by reading them together.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias, TypeVar

import psycopg
import psycopg_pool
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from wf.errors import (
    CorruptRecord,
    Internal,
    InvalidArgument,
    OwnershipConflict,
    OwnershipLost,
    StoreUnavailable,
)
from wf.scheduler.outputs import Record
from wf.store import check as checks
from wf.store import codec, postgres_schema
from wf.store import postgres_cluster as cluster
from wf.store import postgres_follow as follow
from wf.store.driven_catalog import DrivenCatalog
from wf.store.postgres_load import IDS_PER_QUERY_MAX, Conn, check_store, load_state
from wf.store.postgres_schema import lock_key
from wf.store.postgres_schema import migration_lock_key as migration_lock_key
from wf.store.protocol import Diagnostic, OwnerInfo, StoredState
from wf.store.query import Body, Query, Result, first, sql_of

_Phase: TypeAlias = Literal["new", "opening", "open", "closing", "closed"]
_T = TypeVar("_T")

WRITE_BATCH_STEPS_MAX: Final = 20_000
"""Most SQL steps in one group-commit transaction (one append is never split)."""
APPEND_QUEUE_MAX: Final = 4_096
"""Most appends waiting for the writer; further callers wait to enqueue."""
WRITE_ATTEMPTS_MAX: Final = 2
"""Sends of one group: a second only when the session broke before COMMIT was sent."""
CONNECT_TIMEOUT_S: Final = 10
"""Give up opening a connection after this long."""
POOL_TIMEOUT_S: Final = 10.0
"""Give up waiting for a pooled read connection after this long."""
IN_DOUBT_POLLS_MAX: Final = 50
"""Looks at an in-doubt commit's status before calling it lost."""
IN_DOUBT_POLL_PAUSE_S: Final = 0.02
"""Pause between two such looks (the killed backend may still be exiting)."""
HOLDER_READS_MAX: Final = 25
"""Reads of the ``owner`` row while it may still name a previous holder."""
HOLDER_READ_PAUSE_S: Final = 0.02
"""Pause between two such reads."""
KEEPALIVE_PROBES: Final = 2
"""Unanswered TCP keepalive probes (one a second) before this side drops the writer."""
WRITE_TIMEOUT_S: Final = 30.0
"""Longest a group commit or catalog transaction may wait on the writer's session
before the session is cut off (see :func:`_cut_after`); a healthy commit takes
milliseconds."""
READ_TIMEOUT_S: Final = 600.0
"""Longest a read (recovery's load of 10^6 activities included) may wait."""
CLUSTER_READ_TIMEOUT_S: Final = 5.0
"""Longest a cluster node's small reads (the fence, reports, the warm catch-up) wait."""
IN_DOUBT_READ_TIMEOUT_S: Final = 2.0
"""Longest one look at an in-doubt commit's status waits."""
PINGS_PER_BOUND: Final = 6
"""Pings of an idle owner's writer session per ``session_timeout_s``."""

_SCHEMA_NAME: Final = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

# PostgreSQL-only statements (advisory locks, arrays, the owner label).
_SELECT_VERSION: Final = "SELECT COALESCE(MAX(version), 0) FROM schema_migrations"
_TRY_LOCK: Final = "SELECT pg_try_advisory_lock(%s::bigint)"
_UNLOCK: Final = "SELECT pg_advisory_unlock(%s::bigint)"
_UPSERT_OWNER: Final = """
INSERT INTO owner (id, host, pid, since, backend_pid)
VALUES (1, %(host)s, %(pid)s, %(since)s, pg_backend_pid())
ON CONFLICT (id) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, since = excluded.since,
    backend_pid = excluded.backend_pid"""
_DELETE_OWNER: Final = "DELETE FROM owner WHERE backend_pid = pg_backend_pid()"
_SELECT_HOLDER: Final = """
SELECT o.host, o.pid, o.since, o.backend_pid IS NOT DISTINCT FROM (
    SELECT l.pid FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND ((l.classid::bigint << 32) | l.objid::bigint) = %(key)s::bigint
    LIMIT 1
) AS current
FROM owner o WHERE o.id = 1"""
_SELECT_EXISTING: Final = "SELECT activity_id FROM activities WHERE activity_id = ANY(%s)"
_FENCE: Final = "SELECT fence_advance(%s, %s), pg_current_xact_id()::text"
"""The write fence (first statement of every write transaction) and the transaction's
id (to resolve a commit whose reply was lost)."""
_PING_FENCE: Final = "SELECT epoch, commit_seq FROM fence WHERE id = 1"
"""The owner's idle ping: it confirms the session only while the fence is still where
this owner's last commit left it (every write holds the writer lock, as the ping does)."""
_CLAIM_EPOCH: Final = """
UPDATE fence SET epoch = epoch + 1, owner_node = %s, owner_url = %s
WHERE id = 1 RETURNING epoch, commit_seq"""
FENCE_SQLSTATE: Final = "WF001"
"""What ``fence_advance`` raises when the epoch or the commit sequence moved."""
_XACT_STATUS: Final = "SELECT pg_xact_status(%s::xid8)"


def ownership_lock_key(schema: str) -> int:
    """The session advisory-lock key that proves ownership of ``schema``'s store."""
    return lock_key("owner", schema)


def writer_application_name(schema: str) -> str:
    """``application_name`` of the writer's session (find it in ``pg_stat_activity``)."""
    return f"wf-writer:{schema}"[:63]


def reader_application_name(schema: str) -> str:
    """``application_name`` of the pooled read sessions."""
    return f"wf-reader:{schema}"[:63]


@dataclass(slots=True)
class _Append:
    steps: list[codec.Step]
    counters: dict[str, int]
    future: asyncio.Future[None]


@dataclass(slots=True)
class _ClearFence:
    """Queued by clear_write_fence(): settled once everything before it was settled."""

    future: asyncio.Future[None]


class _CommitFailed(Exception):
    """A group's transaction did not commit; ``resend`` when it may be sent again
    (the session broke before COMMIT was sent, so nothing of it is stored)."""

    def __init__(self, error: StoreUnavailable, *, resend: bool = False) -> None:
        super().__init__(error.message)
        self.error = error
        self.resend = resend


class PostgresStore(DrivenCatalog):
    """The :class:`~wf.store.protocol.Store` on PostgreSQL (see the module docstring)."""

    def __init__(
        self, dsn: str, *, schema: str = "wf", pool_max: int = 8, create: bool = True
    ) -> None:
        if not _SCHEMA_NAME.match(schema):
            raise InvalidArgument(
                "a store schema name is lower-case letters, digits and '_' (at most 63)",
                schema=schema,
            )
        if pool_max < 1:
            raise InvalidArgument("pool_max must be at least 1", pool_max=pool_max)
        self._dsn = dsn
        self._schema = schema
        self.create = create
        """Whether :meth:`open` may create the schema and apply pending migrations;
        ``False`` opens only an existing, current store and changes nothing
        (``wf store check``)."""
        self._owner_key = ownership_lock_key(schema)
        self._pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_max,
            open=False,
            kwargs={
                "autocommit": True,
                "connect_timeout": CONNECT_TIMEOUT_S,
                "application_name": reader_application_name(schema),
            },
            configure=self._configure,
            check=AsyncConnectionPool.check_connection,
            timeout=POOL_TIMEOUT_S,
            name=f"wf-store-{schema}",
        )
        self._queue: asyncio.Queue[_Append | _ClearFence | None] = asyncio.Queue(APPEND_QUEUE_MAX)
        self._fence: StoreUnavailable | None = None
        """The last failed commit's error; appends are refused until cleared."""
        self._writer: asyncio.Task[None] | None = None
        self._appending = 0
        """Appends between their entry and their outcome (close() waits for them)."""
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._wconn: Conn | None = None
        self._wlock = asyncio.Lock()
        self._owner: OwnerInfo | None = None
        """Ownership wanted (from acquire_ownership() to release_ownership()): the
        writer's session must hold the lock, and writes pass the epoch below."""
        self._wconn_owns = False
        self._epoch: int | None = None
        """The ownership epoch this store started, ``None`` until acquire_ownership()
        succeeds and again once the fence refused a write (until it is re-acquired)."""
        self._seq = 0
        """The fence's commit sequence as of this store's last committed write."""
        self._lost: OwnershipLost | None = None
        """Why writes as owner are refused (the last loss of the fence)."""
        self.on_ownership_lost: Callable[[OwnershipLost], None] | None = None
        """Called once per loss of the fence (see the module docstring)."""
        self._state: _Phase = "new"
        self.require_ownership = False
        """Refuse every write unless this store holds ownership (a cluster node: it
        must never write as tooling does, outside the fence's epoch check)."""
        self.identity: tuple[str, str | None] | None = None
        """``(node_id, advertise_url)`` written to the fence row with each epoch."""
        self._liveness_s: float | None = None
        """PostgreSQL's bound on the writer session's silence (see arm_liveness())."""
        self.confirmed_at = time.monotonic()
        """When the writer's session last answered (monotonic seconds)."""
        self._pinger: asyncio.Task[None] | None = None
        self.write_timeout_s = WRITE_TIMEOUT_S
        """Longest a write may wait on the writer's session (see :func:`_cut_after`)."""
        self._groups = 0
        """Group commits sent (the change log is pruned every so many)."""

    # -- lifecycle --------------------------------------------------------

    async def open(self) -> None:
        """Connect, create the schema, apply pending migrations, start the writer."""
        if self._state != "new":
            raise Internal(f"PostgresStore.open called on a {self._state} store")
        self._state = "opening"
        try:
            self._wconn = await self._connect_writer()
            if self.create:
                await postgres_schema.migrate(self._wconn, self._schema)
            else:
                await postgres_schema.verify(self._wconn, self._schema)
            await self._pool.open(wait=True, timeout=POOL_TIMEOUT_S)
        except psycopg.Error as exc:
            await self._discard_connections()
            self._state = "closed"
            raise StoreUnavailable(
                f"cannot open the PostgreSQL store: {exc}", schema=self._schema
            ) from exc
        except BaseException:
            await self._discard_connections()
            self._state = "closed"
            raise
        self._writer = asyncio.create_task(self._run_writer(), name=f"wf-writer-{self._schema}")
        self._state = "open"

    async def close(self) -> None:
        """Flush pending appends, stop the writer, release ownership, disconnect."""
        if self._state in ("closed", "new"):
            self._state = "closed"
            return
        self._state = "closing"
        # Appends already under way (even waiting for room in the queue) are flushed.
        await self._quiet.wait()
        if self._writer is not None:
            await self._queue.put(None)
            await self._writer
            self._writer = None
        await self.release_ownership()
        await self._report_stopped()
        await self._stop_pinger()
        await self._discard_connections()
        self._state = "closed"

    async def _report_stopped(self) -> None:
        """A cluster node's last report as it closes, its ownership released: it
        stopped cleanly (``cluster.status`` lists it ``stopped``, not ``stopping``).
        Best effort: a store out of reach now leaves the row to go stale."""
        if self.identity is None:
            return
        try:
            async with self._pool.connection(timeout=CLUSTER_READ_TIMEOUT_S) as conn:
                with _cut_after(conn, CLUSTER_READ_TIMEOUT_S):
                    await cluster.mark_stopped(conn, self.identity[0])
        except (psycopg.Error, psycopg_pool.PoolTimeout, OSError):
            pass  # closing goes on: the row goes stale, as a vanished node's does

    async def _discard_connections(self) -> None:
        if self._wconn is not None:
            await self._wconn.close()
            self._wconn = None
        await self._pool.close()

    def _require_open(self) -> None:
        if self._state != "open":
            raise StoreUnavailable(f"the store is {self._state}", schema=self._schema)

    async def _configure(self, conn: Conn) -> None:
        await conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self._schema)))

    async def _connect_writer(self) -> Conn:
        conn = await psycopg.AsyncConnection.connect(
            self._dsn,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name=writer_application_name(self._schema),
            # This side notices a dead or silent server as the server notices us.
            keepalives=1,
            keepalives_idle=1,
            keepalives_interval=1,
            keepalives_count=KEEPALIVE_PROBES,
        )
        try:
            with _cut_after(conn, self.write_timeout_s):
                await self._configure(conn)
                # Acknowledged means durable, whatever the server's default.
                await conn.execute("SET synchronous_commit TO on")
                if self._liveness_s is not None:
                    await _bound_session(conn, self._liveness_s)
        except BaseException:
            await conn.close()
            raise
        # No confirmation here: a new session holds no lock and proves nothing about
        # the fence. Refreshing the gate on a mere reconnect let a cut-off active that
        # reached PostgreSQL again answer from its stale core (``not_found`` for work
        # the new active had granted) until its next write found the fence moved.
        return conn

    @property
    def _where(self) -> str:
        return postgres_schema.where(self._schema)

    async def schema_version(self) -> int:
        """The highest applied migration version."""
        self._require_open()
        async with self._reading() as conn:
            cur = await conn.execute(_SELECT_VERSION)
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    # -- ownership --------------------------------------------------------

    async def acquire_ownership(self, owner: OwnerInfo) -> None:
        """Hold the schema's advisory lock in the writer's session and start a new
        ownership epoch, or raise :class:`~wf.errors.OwnershipConflict` naming the holder.

        Idempotent while the lock is held and the fence intact; after a loss of the
        fence it takes the lock if need be and starts a new epoch (the caller then
        reloads: what it held in memory may be stale). Until this succeeds, writes as
        owner are refused with :class:`~wf.errors.OwnershipLost`.
        """
        self._require_open()
        async with self._wlock:
            if self._owner is not None and self._wconn_owns and self._epoch is not None:
                return
            self._owner = owner
            self._epoch = None
            node, url = self.identity or (f"{owner.host}:{owner.pid}", None)
            try:
                conn = await self._writer_connection()
                with _cut_after(conn, self.write_timeout_s):
                    cur = await conn.execute(_CLAIM_EPOCH, [node, url])
                    row = await cur.fetchone()
            except OwnershipConflict:
                raise
            except (psycopg.Error, OSError) as exc:
                if self._wconn is not None and (self._wconn.broken or self._wconn.closed):
                    await self._drop_writer()
                raise StoreUnavailable(
                    f"cannot take ownership: {exc}", schema=self._schema
                ) from exc
            if row is None:
                raise CorruptRecord(
                    "the write fence's row is missing", table="fence", key="1", schema=self._schema
                )
            self._epoch, self._seq = int(row[0]), int(row[1])
            self._lost = None
            self.confirmed_at = time.monotonic()

    @property
    def epoch(self) -> int | None:
        """The ownership epoch this store holds (``None``: it holds none)."""
        return self._epoch

    @property
    def commit_seq(self) -> int:
        """The fence's commit sequence as of this store's last committed write."""
        return self._seq

    async def arm_liveness(self, session_timeout_s: float) -> None:
        """Bound the writer session's silence on the server's side, and keep it busy.

        PostgreSQL ends the session (and so releases the ownership lock) once it sat
        idle, or idle in a transaction, for ``session_timeout_s``, or once its peer
        stopped acknowledging for as long: a frozen or cut-off owner loses ownership
        within that bound whatever it does. A ping every sixth of the bound keeps a
        healthy owner's session alive and refreshes :attr:`confirmed_at`, which the
        server's gate reads (docs/ha.md). Armed after recovery, which may keep the
        session idle for longer while it loads."""
        self._require_open()
        self._liveness_s = session_timeout_s
        async with self._wlock:
            conn = self._wconn
            if conn is not None and not (conn.closed or conn.broken):
                try:
                    with _cut_after(conn, CLUSTER_READ_TIMEOUT_S):
                        await _bound_session(conn, session_timeout_s)
                    if self._wconn_owns and self._epoch is not None:
                        await self._confirm(conn, CLUSTER_READ_TIMEOUT_S)
                except psycopg.Error:
                    await self._drop_writer()
        if self._pinger is None:
            self._pinger = asyncio.create_task(self._ping_loop(), name=f"wf-ping-{self._schema}")

    async def disarm_liveness(self) -> None:
        """Stop bounding and pinging the writer session (before a long idle stretch, and
        when ownership is given up)."""
        self._liveness_s = None
        await self._stop_pinger()
        async with self._wlock:
            conn = self._wconn
            if conn is not None and not (conn.closed or conn.broken):
                try:
                    with _cut_after(conn, CLUSTER_READ_TIMEOUT_S):
                        await _unbound_session(conn)
                except psycopg.Error:
                    await self._drop_writer()

    async def _confirm(self, conn: Conn, timeout_s: float) -> None:
        """Refresh :attr:`confirmed_at` if the fence stands where this owner's last
        commit left it; otherwise lose ownership (the caller holds the writer lock).

        Only this, a fenced commit, or taking ownership confirms: a session that merely
        answers proves nothing once the lock was retaken on a new session after another
        owner (or a tool) wrote, and the gate must not reopen on a stale core."""
        with _cut_after(conn, timeout_s):
            cur = await conn.execute(_PING_FENCE)
            row = await cur.fetchone()
        if row is None or (int(row[0]), int(row[1])) != (self._epoch, self._seq):
            self._lose(
                "the fence moved since this node's last commit: another writer took "
                "ownership or wrote; the node must take ownership again and reload",
                epoch=self._epoch,
                commit_seq=self._seq,
            )
            return
        self.confirmed_at = time.monotonic()

    async def _stop_pinger(self) -> None:
        task, self._pinger = self._pinger, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    async def _ping_loop(self) -> None:
        while self._liveness_s is not None:
            interval = self._liveness_s / PINGS_PER_BOUND
            await asyncio.sleep(max(0.0, self.confirmed_at + interval - time.monotonic()))
            if time.monotonic() - self.confirmed_at < interval:
                continue  # a commit answered meanwhile
            async with self._wlock:
                conn = self._wconn
                if (
                    conn is None
                    or conn.closed
                    or conn.broken
                    or not self._wconn_owns
                    or self._epoch is None  # lost: nothing left to confirm
                ):
                    await asyncio.sleep(interval)
                    continue
                try:
                    await self._confirm(conn, self._liveness_s)
                except (psycopg.Error, OSError):
                    # Unusable now; closing it is what releases the lock, and the next
                    # write reconnects (and is fenced if anybody wrote meanwhile).
                    await self._drop_writer()

    async def release_ownership(self) -> None:
        """Drop the lock and its label (idempotent; a broken session already lost both).

        A store with :attr:`require_ownership` refuses every write from here until
        ownership is taken again.

        This also lifts the fence of an owner that lost ownership: from then on
        this store writes as a non-owner (tooling), so a scheduler that lost
        ownership should stop rather than release and carry on.
        """
        async with self._wlock:
            self._owner = None
            self._epoch = None
            self._lost = None
            if not self._wconn_owns:
                return
            self._wconn_owns = False
            conn = self._wconn
            if conn is None or conn.closed:
                return
            try:
                # Unlock first: the next owner may label itself at once, and this
                # delete only ever removes this session's own label.
                with _cut_after(conn, CLUSTER_READ_TIMEOUT_S):
                    await conn.execute(_UNLOCK, [self._owner_key])
                    await conn.execute(_DELETE_OWNER)
            except psycopg.Error:
                # The session is unusable; closing it is what releases the lock.
                await conn.close()
                self._wconn = None

    async def _take_lock(self, conn: Conn, owner: OwnerInfo) -> None:
        cur = await conn.execute(_TRY_LOCK, [self._owner_key])
        row = await cur.fetchone()
        if not (row and row[0]):
            raise await self._conflict(conn)
        try:
            await conn.execute(
                _UPSERT_OWNER, {"host": owner.host, "pid": owner.pid, "since": owner.since}
            )
        except BaseException:
            if not conn.closed and not conn.broken:
                await conn.execute(_UNLOCK, [self._owner_key])
            raise
        self._wconn_owns = True

    async def _conflict(self, conn: Conn) -> OwnershipConflict:
        """The conflict error, naming the holder once its label is written."""
        holder: tuple[Any, ...] | None = None
        for attempt in range(HOLDER_READS_MAX):
            cur = await conn.execute(_SELECT_HOLDER, {"key": self._owner_key})
            holder = await cur.fetchone()
            if holder is not None and holder[3]:
                break
            if attempt + 1 < HOLDER_READS_MAX:
                await asyncio.sleep(HOLDER_READ_PAUSE_S)
        where = f"PostgreSQL schema {self._schema!r}"
        if holder is None:
            return OwnershipConflict(
                f"the store ({where}) is owned by another scheduler (holder not recorded)",
                schema=self._schema,
            )
        host, pid, since, current = holder
        label = "" if current else " (as last recorded)"
        return OwnershipConflict(
            f"the store ({where}) is owned by another scheduler: "
            f"host {host}, pid {pid}, since {since}{label}",
            schema=self._schema,
            host=host,
            pid=int(pid),
            since=since,
        )

    # -- writes -----------------------------------------------------------

    async def append(self, records: Sequence[Record]) -> None:
        """Persist ``records`` in the next group commit; return once committed."""
        self._require_open()
        if not records:
            return
        steps, counters = codec.plan_writes(records)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._appending += 1
        self._quiet.clear()
        try:
            await self._queue.put(_Append(steps, counters, future))
            await future
        finally:
            self._appending -= 1
            if self._appending == 0:
                self._quiet.set()

    async def prove_writable(self) -> None:
        """Commit an empty transaction through the write fence (see the protocol)."""
        async with self._catalog_tx():
            pass

    async def clear_write_fence(self) -> None:
        """Accept appends again after a failed commit (see the protocol)."""
        self._require_open()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put(_ClearFence(future))
        await future

    async def _run_writer(self) -> None:
        stopping = False
        while not stopping:
            group, clear, stopping = await self._next_group()
            if group:
                await self._write_group(group)
            if clear is not None:
                self._fence = None
                if not clear.future.done():
                    clear.future.set_result(None)

    async def _next_group(self) -> tuple[list[_Append], _ClearFence | None, bool]:
        """Queued appends up to the step bound or a fence clear; ``True`` once close()
        asked to stop."""
        first = await self._queue.get()
        if first is None:
            return [], None, True
        if isinstance(first, _ClearFence):
            return [], first, False
        group = [first]
        steps = len(first.steps)
        while steps < WRITE_BATCH_STEPS_MAX and not self._queue.empty():
            item = self._queue.get_nowait()
            if item is None:
                return group, None, True
            if isinstance(item, _ClearFence):
                return group, item, False
            group.append(item)
            steps += len(item.steps)
        return group, None, False

    async def _write_group(self, group: list[_Append]) -> None:
        """One group commit (the writer loop's tick): commit, then settle every future."""
        if self._fence is not None:
            # An earlier commit failed: later appends were computed from state that
            # includes it, so none may be stored until the owner reloads.
            _settle(
                group,
                StoreUnavailable(
                    f"an earlier commit failed ({self._fence.message}); nothing was stored",
                    schema=self._schema,
                ),
            )
            return
        failed: _CommitFailed | None = None
        async with self._wlock:
            try:
                await self._commit(group)
            except _CommitFailed as exc:
                failed = exc
            except Exception as exc:  # a bug: fail the callers rather than hang them
                await self._drop_writer()
                failed = _CommitFailed(
                    StoreUnavailable(f"store writer failed: {exc!r}", schema=self._schema),
                )
        if failed is not None:
            self._fence = failed.error
        _settle(group, None if failed is None else failed.error)

    async def _commit(self, group: list[_Append]) -> None:
        """Commit ``group`` in one transaction or raise :class:`_CommitFailed`.

        A session found broken before ``COMMIT`` was sent stored nothing, so the
        group is resent once on a fresh session (an idle writer connection that
        the server dropped is then invisible to callers).
        """
        for attempt in range(WRITE_ATTEMPTS_MAX):
            conn = await self._session_for_write()
            with _cut_after(conn, self.write_timeout_s):
                try:
                    sent = await self._send_group(conn, group)
                except _CommitFailed as failed:
                    if not failed.resend or attempt + 1 == WRITE_ATTEMPTS_MAX:
                        raise
                    continue
                await self._finish(conn, *sent)
            return

    async def _session_for_write(self) -> Conn:
        if self.require_ownership and self._owner is None:
            raise _CommitFailed(
                OwnershipLost(
                    "this node does not own the store (a standby); nothing was stored",
                    schema=self._schema,
                )
            )
        if self._owner is not None and self._epoch is None:
            raise _CommitFailed(
                self._lost
                or OwnershipLost(
                    "this store does not hold ownership (acquire_ownership() has not "
                    "succeeded); nothing was stored",
                    schema=self._schema,
                )
            )
        try:
            return await self._writer_connection()
        except OwnershipConflict as exc:
            raise _CommitFailed(
                self._lose(f"ownership of the store was lost: {exc.message}", **exc.details)
            ) from exc
        except (psycopg.Error, OSError) as exc:
            await self._drop_writer()
            raise _CommitFailed(
                StoreUnavailable(f"cannot reach PostgreSQL: {exc}", schema=self._schema),
            ) from exc

    def _lose(self, message: str, **details: Any) -> OwnershipLost:
        """The fence is lost: refuse writes as owner until acquire_ownership(), tell the
        owner (once per loss), and return the error to raise."""
        lost = OwnershipLost(message, **{"schema": self._schema, **details})
        if self._owner is None:
            return lost  # not an owner: nothing to stop (only a missing fence row gets here)
        first = self._epoch is not None
        self._epoch = None
        self._lost = lost
        if first and self.on_ownership_lost is not None:
            self.on_ownership_lost(lost)
        return lost

    def _fence_args(self) -> tuple[int | None, int | None]:
        """``fence_advance``'s arguments: this owner's epoch and sequence, or no check."""
        return (None, None) if self._owner is None else (self._epoch, self._seq)

    def _refusal(self, exc: psycopg.Error, what: str) -> StoreUnavailable:
        """The error for a write transaction the server refused: the fence's, or ``what``
        failed."""
        if exc.sqlstate == FENCE_SQLSTATE:
            epoch, seq = self._fence_args()
            return self._lose(
                "the store refused the write: another writer took ownership or wrote since "
                "this node's last commit; nothing was stored, and the node must take "
                "ownership again and reload before it writes",
                epoch=epoch,
                commit_seq=seq,
            )
        return StoreUnavailable(
            f"{what} failed, nothing stored: {exc}", schema=self._schema, sqlstate=exc.sqlstate
        )

    async def _finish(self, conn: Conn, xid: str, seq: int) -> None:
        """COMMIT (the fence then stands at ``seq``); if the reply is lost with the session,
        ask the server what happened."""
        try:
            await conn.execute("COMMIT")
            self._seq = seq
            self.confirmed_at = time.monotonic()
        except psycopg.Error as exc:
            if not (conn.broken or conn.closed):
                raise _CommitFailed(
                    StoreUnavailable(f"commit refused, nothing stored: {exc}", schema=self._schema),
                ) from exc
            await self._drop_writer()
            outcome = await self._outcome(xid)
            if outcome == "committed":
                self._seq = seq
                self.confirmed_at = time.monotonic()
                return
            if outcome == "unknown":
                # Whether the fence advanced is unknown: prove nothing, re-acquire.
                self._lose("the outcome of a commit is unknown; ownership must be re-proven")
            raise _CommitFailed(
                StoreUnavailable(
                    f"connection lost during commit ({outcome}): {exc}",
                    schema=self._schema,
                    in_doubt=outcome == "unknown",
                ),
            ) from exc

    async def _send_group(self, conn: Conn, group: list[_Append]) -> tuple[str, int]:
        """BEGIN, the fence and every step in one pipeline; the transaction id and the
        fence's sequence once it commits (not yet committed)."""
        queries = codec.postgres_queries()
        steps = [step for one in group for step in one.steps]
        counters: dict[str, int] = {}
        for one in group:
            for name, value in one.counters.items():
                counters[name] = max(counters.get(name, 0), value)
        xcur = conn.cursor()
        try:
            async with conn.pipeline():
                await conn.execute("BEGIN")
                await xcur.execute(_FENCE, self._fence_args())
                async with conn.cursor() as cur:
                    for name, params_seq in codec.group_steps(steps):
                        await cur.executemany(queries[name], params_seq)
                    # What a standby re-reads to stay warm (wf.store.postgres_follow).
                    await cur.execute(follow.INSERT_CHANGE, follow.touched_ids(steps))
                    self._groups += 1
                    if self._groups % follow.CHANGE_LOG_PRUNE_EVERY == 0:
                        await cur.execute(follow.PRUNE, [follow.CHANGE_LOG_KEEP])
                    if counters:
                        await cur.executemany(
                            queries["raise_counter"],
                            [{"name": n, "value": v} for n, v in sorted(counters.items())],
                        )
            row = await xcur.fetchone()
        except psycopg.Error as exc:
            healthy = not (conn.broken or conn.closed)
            if healthy:
                try:
                    await conn.execute("ROLLBACK")
                except psycopg.Error:
                    healthy = False
            if not healthy:
                await self._drop_writer()
            error = self._refusal(exc, "write")
            resend = not healthy and not isinstance(error, OwnershipLost)
            raise _CommitFailed(error, resend=resend) from exc
        if row is None:  # pragma: no cover - the SELECT always yields one row
            raise Internal("the write fence returned nothing")
        return str(row[1]), int(row[0])

    async def _outcome(self, xid: str) -> Literal["committed", "aborted", "unknown"]:
        """What became of a transaction whose COMMIT reply was lost (via a pooled session)."""
        for _ in range(IN_DOUBT_POLLS_MAX):
            try:
                async with self._pool.connection() as conn:
                    with _cut_after(conn, IN_DOUBT_READ_TIMEOUT_S):
                        cur = await conn.execute(_XACT_STATUS, [xid])
                        row = await cur.fetchone()
            except (psycopg.Error, psycopg_pool.PoolTimeout):
                return "unknown"
            status = row[0] if row else None
            if status == "committed":
                return "committed"
            if status == "aborted":
                return "aborted"
            if status != "in progress":
                return "unknown"
            await asyncio.sleep(IN_DOUBT_POLL_PAUSE_S)
        return "unknown"

    async def _writer_connection(self) -> Conn:
        """The writer's session, reconnected if broken and holding the lock if owned."""
        conn = self._wconn
        if conn is None or conn.closed or conn.broken:
            await self._drop_writer()
            conn = await self._connect_writer()
            self._wconn = conn
        if self._owner is not None and not self._wconn_owns:
            with _cut_after(conn, self.write_timeout_s):
                await self._take_lock(conn, self._owner)
        return conn

    async def _drop_writer(self) -> None:
        """Close and forget the writer session (a lock it held dies with it)."""
        self._wconn_owns = False
        conn, self._wconn = self._wconn, None
        if conn is not None:
            await conn.close()

    # -- runtime catalog --------------------------------------------------

    @asynccontextmanager
    async def _catalog_tx(self) -> AsyncIterator[Conn]:
        """One catalog transaction on the writer's session (under the writer lock, so
        it never interleaves with a group commit), fenced like a group commit: the
        fence is its first statement, pipelined with ``BEGIN``."""
        self._require_open()
        async with self._wlock:
            for attempt in range(WRITE_ATTEMPTS_MAX):
                try:
                    conn = await self._session_for_write()
                except _CommitFailed as failed:
                    raise failed.error from failed.__cause__
                try:
                    with _cut_after(conn, self.write_timeout_s):
                        xid, seq = await self._begin_fenced(conn)
                    break
                except StoreUnavailable:
                    # A session found broken at BEGIN (dropped) ran nothing: once more,
                    # on a fresh one, as a group commit would.
                    if self._wconn is not None or attempt + 1 == WRITE_ATTEMPTS_MAX:
                        raise
            with _cut_after(conn, self.write_timeout_s):
                try:
                    yield conn
                except BaseException as exc:
                    await self._abandon(conn)
                    if isinstance(exc, (psycopg.Error, OSError)):
                        raise StoreUnavailable(
                            f"catalog write failed, nothing stored: {exc}", schema=self._schema
                        ) from exc
                    raise
            try:
                with _cut_after(conn, self.write_timeout_s):
                    await self._finish(conn, xid, seq)
            except _CommitFailed as failed:
                raise failed.error from failed.__cause__
            except BaseException:
                # Cut off mid-COMMIT (cancelled): whether it landed is unknown.
                await self._drop_writer()
                self._lose("a catalog commit was interrupted; ownership must be re-proven")
                raise

    async def _begin_fenced(self, conn: Conn) -> tuple[str, int]:
        """BEGIN and the fence; the transaction id and the fence's sequence once it
        commits."""
        try:
            async with conn.pipeline():
                await conn.execute("BEGIN")
                cur = await conn.execute(_FENCE, self._fence_args())
            row = await cur.fetchone()
        except psycopg.Error as exc:
            await self._abandon(conn)
            raise self._refusal(exc, "catalog write") from exc
        if row is None:  # pragma: no cover - the SELECT always yields one row
            raise Internal("the write fence returned nothing")
        return str(row[1]), int(row[0])

    async def _abandon(self, conn: Conn) -> None:
        """Roll the open transaction back, or drop the session if it is unusable."""
        if not (conn.broken or conn.closed):
            try:
                await conn.execute("ROLLBACK")
                return
            except psycopg.Error:
                pass
        await self._drop_writer()

    async def _run_write(self, body: Body[_T]) -> _T:
        """Run a catalog write body (:mod:`wf.store.catalog`) in one fenced catalog
        transaction on the writer's session (:meth:`_catalog_tx`)."""
        step = first(body)
        if isinstance(step, tuple):
            return step[0]
        async with self._catalog_tx() as conn:
            result = await _execute(conn, step)
            while True:
                try:
                    step = body.send(result)
                except StopIteration as stop:
                    value: _T = stop.value
                    return value
                result = await _execute(conn, step)

    async def _run_read(self, body: Body[_T]) -> _T:
        """Run a catalog read body on a pooled session: its one query in autocommit (one
        statement is its own snapshot), the rows decoded once the session is back."""
        self._require_open()
        step = first(body)
        if isinstance(step, tuple):
            return step[0]
        async with self._reading() as conn:
            result = await _execute(conn, step)
        try:
            body.send(result)
        except StopIteration as stop:
            value: _T = stop.value
            return value
        raise Internal(f"read body {step.name!r} asked for a second query (reads are one)")

    # -- reads ------------------------------------------------------------

    @asynccontextmanager
    async def _reading(self, timeout_s: float = READ_TIMEOUT_S) -> AsyncIterator[Conn]:
        try:
            async with self._pool.connection() as conn:
                with _cut_after(conn, timeout_s):
                    yield conn
        except psycopg.Error as exc:
            raise StoreUnavailable(f"read failed: {exc}", schema=self._schema) from exc

    async def load(self, *, finished_max: int = 100_000) -> StoredState:
        """The durable state, read from one consistent snapshot
        (:func:`wf.store.postgres_load.load_state`)."""
        self._require_open()
        if finished_max < 0:
            raise InvalidArgument("finished_max must not be negative", finished_max=finished_max)
        async with self._reading() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return await load_state(conn, finished_max, self._where)

    async def existing_activity_ids(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` were ever stored."""
        self._require_open()
        found: set[str] = set()
        if not ids:
            return found
        unique = list(dict.fromkeys(ids))
        async with self._reading() as conn:
            for start in range(0, len(unique), IDS_PER_QUERY_MAX):
                chunk = unique[start : start + IDS_PER_QUERY_MAX]
                cur = await conn.execute(_SELECT_EXISTING, [chunk])
                found.update(str(r[0]) for r in await cur.fetchall())
        return found

    # -- the cluster (docs/ha.md) -------------------------------------------

    async def fence_state(self) -> cluster.FenceState | None:
        """The fence row as it stands (who owns the store, at which epoch)."""
        self._require_open()
        async with self._reading(CLUSTER_READ_TIMEOUT_S) as conn:
            return await cluster.read_fence(conn)

    async def report_node(self, node: cluster.NodeReport) -> None:
        """Record what this node says of itself (outside the fence: not state)."""
        self._require_open()
        async with self._reading(CLUSTER_READ_TIMEOUT_S) as conn:
            await cluster.report(conn, node)

    async def cluster_nodes(self) -> list[cluster.NodeRow]:
        """The nodes that reported recently, the active first."""
        self._require_open()
        async with self._reading(CLUSTER_READ_TIMEOUT_S) as conn:
            return await cluster.nodes(conn)

    async def end_stuck_owner(self, silent_s: float) -> tuple[int, str] | None:
        """Terminate the owner's session if it is stuck waiting on its client inside a
        transaction or pipeline (:func:`wf.store.postgres_cluster.end_stuck_owner`)."""
        self._require_open()
        async with self._reading(CLUSTER_READ_TIMEOUT_S) as conn:
            return await cluster.end_stuck_owner(conn, self._owner_key, silent_s)

    async def clock_skew_s(self) -> float:
        """This process's clock minus PostgreSQL's."""
        self._require_open()
        async with self._reading(CLUSTER_READ_TIMEOUT_S) as conn:
            return await cluster.clock_skew_s(conn)

    async def warm_copy(self, *, finished_max: int = 100_000) -> follow.WarmCopy:
        """A standby's fresh copy of the scheduler state (:mod:`wf.store.postgres_follow`)."""
        self._require_open()
        async with self._reading() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return await follow.full_load(conn, finished_max, self._where)

    async def catch_up(self, copy: follow.WarmCopy, until: int | None = None) -> bool:
        """Bring ``copy`` to the fence (or ``until``); ``False``: reload it in full."""
        self._require_open()
        async with self._reading(CLUSTER_READ_TIMEOUT_S) as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return await follow.catch_up(conn, copy, until)

    async def check(self, bodies: checks.BodyDecoders | None = None) -> list[Diagnostic]:
        """Every contradiction in the stored records, and every row of every table read
        and decoded (catalog bodies by ``bodies``; see :mod:`wf.store.check`): a table
        PostgreSQL reports damaged (SQLSTATE class XX) is a ``damaged`` diagnostic."""
        self._require_open()
        async with self._reading() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return await check_store(conn, bodies, self._where)


@contextmanager
def _cut_after(conn: Conn, timeout_s: float) -> Iterator[None]:
    """Cut ``conn``'s connection off if the block runs longer than ``timeout_s``.

    A peer that swallows bytes (a black-holed route, a frozen proxy) acknowledges
    everything at the TCP level, so neither keepalives nor the kernel ever end a
    wait on it. Cancelling the waiting task does not help either: psycopg then
    asks the server to cancel over a new connection and waits for it. Shutting
    the socket down (through a duplicate of its descriptor, so the descriptor
    psycopg waits on stays valid) makes that wait end at once with a connection
    error, which the callers already handle as a lost session."""
    handle = asyncio.get_running_loop().call_later(timeout_s, _shut_down, conn)
    try:
        yield
    finally:
        handle.cancel()


def _shut_down(conn: Conn) -> None:
    try:
        fd = conn.pgconn.socket
        duplicate = socket.socket(fileno=os.dup(fd))
    except (psycopg.Error, OSError):
        return  # already closed
    try:
        duplicate.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        duplicate.close()


async def _bound_session(conn: Conn, timeout_s: float) -> None:
    """Make PostgreSQL end ``conn``'s session after ``timeout_s`` of silence."""
    ms = max(1, round(timeout_s * 1000))
    probes = max(1, round(timeout_s / 2))
    for setting, value in (
        ("idle_session_timeout", ms),
        ("idle_in_transaction_session_timeout", ms),
        ("tcp_user_timeout", ms),
        ("tcp_keepalives_idle", 1),
        ("tcp_keepalives_interval", 1),
        ("tcp_keepalives_count", probes),
    ):
        await conn.execute(
            sql.SQL("SET {} = {}").format(sql.Identifier(setting), sql.Literal(value))
        )


async def _unbound_session(conn: Conn) -> None:
    for setting in ("idle_session_timeout", "idle_in_transaction_session_timeout"):
        await conn.execute(sql.SQL("SET {} = 0").format(sql.Identifier(setting)))


async def _execute(conn: Conn, query: Query) -> Result:
    """One query of a catalog body, on the session of the body's transaction."""
    cur = await conn.execute(sql_of(query, "postgres"), query.params)
    fetched = await cur.fetchall() if cur.description is not None else []
    return Result(fetched, cur.rowcount)


def _settle(group: list[_Append], error: StoreUnavailable | None) -> None:
    for one in group:
        if one.future.done():  # the caller was cancelled; the outcome stands anyway
            continue
        if error is None:
            one.future.set_result(None)
        else:
            one.future.set_exception(error)
