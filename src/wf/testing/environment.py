"""A workflow test environment in one call: wf in process, on a virtual clock.

Theory of operation
-------------------
:class:`WorkflowEnvironment` assembles what docs/testing.md's week-long test
writes out by hand, so that a user's test starts with one line::

    async with WorkflowEnvironment.start(activities=[my_activity]) as env:
        deployment = await env.deploy(PLAN, name="nightly")
        run = await env.run(deployment, {"day": "monday"})

It is the production code, nothing replaced: a local server
(:func:`wf.server.local.build_local_static_workflow_server`) on an embedded
store (a temporary directory unless ``store`` names one), whose in-process
workers run the user's own ``@activity`` functions over loopback with the
protocol remote workers use; the run engine; the schedule service running its
own loop; all on one :class:`~wf.testing.clock.VirtualClock`, which a
:class:`~wf.testing.timeskip.TimeSkipper` moves from due instant to due
instant once every component is idle. The workers run on that clock too, so
an activity granted ahead of its instant starts at that instant, as on a
real server.

What a test drives is what a user drives: :attr:`WorkflowEnvironment.app` is
an :class:`~wf.client.app.App` client over loopback (the wire contract), and
:attr:`WorkflowEnvironment.api` the local server's in-process Python API with
the same methods. The helpers :meth:`~WorkflowEnvironment.run` and
:meth:`~WorkflowEnvironment.wait_for_run` skip time while they wait: a run
with a one-hour timer or a retry backoff ends at once in real time, at the
right virtual instant; :meth:`~WorkflowEnvironment.advance_to` lets a week of
a cron schedule pass in seconds.

Tests without an asyncio plugin use :meth:`WorkflowEnvironment.run_sync`,
which runs an ``async`` body in a fresh event loop inside a started
environment.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any, Final, TypeVar

from wf.activities import BUILTIN_ACTIVITIES
from wf.client.app import STOPPED_RUN_STATUSES, App
from wf.errors import Conflict, InvalidArgument
from wf.flow import Flow
from wf.scheduler.config import SchedulerConfig
from wf.schedules import SchedulerServiceConfig, build_scheduler_service
from wf.schedules.service import ScheduleService
from wf.server.local import LocalApi, LocalStaticServer, build_local_static_workflow_server
from wf.testing.clock import DEFAULT_START, VirtualClock
from wf.testing.timeskip import TimeSkipper
from wf.wire.run_views import RunView
from wf.wire.schedule_views import OccurrenceView
from wf.wire.workflow import Plan
from wf.worker import ActivityDefinition

T = TypeVar("T")

DEFAULT_SCHEDULES: Final = SchedulerServiceConfig(enabled=True)
"""The schedule service's settings unless ``schedules=`` says otherwise (the server's
defaults, enabled)."""


def activities_of(source: Iterable[ActivityDefinition] | ModuleType) -> list[ActivityDefinition]:
    """The ``@activity`` functions of ``source``: a module (every
    :class:`~wf.worker.ActivityDefinition` it holds at top level, in definition
    order) or an iterable of them. :class:`~wf.errors.InvalidArgument` for
    anything else in the iterable."""
    if isinstance(source, ModuleType):
        found: list[ActivityDefinition] = []
        for value in vars(source).values():
            # A module importing the same definition twice (an alias) declares it once.
            if isinstance(value, ActivityDefinition) and all(value is not f for f in found):
                found.append(value)
        return found
    listed = list(source)
    for value in listed:
        if not isinstance(value, ActivityDefinition):
            raise InvalidArgument(f"{value!r} is not an @activity", field="activities")
    return listed


class WorkflowEnvironment:
    """wf in process on a virtual clock, for tests (see the module docstring).

    Build it with :meth:`start` and use it as an async context manager (or
    :meth:`open` then :meth:`close`, for fixtures).
    """

    def __init__(
        self,
        activities: Iterable[ActivityDefinition] | ModuleType = (),
        *,
        store: Path | str | None = None,
        start_time: datetime | float = DEFAULT_START,
        builtins: bool = False,
        workers: int = 1,
        max_concurrency: int = 4,
        dispatch: SchedulerConfig | None = None,
        schedules: SchedulerServiceConfig = DEFAULT_SCHEDULES,
    ) -> None:
        defined = activities_of(activities)
        if builtins:
            defined = [*BUILTIN_ACTIVITIES, *defined]
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if store is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="wf-test-")
            store = Path(self._tmp.name) / "store"
        self.clock = VirtualClock(start_time)
        """The virtual clock every component runs on (move it with :attr:`skip` only)."""
        self.server: LocalStaticServer = build_local_static_workflow_server(
            store,
            activities=defined,
            workers=workers,
            max_concurrency=max_concurrency,
            dispatch=dispatch,
            schedules=True,
            clock=self.clock,
            # A test needs no fsync per commit: commits still survive a killed process.
            durability="process",
        )
        """The local server (its :class:`~wf.server.app.WfServer` is ``server.server``)."""
        self._schedules = schedules
        self._service: ScheduleService | None = None
        self._skip: TimeSkipper | None = None
        self._app: App | None = None
        self._open = False

    @classmethod
    def start(
        cls,
        activities: Iterable[ActivityDefinition] | ModuleType = (),
        *,
        store: Path | str | None = None,
        start_time: datetime | float = DEFAULT_START,
        builtins: bool = False,
        workers: int = 1,
        max_concurrency: int = 4,
        dispatch: SchedulerConfig | None = None,
        schedules: SchedulerServiceConfig = DEFAULT_SCHEDULES,
    ) -> WorkflowEnvironment:
        """An environment to enter with ``async with``: it starts on entry and stops,
        draining on virtual time, on exit.

        ``activities``: your ``@activity`` functions, or a module declaring them
        (``builtins=True`` adds :data:`wf.activities.BUILTIN_ACTIVITIES`).
        ``store``: the embedded store's directory (default: a temporary one,
        removed on exit). ``start_time``: where the virtual clock starts (an aware
        ``datetime`` or POSIX seconds). ``workers`` and ``max_concurrency``: the
        in-process workers. ``dispatch``: the scheduler's settings;
        ``schedules``: the schedule service's (enabled, server defaults).
        """
        return cls(
            activities,
            store=store,
            start_time=start_time,
            builtins=builtins,
            workers=workers,
            max_concurrency=max_concurrency,
            dispatch=dispatch,
            schedules=schedules,
        )

    @classmethod
    def run_sync(
        cls,
        body: Callable[[WorkflowEnvironment], Awaitable[T]],
        activities: Iterable[ActivityDefinition] | ModuleType = (),
        **options: Any,
    ) -> T:
        """``body(env)`` run to completion in a fresh event loop, inside an environment
        started with ``activities`` and ``options`` (as :meth:`start`): for tests
        without an asyncio plugin. Not for use inside a running event loop."""

        async def main() -> T:
            async with cls.start(activities, **options) as env:
                return await body(env)

        return asyncio.run(main())

    # ------------------------------------------------------------ lifecycle

    async def open(self) -> WorkflowEnvironment:
        """Start the server, its workers and the schedule service."""
        if self._open:
            raise Conflict("the environment is already started")
        await self.server.start()
        self._open = True
        try:
            service = build_scheduler_service(self.server, self._schedules, clock=self.clock)
            await service.start()
            self._service = service
            self._skip = TimeSkipper(self.server, self.clock, service)
            self._app = App(self.server.url)
        except BaseException:
            await self.close()
            raise
        return self

    async def close(self) -> None:
        """Stop everything (scheduled runs drain on virtual time, as
        :meth:`TimeSkipper <wf.testing.timeskip.TimeSkipper>` describes) and remove a
        temporary store. Idempotent."""
        try:
            if self._app is not None:
                await self._app.close()
                self._app = None
            if self._open:
                self._open = False
                await self.server.stop()
        finally:
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None

    async def __aenter__(self) -> WorkflowEnvironment:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------ parts

    @property
    def api(self) -> LocalApi:
        """The server's in-process Python API, as the local administrator
        (``env.api.start_run(...)``, ``env.api.schedules.create_schedule(...)``)."""
        return self.server.api

    @property
    def app(self) -> App:
        """An :class:`~wf.client.app.App` client of this server over loopback: the
        client your code uses against a real server."""
        if self._app is None:
            raise Conflict("the environment is not started")
        return self._app

    @property
    def skip(self) -> TimeSkipper:
        """The time skipper: the one thing that moves :attr:`clock`."""
        if self._skip is None:
            raise Conflict("the environment is not started")
        return self._skip

    @property
    def service(self) -> ScheduleService:
        """The schedule service (running its own loop, as on a server)."""
        if self._service is None:
            raise Conflict("the environment is not started")
        return self._service

    def now(self) -> datetime:
        """The virtual time, as an aware UTC ``datetime``."""
        return self.clock.wall()

    # ------------------------------------------------------------ helpers

    async def advance_to(self, t: datetime | float) -> int:
        """Skip to ``t`` (see :meth:`TimeSkipper.advance_to
        <wf.testing.timeskip.TimeSkipper.advance_to>`); returns the jumps made."""
        return await self.skip.advance_to(t)

    async def advance(self, seconds: float) -> int:
        """Skip ``seconds`` of virtual time ahead."""
        return await self.skip.advance(seconds)

    async def deploy(
        self,
        plan: Mapping[str, Any] | Plan | Flow,
        *,
        name: str | None = None,
        version: int = 1,
        deployment: Mapping[str, Any] | None = None,
    ) -> str:
        """Create artifact ``name`` version ``version`` from ``plan`` and deploy it;
        returns the deployment id (``<name>.default`` unless ``deployment`` names
        one). ``plan`` is a plan (JSON builtins or a :class:`Plan`) or a
        :class:`~wf.flow.Flow` built with ``@flow.workflow``, published as
        ``wf deploy`` does (its plan; ``name`` defaults to its ``artifact_id``, else
        to ``"flow"``). ``deployment``: further fields of the deployment body
        (``default_inputs``, ``name`` ...)."""
        body: Mapping[str, Any] | Plan
        if isinstance(plan, Flow):
            body, name = plan.to_builtins(), name or plan.artifact_id
        else:
            body = plan if isinstance(plan, Plan) else dict(plan)
        name = name or "flow"
        await self.api.create_artifact_from_plan(name, version, body)
        saved = await self.api.save_deployment(
            {"artifact_id": name, "artifact_version": version, **(deployment or {})}
        )
        return saved.deployment_id

    async def start_run(self, deployment_id: str, inputs: Mapping[str, Any] | None = None) -> str:
        """Start a run of ``deployment_id``; returns its run id (time stands still)."""
        view = await self.api.start_run(deployment_id, None if inputs is None else dict(inputs))
        return view.run_id

    async def wait_for_run(self, run_id: str, *, within_s: float | None = None) -> RunView:
        """Skip time until the run stops; returns its view (as ``inspect_run``).

        A run stops when it is final or ``interrupted`` (waiting for an answer,
        :data:`~wf.client.app.STOPPED_RUN_STATUSES`). Time moves from due instant to
        due instant, only as far as the run needs. :class:`TimeoutError` if it has
        not stopped ``within_s`` virtual seconds from now (``None``: no bound), and
        :class:`~wf.errors.Conflict` if nothing is due any more while it has not
        stopped (it would wait forever on a real server too).
        """
        deadline = None if within_s is None else self.clock.now() + within_s
        skip = self.skip
        while True:
            await skip.settle()
            view = await self.api.inspect_run(run_id)
            status = view.status
            if status in STOPPED_RUN_STATUSES:
                return view
            due = skip.next_due()
            if due is None:
                raise Conflict(
                    f"run {run_id} is {status} and nothing is due: it would never stop",
                    run_id=run_id,
                    status=status,
                )
            if deadline is not None and due > deadline:
                await skip.advance_to(deadline)
                raise TimeoutError(f"run {run_id} is still {status} after {within_s} virtual s")
            await skip.advance_to(due)

    async def run(
        self,
        deployment_id: str,
        inputs: Mapping[str, Any] | None = None,
        *,
        within_s: float | None = None,
    ) -> RunView:
        """Start a run and skip time until it stops (:meth:`wait_for_run`); returns
        its view: ``status``, ``output``, ``trace``, ``started_at`` ..."""
        return await self.wait_for_run(
            await self.start_run(deployment_id, inputs), within_s=within_s
        )

    async def occurrences(self, schedule_id: str) -> list[OccurrenceView]:
        """Every recorded occurrence of a schedule, oldest first (all pages)."""
        found: list[OccurrenceView] = []
        cursor: str | None = None
        while True:
            page = await self.api.schedules.list_schedule_occurrences(
                schedule_id=schedule_id, limit=100, cursor=cursor
            )
            found += page.occurrences
            cursor = page.next_cursor
            if cursor is None:
                return found
