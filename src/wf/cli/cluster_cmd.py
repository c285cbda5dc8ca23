"""``wf cluster status``: which node of a cluster is active, and every node's state.

::

    wf cluster status [--server URL[,URL...]] [--token T] [--json] [--failover-timeout S]

Asks ``cluster.status`` (answered by every node, standbys included; see
docs/ha.md) and prints the answering node's role, the fence's epoch and
commit sequence, the active's URL, then one row per node: id, role,
advertised URL, the epoch it serves or last saw, seconds since its last
report (by PostgreSQL's clock) and its lag in commits. ``--json`` prints the
:class:`~wf.wire.cluster_methods.ClusterStatus` itself.

``--server`` may be repeated or comma-separated (default ``$WF_SERVER``,
else ``http://127.0.0.1:8765``); the token comes from ``--token`` or
``$WF_TOKEN``; ``--failover-timeout`` bounds how long the call keeps
retrying when no node answers (default 15 s, 2.5 s while every attempt is
refused outright; 0: each URL once, for monitoring scripts). Exit 0; a
refusal or an unreachable cluster prints ``wf: error: <code>: <message>``
and exits 1, as ``wf schedules`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Final

from wf.cli.connect import SERVER_ENV, server_urls
from wf.cli.output import fail, jsonable
from wf.client.app import App
from wf.client.rpc_client import FAILOVER_TIMEOUT_S, REFUSED_TIMEOUT_S
from wf.errors import WfError
from wf.wire.cluster_methods import ClusterStatus

DEFAULT_SERVER: Final = "http://127.0.0.1:8765"
"""``wf-rpc-server``'s default address."""
TOKEN_ENV: Final = "WF_TOKEN"
"""Environment variable holding the bearer token when ``--token`` is not given."""
REFUSED_EXIT: Final = 1
"""Exit code when the server (or the transport) refuses the call."""
NODE_COLUMNS: Final = ("NODE", "ROLE", "URL", "EPOCH", "SEEN_S_AGO", "LAG")
"""The node table's header."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``cluster`` command group to the ``wf`` parser."""
    group = subparsers.add_parser("cluster", help="inspect a cluster of servers")
    actions = group.add_subparsers(dest="cluster_command", required=True)
    helptext = "the answering node's role, the active's URL, every node with its lag"
    sub = actions.add_parser("status", help=helptext, description=helptext)
    sub.add_argument(
        "--server",
        action="append",
        dest="servers",
        metavar="URL",
        help=f"server URL; repeat or comma-separate for a cluster (default ${SERVER_ENV}, "
        f"else {DEFAULT_SERVER})",
    )
    sub.add_argument("--token", help=f"bearer token (or ${TOKEN_ENV})")
    sub.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sub.add_argument(
        "--failover-timeout",
        type=float,
        default=None,
        metavar="S",
        help=f"seconds to keep retrying while no node answers (default {FAILOVER_TIMEOUT_S:g}, "
        f"{REFUSED_TIMEOUT_S:g} while every attempt is refused outright)",
    )
    sub.set_defaults(handler=status)


def status(args: argparse.Namespace) -> int:
    """``wf cluster status``."""
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    try:
        with App.sync(
            server_urls(args.servers),
            token=token,
            failover_timeout_s=(
                FAILOVER_TIMEOUT_S if args.failover_timeout is None else args.failover_timeout
            ),
        ) as app:
            if args.failover_timeout is None:  # nothing listening: say so in seconds
                app.app.rpc.refused_timeout_s = REFUSED_TIMEOUT_S
            answer = app.run(lambda a: a.cluster_status())
    except WfError as exc:
        if args.json:  # a refusal as JSON too, as every client command's (wf.cli.output)
            return fail(exc.message, REFUSED_EXIT, as_json=True, error_code=exc.code)
        message = " ".join(f"{exc.code}: {exc.message}".split())
        print(f"wf: error: {message}", file=sys.stderr)
        return REFUSED_EXIT
    if args.json:
        print(json.dumps(jsonable(answer), indent=2, sort_keys=True))
    else:
        print(status_text(answer))
    return 0


def status_text(answer: ClusterStatus) -> str:
    """The human form: the answering node, then the node table."""
    pairs = [
        ("node", answer.node_id),
        ("role", answer.role),
        ("epoch", str(answer.epoch)),
        ("commit_seq", str(answer.commit_seq)),
        ("leader_url", answer.leader_url or "-"),
    ]
    width = max(len(key) for key, _ in pairs)
    head = "\n".join(f"{key.ljust(width)}  {value}" for key, value in pairs)
    rows = [
        (
            node.node_id,
            node.role,
            node.advertise_url or "-",
            str(node.epoch),
            f"{node.seen_s_ago:.1f}",
            str(node.lag_commits),
        )
        for node in answer.nodes
    ]
    return f"{head}\n\n{_table(NODE_COLUMNS, rows)}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    cells = [list(headers), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )
