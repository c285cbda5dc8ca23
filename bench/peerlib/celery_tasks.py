"""The Celery application the benchmark's Celery workers load (``celery -A <this module>``).

Its broker, queue, Redis key prefix and mode come from the environment the
benchmark gives each worker (see :mod:`.celery_system`); the benchmark
process builds its client application with :func:`make_app` and the same
values. In the stock mode the client calls ``delay()`` on the task objects
:func:`register_tasks` declares on its own application (as Celery's quick
start does); in the tuned mode it sends by name.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from .base import record_start
from .peer_processes import mark_ready, redis_url

BROKER_ENV = "WF_BENCH_CELERY_BROKER"
QUEUE_ENV = "WF_BENCH_CELERY_QUEUE"
PREFIX_ENV = "WF_BENCH_CELERY_PREFIX"
MODE_ENV = "WF_BENCH_CELERY_MODE"
NOOP_TASK = "wfbench.noop"
READY_TASK = "wfbench.ready"


def make_app(broker_url: str, queue: str, key_prefix: str, tuned: bool = False) -> Celery:
    """A Celery app on ``broker_url`` whose tasks go to ``queue``, all keys under ``key_prefix``.

    Everything else is Celery's default (prefetch multiplier 4, early
    acknowledgement, no result backend). Tuned, results are also ignored
    explicitly and the startup connection retry is set (silencing Celery's
    warning about its coming default); neither changes what a task costs
    without a result backend.
    """
    app = Celery("wfbench", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        broker_transport_options={"global_keyprefix": key_prefix},
    )
    if tuned:
        app.conf.update(
            task_ignore_result=True,
            broker_connection_retry_on_startup=True,
            enable_utc=True,
            timezone="UTC",
        )
    return app


def noop_body(task_id: str) -> None:
    """The benchmark's task body."""
    record_start(task_id)


def ready_body(token: str) -> None:
    """A warm-up task: marks ``token`` in the ready folder."""
    mark_ready(token)


def register_tasks(app: Celery) -> tuple[Any, Any]:
    """Declare the benchmark's tasks on ``app``: (noop, ready), as ``@app.task`` does."""
    return app.task(name=NOOP_TASK)(noop_body), app.task(name=READY_TASK)(ready_body)


app = make_app(
    os.environ.get(BROKER_ENV) or redis_url(),
    os.environ.get(QUEUE_ENV) or "wfbench",
    os.environ.get(PREFIX_ENV) or "wfbench:",
    tuned=os.environ.get(MODE_ENV) == "tuned",
)
noop, ready = register_tasks(app)
