"""What every client command shares: the connection options and the error exits.

A command is a function ``(SyncApp, args) -> exit code``; :func:`handler`
wraps it with a client built from ``--server``/``--token`` and turns refusals
into exit codes. The client is imported only when a command runs, so that
building the parser stays cheap.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from wf.cli.output import fail

if TYPE_CHECKING:
    from wf.client.app import SyncApp

DEFAULT_SERVER: Final = "http://127.0.0.1:8765"
"""``wf-rpc-server``'s default address."""
TOKEN_ENV: Final = "WF_TOKEN"
"""Environment variable holding the bearer token when ``--token`` is not given."""
SERVER_ENV: Final = "WF_SERVER"
"""Environment variable holding the server URL(s) when ``--server`` is not given."""
REFUSED_EXIT: Final = 1
"""Exit code when the server (or the transport) refuses the call."""
USAGE_EXIT: Final = 2
"""Exit code for unusable input (argparse uses the same)."""
FAILOVER_TIMEOUT_S: Final = 15.0
"""Default of ``--failover-timeout`` (the client's own default, kept in step by a test)."""
REFUSED_TIMEOUT_S: Final = 2.5
"""Budget of a call refused outright (nothing listens) when ``--failover-timeout``
is not given: a one-call command then fails in seconds, not after the whole
budget (:data:`wf.client.rpc_client.REFUSED_TIMEOUT_S`, kept in step by a test)."""

Command = Callable[["SyncApp", argparse.Namespace], int]


class UsageError(Exception):
    """Input of ours that cannot be used (exit 2)."""


def common_parser() -> argparse.ArgumentParser:
    """The parent parser holding ``--server``, ``--token``, ``--failover-timeout``, ``--json``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--server",
        action="append",
        dest="servers",
        metavar="URL",
        help=f"server URL; repeat or comma-separate for a cluster (default ${SERVER_ENV}, "
        f"else {DEFAULT_SERVER})",
    )
    common.add_argument("--token", help=f"bearer token (or ${TOKEN_ENV})")
    common.add_argument(
        "--failover-timeout",
        type=float,
        default=None,
        metavar="S",
        help=f"how long a call keeps trying the servers (default {FAILOVER_TIMEOUT_S:g} s, "
        f"{REFUSED_TIMEOUT_S:g} s while every attempt is refused outright)",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return common


def server_urls(flags: list[str] | None) -> list[str]:
    """The servers to call: ``--server`` beats ``$WF_SERVER`` beats the default.

    Like the flag, the variable may hold several comma-separated URLs (a
    cluster); an empty one counts as unset.
    """
    if flags:
        return flags
    from_env = os.environ.get(SERVER_ENV, "").strip()
    return [from_env] if from_env else [DEFAULT_SERVER]


def paging(sub: argparse.ArgumentParser) -> None:
    """Add ``--limit`` and ``--cursor`` to ``sub``."""
    sub.add_argument("--limit", type=int, default=50, metavar="N", help="page size, 1-100 (50)")
    sub.add_argument("--cursor", metavar="C", help="continue after a previous page")


def handler(command: Command) -> Callable[[argparse.Namespace], int]:
    """``command`` with a client around it and errors turned into exit codes."""

    def handle(args: argparse.Namespace) -> int:
        from wf.client.app import App
        from wf.errors import WfError

        token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
        budget_s = FAILOVER_TIMEOUT_S if args.failover_timeout is None else args.failover_timeout
        try:
            with App.sync(
                server_urls(args.servers),
                token=token,
                failover_timeout_s=budget_s,
            ) as app:
                budget = f"{budget_s:g} s"
                if args.failover_timeout is None:
                    # Nothing listening is no takeover to ride out: say so in seconds.
                    app.app.rpc.refused_timeout_s = REFUSED_TIMEOUT_S
                    budget = f"{REFUSED_TIMEOUT_S:g} s if nothing listens, {budget}"
                if budget_s > 0 and sys.stderr.isatty():
                    app.app.rpc.on_unanswered = _waiting_note(budget)
                return command(app, args)
        except UsageError as exc:
            return fail(str(exc), USAGE_EXIT, as_json=args.json)
        except WfError as exc:
            if args.json:
                return fail(exc.message, REFUSED_EXIT, as_json=True, error_code=exc.code)
            return fail(f"{exc.code}: {exc.message}", REFUSED_EXIT)

    return handle


def _waiting_note(budget: str) -> Callable[[str], None]:
    """Say once, on a terminal, why a call is not answered yet: the client retries
    for the whole failover budget, which is long to wait in silence."""
    said: list[bool] = []

    def note(reason: str) -> None:
        if not said:
            said.append(True)
            print(
                f"wf: {reason} (retrying for up to {budget}: --failover-timeout)",
                file=sys.stderr,
                flush=True,
            )

    return note
