"""Opening a SQLite store's file: a new one built whole, a foreign one refused,
pending migrations applied.

Theory of operation
-------------------
A store is new only where ``scheduler.db`` does not exist: then
:func:`create` builds it whole under a private name (all migrations applied,
fsynced) and hard-links it into place, so a ``scheduler.db`` never exists half
made. Any ``scheduler.db`` that does exist must therefore already be a wf
store, and :func:`inspect` checks that before SQLite may change it: an empty
file, a file that is not SQLite, an SQLite database without wf's
``schema_migrations`` (another application's) is refused with one
:class:`~wf.errors.CorruptRecord` naming the file, and :func:`refusal` turns
an SQLite error met while opening into the same (damage) or into
:class:`~wf.errors.StoreUnavailable`. :func:`migrate` applies the files of
``sql/sqlite/`` in order, each in one transaction together with its row in
``schema_migrations``; :func:`require_current` is the ``create=False`` path,
which never migrates.

The store is the owner's only: :func:`make_root` creates a missing folder 0700
and :func:`create` the database 0600 (SQLite gives the ``-wal``, ``-shm`` and
``-journal`` files it makes the database's mode), whatever the umask.
:func:`backup` copies a store online with SQLite's backup API
(``wf store backup``).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from wf.errors import CorruptRecord, InvalidArgument, NotFound, StoreUnavailable, WfError
from wf.store import check as checks
from wf.store import codec

DB_NAME: Final = "scheduler.db"
"""The database file in the store folder."""
BUSY_TIMEOUT_MS: Final = 5_000
"""How long a connection waits for a lock held by another connection."""
SQLITE_HEADER: Final = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""
DIR_MODE: Final = 0o700
"""A store folder wf creates: the owner's only (the store holds inputs and results)."""
FILE_MODE: Final = 0o600
"""The store's files (database, its WAL and shared memory, the lock): the owner's only."""

_MIGRATIONS: Final = "schema_migrations"
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


def create(root: Path) -> None:
    """A new store's database in ``root``, built whole under a private name and linked
    into place: ``scheduler.db`` never exists half made, so an empty or partial one is
    always damage, never a store being created."""
    db_path = root / DB_NAME
    fresh = root / f".{DB_NAME}.{os.getpid()}.{threading.get_ident()}.new"
    private = (fresh, fresh.with_name(fresh.name + "-journal"))
    for leftover in private:
        leftover.unlink(missing_ok=True)
    try:
        # Owner-only from the first byte: SQLite gives the -wal, -shm and -journal
        # files it creates beside a database the database file's own mode.
        os.close(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE))
        os.chmod(fresh, FILE_MODE)  # whatever the umask took away or left
        conn = sqlite3.connect(fresh, isolation_level=None)
        try:
            conn.execute("PRAGMA synchronous=FULL")
            migrate(conn, str(db_path))
        finally:
            conn.close()
        _fsync(fresh)
        _link_new(fresh, db_path)
        _fsync(root)  # the new directory entry
    finally:
        for leftover in private:
            leftover.unlink(missing_ok=True)


def make_root(root: Path) -> None:
    """Create the store folder and its missing parents owner-only; a folder that exists
    keeps the mode its owner gave it (a service manager's state directory, say)."""
    missing: list[Path] = []
    folder = root
    while not folder.is_dir():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if path.is_dir():
                continue  # made meanwhile by someone else: theirs, mode included
            raise
        os.chmod(path, DIR_MODE)  # mkdir's mode is masked by the umask


def backup(root: Path, target: Path) -> int:
    """Copy the store in ``root`` to the new file ``target`` with SQLite's online backup
    (a consistent snapshot even while a server writes) and return its size in bytes.

    The copy is written owner-only under a private name, checked with SQLite's
    ``quick_check``, made durable and only then linked to ``target``, so ``target``
    is always a whole database. ``target`` must not exist (InvalidArgument)."""
    db_path = root / DB_NAME
    if not os.path.lexists(db_path):
        raise NotFound(f"no store at {root}: it holds no {DB_NAME}", path=str(db_path))
    if os.path.lexists(target):
        raise InvalidArgument(f"{target} exists: a backup never overwrites", path=str(target))
    if not target.parent.is_dir():  # else the private copy's name surfaced in an OSError
        raise InvalidArgument(
            f"{target.parent} is not a folder: a backup goes into an existing folder",
            path=str(target),
        )
    inspect(db_path)
    fresh = target.with_name(f".{target.name}.{os.getpid()}.new")
    fresh.unlink(missing_ok=True)
    os.close(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE))
    try:
        uri = f"file:{urllib.parse.quote(str(db_path.absolute()))}?mode=ro"
        source = sqlite3.connect(uri, uri=True, isolation_level=None)
        try:
            source.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            copy = sqlite3.connect(fresh, isolation_level=None)
            try:
                source.backup(copy)
                copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
                (verdict,) = copy.execute("PRAGMA quick_check").fetchone()
                if verdict != "ok":
                    raise CorruptRecord(f"the copy of {db_path} fails its check: {verdict}")
            finally:
                copy.close()
        finally:
            source.close()
        _fsync(fresh)
        try:
            os.link(fresh, target)
        except FileExistsError:
            raise InvalidArgument(
                f"{target} exists: a backup never overwrites", path=str(target)
            ) from None
        _fsync(target.parent if str(target.parent) else Path("."))
    finally:
        fresh.unlink(missing_ok=True)
    return target.stat().st_size


def inspect(path: Path) -> None:
    """Refuse a ``scheduler.db`` that is not a wf store, before SQLite may change it:
    empty, not SQLite, another application's database, or damaged."""
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


def refusal(exc: sqlite3.Error | UnicodeDecodeError, db_path: Path) -> WfError:
    """The error opening ``db_path`` raises for an SQLite error: damage names the file."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or isinstance(exc, UnicodeDecodeError):
        return CorruptRecord(f"store file {db_path} is damaged: {exc}", path=str(db_path))
    return StoreUnavailable(f"cannot open store file {db_path}: {exc}", path=str(db_path))


def migrate(conn: sqlite3.Connection, where: str) -> None:
    """Apply every pending migration, each with its ``schema_migrations`` row; the
    applied ones must be a prefix of this code's (CorruptRecord naming ``where``)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_MIGRATIONS_TABLE)
        applied = dict(conn.execute("SELECT version, name FROM schema_migrations"))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    known = codec.migrations("sqlite")
    checks.verify_migrations(applied, known, where, pending_ok=True)
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


def require_current(conn: sqlite3.Connection, where: str) -> None:
    """Refuse a store whose schema is not exactly this code's (``create=False`` never
    migrates)."""
    applied = dict(conn.execute("SELECT version, name FROM schema_migrations"))
    known = codec.migrations("sqlite")
    checks.verify_migrations(applied, known, where, pending_ok=False)


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


def _fsync(path: Path) -> None:
    """Make a file's content, or a directory's entries, durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
