"""Celery 5 on Redis, run the way its users run it.

Choices (Celery's defaults unless said otherwise):

* Broker: Redis (``$WF_BENCH_REDIS_URL``, default ``redis://127.0.0.1:6379/0``),
  no result backend (results ignored: the benchmark reads task starts).
  Redis here has no AOF, so an acknowledged enqueue does not survive a
  SIGKILL of the broker: :attr:`durable` is ``False``.
* Isolation: one queue named after a unique token, and every key Celery
  and kombu write (queue list, bindings, ``unacked`` hashes, pidbox
  channels) under the prefix ``<token>:`` (kombu's ``global_keyprefix``
  transport option); :meth:`teardown` deletes every key under it.
* Workers: ``processes`` × ``celery -A <celery_tasks> worker --pool prefork
  --concurrency <concurrency> --queues <queue> --hostname w<i>@<token>``
  (the default pool; one OS process runs tasks per unit of concurrency,
  plus the consumer process), tuned with ``--loglevel WARNING`` (Celery's
  default level anyway). The shape "2 × 4" is two workers of concurrency
  4, "2 × 1" two of concurrency 1. Prefetch multiplier 4 and
  ``acks_late`` off (Celery's defaults: a task is acknowledged when it is
  received, as most users run). Mingle, gossip and heartbeats stay on.
  ``pool`` may be changed (``threads``, ``solo``) to compare, but the
  default is what the report uses.
* Ready: every worker answers ``control.ping``; then, unless tasks are
  already waiting (W1 enqueues before it starts the workers, and warm-up
  tasks would queue behind them), ``processes × concurrency`` warm-up tasks
  have run.
* Client, stock: the quick start's ``noop.delay(task_id)`` per task (W1 a
  loop of them), ``noop.apply_async(args, eta=...)`` for delayed tasks, on
  a client application of the benchmark's own with the same broker, queue
  and key prefix. Tuned: ``send_task`` by name on one producer held for the
  run (what ``apply_async`` does underneath, minus the per-call producer
  acquisition), results ignored explicitly. Celery has no batched publish
  on Redis, so W1 is a loop of publishes (one ``LPUSH`` round trip each) in
  both modes.
* Delayed tasks: ``eta`` (the worker receives them at once and holds them
  on its timer until due).
"""

from __future__ import annotations

import datetime
import itertools
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

import redis
from celery import Celery

from .base import STOCK, Recorder, System, wait_for
from .celery_tasks import (
    BROKER_ENV,
    MODE_ENV,
    NOOP_TASK,
    PREFIX_ENV,
    QUEUE_ENV,
    READY_TASK,
    make_app,
    register_tasks,
)
from .peer_processes import (
    START_TIMEOUT_S,
    WorkerProcesses,
    bin_command,
    module_name,
    redis_url,
    unique_token,
    worker_env,
)

PING_TIMEOUT_S = 0.25
MAX_CONCURRENCY = 64
"""Celery has no hard limit; this is what the suite vouches for."""


class CelerySystem(System):
    """Celery with Redis as the broker (see the module docstring)."""

    name: ClassVar[str] = "celery"
    durable: ClassVar[bool] = False
    max_concurrency_per_process: ClassVar[int] = MAX_CONCURRENCY
    description: ClassVar[str] = (
        f"Celery {version('celery')}, Redis broker without AOF, prefork pool, "
        "prefetch multiplier 4, acks on receipt, no result backend"
    )

    def __init__(self, url: str | None = None, pool: str = "prefork", *, mode: str = STOCK) -> None:
        super().__init__(mode=mode)
        self.url = url or redis_url()
        self.pool = pool
        self._token = ""
        self._app: Celery | None = None
        self._noop: Any = None
        self._producer: Any = None
        self._redis: redis.Redis | None = None
        self._workers: WorkerProcesses | None = None
        self._recorder: Recorder | None = None
        self._ready_dir = Path()
        self._warmups = itertools.count()
        self._worker_numbers = itertools.count()

    def setup(self, workdir: Path, recorder: Recorder) -> None:
        self._token = unique_token("celery")
        self._recorder = recorder
        self._ready_dir = workdir / "celery-ready"
        self._ready_dir.mkdir(parents=True, exist_ok=True)
        self._workers = WorkerProcesses(workdir)
        self._redis = redis.Redis.from_url(self.url)
        self._delete_keys()
        self._app = make_app(self.url, self._token, self._prefix, tuned=self.tuned)
        self._noop, _ = register_tasks(self._app)
        if self.tuned:
            self._producer = self._app.producer_pool.acquire(block=True)

    def non_defaults(self) -> list[str]:
        if not self.tuned:
            return []
        return [
            "client: `send_task` by name on one producer held for the run "
            "(default: `task.delay()`, a pooled producer per call)",
            "`task_ignore_result=True`, `broker_connection_retry_on_startup=True` "
            "(no result backend either way)",
        ]

    @property
    def _prefix(self) -> str:
        return f"{self._token}:"

    def start_workers(self, processes: int, concurrency: int) -> None:
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency {concurrency} outside 1..{MAX_CONCURRENCY}")
        assert self._workers is not None
        assert self._recorder is not None
        assert self._app is not None
        env = worker_env(
            self._recorder,
            self._ready_dir,
            {
                BROKER_ENV: self.url,
                QUEUE_ENV: self._token,
                PREFIX_ENV: self._prefix,
                MODE_ENV: self.mode,
            },
        )
        numbers = [next(self._worker_numbers) for _ in range(processes)]
        names = [f"w{i}@{self._token}" for i in numbers]
        for i, hostname in zip(numbers, names, strict=True):
            argv = [
                bin_command("celery"),
                "-A",
                module_name("celery_tasks"),
                "worker",
                "--pool",
                self.pool,
                "--concurrency",
                str(concurrency),
                "--queues",
                self._token,
                "--hostname",
                hostname,
            ]
            if self.tuned:
                argv += ["--loglevel", "WARNING"]
            self._workers.spawn(argv, env, f"celery-worker-{i}")
        app, workers = self._app, self._workers
        answered: set[str] = set()

        def all_answer() -> bool:
            workers.check_alive()
            missing = [name for name in names if name not in answered]
            for reply in app.control.ping(destination=missing, timeout=PING_TIMEOUT_S):
                answered.update(reply)
            return answered >= set(names)

        wait_for(all_answer, START_TIMEOUT_S, "Celery workers to answer ping")
        assert self._redis is not None
        if self._redis.llen(f"{self._prefix}{self._token}"):
            return  # tasks are waiting: the workers are taking them
        batch = next(self._warmups)
        tokens = [f"{self._token}-warm{batch}-{i}" for i in range(processes * concurrency)]
        for token in tokens:
            app.send_task(READY_TASK, args=(token,), producer=self._producer)
        workers.wait_ready(self._ready_dir, tokens, "Celery warm-up tasks")

    def stop_workers(self) -> None:
        if self._workers is not None:
            self._workers.stop()

    def enqueue_noop(self, task_ids: list[str]) -> None:
        assert self._app is not None
        if not self.tuned:
            delay = self._noop.delay
            for task_id in task_ids:
                delay(task_id)
            return
        send, producer = self._app.send_task, self._producer
        for task_id in task_ids:
            send(NOOP_TASK, args=(task_id,), producer=producer)

    def submit_one(self, task_id: str) -> float:
        assert self._app is not None
        if not self.tuned:
            delay = self._noop.delay
            submitted = time.time()
            delay(task_id)
            return submitted
        send, producer = self._app.send_task, self._producer
        submitted = time.time()
        send(NOOP_TASK, args=(task_id,), producer=producer)
        return submitted

    def submit_delayed(self, task_id: str, due_at: float) -> None:
        assert self._app is not None
        eta = datetime.datetime.fromtimestamp(due_at, tz=datetime.UTC)
        if not self.tuned:
            self._noop.apply_async(args=(task_id,), eta=eta)
            return
        self._app.send_task(NOOP_TASK, args=(task_id,), eta=eta, producer=self._producer)

    def teardown(self) -> None:
        self.stop_workers()
        if self._producer is not None:
            self._producer.release()
            self._producer = None
        self._noop = None
        if self._app is not None:
            self._app.close()
            self._app = None
        if self._redis is not None:
            self._delete_keys()
            self._redis.close()
            self._redis = None

    def _delete_keys(self) -> None:
        assert self._redis is not None
        keys = list(self._redis.scan_iter(match=f"{self._token}:*", count=1000))
        for start in range(0, len(keys), 1000):
            self._redis.delete(*keys[start : start + 1000])
