"""The ``wf`` command line: one parser, one module per command group.

Each command module exposes ``register(subparsers)``, which adds its parser and
sets ``handler`` (a function from parsed arguments to an exit code).

A command imports only what it uses: :data:`COMMANDS` names the module behind
each command group, so ``wf runs list`` loads the client and the ``runs``
module, not the server, the store or the worker SDK (``--help`` without a
command, or an unknown one, loads them all to list them).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Final

from wf import __version__

Handler = Callable[[argparse.Namespace], int]

COMMANDS: Final = {
    "cluster": "cluster_cmd",
    "cron": "cron_cmd",
    "demo": "demo_cmd",
    "schedules": "schedules_cmd",
    "runs": "runs_cmd",
    "artifacts": "catalog_cmd",
    "deployments": "catalog_cmd",
    "deploy": "deploy_cmd",
    "workers": "fleet_cmd",
    "queue": "fleet_cmd",
    "simulate": "sim_cmd",
    "replay": "sim_cmd",
    "store": "store_cmd",
    "worker": "worker_cmd",
}
"""Command group → the :mod:`wf.cli` module that registers it, in ``--help`` order
(``tests/cli/test_cli_complete.py`` checks that each module registers its groups)."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``wf`` parser: with every command group registered, or only the module
    registering ``command`` when it is a known group."""
    parser = argparse.ArgumentParser(prog="wf", description="wf workflow scheduler tools")
    parser.add_argument("--version", action="version", version=f"wf {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    every = list(dict.fromkeys(COMMANDS.values()))
    for name in [COMMANDS[command]] if command in COMMANDS else every:
        importlib.import_module(f"wf.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``wf`` script; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # The command group is the first word (wf has no options before it but
    # --help/--version, which need no group).
    command = argv[0] if argv and not argv[0].startswith("-") else None
    args = build_parser(command).parse_args(argv)
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
