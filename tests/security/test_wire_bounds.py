"""Issue 13, items 1 and 2: every value that crosses the wire is bounded at the edge.

A real ``WfServer`` on loopback, on SQLite and on PostgreSQL, driven over
HTTP by a raw worker (register, poll, start, complete) and an admin. Each
hostile value is refused with ``invalid_argument`` naming its field, and
the refusal changes nothing stored: the activity's transition history and
the run are as they were, later writes still commit (the node did not fail
stop), and a restart on the same store succeeds. Checked against main at
156d501, where the poison results were accepted (and the run stalled), and
2^64, NUL in a reason or a worker id stopped every later write.

Defence in depth (item 1's second half): a result that reached the store
without passing the edge (written through the core directly, as a bug or an
older version could have) fails only its own run, closed, and a restart
still recovers.
"""

from __future__ import annotations

import asyncio
import base64
import io
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from wf.scheduler import commands as cmd
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.rpc import ANONYMOUS_ADMIN

INVALID_PARAMS = -32602
INVALID_ARGUMENT = -32001

PLAN: dict[str, Any] = {
    "nodes": [
        {"kind": "activity", "id": "work", "activity_type": "manual", "idempotent": True},
    ],
    "output": {"result": {"$node": "work"}},
}
"""One node of a type no in-process worker serves: the test's raw worker runs it."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


POISON_RESULTS: dict[str, bytes] = {
    "invalid_utf8": b'"\xff\xfe"',
    "nested_2000": b"[" * 2000 + b"]" * 2000,
    "nested_65": b"[" * 65 + b"]" * 65,
    "not_json": b"ok",
    "oversized": b'"' + b"x" * (3 * 1024 * 1024) + b'"',
}


@pytest.fixture(params=["sqlite", "postgres"])
def store_config(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreConfig]:
    if request.param == "sqlite":
        yield StoreConfig(root=str(tmp_path / "store"), durability="process")
        return
    dsn = request.getfixturevalue("pg_dsn")
    schema = request.getfixturevalue("pg_schema")
    yield StoreConfig(root=str(tmp_path / "store"), postgres_dsn=dsn, postgres_schema=schema)


class Wire:
    """JSON-RPC calls to one server; answers as raw response objects."""

    def __init__(self, session: aiohttp.ClientSession, port: int) -> None:
        self.session = session
        self.url = f"http://127.0.0.1:{port}/rpc"

    async def raw(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        async with self.session.post(
            self.url, data=io.BytesIO(msgspec.json.encode(body))
        ) as response:
            assert response.status == 200
            answer: dict[str, Any] = msgspec.json.decode(await response.read())
            return answer

    async def ok(self, method: str, params: dict[str, Any]) -> Any:
        answer = await self.raw(method, params)
        assert "result" in answer, answer
        return answer["result"]

    async def refused(self, method: str, params: dict[str, Any], field: str) -> dict[str, Any]:
        """The call is refused as invalid_argument naming ``field``."""
        answer = await self.raw(method, params)
        error = answer.get("error")
        assert error is not None, f"{method} accepted {field}: {answer}"
        assert error["code"] in (INVALID_PARAMS, INVALID_ARGUMENT), error
        assert error["data"]["code"] == "invalid_argument", error
        assert field in error["data"]["details"]["field"], error
        return error


def run_on(config: StoreConfig, test: Callable[[WfServer, Wire], Awaitable[None]]) -> None:
    server_config = ServerConfig(server=ServerSection(port=0, store=config))

    async def main() -> None:
        server = WfServer(server_config)
        await server.start()
        try:
            assert server.port is not None
            async with aiohttp.ClientSession() as session:
                await test(server, Wire(session, server.port))
        finally:
            await server.stop()

    asyncio.run(main())


async def _leases(wire: Wire, worker_id: str, activity_ids: set[str]) -> dict[str, int]:
    """Register ``worker_id`` and poll until it holds every one of ``activity_ids``;
    their fencing tokens."""
    await wire.ok(
        "scheduler.workers.register",
        {"info": {"worker_id": worker_id, "activity_types": ["manual"], "max_concurrency": 8}},
    )
    tokens: dict[str, int] = {}
    for _ in range(50):
        polled = await wire.ok(
            "scheduler.workers.poll", {"worker_id": worker_id, "max_items": 8, "wait_s": 1.0}
        )
        for lease in polled["leases"]:
            tokens[lease["lease"]["activity_id"]] = lease["lease"]["token"]
        if activity_ids <= set(tokens):
            return tokens
    raise AssertionError(f"{worker_id} was never granted all of {sorted(activity_ids)}")


async def _history(wire: Wire, activity_id: str) -> Any:
    return await wire.ok("scheduler.activities.history", {"activity_id": activity_id})


def test_poison_results_are_refused_naming_the_field_and_the_run_still_completes(
    store_config: StoreConfig,
) -> None:
    async def test(server: WfServer, wire: Wire) -> None:
        api, caller = server.workflow, ANONYMOUS_ADMIN
        await api.create_artifact_from_plan("poison", 1, PLAN, caller=caller)
        await api.save_deployment(
            {"artifact_id": "poison", "artifact_version": 1, "name": "default"}, caller=caller
        )
        run = await api.start_run("poison.default", caller=caller)
        activity_id = f"{run['run_id']}.work"
        token = (await _leases(wire, "w1", {activity_id}))[activity_id]
        fenced = {"activity_id": activity_id, "token": token}
        await wire.ok("scheduler.leases.start", fenced)
        before = await _history(wire, activity_id)
        for name, poison in POISON_RESULTS.items():
            error = await wire.refused(
                "scheduler.leases.complete", {**fenced, "result": _b64(poison)}, "result"
            )
            assert "result" in error["message"], (name, error)
            assert await _history(wire, activity_id) == before, name
        # The rightful result still lands, and the run completes with it.
        await wire.ok("scheduler.leases.complete", {**fenced, "result": _b64(b'{"n": 1}')})
        for _ in range(200):
            view = await api.inspect_run(run["run_id"], caller=caller)
            if view["status"] == "completed":
                break
            await asyncio.sleep(0.02)
        assert view["status"] == "completed", view
        assert view["output"] == {"result": {"n": 1}}

    run_on(store_config, test)


def _submit(activity: dict[str, Any]) -> dict[str, Any]:
    return {"activities": [{"activity_id": "a", "activity_type": "manual"} | activity]}


HOSTILE_SUBMISSIONS: list[tuple[dict[str, Any], str]] = [
    ({"retry": {"max_attempts": 2**64}}, "retry.max_attempts"),
    ({"retry": {"max_attempts": 2**63}}, "retry.max_attempts"),
    ({"retry": {"initial_backoff_s": 1e308}}, "retry.initial_backoff_s"),
    ({"activity_id": "a\x00b"}, "activity_id"),
    ({"activity_id": "x" * 257}, "activity_id"),
    ({"activity_type": "t\x00"}, "activity_type"),
    ({"tenant": "t" * (5 * 1024 * 1024)}, "tenant"),
    ({"activity_type": "t" * (5 * 1024 * 1024)}, "activity_type"),
    ({"workflow_id": "w\nx"}, "workflow_id"),
    ({"deadline": 1e308}, "deadline"),
    ({"capabilities": ["gpu\x00"]}, "capabilities"),
    ({"payload": _b64(b"\xff")}, "payload"),
    ({"payload": _b64(b"[" * 100 + b"]" * 100)}, "payload"),
    ({"token": 2**64}, "token"),
    ({"start_to_close_s": 0}, "start_to_close_s"),
    ({"start_to_close_s": 1e308}, "start_to_close_s"),
    ({"schedule_to_start_s": -1}, "schedule_to_start_s"),
]


def test_values_the_store_cannot_hold_are_refused_and_later_writes_still_commit(
    store_config: StoreConfig,
) -> None:
    async def test(server: WfServer, wire: Wire) -> None:
        for fields, field in HOSTILE_SUBMISSIONS:
            await wire.refused("scheduler.activities.submit", _submit(fields), field)
        # Nothing was stored, and the node still accepts writes.
        assert (await wire.ok("scheduler.queue.stats", {}))["depth"] == 0
        await wire.ok("scheduler.activities.submit", _submit({}))
        await wire.refused(
            "scheduler.activities.cancel", {"activity_id": "a", "reason": "why\x00"}, "reason"
        )
        await wire.refused(
            "scheduler.workers.register", {"info": {"worker_id": "w\x00"}}, "info.worker_id"
        )
        await wire.refused(
            "scheduler.workers.register",
            {"info": {"worker_id": "w", "declared": {"t": {"start_to_close_s": 1e308}}}},
            "info.declared",
        )
        await wire.refused(
            "scheduler.workers.poll", {"worker_id": "w\x00", "wait_s": 0}, "worker_id"
        )
        await wire.refused(
            "workflow.artifacts.get", {"artifact_id": "poison", "version": 2**63}, "version"
        )
        await wire.refused(
            "workflow.artifacts.create",
            {"artifact_id": "x", "version": 2**64, "plan": PLAN},
            "version",
        )
        await wire.refused(
            "workflow.runs.start",
            {"deployment_id": "d.default", "inputs": {"deep": _nested(100)}},
            "inputs",
        )
        await wire.refused(
            "workflow.runs.start", {"deployment_id": "d.default", "inputs": {"n": 2**64}}, "inputs"
        )
        await wire.refused(
            "workflow.runs.start", {"deployment_id": "d.default", "inputs": {"s": "\x00"}}, "inputs"
        )
        await wire.refused(
            "workflow.runs.cancel", {"run_id": "run-000001", "reason": "r\x00"}, "reason"
        )
        await wire.refused(
            "workflow.runs.resume", {"run_id": "run-000001", "answer": _nested(100)}, "answer"
        )
        view = await wire.ok("scheduler.activities.get", {"activity_id": "a"})
        assert view["activity"]["state"] == "queued"
        await wire.ok("scheduler.activities.cancel", {"activity_id": "a", "reason": "done"})

    run_on(store_config, test)
    run_on(store_config, _restarts_cleanly)


async def _restarts_cleanly(server: WfServer, wire: Wire) -> None:
    assert server.recovery is not None
    assert server.recovery.diagnostics == []
    await wire.ok("scheduler.activities.submit", _submit({"activity_id": "after-restart"}))


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("stats", "field"),
    [
        ({"cpu_fraction": 1e308}, "cpu_fraction"),
        ({"memory_fraction": -5}, "memory_fraction"),
        ({"workload": -5}, "workload"),
        ({"queue_depth": 2**70}, "queue_depth"),
        ({"lease_status": {"a\x00": "leased"}}, "lease_status"),
    ],
)
def test_heartbeat_figures_are_bounded(tmp_path: Path, stats: dict[str, Any], field: str) -> None:
    config = StoreConfig(root=str(tmp_path / "store"), durability="process")

    async def test(server: WfServer, wire: Wire) -> None:
        await wire.ok("scheduler.workers.register", {"info": {"worker_id": "w1"}})
        await wire.refused(
            "scheduler.workers.heartbeat", {"worker_id": "w1", "stats": stats}, field
        )
        await wire.ok("scheduler.workers.heartbeat", {"worker_id": "w1", "stats": {"workload": 0}})

    run_on(config, test)


def test_bodies_that_do_not_decode_get_a_parse_error(tmp_path: Path) -> None:
    config = StoreConfig(root=str(tmp_path / "store"), durability="process")

    async def test(server: WfServer, wire: Wire) -> None:
        for body in (
            b'{"jsonrpc": "2.0", "id": 1, "method": "\xff\xfe"}',
            b"[" * 5000 + b"]" * 5000,
            b'{"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"a": ' + b"[" * 5000,
        ):
            async with wire.session.post(wire.url, data=body) as response:
                assert response.status == 200
                answer = msgspec.json.decode(await response.read())
            assert answer["error"]["code"] == -32700, answer
        await wire.ok("scheduler.queue.stats", {})

    run_on(config, test)


def test_the_published_schemas_carry_the_bounds(tmp_path: Path) -> None:
    config = StoreConfig(root=str(tmp_path / "store"), durability="process")

    async def test(server: WfServer, wire: Wire) -> None:
        document = await wire.ok("rpc.discover", {})  # an OpenRPC document
        listing = {
            m["name"]: {p["name"]: p["schema"] for p in m["params"]} for m in document["methods"]
        }
        props = listing["scheduler.activities.cancel"]
        assert props["activity_id"]["maxLength"] == 256
        assert props["reason"]["maxLength"] == 16_384
        assert "pattern" in props["reason"]
        complete = listing["scheduler.leases.complete"]
        assert complete["token"]["maximum"] == 2**63 - 1

    run_on(config, test)


def test_a_stored_poison_result_fails_only_its_own_run_and_recovery_still_works(
    store_config: StoreConfig,
) -> None:
    """Defence in depth: results written past the edge, straight through the core."""
    runs: dict[str, str] = {}

    async def poison(server: WfServer, wire: Wire) -> None:
        api, caller = server.workflow, ANONYMOUS_ADMIN
        await api.create_artifact_from_plan("poison", 1, PLAN, caller=caller)
        await api.save_deployment(
            {"artifact_id": "poison", "artifact_version": 1, "name": "default"}, caller=caller
        )
        for name in ("utf8", "deep", "good"):
            runs[name] = (await api.start_run("poison.default", caller=caller))["run_id"]
        results = {
            "utf8": POISON_RESULTS["invalid_utf8"],
            "deep": POISON_RESULTS["nested_2000"],
            "good": b'"fine"',
        }
        tokens = await _leases(wire, "w1", {f"{run_id}.work" for run_id in runs.values()})
        for name, result in results.items():
            activity_id = f"{runs[name]}.work"
            token = tokens[activity_id]
            await server.node.execute(
                lambda now, a=activity_id, t=token: cmd.StartActivity(
                    now=now, activity_id=a, token=t
                )
            )
            await server.node.execute(
                lambda now, a=activity_id, t=token, r=result: cmd.Complete(
                    now=now, activity_id=a, token=t, result=r
                )
            )
        views = {name: await _settled(server, run_id) for name, run_id in runs.items()}
        assert views["good"]["status"] == "completed"
        assert views["good"]["output"] == {"result": "fine"}
        for name in ("utf8", "deep"):
            assert views[name]["status"] == "failed", views[name]
            assert views[name]["error"]["code"] == "bad_result", views[name]

    async def restarted(server: WfServer, wire: Wire) -> None:
        assert server.engine.diagnostics == []
        for name, run_id in runs.items():
            view = await server.workflow.inspect_run(run_id, caller=ANONYMOUS_ADMIN)
            assert view["status"] == ("completed" if name == "good" else "failed")

    run_on(store_config, poison)
    run_on(store_config, restarted)
    # The store check names the two poisoned results (exit 1: damage found).
    check = [str(Path(sys.executable).parent / "wf"), "store", "check", "--json"]
    if store_config.postgres_dsn is None:
        check += ["--store-root", store_config.root]
    else:
        check += ["--postgres", store_config.postgres_dsn, "--schema", store_config.postgres_schema]
    found = subprocess.run(check, capture_output=True, text=True, timeout=60)
    assert found.returncode == 1, found.stdout + found.stderr
    for name in ("utf8", "deep"):
        assert f"{runs[name]}.work" in found.stdout
    assert f"{runs['good']}.work" not in found.stdout


async def _settled(server: WfServer, run_id: str) -> dict[str, Any]:
    for _ in range(250):
        view = await server.workflow.inspect_run(run_id, caller=ANONYMOUS_ADMIN)
        if view["status"] in ("completed", "failed"):
            return view
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} did not settle: {view}")
