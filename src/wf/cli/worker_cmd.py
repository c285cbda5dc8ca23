"""``wf worker``: run a worker process from the command line.

``wf worker --app module:object [--server URL[,URL...] ...] [--token T] [--ca FILE
--cert FILE --key FILE] [--worker-id ID] [--max-concurrency N] ...``

``object`` is a :class:`wf.worker.Worker` (command-line flags override its
settings), a list of ``@activity`` definitions, or a function returning one
of those. The current directory is importable, as with ``python -m``.
``--server`` may be repeated or comma-separated: the worker follows the
active node of a cluster (see :mod:`wf.worker.runtime`); without it the
servers come from ``$WF_SERVER`` (same form), else the ``--app`` Worker's own,
else ``http://127.0.0.1:8765``. The
token may come from ``WF_WORKER_TOKEN`` instead of the command line (which
other users of the host can read). SIGTERM or SIGINT drains gracefully; a
second one stops at once. A drain by the server (``scheduler.workers.shutdown``,
the console's "drain") ends the process the same way, with exit code 0. Logs
are JSON lines on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from wf.errors import InvalidArgument, WfError

if TYPE_CHECKING:
    from wf.worker import Worker

DEFAULT_SERVER: Final = "http://127.0.0.1:8765"
SERVER_ENV: Final = "WF_SERVER"
TOKEN_ENV: Final = "WF_WORKER_TOKEN"
# Worker's own defaults, shown by --help without importing the worker SDK for every
# ``wf`` command (tests/cli/test_cli_complete.py holds them to Worker's signature).
MAX_CONCURRENCY_DEFAULT: Final = 4
PREFETCH_DEFAULT: Final = 0
HEARTBEAT_INTERVAL_DEFAULT_S: Final = 5.0
POLL_WAIT_DEFAULT_S: Final = 10.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``wf worker``."""
    parser = subparsers.add_parser(
        "worker",
        help="run a worker process",
        description="Run a worker process serving the activities of --app. Flags left out "
        "keep the Worker's own settings (an --app Worker's, else the defaults shown).",
    )
    parser.add_argument("--app", required=True, help="module:object (Worker or activities)")
    parser.add_argument(
        "--server",
        action="append",
        dest="servers",
        metavar="URL",
        help=f"server URL; repeat or comma-separate for a cluster (default ${SERVER_ENV}, "
        f"else the --app Worker's, else {DEFAULT_SERVER})",
    )
    parser.add_argument("--token", help=f"worker credential (or ${TOKEN_ENV})")
    parser.add_argument("--ca", help="CA certificate that signed the server's (PEM)")
    parser.add_argument("--cert", help="client certificate for mutual TLS (PEM)")
    parser.add_argument("--key", help="its private key (PEM)")
    parser.add_argument("--worker-id", help="default: <hostname>-<pid>")
    parser.add_argument(
        "--max-concurrency",
        type=int,
        metavar="N",
        help=f"activities run at once (default {MAX_CONCURRENCY_DEFAULT})",
    )
    parser.add_argument(
        "--prefetch",
        type=int,
        metavar="N",
        help=f"extra leases held unstarted (default {PREFETCH_DEFAULT})",
    )
    parser.add_argument(
        "--heartbeat-interval",
        type=float,
        metavar="S",
        help=f"seconds between heartbeats (default {HEARTBEAT_INTERVAL_DEFAULT_S:g})",
    )
    parser.add_argument(
        "--poll-wait",
        type=float,
        metavar="S",
        help=f"long-poll seconds (default {POLL_WAIT_DEFAULT_S:g})",
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        metavar="S",
        help="graceful stop bound in seconds (default: wait for running activities)",
    )
    parser.add_argument(
        "--log-format", choices=("json", "text"), default="json", help="(default json)"
    )
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="(default info)",
    )
    parser.set_defaults(handler=run)


def load_app(spec: str) -> Any:
    """The object named by ``module:object`` (the current directory is importable)."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise InvalidArgument(f"--app must be module:object, not {spec!r}", field="app")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidArgument(f"cannot import {module_name!r}: {exc}", field="app") from exc
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise InvalidArgument(f"{module_name!r} has no {attribute!r}", field="app") from None
    return target


def build_worker(args: argparse.Namespace) -> Worker:
    """The worker the arguments describe."""
    from wf.worker import ActivityDefinition, Worker

    app = load_app(args.app)
    if callable(app) and not isinstance(app, Worker | ActivityDefinition):
        app = app()
    changes: dict[str, Any] = {}
    # As for the token: the flag, else the environment, else the Worker's own setting.
    servers = args.servers or [url for url in [os.environ.get(SERVER_ENV, "").strip()] if url]
    if servers:
        changes["servers"] = servers
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    if token:
        changes["token"] = token
    if args.ca is not None:
        from wf.client.tls import client_ssl_context

        changes["ssl_context"] = client_ssl_context(args.ca, args.cert, args.key)
    elif args.cert is not None or args.key is not None:
        raise InvalidArgument("--cert/--key need --ca (the server's CA)", field="ca")
    for flag, name in (
        ("worker_id", "worker_id"),
        ("max_concurrency", "max_concurrency"),
        ("prefetch", "prefetch"),
        ("heartbeat_interval", "heartbeat_interval_s"),
        ("poll_wait", "poll_wait_s"),
        ("drain_timeout", "drain_timeout_s"),
    ):
        value = getattr(args, flag)
        if value is not None:
            changes[name] = value
    if isinstance(app, Worker):
        return app.replace(**changes)
    if isinstance(app, ActivityDefinition):
        app = [app]
    if isinstance(app, list | tuple) and all(isinstance(a, ActivityDefinition) for a in app):
        servers = changes.pop("servers", [DEFAULT_SERVER])
        return Worker(servers, app, **changes)
    raise InvalidArgument(f"{args.app} is neither a Worker nor a list of activities", field="app")


async def serve(worker: Worker) -> None:
    """Run until a signal: the first drains, the second stops at once."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    draining: list[asyncio.Task[None]] = []

    def on_signal() -> None:
        if draining:
            main.cancel()
            return
        draining.append(asyncio.create_task(worker.shutdown(), name="wf-worker-drain"))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        await worker.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def run(args: argparse.Namespace) -> int:
    """``wf worker``."""
    from wf.server.config import ObservabilityConfig
    from wf.server.logs import configure_logging
    from wf.tuning import run as run_loop
    from wf.tuning import tune_gc

    configure_logging(ObservabilityConfig(log_format=args.log_format, log_level=args.log_level))
    try:
        worker = build_worker(args)
    except WfError as exc:
        print(f"wf: error: {exc.message}", file=sys.stderr)
        return 2
    # The app and its activities are imported: keep them out of full collections.
    tune_gc()
    try:
        with contextlib.suppress(asyncio.CancelledError, KeyboardInterrupt):
            run_loop(serve(worker))
    except WfError as exc:
        print(f"wf: error: {exc.message}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m wf.cli.worker_cmd`` (same as ``wf worker``)."""
    parser = argparse.ArgumentParser(prog="wf")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["worker", *(argv if argv is not None else sys.argv[1:])])
    code: int = args.handler(args)
    return code
