"""Races in the worker protocol (issue 13 item 5): a call whose commit is still
pending while another call changes the same lease or worker answers a typed
error or succeeds, never an internal error.

Each test drives a real :class:`~wf.server.scheduler_api.SchedulerAPI` on a
real :class:`~wf.node.SchedulerNode` over SQLite, on a virtual clock, and
starts two calls in one ``asyncio.gather``: the first one's command is decided
and its commit is in flight when the second one's command is decided, which
is exactly the interleaving that concurrent HTTP requests produce.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from wf.errors import Internal, NotFound, StaleLease, WfError, WorkerNotActive
from wf.node import SchedulerNode
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.model import Activity, HeartbeatStats, WorkerInfo
from wf.scheduler.outputs import LeaseGranted
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.server.scheduler_api import SchedulerAPI
from wf.store.sqlite import SQLiteStore
from wf.testing.clock import VirtualClock
from wf.wire.scheduler_methods import ReportResult

R = TypeVar("R")
TTL_S = 30.0
ADMIN = ANONYMOUS_ADMIN


def run(main: Callable[[], Awaitable[R]]) -> R:
    """Run one async test body on a fresh loop."""

    async def wrapper() -> R:
        return await main()

    return asyncio.run(wrapper())


async def started_api(root: Path, config: SchedulerConfig | None = None) -> SchedulerAPI:
    """An API over a fresh SQLite node on a virtual clock (the test ticks by hand)."""
    node = SchedulerNode(
        SQLiteStore(root), config or SchedulerConfig(lease_ttl_s=TTL_S), clock=VirtualClock()
    )
    await node.start(background=False)
    return SchedulerAPI(node)


async def lease_one(api: SchedulerAPI, activity_id: str, *, start: bool = True) -> LeaseGranted:
    """Register ``w1``, submit one activity, take its lease, and (by default) start it."""
    info = WorkerInfo(worker_id="w1", max_concurrency=4, heartbeat_interval_s=3600.0)
    await api.register_worker(info, ADMIN)
    await api.submit_activities([Activity(activity_id=activity_id, activity_type="t")], ADMIN)
    polled = await api.poll("w1", 1, 0.0, ADMIN)
    (grant,) = polled.leases
    if start:
        await api.start_activity(activity_id, grant.lease.token, ADMIN)
    return grant


async def settle(*calls: Awaitable[Any]) -> list[Any]:
    """Run calls concurrently; each result or the exception it raised."""
    return list(await asyncio.gather(*calls, return_exceptions=True))


def test_a_renewal_racing_the_completion_answers_its_own_expiry(tmp_path: Path) -> None:
    # The interleaving from the throughput run: the renewal is decided, its commit is
    # in flight, the completion is decided and the activity leaves the core; the
    # renewal then read the expiry from the core and answered -32603 (KeyError).
    async def main() -> None:
        api = await started_api(tmp_path / "s")
        try:
            grant = await lease_one(api, "a1")
            token = grant.lease.token
            clock = api.node.clock
            assert isinstance(clock, VirtualClock)
            clock.advance(5.0)
            renewed, completed = await settle(
                api.renew_lease("a1", token, ADMIN),
                api.complete_activity("a1", token, b"", ADMIN),
            )
            assert completed == ReportResult(ok=True)  # answered, not refused
            # The renewal was decided first, so it succeeded: it answers the expiry it set.
            assert renewed == clock.now() + TTL_S
            # Once the completion is known, a renewal is refused with the typed error.
            late = await settle(api.renew_lease("a1", token, ADMIN))
            assert isinstance(late[0], StaleLease)
        finally:
            await api.node.stop()

    run(main)


def test_a_renewal_racing_a_cancel_answers_its_own_expiry(tmp_path: Path) -> None:
    async def main() -> None:
        api = await started_api(tmp_path / "s")
        try:
            grant = await lease_one(api, "a1")
            renewed, cancelled = await settle(
                api.renew_lease("a1", grant.lease.token, ADMIN),
                api.cancel_activity("a1", "operator", ADMIN),
            )
            assert cancelled is None
            assert renewed == api.node.clock.now() + TTL_S
        finally:
            await api.node.stop()

    run(main)


def test_a_renewal_answers_its_own_lease_even_when_the_activity_is_leased_again(
    tmp_path: Path,
) -> None:
    # The renewal is accepted, then the worker is declared lost and the activity is
    # granted to another worker before the renewal's answer goes out: the answer is
    # the renewed lease's expiry, never the new lease's.
    async def main() -> None:
        api = await started_api(tmp_path / "s")
        try:
            grant = await lease_one(api, "a1", start=False)
            other = WorkerInfo(worker_id="w2", max_concurrency=1, heartbeat_interval_s=3600.0)
            await api.register_worker(other, ADMIN)
            clock = api.node.clock
            assert isinstance(clock, VirtualClock)
            clock.advance(1.0)
            renewed_at = clock.now()

            async def lose_w1_then_lease_to_w2() -> float:
                await api.shutdown_worker("w1", ADMIN)  # "a1" (unstarted) is returned
                clock.advance(2.0)
                polled = await api.poll("w2", 1, 0.0, ADMIN)
                return polled.leases[0].lease.expires_at

            renewed, new_expiry = await settle(
                api.renew_lease("a1", grant.lease.token, ADMIN), lose_w1_then_lease_to_w2()
            )
            assert renewed == renewed_at + TTL_S
            assert new_expiry == renewed_at + 2.0 + TTL_S
        finally:
            await api.node.stop()

    run(main)


def test_a_poll_waiting_when_its_worker_shuts_down_answers_empty_and_the_next_is_refused(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        api = await started_api(tmp_path / "s")
        try:
            info = WorkerInfo(worker_id="w1", max_concurrency=2, heartbeat_interval_s=3600.0)
            await api.register_worker(info, ADMIN)
            polled, returned = await settle(
                api.poll("w1", 2, 30.0, ADMIN), api.shutdown_worker("w1", ADMIN)
            )
            assert returned == 0
            assert (polled.leases, polled.revoked) == ([], [])
            late = await settle(api.poll("w1", 1, 0.0, ADMIN), api.heartbeat("w1", _stats(), ADMIN))
            assert all(isinstance(e, WorkerNotActive) for e in late), late
        finally:
            await api.node.stop()

    run(main)


def _stats() -> HeartbeatStats:
    return HeartbeatStats()


CALLS: dict[str, Callable[[SchedulerAPI, int], Awaitable[Any]]] = {
    "start": lambda api, token: api.start_activity("a1", token, ADMIN),
    "renew": lambda api, token: api.renew_lease("a1", token, ADMIN),
    "complete": lambda api, token: api.complete_activity("a1", token, b"", ADMIN),
    "fail": lambda api, token: api.fail_activity("a1", token, "E", "m", False, ADMIN),
    "cancel": lambda api, token: api.cancel_activity("a1", "stop", ADMIN),
    "heartbeat": lambda api, token: api.heartbeat("w1", _stats(), ADMIN),
    "poll": lambda api, token: api.poll("w1", 1, 0.0, ADMIN),
    "shutdown": lambda api, token: api.shutdown_worker("w1", ADMIN),
    "expire": lambda api, token: _expire(api),
}
"""One leased activity ``a1`` of worker ``w1``, and what can happen to it."""


async def _expire(api: SchedulerAPI) -> None:
    clock = api.node.clock
    assert isinstance(clock, VirtualClock)
    clock.advance(TTL_S)
    await api.node.tick()


@pytest.mark.parametrize("started", [False, True], ids=["leased", "executing"])
@pytest.mark.parametrize(
    ("first", "second"),
    [pytest.param(a, b, id=f"{a}-then-{b}") for a, b in itertools.permutations(CALLS, 2)],
)
def test_every_pair_of_concurrent_calls_answers_typed_errors_only(
    tmp_path: Path, first: str, second: str, started: bool
) -> None:
    async def main() -> None:
        api = await started_api(tmp_path / "s")
        try:
            grant = await lease_one(api, "a1", start=started)
            token = grant.lease.token
            results = await settle(CALLS[first](api, token), CALLS[second](api, token))
            for name, result in zip((first, second), results, strict=True):
                if isinstance(result, BaseException):
                    assert isinstance(result, WfError), f"{name}: {result!r}"
                    assert not isinstance(result, Internal), f"{name}: {result!r}"
            # Whatever happened, the node still commits.
            later = Activity(activity_id="a2", activity_type="t")
            assert await api.submit_activities([later], ADMIN) == ["a2"]
        finally:
            await api.node.stop()

    run(main)


# ------------------------------------------------------------------ memory


def _sizes(api: SchedulerAPI) -> tuple[int, int, int, int]:
    return (
        len(api._mailbox),
        len(api._revoked),
        len(api._arrived),
        len(api.node.core.registry.workers),
    )


def test_calls_naming_unknown_workers_keep_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        api = await started_api(tmp_path / "s")
        try:
            await lease_one(api, "a1")
            await api.poll("w1", 1, 0.0, ADMIN)  # w1's own state exists now
            before = _sizes(api)
            for i in range(2_000):
                wid = f"ghost-{i}"
                for call in (
                    api.poll(wid, 1, 0.0, ADMIN),
                    api.poll(wid, 1, 5.0, ADMIN),
                    api.heartbeat(wid, _stats(), ADMIN),
                    api.shutdown_worker(wid, ADMIN),
                ):
                    with pytest.raises(NotFound):
                        await call
            assert _sizes(api) == before
        finally:
            await api.node.stop()

    run(main)


def test_calls_naming_a_departed_worker_keep_nothing_and_forgetting_it_frees_its_state(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        config = SchedulerConfig(lease_ttl_s=TTL_S, departed_worker_retention_s=60.0)
        api = await started_api(tmp_path / "s", config)
        try:
            await lease_one(api, "a1", start=False)
            await api.shutdown_worker("w1", ADMIN)  # a1 is returned: one revocation waits
            assert "w1" in api._revoked
            before = _sizes(api)
            for _ in range(100):
                with pytest.raises(WorkerNotActive):
                    await api.heartbeat("w1", _stats(), ADMIN)
            assert _sizes(api) == before
            clock = api.node.clock
            assert isinstance(clock, VirtualClock)
            clock.advance(60.0)
            await api.node.tick()
            assert "w1" not in api.node.core.registry.workers
            assert _sizes(api) == (0, 0, 0, 0)
        finally:
            await api.node.stop()

    run(main)
