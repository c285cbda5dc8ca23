"""The embedded store: SQLite in WAL mode inside ``--store-root``.

Layout
------
::

    <store_root>/
      scheduler.db       scheduler state (WAL mode; -wal and -shm files beside it)
      scheduler.lock     ownership lock (flock) holding the owner as JSON

Nothing else: the runtime's and the schedules' data (artifacts, deployments,
runs, schedules, occurrences) are tables of ``scheduler.db``, so that one
transaction can cover a schedule, its occurrence and its run.

Theory of operation
-------------------
*Commit path (group commit).* One dedicated writer thread owns the write
connection. :meth:`SQLiteStore.append` turns its records into SQL steps
(:func:`~wf.store.codec.plan_writes`) on the caller's side, queues them with
an asyncio future and waits. The writer takes everything queued (up to
:data:`BATCH_STEPS_MAX` steps), runs it in ONE ``BEGIN IMMEDIATE`` ...
``COMMIT`` transaction as a few ``executemany`` calls
(:func:`~wf.store.codec.group_steps`), raises the counters, commits, and only
then resolves every future of the batch. Throughput therefore comes from
many appends sharing one commit (and one fsync), never from skipping it.

If the transaction fails, it is rolled back and every append of the batch
fails with :class:`~wf.errors.StoreUnavailable`: nothing of any of them is
stored. Appends of one batch are not retried one by one, because a later
append is computed from core state that includes the earlier ones; storing
it without them would write contradictions.

*Inline commits* (``durability="process"`` only). When nothing is queued or
being committed, a small append (up to :data:`INLINE_COMMIT_STEPS_MAX`
steps) is committed right on the caller's event-loop thread, under the same
lock the writer holds while it commits, instead of waking the writer thread:
without an fsync that commit takes tens of microseconds, while the thread
hop after an idle spell costs 0.3-1.2 ms, most of a light-load dispatch. The
queue keeps every other case in order: the lock is only tried, never waited
for, and the append goes inline only if every write queued before it has
finished (two counters, each written by one thread, compared under the lock).

*Checkpoints* run on the writer thread between the items it takes, every
:data:`CHECKPOINT_EVERY_COMMITS` commits (an inline commit that reaches the
count queues one), on a connection of their own
(``PRAGMA wal_checkpoint(PASSIVE)``) and outside the commit lock, so an
inline commit may go on meanwhile. Never inside a commit: SQLite's automatic
checkpoint (off here) runs in whichever connection commits, inline ones on
the event loop included, and one commit in about two hundred then took
2-10 ms. Never on a free-running thread either: under steady writes such a
checkpoint never completes, so the WAL is never started over (tried: it grew
past 500 MB in a burst, and the first commit after it spent 130 ms
truncating it). The writer thread checkpoints while no queued write is
running, so the checkpoint completes and the next write starts the WAL over:
it stays about one interval of commits long.

*Catalog writes* (artifacts, deployments, runs, schedules) go through the same writer
thread as their own short ``BEGIN IMMEDIATE`` transaction, queued between
group commits; they neither wait for nor set the append fence, because no
core record is computed from them. The operations themselves are the
transaction bodies of :mod:`wf.store.catalog`, written once for both stores;
this module only drives them (:meth:`SQLiteStore._run_write`,
:meth:`SQLiteStore._run_read`).

*Durability.* ``durability="fsync"`` (the default) sets
``synchronous=FULL``: every commit fsyncs the WAL before ``append``
returns, so an acknowledged transition survives a power cut or a kernel
crash. ``durability="process"`` sets ``synchronous=NORMAL``: commits reach
the OS but the WAL is fsynced only at checkpoints, so acknowledged
transitions survive the scheduler process dying (even by ``SIGKILL``) but
not a power cut; use it only where the machine itself is expendable.

*Reads* (:meth:`~SQLiteStore.load`, :meth:`~SQLiteStore.history`,
:meth:`~SQLiteStore.check` ...) use a second, read-only connection in a
worker thread; WAL lets them run beside the writer, each on one consistent
snapshot. Small :meth:`~SQLiteStore.existing_activity_ids` lookups (every
submission makes one) skip the thread: they run on the event-loop thread that
opened the store, on a third read-only connection only that thread uses
(see :data:`INLINE_LOOKUP_IDS_MAX`). Recovery's load is built for 10^6 live
activities: ``activities`` is stored in ``seq`` (rowid) order, spec blobs are
compact (defaults omitted), a chunk of blobs is decoded by one msgspec call,
and the lease-driven columns are read only for activities that were ever leased.

*Migrations* are the files of ``sql/sqlite/`` (``NNNN_name.sql``), applied
in order at :meth:`~SQLiteStore.open`, each in one transaction together with
its row in ``schema_migrations(version, name, applied_at)``. A database
whose schema is newer than this code is refused (:class:`CorruptRecord`).

*Opening.* A store is new only where ``scheduler.db`` does not exist: then
it is built whole under a private name (all migrations applied, fsynced)
and hard-linked into place, so a ``scheduler.db`` never exists half made.
Any ``scheduler.db`` that does exist must therefore already be a wf store,
and :meth:`~SQLiteStore.open` checks that before SQLite may change it: an
empty file (once taken for a new store: everything silently gone), a file
that is not SQLite, an SQLite database without wf's ``schema_migrations``
(another application's), or one SQLite calls damaged is refused with one
:class:`CorruptRecord` line naming the file. ``create=False`` (``wf store
check``) never creates a folder or a file and never migrates: a missing store
is :class:`~wf.errors.NotFound`. A store whose counters were rewound is
refused later, by recovery (:mod:`wf.store.check`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import operator
import os
import queue
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

import msgspec

from wf.errors import CorruptRecord, NotFound, OwnershipLost, StoreUnavailable, WfError
from wf.scheduler.model import TERMINAL_STATES, Activity, ActivityState
from wf.scheduler.outputs import Record
from wf.store import check as checks
from wf.store import codec, rows
from wf.store.catalog import DrivenCatalog
from wf.store.lock import FileOwnershipLock
from wf.store.protocol import Diagnostic, OwnerInfo, StoredState, StoredWorker
from wf.store.query import Body, Query, Result, finish, first, sql_of

_T = TypeVar("_T")

Durability = Literal["fsync", "process"]
"""``fsync``: survives power loss; ``process``: survives a process crash only."""

DB_NAME: Final = "scheduler.db"
LOCK_NAME: Final = "scheduler.lock"

BATCH_STEPS_MAX: Final = 50_000
"""Most SQL steps one group commit takes (one append larger than this commits alone)."""
CHECKPOINT_EVERY_COMMITS: Final = 256
"""Commits between two checkpoints on the writer thread (see the module docstring)."""
INLINE_COMMIT_STEPS_MAX: Final = 64
"""Largest append committed on the caller's thread when the writer is idle (see the
module docstring): a few rows, so the event loop stalls far less than a hop costs."""
APPENDS_WAITING_MAX: Final = 4_096
"""Most appends queued for the writer; further callers wait for a slot first."""
FETCH_ROWS_MAX: Final = 20_000
"""Rows fetched per ``fetchmany`` while loading or scanning."""
ID_CHUNK_MAX: Final = 500
"""Ids per ``IN (...)`` query (SQLite's bound-parameter limit is far higher)."""
BUSY_TIMEOUT_MS: Final = 5_000
"""How long a connection waits for a lock held by another connection."""
READ_MMAP_BYTES: Final = 256 * 1024 * 1024
"""Memory-mapped I/O for the read connection (faster full scans during recovery)."""
WAL_SIZE_LIMIT_BYTES: Final = 64 * 1024 * 1024
"""The WAL file is truncated back to this size after a checkpoint."""
INLINE_LOOKUP_IDS_MAX: Final = 64
"""Most distinct ids :meth:`SQLiteStore.existing_activity_ids` looks up on the
event-loop thread instead of in a worker thread.

Every submission asks whether its ids were ever used, and the thread hop of
``asyncio.to_thread`` after an idle spell costs 0.3-1.2 ms: more than the lookup
itself, so it dominated dispatch latency at light load. A primary-key lookup on
the loop thread costs 10-30 us per id in WAL mode (readers never wait for the
writer), so 64 ids stall the loop for ~0.15 ms, about half the cheapest hop;
beyond that the stall of every other task outweighs the hop saved, and bulk
callers (the run engine, big submissions) take the thread as before."""
INLINE_BUSY_TIMEOUT_MS: Final = 0
"""The inline connection never waits for a lock: it must not stall the event loop.
WAL readers meet a lock only in rare moments (another connection rebuilding the
WAL index); a lookup that meets one retries on the thread path, which may wait."""

SQLITE_HEADER: Final = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""
_MIGRATIONS: Final = "schema_migrations"
_DAMAGE: Final = (sqlite3.DatabaseError, UnicodeDecodeError)
"""What reading a damaged file raises (a text that is not UTF-8 comes back as
UnicodeDecodeError, not as an SQLite error)."""
_SQLITE_CORRUPT: Final = 11
_SQLITE_NOTADB: Final = 26
"""Primary SQLite result codes of a damaged file and of a file that is not a database."""

_MIGRATIONS_TABLE: Final = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at TEXT NOT NULL
)"""
_NOW_SQL: Final = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

_STATES: Final = {s.value: s for s in ActivityState}
_activity_list_decoder: Final = msgspec.msgpack.Decoder(list[Activity])


class _Pending:
    """One append waiting for the writer."""

    __slots__ = ("counters", "future", "loop", "steps")

    def __init__(
        self,
        steps: list[codec.Step],
        counters: dict[str, int],
        future: asyncio.Future[None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.steps = steps
        self.counters = counters
        self.future = future
        self.loop = loop


class _Call:
    """Queued by a catalog write: ``fn`` runs on the write connection in its own
    ``BEGIN IMMEDIATE`` transaction; its result or error settles ``future``."""

    __slots__ = ("fn", "future", "loop")

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], Any],
        future: asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.fn = fn
        self.future = future
        self.loop = loop


_STOP: Final = object()
_CHECKPOINT: Final = object()
"""Queued by an inline commit that reached :data:`CHECKPOINT_EVERY_COMMITS`."""
"""Queued by close(): the writer finishes what is queued before it, then exits."""


class _ClearFence:
    """Queued by clear_write_fence(): settled once everything before it was settled."""

    __slots__ = ("future", "loop")

    def __init__(self, future: asyncio.Future[None], loop: asyncio.AbstractEventLoop) -> None:
        self.future = future
        self.loop = loop


class SQLiteStore(DrivenCatalog):
    """The :class:`~wf.store.protocol.Store` over SQLite in ``store_root``."""

    def __init__(
        self, store_root: Path, *, durability: Durability = "fsync", create: bool = True
    ) -> None:
        if durability not in ("fsync", "process"):
            raise ValueError(f"durability must be 'fsync' or 'process', not {durability!r}")
        self.root = Path(store_root)
        """The store folder (see the module docstring for its layout)."""
        self.durability: Durability = durability
        """The commit durability mode."""
        self.create = create
        """Whether :meth:`open` may create a missing store and apply pending migrations;
        ``False`` opens only an existing, current store and changes nothing in it
        (``wf store check``)."""
        self.db_path = self.root / DB_NAME
        self.lock = FileOwnershipLock(self.root / LOCK_NAME)
        self._write: sqlite3.Connection | None = None
        self._read: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()
        self._inline: sqlite3.Connection | None = None
        """Read-only connection for small lookups, used only on ``_inline_thread``."""
        self._inline_thread: int | None = None
        """``threading.get_ident()`` of the event-loop thread that opened the store."""
        self._queue: queue.SimpleQueue[_Pending | _Call | object] = queue.SimpleQueue()
        self._writing = threading.Lock()
        """Held by whoever commits on the write connection (the writer, or an inline
        commit)."""
        self._enqueued = 0
        """Writes queued so far (written on the event-loop thread only)."""
        self._finished = 0
        """Queued writes the writer has finished (written by the writer, under
        ``_writing``); equal to ``_enqueued`` when nothing is queued or committing."""
        self.inline_commits = 0
        """Appends committed inline (see the module docstring)."""
        self._commits_at_checkpoint = 0
        self._checkpoint_queued = False
        self._checkpoint_wanted = False
        self._checkpointing: sqlite3.Connection | None = None
        """The writer thread's checkpoint connection."""
        self.checkpoints = 0
        """Checkpoints run so far (on the writer thread)."""
        self._writer: threading.Thread | None = None
        self._slots: asyncio.Semaphore | None = None
        self._closed = False
        self._fence: str | None = None
        """Why the last failed commit failed; appends are refused until cleared."""
        self.commits = 0
        """Group-commit transactions committed so far (written by the writer thread)."""
        self.appends_committed = 0
        """Appends acknowledged so far; over ``commits`` it is the mean batch size."""
        self.on_ownership_lost: Callable[[OwnershipLost], None] | None = None
        """Never called: the file lock lives as long as this process (see the protocol)."""

    # ------------------------------------------------------------- lifecycle

    async def open(self) -> None:
        """Create the folder and a new store if there is none, check that the file is
        a wf store, connect, and apply pending migrations (see *Opening* in the module
        docstring). A file that is empty, not SQLite, another application's database
        or damaged is refused with :class:`CorruptRecord` naming it; with
        ``create=False`` a missing store is :class:`NotFound` and pending migrations
        are refused instead of applied."""
        if self._write is not None:
            return
        if self._closed:
            raise StoreUnavailable("the store was closed", store=str(self.root))
        try:
            await asyncio.to_thread(self._open_sync)
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            raise self._refusal(exc) from exc
        except OSError as exc:
            raise StoreUnavailable(
                f"cannot open store {self.db_path}: {exc.strerror or exc}", path=str(self.db_path)
            ) from exc
        try:
            self._open_inline()
        except BaseException:
            for conn in (self._checkpointing, self._write, self._read):
                if conn is not None:
                    conn.close()
            self._write = self._read = self._checkpointing = None
            raise
        self._writer = threading.Thread(
            target=self._writer_loop, name=f"wf-sqlite-writer:{self.root}", daemon=True
        )
        self._writer.start()

    def request_checkpoint(self) -> None:
        """Queue a checkpoint for the writer thread (it runs between commits)."""
        if self._checkpoint_queued or self._writer is None or self._closed:
            return
        self._checkpoint_queued = True
        self._enqueued += 1
        self._queue.put(_CHECKPOINT)

    def _checkpoint(self) -> None:
        """Copy the WAL back (writer thread, outside ``_writing``; see the module doc)."""
        conn = self._checkpointing
        if conn is None:
            return
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error:
            return  # the next one copies what this one could not
        self.checkpoints += 1

    def _checkpoint_due(self) -> bool:
        """Whether the writer should checkpoint now (under ``_writing``); resets the count."""
        if not self._checkpoint_wanted and (
            self.commits - self._commits_at_checkpoint < CHECKPOINT_EVERY_COMMITS
        ):
            return False
        self._checkpoint_wanted = self._checkpoint_queued = False
        self._commits_at_checkpoint = self.commits
        return True

    def _open_sync(self) -> None:
        if self.create:
            self.root.mkdir(parents=True, exist_ok=True)
            if not os.path.lexists(self.db_path):
                self._create_db()
        elif not self.root.is_dir():
            raise NotFound(
                f"no store at {self.root}: the folder does not exist", path=str(self.root)
            )
        elif not os.path.lexists(self.db_path):
            raise NotFound(
                f"no store at {self.root}: it holds no {DB_NAME}", path=str(self.db_path)
            )
        self._inspect()
        write = self._connect()
        read: sqlite3.Connection | None = None
        try:
            write.execute(
                f"PRAGMA synchronous={'FULL' if self.durability == 'fsync' else 'NORMAL'}"
            )
            write.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT_BYTES}")
            # The writer thread checkpoints between commits, never a commit (module doc).
            write.execute("PRAGMA wal_autocheckpoint=0")
            if self.create:
                self._migrate(write)
            else:
                self._require_current(write)
            read = self._connect()
            read.execute("PRAGMA query_only=ON")
            read.execute(f"PRAGMA mmap_size={READ_MMAP_BYTES}")
            checkpointing = self._connect()
        except BaseException:
            write.close()
            if read is not None:
                read.close()
            raise
        self._write = write
        self._read = read
        self._checkpointing = checkpointing

    def _create_db(self) -> None:
        """A new store's database, built whole under a private name and linked into
        place: ``scheduler.db`` never exists half made, so an empty or partial one is
        always damage, never a store being created (see *Opening*)."""
        fresh = self.root / f".{DB_NAME}.{os.getpid()}.{threading.get_ident()}.new"
        private = (fresh, fresh.with_name(fresh.name + "-journal"))
        for leftover in private:
            leftover.unlink(missing_ok=True)
        try:
            conn = sqlite3.connect(fresh, isolation_level=None)
            try:
                conn.execute("PRAGMA synchronous=FULL")
                self._migrate(conn)
            finally:
                conn.close()
            fd = os.open(fresh, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            _link_new(fresh, self.db_path)
            _fsync_dir(self.root)
        finally:
            for leftover in private:
                leftover.unlink(missing_ok=True)

    def _inspect(self) -> None:
        """Refuse a ``scheduler.db`` that is not a wf store, before SQLite may change it:
        empty, not SQLite, another application's database, or damaged."""
        path = self.db_path
        with open(path, "rb") as file:
            header = file.read(len(SQLITE_HEADER))
        if not header:
            raise CorruptRecord(
                f"store file {path} is empty (0 bytes), not a wf store; a new store is "
                f"created only where no {DB_NAME} exists: restore it or move it away",
                path=str(path),
            )
        if header != SQLITE_HEADER:
            raise CorruptRecord(
                f"store file {path} is not an SQLite database, not a wf store", path=str(path)
            )
        uri = f"file:{urllib.parse.quote(str(path.absolute()))}?mode=rw"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            tables = {
                str(name)
                for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
            if _MIGRATIONS not in tables:
                held = ", ".join(sorted(tables)[:5]) or "no tables"
                raise CorruptRecord(
                    f"store file {path} is an SQLite database but not a wf store "
                    f"(no {_MIGRATIONS} table; it holds {held})",
                    path=str(path),
                )
            try:
                applied = conn.execute(f"SELECT version, name FROM {_MIGRATIONS}").fetchall()
            except sqlite3.OperationalError as exc:
                raise CorruptRecord(
                    f"store file {path} is an SQLite database but not a wf store ({exc})",
                    path=str(path),
                ) from exc
            if not applied and tables - {_MIGRATIONS}:
                raise CorruptRecord(
                    f"store file {path} is an SQLite database but not a wf store "
                    f"(tables without recorded migrations)",
                    path=str(path),
                )
        finally:
            conn.close()

    def _refusal(self, exc: sqlite3.Error | UnicodeDecodeError) -> WfError:
        """The error :meth:`open` raises for an SQLite error: damage names the file."""
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or isinstance(exc, UnicodeDecodeError):
            return CorruptRecord(
                f"store file {self.db_path} is damaged: {exc}", path=str(self.db_path)
            )
        return StoreUnavailable(
            f"cannot open store file {self.db_path}: {exc}", path=str(self.db_path)
        )

    def _open_inline(self) -> None:
        """Connect the inline lookup connection on this (the event-loop) thread.

        ``check_same_thread`` stays on so that SQLite itself refuses any use from
        another thread; :meth:`existing_activity_ids` only takes it on this one.
        Opening it here costs well under a millisecond, once per store.
        """
        conn = self._connect(same_thread=True, busy_timeout_ms=INLINE_BUSY_TIMEOUT_MS)
        try:
            conn.execute("PRAGMA query_only=ON")
        except BaseException:
            conn.close()
            raise
        self._inline = conn
        self._inline_thread = threading.get_ident()

    def _connect(
        self, *, same_thread: bool = False, busy_timeout_ms: int = BUSY_TIMEOUT_MS
    ) -> sqlite3.Connection:
        conn = sqlite3.connect(self.db_path, check_same_thread=same_thread, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            conn.close()
            raise StoreUnavailable(
                f"could not put {self.db_path} in WAL mode (got {mode})", path=str(self.db_path)
            )
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Apply every pending migration, each with its ``schema_migrations`` row."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(_MIGRATIONS_TABLE)
            applied = dict(conn.execute("SELECT version, name FROM schema_migrations"))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        known = self._known_migrations(applied)
        for version, name, sql in known:
            if version in applied:
                continue
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Another process may have applied it while we waited for the lock.
                row = conn.execute(
                    "SELECT 1 FROM schema_migrations WHERE version = ?", (version,)
                ).fetchone()
                if row is None:
                    for statement in _statements(sql):
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name, applied_at) "
                        f"VALUES (?, ?, {_NOW_SQL})",
                        (version, name),
                    )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def _require_current(self, conn: sqlite3.Connection) -> None:
        """Refuse a store whose schema is not exactly this code's (``create=False``
        never migrates)."""
        applied = dict(conn.execute("SELECT version, name FROM schema_migrations"))
        known = codec.migrations("sqlite")
        checks.verify_migrations(applied, known, str(self.db_path), pending_ok=False)

    def _known_migrations(self, applied: dict[int, str]) -> list[tuple[int, str, str]]:
        """This code's migrations, once ``applied`` is known to be a prefix of them
        (CorruptRecord otherwise)."""
        known = codec.migrations("sqlite")
        checks.verify_migrations(applied, known, str(self.db_path), pending_ok=True)
        return known

    async def close(self) -> None:
        """Flush pending appends, stop the writer, release ownership, disconnect."""
        if self._closed:
            return
        self._closed = True
        writer = self._writer
        if writer is not None:
            self._queue.put(_STOP)
            await asyncio.to_thread(writer.join)
            self._writer = None
        self.lock.release()
        for conn in (self._checkpointing, self._write, self._read):
            if conn is not None:
                conn.close()
        self._write = self._read = self._checkpointing = None
        self._close_inline()

    def _close_inline(self) -> None:
        """Close the inline connection; only its own thread may (``check_same_thread``).

        Closed from another thread, the reference is dropped instead and the
        connection is closed when collected; ``_closed`` already keeps every
        lookup off it.
        """
        conn, self._inline = self._inline, None
        if conn is not None and self._inline_thread == threading.get_ident():
            conn.close()
        self._inline_thread = None

    async def schema_version(self) -> int:
        """The highest applied migration version."""
        row = await self._read_one("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
        return int(row[0])

    # ------------------------------------------------------------- ownership

    async def acquire_ownership(self, owner: OwnerInfo) -> None:
        """Take ``<store_root>/scheduler.lock`` or raise OwnershipConflict naming the holder."""
        self._require_open()
        await asyncio.to_thread(self.lock.acquire, owner)

    async def release_ownership(self) -> None:
        """Give the lock up (idempotent)."""
        self.lock.release()

    def holder(self) -> OwnerInfo | None:
        """Who owns the store now, if anyone (for ``wf store`` commands)."""
        return self.lock.holder()

    # ---------------------------------------------------------------- writes

    async def clear_write_fence(self) -> None:
        """Accept appends again after a failed commit (see the protocol)."""
        if self._closed or self._writer is None:
            raise StoreUnavailable("the store is not open", store=str(self.root))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._enqueued += 1
        self._queue.put(_ClearFence(future, loop))
        await future

    async def prove_writable(self) -> None:
        """Change a counter and change it back in a transaction of its own (see the
        protocol): SQLite writes the page, so a full disk or a failing device refuses it."""
        try:
            await self._write_tx(_rewrite_counter)
        except StoreUnavailable as exc:
            raise StoreUnavailable(
                f"the store does not take writes: {exc.message}", store=str(self.root)
            ) from exc

    async def append(self, records: Sequence[Record]) -> None:
        """Persist ``records`` in one group commit; return once committed."""
        if not records:
            return
        if self._closed or self._writer is None:
            raise StoreUnavailable("the store is not open", store=str(self.root))
        steps, counters = codec.plan_writes(records)
        if self._slots is None:
            self._slots = asyncio.Semaphore(APPENDS_WAITING_MAX)
        async with self._slots:
            if self._closed:
                raise StoreUnavailable("the store is closed", store=str(self.root))
            loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = loop.create_future()
            pending = _Pending(steps, counters, future, loop)
            if not self._commit_inline(pending):
                self._enqueued += 1
                self._queue.put(pending)
            # Once queued the write goes ahead even if this caller is cancelled: a
            # cancelled append may or may not be stored, like one cut off by a crash.
            await asyncio.shield(future)

    def _commit_inline(self, pending: _Pending) -> bool:
        """Commit ``pending`` here if the writer is idle (see the module docstring)."""
        conn = self._write
        if (
            self.durability != "process"
            or conn is None
            or len(pending.steps) > INLINE_COMMIT_STEPS_MAX
            or not self._writing.acquire(blocking=False)
        ):
            return False
        try:
            if self._enqueued != self._finished:
                return False  # an earlier write is queued or committing: keep the order
            self._commit(conn, [pending])
            self.inline_commits += 1
            if self.commits - self._commits_at_checkpoint >= CHECKPOINT_EVERY_COMMITS:
                self.request_checkpoint()
            return True
        finally:
            self._writing.release()

    def _writer_loop(self) -> None:
        """The writer thread: take what is queued, commit it as one transaction."""
        conn = self._write
        assert conn is not None
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is _STOP:
                break
            with self._writing:
                stopping = self._take(conn, first)
                due = self._checkpoint_due()
            if due:
                self._checkpoint()
        # Nothing should follow the stop mark; never leave a caller waiting if it did.
        late: list[_Pending] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Pending):
                late.append(item)
            elif isinstance(item, _Call):
                _deliver(item, None, StoreUnavailable("the store was closed before this write"))
        _settle(late, "the store was closed before this append was committed")

    def _take(self, conn: sqlite3.Connection, first: object) -> bool:
        """Finish ``first`` and, for an append, what queued behind it (one group
        commit); under ``_writing``. Returns whether the stop mark came up."""
        stopping = False
        if first is _CHECKPOINT:
            self._checkpoint_wanted = True
            self._finished += 1
            return stopping
        if isinstance(first, _ClearFence):
            self._clear(first)
            self._finished += 1
            return stopping
        if isinstance(first, _Call):
            _run_call(conn, first)
            self._finished += 1
            return stopping
        assert isinstance(first, _Pending)
        batch = [first]
        size = len(first.steps)
        clear: object = None
        while size < BATCH_STEPS_MAX:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                stopping = True
                break
            if isinstance(item, (_ClearFence, _Call)) or item is _CHECKPOINT:
                clear = item
                break
            assert isinstance(item, _Pending)
            batch.append(item)
            size += len(item.steps)
        self._commit(conn, batch)
        if isinstance(clear, _ClearFence):
            self._clear(clear)
        elif isinstance(clear, _Call):
            _run_call(conn, clear)
        elif clear is _CHECKPOINT:
            self._checkpoint_wanted = True
        self._finished += len(batch) + (clear is not None)
        return stopping

    def _clear(self, marker: _ClearFence) -> None:
        self._fence = None
        marker.loop.call_soon_threadsafe(_resolve, marker.future)

    def _commit(self, conn: sqlite3.Connection, batch: list[_Pending]) -> None:
        if self._fence is not None:
            # An earlier commit failed: later appends were computed from state that
            # includes it, so none may be stored until the owner reloads.
            _settle(batch, f"an earlier commit failed ({self._fence}); nothing was stored")
            return
        steps: list[codec.Step] = []
        counters: dict[str, int] = {}
        for pending in batch:
            steps.extend(pending.steps)
            for name, value in pending.counters.items():
                if value > counters.get(name, 0):
                    counters[name] = value
        q = codec.queries()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for name, params in codec.group_steps(steps):
                    conn.executemany(q[name], params)
                if counters:
                    conn.executemany(
                        q["raise_counter"],
                        [{"name": n, "value": v} for n, v in sorted(counters.items())],
                    )
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        except BaseException as exc:  # the thread must outlive any failure
            self._fence = f"{type(exc).__name__}: {exc}"
            _settle(batch, f"commit failed, nothing of it was stored: {self._fence}")
            return
        self.commits += 1
        self.appends_committed += len(batch)
        _settle(batch, None)

    # ------------------------------------------------------- runtime catalog

    async def _write_tx(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn`` in one transaction on the writer thread's connection."""
        if self._closed or self._writer is None:
            raise StoreUnavailable("the store is not open", store=str(self.root))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._enqueued += 1
        self._queue.put(_Call(fn, future, loop))
        return await asyncio.shield(future)

    async def _run_write(self, body: Body[_T]) -> _T:
        """Run a catalog write body (:mod:`wf.store.catalog`) in one ``BEGIN IMMEDIATE``
        transaction on the writer thread's connection, queued between group commits."""
        step = first(body)
        if isinstance(step, tuple):
            return step[0]
        pending: Query = step
        result: _T = await self._write_tx(
            lambda conn: finish(body, pending, functools.partial(_execute, conn))
        )
        return result

    async def _run_read(self, body: Body[_T]) -> _T:
        """Run a catalog read body in one read transaction on the reading thread (rows are
        decoded there too: a page is at most ``pages.STORE_PAGE_ROWS_MAX`` rows, so the
        loop never waits on a big read)."""
        step = first(body)
        if isinstance(step, tuple):
            return step[0]
        pending: Query = step
        result: _T = await self._reading(
            lambda conn: finish(body, pending, functools.partial(_execute, conn))
        )
        return result

    # ----------------------------------------------------------------- reads

    def _require_open(self) -> sqlite3.Connection:
        if self._read is None or self._closed:
            raise StoreUnavailable("the store is not open", store=str(self.root))
        return self._read

    async def _read_one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        def run(conn: sqlite3.Connection) -> Any:
            return conn.execute(sql, params).fetchone()

        return await self._reading(run)

    async def _reading(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn`` on the read connection in a thread, inside one read transaction."""
        conn = self._require_open()

        def run() -> Any:
            with self._read_lock:
                conn.execute("BEGIN")
                try:
                    return fn(conn)
                finally:
                    conn.execute("COMMIT")

        try:
            return await asyncio.to_thread(run)
        except sqlite3.Error as exc:
            raise StoreUnavailable(
                f"reading store {self.db_path} failed: {type(exc).__name__}: {exc}",
                store=str(self.root),
            ) from exc
        except UnicodeDecodeError as exc:
            # SQLite hands back a text value that is not UTF-8: the file is damaged.
            raise CorruptRecord(
                f"store file {self.db_path} is damaged: a stored text is not UTF-8 ({exc})",
                store=str(self.root),
            ) from exc

    async def load(self, *, finished_max: int = 100_000) -> StoredState:
        """The durable state as of the last commit; corrupt rows become diagnostics."""
        if finished_max < 0:
            raise ValueError("finished_max must not be negative")
        where = str(self.db_path)
        state: StoredState = await self._reading(lambda c: _load(c, finished_max, where))
        return state

    async def existing_activity_ids(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` were ever stored.

        Up to :data:`INLINE_LOOKUP_IDS_MAX` ids are looked up right here on the
        event-loop thread (see there why); more, or a caller on another thread,
        take the read thread.
        """
        unique = list(dict.fromkeys(ids))
        if not unique:
            return set()
        if len(unique) <= INLINE_LOOKUP_IDS_MAX:
            found = self._lookup_inline(unique)
            if found is not None:
                return found

        def run(conn: sqlite3.Connection) -> set[str]:
            found: set[str] = set()
            for start in range(0, len(unique), ID_CHUNK_MAX):
                chunk = unique[start : start + ID_CHUNK_MAX]
                marks = ",".join("?" * len(chunk))
                found.update(
                    row[0]
                    for row in conn.execute(
                        f"SELECT activity_id FROM activities WHERE activity_id IN ({marks})",
                        chunk,
                    )
                )
            return found

        result: set[str] = await self._reading(run)
        return result

    def _lookup_inline(self, unique: list[str]) -> set[str] | None:
        """``existing_activity_ids`` on the inline connection, or ``None`` to take the
        thread path (another thread, or the lookup met a lock).

        The query runs in autocommit mode: its own read transaction, which ends
        when the rows are fetched, so every lookup sees every commit made before
        it and no snapshot is held open (one would also keep checkpoints from
        recycling the WAL).
        """
        self._require_open()  # a closed store raises here, as on the thread path
        conn = self._inline
        if conn is None or self._inline_thread != threading.get_ident():
            return None
        marks = ",".join("?" * len(unique))
        try:
            return {
                row[0]
                for row in conn.execute(
                    f"SELECT activity_id FROM activities WHERE activity_id IN ({marks})",
                    unique,
                ).fetchall()
            }
        except sqlite3.Error:
            # Busy (the connection never waits) or broken: the thread path waits
            # for locks, and reports a real failure as StoreUnavailable.
            return None

    async def check(self, bodies: checks.BodyDecoders | None = None) -> list[Diagnostic]:
        """Every contradiction, malformed row and damaged page in the store: SQLite's
        own ``PRAGMA integrity_check``, the contradiction queries, and every record
        of every table decoded (catalog bodies by ``bodies``, see
        :mod:`wf.store.check`)."""
        conn = self._require_open()
        where = str(self.db_path)

        def run() -> list[Diagnostic]:
            with self._read_lock:
                conn.execute("BEGIN")
                try:
                    found = _check(conn, bodies, where)
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("COMMIT")
                    raise
                try:
                    conn.execute("COMMIT")
                except sqlite3.DatabaseError as exc:
                    # A read that met damage may report it again as it ends; the
                    # transaction is over all the same, and the reads stand.
                    if conn.in_transaction:
                        raise
                    if not found:
                        found.append(checks.damaged(where, "database", exc))
                return found

        try:
            return await asyncio.to_thread(run)
        except sqlite3.Error as exc:
            raise StoreUnavailable(
                f"reading store {self.db_path} failed: {type(exc).__name__}: {exc}",
                store=str(self.root),
            ) from exc


# ------------------------------------------------------------------ helpers


def _link_new(fresh: Path, target: Path) -> None:
    """Put ``fresh`` in place as ``target`` unless ``target`` exists by now.

    A hard link, not a rename: a store another process created meanwhile is kept,
    never replaced by an empty one. A file system without hard links gets a rename
    after a last look (the window is the two calls)."""
    try:
        os.link(fresh, target)
    except FileExistsError:
        return
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if not os.path.lexists(target):
            os.rename(fresh, target)


def _fsync_dir(folder: Path) -> None:
    """Make a new directory entry in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _deliver(call: _Call, result: Any, error: BaseException | None) -> None:
    """Settle a catalog write's future on its loop."""

    def settle() -> None:
        if call.future.done():
            return
        if error is None:
            call.future.set_result(result)
        else:
            call.future.set_exception(error)

    with contextlib.suppress(RuntimeError):  # that loop is already closed
        call.loop.call_soon_threadsafe(settle)


def _rewrite_counter(conn: sqlite3.Connection) -> None:
    # Raised and lowered back: SQLite skips writing a row updated to its own value,
    # and a page changed twice is still written.
    conn.execute("UPDATE counters SET value = value + 1 WHERE name = 'seq'")
    conn.execute("UPDATE counters SET value = value - 1 WHERE name = 'seq'")


def _run_call(conn: sqlite3.Connection, call: _Call) -> None:
    """One catalog write in its own transaction (on the writer thread)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = call.fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
    except WfError as exc:
        _deliver(call, None, exc)
    except Exception as exc:  # the thread must outlive any failure
        _deliver(call, None, StoreUnavailable(f"catalog write failed, nothing stored: {exc!r}"))
    else:
        _deliver(call, result, None)


def _execute(conn: sqlite3.Connection, query: Query) -> Result:
    """One query of a catalog body, on the connection of the body's transaction."""
    cursor = conn.execute(sql_of(query, "sqlite"), query.params)
    fetched = cursor.fetchall() if cursor.description is not None else []
    return Result(fetched, cursor.rowcount)


def _settle(batch: list[_Pending], failure: str | None) -> None:
    """Resolve a batch's futures on their loops: one wake-up per loop, not per append.

    A batch committed inline, on its own loop's thread, is resolved at once: no
    wake-up through the loop's self-pipe and no extra loop turn before the commit's
    decisions go out."""
    try:
        here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:  # the writer thread
        here = None
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for pending in batch:
        by_loop.setdefault(pending.loop, []).append(pending.future)
    for loop, futures in by_loop.items():

        def resolve(futures: list[asyncio.Future[None]] = futures) -> None:
            for future in futures:
                if future.done():  # its caller was cancelled; the outcome stands anyway
                    continue
                if failure is None:
                    future.set_result(None)
                else:
                    future.set_exception(StoreUnavailable(failure, cause=failure))

        if loop is here:
            resolve()
            continue
        with contextlib.suppress(RuntimeError):  # that loop is already closed
            loop.call_soon_threadsafe(resolve)


def _statements(sql: str) -> Iterable[str]:
    """The complete statements of a migration script (executescript would commit)."""
    buffer = ""
    for line in sql.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statement = buffer.strip()
            buffer = ""
            if statement:
                yield statement
    if buffer.strip() and not all(
        ln.strip().startswith("--") or not ln.strip() for ln in buffer.splitlines()
    ):
        raise CorruptRecord("migration ends with an incomplete statement", tail=buffer[:200])


def _malformed(table: str, key: str, what: str, activity_id: str | None) -> Diagnostic:
    blocked = "; the activity is blocked" if activity_id is not None else ""
    return Diagnostic(
        kind="malformed_row",
        table=table,
        key=key,
        message=f"{table} row {key!r}: {what}{blocked}",
        activity_id=activity_id,
    )


def _decode_specs(specs: list[bytes]) -> list[Activity | None] | None:
    """Every blob of a chunk decoded in one call; ``None`` if any is malformed."""
    n = len(specs)
    try:
        decoded: list[Activity | None] = list(
            _activity_list_decoder.decode(b"\xdd" + n.to_bytes(4, "big") + b"".join(specs))
        )
    # ValueError: msgspec reports a str that is not UTF-8 as UnicodeDecodeError.
    except (msgspec.DecodeError, TypeError, ValueError):
        return None
    return decoded if len(decoded) == n else None


def _decode_one(spec: object) -> Activity | str:
    """One blob decoded, or why it is not an Activity."""
    if not isinstance(spec, bytes):
        return f"spec is {type(spec).__name__}, not a blob"
    try:
        return codec.activity_decoder.decode(spec)
    except (msgspec.DecodeError, ValueError) as exc:
        return f"spec blob is not a valid Activity ({type(exc).__name__}: {exc})"


_LIVE_STATES: Final = tuple(s for s in ActivityState if s not in TERMINAL_STATES)
_STATE_OF_KIND: Final = tuple(s for s in _LIVE_STATES for _leased_ever in (0, 1))
"""``kind`` (see :data:`_SELECT_LIVE`) -> state: ``kind = 2 * state index + leased_ever``."""

_SELECT_LIVE: Final = (
    "SELECT activity_id, spec, queued_at, not_before, "
    "CASE WHEN typeof(queued_at) = 'real' AND typeof(not_before) IN ('real', 'null') "
    "THEN (CASE state "
    + " ".join(f"WHEN '{s.value}' THEN {i}" for i, s in enumerate(_LIVE_STATES))
    + " END) * 2 + (token <> 0) END AS kind "
    "FROM activities WHERE state NOT IN ('completed', 'failed', 'cancelled') ORDER BY seq"
)
"""Unfinished activities in creation order (the ``activities_live`` index: the WHERE
clause must stay the index's), for recovery.

``kind`` folds the state, its column types and ``leased_ever`` (token != 0)
into one small integer, ``NULL`` when a value is unknown or mistyped: SQLite
checks them where they lie, and Python gets a cached small int instead of a
state string to allocate and three values to type-check per row (about 0.1 s
of the ~1.9 s load of 10^6 rows; the fetch itself, ~1 s, is mostly the
sqlite3 module building row tuples). A ``NULL`` kind is re-read by id to say
what is wrong (:func:`_why_malformed`)."""


def _live_activities(conn: sqlite3.Connection, diagnostics: list[Diagnostic]) -> list[Activity]:
    """Unfinished activities: spec blobs decoded a chunk at a time, lifecycle applied.

    The hot path (10^6 queued activities) costs one five-column ``fetchmany``
    row, one slice of a single msgspec decode call, an id comparison and three
    attribute stores per activity. Only a lease moves the other lifecycle
    columns (attempt, failures, requeues, steals, token, worker, expiry, last
    error), so they are read by id, afterwards, for the rows that were ever
    leased (token != 0); ``check`` reports rows that break that rule. SQLite
    columns are dynamically typed, so every value is type-checked (in the
    query: see :data:`_SELECT_LIVE`) before it reaches the core.
    """
    out: list[Activity] = []
    touched: dict[str, Activity] = {}
    state_of = _STATE_OF_KIND
    append = out.append
    spec_of = operator.itemgetter(1)
    cursor = conn.execute(_SELECT_LIVE)
    while batch := cursor.fetchmany(FETCH_ROWS_MAX):
        # A non-blob spec makes the bulk decode fail (TypeError), and so the
        # per-row fallback below name it: no per-row type test on the hot path.
        decoded = _decode_specs(list(map(spec_of, batch)))
        if decoded is None:
            decoded = []
            for row in batch:
                one = _decode_one(row[1])
                if isinstance(one, str):
                    diagnostics.append(_malformed("activities", str(row[0]), one, str(row[0])))
                    decoded.append(None)
                else:
                    decoded.append(one)
        for (aid, _spec, queued_at, not_before, kind), a in zip(batch, decoded, strict=True):
            if a is None:
                continue
            if kind is None or a.activity_id != aid:
                what = _why_malformed(conn, aid, a)
                diagnostics.append(_malformed("activities", str(aid), what, str(aid)))
                continue
            a.state = state_of[kind]
            a.queued_at = queued_at
            a.not_before = not_before
            if kind & 1:
                touched[aid] = a
            append(a)
    bad = _apply_lifecycle(conn, touched, diagnostics)
    return [a for a in out if a.activity_id not in bad] if bad else out


def _why_malformed(conn: sqlite3.Connection, aid: object, a: Activity) -> str:
    """What is wrong with a live row :data:`_SELECT_LIVE` gave no kind, or whose spec
    names another activity (the rare path: re-read in the same read transaction)."""
    if a.activity_id != aid:
        return f"spec blob names activity {a.activity_id!r}"
    found = conn.execute(
        "SELECT state, queued_at, not_before, token FROM activities WHERE activity_id = ?",
        (aid,),
    ).fetchone()
    if found is None:  # not possible inside one read transaction
        return "row vanished while loading"
    state, queued_at, not_before, token = found
    if state not in _STATES:
        return f"unknown state {state!r}"
    if type(queued_at) is not float or (not_before is not None and type(not_before) is not float):
        return f"bad queued_at {queued_at!r} or not_before {not_before!r}"
    return f"bad token {token!r}"


_INTS: Final = frozenset({int})
_STR_OR_NONE: Final = frozenset({str, type(None)})


def _apply_lifecycle(
    conn: sqlite3.Connection, touched: dict[str, Activity], diagnostics: list[Diagnostic]
) -> set[str]:
    """Read and apply the lease-driven columns of ``touched``; returns the malformed ids."""
    bad: set[str] = set()
    ids = list(touched)
    for start in range(0, len(ids), ID_CHUNK_MAX):
        chunk = ids[start : start + ID_CHUNK_MAX]
        sql = _SELECT_LIFECYCLE.format(marks=",".join("?" * len(chunk)))
        for aid, *ints, worker_id, lease_expires_at, last_error in conn.execute(sql, chunk):
            if (
                any(type(v) not in _INTS or v < 0 for v in ints)
                or type(worker_id) not in _STR_OR_NONE
                or type(last_error) not in _STR_OR_NONE
                or type(lease_expires_at) is not float
            ):
                what = f"bad lifecycle columns {(*ints, worker_id, lease_expires_at, last_error)!r}"
                diagnostics.append(_malformed("activities", aid, what, aid))
                bad.add(aid)
                continue
            a = touched[aid]
            a.attempt, a.failures, a.infra_requeues, a.steals, a.token = ints
            a.worker_id = worker_id
            a.lease_expires_at = lease_expires_at
            a.last_error = last_error
    return bad


_SELECT_LIFECYCLE: Final = (
    "SELECT activity_id, attempt, failures, infra_requeues, steals, token, worker_id, "
    "lease_expires_at, last_error FROM activities WHERE activity_id IN ({marks})"
)
"""The lifecycle columns of the activities :data:`_SELECT_LIVE` marked as touched."""


def _load(conn: sqlite3.Connection, finished_max: int, where: str) -> StoredState:
    q = codec.queries()
    diagnostics: list[Diagnostic] = []
    counters = rows.counters_from_rows(conn.execute(q["select_counters"]).fetchall(), diagnostics)
    # Recovery refuses a rewound counter (wf.store.check); its one full scan, for
    # the largest token, costs ~60 ms per 10^6 activities.
    diagnostics.extend(
        checks.counters_behind(conn.execute(q[checks.COUNTERS_QUERY]).fetchall(), where)
    )
    activities = _live_activities(conn, diagnostics)
    finished: list[tuple[str, ActivityState]] = []
    if finished_max:
        for aid, state in conn.execute(q["select_recent_finished"], {"limit": finished_max}):
            value = _STATES.get(state)
            if value is None or value not in TERMINAL_STATES:
                diagnostics.append(
                    _malformed("transitions", str(aid), f"unknown terminal state {state!r}", None)
                )
                continue
            finished.append((aid, value))
        finished.reverse()
    return StoredState(
        seq=counters["seq"],
        token=counters["token"],
        worker_seq=counters["worker_seq"],
        activities=activities,
        finished=finished,
        workers=_workers(conn, diagnostics),
        diagnostics=diagnostics,
    )


def _workers(conn: sqlite3.Connection, diagnostics: list[Diagnostic]) -> list[StoredWorker]:
    fetched = conn.execute(codec.queries()["select_workers"]).fetchall()
    return rows.decode_all(fetched, rows.worker_from_row, diagnostics)


def _check(
    conn: sqlite3.Connection, bodies: checks.BodyDecoders | None, where: str
) -> list[Diagnostic]:
    """``check`` in one read transaction. A step SQLite cannot finish (a damaged
    page) is reported and the next one still runs, so one bad page hides nothing else."""
    q = codec.queries()
    record = checks.RecordCheck(bodies, where)
    found = record.found
    try:
        lines = conn.execute(f"PRAGMA integrity_check({checks.INTEGRITY_ERRORS_MAX})")
        record.integrity(str(line) for (line,) in lines.fetchall())
    except _DAMAGE as exc:
        record.damaged("database", exc)
    for name, to_diagnostic in rows.CHECKS:
        try:
            for row in conn.execute(q[name]).fetchall():
                diagnostic = to_diagnostic(row)
                if diagnostic is not None:
                    found.append(diagnostic)
        except _DAMAGE as exc:
            record.damaged(name.removeprefix("check_"), exc)
    _scan_malformed(conn, record)
    for scan in checks.SCANS:
        try:
            cursor = conn.execute(scan.sql)
            while batch := cursor.fetchmany(FETCH_ROWS_MAX):
                record.rows(scan.table, batch)
        except _DAMAGE as exc:
            record.damaged(scan.table, exc)
    return found


def _scan_malformed(conn: sqlite3.Connection, record: checks.RecordCheck) -> None:
    """Every activity and worker row whose blob or state does not decode (full scans);
    a table SQLite cannot read to the end is reported as damaged."""
    found = record.found
    try:
        _scan_activities(conn, found)
    except _DAMAGE as exc:
        record.damaged("activities", exc)
    try:
        _workers(conn, found)
    except _DAMAGE as exc:
        record.damaged("workers", exc)


def _scan_activities(conn: sqlite3.Connection, found: list[Diagnostic]) -> None:
    """Every activity row whose blob or state does not decode, or names another row."""
    cursor = conn.execute("SELECT activity_id, seq, spec, state FROM activities ORDER BY seq")
    while batch := cursor.fetchmany(FETCH_ROWS_MAX):
        specs = [row[2] for row in batch]
        decoded = _decode_specs(specs) if all(type(b) is bytes for b in specs) else None
        for i, (aid, seq, spec, state) in enumerate(batch):
            item = decoded[i] if decoded is not None else None
            one: Activity | str = item if item is not None else _decode_one(spec)
            if isinstance(one, str):
                found.append(_malformed("activities", str(aid), one, str(aid)))
            elif state not in _STATES:
                found.append(
                    _malformed("activities", str(aid), f"unknown state {state!r}", str(aid))
                )
            elif one.activity_id != aid or one.seq != seq:
                found.append(
                    _malformed(
                        "activities",
                        str(aid),
                        f"spec blob names {one.activity_id!r} seq {one.seq}, row seq {seq}",
                        str(aid),
                    )
                )
