"""The workflow runtime's Python API: artifacts, deployments and runs.

Theory of operation
-------------------
:class:`WorkflowAPI` is the one entry point the server's JSON-RPC methods
(``workflow.artifacts.*``, ``workflow.deployments.*``, registered by
:mod:`wf.server.workflow_rpc`) and the local server's ``server.api`` call.
Every call validates completely before it touches the store, so bad input
never changes state; the store then enforces what validation cannot see
from one process: an artifact version is unique by primary key with a
content-hash comparison in the same transaction, and a deployment save is
applied only at the revision it was based on.

Runs are driven by the :class:`~wf.runtime.engine.RunEngine` the server
gives this API: ``start_run`` validates the merged inputs against the pinned
plan, asks the scheduler's backpressure whether a new workflow may start, stores
the run as ``admitted`` and begins it; ``inspect_run`` reads the run document
and its activities' histories (:mod:`wf.runtime.trace`); ``list_runs`` pages by
opaque cursor; ``resume_run`` and ``cancel_run`` go through the engine under the
run's lock.

Listings (``list_artifacts``, ``list_deployments``, ``list_runs``) answer one
page of at most 100, read from the store by key after the cursor's
(:mod:`wf.wire.paging`, :mod:`wf.store.pages`), so no call's cost grows with
the catalog.

Access: artifacts are a shared catalog (any ``operate`` caller may create,
any ``read`` caller may read). Deployments belong to a tenant: a
tenant-scoped caller may save only deployments of its tenants
(:class:`~wf.errors.Forbidden` otherwise) and sees only those (another
tenant's deployment answers :class:`~wf.errors.NotFound`, like an absent one).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, Protocol, TypeVar

import msgspec

from wf.clock import Clock
from wf.errors import (
    AlreadyExists,
    Conflict,
    CorruptRecord,
    Forbidden,
    InvalidArgument,
    NotFound,
    UnknownPolicy,
)
from wf.runtime import deployments as dep
from wf.runtime.artifacts import Artifact, artifact_from_row, artifact_row, check_version
from wf.runtime.engine import RunEngine
from wf.runtime.plan import (
    ActivityNode,
    ActivityParams,
    MapNode,
    Plan,
    check_activity_args,
    check_id,
    input_defaults_of,
    plan_from_builtins,
)
from wf.runtime.runs import Run, RunStatus, Trigger, request_digest, run_from_row
from wf.runtime.schema import instance_problems
from wf.runtime.trace import decode_cursor, encode_cursor, run_summary, run_view
from wf.scheduler.model import ActivityState
from wf.store.catalog import revision_conflict
from wf.store.protocol import Catalog, RunRow
from wf.tenancy import require_namespace
from wf.wire import paging
from wf.wire.bounds import PAGE_LIMIT_MAX, check_name, check_text
from wf.wire.paging import PAGE_BYTES_MAX, PAGE_LIMIT_DEFAULT, check_limit, views_in_slices
from wf.wire.run_views import CorruptRunSummary, RunPage, RunSummary, RunView
from wf.wire.workflow import ArtifactPage as ArtifactPage
from wf.wire.workflow import DeploymentPage as DeploymentPage
from wf.wire.workflow_methods import RUN_COUNT_SCAN_MAX, RUN_COUNT_WINDOW_MAX_S, RunCounts

ARTIFACT_CACHE_MAX: Final = 1_024
"""Verified artifact versions kept in memory (they never change once stored)."""


REASON_MAX: Final = 1_000
"""Longest cancellation reason stored with a run."""
DEPLOYMENT_SCAN_ROWS_MAX: Final = 500
"""Most stored deployments one ``list_deployments`` call reads for a tenant-scoped
caller (the tenant is in the body, so the store cannot filter by it)."""
RUN_SEQ_UNBOUNDED: Final = 2**63 - 1
"""Above every run number: where a newest-first listing starts."""
_ARTIFACTS: Final = "artifacts"
_DEPLOYMENTS: Final = "deployments"
"""Cursor kinds of the listings."""

R = TypeVar("R")


class Scope(Protocol):
    """What the runtime needs to know of a caller (``wf.server.rpc.Caller`` is one)."""

    @property
    def tenants(self) -> frozenset[str] | None:
        """Tenants it may act for (``None``: all)."""
        ...


class WorkflowAPI:
    """Artifacts and deployments over one store (see the module docstring).

    Usable once the store is open (the server opens it when it starts).
    """

    def __init__(
        self,
        store: Catalog,
        clock: Clock,
        *,
        policies: Collection[str] | None = None,
        engine: RunEngine | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self._engine = engine
        self._artifacts: dict[tuple[str, int], Artifact] = {}
        self.resume_gate: Callable[[Run], AbstractAsyncContextManager[None]] | None = None
        """Admission control for resumes (the schedule service takes an execution slot
        for a scheduled run's resume); ``None``: none."""
        self.policies = None if policies is None else frozenset(policies)
        """Known scheduling policy groups (``None``: any name is accepted)."""
        self.activity_params: dict[str, ActivityParams] = {}
        """Declared parameters of the activity types this server knows (its in-process
        workers'): a new plan's nodes of those types must fit them."""
        self.deployment_writes = 0
        """Deployment saves committed through this API (a run prepared ahead of time is
        stale once it moves: the schedule service's armed admissions)."""

    # ------------------------------------------------------------- artifacts

    async def create_artifact_from_plan(
        self, artifact_id: str, version: int, plan: Plan | dict[str, Any], *, caller: Scope
    ) -> Artifact:
        """Create artifact ``artifact_id`` at ``version`` holding ``plan``.

        Idempotent: the same plan again returns the stored artifact unchanged.
        Raises :class:`~wf.errors.InvalidArgument` for a bad id, version or plan
        (details name ``node`` and ``field``) and :class:`~wf.errors.AlreadyExists`
        when the version exists with another plan.
        """
        check_id(artifact_id, "artifact id", field="artifact_id")
        check_version(version)
        checked = plan_from_builtins(plan)
        check_activity_args(checked, self.activity_params)
        row = artifact_row(artifact_id, version, checked, self.clock.now())
        return artifact_from_row(await self.store.put_artifact(row))

    async def get_artifact(
        self, artifact_id: str, version: int | None = None, *, caller: Scope
    ) -> Artifact:
        """One artifact version (``None``: the highest); NotFound if absent."""
        if version is not None:
            check_version(version)
            cached = self._artifacts.get((artifact_id, version))
            if cached is not None:
                return cached
        row = await self.store.get_artifact(artifact_id, version)
        if row is None:
            which = "any version" if version is None else f"version {version}"
            raise NotFound(
                f"artifact {artifact_id!r} has no {which}",
                artifact_id=artifact_id,
                version=version,
            )
        artifact = artifact_from_row(row)
        if len(self._artifacts) < ARTIFACT_CACHE_MAX:
            # Versions are immutable (content-hashed), so a verified one stays true.
            self._artifacts[(artifact.artifact_id, artifact.version)] = artifact
        return artifact

    async def list_artifacts(
        self,
        artifact_id: str | None = None,
        *,
        caller: Scope,
        limit: int = PAGE_LIMIT_DEFAULT,
        cursor: str | None = None,
    ) -> ArtifactPage:
        """One page of artifact versions by id then version (only ``artifact_id``'s when
        given), with ``next_cursor`` (``None`` on the last page).

        ``limit`` is 1-100. Plans can be large, so a page also stops once its
        plans reach :data:`~wf.wire.paging.PAGE_BYTES_MAX` (never before its
        first item): a page may hold fewer than ``limit`` versions while
        ``next_cursor`` is set.
        """
        limit = check_limit(limit)
        after: tuple[str, int] | None = None
        if cursor is not None:
            after_id, after_version = paging.decode_cursor(cursor, _ARTIFACTS, (str, int))
            if artifact_id is not None and after_id != artifact_id:
                raise InvalidArgument(
                    f"cursor continues artifact {after_id!r}, not {artifact_id!r}",
                    field="cursor",
                )
            after = (after_id, after_version)
        stored = await self.store.artifacts_page(
            after=after, artifact_id=artifact_id, limit=limit + 1
        )
        page = _within_bytes(stored[:limit], lambda r: len(r.plan))
        artifacts = await views_in_slices(page, artifact_from_row)
        more = len(stored) > len(page)
        last = page[-1] if page else None
        return ArtifactPage(
            artifacts=artifacts,
            next_cursor=(
                paging.encode_cursor(_ARTIFACTS, last.artifact_id, last.version)
                if more and last is not None
                else None
            ),
        )

    # ----------------------------------------------------------- deployments

    async def save_deployment(
        self, body: dict[str, Any], expected_revision: int | None = None, *, caller: Scope
    ) -> dep.Deployment:
        """Create or update the deployment ``body`` describes; returns it as saved.

        ``body`` holds the fields of :class:`~wf.runtime.deployments.DeploymentSpec`.
        ``expected_revision`` is the revision the change is based on (0: must not
        exist yet); ``None`` takes the revision read now, so only a concurrent
        save in between conflicts. Saving the very same settings again changes
        nothing (the revision stays). Raises :class:`~wf.errors.InvalidArgument`
        (bad body or default inputs), :class:`~wf.errors.NotFound` (pinned
        version missing), :class:`~wf.errors.UnknownPolicy`,
        :class:`~wf.errors.Forbidden` (another tenant) and
        :class:`~wf.errors.Conflict` (stale revision).
        """
        spec = dep.spec_from_body(body)
        if expected_revision is not None and expected_revision < 0:
            raise InvalidArgument(
                "expected_revision must not be negative", field="expected_revision"
            )
        _require_tenant(caller, spec.tenant)
        # Before the id is looked up: the answer never depends on other tenants' ids.
        require_namespace(
            spec.name, spec.tenant, caller.tenants, kind="deployment", field="name", separators="_"
        )
        known = self.policies
        if spec.policy is not None and known is not None and spec.policy not in known:
            raise UnknownPolicy(
                f"policy group {spec.policy!r} is not configured (known: {sorted(known)})",
                field="policy",
                policy=spec.policy,
            )
        artifact = await self.store.get_artifact(spec.artifact_id, spec.artifact_version)
        if artifact is None:
            raise NotFound(
                f"artifact {spec.artifact_id!r} version {spec.artifact_version} does not "
                "exist; create it before deploying it",
                artifact_id=spec.artifact_id,
                version=spec.artifact_version,
            )
        plan = artifact_from_row(artifact).plan
        problems = instance_problems(
            plan.input_schema, spec.default_inputs, ignore_top_required=True
        )
        if problems:
            raise InvalidArgument(
                f"default_inputs do not match the input schema of {spec.artifact_id} "
                f"v{spec.artifact_version}: {'; '.join(problems)}",
                field="default_inputs",
                problems=problems,
            )
        deployment_id = dep.deployment_id_of(spec.artifact_id, spec.name)
        stored = await self.store.get_deployment(deployment_id)
        current = None if stored is None else dep.deployment_from_row(stored)
        if current is not None:
            _require_tenant(caller, current.tenant)
        base = 0 if current is None else current.revision
        now = self.clock.now()
        saved = dep.build(
            spec,
            created_at=now if current is None else current.created_at,
            now=now,
            revision=base + 1,
        )
        if expected_revision is not None and expected_revision != base:
            raise revision_conflict(dep.deployment_row(saved), expected_revision, base)
        if current is not None and dep.same_settings(current, saved):
            return current
        await self.store.put_deployment(dep.deployment_row(saved), expected_revision=base)
        # After the commit: whoever prepared a run before now sees the count move.
        self.deployment_writes += 1
        return saved

    async def get_deployment(self, deployment_id: str, *, caller: Scope) -> dep.Deployment:
        """One deployment; NotFound if absent or of a tenant the caller may not see."""
        row = await self.store.get_deployment(deployment_id)
        found = None if row is None else dep.deployment_from_row(row)
        if found is None or (caller.tenants is not None and found.tenant not in caller.tenants):
            raise NotFound(
                f"deployment {deployment_id!r} does not exist", deployment_id=deployment_id
            )
        return found

    async def list_deployments(
        self, *, caller: Scope, limit: int = PAGE_LIMIT_DEFAULT, cursor: str | None = None
    ) -> DeploymentPage:
        """One page of the deployments the caller may see, by id, with ``next_cursor``
        (``None`` on the last page); ``limit`` is 1-100.

        A deployment's tenant is inside its stored body, so for a tenant-scoped
        caller the page is filtered here, reading at most
        :data:`DEPLOYMENT_SCAN_ROWS_MAX` stored rows per call: when that many
        hold fewer than ``limit`` of the caller's, the page is short (even
        empty) and ``next_cursor`` resumes the scan. Follow ``next_cursor``
        until it is ``None``.
        """
        limit = check_limit(limit)
        after = "" if cursor is None else paging.decode_cursor(cursor, _DEPLOYMENTS, (str,))[0]
        scope = caller.tenants
        found: list[dep.Deployment] = []
        scanned = 0
        exhausted = False
        while len(found) <= limit and scanned < DEPLOYMENT_SCAN_ROWS_MAX:
            budget = DEPLOYMENT_SCAN_ROWS_MAX - scanned
            want = min(limit + 1 - len(found) if scope is None else PAGE_LIMIT_MAX, budget)
            stored = await self.store.deployments_page(after=after, limit=want)
            scanned += len(stored)
            decoded = await views_in_slices(stored, dep.deployment_from_row)
            for row, d in zip(stored, decoded, strict=True):
                if scope is None or d.tenant in scope:
                    found.append(d)
                    if len(found) > limit:
                        break
                after = row.deployment_id
            exhausted = len(stored) < want
            if exhausted:
                break
        page = found[:limit]
        if len(found) > limit:
            next_cursor: str | None = paging.encode_cursor(_DEPLOYMENTS, page[-1].deployment_id)
        elif exhausted:
            next_cursor = None
        else:  # the scan budget ran out first: resume after the last row read
            next_cursor = paging.encode_cursor(_DEPLOYMENTS, after)
        return DeploymentPage(deployments=page, next_cursor=next_cursor)

    # ------------------------------------------------------------------ runs

    @property
    def engine(self) -> RunEngine:
        """The run engine (Conflict if this API was built without one)."""
        if self._engine is None:
            raise Conflict("this server runs no workflow engine")
        return self._engine

    async def prepare_run(
        self,
        deployment_id: str,
        inputs: dict[str, Any] | None,
        *,
        caller: Scope,
        trigger: Trigger | None = None,
        max_steps: int | None = None,
    ) -> tuple[Run, Plan]:
        """An unsaved admitted run of ``deployment_id`` with its pinned plan.

        Inputs are the plan's input defaults (the input schema's ``default``s), then
        the deployment's defaults, overlaid with ``inputs`` (recorded so), validated
        in full against the plan's input schema (InvalidArgument, nothing
        stored). ``max_steps`` overrides the deployment's budget (schedules
        carry their own).
        """
        deployment = await self.get_deployment(deployment_id, caller=caller)
        _require_tenant(caller, deployment.tenant)
        if inputs is not None and not isinstance(inputs, dict):
            raise InvalidArgument("inputs must be a JSON object", field="inputs")
        artifact = await self.get_artifact(
            deployment.artifact_id, deployment.artifact_version, caller=caller
        )
        # The plan's own defaults (input schema ``default``s) under the deployment's.
        defaults = input_defaults_of(artifact.plan.input_schema)
        merged = {**defaults, **deployment.default_inputs, **(inputs or {})}
        problems = instance_problems(artifact.plan.input_schema, merged)
        if problems:
            raise InvalidArgument(
                f"run inputs do not match the input schema of {artifact.artifact_id} "
                f"v{artifact.version}: {'; '.join(problems)}",
                field="inputs",
                problems=problems,
            )
        now = self.clock.now()
        run = Run(
            run_id="",
            deployment_id=deployment.deployment_id,
            deployment_revision=deployment.revision,
            artifact_id=artifact.artifact_id,
            artifact_version=artifact.version,
            content_hash=artifact.content_hash,
            tenant=deployment.tenant,
            priority=deployment.priority,
            policy=deployment.policy,
            inputs=merged,
            created_at=now,
            max_steps=deployment.max_steps if max_steps is None else max_steps,
            deadline=None if deployment.run_deadline_s is None else now + deployment.run_deadline_s,
            trigger=trigger or Trigger(),
        )
        return run, artifact.plan

    async def start_run(
        self,
        deployment_id: str,
        inputs: dict[str, Any] | None = None,
        *,
        caller: Scope,
        request_id: str | None = None,
    ) -> RunView:
        """Start a run of ``deployment_id`` now; returns its view (see ``inspect_run``).

        With a ``request_id`` the call may be retried safely: a retry (same
        deployment and inputs) answers the run the first call started, as it stands
        now, and starts nothing; the same request id with another deployment or
        other inputs is AlreadyExists naming that run. Request ids are unique per
        tenant (the deployment's).

        Raises InvalidArgument (inputs), NotFound (deployment), Forbidden
        (another tenant) and Overloaded (backpressure refuses new workflows;
        nothing is stored then).
        """
        if request_id is None:
            run, plan = await self.prepare_run(deployment_id, inputs, caller=caller)
            return await self._view(*await self.start_prepared(run, plan))
        check_request_id(request_id)
        digest = request_digest("start", deployment_id, inputs)
        deployment = await self.get_deployment(deployment_id, caller=caller)
        _require_tenant(caller, deployment.tenant)
        found = await self.requested_run(deployment.tenant, request_id, digest)
        if found is None:
            run, plan = await self.prepare_run(deployment_id, inputs, caller=caller)
            run.request_id, run.request_digest = request_id, digest
            found = await self.start_prepared(run, plan)
        return await self._view(*found)

    async def start_prepared(self, run: Run, plan: Plan) -> tuple[Run, Plan]:
        """Admit and begin a prepared run (backpressure first); returns it begun.

        A run carrying a request id whose tenant already used it is not admitted:
        the run that id started is returned instead (AlreadyExists if it was
        started by another request, see :meth:`requested_run`)."""
        self.engine.node.reads.admit_new_workflow(self.clock.now())
        try:
            admitted = await self.engine.admit(run, plan)
        except AlreadyExists as exc:
            # Another call under this request id committed between our look-up and our
            # insert; the store's unique key refused ours, so answer with the one stored.
            if run.request_id is None or run.request_digest is None:
                raise
            found = await self.requested_run(run.tenant, run.request_id, run.request_digest)
            if found is None:
                raise exc from None
            return found
        return await self.engine.begin(admitted.run_id), plan

    async def requested_run(
        self, tenant: str, request_id: str, digest: str
    ) -> tuple[Run, Plan] | None:
        """The run ``tenant``'s ``request_id`` started (begun if it was still only
        admitted), or ``None``; AlreadyExists naming that run if it was started by a
        request other than ``digest``."""
        row = await self.store.run_for_request(tenant, request_id)
        if row is None:
            return None
        stored = run_from_row(row)
        if stored.request_digest != digest:
            raise AlreadyExists(
                f"request id {request_id!r} already started run {row.run_id!r} for "
                "another request (another deployment, schedule or inputs)",
                request_id=request_id,
                run_id=row.run_id,
            )
        run, plan = await self.engine.get(row.run_id)
        if run.status is RunStatus.ADMITTED and run.trigger.kind == "manual":
            # The first call stopped between storing and beginning it (or is still on
            # its way): begin it now; the engine begins a run once (Conflict after).
            with contextlib.suppress(Conflict):
                run = await self.engine.begin(row.run_id)
        return run, plan

    async def inspect_run(self, run_id: str, *, caller: Scope) -> RunView:
        """Status, pinned inputs and artifact, per-node trace (attempts, workers,
        timings, errors), output, checkpoint, awaited interrupts and resume marks.

        An admitted run shows an empty trace and no output or checkpoint.
        NotFound if the run does not exist or belongs to a tenant the caller may
        not see; CorruptRecord if its record does not decode.
        """
        run, plan = await self._visible(run_id, caller)
        return await self._view(run, plan)

    async def list_runs(
        self,
        *,
        caller: Scope,
        deployment_id: str | None = None,
        schedule_id: str | None = None,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        newest_first: bool = False,
        created_after: float | None = None,
        created_before: float | None = None,
    ) -> RunPage:
        """One page of runs, oldest first (newest first with ``newest_first``):
        ``runs`` (:class:`~wf.wire.run_views.RunSummary`) and ``next_cursor``.

        ``limit`` is 1–100; ``next_cursor`` is ``None`` on the last page.
        ``created_after`` (inclusive) and ``created_before`` (exclusive) bound the
        creation instant (epoch seconds).
        """
        if not 1 <= limit <= 100:
            raise InvalidArgument("limit must be 1-100", field="limit", limit=limit)
        statuses = None
        if status is not None:
            if status not in set(RunStatus):
                raise InvalidArgument(
                    f"unknown run status {status!r} (one of {[str(s) for s in RunStatus]})",
                    field="status",
                )
            statuses = [status]
        after = 0 if cursor is None else decode_cursor(cursor)
        before = None
        if newest_first:  # the cursor names the last run listed: continue below it
            before, after = (RUN_SEQ_UNBOUNDED if cursor is None else after), 0
        rows = await self.store.list_runs(
            after_seq=after,
            limit=limit + 1,
            deployment_id=deployment_id,
            schedule_id=schedule_id,
            statuses=statuses,
            tenants=None if caller.tenants is None else sorted(caller.tenants),
            before_seq=before,
            created_after=created_after,
            created_before=created_before,
        )
        page = await views_in_slices(rows[:limit], _run_listed)
        more = len(rows) > limit
        return RunPage(runs=page, next_cursor=encode_cursor(rows[limit - 1].seq) if more else None)

    async def count_runs(self, window_s: float = 3600.0, *, caller: Scope) -> RunCounts:
        """Runs created in the last ``window_s`` seconds, by current status (the
        caller's tenants only). One bounded read of the newest
        :data:`~wf.wire.workflow_methods.RUN_COUNT_SCAN_MAX` runs: ``complete`` is
        false when the window holds more."""
        if not 0 < window_s <= RUN_COUNT_WINDOW_MAX_S:
            raise InvalidArgument(
                f"window_s must be in (0, {RUN_COUNT_WINDOW_MAX_S}]", field="window_s"
            )
        now = self.clock.now()
        since = now - window_s
        recent = await self.store.recent_run_statuses(
            limit=RUN_COUNT_SCAN_MAX + 1,
            tenants=None if caller.tenants is None else sorted(caller.tenants),
        )
        by_status: dict[str, int] = {}
        counted = 0
        for status, created_at in recent[:RUN_COUNT_SCAN_MAX]:
            if created_at >= since:
                by_status[status] = by_status.get(status, 0) + 1
                counted += 1
        complete = not (counted == RUN_COUNT_SCAN_MAX and len(recent) > RUN_COUNT_SCAN_MAX)
        return RunCounts(since=since, until=now, by_status=by_status, complete=complete)

    async def resume_run(
        self, run_id: str, answer: Any, node_id: str | None = None, *, caller: Scope
    ) -> RunView:
        """Answer an interrupt (``node_id`` may be omitted when only one waits).

        The attempt is marked in the store before the answer applies (see
        :meth:`~wf.runtime.engine.RunEngine.resume_run`). InvalidArgument if the
        answer does not match the interrupt's schema; Conflict if the run awaits
        no input.
        """
        run, _ = await self._visible(run_id, caller)
        _require_tenant(caller, run.tenant)
        if self.resume_gate is None:
            resumed = await self.engine.resume_run(run_id, answer, node_id)
        else:
            async with self.resume_gate(run):
                resumed = await self.engine.resume_run(run_id, answer, node_id)
        return await self._view(resumed, await self.engine.plan_of(resumed))

    async def cancel_run(self, run_id: str, reason: str = "", *, caller: Scope) -> RunView:
        """Cancel a run that has not stopped; its activities are withdrawn.

        ``reason`` (at most :data:`REASON_MAX` characters) is kept in the run's error.
        """
        if not isinstance(reason, str) or len(reason) > REASON_MAX:
            raise InvalidArgument(
                f"reason must be a string of at most {REASON_MAX} characters", field="reason"
            )
        check_text(reason, "reason")
        run, _ = await self._visible(run_id, caller)
        _require_tenant(caller, run.tenant)
        cancelled = await self.engine.cancel_run(run_id, reason or "cancelled by request")
        return await self._view(cancelled, await self.engine.plan_of(cancelled))

    async def _visible(self, run_id: str, caller: Scope) -> tuple[Run, Plan]:
        run, plan = await self.engine.get(run_id)
        if caller.tenants is not None and run.tenant not in caller.tenants:
            raise NotFound(f"run {run_id!r} does not exist", run_id=run_id)
        return run, plan

    async def _view(self, run: Run, plan: Plan) -> RunView:
        """The run's view: built as the JSON object :func:`~wf.runtime.trace.run_view`
        writes, returned typed (the same keys, so it encodes to the same bytes)."""
        # ``run`` is the engine's live object: read it only between changes.
        async with self.engine.reading(run.run_id):
            histories = {}
            details: dict[str, bytes] = {}
            shown: list[str] = []
            for node in plan.nodes:
                state = run.nodes.get(node.id)
                if not isinstance(node, ActivityNode | MapNode) or state is None:
                    continue
                # A map node's items are activities of their own.
                shown += [
                    s.activity_id
                    for s in [state, *(state.items or ())]
                    if s.activity_id is not None
                ]
            # Read before the store reads below, so every mark comes from one moment.
            waiting = frozenset(self.engine.node.reads.unserved_waiting(shown))
            for aid in shown:
                histories[aid] = history = await self.store.history(aid)
                # Only a started attempt can have heartbeated: no read otherwise.
                if any(t.to_state is ActivityState.EXECUTING for t in history):
                    found = await self.store.heartbeat_details(aid)
                    if found:
                        details[aid] = found
            return msgspec.convert(run_view(run, plan, histories, details, waiting), RunView)


def _run_listed(row: RunRow) -> RunSummary:
    """A run's summary in a listing (one whose record does not decode says so)."""
    try:
        return msgspec.convert(run_summary(run_from_row(row)), RunSummary)
    except CorruptRecord as exc:
        return CorruptRunSummary(run_id=row.run_id, status=row.status, corrupt=exc.message)


def _within_bytes(page: list[R], size: Callable[[R], int]) -> list[R]:
    """The longest head of ``page`` (at least its first item) whose sizes stay within
    :data:`~wf.wire.paging.PAGE_BYTES_MAX`."""
    total = 0
    for i, item in enumerate(page):
        total += size(item)
        if i > 0 and total > PAGE_BYTES_MAX:
            return page[:i]
    return page


def check_request_id(request_id: object) -> str:
    """``request_id`` if it is an id within :mod:`wf.wire.bounds` (1-256 characters, no
    control character), else InvalidArgument naming ``request_id``."""
    if not isinstance(request_id, str) or not request_id:
        raise InvalidArgument("request_id must be a non-empty string", field="request_id")
    return check_name(request_id, "request_id")


def _require_tenant(caller: Scope, tenant: str) -> None:
    if caller.tenants is not None and tenant not in caller.tenants:
        raise Forbidden(f"this credential may not act for tenant {tenant!r}", tenant=tenant)
