"""``wf schedules``: administer deployment schedules on a server (runs: ``runs_cmd``).

::

    wf schedules create --file F.json        # the body holds create_schedule's parameters
    wf schedules get ID
    wf schedules list [--include-deleted] [--status S] [--limit N] [--cursor C | --page]
    wf schedules update ID --expected-revision N --file F.json   # the fields to change
    wf schedules pause ID [--reason TEXT]
    wf schedules resume ID
    wf schedules delete ID
    wf schedules occurrences ID [--limit N] [--cursor C] [--all]
    wf schedules preview ID [--count N]
    wf schedules trigger ID

Every command takes ``--server URL`` (repeat it for failover; default
``$WF_SERVER``, else ``http://127.0.0.1:8765``, ``wf-rpc-server``'s default), ``--token T`` (or
``$WF_TOKEN``, which other users of the host cannot read from the process
list) and ``--json`` (print the server's answer as JSON instead of a table).
The calls are the :class:`~wf.client.App` twins of the server's Python API
(``workflow.schedules.*``).

Times in tables are UTC (``…Z``); a schedule's preview also shows wall time
in its zone. A refusal by the server prints one line ``wf: error: <code>:
<message>`` to stderr and exits 1; unusable input of our own (a missing or
malformed ``--file``) prints ``wf: error: <reason>`` and exits 2, like
argparse's usage errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from wf.cli.connect import (
    DEFAULT_SERVER,
    REFUSED_EXIT,
    TOKEN_ENV,
    USAGE_EXIT,
    Command,
    UsageError,
    common_parser,
)
from wf.cli.connect import handler as _handler
from wf.cli.connect import paging as _paging
from wf.cli.output import emit as _emit
from wf.cli.output import more as _more
from wf.cli.output import pairs as _pairs
from wf.cli.output import run_text as _run_text
from wf.cli.output import table as _table
from wf.cli.output import text as _text
from wf.cli.output import when as _when
from wf.wire.schedule_methods import CreateScheduleParams, UpdateScheduleParams

if TYPE_CHECKING:
    from wf.client.app import SyncApp

__all__ = ["DEFAULT_SERVER", "REFUSED_EXIT", "TOKEN_ENV", "USAGE_EXIT", "UsageError", "register"]

_CREATE_FIELDS: Final = tuple(CreateScheduleParams.__struct_fields__)
_UPDATE_FIELDS: Final = tuple(
    f
    for f in UpdateScheduleParams.__struct_fields__
    if f not in ("schedule_id", "expected_revision")
)


# ------------------------------------------------------------------ parser


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``schedules`` command group to the ``wf`` parser."""
    common = common_parser()

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
    sub.add_argument(
        "--status",
        choices=("active", "paused", "finished", "blocked", "deleted"),
        help="only schedules in this state",
    )
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


# -------------------------------------------------------------- schedules


def _create(app: SyncApp, args: argparse.Namespace) -> int:
    body = _body(args.file, _CREATE_FIELDS)
    missing = [f for f in ("schedule_id", "deployment_id", "trigger") if f not in body]
    if missing:
        raise UsageError(f"{args.file}: missing {', '.join(missing)}")
    view = app.run(lambda a: a.create_schedule(**body)).to_builtins()
    return _emit(args, view, lambda: _schedule_text(view, "created"))


def _get(app: SyncApp, args: argparse.Namespace) -> int:
    view = app.run(lambda a: a.get_schedule(args.schedule_id)).to_builtins()
    return _emit(args, view, lambda: _schedule_text(view))


def _list(app: SyncApp, args: argparse.Namespace) -> int:
    def page_after(cursor: str | None) -> dict[str, Any]:
        return app.run(
            lambda a: a.list_schedules(
                include_deleted=args.include_deleted,
                limit=args.limit,
                cursor=cursor,
                status=args.status,
            )
        ).to_builtins()

    if args.page or args.cursor is not None:
        page = page_after(args.cursor)
        return _emit(args, page, lambda: _schedules_table(page["schedules"]) + _more(page))
    # Every page, in order: the listing is paged on the server (at most 100 a call).
    views = _every_page(page_after(None), page_after, "schedules")
    return _emit(args, views, lambda: _schedules_table(views))


def _update(app: SyncApp, args: argparse.Namespace) -> int:
    body = _body(args.file, _UPDATE_FIELDS)
    view = app.run(
        lambda a: a.update_schedule(args.schedule_id, args.expected_revision, **body)
    ).to_builtins()
    return _emit(args, view, lambda: _schedule_text(view, "updated"))


def _pause(app: SyncApp, args: argparse.Namespace) -> int:
    view = app.run(lambda a: a.pause_schedule(args.schedule_id, reason=args.reason)).to_builtins()
    return _emit(args, view, lambda: _schedule_text(view, "paused"))


def _resume(app: SyncApp, args: argparse.Namespace) -> int:
    view = app.run(lambda a: a.resume_schedule(args.schedule_id)).to_builtins()
    return _emit(args, view, lambda: _schedule_text(view, "resumed"))


def _delete(app: SyncApp, args: argparse.Namespace) -> int:
    view = app.run(lambda a: a.delete_schedule(args.schedule_id)).to_builtins()
    return _emit(args, view, lambda: _schedule_text(view, "deleted"))


def _occurrences(app: SyncApp, args: argparse.Namespace) -> int:
    def page_after(cursor: str | None) -> dict[str, Any]:
        return app.run(
            lambda a: a.list_schedule_occurrences(args.schedule_id, limit=args.limit, cursor=cursor)
        ).to_builtins()

    page = page_after(args.cursor)
    if args.all:
        page = {"occurrences": _every_page(page, page_after, "occurrences"), "next_cursor": None}
    return _emit(args, page, lambda: _occurrences_table(page))


def _preview(app: SyncApp, args: argparse.Namespace) -> int:
    instants = [
        i.to_builtins()
        for i in app.run(lambda a: a.preview_schedule(args.schedule_id, count=args.count))
    ]
    return _emit(args, instants, lambda: _preview_table(instants))


def _trigger(app: SyncApp, args: argparse.Namespace) -> int:
    view = app.run(lambda a: a.trigger_schedule(args.schedule_id)).to_builtins()
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
    except RecursionError:  # else a traceback
        raise UsageError(f"{path}: not valid JSON: nested too deeply") from None
    if not isinstance(body, dict):
        raise UsageError(f"{path}: must hold a JSON object")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise UsageError(
            f"{path}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}"
        )
    return body


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
        "REASON",
    )
    rows = []
    for v in views:
        if "corrupt" in v:
            rows.append((v["schedule_id"], "blocked", "-", "-", "-", "-", "-", v["corrupt"]))
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
                _reason(v),
            )
        )
    return _table(headers, rows)


def _reason(v: dict[str, Any]) -> str:
    """Why a schedule is not admitting: the blocked diagnosis or the pause note."""
    if v.get("blocked"):
        return str(v["blocked"])
    if v.get("paused"):
        return _text(v.get("pause_reason"))
    return "-"


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
        ("MISFIRE", _misfire_text(v)),
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
    if v.get("finished_at"):
        pairs.append(("FINISHED", _when(v["finished_at"]) + " (no further instant)"))
    if v.get("blocked"):
        pairs.append(("BLOCKED", f"{v['blocked']} (nothing is admitted)"))
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


def _status(v: dict[str, Any]) -> str:
    return str(v["status"])


def _misfire_text(v: dict[str, Any]) -> str:
    lateness = v.get("misfire_lateness_s")
    if v["misfire"] != "skip":
        return str(v["misfire"])
    allowance = "server default" if lateness is None else f"{lateness:g} s"
    return f"skip (allowance {allowance})"


def _trigger_text(trigger: dict[str, Any]) -> str:
    if trigger.get("kind") == "cron":
        return f"cron {trigger['expression']} {trigger.get('timezone', 'UTC')}"
    if trigger.get("kind") == "oneshot":
        return f"once {trigger['at']}"
    return json.dumps(trigger, sort_keys=True)
