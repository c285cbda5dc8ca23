"""``wf-rpc-server``: run a wf server process.

``wf-rpc-server --store-root DIR [--config FILE] [--enable-scheduler]
[--workers N] [--sample] [--host H] [--port P] [--postgres DSN]``;
command-line flags override the file. SIGTERM and SIGINT drain (stop
admitting scheduled runs and let them finish, stop the in-process workers,
stop listening, finish requests in flight, flush the store, release
ownership). ``wf-rpc-server hash-token`` reads a token from standard input
(never the command line, which other users of the host can read) and prints
the hash to put in a credential. ``--log-level`` and ``--log-format``
override ``server.observability``; ``--version`` prints the version.

``--workers N`` runs N in-process workers serving
:data:`wf.activities.BUILTIN_ACTIVITIES` over loopback, with the same
machinery as the local/static server (:class:`~wf.server.local.LocalStaticServer`):
they start once the server listens and are drained before it stops.
``--sample`` installs the sample of :mod:`wf.server.sample` (a workflow with a
cron schedule and a one-shot a few seconds ahead) and logs a line per
admitted and finished run; it implies ``--enable-scheduler`` and, unless
given, ``--workers 2``.

Standard output carries one JSON object per event (``listening``, ``sample``,
``stopped``); logs go to standard error. At start the soft open-file limit is
raised to the hard one where allowed (logged as ``process.open_files``), so
that ``server.http.connections_max`` connections fit (:mod:`wf.server.http_edge`).

Exit codes: 0 stopped cleanly; 1 could not start; 2 usage or configuration
error; :data:`EXIT_WRITES_STOPPED` (3) the store stopped taking writes and
the server did not write again, either for ``server.store.recovery_deadline_s``
(it exits by itself) or before it was told to stop: a supervisor should
start it afresh (nothing acknowledged was lost; what was refused was never
acknowledged). A cluster standby refuses writes by its role, not by a failure:
it stops with 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec

from wf import __version__
from wf.activities import BUILTIN_ACTIVITIES
from wf.errors import InvalidArgument, WfError
from wf.server.auth import hash_token
from wf.server.config import ServerConfig, ServerSection, load_config
from wf.server.http_edge import raise_open_files_limit
from wf.server.local import LocalStaticServer
from wf.server.logs import configure_logging
from wf.server.sample import SampleReport, install_sample
from wf.tuning import run, tune_gc

SAMPLE_WORKERS = 2
"""In-process workers ``--sample`` runs unless ``--workers`` says otherwise."""
WORKER_CONCURRENCY = 4
"""Activities each in-process worker runs at once."""
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "0.0.0.0"})
"""Listen addresses the in-process workers reach at ``127.0.0.1``."""
EXIT_WRITES_STOPPED = 3
"""Exit code when the server stops while its writes are stopped (see the module doc)."""


def build_parser() -> argparse.ArgumentParser:
    """The ``wf-rpc-server`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="wf-rpc-server",
        description="run a wf server",
        epilog="wf-rpc-server hash-token: print the hash of a token read on standard input "
        "(for a credential's token_sha256; docs/security.md)",
    )
    parser.add_argument("--version", action="version", version=f"wf-rpc-server {__version__}")
    parser.add_argument("--store-root", help="embedded store folder (SQLite)")
    parser.add_argument("--config", type=Path, help="JSON configuration file")
    parser.add_argument(
        "--enable-scheduler", action="store_true", help="enable deployment schedules (004)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="in-process workers running the built-in activities over loopback "
        "(default 0; 2 with --sample)",
    )
    parser.add_argument(
        "--sample",
        action="store_true",
        help="install a sample scheduled workflow (a run within seconds, then every "
        "minute); implies --enable-scheduler and --workers 2",
    )
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default 8765; 0 picks one)")
    parser.add_argument("--postgres", metavar="DSN", help="PostgreSQL store instead of SQLite")
    parser.add_argument("--postgres-schema", help="PostgreSQL schema (default wf)")
    parser.add_argument(
        "--advertise-url",
        metavar="URL",
        help="where clients reach this server; standbys send clients to the active's "
        "(several servers on one PostgreSQL store, docs/ha.md)",
    )
    parser.add_argument("--node-id", help="this server's id in a cluster (default: host-pid-time)")
    parser.add_argument(
        "--no-ui",
        action="store_true",
        help="do not serve the operator console at /ui (docs/console.md)",
    )
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        help="root log level (default info, or the config file's)",
    )
    parser.add_argument(
        "--log-format",
        choices=("json", "text"),
        help="log lines as JSON objects or text (default json, or the config file's)",
    )
    parser.add_argument("hash_token", nargs="*", metavar="hash-token", help=argparse.SUPPRESS)
    return parser


def apply_flags(config: ServerConfig, args: argparse.Namespace) -> ServerConfig:
    """The configuration with command-line overrides applied."""
    server = config.server
    store = server.store
    if args.store_root is not None:
        store = msgspec.structs.replace(store, root=args.store_root)
    if args.postgres is not None:
        store = msgspec.structs.replace(store, postgres_dsn=args.postgres)
    if args.postgres_schema is not None:
        store = msgspec.structs.replace(store, postgres_schema=args.postgres_schema)
    cluster = server.cluster
    if args.advertise_url is not None:
        cluster = msgspec.structs.replace(cluster, advertise_url=args.advertise_url)
    if args.node_id is not None:
        cluster = msgspec.structs.replace(cluster, node_id=args.node_id)
    ui = server.ui
    if args.no_ui:
        ui = msgspec.structs.replace(ui, enabled=False)
    observability = server.observability
    if args.log_level is not None:
        observability = msgspec.structs.replace(observability, log_level=args.log_level)
    if args.log_format is not None:
        observability = msgspec.structs.replace(observability, log_format=args.log_format)
    scheduler = server.scheduler
    if args.enable_scheduler or args.sample:
        scheduler = msgspec.structs.replace(scheduler, enabled=True)
    server = msgspec.structs.replace(
        server,
        store=store,
        cluster=cluster,
        scheduler=scheduler,
        ui=ui,
        observability=observability,
        host=args.host if args.host is not None else server.host,
        port=args.port if args.port is not None else server.port,
    )
    return msgspec.structs.replace(config, server=server)


def worker_count(config: ServerConfig, args: argparse.Namespace) -> int:
    """How many in-process workers to run; InvalidArgument if they could not work."""
    workers: int = args.workers if args.workers is not None else 0
    if args.workers is None and args.sample:
        workers = SAMPLE_WORKERS
    if workers < 0:
        raise InvalidArgument("--workers must be >= 0", field="workers")
    if workers == 0:
        return 0
    section = config.server
    security = section.security
    if security.tls is not None or security.required or security.credentials:
        raise InvalidArgument(
            "in-process workers (--workers, --sample) reach the server over plain loopback "
            "HTTP without a credential: not with TLS or authentication; run `wf worker` "
            "processes instead (docs/server.md)",
            field="workers",
        )
    if section.host not in LOOPBACK_HOSTS:
        raise InvalidArgument(
            f"in-process workers reach the server at 127.0.0.1; listen address "
            f"{section.host!r} is not reachable there (use --host 127.0.0.1)",
            field="workers",
        )
    return workers


async def serve(config: ServerConfig, *, workers: int = 0, sample: bool = False) -> int:
    """Run until SIGTERM/SIGINT (or until the node gives up on its store), then drain;
    returns the exit code."""
    local = LocalStaticServer(
        config, BUILTIN_ACTIVITIES, workers=workers, max_concurrency=WORKER_CONCURRENCY
    )
    server = local.server
    cluster = server.cluster
    # Booted: keep what lives as long as the process out of the collector's full
    # passes (wf.tuning), and opt in to freezing what recovery builds, so that
    # no pass walks 10^6 recovered activities before the first dispatch.
    tune_gc()
    await local.start()
    tune_gc()  # what starting made (the listener, the routes): cheap, recovery is frozen
    report = server.recovery
    print(
        json.dumps(
            {
                "event": "listening",
                "host": config.server.host,
                "port": server.port,
                "tls": config.server.security.tls is not None,
                "recovery": msgspec.to_builtins(report) if report is not None else None,
                "workers": workers,
                "scheduler": server.schedule_service is not None,
                "role": cluster.role,
                "node_id": cluster.node_id,
                "epoch": cluster.epoch,
            }
        ),
        flush=True,
    )
    # Role changes from here on (the listening line above carries the first role).
    if cluster.clustered:
        cluster.role_changes.append(
            lambda role, epoch: print(
                json.dumps(
                    {"event": "role", "role": role, "epoch": epoch, "node_id": cluster.node_id}
                ),
                flush=True,
            )
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        if sample:
            installed = await install_sample(server)
            print(json.dumps({"event": "sample", **installed.to_dict()}), flush=True)
            hint = sample_hint(installed, server.port, workers, ui=config.server.ui.enabled)
            print(hint, file=sys.stderr, flush=True)
        # A cluster node that gives up on its store steps down and campaigns again
        # (docs/ha.md); a lone SQLite server exits for its supervisor to restart it.
        gave_up = asyncio.ensure_future(
            asyncio.Event().wait() if cluster.clustered else server.node.unrecoverable.wait()
        )
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({gave_up, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gave_up.cancel()
            stopping.cancel()
    finally:
        # Writes stopped and not resumed: state since the last commit was refused, so
        # the exit says so (the drain below cannot change that).
        # A cluster standby refuses writes by role, not because a commit failed: it
        # stops cleanly (it campaigns again by itself when restarted).
        writes_stopped = server.node.writes_stopped and not (
            cluster.clustered and cluster.role != "active"
        )
        # Scheduled runs drain first, while the in-process workers can still finish
        # them; then the workers drain, then the server.
        if server.schedule_service is not None:
            await server.schedule_service.stop()
        await local.stop()
        print(json.dumps({"event": "stopped", "writes_stopped": writes_stopped}), flush=True)
    return EXIT_WRITES_STOPPED if writes_stopped else 0


def wf_command() -> str:
    """How a person runs ``wf`` here: ``uv run wf`` from a source checkout (``src/wf``
    beside a ``pyproject.toml``, as ``uv run`` uses it), plain ``wf`` when installed as a
    package (a wheel in a virtual environment or a container)."""
    package = Path(__file__).resolve().parents[1]
    checkout = package.parents[1]
    from_source = package.parent.name == "src" and (checkout / "pyproject.toml").is_file()
    return "uv run wf" if from_source else "wf"


def sample_hint(report: SampleReport, port: int | None, workers: int, *, ui: bool = False) -> str:
    """What ``--sample`` did and the ``wf`` commands to watch it (and the console's
    address when ``ui``), for people."""
    url = f"http://127.0.0.1:{port}"
    wf = wf_command()
    # ``wf``'s commands default to the server's default address.
    server = "" if port == ServerSection().port else f" --server {url}"
    lines = [
        f"wf-rpc-server: listening on {url} with the scheduler and {workers} in-process worker(s)",
        f"wf-rpc-server: sample: created {', '.join(report.created) or 'nothing'}"
        + (f"; already there: {', '.join(report.existing)}" if report.existing else ""),
        f"wf-rpc-server: {report.oneshot_id} fires at {report.oneshot_at}"
        + (f", {report.cron_id} every minute" if report.cron_id else ""),
        *([f"wf-rpc-server: watch it in a browser: {url}/ui (the operator console)"] if ui else []),
        "wf-rpc-server: watch it from another terminal:",
        f"    {wf} schedules occurrences {report.oneshot_id}{server}",
        f"    {wf} schedules list{server}",
        f"    {wf} runs list{server}",
        f"    {wf} runs inspect RUN_ID{server}   # a run id from the lists",
        "wf-rpc-server: Ctrl-C (SIGINT) or SIGTERM drains and stops",
    ]
    if workers == 0:
        lines.append(
            "wf-rpc-server: no in-process workers: runs wait for a `wf worker --app "
            "wf.activities:BUILTIN_ACTIVITIES`"
        )
    return "\n".join(lines)


def _hash_token(words: Sequence[str]) -> int:
    """``hash-token``: the hash of the token on standard input (one line)."""
    if list(words) != ["hash-token"]:
        print(
            "wf-rpc-server: error: usage: wf-rpc-server hash-token < FILE (the token is read "
            "from standard input: on the command line other users of the host could read it)",
            file=sys.stderr,
        )
        return 2
    if sys.stdin.isatty():
        print("wf-rpc-server: token (then Enter): ", end="", file=sys.stderr, flush=True)
    token = sys.stdin.readline().rstrip("\r\n")
    if not token:
        print("wf-rpc-server: error: no token on standard input", file=sys.stderr)
        return 2
    print(hash_token(token))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.hash_token:
        return _hash_token(args.hash_token)
    try:
        config = apply_flags(load_config(args.config), args)
        workers = worker_count(config, args)
    except WfError as exc:
        print(f"wf-rpc-server: error: {exc.message}", file=sys.stderr)
        return 2
    configure_logging(config.server.observability)
    # Room for server.http.connections_max: accept() failing for want of descriptors
    # would refuse every client, not only the excess (wf.server.http_edge).
    raise_open_files_limit()
    code = 0
    try:
        with contextlib.suppress(KeyboardInterrupt):
            code = run(serve(config, workers=workers, sample=args.sample))
    except WfError as exc:
        print(f"wf-rpc-server: error: {exc.message}", file=sys.stderr)
        return 1
    if code == EXIT_WRITES_STOPPED:
        print(
            "wf-rpc-server: error: stopped while the store refused writes (see the "
            "node.writes_stopped log line); start it again once the store is healthy",
            file=sys.stderr,
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
