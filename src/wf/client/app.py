"""The admin client: the server's Python API, method for method, over JSON-RPC.

Theory of operation
-------------------
Every method of :class:`App` is the *twin* of a method of the server's
Python API (``WfServer.scheduler``, a
:class:`~wf.server.scheduler_api.SchedulerAPI`): the same name, the same
parameters (minus the server-side ``caller``), the same result type and the
same errors. What makes a method a twin is its declaration in the wire
contract (:class:`~wf.wire.methods.MethodSpec`, gathered in
:mod:`wf.wire.contract`): its ``python_name`` is the twin's name, and it
names the JSON-RPC method, the parameter Struct the server decodes, the
type the result decodes into and the key under which the wire wraps a
scalar result. Each method body is one call to the generic path
:meth:`App._call`, which builds the parameter Struct (so the wire form is
exactly what the server decodes), sends it through
:class:`~wf.client.rpc_client.RpcClient` (which raises the typed
:class:`~wf.errors.WfError` named by ``error.data.code``), unwraps and
``msgspec.convert`` s the result.

The twin tables are generated from the contract: :data:`SCHEDULER_TWINS`
(``scheduler.*``), :data:`WORKFLOW_TWINS` (``workflow.*``, the runtime's
:class:`~wf.runtime.api.WorkflowAPI`) and :data:`SCHEDULE_TWINS`
(``workflow.schedules.*``, :class:`~wf.schedules.api.ScheduleAPI`; their
twins keep its parameter kinds: ids positional, options keyword-only), merged
into :attr:`App.TWINS`, with one typed one-line method per declaration;
``tests/client/test_app_wire.py`` checks that every method in the server's
registry has a twin, that each twin's parameter Struct is the one the
server registered, and that each twin behaves over the wire like the Python
API. The client imports the wire contract only, never the server, the
runtime or the store (``tests/test_import_layers.py``).

:class:`SyncApp` runs the same coroutines on a private event loop for
scripts and the CLI.

Both take one server URL or several (a list, or comma-separated): the
transport follows the active node of a cluster and retries within a
failover budget (see :mod:`wf.client.rpc_client`, which also says why a
retried call is never applied twice). The two calls that would otherwise
start something twice, :meth:`App.start_run` and
:meth:`App.trigger_schedule`, carry a ``request_id``: the caller's, or one
drawn per logical call (uuid4 hex) and kept across the transport's retries,
so a start retried after a lost answer returns the run it started.
"""

# The twin table carries each result type and _call decodes into it, so the
# typed one-line methods return what _call gives back (typed Any for mypy).
# mypy: disable-error-code="no-any-return"

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import (
    Any,
    ClassVar,
    Concatenate,
    Final,
    Generic,
    ParamSpec,
    Self,
    TypeAlias,
    TypeVar,
    overload,
)

import msgspec

from wf.client.rpc_client import FAILOVER_TIMEOUT_S, LONG_POLL_MARGIN_S, RpcClient
from wf.errors import InvalidArgument
from wf.scheduler.model import Activity, HeartbeatStats, WorkerInfo
from wf.scheduler.outputs import LeaseRevoked
from wf.tuning import loop_factory
from wf.wire import cluster_methods, schedule_methods, scheduler_methods, workflow_methods
from wf.wire.cluster_methods import ClusterStatus
from wf.wire.methods import DISCOVER, WHOAMI, Identity, MethodSpec
from wf.wire.methods import MethodInfo as MethodInfo
from wf.wire.run_views import RunPage, RunView
from wf.wire.schedule_views import OccurrencePage, PreviewInstant, SchedulePage, ScheduleView
from wf.wire.scheduler_methods import (
    ActivityView,
    DispatchStats,
    HeldLease,
    PollResult,
    QueueStats,
    RegisterResult,
    ReportPoll,
    ReportResult,
    TransitionPage,
    WorkerPage,
)
from wf.wire.triggers import CronTrigger, OneShotTrigger
from wf.wire.workflow import Artifact, ArtifactPage, Deployment, DeploymentPage, Plan
from wf.wire.workflow_methods import RunCounts

R = TypeVar("R")
P = ParamSpec("P")

_NO_STATS: Final = HeartbeatStats()


Twin: TypeAlias = MethodSpec[Any]
"""One twin: the wire contract's declaration of the method (see the module docstring)."""


def _twins(specs: Iterable[MethodSpec[Any]]) -> Mapping[str, Twin]:
    return {spec.python_name: spec for spec in specs}


SCHEDULER_TWINS: Final[Mapping[str, Twin]] = _twins(scheduler_methods.METHODS)
"""``scheduler.*``: Python name (as on ``SchedulerAPI``) → declaration."""

WORKFLOW_TWINS: Final[Mapping[str, Twin]] = _twins(workflow_methods.METHODS)
"""``workflow.*``: Python name (as on ``WorkflowAPI``) → declaration."""

SCHEDULE_TWINS: Final[Mapping[str, Twin]] = _twins(schedule_methods.METHODS)
"""``workflow.schedules.*``: Python name (as on ``ScheduleAPI``) → declaration."""

RPC_TWINS: Final[Mapping[str, Twin]] = _twins([DISCOVER, WHOAMI, *cluster_methods.METHODS])
"""``rpc.*`` and ``cluster.*``: the server's own methods."""


STOPPED_RUN_STATUSES: Final = frozenset(
    {"completed", "failed", "exhausted", "cancelled", "interrupted"}
)
"""Statuses :meth:`App.wait_for_run` returns at: final, or waiting for an answer."""
WAIT_POLL_MIN_S: Final = 0.05
WAIT_POLL_MAX_S: Final = 1.0


async def wait_for_run(
    inspect: Callable[[str], Awaitable[RunView]],
    run_id: str,
    # A parameter rather than asyncio.timeout: the last view is fetched, and the
    # error names the status the run is still in, which a cancelled poll cannot.
    timeout: float | None,  # noqa: ASYNC109
) -> RunView:
    """Poll ``inspect(run_id)`` until the run's status is in :data:`STOPPED_RUN_STATUSES`
    (the one loop behind :meth:`App.wait_for_run` and the local server's twin)."""
    if timeout is not None and not timeout >= 0:  # NaN too: it compared as "no deadline"
        raise InvalidArgument("timeout must be >= 0", field="timeout")
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    pause = WAIT_POLL_MIN_S
    while True:
        view = await inspect(run_id)
        if view.status in STOPPED_RUN_STATUSES or "corrupt" in view:
            return view
        if deadline is not None:
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError(f"run {run_id} is still {view.status} after {timeout} s")
            pause = min(pause, left)
        await asyncio.sleep(pause)
        pause = min(pause * 2, WAIT_POLL_MAX_S)


def new_request_id() -> str:
    """A fresh request id: 32 hex digits, unique across clients and processes."""
    # uuid4 (banned in the deterministic core): a client's request ids must differ
    # from every other client's, with no coordination.
    return uuid.uuid4().hex  # noqa: TID251


class App:
    """The async admin client (see the module docstring).

    ``async with App("http://127.0.0.1:8765", token=...) as app: ...``; with
    several URLs (a list or ``"http://a:8765,http://b:8765"``) it follows the
    active node, retrying for at most ``failover_timeout_s`` after a call's
    first failure. Errors are the server's typed :class:`~wf.errors.WfError`
    subclasses; no server reachable within the budget raises
    :class:`~wf.errors.RpcUnavailable`, only standbys :class:`~wf.errors.NotLeader`.
    """

    TWINS: ClassVar[Mapping[str, Twin]] = {
        **SCHEDULER_TWINS,
        **WORKFLOW_TWINS,
        **SCHEDULE_TWINS,
        **RPC_TWINS,
    }
    """Every twin this client has, by Python method name."""

    def __init__(
        self,
        url_or_urls: str | Sequence[str],
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        failover_timeout_s: float = FAILOVER_TIMEOUT_S,
    ) -> None:
        self.rpc = RpcClient(
            url_or_urls,
            token=token,
            ssl_context=ssl_context,
            failover_timeout_s=failover_timeout_s,
        )
        """The transport, for batches and raw calls."""

    @staticmethod
    def sync(
        url_or_urls: str | Sequence[str],
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        failover_timeout_s: float = FAILOVER_TIMEOUT_S,
    ) -> SyncApp:
        """A blocking facade over a new client (for scripts and the CLI)."""
        return SyncApp(
            url_or_urls,
            token=token,
            ssl_context=ssl_context,
            failover_timeout_s=failover_timeout_s,
        )

    async def close(self) -> None:
        """Close the connections."""
        await self.rpc.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, name: str, *, timeout_s: float | None = None, **params: Any) -> Any:
        """The one call path: build the server's params Struct, call, decode."""
        twin = self.TWINS[name]
        wire = msgspec.to_builtins(twin.params(**params))
        return twin.decode(await self.rpc.call(twin.name, wire, timeout_s=timeout_s))

    # ------------------------------------------------------------ admin calls

    async def submit_activities(self, activities: list[Activity]) -> list[str]:
        """Submit activities; returns their ids once durable."""
        return await self._call("submit_activities", activities=activities)

    async def cancel_activity(self, activity_id: str, reason: str = "cancelled") -> None:
        """Cancel an unfinished activity."""
        await self._call("cancel_activity", activity_id=activity_id, reason=reason)

    async def get_activity(self, activity_id: str) -> ActivityView:
        """An activity's current state."""
        return await self._call("get_activity", activity_id=activity_id)

    async def activity_history(
        self, activity_id: str, limit: int = 50, cursor: str | None = None
    ) -> TransitionPage:
        """A page of an activity's transitions, oldest first, with ``next_cursor``."""
        return await self._call(
            "activity_history", activity_id=activity_id, limit=limit, cursor=cursor
        )

    async def list_workers(self, limit: int = 50, cursor: str | None = None) -> WorkerPage:
        """A page of the known workers in registration order, with ``next_cursor``."""
        return await self._call("list_workers", limit=limit, cursor=cursor)

    async def queue_stats(self) -> QueueStats:
        """Queue depth, capacity and backpressure."""
        return await self._call("queue_stats")

    async def dispatch_stats(self) -> DispatchStats:
        """Queue depth by partition and lane, dispatch counters, latency, workers."""
        return await self._call("dispatch_stats")

    async def whoami(self) -> Identity:
        """The calling credential's name, role and tenants."""
        return await self._call("whoami")

    async def discover(self) -> dict[str, Any]:
        """The server's OpenRPC document: every method with its parameters, result and
        errors, each described by a JSON Schema (``document["methods"]``)."""
        return await self._call("discover")

    async def cluster_status(self) -> ClusterStatus:
        """The answering node's role, the active's URL and every node (docs/ha.md)."""
        return await self._call("cluster_status")

    # --------------------------------------------------------- workflow calls

    async def create_artifact_from_plan(
        self, artifact_id: str, version: int, plan: dict[str, Any] | Plan
    ) -> Artifact:
        """Create an immutable artifact version (idempotent by content).

        ``plan`` is its JSON document or a :class:`~wf.wire.workflow.Plan` (sent as the
        same JSON, so both create the same content hash)."""
        if isinstance(plan, Plan):
            # to_builtins keeps tuples, which the wire's JSON-value bounds refuse.
            plan = msgspec.json.decode(msgspec.json.encode(plan))
        return await self._call(
            "create_artifact_from_plan", artifact_id=artifact_id, version=version, plan=plan
        )

    async def get_artifact(self, artifact_id: str, version: int | None = None) -> Artifact:
        """One artifact version (default: the highest)."""
        return await self._call("get_artifact", artifact_id=artifact_id, version=version)

    async def list_artifacts(
        self, artifact_id: str | None = None, *, limit: int = 50, cursor: str | None = None
    ) -> ArtifactPage:
        """A page of artifact versions, by id then version, with ``next_cursor``."""
        return await self._call(
            "list_artifacts", artifact_id=artifact_id, limit=limit, cursor=cursor
        )

    async def save_deployment(
        self, body: dict[str, Any], expected_revision: int | None = None
    ) -> Deployment:
        """Create or update a deployment; returns it as saved."""
        return await self._call("save_deployment", body=body, expected_revision=expected_revision)

    async def get_deployment(self, deployment_id: str) -> Deployment:
        """One deployment."""
        return await self._call("get_deployment", deployment_id=deployment_id)

    async def list_deployments(
        self, *, limit: int = 50, cursor: str | None = None
    ) -> DeploymentPage:
        """A page of the deployments the caller may see, by id, with ``next_cursor``."""
        return await self._call("list_deployments", limit=limit, cursor=cursor)

    async def start_run(
        self,
        deployment_id: str,
        inputs: dict[str, Any] | None = None,
        *,
        request_id: str | None = None,
    ) -> RunView:
        """Start a run of a deployment; returns its view. A repeated ``request_id``
        returns the run it started (default: one drawn for this call, kept across
        the transport's retries)."""
        return await self._call(
            "start_run",
            deployment_id=deployment_id,
            inputs=inputs,
            request_id=request_id if request_id is not None else new_request_id(),
        )

    async def inspect_run(self, run_id: str) -> RunView:
        """A run's status, inputs, trace, output and checkpoint."""
        return await self._call("inspect_run", run_id=run_id)

    async def list_runs(
        self,
        *,
        deployment_id: str | None = None,
        schedule_id: str | None = None,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        newest_first: bool = False,
        created_after: float | None = None,
        created_before: float | None = None,
    ) -> RunPage:
        """A page of runs, oldest first (or newest first), with ``next_cursor``."""
        return await self._call(
            "list_runs",
            deployment_id=deployment_id,
            schedule_id=schedule_id,
            status=status,
            limit=limit,
            cursor=cursor,
            newest_first=newest_first,
            created_after=created_after,
            created_before=created_before,
        )

    async def count_runs(self, window_s: float = 3600.0) -> RunCounts:
        """Runs created in the last ``window_s`` seconds, by status."""
        return await self._call("count_runs", window_s=window_s)

    async def resume_run(self, run_id: str, answer: Any, node_id: str | None = None) -> RunView:
        """Answer a run's interrupt node."""
        return await self._call("resume_run", run_id=run_id, answer=answer, node_id=node_id)

    async def cancel_run(self, run_id: str, reason: str = "") -> RunView:
        """Cancel a run that has not stopped."""
        return await self._call("cancel_run", run_id=run_id, reason=reason)

    async def wait_for_run(self, run_id: str, timeout: float | None = None) -> RunView:  # noqa: ASYNC109
        """Wait until a run stops; returns its view (as :meth:`inspect_run`).

        A run stops when it is final (``completed``, ``failed``, ``exhausted``,
        ``cancelled``) or ``interrupted`` (only an answer can move it on). Polls with
        a growing interval (50 ms to 1 s); ``timeout`` (seconds, ``None``: no limit)
        passing first raises :class:`TimeoutError`.
        """
        return await wait_for_run(self.inspect_run, run_id, timeout)

    # --------------------------------------------------------- schedule calls

    async def create_schedule(
        self,
        schedule_id: str,
        deployment_id: str,
        trigger: dict[str, Any] | OneShotTrigger | CronTrigger,
        *,
        inputs: dict[str, Any] | None = None,
        overlap: str = "skip",
        max_active_runs: int | None = None,
        misfire: str = "skip",
        max_steps: int | None = None,
        note: str | None = None,
        misfire_lateness_s: float | None = None,
    ) -> ScheduleView:
        """Create a schedule (caller-chosen id, never reused); returns its definition."""
        return await self._call(
            "create_schedule",
            schedule_id=schedule_id,
            deployment_id=deployment_id,
            trigger=trigger,
            inputs=inputs,
            overlap=overlap,
            max_active_runs=max_active_runs,
            misfire=misfire,
            max_steps=max_steps,
            note=note,
            misfire_lateness_s=misfire_lateness_s,
        )

    async def get_schedule(self, schedule_id: str) -> ScheduleView:
        """A schedule's definition, admission state and counters (deleted ones too)."""
        return await self._call("get_schedule", schedule_id=schedule_id)

    async def list_schedules(
        self,
        *,
        include_deleted: bool = False,
        limit: int = 50,
        cursor: str | None = None,
        status: str | None = None,
    ) -> SchedulePage:
        """A page of the visible schedules by id: ``schedules`` and ``next_cursor``
        (deleted ones only when asked; ``status``: only those in that state)."""
        return await self._call(
            "list_schedules",
            include_deleted=include_deleted,
            limit=limit,
            cursor=cursor,
            status=status,
        )

    async def update_schedule(
        self,
        schedule_id: str,
        expected_revision: int,
        *,
        deployment_id: str | None = None,
        trigger: dict[str, Any] | OneShotTrigger | CronTrigger | None = None,
        inputs: dict[str, Any] | None = None,
        overlap: str | None = None,
        max_active_runs: int | None = None,
        misfire: str | None = None,
        max_steps: int | None = None,
        note: str | None = None,
        misfire_lateness_s: float | None = None,
    ) -> ScheduleView:
        """Change the given fields (``None``: unchanged) at ``expected_revision``."""
        return await self._call(
            "update_schedule",
            schedule_id=schedule_id,
            expected_revision=expected_revision,
            deployment_id=deployment_id,
            trigger=trigger,
            inputs=inputs,
            overlap=overlap,
            max_active_runs=max_active_runs,
            misfire=misfire,
            max_steps=max_steps,
            note=note,
            misfire_lateness_s=misfire_lateness_s,
        )

    async def pause_schedule(self, schedule_id: str, *, reason: str | None = None) -> ScheduleView:
        """Stop future admission (idempotent); an active run goes on."""
        return await self._call("pause_schedule", schedule_id=schedule_id, reason=reason)

    async def resume_schedule(self, schedule_id: str) -> ScheduleView:
        """Admit again from the next future instant (idempotent)."""
        return await self._call("resume_schedule", schedule_id=schedule_id)

    async def delete_schedule(self, schedule_id: str) -> ScheduleView:
        """Soft delete (idempotent): no admission; runs and history stay."""
        return await self._call("delete_schedule", schedule_id=schedule_id)

    async def list_schedule_occurrences(
        self, schedule_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> OccurrencePage:
        """A page of occurrences, oldest first: ``occurrences`` and ``next_cursor``."""
        return await self._call(
            "list_schedule_occurrences", schedule_id=schedule_id, limit=limit, cursor=cursor
        )

    async def preview_schedule(self, schedule_id: str, *, count: int = 5) -> list[PreviewInstant]:
        """The next ``count`` instants the trigger yields (UTC and wall time)."""
        return await self._call("preview_schedule", schedule_id=schedule_id, count=count)

    async def trigger_schedule(self, schedule_id: str, *, request_id: str | None = None) -> RunView:
        """Start one manual run now through the schedule's bindings; returns its view.
        A repeated ``request_id`` returns the run it started (default: one drawn for
        this call, kept across the transport's retries)."""
        return await self._call(
            "trigger_schedule",
            schedule_id=schedule_id,
            request_id=request_id if request_id is not None else new_request_id(),
        )

    # ----------------------------------------------------------- worker calls

    async def register_worker(
        self, info: WorkerInfo, held: list[HeldLease] | None = None
    ) -> RegisterResult:
        """Register (or renew the registration of) a worker, listing the leases it
        still holds (``None``: not said)."""
        return await self._call("register_worker", info=info, held=held)

    async def heartbeat(
        self, worker_id: str, stats: HeartbeatStats = _NO_STATS
    ) -> list[LeaseRevoked]:
        """Record a heartbeat; returns revocations the worker must act on."""
        return await self._call("heartbeat", worker_id=worker_id, stats=stats)

    async def poll(
        self, worker_id: str, max_items: int = 1, wait_s: float = 20.0, start: int = 0
    ) -> PollResult:
        """Long poll: up to ``max_items`` leases, waiting at most ``wait_s`` seconds; the
        first ``start`` grants of activities that may run again are started on grant."""
        return await self._call(
            "poll",
            timeout_s=wait_s + LONG_POLL_MARGIN_S,
            worker_id=worker_id,
            max_items=max_items,
            wait_s=wait_s,
            start=start,
        )

    async def shutdown_worker(self, worker_id: str) -> int:
        """Graceful shutdown; returns how many unstarted leases went back to the queue."""
        return await self._call("shutdown_worker", worker_id=worker_id)

    async def start_activity(self, activity_id: str, token: int) -> None:
        """The lease holder began executing."""
        await self._call("start_activity", activity_id=activity_id, token=token)

    async def renew_lease(
        self, activity_id: str, token: int, details: bytes | None = None
    ) -> float:
        """Extend a lease; returns its new expiry. ``details``: the attempt's latest
        heartbeat details (one JSON document, at most 64 KiB), kept with the activity."""
        return await self._call(
            "renew_lease", activity_id=activity_id, token=token, details=details
        )

    async def lease_details(self, activity_id: str, token: int) -> bytes | None:
        """The last heartbeat details an earlier attempt sent (fenced by ``token``)."""
        return await self._call("lease_details", activity_id=activity_id, token=token)

    async def complete_activity(
        self,
        activity_id: str,
        token: int,
        result: bytes = b"",
        unreported_start: bool = False,
        poll: ReportPoll | None = None,
    ) -> ReportResult:
        """Record the result (fenced by ``token``); ``unreported_start``: the start too
        (only for a grant with ``may_restart``); ``poll``: and take up to
        ``poll.max_items`` more leases for the holder now, in the same commit (the
        answer's ``leases``; see :class:`~wf.wire.scheduler_methods.ReportPoll`)."""
        return await self._call(
            "complete_activity",
            activity_id=activity_id,
            token=token,
            result=result,
            unreported_start=unreported_start,
            poll=poll,
        )

    async def fail_activity(
        self,
        activity_id: str,
        token: int,
        error_type: str = "Error",
        message: str = "",
        retryable: bool = True,
        unreported_start: bool = False,
        stack_trace: str = "",
        poll: ReportPoll | None = None,
    ) -> ReportResult:
        """Record a failed attempt (fenced by ``token``); ``unreported_start``: the start
        too (only for a grant with ``may_restart``); ``stack_trace`` is kept with the
        attempt (at most 16,384 characters, no NUL); ``poll``: as for
        :meth:`complete_activity`."""
        return await self._call(
            "fail_activity",
            activity_id=activity_id,
            token=token,
            error_type=error_type,
            message=message,
            retryable=retryable,
            unreported_start=unreported_start,
            stack_trace=stack_trace,
            poll=poll,
        )


class _Blocking(Generic[P, R]):
    """A method of :class:`App` as :class:`SyncApp` offers it: the same parameters and
    result type, run to completion on the facade's private loop."""

    def __init__(self, twin: Callable[Concatenate[App, P], Coroutine[Any, Any, R]]) -> None:
        self.name = twin.__name__
        self.__doc__ = twin.__doc__

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, obj: SyncApp, owner: type[Any]) -> Callable[P, R]: ...

    def __get__(self, obj: SyncApp | None, owner: type[Any]) -> Any:
        if obj is None:
            return self
        return obj._blocking(self.name)


class SyncApp:
    """:class:`App` for blocking code: each call runs on a private event loop.

    ``with App.sync(url) as app: app.queue_stats()``. Every twin of
    :attr:`App.TWINS` is available by name, typed as :class:`App`'s
    (``app.inspect_run(run_id)`` is a :class:`~wf.wire.run_views.RunView`). :meth:`run` runs any
    coroutine of the client with its type kept. Not for use inside a running
    event loop (use :class:`App` there).
    """

    create_artifact_from_plan = _Blocking(App.create_artifact_from_plan)
    get_artifact = _Blocking(App.get_artifact)
    list_artifacts = _Blocking(App.list_artifacts)
    save_deployment = _Blocking(App.save_deployment)
    get_deployment = _Blocking(App.get_deployment)
    list_deployments = _Blocking(App.list_deployments)
    start_run = _Blocking(App.start_run)
    inspect_run = _Blocking(App.inspect_run)
    list_runs = _Blocking(App.list_runs)
    count_runs = _Blocking(App.count_runs)
    resume_run = _Blocking(App.resume_run)
    cancel_run = _Blocking(App.cancel_run)
    create_schedule = _Blocking(App.create_schedule)
    get_schedule = _Blocking(App.get_schedule)
    list_schedules = _Blocking(App.list_schedules)
    update_schedule = _Blocking(App.update_schedule)
    pause_schedule = _Blocking(App.pause_schedule)
    resume_schedule = _Blocking(App.resume_schedule)
    delete_schedule = _Blocking(App.delete_schedule)
    list_schedule_occurrences = _Blocking(App.list_schedule_occurrences)
    preview_schedule = _Blocking(App.preview_schedule)
    trigger_schedule = _Blocking(App.trigger_schedule)
    submit_activities = _Blocking(App.submit_activities)
    cancel_activity = _Blocking(App.cancel_activity)
    get_activity = _Blocking(App.get_activity)
    activity_history = _Blocking(App.activity_history)
    list_workers = _Blocking(App.list_workers)
    queue_stats = _Blocking(App.queue_stats)
    dispatch_stats = _Blocking(App.dispatch_stats)
    discover = _Blocking(App.discover)
    whoami = _Blocking(App.whoami)
    cluster_status = _Blocking(App.cluster_status)
    register_worker = _Blocking(App.register_worker)
    heartbeat = _Blocking(App.heartbeat)
    poll = _Blocking(App.poll)
    shutdown_worker = _Blocking(App.shutdown_worker)
    start_activity = _Blocking(App.start_activity)
    renew_lease = _Blocking(App.renew_lease)
    lease_details = _Blocking(App.lease_details)
    complete_activity = _Blocking(App.complete_activity)
    fail_activity = _Blocking(App.fail_activity)

    def __init__(
        self,
        url_or_urls: str | Sequence[str],
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        failover_timeout_s: float = FAILOVER_TIMEOUT_S,
    ) -> None:
        # Built first: a bad URL raises before a loop exists that would need closing.
        app = App(
            url_or_urls,
            token=token,
            ssl_context=ssl_context,
            failover_timeout_s=failover_timeout_s,
        )
        # uvloop where installed (wf.tuning): a blocking caller pays the loop's own
        # cost on every call.
        self._loop = (loop_factory() or asyncio.new_event_loop)()
        self.app = app
        """The async client underneath (its session lives on the private loop)."""

    def run(self, call: Callable[[App], Awaitable[R]]) -> R:
        """``call(app)`` run to completion: ``sync.run(lambda a: a.get_activity(i))``."""

        async def main() -> R:
            return await call(self.app)

        return self._loop.run_until_complete(main())

    def wait_for_run(self, run_id: str, timeout: float | None = None) -> RunView:
        """:meth:`App.wait_for_run`, blocking."""
        return self.run(lambda a: a.wait_for_run(run_id, timeout))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in App.TWINS:
            raise AttributeError(name)
        return self._blocking(name)

    def _blocking(self, name: str) -> Callable[..., Any]:
        """The twin ``name`` of the async client, blocking."""
        method: Callable[..., Awaitable[Any]] = getattr(self.app, name)

        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self.run(lambda _: method(*args, **kwargs))

        blocking.__name__ = name
        blocking.__doc__ = method.__doc__
        return blocking

    def close(self) -> None:
        """Close the connections and the private loop."""
        if self._loop.is_closed():
            return
        try:
            self._loop.run_until_complete(self.app.close())
        finally:
            self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
