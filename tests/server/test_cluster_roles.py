"""Several servers on one PostgreSQL store (issue 15, docs/ha.md): one active, the
others standbys that answer ``not_leader`` naming the active, take over when it
goes, and a deposed active that steps down instead of writing.

The servers are real ``WfServer`` instances on loopback in one event loop; the
writer session is really killed with ``pg_terminate_backend``. The fault tests
with separate processes, SIGKILL, SIGSTOP and a TCP proxy are in ``tests/ha``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from wf.client.rpc_client import RpcClient
from wf.errors import OwnershipLost
from wf.server.app import WfServer
from wf.server.config import ClusterConfig, ServerConfig, ServerSection, StoreConfig

DEADLINE_S = 20.0


def config(dsn: str, schema: str, node_id: str, port: int = 0) -> ServerConfig:
    return ServerConfig(
        server=ServerSection(
            port=port,
            store=StoreConfig(postgres_dsn=dsn, postgres_schema=schema),
            cluster=ClusterConfig(node_id=node_id, campaign_interval_s=0.05),
        )
    )


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def node(dsn: str, schema: str, node_id: str) -> AsyncIterator[WfServer]:
    server = WfServer(config(dsn, schema, node_id))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def url(server: WfServer) -> str:
    return f"http://127.0.0.1:{server.port}"


async def readyz(server: WfServer) -> tuple[int, dict[str, Any]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def rpc(server: WfServer, method: str) -> dict[str, Any]:
    """One raw JSON-RPC call (no client: the clients follow ``not_leader`` by themselves)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {}}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        b"POST /rpc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    raw = await reader.read()
    writer.close()
    answer: dict[str, Any] = json.loads(raw.partition(b"\r\n\r\n")[2])
    return answer


def error_code(answer: dict[str, Any]) -> str | None:
    error = answer.get("error")
    return None if error is None else str(error["data"]["code"])


async def terminate_writer_of(dsn: str, schema: str, backend_pid: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SELECT pg_terminate_backend(%s)", [backend_pid])


async def owner_backend(dsn: str, schema: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT backend_pid FROM {}.owner").format(sql.Identifier(schema))
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def fence(dsn: str, schema: str) -> tuple[int, int]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT epoch, commit_seq FROM {}.fence").format(sql.Identifier(schema))
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


def test_the_first_node_is_active_and_a_second_is_a_standby_naming_it(
    pg_dsn: str, pg_schema: str
) -> None:
    async def main() -> None:
        async with node(pg_dsn, pg_schema, "a") as a, node(pg_dsn, pg_schema, "b") as b:
            assert a.cluster.role == "active"
            assert b.cluster.role == "standby"
            status, body = await readyz(a)
            assert (status, body["role"]) == (200, "active")
            status, body = await readyz(b)
            assert (status, body["role"], body["reason"]) == (503, "standby", "standby")
            refused = await rpc(b, "scheduler.queue.stats")
            assert error_code(refused) == "not_leader"
            assert refused["error"]["data"]["details"]["epoch"] == a.cluster.epoch
            # cluster.status and rpc.discover answer on every node.
            status_b = (await rpc(b, "cluster.status"))["result"]
            assert (await rpc(b, "rpc.discover"))["result"]["methods"][0]["name"]
            assert status_b["role"] == "standby"
            assert {n["node_id"]: n["role"] for n in status_b["nodes"]} == {
                "a": "active",
                "b": "standby",
            }

    asyncio.run(main())


def test_a_standby_names_the_active_by_its_advertised_url(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        advertised = "http://node-a.example:8765"
        config_a = config(pg_dsn, pg_schema, "a")
        config_a = ServerConfig(
            server=ServerSection(
                port=0,
                store=config_a.server.store,
                cluster=ClusterConfig(node_id="a", advertise_url=advertised),
            )
        )
        a = WfServer(config_a)
        await a.start()
        try:
            async with node(pg_dsn, pg_schema, "b") as b:
                refused = await rpc(b, "workflow.runs.list")
                assert refused["error"]["data"]["details"]["leader_url"] == advertised
                assert (await readyz(b))[1]["leader_url"] == advertised
        finally:
            await a.stop()

    asyncio.run(main())


def test_a_standby_takes_over_in_a_new_epoch_when_the_active_stops(
    pg_dsn: str, pg_schema: str
) -> None:
    async def main() -> None:
        async with node(pg_dsn, pg_schema, "b") as b:
            a = WfServer(config(pg_dsn, pg_schema, "a"))
            # b started first: it is the active; a joins as a standby.
            await a.start()
            try:
                assert (a.cluster.role, b.cluster.role) == ("standby", "active")
                first_epoch = b.cluster.epoch
                await b.stop()

                async def a_active() -> bool:
                    return a.cluster.role == "active"

                await until(a_active, "the standby to take over")
                assert a.cluster.epoch > first_epoch
                assert (await fence(pg_dsn, pg_schema))[0] == a.cluster.epoch
                assert (await readyz(a))[0] == 200
                async with RpcClient(url(a)) as client:
                    assert await client.call("scheduler.queue.stats", {})
            finally:
                await a.stop()

    asyncio.run(main())


def test_a_deposed_active_steps_down_and_commits_nothing_after_the_fence_moved(
    pg_dsn: str, pg_schema: str
) -> None:
    async def main() -> None:
        async with node(pg_dsn, pg_schema, "a") as a, node(pg_dsn, pg_schema, "b") as b:
            assert (a.cluster.role, b.cluster.role) == ("active", "standby")
            old_epoch = a.cluster.epoch
            # Kill the active's writer session: its lock goes with it, b takes over.
            await terminate_writer_of(pg_dsn, pg_schema, await owner_backend(pg_dsn, pg_schema))

            async def b_active() -> bool:
                return b.cluster.role == "active"

            await until(b_active, "b to take over")
            new_epoch, _ = await fence(pg_dsn, pg_schema)
            assert new_epoch > old_epoch
            # The deposed node's next write is refused inside PostgreSQL by the fence
            # (or by the lock b holds): nothing of it is stored.
            _, seq_before = await fence(pg_dsn, pg_schema)
            with pytest.raises(OwnershipLost):
                await a.node.store.prove_writable()
            assert (await fence(pg_dsn, pg_schema))[1] == seq_before

            async def a_standby() -> bool:
                return a.cluster.role == "standby"

            await until(a_standby, "a to step down")
            assert error_code(await rpc(a, "scheduler.queue.stats")) == "not_leader"
            assert (await readyz(a))[0] == 503
            assert a.cluster.leader_url == b.cluster.advertise_url

    asyncio.run(main())


def test_an_active_whose_session_went_unconfirmed_stops_answering_until_it_is_confirmed(
    pg_dsn: str, pg_schema: str
) -> None:
    async def main() -> None:
        async with node(pg_dsn, pg_schema, "a") as a:
            store = a.cluster.store
            assert store is not None
            assert error_code(await rpc(a, "scheduler.queue.stats")) is None
            # As if the process had been frozen past the gate's bound.
            store.confirmed_at = time.monotonic() - a.config.server.cluster.session_timeout_s
            assert error_code(await rpc(a, "scheduler.queue.stats")) == "not_leader"
            assert (await readyz(a))[1]["reason"] == "gated"

            # Its pings confirm the session again: it answers once more.
            async def answering() -> bool:
                return not a.cluster.gate_closed()

            await until(answering, "the ping to confirm the session")
            assert error_code(await rpc(a, "scheduler.queue.stats")) is None
            assert a.cluster.role == "active"

    asyncio.run(main())


def test_the_active_writer_session_is_bounded_by_postgresql(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        async with node(pg_dsn, pg_schema, "a") as a:
            # PostgreSQL itself ends the session once it is silent this long (a frozen
            # or cut-off active loses its lock): read the bounds from the session.
            store = a.cluster.store
            assert store is not None
            writer = store._wconn
            assert writer is not None
            shown = {}
            for setting in ("idle_session_timeout", "idle_in_transaction_session_timeout"):
                cur = await writer.execute(sql.SQL("SHOW {}").format(sql.Identifier(setting)))
                row = await cur.fetchone()
                assert row is not None
                shown[setting] = row[0]
            assert set(shown.values()) == {"3s"}, shown

    asyncio.run(main())


def test_a_standby_store_refuses_every_write(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        async with node(pg_dsn, pg_schema, "a"), node(pg_dsn, pg_schema, "b") as b:
            _, seq_before = await fence(pg_dsn, pg_schema)
            with pytest.raises(OwnershipLost):
                await b.node.store.prove_writable()
            assert (await fence(pg_dsn, pg_schema))[1] == seq_before

    asyncio.run(main())


def test_a_sqlite_server_is_its_own_single_active_node(tmp_path: Path) -> None:
    async def main() -> None:
        server = WfServer(
            ServerConfig(server=ServerSection(port=0, store=StoreConfig(root=str(tmp_path))))
        )
        await server.start()
        try:
            status = await server.cluster.status()
            assert (status.role, [n.role for n in status.nodes]) == ("active", ["active"])
            assert not server.cluster.gate_closed()
            assert (await readyz(server))[0] == 200
        finally:
            await server.stop()

    asyncio.run(main())


def test_a_standby_takes_over_from_its_warm_copy_with_every_activity(
    pg_dsn: str, pg_schema: str
) -> None:
    async def main() -> None:
        a = WfServer(config(pg_dsn, pg_schema, "a"))
        await a.start()
        b = WfServer(config(pg_dsn, pg_schema, "b"))
        await b.start()
        try:
            async with RpcClient(url(a)) as client:
                for batch in range(3):
                    activities = [
                        {"activity_id": f"act-{batch}-{i}", "activity_type": "t"} for i in range(20)
                    ]
                    await client.call("scheduler.activities.submit", {"activities": activities})

            async def warm() -> bool:
                await b.cluster._learn_leader()
                copy = b.cluster._copy
                return copy is not None and b.cluster.lag_commits() == 0 and len(copy.live) == 60

            await until(warm, "the standby's copy to catch up")
            await a.stop()

            async def b_active() -> bool:
                return b.cluster.role == "active"

            await until(b_active, "b to take over")
            assert b.cluster.warm_takeovers == 1
            assert b.cluster.recovery is not None
            assert b.cluster.recovery.activities == 60
            async with RpcClient(url(b)) as client:
                stats = await client.call("scheduler.queue.stats", {})
            assert stats["depth"] == 60
        finally:
            await b.stop()
            if a.cluster.role != "stopping":
                await a.stop()

    asyncio.run(main())


def test_a_node_that_stepped_down_serves_long_polls_again_when_it_takes_over_anew(
    pg_dsn: str, pg_schema: str
) -> None:
    async def main() -> None:
        async with node(pg_dsn, pg_schema, "a") as a:
            b = WfServer(config(pg_dsn, pg_schema, "b"))
            await b.start()
            await terminate_writer_of(pg_dsn, pg_schema, await owner_backend(pg_dsn, pg_schema))

            async def roles_swapped() -> bool:
                return (a.cluster.role, b.cluster.role) == ("standby", "active")

            await until(roles_swapped, "b to take over and a to step down")
            await b.stop()

            async def a_active() -> bool:
                return a.cluster.role == "active"

            await until(a_active, "a to take over again")
            async with RpcClient(url(a)) as client:
                info = {"worker_id": "w1", "max_concurrency": 1}
                await client.call("scheduler.workers.register", {"info": info, "held": []})
                # An empty long poll waits (it is not answered at once as in a drain).
                started = time.monotonic()
                empty = await client.call(
                    "scheduler.workers.poll", {"worker_id": "w1", "wait_s": 0.3}
                )
                assert time.monotonic() - started >= 0.25
                assert empty.get("leases", []) == []
                await client.call(
                    "scheduler.activities.submit",
                    {"activities": [{"activity_id": "again-1", "activity_type": "t"}]},
                )
                polled = await client.call(
                    "scheduler.workers.poll", {"worker_id": "w1", "wait_s": 5.0}
                )
            assert [g["lease"]["activity_id"] for g in polled["leases"]] == ["again-1"]

    asyncio.run(main())


def test_a_node_whose_clock_is_too_far_off_does_not_campaign(
    pg_dsn: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        # No clock agrees with PostgreSQL's to a nanosecond: this bound refuses any.
        strict = ServerConfig(
            server=ServerSection(
                port=0,
                store=StoreConfig(postgres_dsn=pg_dsn, postgres_schema=pg_schema),
                cluster=ClusterConfig(node_id="skewed", clock_skew_max_s=1e-9),
            )
        )
        server = WfServer(strict)
        await server.start()
        try:
            assert server.cluster.role == "standby"
            assert (await readyz(server))[0] == 503
        finally:
            await server.stop()

    with caplog.at_level("ERROR", logger="wf.server.cluster"):
        asyncio.run(main())
    assert any(getattr(r, "action", None) == "cluster.clock_refused" for r in caplog.records)
