"""The Celery application the benchmark's Celery workers load (``celery -A <this module>``).

Its broker, queue and Redis key prefix come from the environment the
benchmark gives each worker (see :mod:`.celery_system`); the benchmark
process builds its client application with :func:`make_app` and the same
three values. Tasks are sent by name, so the client never needs this
module's task objects.
"""

from __future__ import annotations

import os

from celery import Celery

from .base import record_start
from .peer_processes import mark_ready, redis_url

BROKER_ENV = "WF_BENCH_CELERY_BROKER"
QUEUE_ENV = "WF_BENCH_CELERY_QUEUE"
PREFIX_ENV = "WF_BENCH_CELERY_PREFIX"
NOOP_TASK = "wfbench.noop"
READY_TASK = "wfbench.ready"


def make_app(broker_url: str, queue: str, key_prefix: str) -> Celery:
    """A Celery app on ``broker_url`` whose tasks go to ``queue``, all keys under ``key_prefix``.

    Everything else is Celery's default (prefetch multiplier 4, early
    acknowledgement, no result backend), except that results are ignored
    explicitly: the benchmark reads task starts, not results.
    """
    app = Celery("wfbench", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        broker_transport_options={"global_keyprefix": key_prefix},
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        enable_utc=True,
        timezone="UTC",
    )
    return app


app = make_app(
    os.environ.get(BROKER_ENV) or redis_url(),
    os.environ.get(QUEUE_ENV) or "wfbench",
    os.environ.get(PREFIX_ENV) or "wfbench:",
)


@app.task(name=NOOP_TASK)
def noop(task_id: str) -> None:
    """The benchmark's task body."""
    record_start(task_id)


@app.task(name=READY_TASK)
def ready(token: str) -> None:
    """A warm-up task: marks ``token`` in the ready folder."""
    mark_ready(token)
