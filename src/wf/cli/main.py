"""The ``wf`` command line: one parser, one module per command group.

Each command module exposes ``register(subparsers)``, which adds its parser and
sets ``handler`` (a function from parsed arguments to an exit code).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    """The full ``wf`` parser with every command group registered."""
    from wf.cli import (
        cluster_cmd,
        cron_cmd,
        demo_cmd,
        schedules_cmd,
        sim_cmd,
        store_cmd,
        worker_cmd,
    )

    parser = argparse.ArgumentParser(prog="wf", description="wf workflow scheduler tools")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in (cluster_cmd, cron_cmd, demo_cmd, schedules_cmd, sim_cmd, store_cmd, worker_cmd):
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``wf`` script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except BrokenPipeError:
        # The reader went away (``wf runs list | head``): not an error of ours.
        # Point stdout at devnull so the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
