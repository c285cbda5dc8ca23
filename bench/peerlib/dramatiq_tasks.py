"""The Dramatiq broker and actors the benchmark's workers load (``dramatiq <this module>:broker``).

As Dramatiq's quick start sets it up: a :class:`~dramatiq.brokers.redis.RedisBroker`
with its default middleware, made the global broker, and plain functions
declared as actors. Its Redis URL and key namespace come from the
environment the benchmark gives each worker (see :mod:`.dramatiq_system`);
the namespace is the run's isolation, nothing else differs from the
defaults. The benchmark process builds a client broker of its own with
:func:`make_broker` and the same two values and declares the same actors on
it with :func:`declare_actors`, so its ``send()`` lands in the workers' queue.
"""

from __future__ import annotations

import os
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from .base import record_start
from .peer_processes import mark_ready, redis_url

URL_ENV = "WF_BENCH_DRAMATIQ_URL"
NAMESPACE_ENV = "WF_BENCH_DRAMATIQ_NAMESPACE"
NOOP_ACTOR = "wfbench_noop"
READY_ACTOR = "wfbench_ready"


def make_broker(url: str, namespace: str) -> RedisBroker:
    """A Redis broker with Dramatiq's default middleware, every key under ``namespace``."""
    return RedisBroker(url=url, namespace=namespace)


def noop_body(task_id: str) -> None:
    """The benchmark's task body."""
    record_start(task_id)


def ready_body(token: str) -> None:
    """A warm-up task: marks ``token`` in the ready folder."""
    mark_ready(token)


def declare_actors(on: RedisBroker) -> tuple[Any, Any]:
    """The benchmark's actors on broker ``on``: (noop, ready), as ``@dramatiq.actor`` declares
    them (default queue, retries and time limit)."""
    return (
        dramatiq.actor(actor_name=NOOP_ACTOR, broker=on)(noop_body),
        dramatiq.actor(actor_name=READY_ACTOR, broker=on)(ready_body),
    )


broker = make_broker(
    os.environ.get(URL_ENV) or redis_url(), os.environ.get(NAMESPACE_ENV) or "dramatiq"
)
dramatiq.set_broker(broker)
noop, ready = declare_actors(broker)
