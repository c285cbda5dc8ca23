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

from wf.client.app import (
    SCHEDULE_TWINS,
    SCHEDULER_TWINS,
    WORKFLOW_TWINS,
    App,
    SyncApp,
)
from wf.errors import (
    AlreadyExists,
    Conflict,
    InvalidArgument,
    InvalidCronExpression,
    InvalidTimezone,
    NaiveDatetime,
    NotFound,
    Overloaded,
    RpcUnavailable,
    StaleLease,
    WfError,
    WorkerNotActive,
)
from wf.runtime.api import ArtifactPage, DeploymentPage, WorkflowAPI
from wf.runtime.artifacts import Artifact
from wf.runtime.deployments import Deployment
from wf.runtime.plan import plan_from_builtins
from wf.scheduler.backpressure import BackpressureConfig
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.model import Activity, ActivityState, HeartbeatStats, WorkerInfo
from wf.scheduler.outputs import LeaseRevoked, Transition
from wf.schedules.api import ScheduleAPI
from wf.schedules.model import OneShotTrigger, schedule_row
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.server.scheduler_api import SchedulerAPI
from wf.store.protocol import OccurrenceRow
from wf.wire.scheduler_methods import (
    ActivityView,
    DispatchStats,
    PollResult,
    QueueStats,
    RegisterResult,
    TransitionPage,
    WorkerPage,
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
    server = WfServer(_config(root, dispatch), schedules=True)
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
    by_rpc = {twin.name: name for name, twin in App.TWINS.items()}
    scheduler_methods = {n for n in registry if n.startswith("scheduler.")}
    assert scheduler_methods, "the server registers scheduler.* methods"
    # Every server method has exactly one twin, and no twin names a missing method.
    assert set(by_rpc) == set(registry)
    assert len(by_rpc) == len(App.TWINS)
    assert {t.name for t in SCHEDULER_TWINS.values()} == scheduler_methods
    workflow_methods = {n for n in registry if n.startswith("workflow.")}
    assert workflow_methods, "the server registers workflow.* methods"
    schedule_methods = {n for n in workflow_methods if n.startswith("workflow.schedules.")}
    assert schedule_methods, "the server registers workflow.schedules.* methods"
    assert {t.name for t in SCHEDULE_TWINS.values()} == schedule_methods
    assert {t.name for t in WORKFLOW_TWINS.values()} == workflow_methods - schedule_methods
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
            # workflow.schedules.* are ScheduleAPI's, the rest WorkflowAPI's: same
            # names, kinds (positional or keyword-only) and defaults, minus caller.
            api_class = ScheduleAPI if rpc_name.startswith("workflow.schedules.") else WorkflowAPI
            api_method = getattr(api_class, python_name)
            assert _server_params(api_method) == client_params, python_name
            api_sig = inspect.signature(api_method).parameters
            for n in client_params:
                assert client_sig[n].kind == api_sig[n].kind, f"{python_name}.{n}"
                assert client_sig[n].default == api_sig[n].default, f"{python_name}.{n}"


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
    # discover: the server's OpenRPC document, as the registry builds it.
    document = await app.discover()
    assert document == server.registry.openrpc()
    assert [m["name"] for m in document["methods"]] == sorted(server.registry.methods)
    # cluster_status: a SQLite server is its own single active node.
    status = await app.cluster_status()
    assert status.role == "active"

    # register_worker / list_workers / queue_stats.
    info = WorkerInfo(worker_id="w1", max_concurrency=4, capabilities=frozenset({"gpu"}))
    registered = await app.register_worker(info)
    assert isinstance(registered, RegisterResult)
    assert registered == await api.register_worker(info, C)
    page = await app.list_workers()
    assert isinstance(page, WorkerPage)
    assert page == await api.list_workers(C)
    assert page.next_cursor is None
    workers = page.workers
    assert [type(w) for w in workers] == [WorkerView]
    assert workers[0].info.worker_id == info.worker_id
    assert workers[0].info.capabilities == info.capabilities

    # submit_activities: ids back; a retry with the same content answers the id, an id
    # taken with other content and empty batches are refused alike.
    assert await app.submit_activities([_activity("a1"), _activity("a2")]) == ["a1", "a2"]
    assert await api.submit_activities([_activity("a3")], C) == ["a3"]
    assert await app.submit_activities([_activity("a1")]) == ["a1"]
    await same_refusal(
        app.submit_activities([_activity("a1", priority=0)]),
        api.submit_activities([_activity("a1", priority=0)], C),
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
    # dispatch_stats / whoami (the operator console's reads): equal but for the instant.
    dispatch = await app.dispatch_stats()
    assert isinstance(dispatch, DispatchStats)
    expected = await api.dispatch_stats(C)
    assert msgspec.structs.replace(dispatch, at=0.0) == msgspec.structs.replace(expected, at=0.0)
    assert dispatch.depth == 3
    me = await app.whoami()
    assert (me.identity, me.role, me.tenants) == ("anonymous", "admin", None)

    # get_activity / activity_history: equal reads; unknown ids refused alike.
    view = await app.get_activity("a1")
    assert isinstance(view, ActivityView)
    assert view == await api.get_activity("a1", C)
    assert view.activity is not None
    assert view.activity.state is ActivityState.QUEUED
    history_page = await app.activity_history("a1")
    assert isinstance(history_page, TransitionPage)
    assert history_page == await api.activity_history("a1", C)
    history = history_page.transitions
    assert history
    assert all(type(t) is Transition for t in history)
    # Paged alike: one transition a page, the cursor continues, refusals the same.
    first_page = await app.activity_history("a1", limit=1)
    assert first_page == await api.activity_history("a1", C, limit=1)
    assert first_page.transitions == history[:1]
    assert first_page.next_cursor is not None or len(history) == 1
    await same_refusal(
        app.activity_history("a1", limit=0), api.activity_history("a1", C, limit=0), InvalidArgument
    )
    await same_refusal(
        app.activity_history("a1", cursor="bogus"),
        api.activity_history("a1", C, cursor="bogus"),
        InvalidArgument,
    )
    await same_refusal(app.get_activity("nope"), api.get_activity("nope", C), NotFound)
    await same_refusal(app.activity_history("nope"), api.activity_history("nope", C), NotFound)

    # poll: leases delivered alike; a bad wait refused alike.
    await same_refusal(
        app.poll("w1", max_items=1, wait_s=-1.0), api.poll("w1", 1, -1.0, C), InvalidArgument
    )
    # More grants to start on receipt than asked for: refused alike, nothing granted.
    await same_refusal(
        app.poll("w1", max_items=1, wait_s=0.0, start=2),
        api.poll("w1", 1, 0.0, C, start=2),
        InvalidArgument,
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
    # renew_lease with heartbeat details / lease_details: the details kept, read alike.
    await app.renew_lease(first.activity_id, first.token, b'{"done":1}')
    assert await app.lease_details(first.activity_id, first.token) == b'{"done":1}'
    assert await api.lease_details(first.activity_id, first.token, C) == b'{"done":1}'
    assert await app.lease_details(second.activity_id, second.token) is None
    await same_refusal(
        app.lease_details(first.activity_id, first.token + 1),
        api.lease_details(first.activity_id, first.token + 1, C),
        StaleLease,
    )

    # complete_activity: done once; a late completion is stale either way.
    await app.complete_activity(first.activity_id, first.token, b'"ok"')
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
    # A Plan struct is the same content: the same artifact, not a refusal or a new hash.
    assert await app.create_artifact_from_plan("hello", 1, plan_from_builtins(plan)) == created
    assert await app.get_artifact("hello") == await wf.get_artifact("hello", caller=C) == created
    artifacts = await app.list_artifacts()
    assert isinstance(artifacts, ArtifactPage)
    assert artifacts == await wf.list_artifacts(caller=C)
    assert (artifacts.artifacts, artifacts.next_cursor) == ([created], None)
    await same_refusal(
        app.list_artifacts(limit=101), wf.list_artifacts(caller=C, limit=101), InvalidArgument
    )
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
    deployments = await app.list_deployments()
    assert isinstance(deployments, DeploymentPage)
    assert deployments == await wf.list_deployments(caller=C)
    assert (deployments.deployments, deployments.next_cursor) == ([saved], None)
    await same_refusal(
        app.list_deployments(cursor="bogus"),
        wf.list_deployments(caller=C, cursor="bogus"),
        InvalidArgument,
    )
    await same_refusal(
        app.save_deployment({**body, "max_steps": 5}, expected_revision=0),
        wf.save_deployment({**body, "max_steps": 5}, 0, caller=C),
        Conflict,
    )
    await same_refusal(
        app.get_deployment("nope.default"), wf.get_deployment("nope.default", caller=C), NotFound
    )
    await _exercise_runs(app, server)


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
        with App.sync(_dead_url(), failover_timeout_s=0) as down, pytest.raises(RpcUnavailable):
            down.queue_stats()


async def _exercise_runs(app: App, server: WfServer) -> None:
    """Every ``workflow.runs.*`` twin, on a plan that needs no worker (an interrupt)."""
    wf = server.workflow
    plan = {
        "nodes": [
            {
                "kind": "interrupt",
                "id": "ask",
                "prompt": "name?",
                "input_schema": {"type": "string"},
            }
        ],
        "output": {"name": {"$node": "ask"}},
    }
    await app.create_artifact_from_plan("ask", 1, plan)
    await app.save_deployment({"artifact_id": "ask", "artifact_version": 1})
    started = await app.start_run("ask.default")
    assert started["run_id"] == "run-000001"
    assert started["status"] == "interrupted"
    assert await app.inspect_run("run-000001") == await wf.inspect_run("run-000001", caller=C)
    await same_refusal(
        app.inspect_run("run-999999"), wf.inspect_run("run-999999", caller=C), NotFound
    )
    await same_refusal(
        app.start_run("nope.default"), wf.start_run("nope.default", None, caller=C), NotFound
    )
    await same_refusal(
        app.resume_run("run-000001", 42),
        wf.resume_run("run-000001", 42, caller=C),
        InvalidArgument,
    )
    resumed = await app.resume_run("run-000001", "ada")
    assert resumed["status"] == "completed"
    assert resumed["output"] == {"name": "ada"}
    assert [m["state"] for m in resumed["resumes"]] == ["rejected", "rejected", "applied"]
    second = await wf.start_run("ask.default", None, caller=C)
    page = await app.list_runs(limit=1)
    assert page == await wf.list_runs(caller=C, limit=1)
    assert [r["run_id"] for r in page["runs"]] == ["run-000001"]
    assert page["next_cursor"] is not None
    rest = await app.list_runs(limit=1, cursor=page["next_cursor"])
    assert [r["run_id"] for r in rest["runs"]] == [second["run_id"]]
    newest = await app.list_runs(limit=1, newest_first=True)
    assert newest == await wf.list_runs(caller=C, limit=1, newest_first=True)
    assert [r["run_id"] for r in newest["runs"]] == [second["run_id"]]
    counts = await app.count_runs()
    assert counts.by_status == (await wf.count_runs(caller=C)).by_status
    assert sum(counts.by_status.values()) == 2
    cancelled = await app.cancel_run(second["run_id"], reason="test")
    assert cancelled["status"] == "cancelled"
    await same_refusal(
        app.cancel_run(second["run_id"]),
        wf.cancel_run(second["run_id"], caller=C),
        Conflict,
    )
    await _exercise_schedules(app, server)


_VOLATILE = ("schedule_id", "created_at", "updated_at", "watermark", "paused_at", "deleted_at")


def _shape(view: dict[str, Any]) -> dict[str, Any]:
    """A schedule view without its id and clock readings (to compare twin writes
    made on two schedules, since ids are never reused)."""
    return {k: v for k, v in view.items() if k not in _VOLATILE}


async def _exercise_schedules(app: App, server: WfServer) -> None:
    """Every ``workflow.schedules.*`` twin against the Python API.

    ``ask.default`` (made by :func:`_exercise_runs`) is interrupt-only, so a
    triggered run needs no worker; no admission service runs and the triggers
    lie months or centuries ahead, so nothing fires on its own. Each write goes
    once over the wire and once in process, on twin schedules (``*-wire`` and
    ``*-local``), and the answers must agree but for ids and clock readings.
    """
    api = server.schedules
    assert api is not None, "serving() keeps schedules"
    cron = {"kind": "cron", "expression": "0 9 1 1 *", "timezone": "Europe/Paris"}

    # create: same definition; a typed trigger Struct travels as its JSON form.
    made = await app.create_schedule("nightly-wire", "ask.default", cron, note="n")
    local = await api.create_schedule("nightly-local", "ask.default", cron, caller=C, note="n")
    assert made["schedule_id"] == "nightly-wire"
    assert made["revision"] == 1
    assert made["status"] == "active"
    assert made["next_instant"] is not None
    assert _shape(made) == _shape(local)
    once = OneShotTrigger(at="2999-01-01T00:00:00+02:00")
    once_made = await app.create_schedule("once-wire", "ask.default", once)
    once_local = await api.create_schedule("once-local", "ask.default", once, caller=C)
    assert once_made["trigger"] == {"kind": "oneshot", "at": "2999-01-01T00:00:00+02:00"}
    assert _shape(once_made) == _shape(once_local)

    # create refusals: bad triggers, a reused id, an unknown deployment, bad policies.
    for trigger, refusal in (
        ({**cron, "expression": "61 * * * *"}, InvalidCronExpression),
        ({**cron, "timezone": "Mars/Olympus_Mons"}, InvalidTimezone),
        ({"kind": "oneshot", "at": "2999-01-01T00:00:00"}, NaiveDatetime),
        ({"kind": "weekly"}, InvalidArgument),
    ):
        await same_refusal(
            app.create_schedule("bad", "ask.default", trigger),
            api.create_schedule("bad", "ask.default", trigger, caller=C),
            refusal,
        )
    await same_refusal(
        app.create_schedule("nightly-wire", "ask.default", cron),
        api.create_schedule("nightly-wire", "ask.default", cron, caller=C),
        AlreadyExists,
    )
    await same_refusal(
        app.create_schedule("bad", "nope.default", cron),
        api.create_schedule("bad", "nope.default", cron, caller=C),
        NotFound,
    )
    await same_refusal(
        app.create_schedule("bad", "ask.default", cron, overlap="parallel"),
        api.create_schedule("bad", "ask.default", cron, caller=C, overlap="parallel"),
        InvalidArgument,
    )

    # get: equal reads; unknown ids refused alike.
    assert await app.get_schedule("nightly-wire") == await api.get_schedule(
        "nightly-wire", caller=C
    )
    await same_refusal(app.get_schedule("nope"), api.get_schedule("nope", caller=C), NotFound)

    # update: the given fields change; a stale revision or a bad trigger changes nothing.
    changes: dict[str, Any] = {"note": "edited", "overlap": "parallel", "max_active_runs": 2}
    edited = await app.update_schedule("nightly-wire", 1, **changes)
    assert edited["revision"] == 2
    assert (edited["note"], edited["overlap"], edited["max_active_runs"]) == (
        "edited",
        "parallel",
        2,
    )
    assert edited["trigger"] == made["trigger"]
    assert _shape(edited) == _shape(
        await api.update_schedule("nightly-local", 1, caller=C, **changes)
    )
    await same_refusal(
        app.update_schedule("nightly-wire", 1, note="stale"),
        api.update_schedule("nightly-wire", 1, caller=C, note="stale"),
        Conflict,
    )
    naive = {"kind": "oneshot", "at": "2999-06-01T12:00:00"}
    await same_refusal(
        app.update_schedule("nightly-wire", 2, trigger=naive),
        api.update_schedule("nightly-wire", 2, caller=C, trigger=naive),
        NaiveDatetime,
    )
    await same_refusal(
        app.update_schedule("nope", 1, note="x"),
        api.update_schedule("nope", 1, caller=C, note="x"),
        NotFound,
    )
    assert (await app.get_schedule("nightly-wire"))["revision"] == 2

    # pause (idempotent, with a reason) / resume (idempotent).
    paused = await app.pause_schedule("nightly-wire", reason="maintenance")
    assert (paused["status"], paused["pause_reason"], paused["revision"]) == (
        "paused",
        "maintenance",
        3,
    )
    assert paused["next_instant"] is None
    assert _shape(paused) == _shape(
        await api.pause_schedule("nightly-local", caller=C, reason="maintenance")
    )
    assert await app.pause_schedule("nightly-wire") == await api.get_schedule(
        "nightly-wire", caller=C
    )
    resumed = await app.resume_schedule("nightly-wire")
    assert (resumed["status"], resumed["pause_reason"], resumed["revision"]) == ("active", None, 4)
    assert _shape(resumed) == _shape(await api.resume_schedule("nightly-local", caller=C))
    assert await app.resume_schedule("nightly-wire") == await api.resume_schedule(
        "nightly-wire", caller=C
    )
    await same_refusal(app.pause_schedule("nope"), api.pause_schedule("nope", caller=C), NotFound)

    # preview: equal reads (UTC and wall time in the zone); a bad count refused alike.
    preview = await app.preview_schedule("nightly-wire", count=3)
    assert preview == await api.preview_schedule("nightly-wire", caller=C, count=3)
    assert len(preview) == 3
    assert all(p["timezone"] == "Europe/Paris" for p in preview)
    assert all(p["local"].endswith("T09:00:00+01:00") for p in preview)
    assert len(await app.preview_schedule("once-wire")) == 1
    await same_refusal(
        app.preview_schedule("nightly-wire", count=0),
        api.preview_schedule("nightly-wire", caller=C, count=0),
        InvalidArgument,
    )

    # occurrences: no history yet; then three recorded rows (as the admission
    # service records missed starts) paged alike over the wire and in process.
    empty = await app.list_schedule_occurrences("nightly-wire")
    assert empty.to_builtins() == {"occurrences": [], "next_cursor": None}
    current = await api.load("nightly-wire", C)
    base = current.created_at - 3 * 3600
    history = [
        OccurrenceRow(
            schedule_id="nightly-wire",
            instant=base + k * 3600,
            status="skipped-misfire",
            detail="too late",
            recorded_at=current.created_at,
        )
        for k in range(3)
    ]
    bumped = msgspec.structs.replace(current, fence=current.fence + 1, skipped_misfire=3)
    await api.store.record_occurrences(
        schedule_row(bumped), expected_revision=current.fence, occurrences=history
    )
    first_page = await app.list_schedule_occurrences("nightly-wire", limit=2)
    assert first_page == await api.list_schedule_occurrences("nightly-wire", caller=C, limit=2)
    assert [o["instant_s"] for o in first_page["occurrences"]] == [base, base + 3600]
    assert {o["status"] for o in first_page["occurrences"]} == {"skipped-misfire"}
    assert first_page["next_cursor"] is not None
    rest = await app.list_schedule_occurrences(
        "nightly-wire", limit=2, cursor=first_page["next_cursor"]
    )
    assert rest == await api.list_schedule_occurrences(
        "nightly-wire", caller=C, limit=2, cursor=first_page["next_cursor"]
    )
    assert [o["instant_s"] for o in rest["occurrences"]] == [base + 7200]
    assert rest["next_cursor"] is None
    assert (await app.get_schedule("nightly-wire"))["skipped_misfire"] == 3
    for bad in (
        app.list_schedule_occurrences("nightly-wire", limit=0),
        app.list_schedule_occurrences("nightly-wire", cursor="runs-cursor"),
    ):
        with pytest.raises(InvalidArgument):
            await bad
    await same_refusal(
        app.list_schedule_occurrences("nightly-wire", limit=101),
        api.list_schedule_occurrences("nightly-wire", caller=C, limit=101),
        InvalidArgument,
    )
    await same_refusal(
        app.list_schedule_occurrences("nope"),
        api.list_schedule_occurrences("nope", caller=C),
        NotFound,
    )

    # trigger: one manual run now through the bindings (interrupted: no worker needed).
    triggered = await app.trigger_schedule("nightly-wire")
    assert triggered["status"] == "interrupted"
    assert triggered["triggered_from"] == "nightly-wire"
    assert triggered["trigger"]["kind"] == "manual"
    assert triggered["deployment_id"] == "ask.default"
    view = await app.inspect_run(triggered["run_id"])
    assert {k: v for k, v in triggered.items() if k != "triggered_from"} == view
    in_process = await api.trigger_schedule("nightly-local", caller=C)
    assert in_process["run_id"] != triggered["run_id"]
    assert set(in_process) == set(triggered)
    assert (in_process["status"], in_process["trigger"]) == (
        "interrupted",
        {**triggered["trigger"], "schedule_id": "nightly-local"},  # linked to its schedule
    )
    await same_refusal(
        app.trigger_schedule("nope"), api.trigger_schedule("nope", caller=C), NotFound
    )

    # list: equal reads; delete (idempotent) hides a schedule unless deleted ones are asked.
    page = await app.list_schedules()
    assert page == await api.list_schedules(caller=C)
    assert page["next_cursor"] is None
    listed = page["schedules"]
    ids = ["nightly-local", "nightly-wire", "once-local", "once-wire"]
    assert [s["schedule_id"] for s in listed] == ids
    # Paged alike: two a page, the cursor continues where the page ended.
    head = await app.list_schedules(limit=2)
    assert head == await api.list_schedules(caller=C, limit=2)
    assert head["schedules"] == listed[:2]
    tail = await app.list_schedules(limit=2, cursor=head["next_cursor"])
    assert tail == await api.list_schedules(caller=C, limit=2, cursor=head["next_cursor"])
    assert (tail["schedules"], tail["next_cursor"]) == (listed[2:], None)
    await same_refusal(
        app.list_schedules(limit=-1), api.list_schedules(caller=C, limit=-1), InvalidArgument
    )
    gone = await app.delete_schedule("once-wire")
    assert (gone["status"], gone["next_instant"]) == ("deleted", None)
    assert _shape(gone) == _shape(await api.delete_schedule("once-local", caller=C))
    assert await app.delete_schedule("once-wire") == await api.get_schedule("once-wire", caller=C)
    assert [s["schedule_id"] for s in (await app.list_schedules())["schedules"]] == ids[:2]
    everything = await app.list_schedules(include_deleted=True)
    assert everything == await api.list_schedules(caller=C, include_deleted=True)
    assert [s["schedule_id"] for s in everything["schedules"]] == ids
    for refused, local_refused in (
        (app.pause_schedule("once-wire"), api.pause_schedule("once-wire", caller=C)),
        (app.resume_schedule("once-wire"), api.resume_schedule("once-wire", caller=C)),
        (app.trigger_schedule("once-wire"), api.trigger_schedule("once-wire", caller=C)),
        (
            app.update_schedule("once-wire", gone["revision"], note="x"),
            api.update_schedule("once-wire", gone["revision"], caller=C, note="x"),
        ),
    ):
        await same_refusal(refused, local_refused, Conflict)
    await same_refusal(app.delete_schedule("nope"), api.delete_schedule("nope", caller=C), NotFound)
