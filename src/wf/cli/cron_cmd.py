"""``wf cron``: inspect cron schedules without a server.

``wf cron next EXPR [--tz ZONE] [--after ISO-8601] [--count N]`` prints the
next fire instants of a five-field cron expression, one per line, as UTC
ISO-8601 with a ``Z`` suffix. Invalid input prints one line ``wf: error:
<reason>`` to stderr and exits 2, like argparse's own usage errors.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from wf.errors import InvalidArgument
from wf.scheduler.cron import COUNT_MAX, next_instants, require_aware

USAGE_ERROR_EXIT: int = 2
"""Exit code for invalid input (argparse uses the same)."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``cron`` command group to the ``wf`` parser."""
    cron = subparsers.add_parser("cron", help="inspect cron schedules")
    commands = cron.add_subparsers(dest="cron_command", required=True)
    nxt = commands.add_parser(
        "next",
        help="print the next fire instants of a cron expression",
        description="Print the next fire instants of a five-field cron expression "
        "as UTC ISO-8601 (…Z), one per line.",
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


def _format_utc(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_next(args: argparse.Namespace) -> int:
    """Handler of ``wf cron next``; returns the exit code."""
    try:
        count = _parse_count(args.count)
        after = _parse_after(args.after)
        instants = next_instants(args.expression, args.tz, after=after, count=count)
    except InvalidArgument as exc:
        # One line, whatever a library put in the message.
        print(f"wf: error: {' '.join(exc.message.split())}", file=sys.stderr)
        return USAGE_ERROR_EXIT
    sys.stdout.write("".join(f"{_format_utc(instant)}\n" for instant in instants))
    return 0
