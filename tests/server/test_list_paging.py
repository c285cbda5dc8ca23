"""Every list method pages, over the wire, on both stores (issue 13, item 9).

A real :class:`WfServer` (port 0) on SQLite and on PostgreSQL. Every method
``rpc.discover`` lists that answers a list takes ``limit`` (1-100) and
``cursor``; walking ``next_cursor`` gives every object exactly once, in
order; a limit of 0, 101, -1 or 2**64 and a cursor the server did not make
(garbage, another listing's, or one forged to carry a NUL or an
out-of-range key) are refused as ``invalid_argument`` naming the field, and
the server answers normally afterwards; tenant-scoped callers page through
their own objects only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from wf.client.app import App
from wf.client.rpc_client import RpcClient
from wf.errors import InvalidArgument
from wf.runtime import api as runtime_api
from wf.scheduler.model import Activity, RetryPolicy, WorkerInfo
from wf.server.app import WfServer
from wf.server.auth import CredentialConfig, hash_token
from wf.server.config import SecurityConfig, ServerConfig, ServerSection, StoreConfig
from wf.server.rpc import ANONYMOUS_ADMIN, Caller

PLAN = {
    "nodes": [{"kind": "activity", "id": "hello", "activity_type": "format_text"}],
    "output": {"result": {"$node": "hello"}},
}
TOKENS = {"admin": "tok-admin-paging-1", "reader-t1": "tok-reader-t1-paging-2"}
CREDENTIALS = [
    CredentialConfig(name="admin", role="admin", token_sha256=hash_token(TOKENS["admin"])),
    CredentialConfig(
        name="reader-t1",
        role="read-only",
        token_sha256=hash_token(TOKENS["reader-t1"]),
        tenants=frozenset({"t1"}),
    ),
]
LIST_METHODS = {
    "scheduler.activities.history",
    "scheduler.workers.list",
    "workflow.artifacts.list",
    "workflow.deployments.list",
    "workflow.runs.list",
    "workflow.schedules.list",
    "workflow.schedules.occurrences.list",
}
"""Every method that answers a list of stored or registered objects."""


@pytest.fixture(params=["sqlite", "postgres"])
def store_config(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreConfig]:
    if request.param == "sqlite":
        yield StoreConfig(root=str(tmp_path / "store"), durability="process")
        return
    dsn = request.getfixturevalue("pg_dsn")
    schema = request.getfixturevalue("pg_schema")
    yield StoreConfig(root=str(tmp_path / "store"), postgres_dsn=dsn, postgres_schema=schema)


@contextlib.asynccontextmanager
async def serving(store: StoreConfig, *, secured: bool = False) -> AsyncIterator[WfServer]:
    security = SecurityConfig(credentials=CREDENTIALS) if secured else SecurityConfig()
    config = ServerConfig(server=ServerSection(port=0, store=store, security=security))
    server = WfServer(config, schedules=True)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def url(server: WfServer) -> str:
    return f"http://127.0.0.1:{server.port}"


async def seed(server: WfServer, *, schedules: int = 7, deployments: int = 5) -> None:
    """An artifact with three versions; ``deployments`` deployments alternating between
    tenants t1 and t2; ``schedules`` daily schedules alternating over those deployments."""
    wf = server.workflow
    for version in (1, 2, 3):
        await wf.create_artifact_from_plan("hello", version, PLAN, caller=ANONYMOUS_ADMIN)
    await wf.create_artifact_from_plan("again", 1, PLAN, caller=ANONYMOUS_ADMIN)
    for i in range(deployments):
        body = {"artifact_id": "hello", "artifact_version": 1, "name": f"d{i}",
                "tenant": ("t1", "t2")[i % 2]}  # fmt: skip
        await wf.save_deployment(body, caller=ANONYMOUS_ADMIN)
    assert server.schedules is not None
    for i in range(schedules):
        await server.schedules.create_schedule(
            f"s{i:02d}",
            f"hello.d{i % deployments}",
            {"kind": "cron", "expression": "0 3 * * *", "timezone": "UTC"},
            caller=ANONYMOUS_ADMIN,
        )


async def walk(
    call: Callable[[str | None], Awaitable[dict[str, Any]]], items: str
) -> tuple[list[Any], int]:
    """Every item of a listing by following ``next_cursor``; and how many pages it took."""
    found: list[Any] = []
    cursor: str | None = None
    for pages in range(1, 10_000):
        page = await call(cursor)
        assert set(page) == {items, "next_cursor"}, page.keys()
        found.extend(page[items])
        cursor = page["next_cursor"]
        if cursor is None:
            return found, pages
    raise AssertionError("the walk did not end")


def test_every_list_method_in_discover_takes_a_bounded_limit_and_a_cursor(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        store = StoreConfig(root=str(tmp_path / "store"), durability="process")
        async with serving(store) as server, App(url(server)) as app:
            document = await app.discover()  # an OpenRPC document
            methods = {m["name"]: m for m in document["methods"]}
            listing = {n for n in methods if n.endswith((".list", ".history"))}
            assert listing == LIST_METHODS
            for name in LIST_METHODS:
                params = methods[name]["params"]
                properties = {p["name"]: p["schema"] for p in params}
                required = {p["name"] for p in params if p["required"]}
                assert {"limit", "cursor"} <= set(properties), name
                assert "limit" not in required, name
                limit = properties["limit"]
                assert limit["default"] == 50, name
                assert "1 to 100" in limit["description"], name
                assert "1,024 characters" in str(properties["cursor"]), name

    asyncio.run(main())


def test_paging_walks_every_object_once_in_order(store_config: StoreConfig) -> None:
    async def main() -> None:
        async with serving(store_config) as server, App(url(server)) as app:
            await seed(server)
            assert server.schedules is not None
            for include_deleted in (False, True):
                whole = await server.schedules.list_schedules(
                    caller=ANONYMOUS_ADMIN, include_deleted=include_deleted, limit=100
                )
                found, pages = await walk(
                    lambda c, d=include_deleted: app.list_schedules(
                        include_deleted=d, limit=3, cursor=c
                    ),
                    "schedules",
                )
                assert found == whole["schedules"]
                assert [s["schedule_id"] for s in found] == [f"s{i:02d}" for i in range(7)]
                assert pages == 3
                await app.delete_schedule("s03")
            shown = [s["schedule_id"] for s in (await app.list_schedules())["schedules"]]
            assert "s03" not in shown

            async def artifacts(cursor: str | None, artifact_id: str | None = None) -> Any:
                page = await app.list_artifacts(artifact_id, limit=2, cursor=cursor)
                return msgspec.to_builtins(page)

            found, pages = await walk(artifacts, "artifacts")
            assert [(a["artifact_id"], a["version"]) for a in found] == [
                ("again", 1), ("hello", 1), ("hello", 2), ("hello", 3),
            ]  # fmt: skip
            found, _ = await walk(lambda c: artifacts(c, "hello"), "artifacts")
            assert [a["version"] for a in found] == [1, 2, 3]

            async def deployments(cursor: str | None) -> Any:
                return msgspec.to_builtins(await app.list_deployments(limit=2, cursor=cursor))

            found, pages = await walk(deployments, "deployments")
            assert [d["deployment_id"] for d in found] == [f"hello.d{i}" for i in range(5)]
            assert pages == 3

            for i in (3, 1, 2, 5, 4):
                await app.register_worker(WorkerInfo(worker_id=f"w{i}"))

            async def workers(cursor: str | None) -> Any:
                return msgspec.to_builtins(await app.list_workers(limit=2, cursor=cursor))

            found, _ = await walk(workers, "workers")
            # Registration order, each once.
            assert [w["info"]["worker_id"] for w in found] == ["w3", "w1", "w2", "w5", "w4"]

            history = await retried_history(app, "w1", attempts=4)

            async def transitions(cursor: str | None) -> Any:
                page = await app.activity_history("retried", limit=2, cursor=cursor)
                return msgspec.to_builtins(page)

            found, pages = await walk(transitions, "transitions")
            assert found == history
            assert len(found) >= 12
            assert pages == (len(found) + 1) // 2  # full pages of 2, the last one shorter

    asyncio.run(main())


async def retried_history(app: App, worker_id: str, attempts: int) -> list[Any]:
    """Drive activity ``retried`` through ``attempts`` failed attempts (no backoff) over the
    wire; its whole history, in one page of 100."""
    retry = RetryPolicy(max_attempts=attempts, initial_backoff_s=0.0, jitter_fraction=0.0)
    await app.register_worker(WorkerInfo(worker_id=worker_id, activity_types=frozenset({"t"})))
    await app.submit_activities([Activity(activity_id="retried", activity_type="t", retry=retry)])
    for _ in range(attempts):
        polled = await app.poll(worker_id, max_items=1, wait_s=5.0)
        (grant,) = polled.leases
        await app.start_activity("retried", grant.lease.token)
        await app.fail_activity("retried", grant.lease.token, "Boom", "again", retryable=True)
    whole = await app.activity_history("retried", limit=100)
    assert whole.next_cursor is None
    return list(msgspec.to_builtins(whole.transitions))


def _forged(kind: str, *key: Any) -> str:
    raw = json.dumps([kind, *key]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_out_of_range_limits_and_foreign_cursors_are_refused(store_config: StoreConfig) -> None:
    """Refused as ``invalid_argument`` naming the field, before any read: a NUL forged
    into a cursor never reaches PostgreSQL (which would fail it as a store error)."""

    async def main() -> None:
        async with serving(store_config) as server, App(url(server)) as app:
            await seed(server, schedules=2, deployments=2)
            await retried_history(app, "w1", attempts=1)
            required = {
                "scheduler.activities.history": {"activity_id": "retried"},
                "workflow.schedules.occurrences.list": {"schedule_id": "s00"},
            }
            other = (await app.list_schedules(limit=1))["next_cursor"]
            assert other is not None
            bad_cursors = [
                "not a cursor at all",
                "",
                other,  # a cursor of another listing
                _forged("schedules", "a\u0000b"),
                _forged("deployments", "d\u0000"),
                _forged("artifacts", "hello", 2**63),
                _forged("artifacts", "hello", -1),
                _forged("workers", 2**70),
                _forged("history", "1"),
                _forged("schedules", "x" * 300),
            ]
            async with aiohttp.ClientSession() as session:
                for method in sorted(LIST_METHODS):
                    base = required.get(method, {})
                    for limit in (0, 101, -1, 2**64):
                        error = await raw_call(session, server, method, {**base, "limit": limit})
                        assert error["data"]["code"] == "invalid_argument", (method, limit)
                        assert error["data"]["details"]["field"] == "limit", (method, error)
                    for cursor in bad_cursors:
                        if method == "workflow.schedules.list" and cursor == other:
                            continue  # its own cursor: valid
                        error = await raw_call(session, server, method, {**base, "cursor": cursor})
                        assert error["data"]["code"] == "invalid_argument", (method, cursor)
                        assert error["data"]["details"]["field"] == "cursor", (method, error)
                    # Nothing broke: the same call with good arguments answers.
                    answer = await app.rpc.call(method, {**base, "limit": 100})
                    assert answer["next_cursor"] is None, method

    asyncio.run(main())


async def raw_call(
    session: aiohttp.ClientSession, server: WfServer, method: str, params: dict[str, Any]
) -> dict[str, Any]:
    """One request written by hand (2**64 does not fit the client's JSON encoder); its
    ``error`` object."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    async with session.post(f"{url(server)}/rpc", data=body.encode()) as response:
        assert response.status == 200
        answer: dict[str, Any] = json.loads(await response.read())
    assert "error" in answer, (method, params, answer)
    error: dict[str, Any] = answer["error"]
    return error


def test_tenant_scoped_callers_page_only_their_own(
    store_config: StoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schedules are filtered in the store's statement; deployments (tenant in the body)
    are filtered by the API with a bounded scan per call: short pages then, never a
    foreign object, and the walk still ends with every one of the caller's, once."""
    monkeypatch.setattr(runtime_api, "DEPLOYMENT_SCAN_ROWS_MAX", 3)

    async def main() -> None:
        async with serving(store_config, secured=True) as server:
            await seed(server, schedules=11, deployments=9)
            admin = App(url(server), token=TOKENS["admin"])
            reader = App(url(server), token=TOKENS["reader-t1"])
            try:
                await admin.register_worker(WorkerInfo(worker_id="any"))
                await admin.register_worker(WorkerInfo(worker_id="t2-only",
                                                       tenants=frozenset({"t2"})))  # fmt: skip
                await admin.register_worker(WorkerInfo(worker_id="t1-only",
                                                       tenants=frozenset({"t1"})))  # fmt: skip
                found, _ = await walk(
                    lambda c: reader.list_schedules(limit=2, cursor=c), "schedules"
                )
                mine = [f"s{i:02d}" for i in range(11) if (i % 9) % 2 == 0]
                assert [s["schedule_id"] for s in found] == mine
                assert {s["tenant"] for s in found} == {"t1"}

                pages: list[list[str]] = []

                async def deployments(cursor: str | None) -> Any:
                    page = await reader.list_deployments(limit=2, cursor=cursor)
                    pages.append([d.deployment_id for d in page.deployments])
                    return msgspec.to_builtins(page)

                found, _ = await walk(deployments, "deployments")
                assert [d["deployment_id"] for d in found] == [
                    f"hello.d{i}" for i in range(0, 9, 2)
                ]
                assert {d["tenant"] for d in found} == {"t1"}
                assert all(len(p) <= 2 for p in pages)
                assert any(len(p) < 2 for p in pages[:-1])  # the scan budget cut a page short

                async def workers(cursor: str | None) -> Any:
                    return msgspec.to_builtins(await reader.list_workers(limit=1, cursor=cursor))

                found, _ = await walk(workers, "workers")
                assert [w["info"]["worker_id"] for w in found] == ["any", "t1-only"]
                # The unscoped admin sees all, through the same pages.
                everyone = await admin.list_workers(limit=100)
                assert [w.info.worker_id for w in everyone.workers] == ["any", "t2-only", "t1-only"]
            finally:
                await admin.close()
                await reader.close()

    asyncio.run(main())


def test_an_artifact_page_stops_at_its_byte_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plans can be large: a page ends once its plans pass the budget (never before its
    first item), ``next_cursor`` continues after it, and the walk still sees every one."""
    monkeypatch.setattr(runtime_api, "PAGE_BYTES_MAX", 1)

    async def main() -> None:
        store = StoreConfig(root=str(tmp_path / "store"), durability="process")
        async with serving(store) as server, App(url(server)) as app:
            await seed(server, schedules=0, deployments=1)

            async def artifacts(cursor: str | None) -> Any:
                page = await app.list_artifacts(limit=100, cursor=cursor)
                assert len(page.artifacts) == 1  # one plan already passes 1 byte
                return msgspec.to_builtins(page)

            found, pages = await walk(artifacts, "artifacts")
            assert [(a["artifact_id"], a["version"]) for a in found] == [
                ("again", 1), ("hello", 1), ("hello", 2), ("hello", 3),
            ]  # fmt: skip
            assert pages == 4

    asyncio.run(main())


def test_the_python_api_pages_for_scoped_callers_like_the_wire(tmp_path: Path) -> None:
    """The in-process API takes the same ``limit``/``cursor`` and filters the same way."""

    async def main() -> None:
        store = StoreConfig(root=str(tmp_path / "store"), durability="process")
        async with serving(store) as server:
            await seed(server, schedules=6, deployments=3)
            assert server.schedules is not None
            t2 = Caller(identity="t2-reader", role="read-only", tenants=frozenset({"t2"}))
            page = await server.schedules.list_schedules(caller=t2, limit=100)
            assert [s["schedule_id"] for s in page["schedules"]] == ["s01", "s04"]
            deployments = await server.workflow.list_deployments(caller=t2)
            assert [d.deployment_id for d in deployments.deployments] == ["hello.d1"]
            for bad in (0, 101, -1, 2**64, True):
                with pytest.raises(InvalidArgument):
                    await server.schedules.list_schedules(caller=t2, limit=bad)
            with pytest.raises(InvalidArgument):
                await server.workflow.list_deployments(caller=t2, cursor="zz")
            async with RpcClient(url(server)) as client:
                assert (await client.call("workflow.deployments.list"))["next_cursor"] is None

    asyncio.run(main())
