"""``wf runs``: start, list, inspect, answer and cancel workflow runs on a server.

::

    wf runs start DEPLOYMENT [--input KEY=VALUE ...] [--inputs-file F.json]
                  [--request-id ID] [--wait [--timeout S]]
    wf runs list [--deployment D] [--schedule S] [--status X] [--since WHEN]
                 [--oldest-first] [--limit N] [--cursor C]
    wf runs inspect RUN_ID [--attempts]
    wf runs resume RUN_ID --answer JSON [--node N]
    wf runs cancel RUN_ID [--reason TEXT]

``runs list`` shows the newest runs first (``--oldest-first`` turns it
round); ``--since`` takes an ISO 8601 instant or a duration back from now
(``90s``, ``15m``, ``2h``, ``7d``). ``runs start --wait`` follows the run
until it stops and exits 0 when it completed, 3 when it failed, was
cancelled or ran out of steps, and 4 when it waits for an answer or
``--timeout`` passed first. The connection options (``--server``,
``--token``, ``--json``) and the other exit codes are those of
``wf schedules`` (see :mod:`wf.cli.connect`).
"""

from __future__ import annotations

import argparse
import math
import re
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from wf.cli import json_args
from wf.cli.connect import UsageError, common_parser, handler, paging
from wf.cli.output import attempts_text, emit, fail, more, run_text, run_trigger, table, when
from wf.wire.bounds import DURATION_MAX_S

if TYPE_CHECKING:
    from wf.client.app import SyncApp

FAILED_EXIT: Final = 3
"""``runs start --wait``: the run stopped without completing."""
NOT_DONE_EXIT: Final = 4
"""``runs start --wait``: the run waits for an answer, or ``--timeout`` passed first."""

_UNITS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}
_DURATION: Final = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$", re.ASCII)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``runs`` command group to the ``wf`` parser."""
    common = common_parser()
    runs = subparsers.add_parser("runs", help="start, list, inspect, answer and cancel runs")
    actions = runs.add_subparsers(dest="runs_command", required=True)

    def add(name: str, helptext: str, command: Any) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=helptext, description=helptext, parents=[common])
        sub.set_defaults(handler=handler(command))
        return sub

    sub = add("start", "start a run of a deployment", _start)
    sub.add_argument("deployment_id", metavar="DEPLOYMENT")
    sub.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an input (VALUE is read as JSON when it parses, else as a string); repeatable",
    )
    sub.add_argument(
        "--inputs-file", metavar="F.json", help="a JSON object of inputs ('-' reads stdin)"
    )
    sub.add_argument("--request-id", metavar="ID", help="makes a repeated start idempotent")
    sub.add_argument("--wait", action="store_true", help="follow the run until it stops")
    sub.add_argument(
        "--timeout",
        type=_seconds,
        metavar="S",
        help="with --wait: give up after S seconds",
    )

    sub = add("list", "list runs, newest first", _runs_list)
    sub.add_argument("--deployment", metavar="D", help="only runs of this deployment")
    sub.add_argument("--schedule", metavar="S", help="only runs this schedule admitted")
    sub.add_argument("--status", metavar="X", help="only runs in this status")
    sub.add_argument(
        "--since",
        metavar="WHEN",
        help="only runs created since WHEN: an ISO 8601 instant or a duration (15m, 2h, 7d)",
    )
    sub.add_argument("--oldest-first", action="store_true", help="list the oldest runs first")
    paging(sub)

    sub = add("inspect", "show one run and its trace", _runs_inspect)
    sub.add_argument("run_id", metavar="RUN_ID")
    sub.add_argument(
        "--attempts",
        action="store_true",
        help="show every attempt of every node and map item (worker, times, outcome, error, "
        "stack trace)",
    )

    sub = add("resume", "answer a run's interrupt node", _resume)
    sub.add_argument("run_id", metavar="RUN_ID")
    sub.add_argument(
        "--answer", required=True, metavar="JSON", help="the answer (JSON; else a string)"
    )
    sub.add_argument("--node", metavar="N", help="the interrupt node (when several wait)")

    sub = add("cancel", "cancel a run that has not stopped", _cancel)
    sub.add_argument("run_id", metavar="RUN_ID")
    sub.add_argument("--reason", default="", help="why (kept in the run's error)")


# ---------------------------------------------------------------- commands


def _start(app: SyncApp, args: argparse.Namespace) -> int:
    inputs = _inputs(args)
    view = app.run(
        lambda a: a.start_run(args.deployment_id, inputs, request_id=args.request_id)
    ).to_builtins()
    if not args.wait:
        return emit(args, view, lambda: f"started {view['run_id']}\n\n" + run_text(view))
    # Not a one-call command any more: the wait rides out a server restart with the
    # full failover budget, as any client does (wf.cli.connect).
    app.app.rpc.refused_timeout_s = None
    try:
        view = app.run(lambda a: a.wait_for_run(view["run_id"], args.timeout)).to_builtins()
    except TimeoutError:
        view = app.run(lambda a: a.inspect_run(view["run_id"])).to_builtins()
        emit(args, view, lambda: run_text(view))
        fail(
            f"run {view['run_id']} is still {view['status']} after {args.timeout:g} s",
            NOT_DONE_EXIT,
            as_json=args.json,
            error_code="timeout",
        )
        return NOT_DONE_EXIT
    emit(args, view, lambda: run_text(view))
    if view["status"] == "completed":
        return 0
    return NOT_DONE_EXIT if view["status"] == "interrupted" else FAILED_EXIT


def _runs_list(app: SyncApp, args: argparse.Namespace) -> int:
    since = None if args.since is None else _since(args.since)
    page = app.run(
        lambda a: a.list_runs(
            deployment_id=args.deployment,
            schedule_id=args.schedule,
            status=args.status,
            limit=args.limit,
            cursor=args.cursor,
            newest_first=not args.oldest_first,
            created_after=since,
        )
    ).to_builtins()
    return emit(args, page, lambda: _runs_table(page))


def _runs_inspect(app: SyncApp, args: argparse.Namespace) -> int:
    view = app.run(lambda a: a.inspect_run(args.run_id)).to_builtins()
    if args.attempts:
        return emit(args, view, lambda: attempts_text(view))
    return emit(args, view, lambda: run_text(view))


def _resume(app: SyncApp, args: argparse.Namespace) -> int:
    answer = _json_or_text(args.answer)
    view = app.run(lambda a: a.resume_run(args.run_id, answer, node_id=args.node)).to_builtins()
    return emit(args, view, lambda: f"answered {args.run_id}\n\n" + run_text(view))


def _cancel(app: SyncApp, args: argparse.Namespace) -> int:
    view = app.run(lambda a: a.cancel_run(args.run_id, reason=args.reason)).to_builtins()
    return emit(args, view, lambda: f"cancelled {args.run_id}\n\n" + run_text(view))


# ------------------------------------------------------------------ input


def _inputs(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--inputs-file`` overlaid with each ``--input``; ``None`` when neither is given."""
    inputs: dict[str, Any] = {}
    if args.inputs_file is not None:
        loaded = json_args.load_file(args.inputs_file)
        if not isinstance(loaded, dict):
            raise UsageError(f"{args.inputs_file}: must hold a JSON object")
        inputs.update(loaded)
    for item in args.input:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--input {item!r}: expected KEY=VALUE")
        inputs[key] = _json_or_text(value)
    return inputs if inputs or args.inputs_file is not None else None


def _json_or_text(value: str) -> Any:
    """``value`` as JSON when it parses (``42``, ``true``, ``{"a": 1}``), else the string."""
    try:
        return json_args.loads(value)
    except ValueError:
        return value


def _since(value: str) -> float:
    """``--since``: an ISO 8601 instant (with a zone) or a duration back from now."""
    match = _DURATION.match(value.strip())
    if match:
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
        if seconds > DURATION_MAX_S:
            raise UsageError(f"--since {value!r}: at most a century back")
        return time.time() - seconds
    try:
        at = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--since {value!r}: expected an ISO 8601 instant or a duration like 15m, 2h, 7d"
        ) from None
    if at.tzinfo is None:
        raise UsageError(f"--since {value!r}: give a zone (Z or +HH:MM)")
    try:
        return at.astimezone(UTC).timestamp()
    except OverflowError:  # year 1 or 9999 pushed past the calendar by its zone
        raise UsageError(f"--since {value!r}: out of range") from None


# -------------------------------------------------------------- rendering


def _runs_table(page: dict[str, Any]) -> str:
    rows = [
        (
            r["run_id"],
            r["status"],
            r.get("deployment_id", "-"),
            run_trigger(r.get("trigger")),
            when(r.get("created_at")),
            when(r.get("finished_at")),
        )
        for r in page["runs"]
    ]
    headers = ("RUN", "STATUS", "DEPLOYMENT", "TRIGGER", "CREATED", "FINISHED")
    return (table(headers, rows) if rows else "(no runs)") + more(page)


def _seconds(text: str) -> float:
    """A finite number of seconds, 0 or more (0: look once); argparse reports a refusal as
    a usage error, exit 2."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds, 0 or more: {text}")
    return value
