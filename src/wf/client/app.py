"""The admin client: the server's Python API, method for method, over JSON-RPC.

Theory of operation
-------------------
Every method of :class:`App` is the *twin* of a method of the server's
Python API (``WfServer.scheduler``, a
:class:`~wf.server.scheduler_api.SchedulerAPI`): the same name, the same
parameters (minus the server-side ``caller``), the same result type and the
same errors. What makes a method a twin is one row of a table
(:data:`SCHEDULER_TWINS`): Python name → JSON-RPC name, the server's
parameter Struct, the type the result decodes into, and the key under which
the wire wraps a scalar result. Each method body is one call to the generic
path :meth:`App._call`, which builds the parameter Struct (so the wire form
is exactly what the server decodes), sends it through
:class:`~wf.client.rpc_client.RpcClient` (which raises the typed
:class:`~wf.errors.WfError` named by ``error.data.code``), unwraps and
``msgspec.convert`` s the result.

Extending: :data:`WORKFLOW_TWINS` holds the ``workflow.*`` methods (the
runtime's :class:`~wf.runtime.api.WorkflowAPI`); later tables are merged into
:attr:`App.TWINS` the same way, with one typed one-line method per row;
``tests/client/test_app_wire.py`` checks that every method in the server's
registry has a row, that each row's parameter Struct is the one the server
registered, and that each twin behaves over the wire like the Python API.

:class:`SyncApp` runs the same coroutines on a private event loop for
scripts and the CLI.
"""

# The twin table carries each result type and _call decodes into it, so the
# typed one-line methods return what _call gives back (typed Any for mypy).
# mypy: disable-error-code="no-any-return"

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Self, TypeVar

import msgspec

from wf.client.rpc_client import RpcClient
from wf.runtime.artifacts import Artifact
from wf.runtime.deployments import Deployment
from wf.runtime.plan import Plan
from wf.scheduler.model import Activity, HeartbeatStats, WorkerInfo
from wf.scheduler.outputs import LeaseRevoked, Transition
from wf.server.scheduler_api import (
    ActivityIdParams,
    ActivityView,
    CancelParams,
    CompleteParams,
    FailParams,
    FencedParams,
    HeartbeatParams,
    NoParams,
    PollParams,
    PollResult,
    QueueStats,
    RegisterResult,
    RegisterWorkerParams,
    SubmitParams,
    WorkerIdParams,
    WorkerView,
)
from wf.server.workflow_rpc import (
    CreateArtifactParams,
    DeploymentIdParams,
    GetArtifactParams,
    ListArtifactsParams,
    SaveDeploymentParams,
)

R = TypeVar("R")

_NO_STATS: Final = HeartbeatStats()


@dataclass(frozen=True, slots=True, kw_only=True)
class Twin:
    """One row of the twin table: how a Python method travels over JSON-RPC."""

    rpc: str
    """The JSON-RPC method name."""
    params: type[msgspec.Struct]
    """The parameter Struct the server registered for it."""
    result: Any
    """The type the result decodes into; ``None`` when the method returns nothing."""
    unwrap: str | None = None
    """Key of the wire's result object that holds the Python API's result."""

    def decode(self, raw: Any) -> Any:
        """The Python API's result from the wire's."""
        if self.result is None:
            return None
        if self.unwrap is not None:
            raw = raw[self.unwrap]
        return msgspec.convert(raw, self.result)


class MethodInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of ``rpc.discover``."""

    name: str
    """The JSON-RPC method name."""
    summary: str
    """One line on what it does."""
    access: str
    """What it needs: ``worker``, ``read``, ``operate`` or ``admin``."""
    params: dict[str, Any]
    """JSON Schema of its parameters."""


SCHEDULER_TWINS: Final[Mapping[str, Twin]] = {
    "register_worker": Twin(
        rpc="scheduler.workers.register", params=RegisterWorkerParams, result=RegisterResult
    ),
    "heartbeat": Twin(
        rpc="scheduler.workers.heartbeat",
        params=HeartbeatParams,
        result=list[LeaseRevoked],
        unwrap="revoked",
    ),
    "poll": Twin(rpc="scheduler.workers.poll", params=PollParams, result=PollResult),
    "shutdown_worker": Twin(
        rpc="scheduler.workers.shutdown", params=WorkerIdParams, result=int, unwrap="returned"
    ),
    "start_activity": Twin(rpc="scheduler.leases.start", params=FencedParams, result=None),
    "renew_lease": Twin(
        rpc="scheduler.leases.renew", params=FencedParams, result=float, unwrap="expires_at"
    ),
    "complete_activity": Twin(rpc="scheduler.leases.complete", params=CompleteParams, result=None),
    "fail_activity": Twin(rpc="scheduler.leases.fail", params=FailParams, result=None),
    "submit_activities": Twin(
        rpc="scheduler.activities.submit",
        params=SubmitParams,
        result=list[str],
        unwrap="activity_ids",
    ),
    "cancel_activity": Twin(rpc="scheduler.activities.cancel", params=CancelParams, result=None),
    "get_activity": Twin(
        rpc="scheduler.activities.get", params=ActivityIdParams, result=ActivityView
    ),
    "activity_history": Twin(
        rpc="scheduler.activities.history", params=ActivityIdParams, result=list[Transition]
    ),
    "list_workers": Twin(rpc="scheduler.workers.list", params=NoParams, result=list[WorkerView]),
    "queue_stats": Twin(rpc="scheduler.queue.stats", params=NoParams, result=QueueStats),
}
"""``scheduler.*``: Python name (as on ``SchedulerAPI``) → wire form."""

WORKFLOW_TWINS: Final[Mapping[str, Twin]] = {
    "create_artifact_from_plan": Twin(
        rpc="workflow.artifacts.create", params=CreateArtifactParams, result=Artifact
    ),
    "get_artifact": Twin(rpc="workflow.artifacts.get", params=GetArtifactParams, result=Artifact),
    "list_artifacts": Twin(
        rpc="workflow.artifacts.list", params=ListArtifactsParams, result=list[Artifact]
    ),
    "save_deployment": Twin(
        rpc="workflow.deployments.save", params=SaveDeploymentParams, result=Deployment
    ),
    "get_deployment": Twin(
        rpc="workflow.deployments.get", params=DeploymentIdParams, result=Deployment
    ),
    "list_deployments": Twin(
        rpc="workflow.deployments.list", params=NoParams, result=list[Deployment]
    ),
}
"""``workflow.*``: Python name (as on ``WorkflowAPI``) → wire form."""

RPC_TWINS: Final[Mapping[str, Twin]] = {
    "discover": Twin(rpc="rpc.discover", params=NoParams, result=list[MethodInfo]),
}
"""``rpc.*``: the server's own methods."""


class App:
    """The async admin client (see the module docstring).

    ``async with App("http://127.0.0.1:8765", token=...) as app: ...``; with
    several URLs it fails over between nodes. Errors are the server's typed
    :class:`~wf.errors.WfError` subclasses; an unreachable server raises
    :class:`~wf.errors.RpcUnavailable`.
    """

    TWINS: ClassVar[Mapping[str, Twin]] = {**SCHEDULER_TWINS, **WORKFLOW_TWINS, **RPC_TWINS}
    """Every twin this client has, by Python method name."""

    def __init__(
        self,
        url_or_urls: str | Sequence[str],
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.rpc = RpcClient(url_or_urls, token=token, ssl_context=ssl_context)
        """The transport, for batches and raw calls."""

    @staticmethod
    def sync(
        url_or_urls: str | Sequence[str],
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> SyncApp:
        """A blocking facade over a new client (for scripts and the CLI)."""
        return SyncApp(url_or_urls, token=token, ssl_context=ssl_context)

    async def close(self) -> None:
        """Close the connections."""
        await self.rpc.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, name: str, **params: Any) -> Any:
        """The one call path: build the server's params Struct, call, decode."""
        twin = self.TWINS[name]
        wire = msgspec.to_builtins(twin.params(**params))
        return twin.decode(await self.rpc.call(twin.rpc, wire))

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

    async def activity_history(self, activity_id: str) -> list[Transition]:
        """Every transition of an activity, oldest first."""
        return await self._call("activity_history", activity_id=activity_id)

    async def list_workers(self) -> list[WorkerView]:
        """Every known worker."""
        return await self._call("list_workers")

    async def queue_stats(self) -> QueueStats:
        """Queue depth, capacity and backpressure."""
        return await self._call("queue_stats")

    async def discover(self) -> list[MethodInfo]:
        """Every method of the server with its parameter JSON Schema."""
        return await self._call("discover")

    # --------------------------------------------------------- workflow calls

    async def create_artifact_from_plan(
        self, artifact_id: str, version: int, plan: dict[str, Any] | Plan
    ) -> Artifact:
        """Create an immutable artifact version (idempotent by content)."""
        return await self._call(
            "create_artifact_from_plan", artifact_id=artifact_id, version=version, plan=plan
        )

    async def get_artifact(self, artifact_id: str, version: int | None = None) -> Artifact:
        """One artifact version (default: the highest)."""
        return await self._call("get_artifact", artifact_id=artifact_id, version=version)

    async def list_artifacts(self, artifact_id: str | None = None) -> list[Artifact]:
        """Artifact versions, by id then version."""
        return await self._call("list_artifacts", artifact_id=artifact_id)

    async def save_deployment(
        self, body: dict[str, Any], expected_revision: int | None = None
    ) -> Deployment:
        """Create or update a deployment; returns it as saved."""
        return await self._call("save_deployment", body=body, expected_revision=expected_revision)

    async def get_deployment(self, deployment_id: str) -> Deployment:
        """One deployment."""
        return await self._call("get_deployment", deployment_id=deployment_id)

    async def list_deployments(self) -> list[Deployment]:
        """Every deployment the caller may see."""
        return await self._call("list_deployments")

    # ----------------------------------------------------------- worker calls

    async def register_worker(self, info: WorkerInfo) -> RegisterResult:
        """Register (or renew the registration of) a worker."""
        return await self._call("register_worker", info=info)

    async def heartbeat(
        self, worker_id: str, stats: HeartbeatStats = _NO_STATS
    ) -> list[LeaseRevoked]:
        """Record a heartbeat; returns revocations the worker must act on."""
        return await self._call("heartbeat", worker_id=worker_id, stats=stats)

    async def poll(self, worker_id: str, max_items: int = 1, wait_s: float = 20.0) -> PollResult:
        """Long poll: up to ``max_items`` leases, waiting at most ``wait_s`` seconds."""
        return await self._call("poll", worker_id=worker_id, max_items=max_items, wait_s=wait_s)

    async def shutdown_worker(self, worker_id: str) -> int:
        """Graceful shutdown; returns how many unstarted leases went back to the queue."""
        return await self._call("shutdown_worker", worker_id=worker_id)

    async def start_activity(self, activity_id: str, token: int) -> None:
        """The lease holder began executing."""
        await self._call("start_activity", activity_id=activity_id, token=token)

    async def renew_lease(self, activity_id: str, token: int) -> float:
        """Extend a lease; returns its new expiry."""
        return await self._call("renew_lease", activity_id=activity_id, token=token)

    async def complete_activity(self, activity_id: str, token: int, result: bytes = b"") -> None:
        """Record the result (fenced by ``token``)."""
        await self._call("complete_activity", activity_id=activity_id, token=token, result=result)

    async def fail_activity(
        self,
        activity_id: str,
        token: int,
        error_type: str = "Error",
        message: str = "",
        retryable: bool = True,
    ) -> None:
        """Record a failed attempt (fenced by ``token``)."""
        await self._call(
            "fail_activity",
            activity_id=activity_id,
            token=token,
            error_type=error_type,
            message=message,
            retryable=retryable,
        )


class SyncApp:
    """:class:`App` for blocking code: each call runs on a private event loop.

    ``with App.sync(url) as app: app.queue_stats()``. Every twin of
    :attr:`App.TWINS` is available by name (untyped); :meth:`run` runs any
    coroutine of the client with its type kept. Not for use inside a running
    event loop (use :class:`App` there).
    """

    def __init__(
        self,
        url_or_urls: str | Sequence[str],
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self.app = App(url_or_urls, token=token, ssl_context=ssl_context)
        """The async client underneath (its session lives on the private loop)."""

    def run(self, call: Callable[[App], Awaitable[R]]) -> R:
        """``call(app)`` run to completion: ``sync.run(lambda a: a.get_activity(i))``."""

        async def main() -> R:
            return await call(self.app)

        return self._loop.run_until_complete(main())

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in App.TWINS:
            raise AttributeError(name)
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
