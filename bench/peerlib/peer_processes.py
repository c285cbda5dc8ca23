"""What the peer systems (Celery, RQ, Procrastinate, Dramatiq) share: worker processes and names.

Worker processes are started the way users start them (the peer's own
command line, from the same virtual environment as the benchmark), each in a
session of its own so that the whole tree a worker forks (Celery's prefork
children, RQ's work horses and scheduler, Dramatiq's worker processes) can
be signalled at once through its process group, whose id is the worker's
pid. Output goes to a log file per worker in the system's work folder (the
first lines of it are quoted when a worker dies before it is ready).

The task modules import nothing but the peer and :mod:`.base`, relatively, so
they load as ``peerlib.<module>`` (the driver runs ``bench/peers.py``, which
puts ``bench/`` on ``sys.path``) or as ``bench.peerlib.<module>``: the
worker processes get the same package root on ``PYTHONPATH`` and the module
name the benchmark process itself loaded them under.

Worker processes may write bytecode caches (``PYTHONDONTWRITEBYTECODE`` is
dropped from their environment), as a deployed worker's modules have them.

Readiness is never a fixed sleep: each system waits on its own means (Celery's
``ping``, RQ's worker registry, Procrastinate's worker table, Dramatiq's
heartbeats) and then on
warm-up tasks of the ``ready`` kind, which create ``<ready folder>/<token>``
and leave the recorder's ``starts-*.log`` files alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from .base import Recorder, wait_for

REDIS_URL_ENV = "WF_BENCH_REDIS_URL"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
POSTGRES_DSN_ENV = "WF_TEST_POSTGRES_DSN"
DEFAULT_POSTGRES_DSN = "postgresql://postgres@127.0.0.1:5432/test"
READY_ENV = "WF_BENCH_READY_DIR"
"""Environment variable naming the folder warm-up (``ready``) tasks mark."""

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
LOG_TAIL_CHARS = 4000


def redis_url() -> str:
    """The Redis URL for Celery, RQ and Dramatiq (``$WF_BENCH_REDIS_URL`` or the local default)."""
    return os.environ.get(REDIS_URL_ENV) or DEFAULT_REDIS_URL


def postgres_dsn() -> str:
    """The PostgreSQL DSN Procrastinate's private databases are created from."""
    return os.environ.get(POSTGRES_DSN_ENV) or DEFAULT_POSTGRES_DSN


def unique_token(system: str) -> str:
    """A name no other run on the shared services uses (queue names, key prefixes)."""
    return f"wfbench_{system}_{os.getpid()}_{uuid.uuid4().hex[:10]}"


def package_root() -> Path:
    """The folder that holds this package (``bench/`` or the repository)."""
    depth = len(__package__.split("."))
    return Path(__file__).resolve().parents[depth]


def module_name(stem: str) -> str:
    """The importable name of a sibling module, as this process loaded the package."""
    return f"{__package__}.{stem}"


def bin_command(name: str) -> str:
    """A console script of the benchmark's own virtual environment."""
    candidate = Path(sys.executable).parent / name
    if not candidate.exists():
        raise FileNotFoundError(f"{name} is not installed next to {sys.executable}")
    return str(candidate)


def mark_ready(token: str) -> None:
    """The warm-up task body: create ``<ready folder>/<token>``."""
    Path(os.environ[READY_ENV], token).touch()


def worker_env(recorder: Recorder, ready_dir: Path, extra: dict[str, str]) -> dict[str, str]:
    """Environment for a worker process: recorder, ready folder, package on the path."""
    env = recorder.env()
    root = str(package_root())
    previous = env.get("PYTHONPATH")
    env["PYTHONPATH"] = root if not previous else f"{root}{os.pathsep}{previous}"
    env[READY_ENV] = str(ready_dir)
    env["PYTHONUNBUFFERED"] = "1"
    # Deployed workers load cached bytecode; without it every RQ work horse
    # (a fresh fork per job) would compile the task modules again.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra)
    return env


class WorkerProcesses:
    """The worker processes of one system, each the leader of its own process group."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def spawn(self, argv: list[str], env: dict[str, str], label: str) -> None:
        """Start one worker process (``label`` names its log file)."""
        log = self.log_dir / f"{label}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=package_root(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        self.logs.append(log)

    def check_alive(self) -> None:
        """Raise with the worker's log if any worker has exited."""
        for proc, log in zip(self.procs, self.logs, strict=True):
            code = proc.poll()
            if code is not None:
                text = log.read_text(errors="replace")[-LOG_TAIL_CHARS:]
                raise RuntimeError(f"worker {proc.args!r} exited with {code}:\n{text}")

    def wait_ready(self, ready_dir: Path, tokens: Iterable[str], what: str) -> None:
        """Wait until every warm-up token is marked (failing fast if a worker died)."""
        wanted = [ready_dir / token for token in tokens]

        def done() -> bool:
            self.check_alive()
            return all(path.exists() for path in wanted)

        wait_for(done, START_TIMEOUT_S, what)

    def stop(self) -> None:
        """SIGTERM every process group (a warm shutdown), then SIGKILL what is left."""
        for proc in self.procs:
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            # Children (prefork pool, work horses, the RQ scheduler) may outlive the leader.
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        self.procs.clear()
        self.logs.clear()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
