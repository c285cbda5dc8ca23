"""``wf store migrate`` and ``wf store check``: schema and integrity of a store.

``wf store check`` opens an existing store without changing it (nothing is
created, nothing migrated), runs the database's own integrity check, the
contradiction queries, and decodes every record of every kind with the
decoders the server uses (see :mod:`wf.store.check`): the store's, and the
runtime's and the schedules layer's for catalog bodies (:class:`ServerDecoders`).

Exit codes (both commands): :data:`EXIT_CLEAN` 0 (``check``: nothing found),
:data:`EXIT_FOUND` 1 (``check``: contradictions or damage, one per line),
:data:`EXIT_USAGE` 2 (bad arguments), :data:`EXIT_UNREADABLE` 3 (the store
cannot be opened or read: missing, not a wf store, a damaged file, a
schema ``check`` would have to migrate, the database unreachable). Every
failure is one line on standard error, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Final

from wf.errors import CorruptRecord, InvalidArgument, WfError
from wf.runtime.artifacts import artifact_from_row
from wf.runtime.deployments import deployment_from_row
from wf.runtime.runs import node_of_activity, run_from_row
from wf.schedules.model import schedule_from_row
from wf.store import make_store
from wf.store.protocol import ArtifactRow, DeploymentRow, Diagnostic, RunRow, ScheduleRow, Store
from wf.wire.bounds import check_json_bytes

EXIT_CLEAN: Final = 0
EXIT_FOUND: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNREADABLE: Final = 3


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``wf store``."""
    parser = subparsers.add_parser("store", help="migrate or check a store")
    actions = parser.add_subparsers(dest="store_command", required=True)
    for name, helptext, handler in (
        ("migrate", "create the store if need be and apply pending schema migrations", _migrate),
        (
            "check",
            "integrity check of an existing store, changing nothing: exit 0 clean, "
            "1 contradictions or damage found, 3 store unreadable",
            _check,
        ),
    ):
        sub = actions.add_parser(name, help=helptext)
        sub.add_argument("--store-root", help="embedded store folder (SQLite)")
        sub.add_argument("--postgres", metavar="DSN", help="PostgreSQL DSN instead of SQLite")
        sub.add_argument("--schema", default="wf", help="PostgreSQL schema (default: wf)")
        sub.add_argument("--json", action="store_true", help="machine-readable output")
        sub.set_defaults(handler=handler)


class ServerDecoders:
    """The server's own body decoders, for :meth:`~wf.store.protocol.Store.check`:
    whatever the server would answer with ``corrupt_record`` raises here too.

    A run is also held to its pinned artifact, as the engine holds it when it
    loads the plan (the store scans artifacts before runs)."""

    def __init__(self) -> None:
        self._hashes: dict[tuple[str, int], str] = {}

    def artifact(self, row: ArtifactRow) -> None:
        """The plan decodes and matches its content hash."""
        artifact = artifact_from_row(row)
        self._hashes[(artifact.artifact_id, artifact.version)] = artifact.content_hash

    def deployment(self, row: DeploymentRow) -> None:
        """The body decodes and names its row."""
        deployment_from_row(row)

    def run(self, row: RunRow) -> None:
        """The document decodes, names its row, and its pinned artifact is there."""
        run = run_from_row(row)
        pinned = (run.artifact_id, run.artifact_version)
        found = self._hashes.get(pinned)
        if found is None:
            raise CorruptRecord(
                f"run {run.run_id!r}: pinned artifact {pinned[0]} v{pinned[1]} is missing"
            )
        if found != run.content_hash:
            raise CorruptRecord(
                f"run {run.run_id!r} pinned {run.content_hash}, artifact {pinned[0]} "
                f"v{pinned[1]} holds {found}"
            )

    def schedule(self, row: ScheduleRow) -> None:
        """The body decodes and names its row."""
        schedule_from_row(row)

    def result(self, activity_id: str, result: bytes) -> None:
        """A workflow node's result is one bounded UTF-8 JSON document (its run decodes
        it; one that does not fails the run closed with ``bad_result``)."""
        if node_of_activity(activity_id) is None:
            return  # only a workflow run decodes its activities' results
        try:
            check_json_bytes(result, "result")
        except InvalidArgument as exc:
            raise CorruptRecord(
                f"activity {activity_id!r}: its stored result cannot be used by its run "
                f"({exc.message}); the run fails closed with bad_result",
                table="transitions",
                key=activity_id,
            ) from None


class _Unreadable(Exception):
    """The store could not be opened or read (exit 3); ``message`` is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _store(args: argparse.Namespace, *, create: bool) -> Store:
    return make_store(
        store_root=args.store_root,
        postgres_dsn=args.postgres,
        postgres_schema=args.schema,
        create=create,
    )


def _fail(exc: BaseException) -> str:
    """One line for any failure (a store error's message, else its type and text)."""
    if isinstance(exc, (WfError, _Unreadable)):
        text = exc.message
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


async def _opened(store: Store) -> None:
    try:
        await store.open()
    except Exception as exc:  # any failure to open is "unreadable", never a traceback
        raise _Unreadable(f"store unreadable: {_fail(exc)}") from exc


def _migrate(args: argparse.Namespace) -> int:
    try:
        store = _store(args, create=True)
    except InvalidArgument as exc:
        print(f"wf: error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE

    async def run() -> int:
        await _opened(store)
        try:
            return await store.schema_version()
        finally:
            await store.close()

    try:
        version = asyncio.run(run())
    except Exception as exc:  # the command line's boundary: one line, exit 3
        print(f"wf: error: {_fail(exc)}", file=sys.stderr)
        return EXIT_UNREADABLE
    print(json.dumps({"schema_version": version}) if args.json else f"schema version {version}")
    return EXIT_CLEAN


def _check(args: argparse.Namespace) -> int:
    try:
        store = _store(args, create=False)
    except InvalidArgument as exc:
        print(f"wf: error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    try:
        diagnostics = asyncio.run(_diagnose(store))
    except Exception as exc:  # the command line's boundary: one line, exit 3
        print(f"wf: error: {_fail(exc)}", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.json:
        print(json.dumps([_as_dict(d) for d in diagnostics]))
    elif not diagnostics:
        print("store is consistent: no contradictions found")
    else:
        for d in diagnostics:
            print(f"{d.kind}\t{d.table}\t{d.key}\t{' '.join(d.message.split())}")
    return EXIT_FOUND if diagnostics else EXIT_CLEAN


async def _diagnose(store: Store) -> list[Diagnostic]:
    """Everything ``check`` finds, then what recovery's load finds that it did not.

    Once ``check`` found damage, a load that fails on it is one more finding (the
    server would not start); a load failing on a store ``check`` called clean is
    an unreadable store."""
    await _opened(store)
    try:
        try:
            found = await store.check(ServerDecoders())
        except Exception as exc:
            raise _Unreadable(f"store unreadable: {_fail(exc)}") from exc
        try:
            loaded = (await store.load()).diagnostics
        except Exception as exc:
            if not found:
                raise _Unreadable(f"store unreadable: {_fail(exc)}") from exc
            loaded = [
                Diagnostic(
                    kind="damaged",
                    table="database",
                    key="load",
                    message=f"recovery cannot load the store: {_fail(exc)}",
                )
            ]
        seen = {(d.kind, d.table, d.key) for d in found}
        found.extend(d for d in loaded if (d.kind, d.table, d.key) not in seen)
        return found
    finally:
        await store.close()


def _as_dict(d: Diagnostic) -> dict[str, object]:
    return {name: getattr(d, name) for name in d.__struct_fields__}
