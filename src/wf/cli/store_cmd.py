"""``wf store migrate`` and ``wf store check``: schema and integrity of a store."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from wf.errors import WfError
from wf.store import make_store
from wf.store.protocol import Diagnostic, Store


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``wf store``."""
    parser = subparsers.add_parser("store", help="migrate or check a store")
    actions = parser.add_subparsers(dest="store_command", required=True)
    for name, helptext, handler in (
        ("migrate", "apply pending schema migrations", _migrate),
        ("check", "integrity check: list contradictions (exit 1 if any)", _check),
    ):
        sub = actions.add_parser(name, help=helptext)
        sub.add_argument("--store-root", help="embedded store folder (SQLite)")
        sub.add_argument("--postgres", metavar="DSN", help="PostgreSQL DSN instead of SQLite")
        sub.add_argument("--schema", default="wf", help="PostgreSQL schema (default: wf)")
        sub.add_argument("--json", action="store_true", help="machine-readable output")
        sub.set_defaults(handler=handler)


def _store(args: argparse.Namespace) -> Store:
    return make_store(
        store_root=args.store_root, postgres_dsn=args.postgres, postgres_schema=args.schema
    )


def _migrate(args: argparse.Namespace) -> int:
    async def run() -> int:
        store = _store(args)
        await store.open()
        try:
            return await store.schema_version()
        finally:
            await store.close()

    try:
        version = asyncio.run(run())
    except WfError as exc:
        print(f"wf: error: {exc.message}", file=sys.stderr)
        return 2
    print(json.dumps({"schema_version": version}) if args.json else f"schema version {version}")
    return 0


def _check(args: argparse.Namespace) -> int:
    async def run() -> list[Diagnostic]:
        store = _store(args)
        await store.open()
        try:
            found = await store.check()
            loaded = await store.load()
            seen = {(d.kind, d.table, d.key) for d in found}
            found.extend(d for d in loaded.diagnostics if (d.kind, d.table, d.key) not in seen)
            return found
        finally:
            await store.close()

    try:
        diagnostics = asyncio.run(run())
    except WfError as exc:
        print(f"wf: error: {exc.message}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([_as_dict(d) for d in diagnostics]))
    elif not diagnostics:
        print("store is consistent: no contradictions found")
    else:
        for d in diagnostics:
            print(f"{d.kind}\t{d.table}\t{d.key}\t{d.message}")
    return 1 if diagnostics else 0


def _as_dict(d: Diagnostic) -> dict[str, object]:
    return {name: getattr(d, name) for name in d.__struct_fields__}
