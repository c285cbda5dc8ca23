"""The Procrastinate application the benchmark's workers load (``procrastinate --app``).

Its database comes from ``$WF_BENCH_PROCRASTINATE_DSN``, which the benchmark
sets to the private database of the run (see :mod:`.procrastinate_system`).
The benchmark process defers by task name with an application of its own.
"""

from __future__ import annotations

import os

import procrastinate

from .base import record_start
from .peer_processes import mark_ready, postgres_dsn

DSN_ENV = "WF_BENCH_PROCRASTINATE_DSN"
QUEUE = "wfbench"
NOOP_TASK = "wfbench.noop"
READY_TASK = "wfbench.ready"

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get(DSN_ENV) or postgres_dsn())
)


@app.task(name=NOOP_TASK, queue=QUEUE)
def noop(task_id: str) -> None:
    """The benchmark's task body."""
    record_start(task_id)


@app.task(name=READY_TASK, queue=QUEUE)
def ready(token: str) -> None:
    """A warm-up task: marks ``token`` in the ready folder."""
    mark_ready(token)
