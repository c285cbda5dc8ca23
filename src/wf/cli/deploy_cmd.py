"""``wf deploy``: publish a Python flow as an artifact, a deployment and a schedule.

::

    wf deploy MODULE:FLOW --name NAME [--cron EXPR [--tz ZONE]] [--schedule-id ID]
              [--input KEY=VALUE ...] [--server URL ...] [--token T] [--json]

``MODULE:FLOW`` names a :class:`wf.flow.Flow` (a ``@flow.workflow``
function); the current directory is importable. One command, idempotent
step by step, so running it again changes nothing and says so:

1. **artifact** ``<flow.artifact_id>``: a version already holding this plan
   (same content hash) is reused; otherwise the next version is created
   (highest + 1; a concurrent deploy that took it makes this one read again);
2. **deployment** ``<artifact_id>.<NAME>``: created (``expected_revision`` 0),
   or saved at its current revision when it pins another version or other
   ``--input`` defaults; its other settings are kept as they are;
3. **schedule** (with ``--cron``; id ``--schedule-id``, default the
   deployment id): created, updated in place when its trigger (compared in
   the server's canonical form) or deployment differ, else left alone.
   Without ``--cron`` an existing schedule is not touched.

A flow that cannot be imported or built, a bad ``--cron``/``--tz``/``--name``/
``--schedule-id``, or a scheduled run missing a required input, is refused before
the server is contacted (exit 2); server refusals exit 1, as every client command.

All or nothing as far as it can be: with ``--cron`` the server is first asked,
with reads only, whether the schedule step could be written
(:func:`_preflight_schedule`); a refusal there writes nothing. A refusal only the
schedule write meets (a concurrent change, a missing permission) exits 1 saying
what was written and what was not; rerunning the same command once the cause is
fixed converges (the written steps come back ``unchanged``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

from wf.cli import json_args
from wf.cli.connect import USAGE_EXIT, UsageError, common_parser, handler
from wf.cli.output import emit, fail

if TYPE_CHECKING:
    from types import TracebackType

    from wf.client.app import SyncApp
    from wf.flow import Flow
    from wf.wire.schedule_views import ScheduleView
    from wf.wire.workflow import Artifact, ArtifactPage

CREATE_ATTEMPTS = 5
"""Versions tried when concurrent deploys keep taking the next one first."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``deploy`` command to the ``wf`` parser."""
    sub = subparsers.add_parser(
        "deploy",
        help="publish a Python flow: artifact version, deployment, optional cron schedule",
        description="Create the flow's artifact version (reused when the plan is unchanged), "
        "save its deployment and, with --cron, its schedule. Idempotent: a second run "
        "changes nothing and says so.",
        parents=[common_parser()],
    )
    sub.set_defaults(handler=_run)
    sub.add_argument("target", metavar="MODULE:FLOW", help="a @flow.workflow object")
    sub.add_argument("--name", required=True, help="deployment name (id: <artifact_id>.<name>)")
    sub.add_argument("--cron", metavar="EXPR", help="five-field cron expression of a schedule")
    sub.add_argument("--tz", metavar="ZONE", help="IANA zone the cron is read in (default UTC)")
    sub.add_argument(
        "--schedule-id", metavar="ID", help="the schedule's id (default: the deployment id)"
    )
    sub.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a deployment default input (VALUE is JSON when it parses, else a string); repeatable",
    )


def _run(args: argparse.Namespace) -> int:
    try:
        if args.tz is not None and args.cron is None:
            raise UsageError("--tz needs --cron")
        if args.schedule_id is not None and args.cron is None:
            raise UsageError("--schedule-id needs --cron")
        args.trigger = _trigger(args.cron, args.tz) if args.cron is not None else None
        args.flow = load_flow(args.target)
        args.inputs = _inputs(args.input)
        _check_ids(args.flow, args.name, args.trigger is not None, args.schedule_id)
        if args.trigger is not None:
            _check_scheduled_inputs(args.flow, args.inputs)
    except UsageError as exc:
        return fail(str(exc), USAGE_EXIT, as_json=args.json)
    return handler(_deploy)(args)


def load_flow(spec: str) -> Flow:
    """The :class:`~wf.flow.Flow` named by ``module:attribute`` (the current directory
    is importable); :class:`UsageError` when it cannot be imported or built."""
    from wf.errors import WfError
    from wf.flow import Flow

    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(f"expected MODULE:FLOW, not {spec!r}")
    if not all(part.isidentifier() for part in module_name.split(".")):
        # A path (../x, a/b.py) reached importlib and failed there with its own TypeError.
        raise UsageError(f"{module_name!r} is not a module name (dotted, like pkg.flows)")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        target: Any = importlib.import_module(module_name)
    except WfError as exc:  # the flow itself was refused while the module built it
        raise UsageError(f"{spec}: {exc.code}: {exc.message}") from None
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name!r}: {exc}") from None
    except SyntaxError as exc:  # the user's module does not parse: say where, not a traceback
        raise UsageError(
            f"cannot import {module_name!r}: {exc.msg} ({exc.filename}, line {exc.lineno})"
        ) from None
    except Exception as exc:  # the module raised while it ran: name it, not a traceback
        where = _innermost(exc.__traceback__)
        raise UsageError(
            f"cannot import {module_name!r}: {type(exc).__name__}: {exc}{where}"
        ) from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(f"{module_name!r} has no {attribute!r}") from None
    if not isinstance(target, Flow):
        raise UsageError(
            f"{spec} is a {type(target).__name__}, not a flow (decorate it with @flow.workflow)"
        )
    return target


def _innermost(tb: TracebackType | None) -> str:
    """`` (file, line N)`` of the innermost frame of ``tb``, or nothing."""
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    return f" ({tb.tb_frame.f_code.co_filename}, line {tb.tb_lineno})"


def _trigger(cron: str, tz: str | None) -> dict[str, Any]:
    """The cron trigger as the server stores it (its expression canonical: ``MON`` is
    ``mon``, spaces single), so that comparing with the stored one is exact; a bad
    expression or zone is refused here, before anything is written."""
    from wf.errors import WfError
    from wf.schedules.model import parse_trigger
    from wf.wire.triggers import CronTrigger

    wanted = {"kind": "cron", "expression": cron, "timezone": tz or "UTC"}
    try:
        parsed = parse_trigger(wanted)
    except WfError as exc:
        raise UsageError(f"--cron/--tz: {exc.code}: {exc.message}") from None
    assert isinstance(parsed, CronTrigger)
    return {"kind": "cron", "expression": parsed.expression, "timezone": parsed.timezone}


def _check_ids(flow: Flow, name: str, scheduled: bool, schedule_id: str | None) -> None:
    """Refuse, before anything is written, a deployment name or schedule id the server
    would refuse, with the server's own validators (the default schedule id is the
    deployment id, which can outgrow a schedule id's 128 characters)."""
    from wf.errors import WfError
    from wf.runtime.deployments import deployment_id_of, spec_from_body
    from wf.schedules.model import check_schedule_id

    try:
        spec_from_body({"artifact_id": flow.artifact_id, "artifact_version": 1, "name": name})
    except WfError as exc:
        raise UsageError(f"--name: {exc.code}: {exc.message}") from None
    if scheduled:
        wanted = schedule_id or deployment_id_of(flow.artifact_id, name)
        try:
            check_schedule_id(wanted)
        except WfError as exc:
            raise UsageError(f"--schedule-id: {exc.code}: {exc.message}") from None


def _check_scheduled_inputs(
    flow: Flow, inputs: dict[str, Any] | None, schedule_inputs: dict[str, Any] | None = None
) -> None:
    """Refuse, before anything is written, a schedule whose runs could not start: a
    scheduled run has the plan's defaults, the deployment's inputs (``--input``, or
    those it keeps) and an existing schedule's own inputs, which the server checks
    against the input schema when the schedule is written (after the artifact and
    deployment were saved)."""
    from wf.runtime.plan import input_defaults_of
    from wf.runtime.schema import instance_problems

    schema = dict(flow.plan.input_schema)
    if not schema:
        return
    given = {**input_defaults_of(schema), **(inputs or {}), **(schedule_inputs or {})}
    problems = instance_problems(schema, given)
    if problems:
        raise UsageError(
            f"--cron: a scheduled run of {flow.artifact_id!r} would start with inputs "
            f"{sorted(given)} and be refused ({'; '.join(problems)}): give them with --input"
        )


def _inputs(items: list[str]) -> dict[str, Any] | None:
    if not items:
        return None
    inputs: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--input {item!r}: expected KEY=VALUE")
        try:
            inputs[key] = json_args.loads(value)  # NaN, Infinity, 1e400: text
        except ValueError:
            inputs[key] = value
    return inputs


# ----------------------------------------------------------------- deploy


def _deploy(app: SyncApp, args: argparse.Namespace) -> int:
    from wf.errors import WfError

    flow: Flow = args.flow
    if args.trigger is not None:
        _preflight_schedule(app, flow, args)
    done: list[str] = []
    try:
        artifact = _publish(app, flow)
        done.append(f"artifact {flow.artifact_id} v{artifact['version']} ({artifact['action']})")
        deployment = _save_deployment(app, flow, artifact["version"], args)
        done.append(
            f"deployment {deployment['deployment_id']} ({deployment['action']}, "
            f"revision {deployment['revision']})"
        )
        schedule = _save_schedule(app, deployment["deployment_id"], args) if args.trigger else None
    except (WfError, UsageError) as exc:
        if not done:
            raise  # nothing written: the usual refusal
        return _partial(args, exc, done)
    steps = [artifact, deployment] + ([schedule] if schedule else [])
    changed = any(s["action"] != "unchanged" for s in steps)
    answer = {
        "artifact": artifact,
        "deployment": deployment,
        "schedule": schedule,
        "changed": changed,
    }

    def shown() -> str:
        lines = [
            f"artifact {flow.artifact_id} v{artifact['version']}: {artifact['action']} "
            f"({artifact['content_hash']})",
            f"deployment {deployment['deployment_id']}: {deployment['action']} "
            f"(v{deployment['artifact_version']}, revision {deployment['revision']})",
        ]
        if schedule is not None:
            lines.append(
                f"schedule {schedule['schedule_id']}: {schedule['action']} "
                f"(cron {schedule['cron']!r} {schedule['timezone']}, "
                f"revision {schedule['revision']})"
            )
        lines.append("changed" if changed else "nothing changed")
        return "\n".join(lines)

    return emit(args, answer, shown)


def _preflight_schedule(app: SyncApp, flow: Flow, args: argparse.Namespace) -> None:
    """Ask the server, with reads only, whether the schedule step could be written,
    before anything is: schedules enabled (a refused read propagates), the id not
    deleted, the schedule in the deployment's tenant, and a scheduled run's inputs
    valid (the deployment's defaults it keeps and an existing schedule's own inputs
    included)."""
    from wf.errors import NotFound

    deployment_id = f"{flow.artifact_id}.{args.name}"
    schedule_id: str = args.schedule_id or deployment_id
    try:
        current = app.run(lambda a: a.get_deployment(deployment_id))
    except NotFound:
        current = None
    try:
        view: ScheduleView | None = app.run(lambda a: a.get_schedule(schedule_id))
    except NotFound:
        view = None
    if view is not None and view.get("status") == "deleted":
        raise UsageError(_deleted(schedule_id))
    tenant = current.tenant if current is not None else "default"
    if view is not None and view.get("tenant", tenant) != tenant:
        raise UsageError(
            f"schedule {schedule_id!r} belongs to tenant {view.get('tenant')!r} and "
            f"deployment {deployment_id!r} to {tenant!r}; a schedule stays with its "
            "tenant: pass --schedule-id with another id"
        )
    inputs = args.inputs
    if inputs is None and current is not None:
        inputs = dict(current.default_inputs)
    _check_scheduled_inputs(flow, inputs, view.get("inputs") if view is not None else None)


def _deleted(schedule_id: str) -> str:
    return (
        f"schedule {schedule_id!r} was deleted and schedule ids are never reused: "
        "pass --schedule-id with a new id"
    )


def _partial(args: argparse.Namespace, exc: Exception, done: list[str]) -> int:
    """Report a deploy refused after some of its steps were written (exit 1): what was
    written, what was not, and that a rerun once fixed reuses what was written."""
    from wf.cli.connect import REFUSED_EXIT
    from wf.errors import WfError

    code = exc.code if isinstance(exc, WfError) else "usage"
    why = exc.message if isinstance(exc, WfError) else str(exc)
    step = "schedule" if len(done) == 2 else "deployment"
    message = (
        f"{why} -- stored: {'; '.join(done)}; NOT written: the {step}"
        + (" and the schedule" if step == "deployment" and args.trigger is not None else "")
        + ". Fix the cause and run the same wf deploy again: what is stored is "
        "reused (unchanged)"
    )
    if args.json:
        return fail(message, REFUSED_EXIT, as_json=True, error_code=code)
    return fail(f"{code}: {message}", REFUSED_EXIT)


def _publish(app: SyncApp, flow: Flow) -> dict[str, Any]:
    """The artifact version holding the flow's plan: found, else created."""
    from wf.errors import AlreadyExists

    wanted = flow.content_hash
    for _ in range(CREATE_ATTEMPTS):
        highest = 0
        cursor: str | None = None
        while True:
            page = _artifact_page(app, flow.artifact_id, cursor)
            for found in page.artifacts:
                if found.artifact_id != flow.artifact_id:
                    continue
                if found.content_hash == wanted:
                    return _artifact_step(found.version, wanted, "unchanged")
                highest = max(highest, found.version)
            cursor = page.next_cursor
            if cursor is None:
                break
        try:
            created = _create_artifact(app, flow, highest + 1)
        except AlreadyExists:
            continue  # another deploy took that version first: read again
        return _artifact_step(created.version, created.content_hash, "created")
    raise UsageError(
        f"artifact {flow.artifact_id!r}: gave up after {CREATE_ATTEMPTS} concurrent creations"
    )


def _artifact_page(app: SyncApp, artifact_id: str, cursor: str | None) -> ArtifactPage:
    return app.run(lambda a: a.list_artifacts(artifact_id, limit=100, cursor=cursor))


def _create_artifact(app: SyncApp, flow: Flow, version: int) -> Artifact:
    return app.run(
        lambda a: a.create_artifact_from_plan(flow.artifact_id, version, flow.to_builtins())
    )


def _artifact_step(version: int, content_hash: str, action: str) -> dict[str, Any]:
    return {"version": version, "content_hash": content_hash, "action": action}


def _save_deployment(
    app: SyncApp, flow: Flow, version: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Create the deployment, or move it to ``version`` (and the given inputs)."""
    import msgspec

    from wf.errors import NotFound

    deployment_id = f"{flow.artifact_id}.{args.name}"
    inputs: dict[str, Any] | None = args.inputs
    try:
        current = app.run(lambda a: a.get_deployment(deployment_id))
    except NotFound:
        current = None
    if current is None:
        body: dict[str, Any] = {
            "artifact_id": flow.artifact_id,
            "artifact_version": version,
            "name": args.name,
        }
        if inputs is not None:
            body["default_inputs"] = inputs
        saved = app.run(lambda a: a.save_deployment(body, expected_revision=0))
        action = "created"
    elif current.artifact_version == version and (
        inputs is None or current.default_inputs == inputs
    ):
        saved, action = current, "unchanged"
    else:
        # Keep every setting it has (tenant, priority, budgets ...): deploy moves the
        # version and, when given, the default inputs.
        body = msgspec.to_builtins(current)
        for key in ("deployment_id", "created_at", "updated_at", "revision"):
            body.pop(key, None)
        body["artifact_version"] = version
        if inputs is not None:
            body["default_inputs"] = inputs
        revision = current.revision
        saved = app.run(lambda a: a.save_deployment(body, expected_revision=revision))
        action = "updated"
    return {
        "deployment_id": saved.deployment_id,
        "artifact_version": saved.artifact_version,
        "revision": saved.revision,
        "action": action,
    }


def _save_schedule(app: SyncApp, deployment_id: str, args: argparse.Namespace) -> dict[str, Any]:
    """Create the cron schedule, or update its trigger and deployment in place."""
    from wf.errors import NotFound

    schedule_id: str = args.schedule_id or deployment_id
    trigger: dict[str, Any] = args.trigger
    try:
        view = app.run(lambda a: a.get_schedule(schedule_id))
    except NotFound:
        view = None
    if view is None:
        view = app.run(lambda a: a.create_schedule(schedule_id, deployment_id, trigger))
        action = "created"
    elif view.get("status") == "deleted":
        raise UsageError(_deleted(schedule_id))  # deleted since the preflight read
    elif _same_trigger(view.get("trigger"), trigger) and view["deployment_id"] == deployment_id:
        action = "unchanged"
    else:
        revision = view["revision"]
        view = app.run(
            lambda a: a.update_schedule(
                schedule_id, revision, deployment_id=deployment_id, trigger=trigger
            )
        )
        action = "updated"
    return {
        "schedule_id": schedule_id,
        "cron": trigger["expression"],
        "timezone": trigger["timezone"],
        "revision": view["revision"],
        "action": action,
    }


def _same_trigger(stored: object, wanted: dict[str, Any]) -> bool:
    if not isinstance(stored, dict):
        return False
    return all(stored.get(k, "UTC" if k == "timezone" else None) == v for k, v in wanted.items())
