"""The local/static server: one process with a real server and in-process workers.

Theory of operation
-------------------
:func:`build_local_static_workflow_server` assembles a :class:`~wf.server.app.WfServer`
on the embedded store in ``root`` and, once started, in-process
:class:`~wf.worker.Worker` instances that reach it over loopback HTTP with
the very same JSON-RPC protocol remote workers use: registration,
heartbeats, long polls, fenced starts, renewals and results. There is no side
door into the core, so what works locally works unchanged with remote
workers, and the local setup exercises the full protocol.

The server listens on ``127.0.0.1`` on a free port; nothing is started until
:meth:`LocalStaticServer.start`. Later layers (the workflow runtime,
deployment schedules) hang their APIs off :attr:`LocalStaticServer.api`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, Generic, Literal, ParamSpec, Protocol, Self, TypeVar, overload

from wf.activities import BUILTIN_ACTIVITIES
from wf.client.app import App, wait_for_run
from wf.clock import Clock
from wf.errors import Conflict
from wf.runtime.api import WorkflowAPI
from wf.runtime.plan import params_of
from wf.scheduler.config import SchedulerConfig
from wf.schedules.api import ScheduleAPI
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.server.scheduler_api import SchedulerAPI
from wf.wire.run_views import RunView
from wf.worker import ActivityDefinition, Worker

P = ParamSpec("P")
R = TypeVar("R")


class _AsAdmin(Generic[P, R]):
    """A method of the server's Python API called as the local administrator.

    Declared with the method's twin on the :class:`~wf.client.app.App` client, whose
    signature is the Python API's without ``caller`` (the wire contract makes them
    twins, and ``tests/client/test_app_wire.py`` holds them to it): so the local API
    is typed exactly as the remote one, and no parameter list is written again here.
    A call goes to the method of the same name on the owner's Python API object with
    ``caller=ANONYMOUS_ADMIN``.
    """

    def __init__(self, twin: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]) -> None:
        self.name = twin.__name__
        self.__doc__ = twin.__doc__
        params = list(inspect.signature(twin).parameters.values())[1:]
        self._signature = inspect.signature(twin).replace(parameters=params)

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, obj: _Admin, owner: type[Any]) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(self, obj: _Admin | None, owner: type[Any]) -> Any:
        if obj is None:
            return self
        method = getattr(obj.python_api, self.name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await method(*args, **kwargs, caller=ANONYMOUS_ADMIN)

        call.__name__ = call.__qualname__ = self.name
        call.__doc__ = self.__doc__
        call.__signature__ = self._signature  # type: ignore[attr-defined]
        return call


class _Admin(Protocol):
    @property
    def python_api(self) -> object:
        """The Python API object whose methods :class:`_AsAdmin` calls."""


@dataclass(frozen=True, slots=True)
class LocalApi:
    """The Python API of a local server (``server.api``).

    The workflow calls are also reachable directly (``server.api.save_deployment``,
    as docs/workflows.md writes them): one per ``workflow.*`` method of the wire
    contract, typed as the :class:`~wf.client.app.App`'s, acting as the local
    administrator.
    """

    scheduler: SchedulerAPI
    """``server.api.scheduler``: workers, activities, leases."""
    workflow: WorkflowAPI
    """``server.api.workflow``: artifacts, deployments and runs."""
    schedules_api: ScheduleAPI | None = None

    @property
    def python_api(self) -> WorkflowAPI:
        """Where the direct workflow calls go."""
        return self.workflow

    @property
    def schedules(self) -> LocalSchedules:
        """``server.api.schedules``: deployment schedules as the local administrator
        (Conflict unless the server was built with ``schedules=True``)."""
        if self.schedules_api is None:
            raise Conflict("build the local server with schedules=True to use schedules")
        return LocalSchedules(self.schedules_api)

    create_artifact_from_plan = _AsAdmin(App.create_artifact_from_plan)
    get_artifact = _AsAdmin(App.get_artifact)
    list_artifacts = _AsAdmin(App.list_artifacts)
    save_deployment = _AsAdmin(App.save_deployment)
    get_deployment = _AsAdmin(App.get_deployment)
    list_deployments = _AsAdmin(App.list_deployments)
    start_run = _AsAdmin(App.start_run)
    inspect_run = _AsAdmin(App.inspect_run)
    list_runs = _AsAdmin(App.list_runs)
    count_runs = _AsAdmin(App.count_runs)
    resume_run = _AsAdmin(App.resume_run)
    cancel_run = _AsAdmin(App.cancel_run)

    async def wait_for_run(self, run_id: str, timeout: float | None = None) -> RunView:  # noqa: ASYNC109
        """Wait until a run stops, as :meth:`App.wait_for_run <wf.client.app.App.wait_for_run>`."""
        return await wait_for_run(self.inspect_run, run_id, timeout)


@dataclass(frozen=True, slots=True)
class LocalSchedules:
    """:class:`~wf.schedules.api.ScheduleAPI` as the local administrator: one method per
    ``workflow.schedules.*`` method of the wire contract, typed as the
    :class:`~wf.client.app.App`'s (004's examples call them with keywords)."""

    api: ScheduleAPI

    @property
    def python_api(self) -> ScheduleAPI:
        """Where the calls go."""
        return self.api

    create_schedule = _AsAdmin(App.create_schedule)
    get_schedule = _AsAdmin(App.get_schedule)
    list_schedules = _AsAdmin(App.list_schedules)
    update_schedule = _AsAdmin(App.update_schedule)
    pause_schedule = _AsAdmin(App.pause_schedule)
    resume_schedule = _AsAdmin(App.resume_schedule)
    delete_schedule = _AsAdmin(App.delete_schedule)
    list_schedule_occurrences = _AsAdmin(App.list_schedule_occurrences)
    preview_schedule = _AsAdmin(App.preview_schedule)
    trigger_schedule = _AsAdmin(App.trigger_schedule)


class LocalStaticServer:
    """A started-on-demand server with in-process workers (see the module docstring)."""

    def __init__(
        self,
        config: ServerConfig,
        activities: Iterable[ActivityDefinition],
        *,
        workers: int,
        max_concurrency: int,
        schedules: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.server = WfServer(config, schedules=schedules, clock=clock)
        self.api = LocalApi(
            scheduler=self.server.scheduler,
            workflow=self.server.workflow,
            schedules_api=self.server.schedules,
        )
        self._activities = list(activities)
        # Plans created here are checked against the parameters of these activities.
        self.server.workflow.activity_params.update(
            {d.name: params_of(d.fn) for d in self._activities}
        )
        self._worker_count = workers
        self._max_concurrency = max_concurrency
        self._clock = clock
        # The server's clock for the in-process workers too: an early grant then waits
        # for its instant on the same (possibly virtual) clock the server granted it on.
        self.workers: list[Worker] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.before_workers_stop: Callable[[], Awaitable[None]] | None = None
        """Awaited by :meth:`stop` before the workers stop: a time skipper
        (:mod:`wf.testing.timeskip`) brings the virtual clock to the instant of the
        early grants they hold, which their graceful shutdown runs at that instant."""

    @property
    def url(self) -> str:
        """The server's loopback URL (after :meth:`start`)."""
        if self.server.port is None:
            raise Conflict("the local server is not started")
        return f"http://127.0.0.1:{self.server.port}"

    async def start(self) -> None:
        """Recover and listen, then start the in-process workers."""
        await self.server.start()
        if not self._activities:
            return
        for index in range(self._worker_count):
            worker = Worker(
                [self.url],
                self._activities,
                worker_id=f"local-{index + 1}",
                max_concurrency=self._max_concurrency,
                poll_wait_s=5.0,
                clock=self._clock,
            )
            self.workers.append(worker)
            self._tasks.append(asyncio.create_task(worker.run(), name=f"wf-local-worker-{index}"))

    async def stop(self) -> None:
        """Drain scheduled runs while the workers can still finish them, then the
        workers, then the server."""
        if self.server.schedule_service is not None:
            await self.server.schedule_service.stop()
        if self.before_workers_stop is not None:
            await self.before_workers_stop()
        for worker in self.workers:
            await worker.shutdown()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self.server.stop()

    async def __aenter__(self) -> LocalStaticServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def build_local_static_workflow_server(
    root: Path | str,
    *,
    activities: Iterable[ActivityDefinition] | None = None,
    workers: int = 1,
    max_concurrency: int = 4,
    dispatch: SchedulerConfig | None = None,
    schedules: bool = False,
    clock: Clock | None = None,
    durability: Literal["fsync", "process"] = "fsync",
) -> LocalStaticServer:
    """A local server on the embedded store in ``root`` with in-process workers
    running ``activities`` over loopback (not started yet).

    ``activities`` defaults to :data:`wf.activities.BUILTIN_ACTIVITIES`; pass
    ``[]`` for a server without in-process workers (remote workers only).
    ``schedules=True`` keeps deployment schedules (``server.api.schedules``);
    admission runs once :func:`wf.schedules.build_scheduler_service` starts.
    ``clock`` replaces the system clock of the server and its in-process workers (a
    virtual clock for time-skipping tests).
    ``durability="process"`` skips the fsync per commit (commits survive a killed
    process, not a power loss): for tests.
    """
    if activities is None:
        activities = BUILTIN_ACTIVITIES
    config = ServerConfig(
        server=ServerSection(
            host="127.0.0.1", port=0, store=StoreConfig(root=str(root), durability=durability)
        ),
        dispatch=dispatch or SchedulerConfig(),
    )
    return LocalStaticServer(
        config,
        activities,
        workers=workers,
        max_concurrency=max_concurrency,
        schedules=schedules,
        clock=clock,
    )
