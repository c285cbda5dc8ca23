"""``scheduler.leases.complete`` / ``scheduler.leases.fail`` with ``poll``: the report
and the worker's next poll in one commit (issue 16).

Each test drives a real :class:`~wf.server.scheduler_api.SchedulerAPI` on a real
:class:`~wf.node.SchedulerNode` over SQLite on a virtual clock, and counts the
store's commits around the call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import msgspec
import pytest

from wf.client.app import App
from wf.errors import InvalidArgument
from wf.node import SchedulerNode
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.model import Activity, WorkerInfo
from wf.scheduler.outputs import LeaseGranted
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.server.scheduler_api import SchedulerAPI
from wf.store.sqlite import SQLiteStore
from wf.testing.clock import VirtualClock
from wf.wire.scheduler_methods import (
    COMPLETE_ACTIVITY,
    CompleteParams,
    FailParams,
    ReportPoll,
    ReportResult,
)

ADMIN = ANONYMOUS_ADMIN
R = TypeVar("R")


def run(main: Callable[[], Awaitable[R]]) -> R:
    """Run one async test body on a fresh loop."""

    async def wrapper() -> R:
        return await main()

    return asyncio.run(wrapper())


async def started_api(root: Path) -> SchedulerAPI:
    """An API over a fresh SQLite node on a virtual clock (no background ticks)."""
    node = SchedulerNode(SQLiteStore(root), SchedulerConfig(lease_ttl_s=30.0), clock=VirtualClock())
    await node.start(background=False)
    return SchedulerAPI(node)


async def _setup(api: SchedulerAPI, ids: list[str], slots: int = 1) -> LeaseGranted:
    """Register ``w1`` with ``slots`` slots, submit ``ids``, lease and start the first."""
    await api.register_worker(
        WorkerInfo(worker_id="w1", max_concurrency=slots, heartbeat_interval_s=3600.0), ADMIN
    )
    await api.submit_activities([Activity(activity_id=i, activity_type="t") for i in ids], ADMIN)
    (grant,) = (await api.poll("w1", 1, 0.0, ADMIN, start=1)).leases
    assert grant.started
    return grant


def _commits(api: SchedulerAPI) -> int:
    store = api.node.store
    assert isinstance(store, SQLiteStore)
    return store.commits


async def _transitions(api: SchedulerAPI, activity_id: str) -> list[tuple[str, float]]:
    page = await api.activity_history(activity_id, ADMIN)
    return [(t.to_state.value, t.at) for t in page.transitions]


def test_a_completion_with_poll_answers_the_next_grant_from_the_same_commit(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        api = await started_api(tmp_path / "s")
        try:
            first = await _setup(api, ["a1", "a2"])
            before = _commits(api)
            answer = await api.complete_activity(
                "a1",
                first.lease.token,
                b'"done"',
                ADMIN,
                poll=ReportPoll(worker_id="w1", max_items=1, start=1),
            )
            assert _commits(api) == before + 1, "the completion and the grant: one commit"
            assert answer.ok
            assert answer.leases is not None
            (grant,) = answer.leases
            assert grant.lease.activity_id == "a2"
            assert grant.lease.worker_id == "w1"
            assert grant.started, "into the slot the completion freed: started on grant"
            assert api.reads.worker_demand("w1") == 0, "no demand left behind"
            done = await _transitions(api, "a1")
            granted = await _transitions(api, "a2")
            assert done[-1][0] == "completed"
            # Decided at one instant, stored by one commit.
            assert [s for s, _ in granted][-2:] == ["leased", "executing"]
            assert granted[-1][1] == done[-1][1]
        finally:
            await api.node.stop()

    run(main)


def test_a_failure_with_poll_answers_the_next_grant_too(tmp_path: Path) -> None:
    async def main() -> None:
        api = await started_api(tmp_path / "s")
        try:
            first = await _setup(api, ["a1", "a2"])
            before = _commits(api)
            answer = await api.fail_activity(
                "a1",
                first.lease.token,
                "Boom",
                "no",
                False,
                ADMIN,
                poll=ReportPoll(worker_id="w1"),
            )
            assert _commits(api) == before + 1
            assert answer.leases is not None
            (grant,) = answer.leases
            assert grant.lease.activity_id == "a2"
            assert not grant.started
            assert (await _transitions(api, "a1"))[-1][0] == "failed"
        finally:
            await api.node.stop()

    run(main)


def test_an_empty_queue_answers_no_lease_and_withdraws_the_demand(tmp_path: Path) -> None:
    async def main() -> None:
        api = await started_api(tmp_path / "s")
        try:
            first = await _setup(api, ["a1"])
            answer = await api.complete_activity(
                "a1", first.lease.token, b"", ADMIN, poll=ReportPoll(worker_id="w1", max_items=1)
            )
            assert answer.leases == []
            assert answer.revoked == []
            assert api.reads.worker_demand("w1") == 0
            # Demand withdrawn: later work waits for a poll instead of going to w1 unasked.
            await api.submit_activities([Activity(activity_id="late", activity_type="t")], ADMIN)
            assert api.reads.lease_holder("late") is None
        finally:
            await api.node.stop()

    run(main)


def test_a_revocation_waiting_for_the_worker_comes_with_the_answer(tmp_path: Path) -> None:
    async def main() -> None:
        api = await started_api(tmp_path / "s")
        try:
            first = await _setup(api, ["a1", "a2"], slots=2)
            (second,) = (await api.poll("w1", 1, 0.0, ADMIN)).leases
            await api.cancel_activity(second.lease.activity_id, "no longer wanted", ADMIN)
            answer = await api.complete_activity(
                "a1", first.lease.token, b"", ADMIN, poll=ReportPoll(worker_id="w1")
            )
            assert [r.token for r in answer.revoked] == [second.lease.token]
            # Delivered once: the next poll does not repeat it.
            assert (await api.poll("w1", 1, 0.0, ADMIN)).revoked == []
        finally:
            await api.node.stop()

    run(main)


def test_a_poll_for_another_worker_is_refused_and_nothing_is_reported(tmp_path: Path) -> None:
    async def main() -> None:
        api = await started_api(tmp_path / "s")
        try:
            first = await _setup(api, ["a1", "a2"])
            await api.register_worker(
                WorkerInfo(worker_id="w2", max_concurrency=1, heartbeat_interval_s=3600.0), ADMIN
            )
            before = _commits(api)
            with pytest.raises(InvalidArgument) as refused:
                await api.complete_activity(
                    "a1", first.lease.token, b"", ADMIN, poll=ReportPoll(worker_id="w2")
                )
            assert refused.value.details["field"] == "poll.worker_id"
            assert _commits(api) == before
            assert api.reads.lease_holder("a1") == "w1", "the completion was not applied"
            assert api.reads.lease_holder("a2") is None, "nothing was granted to w2"
        finally:
            await api.node.stop()

    run(main)


def test_poll_bounds_are_checked_before_anything_is_reported(tmp_path: Path) -> None:
    async def main() -> None:
        api = await started_api(tmp_path / "s")
        try:
            first = await _setup(api, ["a1"])
            items_max = api.node.config.poll_items_max
            for poll, field in (
                (ReportPoll(worker_id="w1", max_items=items_max + 1), "poll.max_items"),
                (ReportPoll(worker_id="w1", max_items=1, start=2), "poll.start"),
            ):
                with pytest.raises(InvalidArgument) as refused:
                    await api.complete_activity("a1", first.lease.token, b"", ADMIN, poll=poll)
                assert refused.value.details["field"] == field
            assert api.reads.lease_holder("a1") == "w1"
            with pytest.raises(msgspec.ValidationError):
                msgspec.convert(
                    {"activity_id": "a1", "token": 1, "poll": {"worker_id": "w1", "max_items": 0}},
                    CompleteParams,
                )
        finally:
            await api.node.stop()

    run(main)


def test_a_long_poll_under_way_keeps_its_demand_and_its_grants(tmp_path: Path) -> None:
    async def main() -> None:
        api = await started_api(tmp_path / "s")
        try:
            first = await _setup(api, ["a1"], slots=2)
            waiting = asyncio.create_task(api.poll("w1", 1, 10.0, ADMIN))
            for _ in range(1000):  # until its demand is in the core (a few loop turns)
                if api.reads.worker_demand("w1"):
                    break
                await asyncio.sleep(0)
            assert api.reads.worker_demand("w1") == 1
            answer = await api.complete_activity(
                "a1", first.lease.token, b"", ADMIN, poll=ReportPoll(worker_id="w1")
            )
            assert answer.leases == [], "left to the long poll"
            assert api.reads.worker_demand("w1") == 1, "its demand untouched"
            await api.submit_activities([Activity(activity_id="a2", activity_type="t")], ADMIN)
            polled = await asyncio.wait_for(waiting, 5.0)
            assert [g.lease.activity_id for g in polled.leases] == ["a2"]
        finally:
            await api.node.stop()

    run(main)


def test_a_report_without_poll_is_sent_and_answered_as_before(tmp_path: Path) -> None:
    async def main() -> None:
        api = await started_api(tmp_path / "s")
        try:
            first = await _setup(api, ["a1", "a2"])
            answer = await api.complete_activity("a1", first.lease.token, b"", ADMIN)
            assert answer == ReportResult(ok=True)
            assert msgspec.json.encode(answer) == b'{"ok":true}'
            assert COMPLETE_ACTIVITY.decode({"ok": True}) == ReportResult(ok=True)
            assert api.reads.lease_holder("a2") is None, "no poll, no grant"
        finally:
            await api.node.stop()

    run(main)
    # Without poll (and other defaults) the parameters read as before the field existed,
    # so a server that predates it takes them.
    wire = msgspec.to_builtins(CompleteParams(activity_id="a", token=3))
    assert wire == {"activity_id": "a", "token": 3}
    failed = msgspec.to_builtins(FailParams(activity_id="a", token=3, message="m"))
    assert "poll" not in failed


def test_the_app_client_sends_poll_and_reads_the_grants(tmp_path: Path) -> None:
    async def main() -> None:
        config = ServerConfig(
            server=ServerSection(
                port=0, store=StoreConfig(root=str(tmp_path / "store"), durability="process")
            )
        )
        server = WfServer(config)
        await server.start()
        try:
            async with App(f"http://127.0.0.1:{server.port}") as app:
                info = WorkerInfo(worker_id="w1", max_concurrency=1, heartbeat_interval_s=60.0)
                await app.register_worker(info)
                batch = [Activity(activity_id=i, activity_type="t") for i in ("a1", "a2")]
                await app.submit_activities(batch)
                (first,) = (await app.poll("w1", max_items=1, wait_s=0.0, start=1)).leases
                answer = await app.complete_activity(
                    "a1", first.lease.token, poll=ReportPoll(worker_id="w1", start=1)
                )
                assert isinstance(answer, ReportResult)
                assert [g.lease.activity_id for g in answer.leases or ()] == ["a2"]
                (second,) = answer.leases or ()
                assert second.started
                plain = await app.complete_activity("a2", second.lease.token)
                assert plain == ReportResult(ok=True)
        finally:
            await server.stop()

    asyncio.run(main())
