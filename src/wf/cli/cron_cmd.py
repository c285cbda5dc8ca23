"""``wf cron``: inspect cron schedules without a server.

``wf cron next EXPR [--tz ZONE] [--after ISO-8601] [--count N] [--json]``
prints the next fire instants of a five-field cron expression as
``wf schedules preview`` prints a schedule's: a table of one row per instant,
``INSTANT`` (UTC, ``…Z``), ``LOCAL`` (wall time in the zone, with its offset)
and ``TIMEZONE``; ``--json`` prints a list of preview's objects (``instant``,
``instant_s``, ``local``, ``timezone``). Invalid input prints one line
``wf: error: <reason>`` to stderr (with ``--json``, one JSON object
``{"error": {"code", "message"}}``) and exits 2, like argparse's own usage
errors.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from wf.cli.output import emit, fail, iso, table, when
from wf.errors import InvalidArgument
from wf.scheduler.cron import COUNT_MAX, next_instants, require_aware, resolve_zone

USAGE_ERROR_EXIT: int = 2
"""Exit code for invalid input (argparse uses the same)."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``cron`` command group to the ``wf`` parser."""
    cron = subparsers.add_parser("cron", help="inspect cron schedules")
    commands = cron.add_subparsers(dest="cron_command", required=True)
    nxt = commands.add_parser(
        "next",
        help="print the next fire instants of a cron expression",
        description="Print the next fire instants of a five-field cron expression, "
        "as UTC (…Z) and as wall time in --tz, as `wf schedules preview` does.",
    )
    nxt.add_argument("expression", help='five-field cron expression, e.g. "0 */6 * * *"')
    nxt.add_argument("--tz", default="UTC", help="IANA time zone of the expression (UTC)")
    nxt.add_argument(
        "--after",
        default=None,
        help="ISO-8601 instant with a UTC offset to start after (default: now)",
    )
    # Parsed by the handler, not argparse, so a bad value gets our one-line error.
    nxt.add_argument("--count", default="1", help=f"how many instants, 1..{COUNT_MAX} (1)")
    nxt.add_argument("--json", action="store_true", help="print JSON instead of a table")
    nxt.set_defaults(handler=run_next)


def _parse_after(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(
            f"--after {text!r} is not an ISO-8601 date-time (e.g. 2026-03-28T00:00:00+01:00)"
        ) from None
    return require_aware(parsed, "--after")


def _parse_count(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidArgument(f"--count must be an integer, got {text!r}") from None


def preview_instants(instants: list[datetime], timezone: str) -> list[dict[str, Any]]:
    """``instants`` as ``wf schedules preview`` shows a schedule's (its
    :class:`~wf.wire.schedule_views.PreviewInstant` fields): UTC, and wall time in
    ``timezone``."""
    zone = resolve_zone(timezone)
    found = []
    for instant in instants:
        t = instant.timestamp()
        local = instant.astimezone(zone).isoformat()
        found.append({"instant": iso(t), "instant_s": t, "local": local, "timezone": timezone})
    return found


def _preview_table(instants: list[dict[str, Any]]) -> str:
    rows = [(when(i["instant"]), i["local"], i["timezone"]) for i in instants]
    return table(("INSTANT", "LOCAL", "TIMEZONE"), rows)


def run_next(args: argparse.Namespace) -> int:
    """Handler of ``wf cron next``; returns the exit code."""
    try:
        count = _parse_count(args.count)
        after = _parse_after(args.after)
        instants = next_instants(args.expression, args.tz, after=after, count=count)
    except InvalidArgument as exc:
        # One line, whatever a library put in the message (JSON with --json).
        return fail(exc.message, USAGE_ERROR_EXIT, as_json=args.json, error_code=exc.code)
    found = preview_instants(instants, args.tz)
    return emit(args, found, lambda: _preview_table(found))
