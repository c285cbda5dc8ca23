"""The embedded store's ownership lock: one scheduler per ``<store_root>``.

Theory of operation
-------------------
Ownership is an exclusive ``flock(2)`` on ``<store_root>/scheduler.lock``,
taken without blocking. While it holds the lock, the owner writes who it is
(host, pid, since) into the file as JSON, so that a refused second scheduler
can name the holder. The kernel drops the lock when the owner's file
descriptor closes, which includes the process dying by ``SIGKILL``: a dead
owner never blocks the next one, and a stale owner record in the file means
nothing unless the lock is actually held.

``flock`` locks belong to an *open file description*, not to a process, so a
second :class:`FileOwnershipLock` (a second ``open()``) in the same process is
refused too; two stores over one root in one process cannot both own it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from pathlib import Path
from typing import Final

import msgspec

from wf.errors import OwnershipConflict
from wf.store.protocol import OwnerInfo

HOLDER_READ_ATTEMPTS_MAX: Final = 20
"""Tries to read the holder's record while it may still be writing it."""
HOLDER_READ_PAUSE_S: Final = 0.005
"""Pause between those tries."""

_owner_decoder = msgspec.json.Decoder(OwnerInfo)


class FileOwnershipLock:
    """An exclusive, non-blocking ``flock`` on one file, with the owner written inside."""

    def __init__(self, path: Path) -> None:
        self.path = path
        """The lock file (created on first acquire)."""
        self._fd: int | None = None
        self._owner: OwnerInfo | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self, owner: OwnerInfo) -> None:
        """Take the lock and record ``owner`` in the file, or raise
        :class:`OwnershipConflict` naming the current holder.

        Acquiring a lock this object already holds only rewrites the owner record.
        """
        fd = self._fd
        if fd is None:
            # Owner-only, like the store's other files (it names the owner's host and pid).
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                raise self._conflict() from None
        try:
            data = msgspec.json.encode(owner)
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        except BaseException:
            if self._fd is None:
                os.close(fd)  # closing drops the lock we just took
            raise
        self._fd = fd
        self._owner = owner

    def release(self) -> None:
        """Give the lock up (idempotent); the owner record is cleared first."""
        fd = self._fd
        if fd is None:
            return
        self._fd = None
        self._owner = None
        try:
            # Cleared while still held, so a new owner's record is never erased.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def holder(self) -> OwnerInfo | None:
        """Who holds the lock now (this object or anyone else), or ``None`` if free."""
        if self._owner is not None:
            return self._owner
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                return self._read_holder()
            # We got it, so nobody held it; closing the descriptor gives it back.
            return None
        finally:
            os.close(fd)

    def _read_holder(self) -> OwnerInfo | None:
        """The owner record in the file; the holder may be between lock and write."""
        for _ in range(HOLDER_READ_ATTEMPTS_MAX):
            try:
                return _owner_decoder.decode(self.path.read_bytes())
            except (OSError, msgspec.ValidationError, msgspec.DecodeError):
                time.sleep(HOLDER_READ_PAUSE_S)
        return None

    def _conflict(self) -> OwnershipConflict:
        holder = self._read_holder()
        if holder is None:
            return OwnershipConflict(
                f"store {self.path.parent} is owned by another scheduler "
                "(its owner record is unreadable)",
                lock_file=str(self.path),
            )
        return OwnershipConflict(
            f"store {self.path.parent} is owned by another scheduler: "
            f"host {holder.host}, pid {holder.pid}, since {holder.since}",
            lock_file=str(self.path),
            host=holder.host,
            pid=holder.pid,
            since=holder.since,
        )
