"""``wf store migrate``, ``check`` and ``prune``: schema, integrity and retention of a store.

``wf store check`` opens an existing store without changing it (nothing is
created, nothing migrated), runs the database's own integrity check, the
contradiction queries, and decodes every record of every kind with the
decoders the server uses (see :mod:`wf.store.check`): the store's, and the
runtime's and the schedules layer's for catalog bodies (:class:`ServerDecoders`).

``wf store prune --older-than DURATION`` removes what finished before that age
(:mod:`wf.store.retention`: finished runs with their activities and transitions,
finished standalone activities, old occurrences; never what a live run or a
schedule still needs). It takes the store's ownership for the time it runs, so a
store a running server holds is refused (:data:`EXIT_BUSY`): that server prunes by
itself when ``server.store.retention`` is set. ``--dry-run`` only counts, takes no
ownership and changes nothing.

Exit codes (every command): :data:`EXIT_CLEAN` 0 (``check``: nothing found),
:data:`EXIT_FOUND` 1 (``check``: contradictions or damage, one per line),
:data:`EXIT_USAGE` 2 (bad arguments), :data:`EXIT_UNREADABLE` 3 (the store
cannot be opened or read: missing, not a wf store, a damaged file, a
schema ``check`` would have to migrate, the database unreachable), :data:`EXIT_BUSY`
4 (``prune``: a running server owns the store). Every
failure is one line on standard error, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from wf.errors import CorruptRecord, InvalidArgument, OwnershipConflict, WfError
from wf.runtime.artifacts import artifact_from_row
from wf.runtime.deployments import deployment_from_row
from wf.runtime.runs import node_of_activity, run_from_row
from wf.schedules.model import schedule_from_row
from wf.store import make_store, retention
from wf.store.protocol import ArtifactRow, DeploymentRow, Diagnostic, RunRow, ScheduleRow, Store
from wf.wire.bounds import DURATION_MAX_S, check_json_bytes

EXIT_CLEAN: Final = 0
EXIT_FOUND: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNREADABLE: Final = 3
EXIT_BUSY: Final = 4

_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.ASCII)
_UNIT_S: Final = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3_600.0, "d": 86_400.0, "w": 604_800.0}


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
        _store_arguments(sub)
        sub.set_defaults(handler=handler)
    prune = actions.add_parser(
        "prune",
        help="remove finished runs, activities and occurrences older than an age "
        "(never what a live run or a schedule needs); exit 4 if a running server owns "
        "the store",
    )
    prune.add_argument(
        "--older-than",
        required=True,
        metavar="DURATION",
        help="age of what goes: a number with s, m, h, d or w (30d, 12h; no unit: seconds)",
    )
    prune.add_argument("--dry-run", action="store_true", help="count only; change nothing")
    prune.add_argument(
        "--batch",
        type=int,
        default=retention.BATCH_DEFAULT,
        help=f"rows of a kind per transaction (default {retention.BATCH_DEFAULT})",
    )
    _store_arguments(prune)
    prune.set_defaults(handler=_prune)
    backup = actions.add_parser(
        "backup",
        help="online copy of a SQLite store's database (safe beside a running server); "
        "PostgreSQL: use pg_dump",
    )
    backup.add_argument("--store-root", required=True, help="embedded store folder (SQLite)")
    backup.add_argument(
        "--to",
        required=True,
        metavar="FILE",
        help="the copy to write (must not exist); restore it as scheduler.db of a store folder",
    )
    backup.add_argument("--json", action="store_true", help="machine-readable output")
    backup.set_defaults(handler=_backup)


def _store_arguments(parser: argparse.ArgumentParser) -> None:
    """The store's address (:func:`_store` reads it) and ``--json``."""
    parser.add_argument("--store-root", help="embedded store folder (SQLite)")
    parser.add_argument("--postgres", metavar="DSN", help="PostgreSQL DSN instead of SQLite")
    # --postgres-schema is the server's spelling: the same words work in both places.
    parser.add_argument(
        "--schema",
        "--postgres-schema",
        dest="schema",
        default="wf",
        help="PostgreSQL schema (default: wf)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def parse_duration(text: str) -> float:
    """Seconds in ``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or a bare number of seconds
    (InvalidArgument otherwise, or if it is not positive)."""
    found = _DURATION.match(text)
    if found is None:
        raise InvalidArgument(
            f"--older-than {text!r} is not a duration (a number with s, m, h, d or w: 30d)",
            field="older_than",
        )
    seconds = float(found.group(1)) * _UNIT_S[found.group(2)]
    if seconds <= 0:
        raise InvalidArgument("--older-than must be more than 0", field="older_than")
    if seconds > DURATION_MAX_S:  # 2**64 days parsed, then removed nothing, silently
        raise InvalidArgument(
            f"--older-than must be at most {DURATION_MAX_S:.0f} s (a century)", field="older_than"
        )
    return seconds


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


def _prune(args: argparse.Namespace) -> int:
    # Imported here: the other store commands need none of it.
    from wf.clock import SystemClock
    from wf.node import default_owner
    from wf.server.retention import RuntimeLinks
    from wf.store.driven_catalog import DrivenCatalog

    try:
        older_than = parse_duration(args.older_than)
        if not 1 <= args.batch <= retention.BATCH_MAX:
            raise InvalidArgument(f"--batch must be within 1..{retention.BATCH_MAX}")
        store = _store(args, create=False)
    except InvalidArgument as exc:
        print(f"wf: error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    cutoff = time.time() - older_than

    async def run() -> retention.PruneCounts:
        await _opened(store)
        try:
            if not isinstance(store, DrivenCatalog):  # every real backend is one
                raise _Unreadable("this store cannot be pruned")
            if not args.dry_run:
                # Writes outside a server's ownership would fence that server (PostgreSQL)
                # or race its in-memory state: hold the store, or refuse.
                await store.acquire_ownership(default_owner(SystemClock()))
            return await store.prune(
                RuntimeLinks(), cutoff=cutoff, batch=args.batch, dry_run=args.dry_run
            )
        finally:
            await store.close()

    try:
        counts = asyncio.run(run())
    except OwnershipConflict as exc:
        print(
            f"wf: error: {_fail(exc)}; a running server prunes its own store when "
            "server.store.retention.older_than_s is set, or stop it and prune again",
            file=sys.stderr,
        )
        return EXIT_BUSY
    except Exception as exc:  # the command line's boundary: one line, exit 3
        print(f"wf: error: {_fail(exc)}", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.json:
        older = datetime.fromtimestamp(cutoff, UTC).isoformat()
        print(json.dumps({"dry_run": args.dry_run, "cutoff": older, **counts.as_dict()}))
    else:
        verb = "would remove" if args.dry_run else "removed"
        print(
            f"{verb} {counts.runs} runs, {counts.activities} activities, "
            f"{counts.transitions} transitions, {counts.occurrences} occurrences"
        )
    return EXIT_CLEAN


def _backup(args: argparse.Namespace) -> int:
    from wf.store.sqlite_files import backup

    try:
        size = backup(Path(args.store_root), Path(args.to))
    except InvalidArgument as exc:
        print(f"wf: error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # the command line's boundary: one line, exit 3
        print(f"wf: error: {_fail(exc)}", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.json:
        print(json.dumps({"backup": str(args.to), "bytes": size}))
    else:
        print(f"backed up to {args.to} ({size} bytes)")
    return EXIT_CLEAN


def _as_dict(d: Diagnostic) -> dict[str, object]:
    return {name: getattr(d, name) for name in d.__struct_fields__}
