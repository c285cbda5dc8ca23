"""The contract every system in the side-by-side suite implements.

Theory of operation
-------------------
Every system (wf and each peer) is driven the same way by ``bench/peers.py``:

1. :meth:`System.setup` gives it a private namespace on the shared services
   (a Redis database index or key prefix, a PostgreSQL schema or database, a
   temporary folder), empty, and starts whatever server it needs (wf: a
   ``wf-rpc-server``; peers: nothing, their broker is Redis or PostgreSQL).
2. :meth:`System.start_workers` starts *worker processes* (real OS processes,
   as users run them) with the given total process count and per-process
   concurrency, and returns once they are ready to take work (each worker
   signals readiness through the :class:`Recorder` folder or the system's own
   means; never a fixed sleep). W1 calls it with the whole backlog already
   enqueued (10,000 tasks): readiness must not wait for anything queued
   behind that backlog (a warm-up task on the same queue would run last), and
   while it waits the workers may already run W1 tasks (the driver counts
   from the first start if that comes before the return).
3. Work is enqueued by the benchmark process (the "client") with
   :meth:`enqueue_noop` (W1, up front: one enqueue call per task in the
   ``stock`` mode, batched where the client API batches in the ``tuned``
   mode), :meth:`submit_one` (W2, one at a time) and :meth:`submit_delayed`
   (W3 and W5, to start at an instant).
4. The task body is the same for every system: :func:`record_start`, which
   appends ``<task id> <time.time()>`` to a per-process file in the
   recorder folder (one ``os.write`` on an ``O_APPEND`` descriptor), then
   returns. The client reads those lines to learn when each task *started
   inside the worker*: latency = start - submission instant, lateness = start
   - due instant, throughput = tasks / (last start - workers ready, or the
   first start if earlier). All processes share one machine, so
   ``time.time()`` values compare.
5. :meth:`System.stop_workers` and :meth:`teardown` stop every process and
   drop the namespace.

Discovery: ``bench/peers.py`` imports every ``bench/peerlib/*_system.py`` as
``bench.peerlib.<module>`` and runs the systems in its ``SYSTEMS`` list, or
else every concrete :class:`System` subclass defined in it; a module that
fails to import (its peer is not installed) is reported as not measured.
:attr:`System.description` is the line the reports show for it.

Modes. Every system is constructed in one *mode* (``mode=`` keyword of its
constructor, :data:`STOCK` unless said otherwise):

* ``stock`` -- the system as its own quick start configures it: its command
  line and client API with every default left as it is, one enqueue call
  per task. The only settings a stock system is given are the worker shape
  (processes × per-process concurrency, the same for every system) and what
  isolates one run from another on the shared services (queue names, key
  prefixes, databases, worker names, ports, folders), which change no
  behaviour.
* ``tuned`` -- the settings the suite used before the stock mode existed
  (wf: ``durability: process``, prefetch, idempotent submissions, batched
  enqueues; the peers: their batching APIs and quieter logs).

:meth:`System.non_defaults` lists every setting of the mode that is not the
system's default (empty for a stock system apart from a store choice such as
wf's PostgreSQL variant); the report prints it next to the figures.
:attr:`System.modes` says in which modes a class runs (``wf-fsync`` is stock
``wf``, so it runs only tuned; RQ's ``SimpleWorker`` is not RQ's default).

Durability is reported, not assumed: :attr:`System.durable` says whether an
acknowledged enqueue survives a SIGKILL of the broker/server (wf: committed
to SQLite or PostgreSQL before the answer; Celery/RQ on Redis without AOF:
no; Procrastinate on PostgreSQL: yes).
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

STOCK = "stock"
"""Every system as its quick start configures it (see the module docstring)."""
TUNED = "tuned"
"""The suite's earlier, tuned settings (see the module docstring)."""
MODES = (STOCK, TUNED)
"""Every mode, in report order (the headline first)."""

RECORDER_ENV = "WF_BENCH_RECORDER_DIR"
"""Environment variable naming the recorder folder in worker processes."""


def record_start(task_id: str) -> None:
    """The task body: note that ``task_id`` started now (see the module docstring)."""
    folder = os.environ[RECORDER_ENV]
    fd = _descriptor(folder)
    os.write(fd, f"{task_id} {time.time():.6f}\n".encode())


_FD: dict[str, int] = {}


def _descriptor(folder: str) -> int:
    fd = _FD.get(folder)
    if fd is None:
        path = os.path.join(folder, f"starts-{os.getpid()}.log")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _FD[folder] = fd
    return fd


@dataclass(frozen=True, slots=True)
class Recorder:
    """The folder worker processes record task starts in."""

    folder: Path

    def env(self) -> dict[str, str]:
        """Environment for worker processes."""
        return {**os.environ, RECORDER_ENV: str(self.folder)}

    def starts(self) -> dict[str, float]:
        """Task id -> start instant (the first start if a task ran twice)."""
        found: dict[str, float] = {}
        for path in sorted(self.folder.glob("starts-*.log")):
            for line in path.read_text().splitlines():
                task_id, _, at = line.partition(" ")
                if task_id and at:
                    found.setdefault(task_id, float(at))
        return found

    def count(self) -> int:
        """Start lines recorded so far (cheap: no parsing; a task run twice counts twice)."""
        total = 0
        for path in self.folder.glob("starts-*.log"):
            with path.open("rb") as f:
                total += f.read().count(b"\n")
        return total

    def clear(self) -> None:
        """Forget every recorded start.

        Truncates rather than unlinks: running workers keep their ``O_APPEND``
        descriptors open, and their next lines must land in the folder's files
        (lines written to an unlinked file would be lost).
        """
        for path in self.folder.glob("starts-*.log"):
            os.truncate(path, 0)


class System(ABC):
    """One system under test (see the module docstring)."""

    name: ClassVar[str]
    """Short name in reports: ``wf``, ``celery``, ``rq``, ``procrastinate``."""
    durable: ClassVar[bool]
    """Whether an acknowledged enqueue survives a SIGKILL of its server/broker."""
    max_concurrency_per_process: ClassVar[int] = 1
    """Largest per-process concurrency it supports (RQ: 1)."""
    description: ClassVar[str] = ""
    """One line for the reports: broker/store, worker pool, notable settings."""
    modes: ClassVar[tuple[str, ...]] = MODES
    """The modes this system runs in (see the module docstring)."""

    def __init__(self, *, mode: str = STOCK) -> None:
        if mode not in self.modes:
            raise ValueError(f"{self.name} does not run in mode {mode!r} (only {self.modes})")
        self.mode = mode

    @property
    def tuned(self) -> bool:
        return self.mode == TUNED

    def setup_line(self) -> str:
        """The report's one line for this system in its mode (default: :attr:`description`)."""
        return self.description

    def non_defaults(self) -> list[str]:
        """Every setting of this mode that is not the system's own default, one line each
        (the worker shape and run isolation aside: see the module docstring)."""
        return []

    @abstractmethod
    def setup(self, workdir: Path, recorder: Recorder) -> None:
        """Create an empty private namespace and start any server it needs."""

    @abstractmethod
    def start_workers(self, processes: int, concurrency: int) -> None:
        """Start worker processes; return once they take work."""

    @abstractmethod
    def stop_workers(self) -> None:
        """Stop every worker process (and wait for them)."""

    @abstractmethod
    def enqueue_noop(self, task_ids: list[str]) -> None:
        """W1: enqueue these no-op tasks as fast as the client API allows."""

    @abstractmethod
    def submit_one(self, task_id: str) -> float:
        """W2: submit one no-op task; returns ``time.time()`` taken just before submitting."""

    @abstractmethod
    def submit_delayed(self, task_id: str, due_at: float) -> None:
        """W3, W5: submit a no-op task that must start at ``due_at`` (POSIX seconds)."""

    @abstractmethod
    def teardown(self) -> None:
        """Stop everything and drop the namespace."""

    def pending(self) -> int | None:
        """Tasks not yet started, if the system can tell cheaply (``None``: unknown)."""
        return None


def wait_for(
    condition: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.005
) -> None:
    """Poll ``condition`` until true; ``TimeoutError`` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(poll_s)


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; ``nan`` for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[rank]


def task_ids(prefix: str, n: int) -> Iterator[str]:
    """``prefix-000000`` ... (ids every system accepts)."""
    return (f"{prefix}-{i:06d}" for i in range(n))
