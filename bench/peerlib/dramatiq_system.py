"""Dramatiq 2 on Redis, run the way its users run it.

Choices (Dramatiq's defaults unless said otherwise; the same in both modes:
Dramatiq has no batched enqueue on Redis and logs no line per message at its
default level, so the tuned mode has nothing of the suite's to change):

* Broker: :class:`~dramatiq.brokers.redis.RedisBroker` on
  ``$WF_BENCH_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``) with the
  default middleware (age limit, time limit, shutdown notifications,
  callbacks, pipelines, retries), no result backend. Redis here has no AOF,
  so an acknowledged enqueue does not survive a SIGKILL of the broker:
  :attr:`durable` is ``False``.
* Isolation: the broker's ``namespace`` is a unique token, so every key
  Dramatiq writes (queues, their message hashes, delay queues, acks,
  heartbeats) starts with ``<token>:``; :meth:`teardown` deletes them. The
  actors use the default queue (``default``).
* Workers: one ``dramatiq <dramatiq_tasks>:broker --processes P --threads
  C`` command (Dramatiq's own process model: a master forks ``P`` worker
  processes, each running ``C`` worker threads, its consumer threads
  prefetching ``2C`` messages; the defaults would be one process per CPU
  and 8 threads). The shape "2 × 4" is ``--processes 2 --threads 4``.
* Ready: every worker process's broker has sent a heartbeat (each fetch
  records the broker's id in ``<token>:__heartbeats__``) since the command
  started; then, unless messages are already waiting (W1 enqueues before it
  starts the workers, and warm-up messages would queue behind them),
  ``P × C`` warm-up messages have run.
* Client: a broker of the benchmark's own with the same URL and namespace,
  the same actors declared on it (:func:`.dramatiq_tasks.declare_actors`):
  ``noop.send(task_id)`` per task (W1 a loop of them), and for W3 and W5
  ``noop.send_with_options(args=(task_id,), delay=ms)`` with the delay in
  whole milliseconds to the due instant (Dramatiq puts the message on the
  delay queue ``default.DQ``; a worker's consumer holds it until its eta
  and then moves it to ``default``).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

import redis

from .base import STOCK, Recorder, System, wait_for
from .dramatiq_tasks import NAMESPACE_ENV, URL_ENV, declare_actors, make_broker
from .peer_processes import (
    START_TIMEOUT_S,
    WorkerProcesses,
    bin_command,
    module_name,
    redis_url,
    unique_token,
    worker_env,
)

MAX_CONCURRENCY = 64
"""Dramatiq has no hard limit on threads; this is what the suite vouches for."""
QUEUE = "default"
"""The queue of actors declared without one."""


class DramatiqSystem(System):
    """Dramatiq with Redis as the broker (see the module docstring)."""

    name: ClassVar[str] = "dramatiq"
    durable: ClassVar[bool] = False
    max_concurrency_per_process: ClassVar[int] = MAX_CONCURRENCY
    description: ClassVar[str] = (
        f"Dramatiq {version('dramatiq')}, Redis broker without AOF, `dramatiq` command "
        "(P worker processes × C threads), default middleware, no result backend"
    )

    def __init__(self, url: str | None = None, *, mode: str = STOCK) -> None:
        super().__init__(mode=mode)
        self.url = url or redis_url()
        self._token = ""
        self._broker: Any = None
        self._noop: Any = None
        self._ready: Any = None
        self._redis: redis.Redis | None = None
        self._workers: WorkerProcesses | None = None
        self._recorder: Recorder | None = None
        self._ready_dir = Path()
        self._warmups = itertools.count()
        self._commands = itertools.count()

    def setup(self, workdir: Path, recorder: Recorder) -> None:
        self._token = unique_token("dramatiq")
        self._recorder = recorder
        self._ready_dir = workdir / "dramatiq-ready"
        self._ready_dir.mkdir(parents=True, exist_ok=True)
        self._workers = WorkerProcesses(workdir)
        self._redis = redis.Redis.from_url(self.url)
        self._delete_keys()
        self._broker = make_broker(self.url, self._token)
        self._noop, self._ready = declare_actors(self._broker)

    def start_workers(self, processes: int, concurrency: int) -> None:
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency {concurrency} outside 1..{MAX_CONCURRENCY}")
        assert self._workers is not None
        assert self._recorder is not None
        assert self._redis is not None
        env = worker_env(
            self._recorder, self._ready_dir, {URL_ENV: self.url, NAMESPACE_ENV: self._token}
        )
        argv = [
            bin_command("dramatiq"),
            f"{module_name('dramatiq_tasks')}:broker",
            "--processes",
            str(processes),
            "--threads",
            str(concurrency),
        ]
        since_ms = int(time.time() * 1000)
        self._workers.spawn(argv, env, f"dramatiq-{next(self._commands)}")
        connection, workers = self._redis, self._workers
        heartbeats = f"{self._token}:__heartbeats__"
        client_id = self._broker.broker_id.encode()

        def all_beat() -> bool:
            workers.check_alive()
            beating = connection.zrangebyscore(heartbeats, since_ms, "+inf")
            return len([b for b in beating if b != client_id]) >= processes

        wait_for(all_beat, START_TIMEOUT_S, "Dramatiq worker processes to fetch", poll_s=0.01)
        if connection.llen(f"{self._token}:{QUEUE}"):
            return  # messages are waiting: the workers are taking them
        batch = next(self._warmups)
        tokens = [f"{self._token}-warm{batch}-{i}" for i in range(processes * concurrency)]
        for token in tokens:
            self._ready.send(token)
        workers.wait_ready(self._ready_dir, tokens, "Dramatiq warm-up messages")

    def stop_workers(self) -> None:
        if self._workers is not None:
            self._workers.stop()

    def enqueue_noop(self, task_ids: list[str]) -> None:
        send = self._noop.send
        for task_id in task_ids:
            send(task_id)

    def submit_one(self, task_id: str) -> float:
        send = self._noop.send
        submitted = time.time()
        send(task_id)
        return submitted

    def submit_delayed(self, task_id: str, due_at: float) -> None:
        delay_ms = max(0, round((due_at - time.time()) * 1000))
        self._noop.send_with_options(args=(task_id,), delay=delay_ms)

    def teardown(self) -> None:
        self.stop_workers()
        if self._broker is not None:
            with contextlib.suppress(Exception):
                self._broker.close()
            self._broker = None
        self._noop = self._ready = None
        if self._redis is not None:
            self._delete_keys()
            self._redis.close()
            self._redis = None

    def _delete_keys(self) -> None:
        assert self._redis is not None
        keys = list(self._redis.scan_iter(match=f"{self._token}:*", count=1000))
        for start in range(0, len(keys), 1000):
            self._redis.delete(*keys[start : start + 1000])
