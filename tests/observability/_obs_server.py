"""A real server on loopback for the observability tests, and a /metrics scraper.

Each test runs one ``WfServer`` (port 0, temporary SQLite store) inside
``asyncio.run`` and talks to it over HTTP: JSON-RPC through ``RpcClient``,
``/metrics`` through a plain aiohttp GET parsed with prometheus_client's own
text parser, so what is checked is what Prometheus would read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from wf.client.rpc_client import RpcClient
from wf.scheduler.config import SchedulerConfig
from wf.server.app import WfServer
from wf.server.config import (
    ObservabilityConfig,
    SecurityConfig,
    ServerConfig,
    ServerSection,
    StoreConfig,
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
"""(sample name, labels) -> value."""


def config(
    root: Path,
    *,
    dispatch: SchedulerConfig | None = None,
    observability: ObservabilityConfig | None = None,
    security: SecurityConfig | None = None,
) -> ServerConfig:
    """A loopback configuration on port 0 over a temporary store."""
    return ServerConfig(
        server=ServerSection(
            port=0,
            store=StoreConfig(root=str(root), durability="process"),
            observability=observability or ObservabilityConfig(),
            security=security or SecurityConfig(),
        ),
        dispatch=dispatch or SchedulerConfig(),
    )


def run(configuration: ServerConfig, test: Callable[[WfServer, str], Awaitable[None]]) -> None:
    """Start a server, run ``test(server, base_url)``, stop the server."""

    async def main() -> None:
        server = WfServer(configuration)
        await server.start()
        try:
            await test(server, f"http://127.0.0.1:{server.port}")
        finally:
            await server.stop()

    asyncio.run(main())


async def scrape(base_url: str, headers: dict[str, str] | None = None) -> Samples:
    """``GET /metrics``, parsed into samples."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(base_url + "/metrics", headers=headers) as response,
    ):
        assert response.status == 200, await response.text()
        assert response.content_type == "text/plain"
        text = await response.text()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (KeyError if absent)."""
    return samples[(name, frozenset(labels.items()))]


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    """Every sample of ``name``, keyed by the value of ``label``."""
    return {dict(k[1])[label]: v for k, v in samples.items() if k[0] == name}


def activity(activity_id: str, **fields: Any) -> dict[str, Any]:
    """A submission as JSON."""
    return {"activity_id": activity_id, "activity_type": "noop", **fields}


async def submit(client: RpcClient, *activities: dict[str, Any]) -> None:
    """Submit activities (admin call)."""
    await client.call("scheduler.activities.submit", {"activities": list(activities)})


async def register(client: RpcClient, worker_id: str, max_concurrency: int) -> None:
    """Register a worker."""
    info = {"worker_id": worker_id, "max_concurrency": max_concurrency}
    await client.call("scheduler.workers.register", {"info": info})


async def poll(client: RpcClient, worker_id: str, max_items: int) -> dict[str, Any]:
    """One poll that does not wait; the raw result."""
    result: dict[str, Any] = await client.call(
        "scheduler.workers.poll", {"worker_id": worker_id, "max_items": max_items, "wait_s": 0}
    )
    return result


async def run_lease(client: RpcClient, lease: dict[str, Any], *, renew: bool = False) -> None:
    """Start, optionally renew, and complete one granted lease."""
    fenced = {"activity_id": lease["activity_id"], "token": lease["token"]}
    await client.call("scheduler.leases.start", fenced)
    if renew:
        await client.call("scheduler.leases.renew", fenced)
    await client.call("scheduler.leases.complete", fenced)
