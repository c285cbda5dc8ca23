"""A started grant whose answer crosses the worker's registration runs only if the
server still holds it for the worker (docs/architecture.md, "Start on grant").

A worker registers again after a failover with the leases it holds; the server
fails closed (``may_have_executed``) a started lease the registration does not
list. A poll (or a report's poll) sent before that registration may be answered
after its list was built: its started grant is then one the server may already
have failed closed. Found by the failover tests: the worker ran such a grant
while the server had failed it, so a run that executed ended failed.

Real in-process server over loopback and a real worker. The race is made
deterministic by holding the poll on the worker's side: the re-registration is
triggered as a lost connection triggers it (``_connection_lost``) and awaited,
either after the poll's answer came back (the registration reaches the server
after the grant: it is failed closed and must not run) or before the poll is sent
(the registration comes first: the grant stands and runs once).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from wf.client.rpc_client import RpcClient
from wf.errors import RpcUnavailable
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.wire.scheduler_methods import POLL, REGISTER_WORKER, START_ACTIVITY
from wf.worker import Worker, activity, activity_info, runtime

WAIT_S = 20.0


async def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def _config(tmp_path: Path) -> ServerConfig:
    store = StoreConfig(root=str(tmp_path / "store"), durability="process")
    return ServerConfig(server=ServerSection(port=0, store=store))


async def _final_state(admin: RpcClient, activity_id: str) -> dict[str, Any]:
    """Once the activity is finished: its final state and last transition's reason."""
    while True:
        view = await admin.call("scheduler.activities.get", {"activity_id": activity_id})
        if view["activity"] is None:
            history = await admin.call("scheduler.activities.history", {"activity_id": activity_id})
            return {"state": view["finished_state"], "reason": history["transitions"][-1]["reason"]}
        await asyncio.sleep(0.01)


Hook = Callable[[Worker, Callable[[], Awaitable[Any]]], Awaitable[Any]]
"""Runs a poll carrying a lease: given the worker and the real call, returns its answer."""


async def _race(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook: Hook
) -> tuple[Worker, Counter[str], dict[str, Any]]:
    """One plain (not idempotent) activity, queued before one worker with one slot
    starts; the worker's first poll that may be started on grant goes through
    ``hook``. Returns the worker, how often the activity ran, and its final state and
    last transition's reason."""
    ran: Counter[str] = Counter()
    hooked: list[str] = []
    worker: Worker | None = None

    @activity(name="step")
    async def step() -> str:
        ran[activity_info().activity_id] += 1
        return "done"

    class HookedClient(RpcClient):
        """The worker's client: its first poll that may start a grant goes to ``hook``."""

        async def call(self, method: str, params: Any = None, **kw: Any) -> Any:
            if method != POLL.name or hooked or not params.start:
                return await super().call(method, params, **kw)
            hooked.append(method)
            assert worker is not None
            return await hook(worker, lambda: super(HookedClient, self).call(method, params, **kw))

    server = WfServer(_config(tmp_path))
    await server.start()
    url = f"http://127.0.0.1:{server.port}"
    admin = RpcClient(url)
    try:
        batch = [msgspec.to_builtins(step.activity("a1", []))]
        await admin.call("scheduler.activities.submit", {"activities": batch})
        monkeypatch.setattr(runtime, "RpcClient", HookedClient)
        worker = Worker(url, [step], worker_id="w", max_concurrency=1, poll_wait_s=1.0)
        task = asyncio.create_task(worker.run())
        try:
            outcome = await asyncio.wait_for(_final_state(admin, "a1"), WAIT_S)
            await eventually(lambda: not worker.held(), "the worker to let the lease go")
        finally:
            await worker.shutdown()
            await task
    finally:
        await admin.close()
        await server.stop()
    assert hooked, "no poll that may start a grant was sent"
    return worker, ran, outcome


async def _register_again(worker: Worker) -> None:
    """Re-register as after a lost connection, and wait for the answer."""
    before = worker.counters.registrations
    worker._connection_lost(RpcUnavailable("the test cut the connection"))
    await eventually(lambda: worker.counters.registrations > before, "the re-registration")


def test_a_started_grant_failed_closed_by_a_later_registration_is_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def hook(worker: Worker, send: Callable[[], Awaitable[Any]]) -> Any:
        answer = await send()  # the grant is committed as the start...
        assert POLL.decode(answer).leases, "the poll was answered without the lease"
        await _register_again(worker)  # ...then a registration that does not list it
        return answer

    async def main() -> None:
        worker, ran, outcome = await _race(tmp_path, monkeypatch, hook)
        assert ran["a1"] == 0, "a lease the server failed closed ran"
        assert outcome == {"state": "failed", "reason": "may_have_executed"}
        assert worker.counters.registration_waits == 1
        assert worker.counters.lost == 1
        assert worker.counters.started_on_grant == 0

    asyncio.run(main())


def test_a_started_grant_answered_after_a_registration_it_followed_runs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def hook(worker: Worker, send: Callable[[], Awaitable[Any]]) -> Any:
        await _register_again(worker)  # the registration reaches the server first
        return await send()

    async def main() -> None:
        worker, ran, outcome = await _race(tmp_path, monkeypatch, hook)
        assert ran["a1"] == 1
        assert outcome == {"state": "completed", "reason": "completed"}
        assert worker.counters.registration_waits == 1
        assert worker.counters.started_on_grant == 1
        assert worker.counters.lost == 0

    asyncio.run(main())


def test_a_started_grant_with_no_registration_in_between_runs_without_a_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def hook(worker: Worker, send: Callable[[], Awaitable[Any]]) -> Any:
        return await send()

    async def main() -> None:
        worker, ran, outcome = await _race(tmp_path, monkeypatch, hook)
        assert ran["a1"] == 1
        assert outcome == {"state": "completed", "reason": "completed"}
        assert worker.counters.registration_waits == 0
        assert worker.counters.started_on_grant == 1

    asyncio.run(main())


def test_a_grant_answered_during_a_registration_is_started_only_after_its_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No start on grant (``start_report_delay_s=None``): the grant is ``LEASED`` and the
    worker sends ``leases.start``. The registration is held on the wire from the
    moment it is sent; the poll's answer is handed over meanwhile. Were the start sent
    before the registration's answer, the server would start the lease and the
    registration, arriving second and not listing it, fail it closed while the worker
    ran it (the failover tests' ``run.failed`` with one ledger line). The worker waits
    instead: the registration requeues the leased activity, the start is refused, and
    the activity runs once on its next grant."""
    events: list[str] = []
    cut = asyncio.Event()
    held_back = asyncio.Event()
    release = asyncio.Event()
    worker_box: list[Worker] = []

    class HoldingClient(RpcClient):
        async def call_answered_by(
            self, method: str, params: Any = None, *, timeout_s: float | None = None
        ) -> tuple[Any, str]:
            if method == REGISTER_WORKER.name and cut.is_set() and not held_back.is_set():
                held_back.set()
                events.append("registration sent")
                await release.wait()
            return await super().call_answered_by(method, params, timeout_s=timeout_s)

        async def batch(
            self, calls: Sequence[tuple[str, Any]], *, timeout_s: float | None = None
        ) -> list[Any]:
            if any(m == START_ACTIVITY.name for m, _ in calls) and not release.is_set():
                events.append("start sent before the registration's answer")
                answers = await super().batch(calls, timeout_s=timeout_s)
                release.set()  # the registration reaches the server second
                return answers
            return await super().batch(calls, timeout_s=timeout_s)

        async def call(self, method: str, params: Any = None, **kw: Any) -> Any:
            answer = await super().call(method, params, **kw)
            if method == POLL.name and not cut.is_set() and POLL.decode(answer).leases:
                worker = worker_box[0]
                cut.set()
                worker._connection_lost(RpcUnavailable("the test cut the connection"))
                await held_back.wait()
                # Once the grant's runner waits for the registration, let it through.
                asyncio.get_running_loop().create_task(_release_when_waiting(worker))
            return answer

    async def _release_when_waiting(worker: Worker) -> None:
        await eventually(
            lambda: worker.counters.registration_waits > 0 or release.is_set(),
            "the grant's runner to wait for the registration",
        )
        release.set()

    ran: Counter[str] = Counter()

    @activity(name="step")
    async def step() -> str:
        ran[activity_info().activity_id] += 1
        return "done"

    async def main() -> None:
        server = WfServer(_config(tmp_path))
        await server.start()
        url = f"http://127.0.0.1:{server.port}"
        admin = RpcClient(url)
        try:
            batch = [msgspec.to_builtins(step.activity("a1", []))]
            await admin.call("scheduler.activities.submit", {"activities": batch})
            monkeypatch.setattr(runtime, "RpcClient", HoldingClient)
            worker = Worker(
                url,
                [step],
                worker_id="w",
                max_concurrency=1,
                poll_wait_s=1.0,
                start_report_delay_s=None,
            )
            worker_box.append(worker)
            task = asyncio.create_task(worker.run())
            try:
                outcome = await asyncio.wait_for(_final_state(admin, "a1"), WAIT_S)
                await eventually(lambda: not worker.held(), "the worker to let the lease go")
            finally:
                await worker.shutdown()
                await task
        finally:
            await admin.close()
            await server.stop()
        assert events == ["registration sent"], events
        assert outcome == {"state": "completed", "reason": "completed"}
        assert ran["a1"] == 1
        assert worker.counters.registration_waits == 1
        assert worker.counters.lost == 1  # the first grant, requeued by the registration

    asyncio.run(main())
