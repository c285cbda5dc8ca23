"""A private PostgreSQL instance that a test may restart (the "PostgreSQL restarts" fault).

The suite's shared server cannot be restarted under other tests, so the
restart scenario runs its cluster on an instance of its own: ``initdb`` into
a temporary folder, ``pg_ctl start`` on a free port (loopback only, trust
authentication, the socket in the same folder), ``pg_ctl restart``/``stop``
on demand. PostgreSQL refuses to run as root, so as root the binaries run as
the ``postgres`` OS user (``runuser -u postgres --``) and the folder is given
to that user.

Policy, as for the shared server (``tests/_pg.py``): without the binaries
the tests that need this are skipped locally and FAIL under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Final, Literal

import pytest

BIN_DIRS: Final = (Path("/usr/local/bin"), Path("/usr/lib/postgresql/15/bin"))
"""Where ``initdb`` and ``pg_ctl`` are looked for, in order (then ``PATH``)."""
OS_USER: Final = "postgres"
"""The OS user that runs the instance when the tests run as root."""
DB_USER: Final = "postgres"
"""The instance's superuser (``initdb -U``)."""
DB_NAME: Final = "postgres"
START_TIMEOUT_S: Final = 60
"""``pg_ctl -t``: bound for a start, stop or restart."""
SETTINGS: Final = (
    "-c listen_addresses=127.0.0.1",
    # fsync off: a process restart loses nothing that was written (the page
    # cache survives it), and it spares the shared 2-core machine the flushes.
    "-c fsync=off",
    "-c full_page_writes=off",
    "-c max_connections=100",
    "-c shared_buffers=32MB",
)

ShutdownMode = Literal["smart", "fast", "immediate"]


def find_binary(name: str) -> Path | None:
    """``name`` from :data:`BIN_DIRS` or ``PATH``."""
    for folder in BIN_DIRS:
        if (folder / name).exists():
            return folder / name
    found = shutil.which(name)
    return Path(found) if found else None


def binaries_or_skip() -> tuple[Path, Path]:
    """``(initdb, pg_ctl)``; skips locally and fails under ``CI=true`` without them."""
    initdb, pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        reason = "initdb/pg_ctl not found (a private PostgreSQL instance is needed)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}; CI never skips this")
        pytest.skip(reason)
    return initdb, pg_ctl


def free_port() -> int:
    """A TCP port nobody listens on right now (the caller binds it next)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgInstance:
    """One private PostgreSQL instance (see the module docstring)."""

    def __init__(self, initdb: Path, pg_ctl: Path) -> None:
        self.initdb = initdb
        self.pg_ctl = pg_ctl
        self.root = Path(tempfile.mkdtemp(prefix="wf-ha-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            user = pwd.getpwnam(OS_USER)
            os.chown(self.root, user.pw_uid, user.pw_gid)
        self._initialized = False

    @property
    def dsn(self) -> str:
        """A libpq DSN for the instance's superuser."""
        return f"postgresql://{DB_USER}@127.0.0.1:{self.port}/{DB_NAME}"

    def _run(self, *argv: str | Path) -> None:
        prefix = ["runuser", "-u", OS_USER, "--"] if self._as_postgres else []
        done = subprocess.run(
            [*prefix, *(str(a) for a in argv)],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S + 30,
            check=False,
        )
        if done.returncode != 0:
            tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise AssertionError(
                f"{' '.join(str(a) for a in argv)} failed ({done.returncode}): "
                f"{done.stdout[-1000:]}{done.stderr[-1000:]}\n{tail}"
            )

    def _options(self) -> str:
        return " ".join((f"-p {self.port}", f"-k {self.root}", *SETTINGS))

    def start(self) -> PgInstance:
        """``initdb`` the first time, then ``pg_ctl start`` and wait until it accepts."""
        if not self._initialized:
            self._run(
                self.initdb,
                "-D",
                self.data,
                "-U",
                DB_USER,
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            )
            self._initialized = True
        self._run(
            self.pg_ctl, "-D", self.data, "-l", self.log, "-o", self._options(), "-w",
            "-t", str(START_TIMEOUT_S), "start",
        )  # fmt: skip
        return self

    def stop(self, mode: ShutdownMode = "fast") -> None:
        """``pg_ctl stop -m mode`` (waits until it is down)."""
        self._run(
            self.pg_ctl, "-D", self.data, "-m", mode, "-w", "-t", str(START_TIMEOUT_S), "stop"
        )

    def restart(self, mode: ShutdownMode = "immediate") -> None:
        """Stop (``immediate``: every backend killed, crash recovery at start) and start
        again on the same port; returns once it accepts connections."""
        self.stop(mode)
        self.start()

    def close(self) -> None:
        """Stop the instance if it runs and delete its folder."""
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(AssertionError):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
