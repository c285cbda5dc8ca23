"""Artifacts and deployments over the Python API (``server.api``) and over JSON-RPC
(``App`` against a real in-process server): the same answers and refusals."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from wf.client.app import App
from wf.errors import AlreadyExists, Conflict, Forbidden, InvalidArgument, NotFound, UnknownPolicy
from wf.server.local import LocalStaticServer, build_local_static_workflow_server
from wf.server.rpc import Caller

R = TypeVar("R")

HELLO_PLAN: dict[str, Any] = {
    "input_schema": {
        "type": "object",
        "properties": {"greeting": {"type": "string"}, "times": {"type": "integer"}},
        "required": ["greeting"],
    },
    "nodes": [
        {
            "kind": "activity",
            "id": "hello",
            "activity_type": "format_text",
            "args": {"template": "{greeting} on a schedule", "greeting": {"$input": "greeting"}},
            "idempotent": True,
        }
    ],
    "output": {"result": {"$node": "hello", "path": "text"}},
}


def serve(tmp_path: Path, body: Callable[[LocalStaticServer, App], Awaitable[R]]) -> R:
    async def main() -> R:
        server = build_local_static_workflow_server(tmp_path / "store")
        async with server, App(server.url) as app:
            return await body(server, app)

    return asyncio.run(main())


def test_artifacts_over_python_and_wire(tmp_path: Path) -> None:
    async def body(server: LocalStaticServer, app: App) -> None:
        api = server.api
        first = await api.create_artifact_from_plan(
            artifact_id="scheduled_hello", version=1, plan=HELLO_PLAN
        )
        assert first.version == 1
        assert first.content_hash.startswith("sha256:")
        # Idempotent re-create, in process and over the wire: the stored artifact.
        assert await api.create_artifact_from_plan("scheduled_hello", 1, HELLO_PLAN) == first
        assert await app.create_artifact_from_plan("scheduled_hello", 1, HELLO_PLAN) == first
        # Other content under the same version: refused, nothing changed.
        other = {**HELLO_PLAN, "output": {}}
        for attempt in (
            api.create_artifact_from_plan("scheduled_hello", 1, other),
            app.create_artifact_from_plan("scheduled_hello", 1, other),
        ):
            with pytest.raises(AlreadyExists):
                await attempt
        assert await app.get_artifact("scheduled_hello", 1) == first
        second = await app.create_artifact_from_plan("scheduled_hello", 2, other)
        assert await api.get_artifact("scheduled_hello") == second
        assert (await app.list_artifacts("scheduled_hello")).artifacts == [first, second]
        assert (await api.list_artifacts()).artifacts == [first, second]
        with pytest.raises(NotFound):
            await app.get_artifact("nope")
        # Bad input is refused with details, over the wire too.
        with pytest.raises(InvalidArgument) as bad_id:
            await app.create_artifact_from_plan("Bad-Id", 1, HELLO_PLAN)
        assert bad_id.value.details["field"] == "artifact_id"
        with pytest.raises(InvalidArgument) as bad_version:
            await app.create_artifact_from_plan("x", 0, HELLO_PLAN)
        assert bad_version.value.details["field"] == "version"
        cyclic = {"nodes": [{"kind": "activity", "id": "a", "activity_type": "t", "needs": ["a"]}]}
        with pytest.raises(InvalidArgument) as cycle:
            await app.create_artifact_from_plan("x", 1, cyclic)
        assert cycle.value.details == {"node": "a", "field": "needs", "cycle": ["a", "a"]}
        assert (await app.list_artifacts("x")).artifacts == []

    serve(tmp_path, body)


def test_deployments_pin_versions_and_check_inputs(tmp_path: Path) -> None:
    async def body(server: LocalStaticServer, app: App) -> None:
        api = server.api
        await api.create_artifact_from_plan("scheduled_hello", 1, HELLO_PLAN)
        saved = await api.save_deployment(
            {
                "artifact_id": "scheduled_hello",
                "artifact_version": 1,
                "name": "default",
                "default_inputs": {"greeting": "hello"},
                "max_steps": 10,
                "run_deadline_s": 60.0,
            }
        )
        assert saved.deployment_id == "scheduled_hello.default"
        assert saved.revision == 1
        assert await app.get_deployment("scheduled_hello.default") == saved
        # The same settings again change nothing.
        again = await app.save_deployment(
            {
                "artifact_id": "scheduled_hello",
                "artifact_version": 1,
                "default_inputs": {"greeting": "hello"},
                "max_steps": 10,
                "run_deadline_s": 60.0,
            }
        )
        assert again == saved
        # Partial defaults are fine (runs supply the rest); wrong types are not.
        partial = await app.save_deployment(
            {
                "artifact_id": "scheduled_hello",
                "artifact_version": 1,
                "name": "partial",
                "default_inputs": {"times": 2},
            }
        )
        assert partial.default_inputs == {"times": 2}
        with pytest.raises(InvalidArgument) as wrong:
            await app.save_deployment(
                {
                    "artifact_id": "scheduled_hello",
                    "artifact_version": 1,
                    "default_inputs": {"greeting": 5},
                }
            )
        assert wrong.value.details["field"] == "default_inputs"
        assert "/greeting" in wrong.value.details["problems"][0]
        # A pinned version must exist; a new version moves nothing until saved.
        with pytest.raises(NotFound):
            await app.save_deployment({"artifact_id": "scheduled_hello", "artifact_version": 2})
        await app.create_artifact_from_plan("scheduled_hello", 2, HELLO_PLAN)
        assert (await app.get_deployment("scheduled_hello.default")).artifact_version == 1
        moved = await app.save_deployment(
            {"artifact_id": "scheduled_hello", "artifact_version": 2}, expected_revision=1
        )
        assert (moved.revision, moved.artifact_version) == (2, 2)
        assert moved.created_at == saved.created_at
        # Optimistic concurrency: a stale base revision is a conflict, nothing changes.
        with pytest.raises(Conflict) as stale:
            await app.save_deployment(
                {"artifact_id": "scheduled_hello", "artifact_version": 1}, expected_revision=1
            )
        assert stale.value.details["current_revision"] == 2
        with pytest.raises(Conflict):
            await api.save_deployment(
                {"artifact_id": "scheduled_hello", "artifact_version": 1}, expected_revision=1
            )
        assert await app.get_deployment("scheduled_hello.default") == moved
        # Malformed bodies.
        for bad, field in [
            ({"artifact_id": "scheduled_hello", "artifact_version": 1, "bogus": 1}, "bogus"),
            ({"artifact_id": "scheduled_hello", "artifact_version": 1, "name": "A.B"}, "name"),
            (
                {
                    "artifact_id": "scheduled_hello",
                    "artifact_version": 1,
                    "deployment_id": "other.default",
                },
                "deployment_id",
            ),
            (
                {"artifact_id": "scheduled_hello", "artifact_version": 1, "max_steps": 0},
                "max_steps",
            ),
            (
                {"artifact_id": "scheduled_hello", "artifact_version": 1, "run_deadline_s": -1.0},
                "run_deadline_s",
            ),
            ({"artifact_id": "scheduled_hello", "artifact_version": "1"}, "artifact_version"),
        ]:
            with pytest.raises(InvalidArgument) as refused:
                await app.save_deployment(bad)
            assert refused.value.details["field"] == field, bad
        with pytest.raises(UnknownPolicy):
            await app.save_deployment(
                {"artifact_id": "scheduled_hello", "artifact_version": 1, "policy": "nope"}
            )
        listed = (await app.list_deployments()).deployments
        assert [d.deployment_id for d in listed] == [
            "scheduled_hello.default",
            "scheduled_hello.partial",
        ]
        assert listed == (await api.list_deployments()).deployments

    serve(tmp_path, body)


def test_tenant_scoped_callers_see_only_their_deployments(tmp_path: Path) -> None:
    async def body(server: LocalStaticServer, app: App) -> None:
        wf = server.api.workflow
        acme = Caller(identity="acme-ops", role="operator", tenants=frozenset({"acme"}))
        await server.api.create_artifact_from_plan("hello", 1, HELLO_PLAN)
        await server.api.save_deployment({"artifact_id": "hello", "artifact_version": 1})
        mine = await wf.save_deployment(
            {"artifact_id": "hello", "artifact_version": 1, "name": "acme_main", "tenant": "acme"},
            caller=acme,
        )
        with pytest.raises(Forbidden):
            await wf.save_deployment(
                {"artifact_id": "hello", "artifact_version": 1, "name": "x"}, caller=acme
            )
        with pytest.raises(NotFound):
            await wf.get_deployment("hello.default", caller=acme)
        assert (await wf.list_deployments(caller=acme)).deployments == [mine]

    serve(tmp_path, body)
