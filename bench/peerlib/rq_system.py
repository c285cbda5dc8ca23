"""RQ (2.12 and 3.0) on Redis, run the way its users run it.

Choices (RQ's defaults unless said otherwise):

* Redis at ``$WF_BENCH_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``),
  without AOF here, so an acknowledged enqueue does not survive a SIGKILL
  of Redis: :attr:`durable` is ``False``.
* Isolation: one queue named after a unique token; job ids and worker names
  start with the token too, so every key RQ writes for this run (queue,
  registries, jobs, executions, workers, the scheduler lock) contains it;
  :meth:`teardown` deletes them and removes the run's members from RQ's
  global ``rq:queues`` and ``rq:workers`` sets.
* Workers: ``processes`` × ``rq worker --with-scheduler --name <token>-w<i>
  <queue>`` with the default worker class (it forks a work horse per job)
  and log level (INFO: a line per job); tuned, ``--logging_level
  WARNING``. ``--with-scheduler`` is how RQ's documentation runs jobs
  enqueued with ``enqueue_at``; it is listed as a setting in both modes.
  An RQ worker runs one job at a time: :attr:`max_concurrency_per_process`
  is 1 and a concurrency above 1 is refused, not faked with more processes.
  Every worker is started with the scheduler; RQ lets one of them hold the
  queue's scheduler lock.
* :class:`RqSimpleWorkerSystem` (``rq-simple``, tuned mode only: not RQ's
  default) is the same with ``--worker-class rq.worker.SimpleWorker``: jobs
  run in the worker process, no fork per job.
* Tuned, jobs are enqueued with ``result_ttl=0`` (fire and forget: the job
  is deleted once it succeeded, as Celery without a result backend keeps
  nothing either); stock keeps RQ's default (500 s).
* Ready: every worker is in the queue's worker registry and the scheduler
  lock is held; then, unless jobs are already waiting (W1 enqueues before it
  starts the workers, and warm-up jobs would queue behind them), one
  warm-up job per worker has run.
* Client: W1 ``Queue.enqueue`` per job (stock; tuned: ``Queue.enqueue_many``,
  one pipeline per 1,000 jobs), W2 ``Queue.enqueue``, W3 and W5
  ``Queue.enqueue_at``. Job ids start with the run's token (isolation).
  RQ's scheduler polls once a second and stores due instants in whole
  seconds (rounded down), so a delayed job starts anywhere from about 1 s
  early to 1 s late: W3 and W5 lateness for RQ can be negative.
"""

from __future__ import annotations

import datetime
import itertools
import time
from importlib.metadata import version
from pathlib import Path
from typing import ClassVar

import redis
from rq import Queue, Worker, worker_registration
from rq.scheduler import RQScheduler

from .base import STOCK, TUNED, Recorder, System, wait_for
from .peer_processes import (
    START_TIMEOUT_S,
    WorkerProcesses,
    bin_command,
    module_name,
    redis_url,
    unique_token,
    worker_env,
)

BATCH = 1000


class RqSystem(System):
    """RQ with its default worker (see the module docstring)."""

    name: ClassVar[str] = "rq"
    durable: ClassVar[bool] = False
    max_concurrency_per_process: ClassVar[int] = 1
    description: ClassVar[str] = (
        f"RQ {version('rq')}, Redis without AOF, default worker (forks a work horse per job, "
        "one job at a time), scheduler in a worker"
    )

    def __init__(
        self, url: str | None = None, worker_class: str | None = None, *, mode: str = STOCK
    ) -> None:
        super().__init__(mode=mode)
        self.url = url or redis_url()
        self.worker_class = worker_class
        self._token = ""
        self._redis: redis.Redis | None = None
        self._queue: Queue | None = None
        self._workers: WorkerProcesses | None = None
        self._recorder: Recorder | None = None
        self._ready_dir = Path()
        self._job_numbers = itertools.count()
        self._worker_numbers = itertools.count()
        self._noop = f"{module_name('rq_tasks')}.noop"
        self._ready = f"{module_name('rq_tasks')}.ready"

    def setup(self, workdir: Path, recorder: Recorder) -> None:
        self._token = unique_token("rq")
        self._recorder = recorder
        self._ready_dir = workdir / "rq-ready"
        self._ready_dir.mkdir(parents=True, exist_ok=True)
        self._workers = WorkerProcesses(workdir)
        self._redis = redis.Redis.from_url(self.url)
        self._delete_keys()
        self._queue = Queue(self._token, connection=self._redis)

    def _job_id(self) -> str:
        return f"{self._token}-{next(self._job_numbers)}"

    def non_defaults(self) -> list[str]:
        found = ["worker: `--with-scheduler` (how RQ runs `enqueue_at` jobs)"]
        if self.worker_class:
            found.append(f"worker: `--worker-class {self.worker_class}` (default: a fork per job)")
        if self.tuned:
            found += [
                "worker: `--logging_level WARNING` (default INFO: a line per job)",
                "jobs: `result_ttl=0` (default 500 s)",
                f"W1: `Queue.enqueue_many` in pipelines of {BATCH:,} (stock: `enqueue` per job)",
            ]
        return found

    @property
    def _options(self) -> dict[str, int]:
        """Per-job options beyond the id: tuned, no result kept."""
        return {"result_ttl": 0} if self.tuned else {}

    def start_workers(self, processes: int, concurrency: int) -> None:
        if concurrency != 1:
            raise ValueError("an RQ worker runs one job at a time (concurrency must be 1)")
        assert self._workers is not None
        assert self._recorder is not None
        assert self._queue is not None
        assert self._redis is not None
        env = worker_env(self._recorder, self._ready_dir, {})
        names = [f"{self._token}-w{next(self._worker_numbers)}" for _ in range(processes)]
        for name in names:
            argv = [
                bin_command("rq"),
                "worker",
                "--url",
                self.url,
                "--name",
                name,
                "--with-scheduler",
            ]
            if self.tuned:
                argv += ["--logging_level", "WARNING"]
            if self.worker_class:
                argv += ["--worker-class", self.worker_class]
            argv.append(self._token)
            self._workers.spawn(argv, env, f"rq-{name.rsplit('-', 1)[1]}")
        connection, queue, workers = self._redis, self._queue, self._workers
        lock = RQScheduler.get_locking_key(self._token)
        expected = {Worker.redis_worker_namespace_prefix + name for name in names}

        def registered() -> bool:
            workers.check_alive()
            keys = worker_registration.get_keys(queue=queue)
            return expected <= keys and bool(connection.exists(lock))

        wait_for(registered, START_TIMEOUT_S, "RQ workers to register")
        if queue.count:
            return  # jobs are waiting: the workers are taking them
        tokens = [f"{name}-warm" for name in names]
        for token in tokens:
            queue.enqueue(self._ready, token, job_id=self._job_id(), **self._options)
        workers.wait_ready(self._ready_dir, tokens, "RQ warm-up jobs")

    def stop_workers(self) -> None:
        if self._workers is not None:
            self._workers.stop()
        if self._redis is not None:
            # Every worker is gone: a scheduler lock left behind (a worker that had
            # to be killed) would keep the next workers' scheduler from starting.
            self._redis.delete(RQScheduler.get_locking_key(self._token))

    def enqueue_noop(self, task_ids: list[str]) -> None:
        queue = self._queue
        assert queue is not None
        if not self.tuned:
            for task_id in task_ids:
                queue.enqueue(self._noop, task_id, job_id=self._job_id())
            return
        for start in range(0, len(task_ids), BATCH):
            queue.enqueue_many(
                [
                    Queue.prepare_data(
                        self._noop, args=(task_id,), job_id=self._job_id(), result_ttl=0
                    )
                    for task_id in task_ids[start : start + BATCH]
                ]
            )

    def submit_one(self, task_id: str) -> float:
        queue = self._queue
        assert queue is not None
        job_id = self._job_id()
        submitted = time.time()
        queue.enqueue(self._noop, task_id, job_id=job_id, **self._options)
        return submitted

    def submit_delayed(self, task_id: str, due_at: float) -> None:
        assert self._queue is not None
        due = datetime.datetime.fromtimestamp(due_at, tz=datetime.UTC)
        self._queue.enqueue_at(due, self._noop, task_id, job_id=self._job_id(), **self._options)

    def pending(self) -> int | None:
        """Queued plus scheduled jobs (a job a worker has popped but not begun is not counted)."""
        queue = self._queue
        assert queue is not None
        return int(queue.count) + int(queue.scheduled_job_registry.count)

    def teardown(self) -> None:
        self.stop_workers()
        if self._redis is not None:
            self._delete_keys()
            self._redis.close()
            self._redis = None
        self._queue = None

    def _delete_keys(self) -> None:
        connection = self._redis
        assert connection is not None
        keys = list(connection.scan_iter(match=f"*{self._token}*", count=1000))
        for start in range(0, len(keys), 1000):
            connection.delete(*keys[start : start + 1000])
        for shared in ("rq:queues", "rq:workers"):
            members = [m for m in connection.smembers(shared) if self._token.encode() in m]
            if members:
                connection.srem(shared, *members)


class RqSimpleWorkerSystem(RqSystem):
    """RQ with ``SimpleWorker`` (jobs run in the worker process itself, no fork per job).

    Not RQ's default, but the worker class RQ documents for low per-job
    overhead; reported under its own name so it is never mistaken for the
    default.
    """

    name: ClassVar[str] = "rq-simple"
    modes: ClassVar[tuple[str, ...]] = (TUNED,)
    description: ClassVar[str] = (
        f"RQ {version('rq')}, Redis without AOF, SimpleWorker (no fork per job, "
        "one job at a time), scheduler in a worker"
    )

    def __init__(self, url: str | None = None, *, mode: str = TUNED) -> None:
        super().__init__(url, worker_class="rq.worker.SimpleWorker", mode=mode)


SYSTEMS = [RqSystem, RqSimpleWorkerSystem]
"""What the driver runs: RQ as users run it (``rq``) and, in the tuned mode, with the
worker class RQ offers for low per-job overhead (``rq-simple``): here a fork per job
costs RQ tens of milliseconds, so the default alone would be a weak peer."""
