"""wf in the side-by-side suite: a ``wf-rpc-server`` and ``wf worker`` processes.

Theory of operation
-------------------
:meth:`WfSystem.setup` starts a ``wf-rpc-server`` subprocess on 127.0.0.1
(port 0) with a fresh store: SQLite in the system's temporary folder, or a
fresh PostgreSQL schema ``wf_peers_<hex>`` (dropped by :meth:`teardown`).
:meth:`start_workers` starts ``wf worker`` processes, each with
``--max-concurrency C`` (the worker shape), and returns once the server lists
every one of them as active. The client is :class:`~wf.client.app.SyncApp`
(``App.sync(url)``, the blocking facade of the typed client).

How each mode drives it:

* ``stock`` -- as README.md and docs/server.md lead a new user:
  ``wf-rpc-server --store-root DIR`` with no other flag (SQLite,
  ``durability: fsync``: every commit fsynced before it is acknowledged; log
  level ``info``), ``wf worker --app bench.peerlib.wf_system:stock_activities
  --max-concurrency C`` with every other default (prefetch 0, log level
  ``info``), the activity a plain ``def`` under a plain ``@activity`` (so
  not idempotent: on SQLite a grant into an idle slot is committed as its
  start, on PostgreSQL each start waits for ``scheduler.leases.start``;
  docs/server.md, "Starts and round trips"), and one
  ``App.submit_activities([Activity(...)])`` call per task, W1 included.
* ``tuned`` -- the suite's earlier settings: the server at log level
  ``warning`` and ``durability: process`` (``wf-fsync``: ``fsync``), workers
  with ``--prefetch 4C --log-level warning``, an ``async`` activity declared
  ``@activity(idempotent=True)`` and submitted ``idempotent=True`` (its
  grant into an idle slot is its start), W1 in batches of
  :data:`SUBMIT_BATCH` per ``submit_activities`` call.

W3 and W5 submit one activity with ``not_before`` = the due instant (no
polling: the core's timer queues it ``early_grant_s`` ahead, its grant
carries the instant, and the worker's own timer starts it then).

The variants (one class each, so the driver alternates them like peers):

* ``wf`` -- SQLite; stock: ``durability: fsync`` (the default); tuned:
  ``durability: process`` (every state transition committed before it is
  acknowledged and handed to the OS: it survives a SIGKILL of the server,
  not a power cut).
* ``wf-fsync`` -- tuned only (stock ``wf`` is already fsync): SQLite with
  ``durability: fsync``.
* ``wf-pg`` -- PostgreSQL store (PostgreSQL's own commit durability) in a
  fresh schema on ``$WF_TEST_POSTGRES_DSN`` or
  ``postgresql://postgres@127.0.0.1:5432/test``.

:meth:`WfSystem.measure_rpc` is the wf-only part of W4 the driver calls on
each variant's live server: ``scheduler.workers.register`` and
``scheduler.leases.renew`` round trips, one at a time (the code of
``bench/e2e.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, ClassVar, Final

from bench.peerlib.base import STOCK, TUNED, Recorder, System, record_start, wait_for

from wf.worker import activity, activity_info

REPO: Final = Path(__file__).resolve().parents[2]
BIN: Final = Path(sys.executable).parent
ACTIVITY_TYPE: Final = "bench.peers.noop"
"""The tuned mode's activity type."""
SUBMIT_BATCH: Final = 1_000
"""Activities per ``scheduler.activities.submit`` call in W1."""
PREFETCH_PER_SLOT: Final = 4
"""``--prefetch`` = this × ``--max-concurrency`` (like Celery's default prefetch multiplier)."""
DSN_ENV: Final = "WF_TEST_POSTGRES_DSN"
DEFAULT_DSN: Final = "postgresql://postgres@127.0.0.1:5432/test"
START_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 20.0


@activity(name=ACTIVITY_TYPE, idempotent=True)
async def noop() -> None:
    """The suite's task body: record the start instant, nothing else."""
    record_start(activity_info().activity_id)


activities = [noop]
"""What ``wf worker --app bench.peerlib.wf_system:activities`` runs (tuned mode)."""


@activity
def stock_noop() -> None:
    """The stock mode's task body: a plain ``def`` under a plain ``@activity``, as
    docs/server.md shows (so not idempotent; the worker runs it in its thread pool)."""
    record_start(activity_info().activity_id)


STOCK_ACTIVITY_TYPE: Final = stock_noop.name
"""The stock activity's type: ``@activity``'s default name, the function's name."""
stock_activities = [stock_noop]
"""What ``wf worker --app bench.peerlib.wf_system:stock_activities`` runs (stock mode)."""


def postgres_dsn() -> str:
    return os.environ.get(DSN_ENV) or DEFAULT_DSN


def _lines_into(stream: IO[str], sink: queue.Queue[str]) -> None:
    with stream:
        for line in stream:
            sink.put(line)


def _stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM (a graceful drain), SIGKILL if it does not end in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)


class WfSystem(System):
    """wf on SQLite (see the module docstring)."""

    name: ClassVar[str] = "wf"
    durable: ClassVar[bool] = True
    max_concurrency_per_process: ClassVar[int] = 1024
    description: ClassVar[str] = (
        "wf-rpc-server, SQLite store; wf worker processes; App.submit_activities"
    )
    store_line: ClassVar[str] = "SQLite store"
    store: ClassVar[str] = "sqlite"
    durability: ClassVar[str] = "process"
    """The tuned mode's durability (stock: the server's default, fsync)."""

    def __init__(self, *, mode: str = STOCK) -> None:
        super().__init__(mode=mode)
        self.workdir = Path()
        self.recorder: Recorder | None = None
        self.server: subprocess.Popen[str] | None = None
        self.url = ""
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.app: Any = None
        self.schema: str | None = None
        self.dsn: str | None = None
        self._worker_serial = 0

    def setup_line(self) -> str:
        if self.tuned:
            durability = "" if self.store == "postgres" else f", durability {self.durability}"
            return (
                f"wf-rpc-server ({self.store_line}{durability}); wf worker processes with "
                f"prefetch {PREFETCH_PER_SLOT}×C; an async idempotent activity; "
                f"W1 submitted {SUBMIT_BATCH:,} per call"
            )
        durability = "" if self.store == "postgres" else ", durability fsync"
        return (
            f"wf-rpc-server with its defaults ({self.store_line}{durability}, log level info, "
            "so no server line per successful activity); "
            "`wf worker --max-concurrency C` (prefetch 0); a plain `@activity` def "
            "(not idempotent); one `App.submit_activities` call per task"
        )

    def non_defaults(self) -> list[str]:
        found = []
        if self.store == "postgres":
            found.append("server: PostgreSQL store (`--postgres`; default SQLite)")
        if not self.tuned:
            return found
        if self.store == "sqlite" and self.durability != "fsync":
            found.append(f"server: durability {self.durability} (default fsync)")
        return [
            *found,
            "server: log level warning (default info)",
            f"worker: `--prefetch {PREFETCH_PER_SLOT}×C` (default 0)",
            "worker: `--log-level warning` (default info)",
            "activity: `async def` declared `@activity(idempotent=True)`, every submission "
            "`idempotent=True` (default: a `def`, not idempotent)",
            f"W1: {SUBMIT_BATCH:,} activities per `submit_activities` call (stock: one)",
        ]

    # ----------------------------------------------------------- server

    def setup(self, workdir: Path, recorder: Recorder) -> None:
        self.workdir = workdir
        self.recorder = recorder
        workdir.mkdir(parents=True, exist_ok=True)
        args = ["--port", "0"]
        if self.tuned:
            config = {
                "server": {
                    "store": {"durability": self.durability},
                    "observability": {"log_level": "warning"},
                }
            }
            config_path = workdir / "server.json"
            config_path.write_text(json.dumps(config))
            args += ["--config", str(config_path)]
        if self.store == "postgres":
            from bench.store import postgres_reachable

            self.dsn = postgres_dsn()
            why = postgres_reachable(self.dsn)
            if why is not None:
                raise RuntimeError(f"PostgreSQL unreachable at {self.dsn}: {why}")
            self.schema = f"wf_peers_{secrets.token_hex(6)}"
            args += ["--postgres", self.dsn, "--postgres-schema", self.schema]
        else:
            args += ["--store-root", str(workdir / "store")]
        self._start_server(args)
        from wf.client.app import SyncApp

        self.app = SyncApp(self.url)

    def _start_server(self, args: list[str]) -> None:
        log_path = self.workdir / "server.log"
        with log_path.open("w") as log_file:
            proc = subprocess.Popen(
                [str(BIN / "wf-rpc-server"), *args],
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                cwd=REPO,
            )
        self.server = proc
        assert proc.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_lines_into, args=(proc.stdout, lines), daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or proc.poll() is not None:
                raise RuntimeError(f"wf-rpc-server did not start: {log_path.read_text()[-2000:]}")
            try:
                line = lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            with contextlib.suppress(json.JSONDecodeError):
                event = json.loads(line)
                if isinstance(event, dict) and event.get("event") == "listening":
                    self.url = f"http://127.0.0.1:{event['port']}"
                    return

    def teardown(self) -> None:
        self.stop_workers()
        if self.app is not None:
            with contextlib.suppress(Exception):
                self.app.close()
            self.app = None
        if self.server is not None:
            _stop(self.server)
            if self.server.stdout is not None:
                self.server.stdout.close()
            self.server = None
        if self.schema is not None and self.dsn is not None:
            from bench.store import drop_schema

            drop_schema(self.dsn, self.schema)
            self.schema = None

    # ---------------------------------------------------------- workers

    def start_workers(self, processes: int, concurrency: int) -> None:
        assert self.recorder is not None
        env = self.recorder.env()
        started: dict[str, subprocess.Popen[bytes]] = {}
        for _ in range(processes):
            self._worker_serial += 1
            worker_id = f"bench-peers-{self._worker_serial}"
            argv = [
                str(BIN / "wf"),
                "worker",
                "--app",
                f"bench.peerlib.wf_system:{'activities' if self.tuned else 'stock_activities'}",
                "--server",
                self.url,
                "--worker-id",
                worker_id,
                "--max-concurrency",
                str(concurrency),
            ]
            if self.tuned:
                argv += [
                    "--prefetch",
                    str(PREFETCH_PER_SLOT * concurrency),
                    "--log-level",
                    "warning",
                ]
            with (self.workdir / f"{worker_id}.log").open("w") as log_file:
                started[worker_id] = subprocess.Popen(
                    argv,
                    stdout=subprocess.DEVNULL,
                    stderr=log_file,
                    cwd=REPO,
                    env=env,
                )
        self.workers.update(started)

        def all_active() -> bool:
            for worker_id, proc in started.items():
                if proc.poll() is not None:
                    log = (self.workdir / f"{worker_id}.log").read_text()[-2000:]
                    raise RuntimeError(f"wf worker {worker_id} exited: {log}")
            listed, cursor = [], None
            while True:  # scheduler.workers.list is paged
                page = self.app.list_workers(limit=100, cursor=cursor)
                listed.extend(page.workers)
                cursor = page.next_cursor
                if cursor is None:
                    break
            active = {w.info.worker_id for w in listed if w.status == "active"}
            return set(started) <= active

        wait_for(all_active, START_TIMEOUT_S, "wf workers to register", poll_s=0.01)

    def stop_workers(self) -> None:
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers.values():
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)
        self.workers.clear()

    # ----------------------------------------------------------- client

    def _spec(self, task_id: str, not_before: float | None = None) -> Any:
        from wf.scheduler.model import Activity

        if not self.tuned:  # as docs/server.md submits: no flag beyond id and type
            if not_before is None:
                return Activity(activity_id=task_id, activity_type=STOCK_ACTIVITY_TYPE)
            return Activity(
                activity_id=task_id, activity_type=STOCK_ACTIVITY_TYPE, not_before=not_before
            )
        return Activity(
            activity_id=task_id,
            activity_type=ACTIVITY_TYPE,
            idempotent=True,
            not_before=not_before,
        )

    def enqueue_noop(self, task_ids: list[str]) -> None:
        batch_size = SUBMIT_BATCH if self.tuned else 1
        for first in range(0, len(task_ids), batch_size):
            batch = task_ids[first : first + batch_size]
            self.app.submit_activities([self._spec(t) for t in batch])

    def submit_one(self, task_id: str) -> float:
        spec = self._spec(task_id)
        at = time.time()
        self.app.submit_activities([spec])
        return at

    def submit_delayed(self, task_id: str, due_at: float) -> None:
        self.app.submit_activities([self._spec(task_id, not_before=due_at)])

    def pending(self) -> int | None:
        stats = self.app.queue_stats()
        return int(stats.depth + stats.running + stats.delayed)

    # ------------------------------------------------------------- W4

    def measure_rpc(self, quick: bool) -> dict[str, dict[str, float]]:
        """W4 on this live server: registration and renewal round trips (ms summaries).

        Run with no worker processes attached (the driver calls it after W5).
        """
        import asyncio
        from types import SimpleNamespace

        from bench import e2e

        plan = e2e.QUICK if quick else e2e.FULL

        async def measure() -> dict[str, dict[str, float]]:
            bench = e2e.Bench(SimpleNamespace(url=self.url), plan)
            try:
                return {
                    "register": await bench.bench_register(),
                    "renew": await bench.bench_renew(),
                }
            finally:
                await bench.client.close()

        return asyncio.run(measure())


class WfFsyncSystem(WfSystem):
    """wf on SQLite with ``durability: fsync`` in the tuned mode (stock ``wf`` is that)."""

    name: ClassVar[str] = "wf-fsync"
    description: ClassVar[str] = (
        "as wf, with durability fsync (every commit fsynced before it is acknowledged)"
    )
    durability: ClassVar[str] = "fsync"
    modes: ClassVar[tuple[str, ...]] = (TUNED,)


class WfPostgresSystem(WfSystem):
    """wf on the PostgreSQL store (a fresh schema, dropped afterwards)."""

    name: ClassVar[str] = "wf-pg"
    description: ClassVar[str] = (
        "as wf, with the PostgreSQL store (fresh schema on 127.0.0.1:5432, "
        "PostgreSQL's commit durability)"
    )
    store: ClassVar[str] = "postgres"
    durability: ClassVar[str] = "fsync"
    store_line: ClassVar[str] = "PostgreSQL store, a fresh schema"


SYSTEMS: Final[list[type[System]]] = [WfSystem, WfFsyncSystem, WfPostgresSystem]
"""The systems this module contributes, in report order."""
