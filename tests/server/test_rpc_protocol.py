"""JSON-RPC 2.0 conformance of ``POST /rpc``, over real HTTP.

Raw bodies go through an aiohttp client to an in-process ``WfServer`` (port
0, temporary SQLite store), so what is checked is exactly what a foreign
client would see: status codes, bodies, ids, error codes and their
``error.data``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.rpc import (
    BATCH_MAX,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
)


class Wire:
    """Raw posts to one running server."""

    def __init__(self, session: aiohttp.ClientSession, url: str, server: WfServer) -> None:
        self.session = session
        self.url = url
        self.server = server

    async def post(self, body: bytes | Any) -> tuple[int, Any]:
        """HTTP status and the decoded body (``None`` when there is none)."""
        data = body if isinstance(body, bytes) else msgspec.json.encode(body)
        async with self.session.post(
            self.url, data=data, headers={"Content-Type": "application/json"}
        ) as response:
            raw = await response.read()
            if not raw:
                return response.status, None
            assert response.content_type == "application/json"
            return response.status, msgspec.json.decode(raw)

    async def call(self, method: str, params: Any = None, request_id: Any = 1) -> Any:
        """One request; the whole response object."""
        request: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            request["params"] = params
        status, answer = await self.post(request)
        assert status == 200
        return answer


def on_server(tmp_path: Path, test: Callable[[Wire], Awaitable[None]]) -> None:
    config = ServerConfig(
        server=ServerSection(
            port=0, store=StoreConfig(root=str(tmp_path / "store"), durability="process")
        )
    )

    async def main() -> None:
        server = WfServer(config)
        await server.start()
        try:
            async with aiohttp.ClientSession() as session:
                await test(Wire(session, f"http://127.0.0.1:{server.port}/rpc", server))
        finally:
            await server.stop()

    asyncio.run(main())


def request(method: str, params: Any = None, request_id: Any = None) -> dict[str, Any]:
    """A request object; without ``request_id`` a notification."""
    r: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        r["params"] = params
    if request_id is not None:
        r["id"] = request_id
    return r


ACTIVITY = {"activity_id": "a1", "activity_type": "noop"}


def _error(answer: Any, code: int, request_id: Any = None) -> dict[str, Any]:
    """The error object of a response, checked for shape, code and id."""
    assert isinstance(answer, dict)
    assert answer["jsonrpc"] == "2.0"
    assert answer["id"] == request_id
    assert "result" not in answer
    error: dict[str, Any] = answer["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str)
    return error


# ---------------------------------------------------------------- requests


def test_single_request(tmp_path: Path) -> None:
    async def test(wire: Wire) -> None:
        for request_id in (7, "req-7", None):
            answer = await wire.call("scheduler.queue.stats", {}, request_id)
            assert set(answer) == {"jsonrpc", "id", "result"}
            assert answer["jsonrpc"] == "2.0"
            assert answer["id"] == request_id
            assert answer["result"]["depth"] == 0
        # params may be omitted for a method without parameters.
        assert "result" in await wire.call("scheduler.workers.list")

    on_server(tmp_path, test)


def test_batch_answers_by_id(tmp_path: Path) -> None:
    async def test(wire: Wire) -> None:
        status, answers = await wire.post(
            [
                request("scheduler.activities.submit", {"activities": [ACTIVITY]}, "s"),
                request("scheduler.activities.get", {"activity_id": "nope"}, 2),
                request("no.such.method", {}, 3),
                request("scheduler.queue.stats", {}, 4),
            ]
        )
        assert status == 200
        assert isinstance(answers, list)
        by_id = {a["id"]: a for a in answers}
        assert set(by_id) == {"s", 2, 3, 4}
        assert by_id["s"]["result"] == {"activity_ids": ["a1"]}
        assert _error(by_id[2], -32010, 2)["data"]["code"] == "not_found"
        _error(by_id[3], METHOD_NOT_FOUND, 3)
        assert "result" in by_id[4]

    on_server(tmp_path, test)


def test_notifications_get_no_response_but_run(tmp_path: Path) -> None:
    async def test(wire: Wire) -> None:
        # A single notification: it runs, and the answer has no body.
        status, body = await wire.post(
            request("scheduler.activities.submit", {"activities": [ACTIVITY]})
        )
        assert (status, body) == (204, None)
        answer = await wire.call("scheduler.activities.get", {"activity_id": "a1"})
        assert answer["result"]["activity"]["activity_id"] == "a1"
        # A failing notification is not answered either.
        assert await wire.post(request("no.such.method")) == (204, None)
        assert await wire.post(request("scheduler.activities.get", {})) == (204, None)
        # In a batch only the requests are answered.
        status, answers = await wire.post(
            [
                request("scheduler.queue.stats"),
                request("scheduler.queue.stats", {}, 1),
                request("no.such.method"),
            ]
        )
        assert status == 200
        assert [a["id"] for a in answers] == [1]
        # A batch of only notifications: HTTP 204, no body.
        assert await wire.post([request("scheduler.queue.stats")] * 3) == (204, None)

    on_server(tmp_path, test)


# ------------------------------------------------------------ refusals


def test_parse_error(tmp_path: Path) -> None:
    async def test(wire: Wire) -> None:
        for body in (b'{"jsonrpc": "2.0", "method"', b"", b"\xff\xfe", b'[{"jsonrpc": "2.0"},'):
            status, answer = await wire.post(body)
            assert status == 200
            _error(answer, PARSE_ERROR, None)

    on_server(tmp_path, test)


@pytest.mark.parametrize(
    "body",
    [
        42,
        "scheduler.queue.stats",
        None,
        {"jsonrpc": "1.0", "id": 1, "method": "scheduler.queue.stats"},
        {"id": 1, "method": "scheduler.queue.stats"},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": True, "method": "scheduler.queue.stats"},
        {"jsonrpc": "2.0", "id": {"a": 1}, "method": "scheduler.queue.stats"},
        {"jsonrpc": "2.0", "id": [1], "method": "scheduler.queue.stats"},
    ],
    ids=[
        "number",
        "string",
        "null",
        "version-1.0",
        "no-version",
        "method-not-string",
        "no-method",
        "bool-id",
        "object-id",
        "array-id",
    ],
)
def test_invalid_request(tmp_path: Path, body: Any) -> None:
    async def test(wire: Wire) -> None:
        status, answer = await wire.post(body)
        assert status == 200
        _error(answer, INVALID_REQUEST, None)
        # Inside a batch, each invalid member gets its own error.
        status, answers = await wire.post([body, request("scheduler.queue.stats", {}, 9)])
        assert status == 200
        assert len(answers) == 2
        _error(next(a for a in answers if a["id"] is None), INVALID_REQUEST, None)
        assert next(a for a in answers if a["id"] == 9)["result"]["depth"] == 0

    on_server(tmp_path, test)


def test_empty_and_oversized_batches_are_invalid(tmp_path: Path) -> None:
    async def test(wire: Wire) -> None:
        status, answer = await wire.post([])
        assert status == 200
        _error(answer, INVALID_REQUEST, None)  # one error, not an array
        # Nothing of an oversized batch runs.
        too_many = [
            request(
                "scheduler.activities.submit",
                {"activities": [ACTIVITY | {"activity_id": f"b{i}"}]},
                i,
            )
            for i in range(BATCH_MAX + 1)
        ]
        status, answer = await wire.post(too_many)
        assert status == 200
        assert str(BATCH_MAX) in _error(answer, INVALID_REQUEST, None)["message"]
        stats = await wire.call("scheduler.queue.stats")
        assert stats["result"]["depth"] == 0
        # BATCH_MAX itself is accepted.
        status, answers = await wire.post(
            [request("scheduler.queue.stats", {}, i) for i in range(BATCH_MAX)]
        )
        assert status == 200
        assert sorted(a["id"] for a in answers) == list(range(BATCH_MAX))

    on_server(tmp_path, test)


def test_method_not_found(tmp_path: Path) -> None:
    async def test(wire: Wire) -> None:
        error = _error(await wire.call("scheduler.nope", {}, 5), METHOD_NOT_FOUND, 5)
        assert "scheduler.nope" in error["message"]

    on_server(tmp_path, test)


@pytest.mark.parametrize(
    ("method", "params", "fragment"),
    [
        ("scheduler.activities.get", {}, "missing required field `activity_id`"),
        ("scheduler.activities.get", {"activity_id": 5}, "`$.activity_id`"),
        ("scheduler.activities.get", {"activity_id": "a", "bogus": 1}, "unknown field `bogus`"),
        ("scheduler.activities.get", ["a1"], "by name"),
        ("scheduler.activities.get", "a1", "expected an object"),
        ("scheduler.leases.renew", {"activity_id": "a", "token": "1"}, "`$.token`"),
        (
            "scheduler.activities.submit",
            {"activities": [ACTIVITY | {"priority": "high"}]},
            "`$.activities[0].priority`",
        ),
        (
            "scheduler.workers.register",
            {"info": {"worker_id": "w", "capabilities": "gpu"}},
            "`$.info.capabilities`",
        ),
        ("scheduler.queue.stats", {"verbose": True}, "unknown field `verbose`"),
    ],
    ids=[
        "missing",
        "wrong-type",
        "unknown-field",
        "positional",
        "scalar",
        "str-for-int",
        "nested-path",
        "nested-struct",
        "no-params-method",
    ],
)
def test_invalid_params(tmp_path: Path, method: str, params: Any, fragment: str) -> None:
    async def test(wire: Wire) -> None:
        error = _error(await wire.call(method, params, 3), INVALID_PARAMS, 3)
        assert fragment in error["message"], error["message"]

    on_server(tmp_path, test)


def test_application_errors_carry_their_stable_code(tmp_path: Path) -> None:
    async def test(wire: Wire) -> None:
        error = _error(
            await wire.call("scheduler.activities.get", {"activity_id": "nope"}, 1), -32010, 1
        )
        assert error["data"] == {
            "code": "not_found",
            "message": error["message"],
            "fault": "caller",
            "retryable": False,
            "details": {"activity_id": "nope"},
        }
        await wire.call("scheduler.activities.submit", {"activities": [ACTIVITY]})
        other = {**ACTIVITY, "priority": 0}
        error = _error(
            await wire.call("scheduler.activities.submit", {"activities": [other]}, 2),
            -32011,
            2,
        )
        assert error["data"]["code"] == "already_exists"
        error = _error(
            await wire.call("scheduler.workers.poll", {"worker_id": "w", "wait_s": 99.0}, 3),
            -32001,
            3,
        )
        assert error["data"]["code"] == "invalid_argument"
        assert error["data"]["details"] == {"field": "wait_s"}

    on_server(tmp_path, test)


# ------------------------------------------------------------- discovery


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$ref`` followed into ``root`` (the OpenRPC document)."""
    while "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        schema = root["components"]["schemas"][name]
    return schema


def _params_object(method: dict[str, Any]) -> dict[str, Any]:
    """An OpenRPC method's by-name params as one object schema (what ``params`` must be)."""
    return {
        "type": "object",
        "properties": {p["name"]: p["schema"] for p in method["params"]},
        "required": [p["name"] for p in method["params"] if p.get("required")],
        "additionalProperties": False,
    }


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def _conforms(value: Any, schema: dict[str, Any], root: dict[str, Any]) -> bool:
    """A small JSON Schema check: types, required, properties, additionalProperties."""
    schema = _resolve(schema, root)
    if "anyOf" in schema:
        return any(_conforms(value, s, root) for s in schema["anyOf"])
    kind = schema.get("type")
    if kind is not None:
        if isinstance(value, bool) and kind in ("integer", "number"):
            return False
        if not isinstance(value, _JSON_TYPES[kind]):
            return False
    if isinstance(value, dict) and kind == "object":
        properties = schema.get("properties", {})
        if not set(schema.get("required", ())) <= set(value):
            return False
        if schema.get("additionalProperties") is False and not set(value) <= set(properties):
            return False
        return all(_conforms(v, properties[k], root) for k, v in value.items() if k in properties)
    if isinstance(value, list) and "items" in schema:
        return all(_conforms(v, schema["items"], root) for v in value)
    return True


def test_discover_lists_every_method_with_its_schema(tmp_path: Path) -> None:
    async def test(wire: Wire) -> None:
        # An OpenRPC document (tests/server/test_openrpc_discover.py checks its shape).
        document = (await wire.call("rpc.discover", {}))["result"]
        listing = document["methods"]
        names = [m["name"] for m in listing]
        assert names == sorted(wire.server.registry.methods)
        assert "rpc.discover" in names
        for entry in listing:
            assert {"name", "summary", "x-access", "params", "result"} <= set(entry)
            assert entry["summary"]
            assert entry["paramStructure"] == "by-name"
        schemas = {m["name"]: _params_object(m) for m in listing}
        # A real call's params conform to the advertised schema, and the call succeeds.
        good = {
            "activities": [
                ACTIVITY
                | {"priority": 1, "capabilities": ["gpu"], "payload": "WyJoaSJd", "deadline": None}
            ]
        }
        submit = schemas["scheduler.activities.submit"]
        assert _conforms(good, submit, document)
        assert (await wire.call("scheduler.activities.submit", good))["result"] == {
            "activity_ids": ["a1"]
        }
        cancel = schemas["scheduler.activities.cancel"]
        real = {"activity_id": "a1", "reason": "operator"}
        assert _conforms(real, cancel, document)
        assert (await wire.call("scheduler.activities.cancel", real))["result"] == {"ok": True}
        # ... and params the server refuses do not.
        for bad in ({}, {"activity_id": 1}, {"activity_id": "a1", "bogus": True}):
            assert not _conforms(bad, cancel, document)
            _error(await wire.call("scheduler.activities.cancel", bad), INVALID_PARAMS, 1)

    on_server(tmp_path, test)
