"""``wf artifacts`` and ``wf deployments``: the workflow catalog on a server.

::

    wf artifacts create ARTIFACT_ID --version N --file PLAN.json
    wf artifacts get ARTIFACT_ID [--version N]
    wf artifacts list [--artifact ARTIFACT_ID] [--limit N] [--cursor C]
    wf deployments save --file BODY.json [--expected-revision N]
    wf deployments get DEPLOYMENT_ID
    wf deployments list [--limit N] [--cursor C]

``--file -`` reads standard input. A deployment body holds the fields of
``DeploymentSpec`` (docs/workflows.md): at least ``artifact_id`` and
``artifact_version``. The connection options (``--server``, ``--token``,
``--json``) and the exit codes are those of ``wf schedules``
(see :mod:`wf.cli.connect`).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from wf.cli import json_args
from wf.cli.connect import UsageError, common_parser, handler, paging
from wf.cli.output import emit, more, pairs, table, text, when

if TYPE_CHECKING:
    from wf.client.app import SyncApp
    from wf.wire.workflow import Artifact, Deployment


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``artifacts`` and ``deployments`` command groups to the ``wf`` parser."""
    common = common_parser()

    group = subparsers.add_parser("artifacts", help="create and read workflow artifacts (plans)")
    actions = group.add_subparsers(dest="artifacts_command", required=True)
    sub = actions.add_parser(
        "create", help="create an immutable artifact version from a plan", parents=[common]
    )
    sub.set_defaults(handler=handler(_artifact_create))
    sub.add_argument("artifact_id", metavar="ARTIFACT_ID")
    sub.add_argument("--version", type=int, required=True, metavar="N", help="version to create")
    sub.add_argument(
        "--file", required=True, metavar="PLAN.json", help="the plan, JSON ('-' reads stdin)"
    )
    sub = actions.add_parser("get", help="show one artifact version", parents=[common])
    sub.set_defaults(handler=handler(_artifact_get))
    sub.add_argument("artifact_id", metavar="ARTIFACT_ID")
    sub.add_argument("--version", type=int, metavar="N", help="the version (default: highest)")
    sub = actions.add_parser("list", help="list artifact versions", parents=[common])
    sub.set_defaults(handler=handler(_artifact_list))
    sub.add_argument("--artifact", metavar="ARTIFACT_ID", help="only this artifact's versions")
    paging(sub)

    group = subparsers.add_parser("deployments", help="save and read deployments")
    actions = group.add_subparsers(dest="deployments_command", required=True)
    sub = actions.add_parser(
        "save", help="create or update a deployment from a JSON body", parents=[common]
    )
    sub.set_defaults(handler=handler(_deployment_save))
    sub.add_argument(
        "--file", required=True, metavar="BODY.json", help="the deployment, JSON ('-' reads stdin)"
    )
    sub.add_argument(
        "--expected-revision",
        type=int,
        metavar="N",
        help="the revision the change is based on (0: must be new; default: current)",
    )
    sub = actions.add_parser("get", help="show one deployment", parents=[common])
    sub.set_defaults(handler=handler(_deployment_get))
    sub.add_argument("deployment_id", metavar="DEPLOYMENT_ID")
    sub = actions.add_parser("list", help="list deployments", parents=[common])
    sub.set_defaults(handler=handler(_deployment_list))
    paging(sub)


# -------------------------------------------------------------- artifacts


def _artifact_create(app: SyncApp, args: argparse.Namespace) -> int:
    plan = _object(args.file)
    artifact = app.run(lambda a: a.create_artifact_from_plan(args.artifact_id, args.version, plan))
    return emit(args, artifact, lambda: "created " + _artifact_text(artifact))


def _artifact_get(app: SyncApp, args: argparse.Namespace) -> int:
    artifact = app.run(lambda a: a.get_artifact(args.artifact_id, args.version))
    return emit(args, artifact, lambda: _artifact_text(artifact, with_plan=True))


def _artifact_list(app: SyncApp, args: argparse.Namespace) -> int:
    page = app.run(lambda a: a.list_artifacts(args.artifact, limit=args.limit, cursor=args.cursor))
    rows = [
        (
            a.artifact_id,
            str(a.version),
            str(len(a.plan.nodes)),
            a.content_hash.removeprefix("sha256:")[:12],
            when(a.created_at),
        )
        for a in page.artifacts
    ]
    headers = ("ARTIFACT", "VERSION", "NODES", "HASH", "CREATED")
    shown = table(headers, rows) if rows else "(no artifacts)"
    return emit(args, page, lambda: shown + more({"next_cursor": page.next_cursor}))


def _artifact_text(artifact: Artifact, *, with_plan: bool = False) -> str:
    import msgspec

    head = f"artifact {artifact.artifact_id} v{artifact.version}"
    block = pairs(
        [
            ("ARTIFACT", artifact.artifact_id),
            ("VERSION", str(artifact.version)),
            ("NODES", ", ".join(n.id for n in artifact.plan.nodes) or "-"),
            ("HASH", artifact.content_hash),
            ("CREATED", when(artifact.created_at)),
        ]
    )
    shown = f"{head}\n\n{block}"
    if with_plan:
        plan = msgspec.to_builtins(artifact.plan)
        shown += "\n\nPLAN\n" + json.dumps(plan, indent=2, sort_keys=True)
    return shown


# ------------------------------------------------------------ deployments


def _deployment_save(app: SyncApp, args: argparse.Namespace) -> int:
    body = _object(args.file)
    saved = app.run(lambda a: a.save_deployment(body, expected_revision=args.expected_revision))
    return emit(
        args,
        saved,
        lambda: (
            f"saved deployment {saved.deployment_id} (revision {saved.revision})\n\n"
            + _deployment_text(saved)
        ),
    )


def _deployment_get(app: SyncApp, args: argparse.Namespace) -> int:
    found = app.run(lambda a: a.get_deployment(args.deployment_id))
    return emit(args, found, lambda: _deployment_text(found))


def _deployment_list(app: SyncApp, args: argparse.Namespace) -> int:
    page = app.run(lambda a: a.list_deployments(limit=args.limit, cursor=args.cursor))
    rows = [
        (
            d.deployment_id,
            f"{d.artifact_id} v{d.artifact_version}",
            d.tenant,
            str(d.revision),
            when(d.updated_at),
        )
        for d in page.deployments
    ]
    headers = ("DEPLOYMENT", "ARTIFACT", "TENANT", "REVISION", "UPDATED")
    shown = table(headers, rows) if rows else "(no deployments)"
    return emit(args, page, lambda: shown + more({"next_cursor": page.next_cursor}))


def _deployment_text(d: Deployment) -> str:
    return pairs(
        [
            ("DEPLOYMENT", d.deployment_id),
            ("ARTIFACT", f"{d.artifact_id} v{d.artifact_version}"),
            ("NAME", d.name),
            ("TENANT", d.tenant),
            ("PRIORITY", f"{d.priority.name.lower()} ({int(d.priority)})"),
            ("POLICY", text(d.policy)),
            ("INPUTS", json.dumps(d.default_inputs, sort_keys=True) if d.default_inputs else "-"),
            ("MAX STEPS", text(d.max_steps)),
            ("RUN DEADLINE", "-" if d.run_deadline_s is None else f"{d.run_deadline_s:g} s"),
            ("REVISION", str(d.revision)),
            ("CREATED", when(d.created_at)),
            ("UPDATED", when(d.updated_at)),
        ]
    )


def _object(path: str) -> dict[str, Any]:
    """The JSON object in ``path`` (``-``: stdin)."""
    body = json_args.load_file(path)
    if not isinstance(body, dict):
        raise UsageError(f"{path}: must hold a JSON object")
    return body
