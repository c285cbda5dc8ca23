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
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from wf.activities import BUILTIN_ACTIVITIES
from wf.clock import Clock
from wf.errors import Conflict
from wf.runtime.api import ArtifactPage, DeploymentPage, WorkflowAPI
from wf.runtime.artifacts import Artifact
from wf.runtime.deployments import Deployment
from wf.runtime.plan import Plan
from wf.scheduler.config import SchedulerConfig
from wf.schedules.api import ScheduleAPI
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.server.scheduler_api import SchedulerAPI
from wf.worker import ActivityDefinition, Worker


@dataclass(frozen=True, slots=True)
class LocalApi:
    """The Python API of a local server (``server.api``).

    The workflow calls are also reachable directly (``server.api.save_deployment``,
    as docs/workflows.md writes them); they act as the local administrator.
    """

    scheduler: SchedulerAPI
    """``server.api.scheduler``: workers, activities, leases."""
    workflow: WorkflowAPI
    """``server.api.workflow``: artifacts, deployments and runs."""
    schedules_api: ScheduleAPI | None = None

    @property
    def schedules(self) -> LocalSchedules:
        """``server.api.schedules``: deployment schedules as the local administrator
        (Conflict unless the server was built with ``schedules=True``)."""
        if self.schedules_api is None:
            raise Conflict("build the local server with schedules=True to use schedules")
        return LocalSchedules(self.schedules_api)

    async def create_artifact_from_plan(
        self, artifact_id: str, version: int, plan: Plan | dict[str, Any]
    ) -> Artifact:
        """:meth:`WorkflowAPI.create_artifact_from_plan` as the local administrator."""
        return await self.workflow.create_artifact_from_plan(
            artifact_id, version, plan, caller=ANONYMOUS_ADMIN
        )

    async def get_artifact(self, artifact_id: str, version: int | None = None) -> Artifact:
        """:meth:`WorkflowAPI.get_artifact` as the local administrator."""
        return await self.workflow.get_artifact(artifact_id, version, caller=ANONYMOUS_ADMIN)

    async def list_artifacts(
        self, artifact_id: str | None = None, *, limit: int = 50, cursor: str | None = None
    ) -> ArtifactPage:
        """:meth:`WorkflowAPI.list_artifacts` as the local administrator."""
        return await self.workflow.list_artifacts(
            artifact_id, caller=ANONYMOUS_ADMIN, limit=limit, cursor=cursor
        )

    async def save_deployment(
        self, body: dict[str, Any], expected_revision: int | None = None
    ) -> Deployment:
        """:meth:`WorkflowAPI.save_deployment` as the local administrator."""
        return await self.workflow.save_deployment(body, expected_revision, caller=ANONYMOUS_ADMIN)

    async def get_deployment(self, deployment_id: str) -> Deployment:
        """:meth:`WorkflowAPI.get_deployment` as the local administrator."""
        return await self.workflow.get_deployment(deployment_id, caller=ANONYMOUS_ADMIN)

    async def list_deployments(
        self, *, limit: int = 50, cursor: str | None = None
    ) -> DeploymentPage:
        """:meth:`WorkflowAPI.list_deployments` as the local administrator."""
        return await self.workflow.list_deployments(
            caller=ANONYMOUS_ADMIN, limit=limit, cursor=cursor
        )

    async def start_run(
        self, deployment_id: str, inputs: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """:meth:`WorkflowAPI.start_run` as the local administrator."""
        return await self.workflow.start_run(deployment_id, inputs, caller=ANONYMOUS_ADMIN)

    async def inspect_run(self, run_id: str) -> dict[str, Any]:
        """:meth:`WorkflowAPI.inspect_run` as the local administrator."""
        return await self.workflow.inspect_run(run_id, caller=ANONYMOUS_ADMIN)

    async def list_runs(
        self,
        *,
        deployment_id: str | None = None,
        schedule_id: str | None = None,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """:meth:`WorkflowAPI.list_runs` as the local administrator."""
        return await self.workflow.list_runs(
            caller=ANONYMOUS_ADMIN,
            deployment_id=deployment_id,
            schedule_id=schedule_id,
            status=status,
            limit=limit,
            cursor=cursor,
        )

    async def resume_run(
        self, run_id: str, answer: Any, node_id: str | None = None
    ) -> dict[str, Any]:
        """:meth:`WorkflowAPI.resume_run` as the local administrator."""
        return await self.workflow.resume_run(run_id, answer, node_id, caller=ANONYMOUS_ADMIN)

    async def cancel_run(self, run_id: str, reason: str = "") -> dict[str, Any]:
        """:meth:`WorkflowAPI.cancel_run` as the local administrator."""
        return await self.workflow.cancel_run(run_id, reason, caller=ANONYMOUS_ADMIN)


@dataclass(frozen=True, slots=True)
class LocalSchedules:
    """:class:`~wf.schedules.api.ScheduleAPI` as the local administrator (keyword calls,
    as 004's examples write them)."""

    api: ScheduleAPI

    async def create_schedule(
        self, *, schedule_id: str, deployment_id: str, trigger: dict[str, Any], **options: Any
    ) -> dict[str, Any]:
        """:meth:`ScheduleAPI.create_schedule`."""
        return await self.api.create_schedule(
            schedule_id, deployment_id, trigger, caller=ANONYMOUS_ADMIN, **options
        )

    async def get_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        """:meth:`ScheduleAPI.get_schedule`."""
        return await self.api.get_schedule(schedule_id, caller=ANONYMOUS_ADMIN)

    async def list_schedules(
        self, *, include_deleted: bool = False, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """:meth:`ScheduleAPI.list_schedules`."""
        return await self.api.list_schedules(
            caller=ANONYMOUS_ADMIN, include_deleted=include_deleted, limit=limit, cursor=cursor
        )

    async def update_schedule(
        self, *, schedule_id: str, expected_revision: int, **changes: Any
    ) -> dict[str, Any]:
        """:meth:`ScheduleAPI.update_schedule`."""
        return await self.api.update_schedule(
            schedule_id, expected_revision, caller=ANONYMOUS_ADMIN, **changes
        )

    async def pause_schedule(
        self, *, schedule_id: str, reason: str | None = None
    ) -> dict[str, Any]:
        """:meth:`ScheduleAPI.pause_schedule`."""
        return await self.api.pause_schedule(schedule_id, caller=ANONYMOUS_ADMIN, reason=reason)

    async def resume_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        """:meth:`ScheduleAPI.resume_schedule`."""
        return await self.api.resume_schedule(schedule_id, caller=ANONYMOUS_ADMIN)

    async def delete_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        """:meth:`ScheduleAPI.delete_schedule`."""
        return await self.api.delete_schedule(schedule_id, caller=ANONYMOUS_ADMIN)

    async def list_schedule_occurrences(
        self, *, schedule_id: str, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """:meth:`ScheduleAPI.list_schedule_occurrences`."""
        return await self.api.list_schedule_occurrences(
            schedule_id, caller=ANONYMOUS_ADMIN, limit=limit, cursor=cursor
        )

    async def preview_schedule(self, *, schedule_id: str, count: int = 5) -> list[dict[str, Any]]:
        """:meth:`ScheduleAPI.preview_schedule`."""
        return await self.api.preview_schedule(schedule_id, caller=ANONYMOUS_ADMIN, count=count)

    async def trigger_schedule(self, *, schedule_id: str) -> dict[str, Any]:
        """:meth:`ScheduleAPI.trigger_schedule`."""
        return await self.api.trigger_schedule(schedule_id, caller=ANONYMOUS_ADMIN)


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
        self._worker_count = workers
        self._max_concurrency = max_concurrency
        self.workers: list[Worker] = []
        self._tasks: list[asyncio.Task[None]] = []

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
            )
            self.workers.append(worker)
            self._tasks.append(asyncio.create_task(worker.run(), name=f"wf-local-worker-{index}"))

    async def stop(self) -> None:
        """Drain scheduled runs while the workers can still finish them, then the
        workers, then the server."""
        if self.server.schedule_service is not None:
            await self.server.schedule_service.stop()
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
    ``clock`` replaces the system clock (a virtual clock for time-skipping tests).
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
