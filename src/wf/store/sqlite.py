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
``COMMIT`` transaction as a few groups of rows
(:func:`~wf.store.codec.group_steps`), the hot ones as multi-row statements
(:mod:`wf.store.sqlite_bulk`), raises the counters, commits, and only
then resolves every future of the batch. Throughput therefore comes from
many appends sharing one commit (and one fsync), never from skipping it.

If the transaction fails, it is rolled back and every append of the batch
fails with :class:`~wf.errors.StoreUnavailable`: nothing of any of them is
stored. Appends of one batch are not retried one by one, because a later
append is computed from core state that includes the earlier ones; storing
it without them would write contradictions.

*Appends without a task.* :meth:`SQLiteStore.append` is a plain method that
returns an awaitable: it plans the append's SQL, then queues it for the writer
(or commits it inline) before it returns, and hands back the future its commit
resolves. A coroutine would first need a task of its own, or its caller's next
step, before the append even reached the queue: one more task and one more
loop turn per append, which the scheduler node paid for every command it
committed (stock W1, ``bench/stock_w1.py``, two A/B pairs: 2,803 and 2,853
against 2,593 and 2,722 tasks/s, 2,744 and 2,651 against 2,506 and 2,571, and
about 18 us less server CPU per task, 2026-12-07). Only while
:data:`APPENDS_WAITING_MAX` appends are unsettled does an append wait for room,
as a task, in call order.

*Inline commits*. When nothing is queued or being committed, a small append
(up to :data:`INLINE_COMMIT_STEPS_MAX` steps) is committed right on the
caller's event-loop thread, under the same lock the writer holds while it
commits, instead of waking the writer thread: without an fsync that commit
takes tens of microseconds, while the thread hop after an idle spell costs
0.3-1.2 ms, most of a light-load dispatch. The queue keeps every other case
in order: the lock is only tried, never waited for, and the append goes
inline only if every write queued before it has finished (two counters, each
written by one thread, compared under the lock).

With ``durability="fsync"`` an inline commit also holds the loop for its
fsync, so it goes inline only at light load, where the hop is what a caller
waits for: after an idle spell of the writer (no commit ended in the last
:data:`INLINE_FSYNC_IDLE_S`) and while fsync-ed commits are quick (their
moving average, :attr:`SQLiteStore.fsync_commit_s`, under
:data:`INLINE_FSYNC_COMMIT_MAX_S`). Under load commits follow each other
closely and all take the writer thread, whose group commit lets the loop go
on while the disk syncs (tried: every idle-writer append inline cut the
stock W1's throughput by a fifth and doubled W5's burst lateness). A slow
disk (commits over the bound) keeps every commit on the writer thread until
the average is back under it.

*Lingering.* With ``fsync``, a commit's cost is mostly its own (the WAL
frames of the pages it touched, the fsync), shared by every append it
carries. So while the writer's commits carry several appends each (their
moving average, :attr:`SQLiteStore.batch_average`, at least
:data:`LINGER_BATCH_AVERAGE_MIN`), the writer that finds nothing queued
behind the first append waits up to :data:`COMMIT_LINGER_S` for one more,
once per commit, as PostgreSQL's ``commit_delay`` does; appends that come one
at a time keep the average near 1 and are never delayed, and at light load
they commit inline anyway. Measured on the stock W1 (2 x 4 slots, plain
``def``, ``bench/stock_w1.py``, A B A B): about 8 % more tasks per second and
about 12 % less server CPU per task (fewer, fuller commits: about two appends
per commit before). The wait is for a second append only: a writer that
took several at once (the reports a worker's outbox sent in one request)
commits them at once; lingering then cost the stock W1 about 5 % of its
throughput (two A/B pairs, 2026-12-07).

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
snapshot; recovery's load and the store check are :mod:`wf.store.sqlite_load`.
Small :meth:`~SQLiteStore.existing_activity_ids` lookups (every
submission makes one) skip the thread: they run on the event-loop thread that
opened the store, on a third read-only connection only that thread uses
(see :data:`INLINE_LOOKUP_IDS_MAX`). Recovery's load is built for 10^6 live
activities: ``activities`` is stored in ``seq`` (rowid) order, spec blobs are
compact (defaults omitted), a chunk of blobs is decoded by one msgspec call,
and the lease-driven columns are read only for activities that were ever leased.

*Opening* (:mod:`wf.store.sqlite_files`): a store is new only where
``scheduler.db`` does not exist, and is then built whole under a private name
and linked into place; any ``scheduler.db`` that exists must already be a wf
store, and one that is empty, not SQLite, another application's or damaged is
refused with one :class:`CorruptRecord` line naming the file, before SQLite
may change it. Pending migrations (``sql/sqlite/``) are applied at
:meth:`~SQLiteStore.open`; a schema newer than this code is refused.
``create=False`` (``wf store check``) never creates a folder or a file and
never migrates: a missing store is :class:`~wf.errors.NotFound`. A store
whose counters were rewound is refused later, by recovery
(:mod:`wf.store.check`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from wf.errors import CorruptRecord, NotFound, OwnershipLost, StoreUnavailable, WfError
from wf.scheduler.outputs import Record
from wf.store import check as checks
from wf.store import codec, sqlite_bulk
from wf.store import sqlite_files as files
from wf.store.driven_catalog import DrivenCatalog
from wf.store.lock import FileOwnershipLock
from wf.store.protocol import Diagnostic, OwnerInfo, StoredState
from wf.store.query import Body, Query, Result, finish, first, sql_of
from wf.store.sqlite_files import BUSY_TIMEOUT_MS, DB_NAME
from wf.store.sqlite_load import ID_CHUNK_MAX, check_store, load_state

_T = TypeVar("_T")

Durability = Literal["fsync", "process"]
"""``fsync``: survives power loss; ``process``: survives a process crash only."""

LOCK_NAME: Final = "scheduler.lock"

BATCH_STEPS_MAX: Final = 50_000
"""Most SQL steps one group commit takes (one append larger than this commits alone)."""
CHECKPOINT_EVERY_COMMITS: Final = 256
"""Commits between two checkpoints on the writer thread (see the module docstring)."""
INLINE_COMMIT_STEPS_MAX: Final = 64
"""Largest append committed on the caller's thread when the writer is idle (see the
module docstring): a few rows, so the event loop stalls far less than a hop costs."""
INLINE_FSYNC_IDLE_S: Final = 0.005
"""With ``fsync``, an append goes inline only if no commit ended this long before it:
the first commit after an idle spell (see the module docstring)."""
INLINE_FSYNC_COMMIT_MAX_S: Final = 0.001
"""With ``fsync``, appends go inline only while fsync-ed commits take less than this
on average: longer, and the loop would stall longer than the hop it saves."""
FSYNC_COMMIT_AVERAGE_WEIGHT: Final = 0.2
"""Weight of the newest commit in :attr:`SQLiteStore.fsync_commit_s`."""
COMMIT_LINGER_S: Final = 0.0002
"""With ``fsync``, how long the writer waits for a second append when it took one
alone, while commits carry several appends (see the module doc)."""
LINGER_BATCH_AVERAGE_MIN: Final = 1.5
"""Appends per commit (moving average) from which the writer lingers: below it appends
come one at a time and a wait would only delay them."""
BATCH_AVERAGE_WEIGHT: Final = 0.1
"""Weight of the newest commit in :attr:`SQLiteStore.batch_average`."""
APPENDS_WAITING_MAX: Final = 4_096
"""Most appends queued for the writer; further callers wait for a slot first."""
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


# The writer's queue items: compared by identity (eq=False), never by their fields.


@dataclass(slots=True, eq=False)
class _Pending:
    """One append waiting for the writer."""

    steps: list[codec.Step]
    counters: dict[str, int]
    future: asyncio.Future[None]
    loop: asyncio.AbstractEventLoop


@dataclass(slots=True, eq=False)
class _Call:
    """Queued by a catalog write: ``fn`` runs on the write connection in its own
    ``BEGIN IMMEDIATE`` transaction; its result or error settles ``future``."""

    fn: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


_STOP: Final = object()
"""Queued by close(): the writer finishes what is queued before it, then exits."""
_CHECKPOINT: Final = object()
"""Queued by an inline commit that reached :data:`CHECKPOINT_EVERY_COMMITS`."""


@dataclass(slots=True, eq=False)
class _ClearFence:
    """Queued by clear_write_fence(): settled once everything before it was settled."""

    future: asyncio.Future[None]
    loop: asyncio.AbstractEventLoop


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
        self.fsync_commit_s = 0.0
        """Moving average of the durations of fsync-ed commits, seconds (see the module
        docstring); written by whoever commits, under ``_writing``."""
        self.batch_average = 1.0
        """Moving average of the appends per commit of the writer thread (see the module
        docstring); written by the writer only."""
        self._commit_ended = 0.0
        """``time.perf_counter()`` when the last commit ended (under ``_writing``)."""
        self._commits_at_checkpoint = 0
        self._checkpoint_queued = False
        self._checkpoint_wanted = False
        self._checkpointing: sqlite3.Connection | None = None
        """The writer thread's checkpoint connection."""
        self.checkpoints = 0
        """Checkpoints run so far (on the writer thread)."""
        self._writer: threading.Thread | None = None
        self._in_flight = 0
        """Appends started and not settled yet (see :data:`APPENDS_WAITING_MAX`)."""
        self._room_waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = (
            collections.deque()
        )
        """Appends waiting for room, oldest first."""
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
            raise files.refusal(exc, self.db_path) from exc
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
            files.make_root(self.root)
            if not os.path.lexists(self.db_path):
                files.create(self.root)
        elif not self.root.is_dir():
            raise NotFound(
                f"no store at {self.root}: the folder does not exist", path=str(self.root)
            )
        elif not os.path.lexists(self.db_path):
            raise NotFound(
                f"no store at {self.root}: it holds no {DB_NAME}", path=str(self.db_path)
            )
        files.inspect(self.db_path)
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
                files.migrate(write, str(self.db_path))
            else:
                files.require_current(write, str(self.db_path))
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

    def append(self, records: Sequence[Record]) -> Awaitable[None]:
        """Persist ``records`` in one group commit; the awaitable returned resolves once
        they are committed (see the module docstring, "Appends without a task").

        The append is queued, or committed inline, before this returns, so appends
        keep the order of the calls; only while :data:`APPENDS_WAITING_MAX` appends
        are unsettled does it wait for room first, in call order. Once queued the
        write goes ahead even if the caller stops waiting: a cancelled append may or
        may not be stored, like one cut off by a crash."""
        loop = asyncio.get_running_loop()
        if self._in_flight >= APPENDS_WAITING_MAX or self._room_waiters:
            return loop.create_task(self._append_when_room(records, loop))
        return self._start_append(records, loop)

    def _start_append(
        self, records: Sequence[Record], loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[None]:
        future: asyncio.Future[None] = loop.create_future()
        if self._closed or self._writer is None:
            future.set_exception(StoreUnavailable("the store is not open", store=str(self.root)))
            return future
        if not records:
            future.set_result(None)
            return future
        try:
            steps, counters = codec.plan_writes(records)
        except Exception as exc:  # raised where the caller awaits, as from a coroutine
            future.set_exception(exc)
            return future
        self._in_flight += 1
        future.add_done_callback(self._landed)
        pending = _Pending(steps, counters, future, loop)
        if not self._commit_inline(pending):
            self._enqueued += 1
            self._queue.put(pending)
        return future

    async def _append_when_room(
        self, records: Sequence[Record], loop: asyncio.AbstractEventLoop
    ) -> None:
        """:meth:`append` once fewer than :data:`APPENDS_WAITING_MAX` appends are
        unsettled and every append that waited before this one has started."""
        entry = (loop, asyncio.Event())
        self._room_waiters.append(entry)
        try:
            while self._in_flight >= APPENDS_WAITING_MAX or self._room_waiters[0] is not entry:
                entry[1].clear()
                await entry[1].wait()
        finally:
            self._room_waiters.remove(entry)
            self._wake_next_waiter()  # room may be left for the next one, or this was cancelled
        await asyncio.shield(self._start_append(records, loop))

    def _landed(self, _: asyncio.Future[None]) -> None:
        """An append settled (on its own loop's thread): make room for the next one."""
        self._in_flight -= 1
        self._wake_next_waiter()

    def _wake_next_waiter(self) -> None:
        if self._room_waiters and self._in_flight < APPENDS_WAITING_MAX:
            loop, event = self._room_waiters[0]
            loop.call_soon_threadsafe(event.set)

    def _commit_inline(self, pending: _Pending) -> bool:
        """Commit ``pending`` here if the writer is idle (see the module docstring)."""
        conn = self._write
        if (
            conn is None
            or len(pending.steps) > INLINE_COMMIT_STEPS_MAX
            or not self._writing.acquire(blocking=False)
        ):
            return False
        try:
            if self._enqueued != self._finished:
                return False  # an earlier write is queued or committing: keep the order
            if self.durability == "fsync" and (
                self.fsync_commit_s >= INLINE_FSYNC_COMMIT_MAX_S
                or time.perf_counter() - self._commit_ended < INLINE_FSYNC_IDLE_S
            ):
                return False  # not light load, or a slow disk: the loop must not wait
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
        linger = self.durability == "fsync" and self.batch_average >= LINGER_BATCH_AVERAGE_MIN
        while size < BATCH_STEPS_MAX:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                if not linger or len(batch) > 1:
                    break
                linger = False  # once per commit: the first append to come ends it
                try:
                    item = self._queue.get(timeout=COMMIT_LINGER_S)
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
        self.batch_average += BATCH_AVERAGE_WEIGHT * (len(batch) - self.batch_average)
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
        began = time.perf_counter()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for name, params in codec.group_steps(steps):
                    sqlite_bulk.execute_group(conn, name, params)
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
            self._commit_ended = time.perf_counter()
            self._fence = f"{type(exc).__name__}: {exc}"
            _settle(batch, f"commit failed, nothing of it was stored: {self._fence}")
            return
        self._commit_ended = ended = time.perf_counter()
        if self.durability == "fsync":
            weight = FSYNC_COMMIT_AVERAGE_WEIGHT
            self.fsync_commit_s += weight * (ended - began - self.fsync_commit_s)
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
        return await self._drive(body, self._write_tx)

    async def _run_read(self, body: Body[_T]) -> _T:
        """Run a catalog read body in one read transaction on the reading thread (rows are
        decoded there too: a page is at most ``pages.STORE_PAGE_ROWS_MAX`` rows, so the
        loop never waits on a big read)."""
        return await self._drive(body, self._reading)

    @staticmethod
    async def _drive(
        body: Body[_T],
        transaction: Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]],
    ) -> _T:
        """Run ``body`` in ``transaction`` on its connection, unless it answers at once
        (arguments alone decided it: no transaction is begun)."""
        step = first(body)
        if isinstance(step, tuple):
            return step[0]
        pending: Query = step
        result: _T = await transaction(
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

    def _read_failed(self, exc: sqlite3.Error) -> StoreUnavailable:
        return StoreUnavailable(
            f"reading store {self.db_path} failed: {type(exc).__name__}: {exc}",
            store=str(self.root),
        )

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
            raise self._read_failed(exc) from exc
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
        state: StoredState = await self._reading(lambda c: load_state(c, finished_max, where))
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
                    found = check_store(conn, bodies, where)
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
            raise self._read_failed(exc) from exc


# ------------------------------------------------------------------ helpers


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
