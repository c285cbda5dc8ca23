"""Runs over JSON-RPC (``App`` against a started local server): the same answers as
the Python API, typed errors, and tenant isolation between scoped credentials."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from test_runs_api import (
    ASK_PLAN,
    ATTEMPTS,
    CHAIN_PLAN,
    FAST_RETRY,
    REVIEW_PLAN,
    TEST_ACTIVITIES,
    retry_plan,
    wait_for_status,
)

from wf.client.app import App
from wf.errors import Conflict, InvalidArgument, NotFound
from wf.server.app import WfServer
from wf.server.auth import CredentialConfig, hash_token
from wf.server.config import SecurityConfig, ServerConfig, ServerSection, StoreConfig
from wf.server.local import build_local_static_workflow_server


def test_runs_over_the_wire_match_the_python_api(tmp_path: Path) -> None:
    async def main() -> None:
        server = build_local_static_workflow_server(tmp_path / "store")
        async with server, App(server.url) as app:
            api = server.api
            await app.create_artifact_from_plan("review", 1, REVIEW_PLAN)
            deployment = (
                await app.save_deployment({"artifact_id": "review", "artifact_version": 1})
            ).deployment_id

            started = await app.start_run(deployment, {"title": "Wire"})
            run_id = started["run_id"]
            assert run_id == "run-000001"
            assert started["inputs"] == {"title": "Wire"}
            waiting = await wait_for_status(lambda: app.inspect_run(run_id), {"interrupted"})
            assert waiting == await api.inspect_run(run_id)
            assert [w["node"] for w in waiting["awaiting"]] == ["approve"]
            assert waiting["checkpoint"]["completed"] == {"draft": {"text": "draft: Wire"}}

            # Typed refusals over the wire.
            with pytest.raises(InvalidArgument) as bad_answer:
                await app.resume_run(run_id, {"approved": "yes", "note": "x"})
            assert bad_answer.value.details["field"] == "answer"
            assert bad_answer.value.details["node"] == "approve"
            rejected = await app.inspect_run(run_id)
            assert rejected["status"] == "interrupted"
            assert [m["state"] for m in rejected["resumes"]] == ["rejected"]
            with pytest.raises(InvalidArgument) as bad_inputs:
                await app.start_run(deployment, {"title": 7})
            assert bad_inputs.value.details["field"] == "inputs"
            with pytest.raises(NotFound):
                await app.start_run("review.nope")
            for call in (
                app.inspect_run("run-999999"),
                app.resume_run("run-999999", {"approved": True, "note": "x"}),
                app.cancel_run("run-999999"),
            ):
                with pytest.raises(NotFound) as unknown:
                    await call
                assert unknown.value.details["run_id"] == "run-999999"
            with pytest.raises(InvalidArgument):
                await app.list_runs(limit=0)
            with pytest.raises(InvalidArgument):
                await app.list_runs(cursor="nope")

            # A second run, to list and to cancel.
            other = await app.start_run(deployment, {"title": "Other"})
            await wait_for_status(lambda: app.inspect_run(other["run_id"]), {"interrupted"})
            listed = await app.list_runs()
            assert listed == await api.list_runs()
            assert [r["run_id"] for r in listed["runs"]] == [run_id, other["run_id"]]
            page = await app.list_runs(limit=1)
            assert [r["run_id"] for r in page["runs"]] == [run_id]
            rest = await app.list_runs(limit=1, cursor=page["next_cursor"])
            assert [r["run_id"] for r in rest["runs"]] == [other["run_id"]]
            assert rest["next_cursor"] is None

            resumed = await app.resume_run(run_id, {"approved": True, "note": "wire"}, "approve")
            assert resumed["status"] in {"running", "completed"}
            done = await wait_for_status(lambda: app.inspect_run(run_id), {"completed", "failed"})
            assert done["status"] == "completed", done
            assert done["output"] == {"published": "draft: Wire (wire)", "approved": True}
            assert [m["state"] for m in done["resumes"]] == ["rejected", "applied"]
            assert done == await api.inspect_run(run_id)
            with pytest.raises(Conflict):
                await app.resume_run(run_id, {"approved": True, "note": "again"})

            cancelled = await app.cancel_run(other["run_id"], "not wanted")
            assert cancelled["status"] == "cancelled"
            assert cancelled["error"] == {"code": "cancelled", "message": "not wanted"}
            assert cancelled == await api.inspect_run(other["run_id"])
            with pytest.raises(Conflict):
                await app.cancel_run(other["run_id"])
            by_status = await app.list_runs(status="cancelled")
            assert [r["run_id"] for r in by_status["runs"]] == [other["run_id"]]
            assert by_status == await api.list_runs(status="cancelled")
            by_deployment = await app.list_runs(deployment_id=deployment, status="completed")
            assert [r["run_id"] for r in by_deployment["runs"]] == [run_id]

    asyncio.run(main())


# --------------------------------------------------------------- tenants

TOKENS = {"admin": "tok-runs-admin-1", "acme": "tok-runs-acme-2", "globex": "tok-runs-globex-3"}
CREDENTIALS = [
    CredentialConfig(name="admin", role="admin", token_sha256=hash_token(TOKENS["admin"])),
    CredentialConfig(
        name="acme-ops",
        role="operator",
        token_sha256=hash_token(TOKENS["acme"]),
        tenants=frozenset({"acme"}),
    ),
    CredentialConfig(
        name="globex-ops",
        role="operator",
        token_sha256=hash_token(TOKENS["globex"]),
        tenants=frozenset({"globex"}),
    ),
]


@contextlib.asynccontextmanager
async def secured(root: Path) -> AsyncIterator[str]:
    """A server that requires credentials (no in-process workers: the plan needs none)."""
    server = WfServer(
        ServerConfig(
            server=ServerSection(
                host="127.0.0.1",
                port=0,
                store=StoreConfig(root=str(root), durability="process"),
                security=SecurityConfig(credentials=CREDENTIALS),
            )
        )
    )
    await server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.stop()


def test_a_retried_failure_and_max_steps_exhaustion_over_the_wire(tmp_path: Path) -> None:
    async def main() -> None:
        ATTEMPTS.clear()
        server = build_local_static_workflow_server(tmp_path / "store", activities=TEST_ACTIVITIES)
        async with server, App(server.url) as app:
            await app.create_artifact_from_plan(
                "retry", 1, retry_plan("flaky", {**FAST_RETRY, "max_attempts": 3}, fails=2)
            )
            await app.save_deployment({"artifact_id": "retry", "artifact_version": 1})
            run_id = (await app.start_run("retry.default"))["run_id"]
            done = await wait_for_status(lambda: app.inspect_run(run_id), {"completed", "failed"})
            assert done["status"] == "completed"
            assert done["output"] == {"result": {"succeeded_on": 3}}
            (node,) = done["trace"]
            outcomes = [a["outcome"] for a in node["attempts"]]
            assert outcomes == ["failed, retried", "failed, retried", "completed"]
            assert "TransientProblem" in node["attempts"][0]["error"]

            await app.create_artifact_from_plan("chain", 1, CHAIN_PLAN)
            await app.save_deployment(
                {"artifact_id": "chain", "artifact_version": 1, "max_steps": 1}
            )
            chain_id = (await app.start_run("chain.default"))["run_id"]
            spent = await wait_for_status(
                lambda: app.inspect_run(chain_id), {"completed", "failed", "exhausted"}
            )
            assert spent["status"] == "exhausted"
            assert spent["error"]["code"] == "max_steps_exhausted"
            assert spent["steps_used"] == 1
            assert spent == await server.api.inspect_run(chain_id)
        ATTEMPTS.clear()

    asyncio.run(main())


def test_tenant_scoped_credentials_see_only_their_runs(tmp_path: Path) -> None:
    async def main() -> None:
        async with (
            secured(tmp_path / "store") as url,
            App(url, token=TOKENS["admin"]) as admin,
            App(url, token=TOKENS["acme"]) as acme,
            App(url, token=TOKENS["globex"]) as globex,
        ):
            await admin.create_artifact_from_plan("ask", 1, ASK_PLAN)
            for tenant in ("acme", "globex"):
                await admin.save_deployment(
                    {"artifact_id": "ask", "artifact_version": 1, "name": tenant, "tenant": tenant}
                )
            mine = await acme.start_run("ask.acme")
            run_id = mine["run_id"]
            assert (mine["tenant"], mine["status"]) == ("acme", "interrupted")

            # Another tenant's run answers like an absent one, for every call.
            for call in (
                globex.inspect_run(run_id),
                globex.resume_run(run_id, {"go": True}),
                globex.cancel_run(run_id),
                globex.start_run("ask.acme"),
            ):
                with pytest.raises(NotFound):
                    await call
            assert await globex.list_runs() == {"runs": [], "next_cursor": None}
            assert (await globex.list_runs(deployment_id="ask.acme"))["runs"] == []

            theirs = await globex.start_run("ask.globex")
            assert (await globex.inspect_run(theirs["run_id"]))["tenant"] == "globex"
            with pytest.raises(NotFound):
                await acme.inspect_run(theirs["run_id"])

            def ids(page: dict[str, Any]) -> list[str]:
                return [r["run_id"] for r in page["runs"]]

            assert ids(await acme.list_runs()) == [run_id]
            assert ids(await globex.list_runs()) == [theirs["run_id"]]
            assert ids(await admin.list_runs()) == [run_id, theirs["run_id"]]
            # The refused calls changed nothing: the owner can still answer its run.
            untouched = await acme.inspect_run(run_id)
            assert (untouched["status"], untouched["resumes"]) == ("interrupted", [])
            resumed = await acme.resume_run(run_id, {"go": True})
            assert resumed["status"] == "completed"
            assert resumed["output"] == {"answer": {"go": True}}
            assert await admin.inspect_run(run_id) == resumed

    asyncio.run(main())
