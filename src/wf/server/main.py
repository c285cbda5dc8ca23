"""``wf-rpc-server``: run a wf server process.

``wf-rpc-server --store-root DIR [--config FILE] [--enable-scheduler]
[--host H] [--port P] [--postgres DSN]``; command-line flags override the
file. SIGTERM and SIGINT drain (stop listening, finish requests in flight,
flush the store, release ownership). ``wf-rpc-server hash-token TOKEN``
prints the hash to put in a credential.
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

from wf.errors import WfError
from wf.server.app import WfServer
from wf.server.auth import hash_token
from wf.server.config import ServerConfig, load_config
from wf.server.logs import configure_logging


def build_parser() -> argparse.ArgumentParser:
    """The ``wf-rpc-server`` argument parser."""
    parser = argparse.ArgumentParser(prog="wf-rpc-server", description="run a wf server")
    parser.add_argument("--store-root", help="embedded store folder (SQLite)")
    parser.add_argument("--config", type=Path, help="JSON configuration file")
    parser.add_argument(
        "--enable-scheduler", action="store_true", help="enable deployment schedules (004)"
    )
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default 8765; 0 picks one)")
    parser.add_argument("--postgres", metavar="DSN", help="PostgreSQL store instead of SQLite")
    parser.add_argument("--postgres-schema", help="PostgreSQL schema (default wf)")
    parser.add_argument("hash_token", nargs="*", metavar="hash-token TOKEN", help=argparse.SUPPRESS)
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
    scheduler = server.scheduler
    if args.enable_scheduler:
        scheduler = msgspec.structs.replace(scheduler, enabled=True)
    server = msgspec.structs.replace(
        server,
        store=store,
        scheduler=scheduler,
        host=args.host if args.host is not None else server.host,
        port=args.port if args.port is not None else server.port,
    )
    return msgspec.structs.replace(config, server=server)


async def serve(config: ServerConfig) -> None:
    """Run until SIGTERM/SIGINT, then drain."""
    server = WfServer(config)
    await server.start()
    report = server.recovery
    print(
        json.dumps(
            {
                "event": "listening",
                "host": config.server.host,
                "port": server.port,
                "tls": config.server.security.tls is not None,
                "recovery": msgspec.to_builtins(report) if report is not None else None,
            }
        ),
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()
        print(json.dumps({"event": "stopped"}), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.hash_token:
        if len(args.hash_token) != 2 or args.hash_token[0] != "hash-token":
            print("wf-rpc-server: error: usage: wf-rpc-server hash-token TOKEN", file=sys.stderr)
            return 2
        print(hash_token(args.hash_token[1]))
        return 0
    try:
        config = apply_flags(load_config(args.config), args)
    except WfError as exc:
        print(f"wf-rpc-server: error: {exc.message}", file=sys.stderr)
        return 2
    configure_logging(config.server.observability)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(config))
    except WfError as exc:
        print(f"wf-rpc-server: error: {exc.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
