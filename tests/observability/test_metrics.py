"""``GET /metrics`` over real HTTP: families, values, and their movement with the workload."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from _obs_server import (
    activity,
    by_label,
    config,
    poll,
    register,
    run,
    run_lease,
    scrape,
    submit,
    value,
)

from wf.client.rpc_client import RpcClient
from wf.errors import StaleLease
from wf.node_reads import NodeReads
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.metrics import LATENCY_BUCKETS_S
from wf.scheduler.queue import PartitionKey
from wf.server.app import WfServer
from wf.server.auth import CredentialConfig, hash_token
from wf.server.config import SecurityConfig
from wf.server.metrics import COUNTERS, CoreCollector

STALE = StaleLease.code
BY_TENANT = SchedulerConfig(partition_by=(PartitionKey.TENANT,))


def test_workload_moves_the_core_figures(tmp_path: Path) -> None:
    async def test(server: WfServer, url: str) -> None:
        async with RpcClient(url) as client:
            before = await scrape(url)
            assert by_label(before, "wf_queue_depth", "partition") == {}
            assert value(before, "wf_activities_dispatched_total") == 0
            assert value(before, "wf_queue_wait_seconds_count") == 0
            assert by_label(before, "wf_scheduling_latency_seconds_count", "activity_type") == {}
            assert value(before, "wf_worker_utilization_ratio") == 0

            await submit(client, *(activity(f"a{i}", tenant="a") for i in range(3)))
            await submit(client, *(activity(f"b{i}", tenant="b") for i in range(2)))
            queued = await scrape(url)
            assert by_label(queued, "wf_queue_depth", "partition") == {
                "tenant=a": 3,
                "tenant=b": 2,
            }
            assert value(queued, "wf_activities_submitted_total") == 5

            await register(client, "w1", 2)
            first = await poll(client, "w1", 2)
            granted = [g["lease"] for g in first["leases"]]
            assert len(granted) == 2
            leased = await scrape(url)
            depth = by_label(leased, "wf_queue_depth", "partition")
            assert sum(depth.values()) == 3
            assert value(leased, "wf_activities_dispatched_total") == 2
            assert value(leased, "wf_leases_running") == 2
            assert value(leased, "wf_worker_capacity_slots") == 2
            assert value(leased, "wf_worker_utilization_ratio") == 1.0
            assert value(leased, "wf_workers", status="active") == 1
            assert value(leased, "wf_workers", status="failed") == 0
            assert value(leased, "wf_backpressure_level", level="normal") == 1
            assert value(leased, "wf_queue_wait_seconds_count") == 2
            assert value(leased, "wf_scheduling_latency_seconds_count", activity_type="noop") == 2

            await run_lease(client, granted[0], renew=True)
            await run_lease(client, granted[1])
            while True:
                more = [g["lease"] for g in (await poll(client, "w1", 2))["leases"]]
                if not more:
                    break
                granted += more
                for lease in more:
                    await run_lease(client, lease)

            done = await scrape(url)
            assert len(granted) == 5
            assert set(by_label(done, "wf_queue_depth", "partition").values()) == {0}
            assert value(done, "wf_activities_dispatched_total") == len(granted)
            assert value(done, "wf_activities_completed_total") == 5
            assert value(done, "wf_lease_renewals_total") == 1
            assert value(done, "wf_leases_running") == 0
            noop = {"activity_type": "noop"}
            assert value(done, "wf_scheduling_latency_seconds_count", **noop) == len(granted)
            inf = value(done, "wf_scheduling_latency_seconds_bucket", le="+Inf", **noop)
            assert inf == len(granted)
            # Every activity waited in the queue for a poll: the latency includes it.
            assert value(done, "wf_scheduling_latency_seconds_sum", **noop) > 0
            assert value(done, "wf_queue_wait_seconds_count") == len(granted)
            core = server.node.core.metrics
            for attribute, name, _ in COUNTERS:
                assert value(done, name + "_total") == getattr(core, attribute), name

    run(config(tmp_path / "store", dispatch=BY_TENANT), test)


def test_rpc_latency_and_errors_per_method(tmp_path: Path) -> None:
    async def test(server: WfServer, url: str) -> None:
        async with RpcClient(url) as client:
            await register(client, "w1", 1)
            await submit(client, activity("x", correlation_id="c-x"))
            lease = (await poll(client, "w1", 1))["leases"][0]["lease"]
            await run_lease(client, lease)
            try:
                await run_lease(client, lease)
            except StaleLease:
                pass
            else:
                raise AssertionError("a second completion must be refused")
            async with (
                aiohttp.ClientSession() as session,
                session.post(
                    url + "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "no.such"}
                ) as response,
            ):
                assert response.status == 200
        samples = await scrape(url)
        counts = by_label(samples, "wf_rpc_duration_seconds_count", "method")
        for method in (
            "scheduler.activities.submit",
            "scheduler.workers.register",
            "scheduler.workers.poll",
            "scheduler.leases.start",
            "scheduler.leases.complete",
        ):
            assert counts[method] >= 1, method
        assert counts["scheduler.leases.start"] == 2
        assert counts["unknown"] == 1
        assert "no.such" not in counts
        assert (
            value(samples, "wf_rpc_errors_total", method="scheduler.leases.start", code=STALE) == 1
        )
        assert value(samples, "wf_rpc_errors_total", method="unknown", code="method_not_found") == 1
        assert (
            value(
                samples,
                "wf_rpc_duration_seconds_bucket",
                method="scheduler.workers.poll",
                le="60.0",
            )
            == counts["scheduler.workers.poll"]
        )

    run(config(tmp_path / "store"), test)


def test_each_server_has_its_own_registry(tmp_path: Path) -> None:
    async def main() -> None:
        one = WfServer(config(tmp_path / "one"))
        two = WfServer(config(tmp_path / "two"))
        await one.start()
        await two.start()
        try:
            async with RpcClient(f"http://127.0.0.1:{one.port}") as client:
                await submit(client, activity("only-on-one"))
            first = await scrape(f"http://127.0.0.1:{one.port}")
            second = await scrape(f"http://127.0.0.1:{two.port}")
            assert value(first, "wf_activities_submitted_total") == 1
            assert value(second, "wf_activities_submitted_total") == 0
            assert value(first, "wf_queue_depth", partition="default") == 1
            assert by_label(second, "wf_queue_depth", "partition") == {}
        finally:
            await one.stop()
            await two.stop()

    asyncio.run(main())


def test_metrics_need_a_read_role_when_authentication_is_on(tmp_path: Path) -> None:
    security = SecurityConfig(
        required=True,
        credentials=[
            CredentialConfig(name="ops", role="read-only", token_sha256=hash_token("ops-t")),
            CredentialConfig(name="w", role="worker", token_sha256=hash_token("w-t")),
        ],
    )

    async def test(server: WfServer, url: str) -> None:
        async with aiohttp.ClientSession() as session:
            for headers, status in (
                ({}, 401),
                ({"Authorization": "Bearer wrong"}, 401),
                ({"Authorization": "Bearer w-t"}, 403),
            ):
                async with session.get(url + "/metrics", headers=headers) as response:
                    assert response.status == status, headers
        samples = await scrape(url, {"Authorization": "Bearer ops-t"})
        assert value(samples, "wf_leases_running") == 0

    run(config(tmp_path / "store", security=security), test)


def test_openmetrics_when_asked(tmp_path: Path) -> None:
    async def test(server: WfServer, url: str) -> None:
        headers = {"Accept": "application/openmetrics-text; version=1.0.0"}
        async with (
            aiohttp.ClientSession() as session,
            session.get(url + "/metrics", headers=headers) as response,
        ):
            assert response.status == 200
            assert response.content_type == "application/openmetrics-text"
            text = await response.text()
        assert text.rstrip().endswith("# EOF")
        assert "wf_activities_dispatched_total 0.0" in text

    run(config(tmp_path / "store"), test)


class _Node:
    def __init__(self, core: SchedulerCore) -> None:
        self.core = core
        self.reads = NodeReads(self)  # type: ignore[arg-type]


def test_latency_histogram_is_cumulative() -> None:
    core = SchedulerCore()
    for seconds in (0.0001, 0.0005, 0.003, 0.003, 100.0):
        core.metrics.observe_latency(seconds)
    families = {f.name: f for f in CoreCollector(_Node(core)).collect()}  # type: ignore[arg-type]
    histogram = families["wf_queue_wait_seconds"]
    buckets = {s.labels["le"]: s.value for s in histogram.samples if s.name.endswith("_bucket")}
    assert len(buckets) == len(LATENCY_BUCKETS_S) + 1
    assert buckets["0.0005"] == 2  # le is inclusive
    assert buckets["0.002"] == 2
    assert buckets["0.005"] == 4
    assert buckets["60.0"] == 4
    assert buckets["+Inf"] == 5
    totals = {s.name: s.value for s in histogram.samples}
    assert totals["wf_queue_wait_seconds_count"] == 5
    assert abs(totals["wf_queue_wait_seconds_sum"] - 100.0066) < 1e-9
