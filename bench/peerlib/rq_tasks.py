"""The functions the benchmark's RQ workers run (enqueued by dotted name)."""

from __future__ import annotations

from .base import record_start
from .peer_processes import mark_ready


def noop(task_id: str) -> None:
    """The benchmark's task body."""
    record_start(task_id)


def ready(token: str) -> None:
    """A warm-up task: marks ``token`` in the ready folder."""
    mark_ready(token)
