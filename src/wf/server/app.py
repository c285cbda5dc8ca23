"""The HTTP face of the server: JSON-RPC at ``POST /rpc``, health, metrics, TLS, lifecycle.

Theory of operation
-------------------
:class:`WfServer` assembles one process: the store named by the
configuration, a :class:`~wf.node.SchedulerNode` that owns it, the
:class:`~wf.server.scheduler_api.SchedulerAPI`, the
:class:`~wf.runtime.api.WorkflowAPI` (artifacts and deployments), a JSON-RPC
:class:`~wf.server.rpc.Registry` (plus ``rpc.discover``, the method listing
generated from the registry; the registry is built from the wire contract,
:mod:`wf.wire.contract`, and refuses to start unless every declared method
has a handler), and the routes of :mod:`wf.server.http_server`, a lean
HTTP/1.1 server on :mod:`httptools` (the C parser the worker SDK's and the
``App`` client's :mod:`wf.client.http1` uses too): every request is one of a
few small kinds, and the rules at the HTTP level are wf's own, so a general
web framework's machinery would only cost CPU on every call.

Authentication runs before the body is read: a bearer token
(``Authorization: Bearer ...``) or the TLS client certificate becomes a
:class:`~wf.server.rpc.Caller`; a request without a valid credential gets
HTTP 401 with a JSON-RPC error body. With mutual TLS required, the TLS
handshake itself refuses clients without a certificate signed by the
configured client CA.

The HTTP edge (:mod:`wf.server.http_edge`, settings in ``server.http``)
bounds connections: idle, header and body timeouts, a connection limit, the
body size, the header size; every request it or the parser refuses is
answered with a JSON-RPC error object. No log line carries a credential
(:mod:`wf.server.redaction`).

``stop()`` drains: the listener closes first (no new requests), idle
connections are closed, requests in flight finish within the grace period,
then the node stops (flush, release ownership).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from wf.clock import Clock
from wf.errors import Forbidden, Unauthorized, WfError
from wf.node import RecoveryReport, SchedulerNode
from wf.runtime.api import WorkflowAPI
from wf.runtime.engine import RunEngine
from wf.schedules.api import ScheduleAPI
from wf.schedules.service import ScheduleService
from wf.server.auth import Authenticator
from wf.server.cluster import ClusterRole
from wf.server.config import ServerConfig, TlsConfig
from wf.server.console import Console
from wf.server.http_edge import HttpEdge, bearer_token
from wf.server.http_server import HttpServer, Request, Response, Router, rpc_error
from wf.server.logs import LEVELS, OutcomeLogger, RpcCallLogger
from wf.server.metrics import ServerMetrics
from wf.server.redaction import install_log_redaction
from wf.server.retention import RetentionTask
from wf.server.rpc import Caller, Dispatcher, Registry, authorize
from wf.server.run_signals import RunMetrics, RunProgressLogger
from wf.server.schedule_rpc import register_schedule_methods
from wf.server.scheduler_api import SchedulerAPI
from wf.server.scheduler_rpc import register_scheduler_methods
from wf.server.tracing import TRACEPARENT_HEADER, install, make_tracing
from wf.server.unserved import UnservedWatch
from wf.server.workflow_rpc import register_workflow_methods
from wf.store import make_store
from wf.wire.cluster_methods import STATUS as CLUSTER_STATUS
from wf.wire.cluster_methods import ClusterStatus
from wf.wire.contract import METHODS
from wf.wire.methods import DISCOVER, WHOAMI, Identity, NoParams

SHUTDOWN_GRACE_S = 10.0
"""How long in-flight requests may take after a stop was asked for."""

_encoder = msgspec.json.Encoder()
_HEALTHY = b'{"status": "ok"}'

RPC_PATH = "/rpc"
READY_PATH = "/readyz"
METRICS_PATH = "/metrics"


def ssl_context(tls: TlsConfig) -> ssl.SSLContext:
    """The server-side TLS context (mutual TLS when a client CA is configured)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.certificate, tls.private_key)
    if tls.client_ca is not None:
        context.load_verify_locations(tls.client_ca)
        context.verify_mode = (
            ssl.CERT_REQUIRED if tls.require_client_certificate else ssl.CERT_OPTIONAL
        )
    return context


class WfServer:
    """One wf server process (see the module docstring)."""

    def __init__(
        self, config: ServerConfig, *, schedules: bool = False, clock: Clock | None = None
    ) -> None:
        self.config = config
        section = config.server
        store = make_store(
            store_root=section.store.root,
            postgres_dsn=section.store.postgres_dsn,
            postgres_schema=section.store.postgres_schema,
            durability=section.store.durability,
        )
        dispatch = config.dispatch
        if dispatch.start_on_grant is None:
            # A PostgreSQL store may have standbys: a failover loses poll answers, and
            # the grants in them must stay requeueable (docs/architecture.md).
            dispatch = msgspec.structs.replace(
                dispatch,
                start_on_grant="may_restart" if section.store.postgres_dsn else "any",
            )
        self.node = SchedulerNode(
            store,
            dispatch,
            clock=clock,
            recovery_deadline_s=section.store.recovery_deadline_s,
            recovery_backoff_max_s=section.store.recovery_backoff_max_s,
        )
        self.scheduler = SchedulerAPI(self.node)
        self.registry = Registry(METHODS.values())
        """Every method of the wire contract with its handler (checked complete below)."""
        register_scheduler_methods(self.scheduler, self.registry)
        self.engine = RunEngine(store, self.node, self.node.clock)
        """The DAG engine driving workflow runs on this node."""
        self.retention = RetentionTask(store, section.store.retention, self.node.clock)
        """Periodic pruning (``server.store.retention``), on the active node only."""
        self.unserved = UnservedWatch(self.node, self.node.clock)
        """Warns about activity types no worker takes, on the active node only."""
        self.workflow = WorkflowAPI(
            store, self.node.clock, policies=tuple(config.dispatch.policies), engine=self.engine
        )
        """Artifacts, deployments and runs (``workflow.*``)."""
        enabled = section.scheduler.enabled
        self.schedules: ScheduleAPI | None = (
            ScheduleAPI(store, self.workflow, self.node.clock) if schedules or enabled else None
        )
        """Deployment schedules (``workflow.schedules.*``), if this server keeps them."""
        self.schedule_service: ScheduleService | None = (
            ScheduleService(self.schedules, self.engine, section.scheduler)
            if enabled and self.schedules is not None
            else None
        )
        """The admission service, started with the server when ``server.scheduler.enabled``."""
        register_schedule_methods(lambda: self.schedules, self.registry)
        register_workflow_methods(self.workflow, self.registry)
        self.registry.handle(DISCOVER, self._discover)
        self.registry.handle(WHOAMI, self._whoami)
        self.registry.handle(CLUSTER_STATUS, self._cluster_status)
        self.registry.check()  # a declared method without a handler: refuse to start
        self.cluster = ClusterRole(
            self.node, section.cluster, activate=self._activate, deactivate=self._deactivate
        )
        """This server's role: always active on SQLite; active or standby on PostgreSQL."""
        self.dispatcher = Dispatcher(self.registry)
        self.dispatcher.gate = self.cluster.check_serving
        # Observability (docs/observability.md): metrics, logs, optional traces.
        self.metrics = ServerMetrics(
            self.node, schedule_service=lambda: self.schedule_service, cluster=self.cluster
        )
        self.dispatcher.call_observers += [self.metrics.observe_call, RpcCallLogger()]
        self.node.listeners.append(
            OutcomeLogger(
                self.node,
                activity_level=LEVELS[section.observability.activity_log_level],
            )
        )
        # run.admitted / run.completed / run.failed / run.cancelled lines and run metrics.
        self.engine.listeners += [RunProgressLogger(), RunMetrics(self.metrics.registry)]
        self.tracing = make_tracing(section.observability)
        install(self.tracing, self.node, self.scheduler)
        self.authenticator = Authenticator(
            section.security.credentials, required=section.security.required
        )
        install_log_redaction()
        self.edge = HttpEdge(section.http)
        """Connection limit, timeouts and JSON-RPC error bodies at the HTTP level."""
        self.router = Router()
        """The HTTP routes: JSON-RPC, health, metrics, the console."""
        self.router.add("POST", RPC_PATH, self._rpc)
        self.router.add("GET", "/healthz", self._health)
        self.router.add("GET", READY_PATH, self._ready)
        self.router.add("GET", METRICS_PATH, self._metrics)
        if section.ui.enabled:  # the operator console: static files only (docs/console.md)
            Console().install(self.router)
        self.after_start: list[Callable[[], Awaitable[None]]] = []
        self._http: HttpServer | None = None
        self.port: int | None = None
        self.recovery: RecoveryReport | None = None

    async def _discover(self, params: NoParams, caller: Caller) -> dict[str, Any]:
        return self.registry.openrpc()

    async def _whoami(self, params: NoParams, caller: Caller) -> Identity:
        tenants = None if caller.tenants is None else sorted(caller.tenants)
        return Identity(identity=caller.identity, role=caller.role, tenants=tenants)

    async def _cluster_status(self, params: NoParams, caller: Caller) -> ClusterStatus:
        return await self.cluster.status()

    async def _health(self, request: Request) -> Response:
        return Response(body=_HEALTHY, content_type="application/json")

    async def _ready(self, request: Request) -> Response:
        """Readiness: 200 while the node accepts writes, 503 naming the reason otherwise
        (unauthenticated, like ``/healthz``: it names states and error codes, never
        messages)."""
        readiness = self.node.readiness()
        cluster = self.cluster
        serving = cluster.role == "active" and not cluster.gate_closed()
        ready = readiness.ready and serving
        body: dict[str, Any] = {"status": "ready" if ready else "unavailable"}
        body.update(msgspec.to_builtins(readiness))
        if readiness.ready and not serving:
            body["reason"] = "standby" if cluster.role != "active" else "gated"
            body["ready"] = False
        body.update(role=cluster.role, node_id=cluster.node_id, epoch=cluster.epoch)
        if cluster.role != "active":
            body["leader_url"] = cluster.leader_url
        return Response(
            200 if ready else 503, _encoder.encode(body), content_type="application/json"
        )

    async def _metrics(self, request: Request) -> Response:
        """Prometheus exposition; needs a read role when authentication is on."""
        peer = request.peercert
        try:
            token = bearer_token(request.headers.get("authorization"))
            caller = self.authenticator.authenticate(token, peer)
            authorize(caller, "read", "metrics")
            if caller.tenants is not None:  # cluster-wide figures, like scheduler.queue.stats
                raise Forbidden(
                    "metrics are cluster-wide; a tenant-scoped credential may not read them"
                )
        except WfError as exc:
            return Response(
                403 if isinstance(exc, Forbidden) else 401,
                exc.message.encode(),
                content_type="text/plain; charset=utf-8",
            )
        body, content_type = self.metrics.render(request.headers.get("accept"))
        return Response(body=body, content_type=content_type)

    async def _rpc(self, request: Request) -> Response:
        headers = request.headers
        try:
            token = bearer_token(headers.get("authorization"))
            caller = self.authenticator.authenticate(token, request.peercert)
        except Unauthorized as exc:
            return rpc_error(401, exc)
        # Size and time bounded; a refusal is a JSON-RPC error (the HTTP server's).
        body = await request.read()
        with self.tracing.incoming(headers.get(TRACEPARENT_HEADER)):
            answer = await self.dispatcher.handle(body, caller)
        if answer is None:
            return Response(204)
        return Response(body=answer, content_type="application/json")

    async def start(self) -> None:
        """SQLite: recover the node, then listen. PostgreSQL: listen, then take the
        role the cluster leaves (active if no other node is)."""
        if self.cluster.clustered:
            await self._listen()
            await self.cluster.start()
        else:
            await self.cluster.start()
            await self._listen()
        self.recovery = self.cluster.recovery
        for hook in self.after_start:
            await hook()

    async def _activate(self) -> RecoveryReport:
        """Become the active node: take ownership, recover, start the run engine and
        the schedule service (the cluster's callback; once on SQLite)."""
        if not self.cluster.clustered:
            report = await self.node.start()
        else:
            report = await self.node.take_over(self.cluster.warm_state)
            self.scheduler.resume_polls()
        try:
            await self.engine.start()
            if self.schedule_service is not None:
                await self.schedule_service.start()
        except BaseException:
            if self.cluster.clustered:
                await self._deactivate()
            raise
        store = self.cluster.store
        if store is not None:
            await store.arm_liveness(self.config.server.cluster.session_timeout_s)
        self.retention.start()
        self.unserved.start()
        return report

    async def _deactivate(self) -> None:
        """Stop acting as the active node without writing (the cluster's callback when
        another node took over): open polls answer at once, the schedule service and
        run engine stop without draining, ownership is given up."""
        await self.retention.stop()
        await self.unserved.stop()
        self.scheduler.release_polls()
        if self.schedule_service is not None:
            await self.schedule_service.stop(drain=False)
        await self.engine.stop()
        store = self.cluster.store
        if store is not None:
            await store.disarm_liveness()
        await self.node.step_down()

    async def _listen(self) -> None:
        section = self.config.server
        tls = section.security.tls
        self._http = HttpServer(self.router, self.edge)
        listener = await self._http.listen(
            section.host, section.port, ssl_context(tls) if tls is not None else None
        )
        sockets = listener.sockets
        self.port = int(sockets[0].getsockname()[1]) if sockets else section.port

    async def stop(self) -> None:
        """Drain: stop admitting scheduled runs and let them finish (within the grace),
        stop listening, let requests finish, stop the node (an active cluster node
        releases ownership, and a standby takes over)."""
        await self.retention.stop()
        await self.unserved.stop()
        await self.cluster.stop()
        if self.schedule_service is not None:
            await self.schedule_service.stop()
        if self._http is not None:
            # Open long polls answer at once (with whatever they hold) instead of
            # holding the drain for their full wait.
            self.scheduler.release_polls()
            await self._http.shutdown(SHUTDOWN_GRACE_S)
            self._http = None
        await self.engine.stop()
        await self.cluster.leaving()
        await self.node.stop()
