"""``wf workers`` and ``wf queue``: the scheduler's workers and queue on a server.

::

    wf workers list [--limit N] [--cursor C]
    wf queue stats

The connection options (``--server``, ``--token``, ``--json``) and the exit
codes are those of ``wf schedules`` (see :mod:`wf.cli.connect`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from wf.cli.connect import common_parser, handler, paging
from wf.cli.output import emit, more, pairs, table, when

if TYPE_CHECKING:
    from wf.client.app import SyncApp


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``workers`` and ``queue`` command groups to the ``wf`` parser."""
    common = common_parser()
    group = subparsers.add_parser("workers", help="list the workers the scheduler knows")
    actions = group.add_subparsers(dest="workers_command", required=True)
    sub = actions.add_parser("list", help="list workers in registration order", parents=[common])
    sub.set_defaults(handler=handler(_workers_list))
    paging(sub)

    group = subparsers.add_parser("queue", help="the scheduler's queue")
    actions = group.add_subparsers(dest="queue_command", required=True)
    sub = actions.add_parser(
        "stats", help="queue depth, capacity and backpressure", parents=[common]
    )
    sub.set_defaults(handler=handler(_queue_stats))


def _workers_list(app: SyncApp, args: argparse.Namespace) -> int:
    page = app.run(lambda a: a.list_workers(limit=args.limit, cursor=args.cursor))
    rows = [
        (
            w.info.worker_id,
            w.status,
            w.info.hostname or "-",
            f"{len(w.leases)}/{w.info.max_concurrency}",
            ",".join(sorted(w.info.activity_types)) if w.info.activity_types is not None else "*",
            w.info.version or "-",
            when(w.last_seen_at),
        )
        for w in page.workers
    ]
    headers = ("WORKER", "STATUS", "HOST", "LEASES", "ACTIVITY TYPES", "VERSION", "LAST SEEN")
    shown = table(headers, rows) if rows else "(no workers)"
    return emit(args, page, lambda: shown + more({"next_cursor": page.next_cursor}))


def _queue_stats(app: SyncApp, args: argparse.Namespace) -> int:
    stats = app.run(lambda a: a.queue_stats())
    partitions = ", ".join(f"{k} {v}" for k, v in sorted(stats.depth_by_partition.items()))
    return emit(
        args,
        stats,
        lambda: pairs(
            [
                ("DEPTH", str(stats.depth) + (f" ({partitions})" if partitions else "")),
                ("RUNNING", str(stats.running)),
                ("CAPACITY", str(stats.capacity)),
                ("DELAYED", str(stats.delayed)),
                ("BACKPRESSURE", stats.backpressure),
                ("WORKERS ACTIVE", str(stats.workers_active)),
            ]
        ),
    )
