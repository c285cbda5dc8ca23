"""Procrastinate 3 on PostgreSQL, run the way its users run it.

Choices (Procrastinate's defaults unless said otherwise):

* PostgreSQL from ``$WF_TEST_POSTGRES_DSN`` (default
  ``postgresql://postgres@127.0.0.1:5432/test``). A deferred job is a
  committed row, so an acknowledged enqueue survives a SIGKILL of the
  server: :attr:`durable` is ``True``.
* Isolation: :meth:`setup` creates a database of its own (named after a
  unique token) and applies Procrastinate's schema to it; :meth:`teardown`
  drops it. A database rather than a schema, because Procrastinate's
  ``LISTEN``/``NOTIFY`` channels are per database: runs sharing a database
  would wake each other's workers.
* Workers: ``processes`` × ``procrastinate --app <procrastinate_tasks>.app
  worker --queues wfbench --concurrency <concurrency> --name <token>-w<i>``
  at the default log level (INFO: lines per job); tuned with ``--log-level
  warning``. The tasks are plain functions, which Procrastinate
  runs in a thread each, up to ``concurrency`` at once per process. Jobs
  stay in the table when done (``--delete-jobs never``, the default).
  Workers learn of new jobs through ``LISTEN``/``NOTIFY`` and otherwise poll
  every ``fetch_job_polling_interval`` (5 s by default; a constructor
  argument here, ``None`` keeps the default). A job scheduled for later is
  only noticed by that poll (its ``NOTIFY`` fires at insertion, when it is
  not yet due), so with the default W3 lateness is up to 5 s.
* Ready: every worker has registered in ``procrastinate_workers``; then,
  unless due jobs are already waiting (W1 defers before it starts the
  workers, and warm-up jobs would queue behind them), ``processes ×
  concurrency`` warm-up jobs have run.
* Client: the synchronous API of an :class:`procrastinate.App` of the
  benchmark's own (a psycopg connection pool): W1 ``defer`` per job (tuned:
  ``batch_defer``, one statement per 1,000 jobs), W2 ``defer``, W3 and W5
  ``defer`` with ``schedule_at``.
"""

from __future__ import annotations

import datetime
import itertools
import time
from importlib.metadata import version
from pathlib import Path
from typing import ClassVar

import procrastinate
import psycopg
from procrastinate.types import JSONDict
from psycopg import sql
from psycopg.conninfo import make_conninfo

from .base import STOCK, Recorder, System, wait_for
from .peer_processes import (
    START_TIMEOUT_S,
    WorkerProcesses,
    bin_command,
    module_name,
    postgres_dsn,
    unique_token,
    worker_env,
)
from .procrastinate_tasks import DSN_ENV, NOOP_TASK, QUEUE, READY_TASK

BATCH = 1000
MAX_CONCURRENCY = 64
"""Procrastinate has no hard limit; this is what the suite vouches for."""
DROP_LOCK_TIMEOUT = "10s"


class ProcrastinateSystem(System):
    """Procrastinate with its PostgreSQL job table (see the module docstring)."""

    name: ClassVar[str] = "procrastinate"
    durable: ClassVar[bool] = True
    max_concurrency_per_process: ClassVar[int] = MAX_CONCURRENCY
    description: ClassVar[str] = (
        f"Procrastinate {version('procrastinate')}, PostgreSQL (committed jobs), "
        "a thread per running job, LISTEN/NOTIFY, polling every 5 s"
    )

    def __init__(
        self,
        dsn: str | None = None,
        fetch_job_polling_interval: float | None = None,
        *,
        mode: str = STOCK,
    ) -> None:
        super().__init__(mode=mode)
        self.dsn = dsn or postgres_dsn()
        self.fetch_job_polling_interval = fetch_job_polling_interval
        self._database = ""
        self._private_dsn = ""
        self._app: procrastinate.App | None = None
        self._conn: psycopg.Connection | None = None
        self._workers: WorkerProcesses | None = None
        self._recorder: Recorder | None = None
        self._ready_dir = Path()
        self._warmups = itertools.count()
        self._worker_numbers = itertools.count()

    def setup(self, workdir: Path, recorder: Recorder) -> None:
        self._database = unique_token("procrastinate")
        self._recorder = recorder
        self._ready_dir = workdir / "procrastinate-ready"
        self._ready_dir.mkdir(parents=True, exist_ok=True)
        self._workers = WorkerProcesses(workdir)
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self._database)))
        self._private_dsn = make_conninfo(self.dsn, dbname=self._database)
        self._app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(conninfo=self._private_dsn)
        )
        self._app.open()
        self._app.schema_manager.apply_schema()
        self._conn = psycopg.connect(self._private_dsn, autocommit=True)

    def non_defaults(self) -> list[str]:
        found = []
        if self.fetch_job_polling_interval is not None:
            found.append(
                f"worker: `--fetch-job-polling-interval {self.fetch_job_polling_interval:g}` "
                "(default 5 s)"
            )
        if self.tuned:
            found += [
                "`--log-level warning` (default info: lines per job)",
                f"W1: `batch_defer` of {BATCH:,} jobs per statement (stock: `defer` per job)",
            ]
        return found

    def start_workers(self, processes: int, concurrency: int) -> None:
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency {concurrency} outside 1..{MAX_CONCURRENCY}")
        assert self._workers is not None
        assert self._recorder is not None
        assert self._app is not None
        assert self._conn is not None
        env = worker_env(self._recorder, self._ready_dir, {DSN_ENV: self._private_dsn})
        conn, workers = self._conn, self._workers
        row = conn.execute("SELECT coalesce(max(id), 0) FROM procrastinate_workers").fetchone()
        known = 0 if row is None else int(row[0])
        for _ in range(processes):
            i = next(self._worker_numbers)
            argv = [
                bin_command("procrastinate"),
                "--app",
                f"{module_name('procrastinate_tasks')}.app",
                *(["--log-level", "warning"] if self.tuned else []),
                "worker",
                "--queues",
                QUEUE,
                "--concurrency",
                str(concurrency),
                "--name",
                f"{self._database}-w{i}",
            ]
            if self.fetch_job_polling_interval is not None:
                argv += ["--fetch-job-polling-interval", str(self.fetch_job_polling_interval)]
            self._workers.spawn(argv, env, f"procrastinate-worker-{i}")

        def registered() -> bool:
            workers.check_alive()
            row = conn.execute(
                "SELECT count(*) FROM procrastinate_workers WHERE id > %s", (known,)
            ).fetchone()
            return row is not None and row[0] >= processes

        wait_for(registered, START_TIMEOUT_S, "Procrastinate workers to register", poll_s=0.02)
        row = conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo' AND queue_name = %s"
            " AND (scheduled_at IS NULL OR scheduled_at <= now())",
            (QUEUE,),
        ).fetchone()
        if row is not None and row[0]:
            return  # due jobs are waiting: the workers are taking them
        batch = next(self._warmups)
        tokens = [f"{self._database}-warm{batch}-{i}" for i in range(processes * concurrency)]
        ready: list[JSONDict] = [{"token": token} for token in tokens]
        self._app.configure_task(name=READY_TASK, queue=QUEUE).batch_defer(*ready)
        workers.wait_ready(self._ready_dir, tokens, "Procrastinate warm-up jobs")

    def stop_workers(self) -> None:
        if self._workers is not None:
            self._workers.stop()

    def enqueue_noop(self, task_ids: list[str]) -> None:
        assert self._app is not None
        deferrer = self._app.configure_task(name=NOOP_TASK, queue=QUEUE)
        if not self.tuned:
            for task_id in task_ids:
                deferrer.defer(task_id=task_id)
            return
        for start in range(0, len(task_ids), BATCH):
            batch: list[JSONDict] = [{"task_id": t} for t in task_ids[start : start + BATCH]]
            deferrer.batch_defer(*batch)

    def submit_one(self, task_id: str) -> float:
        assert self._app is not None
        deferrer = self._app.configure_task(name=NOOP_TASK, queue=QUEUE)
        submitted = time.time()
        deferrer.defer(task_id=task_id)
        return submitted

    def submit_delayed(self, task_id: str, due_at: float) -> None:
        assert self._app is not None
        due = datetime.datetime.fromtimestamp(due_at, tz=datetime.UTC)
        self._app.configure_task(name=NOOP_TASK, queue=QUEUE, schedule_at=due).defer(
            task_id=task_id
        )

    def pending(self) -> int | None:
        """Jobs of the no-op task still waiting (``todo``), scheduled ones included."""
        assert self._conn is not None
        row = self._conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo' AND task_name = %s",
            (NOOP_TASK,),
        ).fetchone()
        return 0 if row is None else int(row[0])

    def teardown(self) -> None:
        self.stop_workers()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._app is not None:
            self._app.close()
            self._app = None
        if self._database:
            with psycopg.connect(self.dsn, autocommit=True) as admin:
                admin.execute(
                    sql.SQL("SET lock_timeout = {}").format(sql.Literal(DROP_LOCK_TIMEOUT))
                )
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(self._database)
                    )
                )
            self._database = ""
