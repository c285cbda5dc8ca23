"""``wf schedules`` and ``wf runs``: administer deployment schedules and runs on a server.

::

    wf schedules create --file F.json        # the body holds create_schedule's parameters
    wf schedules get ID
    wf schedules list [--include-deleted] [--limit N] [--cursor C | --page]
    wf schedules update ID --expected-revision N --file F.json   # the fields to change
    wf schedules pause ID [--reason TEXT]
    wf schedules resume ID
    wf schedules delete ID
    wf schedules occurrences ID [--limit N] [--cursor C] [--all]
    wf schedules preview ID [--count N]
    wf schedules trigger ID
    wf runs list [--deployment D] [--schedule S] [--status X] [--limit N] [--cursor C]
    wf runs inspect RUN_ID

Every command takes ``--server URL`` (repeat it for failover; default
``http://127.0.0.1:8765``, ``wf-rpc-server``'s default), ``--token T`` (or
``$WF_TOKEN``, which other users of the host cannot read from the process
list) and ``--json`` (print the server's answer as JSON instead of a table).
The calls are the :class:`~wf.client.App` twins of the server's Python API
(``workflow.schedules.*`` and ``workflow.runs.*``).

Times in tables are UTC (``…Z``); a schedule's preview also shows wall time
in its zone. A refusal by the server prints one line ``wf: error: <code>:
<message>`` to stderr and exits 1; unusable input of our own (a missing or
malformed ``--file``) prints ``wf: error: <reason>`` and exits 2, like
argparse's usage errors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from wf.client.app import App, SyncApp
from wf.client.rpc_client import FAILOVER_TIMEOUT_S
from wf.errors import WfError
from wf.wire.schedule_methods import CreateScheduleParams, UpdateScheduleParams

DEFAULT_SERVER: Final = "http://127.0.0.1:8765"
"""``wf-rpc-server``'s default address."""
TOKEN_ENV: Final = "WF_TOKEN"
"""Environment variable holding the bearer token when ``--token`` is not given."""
REFUSED_EXIT: Final = 1
"""Exit code when the server (or the transport) refuses the call."""
USAGE_EXIT: Final = 2
"""Exit code for unusable input (argparse uses the same)."""

_CREATE_FIELDS: Final = tuple(CreateScheduleParams.__struct_fields__)
_UPDATE_FIELDS: Final = tuple(
    f
    for f in UpdateScheduleParams.__struct_fields__
    if f not in ("schedule_id", "expected_revision")
)

Command = Callable[[SyncApp, argparse.Namespace], int]


class UsageError(Exception):
    """Input of ours that cannot be used (exit 2)."""


# ------------------------------------------------------------------ parser


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``schedules`` and ``runs`` command groups to the ``wf`` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--server",
        action="append",
        dest="servers",
        metavar="URL",
        help=f"server URL; repeat or comma-separate for a cluster (default {DEFAULT_SERVER})",
    )
    common.add_argument("--token", help=f"bearer token (or ${TOKEN_ENV})")
    common.add_argument(
        "--failover-timeout",
        type=float,
        default=FAILOVER_TIMEOUT_S,
        metavar="S",
        help=f"how long a call keeps trying the servers (default {FAILOVER_TIMEOUT_S:g} s)",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")

    group = subparsers.add_parser("schedules", help="administer deployment schedules")
    actions = group.add_subparsers(dest="schedules_command", required=True)

    def add(
        name: str, helptext: str, command: Command, *, one: bool = True
    ) -> argparse.ArgumentParser:
        """A subcommand; ``one``: it acts on one schedule, named first."""
        sub = actions.add_parser(name, help=helptext, description=helptext, parents=[common])
        sub.set_defaults(handler=_handler(command))
        if one:
            sub.add_argument("schedule_id", metavar="ID")
        return sub

    def body_file(sub: argparse.ArgumentParser, fields: str) -> None:
        sub.add_argument(
            "--file",
            required=True,
            metavar="F.json",
            help=f"JSON object with {fields} ('-' reads stdin)",
        )

    sub = add("create", "create a schedule from a JSON body", _create, one=False)
    body_file(sub, ", ".join(_CREATE_FIELDS))
    add("get", "show one schedule", _get)
    sub = add("list", "list schedules (every page, unless --cursor or --page)", _list, one=False)
    sub.add_argument("--include-deleted", action="store_true", help="also list deleted ones")
    sub.add_argument("--limit", type=int, default=100, metavar="N", help="page size, 1-100 (100)")
    one_page = sub.add_mutually_exclusive_group()
    one_page.add_argument(
        "--cursor", metavar="C", help="show only the page after a previous page's next_cursor"
    )
    one_page.add_argument(
        "--page", action="store_true", help="show only the first page (and its next_cursor)"
    )
    sub = add("update", "change the fields given in a JSON body", _update)
    sub.add_argument(
        "--expected-revision",
        type=int,
        required=True,
        metavar="N",
        help="the revision the edit is based on (see get)",
    )
    body_file(sub, f"any of {', '.join(_UPDATE_FIELDS)}")
    sub = add("pause", "stop future admission (an active run goes on)", _pause)
    sub.add_argument("--reason", help="why (shown by get)")
    add("resume", "admit again from the next future instant", _resume)
    add("delete", "soft delete: no admission; runs and history stay", _delete)
    sub = add("occurrences", "list a schedule's occurrences, oldest first", _occurrences)
    _paging(sub)
    sub.add_argument(
        "--all", action="store_true", help="follow the cursor to the last page (--limit per page)"
    )
    sub = add("preview", "the next instants the trigger yields", _preview)
    sub.add_argument("--count", type=int, default=5, metavar="N", help="how many, 1-100 (5)")
    add("trigger", "start one manual run now through the schedule's bindings", _trigger)

    runs = subparsers.add_parser("runs", help="list and inspect workflow runs")
    run_actions = runs.add_subparsers(dest="runs_command", required=True)
    sub = run_actions.add_parser("list", help="list runs, oldest first", parents=[common])
    sub.set_defaults(handler=_handler(_runs_list))
    sub.add_argument("--deployment", metavar="D", help="only runs of this deployment")
    sub.add_argument("--schedule", metavar="S", help="only runs this schedule admitted")
    sub.add_argument("--status", metavar="X", help="only runs in this status")
    _paging(sub)
    sub = run_actions.add_parser("inspect", help="show one run and its trace", parents=[common])
    sub.set_defaults(handler=_handler(_runs_inspect))
    sub.add_argument("run_id", metavar="RUN_ID")


def _paging(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--limit", type=int, default=50, metavar="N", help="page size, 1-100 (50)")
    sub.add_argument("--cursor", metavar="C", help="continue after a previous page")


def _handler(command: Command) -> Callable[[argparse.Namespace], int]:
    """``command`` with a client around it and errors turned into exit codes."""

    def handle(args: argparse.Namespace) -> int:
        token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
        try:
            with App.sync(
                args.servers or [DEFAULT_SERVER],
                token=token,
                failover_timeout_s=args.failover_timeout,
            ) as app:
                return command(app, args)
        except UsageError as exc:
            return _fail(str(exc), USAGE_EXIT)
        except WfError as exc:
            return _fail(f"{exc.code}: {exc.message}", REFUSED_EXIT)

    return handle


def _fail(message: str, code: int) -> int:
    print(f"wf: error: {' '.join(message.split())}", file=sys.stderr)
    return code


def _emit(args: argparse.Namespace, answer: Any, text: Callable[[], str]) -> int:
    """Print ``answer`` as JSON with ``--json``, else ``text()``."""
    if args.json:
        print(json.dumps(answer, indent=2, sort_keys=True))
    else:
        print(text())
    return 0


# -------------------------------------------------------------- schedules


def _create(app: SyncApp, args: argparse.Namespace) -> int:
    body = _body(args.file, _CREATE_FIELDS)
    missing = [f for f in ("schedule_id", "deployment_id", "trigger") if f not in body]
    if missing:
        raise UsageError(f"{args.file}: missing {', '.join(missing)}")
    view = app.run(lambda a: a.create_schedule(**body))
    return _emit(args, view, lambda: _schedule_text(view, "created"))


def _get(app: SyncApp, args: argparse.Namespace) -> int:
    view = app.run(lambda a: a.get_schedule(args.schedule_id))
    return _emit(args, view, lambda: _schedule_text(view))


def _list(app: SyncApp, args: argparse.Namespace) -> int:
    def page_after(cursor: str | None) -> dict[str, Any]:
        return app.run(
            lambda a: a.list_schedules(
                include_deleted=args.include_deleted, limit=args.limit, cursor=cursor
            )
        )

    if args.page or args.cursor is not None:
        page = page_after(args.cursor)
        return _emit(args, page, lambda: _schedules_table(page["schedules"]) + _more(page))
    # Every page, in order: the listing is paged on the server (at most 100 a call).
    views = _every_page(page_after(None), page_after, "schedules")
    return _emit(args, views, lambda: _schedules_table(views))


def _update(app: SyncApp, args: argparse.Namespace) -> int:
    body = _body(args.file, _UPDATE_FIELDS)
    view = app.run(lambda a: a.update_schedule(args.schedule_id, args.expected_revision, **body))
    return _emit(args, view, lambda: _schedule_text(view, "updated"))


def _pause(app: SyncApp, args: argparse.Namespace) -> int:
    view = app.run(lambda a: a.pause_schedule(args.schedule_id, reason=args.reason))
    return _emit(args, view, lambda: _schedule_text(view, "paused"))


def _resume(app: SyncApp, args: argparse.Namespace) -> int:
    view = app.run(lambda a: a.resume_schedule(args.schedule_id))
    return _emit(args, view, lambda: _schedule_text(view, "resumed"))


def _delete(app: SyncApp, args: argparse.Namespace) -> int:
    view = app.run(lambda a: a.delete_schedule(args.schedule_id))
    return _emit(args, view, lambda: _schedule_text(view, "deleted"))


def _occurrences(app: SyncApp, args: argparse.Namespace) -> int:
    def page_after(cursor: str | None) -> dict[str, Any]:
        return app.run(
            lambda a: a.list_schedule_occurrences(args.schedule_id, limit=args.limit, cursor=cursor)
        )

    page = page_after(args.cursor)
    if args.all:
        page = {"occurrences": _every_page(page, page_after, "occurrences"), "next_cursor": None}
    return _emit(args, page, lambda: _occurrences_table(page))


def _preview(app: SyncApp, args: argparse.Namespace) -> int:
    instants = app.run(lambda a: a.preview_schedule(args.schedule_id, count=args.count))
    return _emit(args, instants, lambda: _preview_table(instants))


def _trigger(app: SyncApp, args: argparse.Namespace) -> int:
    view = app.run(lambda a: a.trigger_schedule(args.schedule_id))
    return _emit(
        args,
        view,
        lambda: (
            f"triggered {view['run_id']} from schedule {args.schedule_id} (a manual run)\n\n"
            + _run_text(view)
        ),
    )


def _every_page(
    page: dict[str, Any], page_after: Callable[[str | None], dict[str, Any]], key: str
) -> list[Any]:
    """The ``key`` items of ``page`` and of every page after it, in order."""
    items = list(page[key])
    while page["next_cursor"] is not None:
        page = page_after(page["next_cursor"])
        items.extend(page[key])
    return items


def _body(path: str, allowed: Sequence[str]) -> dict[str, Any]:
    """The JSON object in ``path`` (``-``: stdin), holding only ``allowed`` keys."""
    try:
        if path == "-":
            raw = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as f:
                raw = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise UsageError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise UsageError(f"{path}: must hold a JSON object")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise UsageError(
            f"{path}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}"
        )
    return body


# ------------------------------------------------------------------- runs


def _runs_list(app: SyncApp, args: argparse.Namespace) -> int:
    page = app.run(
        lambda a: a.list_runs(
            deployment_id=args.deployment,
            schedule_id=args.schedule,
            status=args.status,
            limit=args.limit,
            cursor=args.cursor,
        )
    )
    return _emit(args, page, lambda: _runs_table(page))


def _runs_inspect(app: SyncApp, args: argparse.Namespace) -> int:
    view = app.run(lambda a: a.inspect_run(args.run_id))
    return _emit(args, view, lambda: _run_text(view))


# -------------------------------------------------------------- rendering


def _schedules_table(views: list[dict[str, Any]]) -> str:
    if not views:
        return "(no schedules)"
    headers = (
        "ID",
        "STATUS",
        "DEPLOYMENT",
        "TRIGGER",
        "NEXT",
        "REVISION",
        "SKIPPED(OVERLAP/MISFIRE)",
    )
    rows = []
    for v in views:
        if "corrupt" in v:
            rows.append((v["schedule_id"], "corrupt", "-", v["corrupt"], "-", "-", "-"))
            continue
        rows.append(
            (
                v["schedule_id"],
                _status(v),
                v["deployment_id"],
                _trigger_text(v["trigger"]),
                _when(v.get("pending") or v.get("next_instant"))
                + (" (pending)" if v.get("pending") else ""),
                str(v["revision"]),
                f"{v['skipped_overlap']}/{v['skipped_misfire']}",
            )
        )
    return _table(headers, rows)


def _schedule_text(v: dict[str, Any], verb: str | None = None) -> str:
    overlap = v["overlap"]
    if overlap == "parallel":
        overlap += f" (max_active_runs {v['max_active_runs']})"
    pairs: list[tuple[str, str]] = [
        ("ID", v["schedule_id"]),
        ("STATUS", _status(v)),
        ("DEPLOYMENT", v["deployment_id"]),
        ("TRIGGER", _trigger_text(v["trigger"])),
        ("NEXT", _when(v.get("next_instant"))),
    ]
    if v.get("pending"):
        pairs.append(("PENDING", f"{_when(v['pending'])} (held: misfire=latest)"))
    pairs += [
        ("INPUTS", json.dumps(v["inputs"], sort_keys=True) if v["inputs"] else "-"),
        ("OVERLAP", overlap),
        ("MISFIRE", v["misfire"]),
        ("MAX STEPS", _text(v["max_steps"])),
        ("NOTE", _text(v["note"])),
        ("REVISION", str(v["revision"])),
        ("SKIPPED", f"overlap {v['skipped_overlap']}, misfire {v['skipped_misfire']}"),
        ("CREATED", _when(v["created_at"])),
        ("UPDATED", _when(v["updated_at"])),
    ]
    if v.get("paused"):
        reason = v.get("pause_reason")
        pairs.append(("PAUSED", _when(v["paused_at"]) + (f" ({reason})" if reason else "")))
    if v.get("deleted"):
        pairs.append(("DELETED", _when(v["deleted_at"])))
    if v.get("blocked"):
        pairs.append(("BLOCKED", v["blocked"]))
    text = _pairs(pairs)
    if verb is not None:
        text = f"{verb} schedule {v['schedule_id']} (revision {v['revision']})\n\n{text}"
    return text


def _occurrences_table(page: dict[str, Any]) -> str:
    rows = [
        (_when(o["instant"]), o["status"], o.get("run_id") or "-", _text(o.get("detail")))
        for o in page["occurrences"]
    ]
    text = _table(("INSTANT", "STATUS", "RUN", "DETAIL"), rows) if rows else "(no occurrences)"
    return text + _more(page, " (or --all)")


def _preview_table(instants: list[dict[str, Any]]) -> str:
    if not instants:
        return "(the trigger yields no further instants)"
    rows = [(_when(i["instant"]), i["local"], i["timezone"]) for i in instants]
    return _table(("INSTANT", "LOCAL", "TIMEZONE"), rows)


def _runs_table(page: dict[str, Any]) -> str:
    rows = [
        (
            r["run_id"],
            r["status"],
            r.get("deployment_id", "-"),
            _run_trigger(r.get("trigger")),
            _when(r.get("created_at")),
            _when(r.get("finished_at")),
        )
        for r in page["runs"]
    ]
    headers = ("RUN", "STATUS", "DEPLOYMENT", "TRIGGER", "CREATED", "FINISHED")
    return (_table(headers, rows) if rows else "(no runs)") + _more(page)


def _run_text(v: dict[str, Any]) -> str:
    if "corrupt" in v:
        return _pairs([("RUN", v["run_id"]), ("STATUS", "corrupt"), ("ERROR", v["corrupt"])])
    artifact = v.get("artifact") or {}
    steps = str(v.get("steps_used", "-"))
    if v.get("max_steps") is not None:
        steps += f" of {v['max_steps']}"
    pairs: list[tuple[str, str]] = [
        ("RUN", v["run_id"]),
        ("STATUS", v["status"]),
        ("DEPLOYMENT", f"{v['deployment_id']} (revision {v.get('deployment_revision', '-')})"),
        ("ARTIFACT", f"{artifact.get('artifact_id', '-')} v{artifact.get('version', '-')}"),
        ("TRIGGER", _run_trigger(v.get("trigger"))),
        ("CREATED", _when(v.get("created_at"))),
        ("STARTED", _when(v.get("started_at"))),
        ("FINISHED", _when(v.get("finished_at"))),
        ("STEPS", steps),
        ("INPUTS", json.dumps(v.get("inputs"), sort_keys=True)),
        ("OUTPUT", "-" if v.get("output") is None else json.dumps(v["output"], sort_keys=True)),
    ]
    if v.get("error") is not None:
        pairs.append(("ERROR", json.dumps(v["error"], sort_keys=True)))
    for waiting in v.get("awaiting") or []:
        pairs.append(("AWAITING", f"{waiting['node']}: {waiting['prompt']}"))
    text = _pairs(pairs)
    trace = v.get("trace") or []
    if trace:
        rows = [
            (
                t["node"],
                t["kind"],
                t["status"],
                _when(t.get("started_at")),
                _when(t.get("finished_at")),
                str(len(t["attempts"])) if "attempts" in t else "-",
            )
            for t in trace
        ]
        headers = ("NODE", "KIND", "STATUS", "STARTED", "FINISHED", "ATTEMPTS")
        text += "\n\n" + _table(headers, rows)
    return text


def _more(page: dict[str, Any], hint: str = "") -> str:
    """The line that says how to read the next page (nothing on the last one)."""
    cursor = page["next_cursor"]
    return "" if cursor is None else f"\n\nmore: --cursor {cursor}{hint}"


def _status(v: dict[str, Any]) -> str:
    return f"{v['status']} (blocked)" if v.get("blocked") else str(v["status"])


def _trigger_text(trigger: dict[str, Any]) -> str:
    if trigger.get("kind") == "cron":
        return f"cron {trigger['expression']} {trigger.get('timezone', 'UTC')}"
    if trigger.get("kind") == "oneshot":
        return f"once {trigger['at']}"
    return json.dumps(trigger, sort_keys=True)


def _run_trigger(trigger: Any) -> str:
    if not isinstance(trigger, dict):
        return "-"
    if trigger.get("schedule_id"):
        text = f"schedule {trigger['schedule_id']}"
        if trigger.get("occurrence") is not None:
            text += f" @ {_when(trigger['occurrence'])}"
        return text
    return str(trigger.get("kind", "-"))


def _when(value: Any) -> str:
    """A POSIX time or an ISO 8601 instant as ``YYYY-MM-DDTHH:MM:SSZ`` (``-`` if none)."""
    if value is None:
        return "-"
    try:
        if isinstance(value, int | float):
            at = datetime.fromtimestamp(value, tz=UTC)
        else:
            at = datetime.fromisoformat(str(value)).astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        return str(value)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _text(value: Any) -> str:
    return "-" if value is None or value == "" else " ".join(str(value).split())


def _pairs(pairs: Sequence[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"{k.ljust(width)}  {_text(v)}" for k, v in pairs)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    cells = [list(headers), *([_text(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )
