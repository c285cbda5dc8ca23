"""``rpc.discover`` answers an OpenRPC document that generic tools can use.

The document is checked against the shape the OpenRPC 1.3 meta-schema gives
(written out below from the specification: required members, content
descriptors, reference objects, error objects, ``x-`` extensions only), every
published schema is a valid JSON Schema, and the schemas mean what the
server does: real parameters validate against them (a plan against the
published ``Plan``), bad ones do not, and real answers validate against the
published results.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from wf.client.app import App
from wf.errors import ALL_ERRORS
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig

_REF = {
    "type": "object",
    "required": ["$ref"],
    "additionalProperties": False,
    "properties": {"$ref": {"type": "string"}},
}
_X = {"^x-": {}}
_CONTENT_DESCRIPTOR = {
    "type": "object",
    "required": ["name", "schema"],
    "additionalProperties": False,
    "patternProperties": _X,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "summary": {"type": "string"},
        "description": {"type": "string"},
        "schema": {"type": ["object", "boolean"]},
        "required": {"type": "boolean"},
        "deprecated": {"type": "boolean"},
    },
}
_ERROR = {
    "type": "object",
    "required": ["code", "message"],
    "additionalProperties": False,
    "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "data": {}},
}
OPENRPC_SHAPE: dict[str, Any] = {
    "type": "object",
    "required": ["openrpc", "info", "methods"],
    "additionalProperties": False,
    "patternProperties": _X,
    "properties": {
        "openrpc": {"type": "string", "pattern": r"^1\.[0-9]+\.[0-9]+$"},
        "info": {
            "type": "object",
            "required": ["title", "version"],
            "additionalProperties": False,
            "patternProperties": _X,
            "properties": {
                "title": {"type": "string"},
                "description": {"type": "string"},
                "termsOfService": {"type": "string"},
                "version": {"type": "string"},
                "contact": {"type": "object"},
                "license": {"type": "object"},
            },
        },
        "servers": {"type": "array"},
        "methods": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "params", "result"],
                "additionalProperties": False,
                "patternProperties": _X,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "summary": {"type": "string"},
                    "description": {"type": "string"},
                    "tags": {"type": "array"},
                    "paramStructure": {"enum": ["by-position", "by-name", "either"]},
                    "params": {"type": "array", "items": {"oneOf": [_CONTENT_DESCRIPTOR, _REF]}},
                    "result": {"oneOf": [_CONTENT_DESCRIPTOR, _REF]},
                    "errors": {"type": "array", "items": {"oneOf": [_ERROR, _REF]}},
                    "links": {"type": "array"},
                    "examples": {"type": "array"},
                    "deprecated": {"type": "boolean"},
                },
            },
        },
        "components": {
            "type": "object",
            "properties": {
                "schemas": {"type": "object", "additionalProperties": {"type": "object"}},
                "errors": {"type": "object", "additionalProperties": _ERROR},
                "contentDescriptors": {
                    "type": "object",
                    "additionalProperties": _CONTENT_DESCRIPTOR,
                },
                "links": {"type": "object"},
                "examples": {"type": "object"},
                "examplePairings": {"type": "object"},
                "tags": {"type": "object"},
            },
        },
    },
}
"""The OpenRPC 1.3 document's shape (after the spec's meta-schema)."""

PLAN = {
    "nodes": [
        {"kind": "activity", "id": "a", "activity_type": "upper", "args": {"text": "x"}},
        {"kind": "timer", "id": "t", "delay": {"kind": "relative", "seconds": 1}, "needs": ["a"]},
        {"kind": "interrupt", "id": "i", "prompt": "ok?", "needs": ["t"]},
    ],
    "output": {"out": {"$node": "a", "path": "text"}},
}


@contextlib.asynccontextmanager
async def serving(tmp: Path) -> AsyncIterator[WfServer]:
    store = StoreConfig(root=str(tmp / "store"), durability="process")
    server = WfServer(ServerConfig(server=ServerSection(port=0, store=store)), schedules=True)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def _document(tmp: Path) -> tuple[dict[str, Any], set[str]]:
    async def main() -> tuple[dict[str, Any], set[str]]:
        async with serving(tmp) as server, App(f"http://127.0.0.1:{server.port}") as app:
            return await app.discover(), set(server.registry.methods)

    return asyncio.run(main())


@pytest.fixture(scope="module")
def discovered(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], set[str]]:
    return _document(tmp_path_factory.mktemp("openrpc"))


def _validator(document: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Validator:
    """A validator for ``schema`` whose ``#/components/...`` refs resolve in ``document``."""
    root = Resource(contents=document, specification=DRAFT202012)
    registry: Registry[Any] = Registry().with_resource("urn:wf:openrpc", root)
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _method(document: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [m for m in document["methods"] if m["name"] == name]
    return found


def _params_schema(document: dict[str, Any], name: str) -> dict[str, Any]:
    """The by-name parameters of ``name`` as one object schema, refs pointing into the document."""
    method = _method(document, name)
    return {
        "type": "object",
        "properties": {p["name"]: _rooted(p["schema"]) for p in method["params"]},
        "required": [p["name"] for p in method["params"] if p.get("required")],
        "additionalProperties": False,
    }


def _rooted(schema: Any) -> Any:
    """``schema`` with its local ``#/components`` refs made absolute (into the document)."""
    if isinstance(schema, dict):
        return {
            k: ("urn:wf:openrpc" + v if k == "$ref" and v.startswith("#/") else _rooted(v))
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_rooted(v) for v in schema]
    return schema


def test_the_document_has_the_openrpc_shape(discovered: tuple[dict[str, Any], set[str]]) -> None:
    document, served = discovered
    jsonschema.Draft202012Validator(OPENRPC_SHAPE).validate(document)
    assert document["openrpc"].startswith("1.")
    assert document["info"]["title"] == "wf"
    names = [m["name"] for m in document["methods"]]
    assert names == sorted(served)
    assert "rpc.discover" in names
    for method in document["methods"]:
        assert method["paramStructure"] == "by-name"
        assert method["summary"]
        assert method["x-access"] in ("worker", "read", "operate", "admin")
        for ref in method["errors"]:
            assert (
                ref["$ref"].removeprefix("#/components/errors/") in document["components"]["errors"]
            )


def test_every_published_schema_is_a_json_schema_and_every_ref_resolves(
    discovered: tuple[dict[str, Any], set[str]],
) -> None:
    document, _ = discovered
    components = document["components"]["schemas"]
    refs: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("$ref"), str):
                refs.append(value["$ref"])
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for schema in components.values():
        jsonschema.Draft202012Validator.check_schema(schema)
    for method in document["methods"]:
        for descriptor in [*method["params"], method["result"]]:
            jsonschema.Draft202012Validator.check_schema(descriptor["schema"])
        walk(method)
    walk(components)
    for ref in refs:
        kind, _, name = ref.removeprefix("#/components/").partition("/")
        assert name in document["components"][kind], ref


def test_the_plan_schema_is_published_and_means_what_the_server_accepts(
    discovered: tuple[dict[str, Any], set[str]],
) -> None:
    document, _ = discovered
    create = _method(document, "workflow.artifacts.create")
    plan = next(p for p in create["params"] if p["name"] == "plan")
    assert plan["schema"] == {"$ref": "#/components/schemas/Plan"}
    assert plan["required"] is True
    check = _validator(document, _params_schema(document, "workflow.artifacts.create"))
    check.validate({"artifact_id": "hello", "version": 1, "plan": PLAN})
    for bad in (
        {"artifact_id": "hello", "version": 0, "plan": PLAN},
        {"artifact_id": "hello", "version": 1, "plan": {"nodes": [{"kind": "bogus", "id": "x"}]}},
        {"artifact_id": "hello", "version": 1, "plan": PLAN, "extra": 1},
        {"artifact_id": "hello", "version": 1},
    ):
        assert not check.is_valid(bad), bad
    body = next(
        p for p in _method(document, "workflow.deployments.save")["params"] if p["name"] == "body"
    )
    assert body["schema"] == {"$ref": "#/components/schemas/DeploymentSpec"}


def test_results_and_errors_describe_the_wire(
    discovered: tuple[dict[str, Any], set[str]], tmp_path: Path
) -> None:
    document, _ = discovered
    errors = document["components"]["errors"]
    for cls in ALL_ERRORS:
        assert errors[cls.code]["code"] == cls.rpc_code
        assert errors[cls.code]["data"]["code"] == cls.code
    assert errors["invalid_params"]["code"] == -32602

    async def main() -> None:
        async with serving(tmp_path) as server, App(f"http://127.0.0.1:{server.port}") as app:
            answers = {
                "workflow.artifacts.create": await app.rpc.call(
                    "workflow.artifacts.create", {"artifact_id": "h", "version": 1, "plan": PLAN}
                ),
                "scheduler.queue.stats": await app.rpc.call("scheduler.queue.stats", {}),
                "workflow.runs.list": await app.rpc.call("workflow.runs.list", {}),
            }
        for name, answer in answers.items():
            schema = _rooted(_method(document, name)["result"]["schema"])
            _validator(document, schema).validate(answer)

    asyncio.run(main())
    start = _method(document, "scheduler.leases.start")["result"]["schema"]
    assert start == {"type": "object", "properties": {"ok": {"const": True}}, "required": ["ok"]}
    # A report answers {"ok": true}, and with a poll the leases it took (ReportResult).
    complete = _method(document, "scheduler.leases.complete")["result"]["schema"]
    assert complete == {"$ref": "#/components/schemas/ReportResult"}
    report = document["components"]["schemas"]["ReportResult"]
    assert report["required"] == ["ok"]
    assert {"ok", "leases", "revoked"} <= set(report["properties"])
