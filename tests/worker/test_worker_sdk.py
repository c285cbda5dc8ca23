"""The worker SDK against a real in-process server (port 0, temporary SQLite store).

Every test drives a :class:`wf.worker.Worker` over HTTP exactly as a remote
worker would; the test itself talks to the server as an admin over the same
JSON-RPC. Waits are bounded and poll for conditions (``eventually``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from wf.client.rpc_client import RpcClient
from wf.clock import SystemClock
from wf.errors import InvalidArgument, Unauthorized
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.model import RetryPolicy
from wf.scheduler.outputs import (
    ActivityCompleted,
    ActivityFailed,
    LeaseRenewed,
    Outcome,
)
from wf.server.app import WfServer
from wf.server.auth import CredentialConfig, hash_token
from wf.server.config import SecurityConfig, ServerConfig, ServerSection, StoreConfig
from wf.worker import (
    ActivityDefinition,
    InvalidPayload,
    LeaseStatus,
    NonRetryableError,
    Worker,
    activity,
    activity_info,
    decode_payload,
    decode_result,
    encode_payload,
    heartbeat,
    is_cancelled,
)
from wf.worker.backoff import BACKOFF_MAX_S, Backoff

TEST_TIMEOUT_S = 30.0
"""Bound of one whole test's event loop."""
WAIT_S = 10.0
"""Bound of one ``eventually`` wait."""
FAST_RETRY = RetryPolicy(max_attempts=3, initial_backoff_s=0.0, jitter_fraction=0.0)


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            await main()

    asyncio.run(bounded())


async def eventually(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool], what: str, timeout_s: float = WAIT_S
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        ok = check()
        if isinstance(ok, Awaitable):
            ok = await ok
        if ok:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def config(
    root: Path, *, port: int = 0, dispatch: SchedulerConfig | None = None, **section: Any
) -> ServerConfig:
    return ServerConfig(
        server=ServerSection(
            port=port, store=StoreConfig(root=str(root), durability="process"), **section
        ),
        dispatch=dispatch or SchedulerConfig(),
    )


class Recorder:
    """A node listener keeping every committed outcome (to read results and renewals)."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def __call__(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)

    def completed(self) -> dict[str, ActivityCompleted]:
        return {
            d.activity_id: d
            for o in self.outcomes
            for d in o.decisions
            if isinstance(d, ActivityCompleted)
        }

    def failed(self) -> dict[str, ActivityFailed]:
        return {
            d.activity_id: d
            for o in self.outcomes
            for d in o.decisions
            if isinstance(d, ActivityFailed)
        }

    def renewals(self, activity_id: str) -> int:
        return sum(
            1
            for o in self.outcomes
            for r in o.records
            if isinstance(r, LeaseRenewed) and r.activity_id == activity_id
        )


@contextlib.asynccontextmanager
async def cluster(
    tmp_path: Path, *, dispatch: SchedulerConfig | None = None
) -> AsyncIterator[tuple[WfServer, RpcClient, Recorder]]:
    server = WfServer(config(tmp_path / "store", dispatch=dispatch))
    recorder = Recorder()
    server.node.listeners.append(recorder)
    await server.start()
    admin = RpcClient(f"http://127.0.0.1:{server.port}")
    try:
        yield server, admin, recorder
    finally:
        await admin.close()
        await server.stop()


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[Worker]:
    task = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: worker.connected.is_set() or task.done(), "registration")
        yield worker
    finally:
        await worker.shutdown()
        await task


def make_worker(server: WfServer, activities: list[ActivityDefinition], **kw: Any) -> Worker:
    settings: dict[str, Any] = {"heartbeat_interval_s": 0.2, "poll_wait_s": 0.5}
    settings.update(kw)
    return Worker(f"http://127.0.0.1:{server.port}", activities, **settings)


async def submit(admin: RpcClient, *activities: Any) -> None:
    await admin.call("scheduler.activities.submit", {"activities": list(activities)})


async def state(admin: RpcClient, activity_id: str) -> str:
    view = await admin.call("scheduler.activities.get", {"activity_id": activity_id})
    if view["activity"] is not None:
        return str(view["activity"]["state"])
    return str(view["finished_state"])


def state_is(admin: RpcClient, activity_id: str, expected: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await state(admin, activity_id) == expected

    return check


async def history(admin: RpcClient, activity_id: str) -> list[dict[str, Any]]:
    page = await admin.call(
        "scheduler.activities.history", {"activity_id": activity_id, "limit": 100}
    )
    assert page["next_cursor"] is None  # the whole history fits one page here
    rows: list[dict[str, Any]] = page["transitions"]
    return rows


# ------------------------------------------------------------- activities


@activity(name="add")
def add(a: int, b: int) -> int:
    return a + b


@activity(name="greet", idempotent=True)
async def greet(name: str, punctuation: str = "!") -> dict[str, Any]:
    await asyncio.sleep(0)
    info = activity_info()
    return {"text": f"hello {name}{punctuation}", "attempt": info.attempt}


# ------------------------------------------------------------- unit parts


def test_payload_convention() -> None:
    assert decode_payload(b"") == ([], {})
    assert decode_payload(encode_payload(1, "x")) == ([1, "x"], {})
    assert decode_payload(encode_payload(name="a")) == ([], {"name": "a"})
    assert decode_payload(encode_payload({"k": 1})) == ([{"k": 1}], {})
    with pytest.raises(InvalidPayload):
        decode_payload(b"42")
    with pytest.raises(InvalidPayload):
        decode_payload(b"{not json")
    with pytest.raises(InvalidArgument):
        encode_payload(1, name="a")
    assert decode_result(b"") is None
    spec = greet.activity("g-1", kwargs={"name": "x"}, tenant="t1")
    assert (spec.activity_type, spec.idempotent, spec.tenant) == ("greet", True, "t1")
    assert decode_payload(spec.payload) == ([], {"name": "x"})


def test_activity_decorator_and_worker_validation() -> None:
    @activity
    def plain() -> None:
        return None

    assert plain.name.endswith("plain")
    assert not plain.is_async
    assert greet.is_async
    assert add(2, 3) == 5

    @activity(name="gpu-job", capabilities={"gpu"})
    def gpu_job() -> None:
        return None

    assert Worker("http://h", [gpu_job]).capabilities == frozenset({"gpu"})
    with pytest.raises(InvalidArgument, match="gpu"):
        Worker("http://h", [gpu_job], capabilities={"cpu"})
    with pytest.raises(InvalidArgument, match="two activities"):
        Worker("http://h", [add, add])
    for delay in (-0.1, 61.0):
        with pytest.raises(InvalidArgument, match="start_report_delay_s"):
            Worker("http://h", [add], start_report_delay_s=delay)
    assert Worker("http://h", [add], start_report_delay_s=None).start_report_delay_s is None
    with pytest.raises(RuntimeError, match="not running inside"):
        heartbeat({"x": 1})


def test_a_declared_schedule_to_start_timeout_is_registered_and_built_into_submissions() -> None:
    @activity(name="bounded", idempotent=True, schedule_to_start_s=30)
    def bounded() -> None:
        return None

    declared = bounded.declared()
    assert (declared.idempotent, declared.schedule_to_start_s) == (True, 30.0)
    assert bounded.activity("a-1").schedule_to_start_s == 30.0
    assert bounded.activity("a-2", schedule_to_start_s=5.0).schedule_to_start_s == 5.0
    assert add.declared().schedule_to_start_s is None
    for bad in (0, -1.0, float("nan"), float("inf"), 2.0**64, True, "30"):
        with pytest.raises(InvalidArgument, match="schedule_to_start_s"):
            activity(name="bad", schedule_to_start_s=bad)
        with pytest.raises(InvalidArgument, match="start_to_close_s"):
            activity(name="bad", start_to_close_s=bad)

    @activity(name="limited", start_to_close_s=2.5)
    def limited() -> None:
        return None

    assert limited.declared().start_to_close_s == 2.5
    assert limited.activity("l-1").start_to_close_s == 2.5


def test_backoff_is_exponential_capped_and_jittered_per_worker() -> None:
    a, b = Backoff("worker-a"), Backoff("worker-b")
    delays_a = [a.next_delay_s() for _ in range(20)]
    delays_b = [b.next_delay_s() for _ in range(20)]
    assert all(0 < d <= BACKOFF_MAX_S for d in delays_a)
    assert delays_a[0] < delays_a[3] < delays_a[6]
    assert max(delays_a) > BACKOFF_MAX_S / 2
    assert delays_a != delays_b
    a.reset()
    assert a.next_delay_s() <= a.initial_s


# ---------------------------------------------------------- over the wire


def test_sync_and_async_activities_complete(tmp_path: Path) -> None:
    async def main() -> None:
        async with cluster(tmp_path) as (server, admin, recorder):
            worker = make_worker(server, [add, greet], max_concurrency=8)
            async with running(worker):
                specs = [add.activity(f"add-{i}", args=(i, 100)) for i in range(10)]
                specs += [greet.activity(f"greet-{i}", kwargs={"name": f"n{i}"}) for i in range(10)]
                await submit(admin, *specs)
                await eventually(lambda: len(recorder.completed()) == 20, "20 completions")
            done = recorder.completed()
            assert decode_result(done["add-3"].result) == 103
            assert decode_result(done["greet-4"].result) == {"text": "hello n4!", "attempt": 1}
            assert worker.counters.completed == 20
            assert worker.counters.lost == 0
            calls, batches = worker.lease_calls
            # 20 completions and a start call for each lease neither started on grant
            # (granted into an idle slot) nor reported with its result; several went
            # out together.
            counters = worker.counters
            assert counters.started == 20
            assert calls >= 20 + (20 - counters.started_on_grant - counters.unreported_starts)
            assert batches < calls
            workers = await admin.call("scheduler.workers.list", {})
            (view,) = workers["workers"]
            assert sorted(view["info"]["activity_types"]) == ["add", "greet"]

    run(main)


def test_trace_context_and_correlation_id_reach_activity_code(tmp_path: Path) -> None:
    @activity(name="traced")
    async def traced() -> list[Any]:
        info = activity_info()
        return [info.traceparent, info.correlation_id]

    parent = f"00-{'a' * 32}-{'b' * 16}-01"

    async def main() -> None:
        async with cluster(tmp_path) as (server, admin, recorder):
            # What wf.server.tracing installs when tracing is on.
            server.scheduler.trace_context = lambda grant: parent
            async with running(make_worker(server, [traced])):
                await submit(admin, traced.activity("t-1", correlation_id="run-7"))
                await eventually(lambda: "t-1" in recorder.completed(), "completion")
            assert decode_result(recorder.completed()["t-1"].result) == [parent, "run-7"]

    run(main)


def test_heartbeat_details_are_kept_latest_and_never_block(tmp_path: Path) -> None:
    release = threading.Event()
    beats_done = threading.Event()

    @activity(name="progress")
    def progress(steps: int) -> int:
        for step in range(steps):
            heartbeat({"step": step})
        beats_done.set()
        release.wait(WAIT_S)
        return steps

    async def main() -> None:
        async with cluster(tmp_path) as (server, admin, recorder):
            worker = make_worker(server, [progress])
            async with running(worker):
                await submit(admin, progress.activity("p-1", args=(10_000,)))
                await eventually(beats_done.is_set, "the heartbeats")
                context = worker.context_of("p-1")
                assert context is not None
                assert context.details == {"step": 9_999}
                assert context.heartbeats == 10_000
                assert worker.held() == {"p-1": LeaseStatus.EXECUTING}
                release.set()
                await eventually(lambda: "p-1" in recorder.completed(), "completion")

    run(main)


def test_failure_is_retried_then_completes(tmp_path: Path) -> None:
    @activity(name="flaky")
    async def flaky() -> int:
        attempt = activity_info().attempt
        if attempt == 1:
            raise ValueError("first attempt fails")
        return attempt

    async def main() -> None:
        async with cluster(tmp_path) as (server, admin, recorder):
            async with running(make_worker(server, [flaky])) as worker:
                await submit(admin, flaky.activity("f-1", retry=FAST_RETRY))
                await eventually(lambda: "f-1" in recorder.completed(), "completion")
            assert decode_result(recorder.completed()["f-1"].result) == 2
            assert worker.counters.failed == 1
            rows = await history(admin, "f-1")
            retry = next(r for r in rows if r["reason"] == "retry")
            assert retry["error"] == "ValueError: first attempt fails"
            assert rows[-1]["to_state"] == "completed"
            assert rows[-1]["attempt"] == 2

    run(main)


def test_a_declared_schedule_to_start_timeout_bounds_a_submission_that_left_it_unsaid(
    tmp_path: Path,
) -> None:
    gate = asyncio.Event()

    @activity(name="one-at-a-time", schedule_to_start_s=0.2)
    async def one_at_a_time() -> None:
        await gate.wait()

    async def main() -> None:
        async with (
            cluster(tmp_path) as (server, admin, recorder),
            running(make_worker(server, [one_at_a_time], max_concurrency=1)),
        ):
            # Plain submissions, as App sends them: no timeout of their own.
            await submit(admin, {"activity_id": "busy", "activity_type": "one-at-a-time"})
            await eventually(state_is(admin, "busy", "executing"), "busy executing")
            await submit(admin, {"activity_id": "late", "activity_type": "one-at-a-time"})
            view = await admin.call("scheduler.activities.get", {"activity_id": "late"})
            assert view["activity"]["schedule_to_start_s"] == 0.2

            async def timed_out() -> bool:
                rows = await history(admin, "late")
                return any(r["reason"] == "schedule_to_start_timeout" for r in rows)

            await eventually(timed_out, "the declared timeout of the waiting one")
            assert await state(admin, "busy") == "executing"
            gate.set()
            await eventually(lambda: {"busy", "late"} <= set(recorder.completed()), "both")

    run(main)


def test_a_declared_execution_timeout_revokes_and_cancels_an_attempt_that_runs_too_long(
    tmp_path: Path,
) -> None:
    cancelled: list[str] = []

    @activity(name="too-slow", start_to_close_s=0.3, retry=RetryPolicy(max_attempts=1))
    async def too_slow() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(activity_info().activity_id)
            raise

    async def main() -> None:
        async with (
            cluster(tmp_path) as (server, admin, recorder),
            running(make_worker(server, [too_slow])) as worker,
        ):
            # A plain submission: the limit is the one the worker's code declares.
            await submit(admin, {"activity_id": "slow-1", "activity_type": "too-slow"})
            await eventually(lambda: "slow-1" in recorder.failed(), "the timeout")
            await eventually(lambda: cancelled == ["slow-1"], "the attempt cancelled")
            failed = recorder.failed()["slow-1"]
            assert (failed.error_type, failed.reason, failed.may_have_executed) == (
                "StartToCloseTimeout",
                "retries_exhausted",
                True,
            )
            assert worker.counters.completed == 0

    run(main)


def test_non_retryable_error_fails_at_once(tmp_path: Path) -> None:
    class BadInput(NonRetryableError):
        pass

    @activity(name="strict")
    def strict() -> None:
        raise BadInput("no")

    async def main() -> None:
        async with cluster(tmp_path) as (server, admin, recorder):
            async with running(make_worker(server, [strict])):
                await submit(admin, strict.activity("s-1", retry=FAST_RETRY))
                await eventually(lambda: "s-1" in recorder.failed(), "failure")
            failed = recorder.failed()["s-1"]
            assert (failed.reason, failed.error_type, failed.attempt) == (
                "non_retryable",
                "BadInput",
                1,
            )

    run(main)


def test_revocation_cancels_running_activities(tmp_path: Path) -> None:
    cancelled: list[str] = []

    @activity(name="forever-async")
    async def forever_async() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append("async")
            raise

    @activity(name="forever-sync")
    def forever_sync() -> str:
        deadline = time.monotonic() + WAIT_S
        while not is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.01)
        cancelled.append("sync")
        return "too late"

    async def main() -> None:
        async with cluster(tmp_path) as (server, admin, _):
            # Two slots, both busy: revocations come back in heartbeat answers.
            worker = make_worker(server, [forever_async, forever_sync], max_concurrency=2)
            async with running(worker):
                await submit(admin, forever_async.activity("fa-1"), forever_sync.activity("fs-1"))
                await eventually(lambda: worker.executing == 2, "both running")
                await eventually(state_is(admin, "fs-1", "executing"), "started")
                await eventually(state_is(admin, "fa-1", "executing"), "started")
                for aid in ("fa-1", "fs-1"):
                    await admin.call("scheduler.activities.cancel", {"activity_id": aid})
                await eventually(lambda: sorted(cancelled) == ["async", "sync"], "cancellation")
                await eventually(lambda: not worker.held(), "leases dropped")
            assert worker.counters.lost == 2
            assert worker.counters.completed == worker.counters.failed == 0
            assert await state(admin, "fs-1") == "cancelled"

    run(main)


def test_leases_are_renewed_for_activities_longer_than_the_ttl(tmp_path: Path) -> None:
    @activity(name="long")
    async def long(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"

    async def main() -> None:
        dispatch = SchedulerConfig(lease_ttl_s=0.6)
        async with cluster(tmp_path, dispatch=dispatch) as (server, admin, recorder):
            async with running(make_worker(server, [long])) as worker:
                assert worker.lease_ttl_s == 0.6
                await submit(admin, long.activity("l-1", args=(2.0,)))
                await eventually(lambda: "l-1" in recorder.completed(), "completion")
            assert recorder.renewals("l-1") >= 3
            rows = await history(admin, "l-1")
            assert [r["to_state"] for r in rows] == ["queued", "leased", "executing", "completed"]
            assert rows[-1]["attempt"] == 1
            assert rows[-1]["infra_requeues"] == 0

    run(main)


def _gated(name: str, gate: asyncio.Event) -> ActivityDefinition:
    @activity(name=name, idempotent=True)
    async def wait_for_gate() -> str:
        await gate.wait()
        return name

    return wait_for_gate


async def prefetch_behind(
    admin: RpcClient, worker: Worker, first: ActivityDefinition, second: ActivityDefinition
) -> None:
    """``a-1`` (``first``) running in the worker's only slot, then ``b-1`` (``second``)
    granted while that slot is busy: a prefetched lease, not started on grant, so it
    will begin without waiting for a start acknowledgement."""
    await submit(admin, first.activity("a-1"))
    await eventually(state_is(admin, "a-1", "executing"), "a-1 started")
    await submit(admin, second.activity("b-1"))
    await eventually(lambda: "b-1" in worker.held(), "b-1 prefetched")


def test_a_restartable_activity_reports_its_start_by_itself_once_it_runs_a_while(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        first_gate, second_gate = asyncio.Event(), asyncio.Event()
        first, second = _gated("first", first_gate), _gated("second", second_gate)
        async with cluster(tmp_path) as (server, admin, recorder):
            worker = make_worker(server, [first, second], max_concurrency=1, prefetch=1)
            async with running(worker):
                await prefetch_behind(admin, worker, first, second)
                first_gate.set()
                # b-1 runs on; after START_REPORT_DELAY_S its start is reported alone.
                await eventually(state_is(admin, "b-1", "executing"), "b-1 start reported")
                second_gate.set()
                await eventually(lambda: "b-1" in recorder.completed(), "b-1 completed")
            counters = worker.counters
            assert (counters.started_on_grant, counters.unreported_starts) == (1, 0)
            rows = await history(admin, "b-1")
            assert [r["to_state"] for r in rows] == ["queued", "leased", "executing", "completed"]
            assert rows[2]["at"] < rows[3]["at"]

    run(main)


def test_a_restartable_activity_that_ends_quickly_reports_its_start_with_the_result(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        first_gate, second_gate = asyncio.Event(), asyncio.Event()
        first, second = _gated("first", first_gate), _gated("second", second_gate)
        second_gate.set()  # b-1 ends at once
        async with cluster(tmp_path) as (server, admin, recorder):
            worker = make_worker(
                server, [first, second], max_concurrency=1, prefetch=1, start_report_delay_s=60
            )
            async with running(worker):
                await prefetch_behind(admin, worker, first, second)
                first_gate.set()
                await eventually(lambda: "b-1" in recorder.completed(), "b-1 completed")
            assert worker.counters.unreported_starts == 1
            rows = await history(admin, "b-1")
            assert [r["to_state"] for r in rows] == ["queued", "leased", "executing", "completed"]
            # One command recorded both: the start and the result share their instant.
            assert rows[2]["at"] == rows[3]["at"]
            assert rows[3]["attempt"] == 1

    run(main)


def test_graceful_shutdown_returns_unstarted_leases(tmp_path: Path) -> None:
    gate = asyncio.Event()

    @activity(name="gated", idempotent=True)
    async def gated(n: int) -> int:
        await gate.wait()
        return n

    async def main() -> None:
        async with cluster(tmp_path) as (server, admin, recorder):
            first = make_worker(server, [gated], worker_id="first", max_concurrency=1, prefetch=2)
            task = asyncio.create_task(first.run())
            await submit(admin, *(gated.activity(f"g-{i}", args=(i,)) for i in range(3)))
            await eventually(lambda: len(first.held()) == 3, "three leases held")
            statuses = sorted(first.held().values())
            assert statuses == [LeaseStatus.EXECUTING, LeaseStatus.LEASED, LeaseStatus.LEASED]
            (running_id,) = [a for a, s in first.held().items() if s is LeaseStatus.EXECUTING]
            unstarted = sorted(a for a in first.held() if a != running_id)
            draining = asyncio.create_task(first.shutdown())

            async def returned() -> bool:
                return all([await state(admin, a) == "queued" for a in unstarted])

            # Back in the queue at once, not after a lease TTL.
            await eventually(returned, "unstarted leases returned", timeout_s=2.0)
            assert not draining.done()  # the executing activity is still running
            gate.set()
            await draining
            await task
            assert first.counters.completed == 1
            assert set(recorder.completed()) == {running_id}
            for aid in unstarted:
                assert (await history(admin, aid))[-1]["reason"] == "returned"
            async with running(make_worker(server, [gated], worker_id="second")):
                await eventually(lambda: len(recorder.completed()) == 3, "the rest completes")
            workers = {w["info"]["worker_id"]: w["status"] for w in
                       (await admin.call("scheduler.workers.list", {}))["workers"]}  # fmt: skip
            assert workers["first"] == "gone"

    run(main)


def _early(lead_s: float) -> SchedulerConfig:
    return SchedulerConfig(early_grant_s=lead_s)


def test_an_early_grant_waits_in_its_slot_and_starts_at_its_instant(tmp_path: Path) -> None:
    clock = SystemClock()
    starts: list[float] = []

    @activity(name="punctual", idempotent=True)
    async def punctual() -> None:
        starts.append(clock.now())

    async def main() -> None:
        async with cluster(tmp_path, dispatch=_early(2.0)) as (server, admin, recorder):
            worker = make_worker(server, [punctual], max_concurrency=1, clock=clock)
            async with running(worker):
                due = clock.now() + 2.2
                await submit(admin, punctual.activity("p-1", not_before=due))
                await eventually(lambda: worker.counters.early_grants == 1, "the early grant")
                # Received well ahead of its instant: it holds the slot, not yet begun.
                assert clock.now() < due
                assert worker.executing == 1
                assert starts == []
                assert await state(admin, "p-1") == "leased"
                await eventually(lambda: "p-1" in recorder.completed(), "p-1 completed")
            assert len(starts) == 1
            assert starts[0] >= due
            assert worker.counters.started_on_grant == 0
            rows = await history(admin, "p-1")
            assert [r["to_state"] for r in rows] == [
                "delayed", "queued", "leased", "executing", "completed",
            ]  # fmt: skip
            # The server recorded the start no earlier than the instant either.
            assert rows[3]["at"] >= due

    run(main)


def test_cancelling_an_early_grant_ends_its_wait_and_frees_the_slot(tmp_path: Path) -> None:
    ran: list[str] = []

    @activity(name="never", idempotent=True)
    async def never() -> None:
        ran.append(activity_info().activity_id)

    async def main() -> None:
        async with cluster(tmp_path, dispatch=_early(5.0)) as (server, admin, recorder):
            worker = make_worker(server, [never], max_concurrency=1)
            async with running(worker):
                due = worker.clock.now() + 5.0
                await submit(admin, never.activity("n-1", not_before=due))
                await eventually(lambda: worker.counters.early_grants == 1, "the early grant")
                await admin.call("scheduler.activities.cancel", {"activity_id": "n-1"})
                # The revocation ends the wait long before the instant.
                await eventually(lambda: worker.executing == 0, "slot freed")
                assert worker.clock.now() < due
                assert worker.counters.lost == 1
                await submit(admin, never.activity("n-2"))
                await eventually(lambda: "n-2" in recorder.completed(), "the slot serves n-2")
            assert ran == ["n-2"]
            assert await state(admin, "n-1") == "cancelled"

    run(main)


def test_shutdown_returns_an_early_grant_that_still_waits(tmp_path: Path) -> None:
    ran: list[str] = []

    @activity(name="later", idempotent=True)
    async def later() -> None:
        ran.append(activity_info().activity_id)

    async def main() -> None:
        async with cluster(tmp_path, dispatch=_early(5.0)) as (server, admin, _recorder):
            worker = make_worker(server, [later], max_concurrency=1)
            task = asyncio.create_task(worker.run())
            await eventually(worker.connected.is_set, "registration")
            due = worker.clock.now() + 5.0
            await submit(admin, later.activity("l-1", not_before=due))
            await eventually(lambda: worker.counters.early_grants == 1, "the early grant")
            await worker.shutdown()
            await task
            assert worker.clock.now() < due
            assert ran == []
            assert await state(admin, "l-1") == "queued"
            assert (await history(admin, "l-1"))[-1]["reason"] == "returned"

    run(main)


def test_worker_reconnects_after_the_server_restarts(tmp_path: Path) -> None:
    @activity(name="sleepy", idempotent=True)
    async def sleepy(seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    async def main() -> None:
        root = tmp_path / "store"
        server = WfServer(config(root))
        await server.start()
        port = server.port
        assert port is not None
        url = f"http://127.0.0.1:{port}"
        admin = RpcClient(url)
        worker = make_worker(server, [sleepy])
        try:
            async with running(worker):
                await submit(admin, sleepy.activity("before", args=(0.0,)))
                await eventually(state_is(admin, "before", "completed"), "first completion")
                # An activity still running while the server is away reports afterwards.
                await submit(admin, sleepy.activity("across", args=(1.0,)))
                await eventually(state_is(admin, "across", "executing"), "running")
                await server.stop()
                await eventually(lambda: not worker.connected.is_set(), "disconnect noticed")
                await asyncio.sleep(0.3)  # the worker backs off against a closed port
                server = WfServer(config(root, port=port))
                await server.start()
                await eventually(worker.connected.is_set, "reconnection")
                await submit(admin, sleepy.activity("after", args=(0.0,)))
                for aid in ("across", "after"):
                    await eventually(state_is(admin, aid, "completed"), f"{aid} completed")
                assert worker.counters.registrations >= 2
                assert worker.counters.connection_losses >= 1
                # A server on a fresh store does not know the worker: it registers again.
                await server.stop()
                server = WfServer(config(tmp_path / "fresh", port=port))
                await server.start()
                await submit(admin, sleepy.activity("fresh", args=(0.0,)))
                await eventually(state_is(admin, "fresh", "completed"), "fresh completion")
            assert worker.counters.completed == 4
        finally:
            await admin.close()
            await server.stop()

    run(main)


def test_a_refused_credential_stops_the_worker(tmp_path: Path) -> None:
    async def main() -> None:
        security = SecurityConfig(
            credentials=[
                CredentialConfig(name="ops", role="admin", token_sha256=hash_token("admin-t"))
            ]
        )
        server = WfServer(config(tmp_path / "store", security=security))
        await server.start()
        try:
            worker = make_worker(server, [add], token="wrong")
            with pytest.raises(Unauthorized):
                await worker.run()
        finally:
            await server.stop()

    run(main)


# -------------------------------------------------------------------- CLI


def test_cli_builds_the_app_worker_with_flag_overrides() -> None:
    from wf.cli.main import build_parser
    from wf.cli.worker_cmd import build_worker

    parser = build_parser()
    args = parser.parse_args(
        [
            "worker",
            "--app",
            "tests.e2e.sample_app:worker",
            "--server",
            "http://10.0.0.1:1",
            "--server",
            "http://10.0.0.2:2",
            "--worker-id",
            "cli-1",
            "--max-concurrency",
            "7",
        ]
    )
    worker = build_worker(args)
    assert worker.servers == ["http://10.0.0.1:1", "http://10.0.0.2:2"]
    assert (worker.worker_id, worker.max_concurrency) == ("cli-1", 7)
    assert set(worker.activities) == {"e2e.echo", "e2e.slow"}
    assert worker.heartbeat_interval_s == 0.5  # kept from the app's Worker
    for bad in ("no_colon", "tests.e2e.sample_app:missing", "no.such.module:x"):
        with pytest.raises(InvalidArgument):
            build_worker(parser.parse_args(["worker", "--app", bad]))
