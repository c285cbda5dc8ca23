"""``wf.client.App`` is the twin of the server's Python API, over the wire.

For every ``scheduler.*`` method the server registers, ``App`` has a method
of the same Python name and parameters, and calling it against a real
in-process ``WfServer`` (port 0, temporary SQLite store) gives what the
Python API gives: equal results for reads, the same ``WfError`` subclass,
code and details for refusals.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from wf.client.app import SCHEDULER_TWINS, WORKFLOW_TWINS, App, MethodInfo, SyncApp
from wf.errors import (
    AlreadyExists,
    Conflict,
    InvalidArgument,
    NotFound,
    Overloaded,
    RpcUnavailable,
    StaleLease,
    WfError,
    WorkerNotActive,
)
from wf.runtime.api import WorkflowAPI
from wf.runtime.artifacts import Artifact
from wf.runtime.deployments import Deployment
from wf.scheduler.backpressure import BackpressureConfig
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.model import Activity, ActivityState, HeartbeatStats, WorkerInfo
from wf.scheduler.outputs import LeaseRevoked, Transition
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.server.scheduler_api import (
    ActivityView,
    PollResult,
    QueueStats,
    RegisterResult,
    SchedulerAPI,
    WorkerView,
)

C = ANONYMOUS_ADMIN
"""The caller the Python API sees (authentication is off in these servers)."""


def _config(root: Path, dispatch: SchedulerConfig | None = None) -> ServerConfig:
    return ServerConfig(
        server=ServerSection(port=0, store=StoreConfig(root=str(root), durability="process")),
        dispatch=dispatch or SchedulerConfig(),
    )


@contextlib.asynccontextmanager
async def serving(
    root: Path, dispatch: SchedulerConfig | None = None
) -> AsyncIterator[tuple[WfServer, str]]:
    server = WfServer(_config(root, dispatch))
    await server.start()
    try:
        yield server, f"http://127.0.0.1:{server.port}"
    finally:
        await server.stop()


class RecordingApp(App):
    """An App that notes which twins were called (to prove every one is exercised)."""

    called: set[str]

    async def _call(self, name: str, **params: Any) -> Any:
        self.called.add(name)
        return await super()._call(name, **params)


async def same_refusal(
    wire: Awaitable[Any], local: Awaitable[Any], expected: type[WfError]
) -> WfError:
    """Both calls raise ``expected``: same class, code, message and details."""
    with pytest.raises(expected) as over_wire:
        await wire
    with pytest.raises(expected) as in_process:
        await local
    w, p = over_wire.value, in_process.value
    assert type(w) is type(p)
    assert w.code == p.code
    assert w.message == p.message
    assert w.details == msgspec.to_builtins(p.details)
    return w


def _activity(activity_id: str, **fields: Any) -> Activity:
    return Activity(activity_id=activity_id, activity_type="noop", **fields)


# ------------------------------------------------------------- the table


def _server_params(api_method: Any) -> list[str]:
    return [n for n in inspect.signature(api_method).parameters if n not in ("self", "caller")]


def test_every_registered_method_has_a_twin(tmp_path: Path) -> None:
    server = WfServer(_config(tmp_path))
    registry = server.registry.methods
    by_rpc = {twin.rpc: name for name, twin in App.TWINS.items()}
    scheduler_methods = {n for n in registry if n.startswith("scheduler.")}
    assert scheduler_methods, "the server registers scheduler.* methods"
    # Every server method has exactly one twin, and no twin names a missing method.
    assert set(by_rpc) == set(registry)
    assert len(by_rpc) == len(App.TWINS)
    assert {t.rpc for t in SCHEDULER_TWINS.values()} == scheduler_methods
    workflow_methods = {n for n in registry if n.startswith("workflow.")}
    assert workflow_methods, "the server registers workflow.* methods"
    assert {t.rpc for t in WORKFLOW_TWINS.values()} == workflow_methods
    for rpc_name, python_name in by_rpc.items():
        twin = App.TWINS[python_name]
        # The wire form is built from the very Struct the server decodes.
        assert twin.params is registry[rpc_name].params, rpc_name
        client_method = getattr(App, python_name)
        assert inspect.iscoroutinefunction(client_method), python_name
        client_sig = inspect.signature(client_method).parameters
        client_params = [n for n in client_sig if n != "self"]
        assert client_params == list(twin.params.__struct_fields__), python_name
        # Client defaults are the server's defaults; required stays required.
        for f in msgspec.structs.fields(twin.params):
            if f.default is not msgspec.NODEFAULT:
                expected = f.default
            elif f.default_factory is not msgspec.NODEFAULT:
                expected = f.default_factory()
            else:
                expected = inspect.Parameter.empty
            assert client_sig[f.name].default == expected, f"{python_name}.{f.name}"
        if rpc_name.startswith("scheduler."):
            # Same name and parameters as the Python API (minus the server-side caller).
            api_method = getattr(SchedulerAPI, python_name)
            assert _server_params(api_method) == client_params, python_name
        if rpc_name.startswith("workflow."):
            assert _server_params(getattr(WorkflowAPI, python_name)) == client_params


# ------------------------------------------------------------ over the wire


def test_each_twin_behaves_like_the_python_api(tmp_path: Path) -> None:
    async def main() -> set[str]:
        async with serving(tmp_path / "store") as (server, url), RecordingApp(url) as app:
            app.called = set()
            await _exercise(app, server)
            return app.called

    called = asyncio.run(main())
    assert called == set(App.TWINS), set(App.TWINS) - called


async def _exercise(app: App, server: WfServer) -> None:
    api = server.scheduler
    # discover: the registry's own listing, typed.
    listing = await app.discover()
    assert listing == msgspec.convert(server.registry.describe(), list[MethodInfo])

    # register_worker / list_workers / queue_stats.
    info = WorkerInfo(worker_id="w1", max_concurrency=4, capabilities=frozenset({"gpu"}))
    registered = await app.register_worker(info)
    assert isinstance(registered, RegisterResult)
    assert registered == await api.register_worker(info, C)
    workers = await app.list_workers()
    assert workers == await api.list_workers(C)
    assert [type(w) for w in workers] == [WorkerView]
    assert workers[0].info.worker_id == info.worker_id
    assert workers[0].info.capabilities == info.capabilities

    # submit_activities: ids back; duplicates and empty batches refused alike.
    assert await app.submit_activities([_activity("a1"), _activity("a2")]) == ["a1", "a2"]
    assert await api.submit_activities([_activity("a3")], C) == ["a3"]
    await same_refusal(
        app.submit_activities([_activity("a1")]),
        api.submit_activities([_activity("a1")], C),
        AlreadyExists,
    )
    await same_refusal(app.submit_activities([]), api.submit_activities([], C), InvalidArgument)
    await same_refusal(
        app.submit_activities([_activity("")]),
        api.submit_activities([_activity("")], C),
        InvalidArgument,
    )
    stats = await app.queue_stats()
    assert isinstance(stats, QueueStats)
    assert stats == await api.queue_stats(C)
    assert stats.depth == 3

    # get_activity / activity_history: equal reads; unknown ids refused alike.
    view = await app.get_activity("a1")
    assert isinstance(view, ActivityView)
    assert view == await api.get_activity("a1", C)
    assert view.activity is not None
    assert view.activity.state is ActivityState.QUEUED
    history = await app.activity_history("a1")
    assert history == await api.activity_history("a1", C)
    assert history
    assert all(type(t) is Transition for t in history)
    await same_refusal(app.get_activity("nope"), api.get_activity("nope", C), NotFound)
    await same_refusal(app.activity_history("nope"), api.activity_history("nope", C), NotFound)

    # poll: leases delivered alike; a bad wait refused alike.
    await same_refusal(
        app.poll("w1", max_items=1, wait_s=-1.0), api.poll("w1", 1, -1.0, C), InvalidArgument
    )
    over_wire = await app.poll("w1", max_items=1, wait_s=0.0)
    in_process = await api.poll("w1", 1, 0.0, C)
    assert type(over_wire) is type(in_process) is PollResult
    assert len(over_wire.leases) == len(in_process.leases) == 1
    first, second = (g.lease for g in (*over_wire.leases, *in_process.leases))
    assert first.activity_id != second.activity_id

    # start_activity / renew_lease: same results; a stale token refused alike.
    await app.start_activity(first.activity_id, first.token)
    await api.start_activity(second.activity_id, second.token, C)
    for lease in (first, second):
        started = await app.get_activity(lease.activity_id)
        assert started == await api.get_activity(lease.activity_id, C)
        assert started.activity is not None
        assert started.activity.state is ActivityState.EXECUTING
    expiry = await app.renew_lease(first.activity_id, first.token)
    assert isinstance(expiry, float)
    assert expiry >= first.expires_at
    assert isinstance(await api.renew_lease(first.activity_id, first.token, C), float)
    await same_refusal(
        app.renew_lease(first.activity_id, first.token + 1),
        api.renew_lease(first.activity_id, first.token + 1, C),
        StaleLease,
    )

    # complete_activity: done once; a late completion is stale either way.
    await app.complete_activity(first.activity_id, first.token, b"\x00ok")
    await same_refusal(
        app.complete_activity(first.activity_id, first.token, b""),
        api.complete_activity(first.activity_id, first.token, b"", C),
        StaleLease,
    )
    done = await app.get_activity(first.activity_id)
    assert done == await api.get_activity(first.activity_id, C)
    assert done.finished_state is ActivityState.COMPLETED

    # fail_activity: a non-retryable failure finishes the activity.
    await app.fail_activity(
        second.activity_id, second.token, error_type="Boom", message="x", retryable=False
    )
    await same_refusal(
        app.fail_activity(second.activity_id, second.token),
        api.fail_activity(second.activity_id, second.token, "Error", "", True, C),
        StaleLease,
    )
    assert (await app.get_activity(second.activity_id)).finished_state is ActivityState.FAILED

    # heartbeat: revocations decode as LeaseRevoked.
    assert await app.heartbeat("w1") == await api.heartbeat("w1", HeartbeatStats(), C) == []
    third = (await app.poll("w1", max_items=1, wait_s=0.0)).leases[0].lease
    await app.cancel_activity(third.activity_id, reason="operator")
    revoked = await app.heartbeat("w1", HeartbeatStats(workload=1))
    assert revoked == [
        LeaseRevoked(
            worker_id="w1", activity_id=third.activity_id, token=third.token, reason="operator"
        )
    ]
    await same_refusal(
        app.cancel_activity("nope"), api.cancel_activity("nope", "cancelled", C), NotFound
    )

    # shutdown_worker: same count; unknown workers refused alike.
    await app.register_worker(WorkerInfo(worker_id="w2"))
    await api.register_worker(WorkerInfo(worker_id="w3"), C)
    assert await app.shutdown_worker("w2") == await api.shutdown_worker("w3", C) == 0
    await same_refusal(app.shutdown_worker("ghost"), api.shutdown_worker("ghost", C), NotFound)
    await same_refusal(app.shutdown_worker("w2"), api.shutdown_worker("w2", C), WorkerNotActive)
    assert await app.list_workers() == await api.list_workers(C)

    await _exercise_workflow(app, server)


async def _exercise_workflow(app: App, server: WfServer) -> None:
    """Every ``workflow.*`` twin, against the Python API (tests/runtime has the rest)."""
    wf = server.workflow
    plan = {
        "nodes": [{"kind": "activity", "id": "hello", "activity_type": "format_text"}],
        "output": {"result": {"$node": "hello"}},
    }
    created = await app.create_artifact_from_plan("hello", 1, plan)
    assert isinstance(created, Artifact)
    assert created == await wf.create_artifact_from_plan("hello", 1, plan, caller=C)
    assert await app.get_artifact("hello") == await wf.get_artifact("hello", caller=C) == created
    assert await app.list_artifacts() == await wf.list_artifacts(caller=C) == [created]
    bad = {"nodes": [{"kind": "loop", "id": "x"}]}
    await same_refusal(
        app.create_artifact_from_plan("hello", 2, bad),
        wf.create_artifact_from_plan("hello", 2, bad, caller=C),
        InvalidArgument,
    )
    await same_refusal(
        app.get_artifact("hello", 9), wf.get_artifact("hello", 9, caller=C), NotFound
    )
    body = {"artifact_id": "hello", "artifact_version": 1}
    saved = await app.save_deployment(body)
    assert isinstance(saved, Deployment)
    assert saved.deployment_id == "hello.default"
    assert saved.revision == 1
    assert await app.get_deployment("hello.default") == saved
    assert saved == await wf.get_deployment("hello.default", caller=C)
    assert await app.list_deployments() == await wf.list_deployments(caller=C) == [saved]
    await same_refusal(
        app.save_deployment({**body, "max_steps": 5}, expected_revision=0),
        wf.save_deployment({**body, "max_steps": 5}, 0, caller=C),
        Conflict,
    )
    await same_refusal(
        app.get_deployment("nope.default"), wf.get_deployment("nope.default", caller=C), NotFound
    )


def test_overloaded_carries_retry_after(tmp_path: Path) -> None:
    dispatch = SchedulerConfig(
        backpressure=BackpressureConfig(critical_queue_depth=2, retry_after_s=7.5)
    )

    async def main() -> None:
        async with serving(tmp_path / "store", dispatch) as (server, url), App(url) as app:
            api = server.scheduler
            await app.submit_activities([_activity("q1"), _activity("q2")])
            assert (await app.queue_stats()).backpressure == "critical"
            start = [_activity("wf-start", new_workflow=True)]
            refusal = await same_refusal(
                app.submit_activities(start), api.submit_activities(start, C), Overloaded
            )
            assert isinstance(refusal, Overloaded)
            assert refusal.retry_after_s == 7.5
            assert refusal.retryable
            # Activities of running workflows are still accepted.
            assert await app.submit_activities([_activity("q3")]) == ["q3"]

    asyncio.run(main())


# ---------------------------------------------------------------- facade


@contextlib.contextmanager
def server_thread(root: Path) -> Iterator[str]:
    """A server on its own loop in a thread, so blocking code can call it."""
    ready = threading.Event()
    stop: list[asyncio.Event] = []
    urls: list[str] = []
    loops: list[asyncio.AbstractEventLoop] = []

    async def run() -> None:
        async with serving(root) as (_, url):
            loops.append(asyncio.get_running_loop())
            stop.append(asyncio.Event())
            urls.append(url)
            ready.set()
            await stop[0].wait()

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield urls[0]
    finally:
        loops[0].call_soon_threadsafe(stop[0].set)
        thread.join(10)


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_public_names() -> None:
    import wf.client

    assert wf.client.App is App
    assert wf.client.SyncApp is SyncApp


def test_sync_facade_and_failover(tmp_path: Path) -> None:
    with server_thread(tmp_path / "store") as url:
        # The first URL is down: the client fails over to the second.
        with App.sync([_dead_url(), url]) as app:
            assert isinstance(app, SyncApp)
            assert app.submit_activities([_activity("s1")]) == ["s1"]
            stats = app.queue_stats()
            assert isinstance(stats, QueueStats)
            assert stats.depth == 1
            view = app.run(lambda a: a.get_activity("s1"))
            assert view.activity is not None
            assert view.activity.activity_id == "s1"
            with pytest.raises(NotFound):
                app.get_activity("nope")
            with pytest.raises(AttributeError):
                app.not_a_method  # noqa: B018
        with App.sync(_dead_url()) as down, pytest.raises(RpcUnavailable):
            down.queue_stats()
