"""Issue 13, item 8: one tenant cannot learn about another by choosing its ids.

On main at 156d501 a tenant-scoped caller creating an activity or a schedule
with another tenant's id got ``already_exists``, and saving another tenant's
deployment id got ``forbidden`` naming that tenant. wf now gives every tenant
a namespace (:mod:`wf.tenancy`): a tenant-scoped caller chooses ids that
begin with its tenant, and anything else is refused before any lookup. Each
test compares the answer for another tenant's existing id with the answer
for an id nobody holds: they must be identical (class, code, message,
details), and never name the other tenant.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from wf.errors import AlreadyExists, WfError
from wf.scheduler.model import Activity
from wf.server.local import LocalStaticServer, build_local_static_workflow_server
from wf.server.rpc import ANONYMOUS_ADMIN, Caller

ACME = Caller(identity="acme-ops", role="operator", tenants=frozenset({"acme"}))
PLAN: dict[str, Any] = {
    "nodes": [{"kind": "activity", "id": "one", "activity_type": "noop", "idempotent": True}],
    "output": {},
}


def serve(tmp_path: Path, body: Callable[[LocalStaticServer], Awaitable[None]]) -> None:
    async def main() -> None:
        server = build_local_static_workflow_server(
            tmp_path / "store", activities=[], schedules=True, durability="process"
        )
        async with server:
            await body(server)

    asyncio.run(main())


async def refusal(call: Awaitable[Any]) -> tuple[type[WfError], str, str, dict[str, Any]]:
    """The error ``call`` raises, as everything a caller could compare."""
    with pytest.raises(WfError) as caught:
        await call
    error = caught.value
    assert "globex" not in error.message
    assert "globex" not in repr(error.details)
    return type(error), error.code, error.message, error.details


def test_another_tenants_activity_id_answers_exactly_like_a_free_one(tmp_path: Path) -> None:
    async def body(server: LocalStaticServer) -> None:
        scheduler = server.server.scheduler
        held = Activity(activity_id="job-1", activity_type="noop", tenant="globex")
        await scheduler.submit_activities([held], ANONYMOUS_ADMIN)

        def mine(activity_id: str, **fields: Any) -> list[Activity]:
            return [
                Activity(activity_id=activity_id, activity_type="noop", tenant="acme", **fields)
            ]

        taken = await refusal(scheduler.submit_activities(mine("job-1"), ACME))
        free = await refusal(scheduler.submit_activities(mine("job-2"), ACME))
        assert taken == free
        # Ordering keys are namespaced too: another tenant's key cannot hold this one's work.
        assert await refusal(
            scheduler.submit_activities(mine("acme.job-3", ordering_key="k"), ACME)
        ) == await refusal(scheduler.submit_activities(mine("acme.job-3", ordering_key="z"), ACME))
        # Inside its namespace the tenant creates freely, and only hears of its own ids.
        assert await scheduler.submit_activities(mine("acme.job-1"), ACME) == ["acme.job-1"]
        # The same submission again is a retry (answered with the id); other content
        # under the id is refused.
        assert await scheduler.submit_activities(mine("acme.job-1"), ACME) == ["acme.job-1"]
        with pytest.raises(AlreadyExists):
            await scheduler.submit_activities(mine("acme.job-1", priority=0), ACME)

    serve(tmp_path, body)


async def _deployments(server: LocalStaticServer) -> None:
    api = server.server.workflow
    await api.create_artifact_from_plan("report", 1, PLAN, caller=ANONYMOUS_ADMIN)
    for tenant, name in (("globex", "daily"), ("acme", "acme_daily")):
        await api.save_deployment(
            {"artifact_id": "report", "artifact_version": 1, "name": name, "tenant": tenant},
            caller=ANONYMOUS_ADMIN,
        )


def test_another_tenants_deployment_id_answers_exactly_like_a_free_one(tmp_path: Path) -> None:
    async def body(server: LocalStaticServer) -> None:
        await _deployments(server)
        api = server.server.workflow

        def save(name: str) -> Awaitable[Any]:
            body = {"artifact_id": "report", "artifact_version": 1, "name": name, "tenant": "acme"}
            return api.save_deployment(body, caller=ACME)

        assert await refusal(save("daily")) == await refusal(save("weekly"))
        saved = await save("acme_weekly")
        assert saved.deployment_id == "report.acme_weekly"

    serve(tmp_path, body)


def test_another_tenants_schedule_id_answers_exactly_like_a_free_one(tmp_path: Path) -> None:
    async def body(server: LocalStaticServer) -> None:
        await _deployments(server)
        schedules = server.server.schedules
        assert schedules is not None
        trigger = {"kind": "oneshot", "at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}
        await schedules.create_schedule("nightly", "report.daily", trigger, caller=ANONYMOUS_ADMIN)

        def create(schedule_id: str) -> Awaitable[Any]:
            return schedules.create_schedule(schedule_id, "report.acme_daily", trigger, caller=ACME)

        assert await refusal(create("nightly")) == await refusal(create("weekly"))
        created = await create("acme.nightly")
        assert created["schedule_id"] == "acme.nightly"
        with pytest.raises(AlreadyExists):
            await create("acme.nightly")

    serve(tmp_path, body)
