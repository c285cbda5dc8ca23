"""What ``wf store check`` and start-up verify in a store, written once for both backends.

Theory of operation
-------------------
Each backend only runs queries and hands the rows here; the judgement of
those rows lives in this module, so SQLite and PostgreSQL report the same
damage with the same words.

*Rewound counters.* The ``counters`` table holds the numbers the core must
never hand out twice (``seq``, ``token``, ``worker_seq``, ``run_seq``). A
counter below the largest number the data already uses (a hand edit, one
file of a store restored from another time) would make the next submit,
lease, registration or run reuse a number that is taken: the commit fails
on a unique key and every later write is fenced. Both backends run the
shared ``check_counters_behind`` query in :meth:`~wf.store.protocol.Store.load`
and report what :func:`counters_behind` finds; recovery then refuses to start
(:func:`refuse_rewound_counters`, called by
:func:`wf.store.loader.build_snapshot`) with one line naming the store,
while ``wf store check`` lists the same finding as a contradiction.

*Every record decoded.* ``wf store check`` reads every row of every table
(:data:`SCANS`) and decodes it with the very decoders the server uses: the
store's column decoders (:mod:`wf.store.rows`) and, through
:class:`BodyDecoders`, the runtime's and the schedules layer's body decoders
(the store does not import those layers; ``wf store check`` hands them in).
Whatever the server would answer with ``corrupt_record`` becomes a
:class:`~wf.store.protocol.Diagnostic` of kind ``corrupt_record`` naming the
table and the record's key. A table the database cannot read at all
(damaged pages) is reported as ``damaged`` and the check goes on with the
next table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from wf.errors import CorruptRecord
from wf.store import rows
from wf.store.protocol import ArtifactRow, DeploymentRow, Diagnostic, RunRow, ScheduleRow

COUNTERS_QUERY: Final = "check_counters_behind"
"""The named query (``sql/queries.sql``) giving each counter, its value and the
largest value the data uses."""
REWOUND: Final = "counter_behind"
"""Diagnostic kind of a counter below the data."""
CORRUPT: Final = "corrupt_record"
"""Diagnostic kind of a record the server could not decode (its error code)."""
DAMAGED: Final = "damaged"
"""Diagnostic kind of damage the database itself reports (pages, indexes)."""
INTEGRITY_ERRORS_MAX: Final = 100
"""Most lines of SQLite's ``PRAGMA integrity_check`` reported."""
MESSAGE_CHARS_MAX: Final = 500
"""Longest diagnostic message kept (a decoder may quote a whole record)."""


def counters_behind(found: Iterable[Sequence[Any]], where: str) -> list[Diagnostic]:
    """``counter_behind`` diagnostics for the rows of :data:`COUNTERS_QUERY`
    (``name, value, observed``); a missing or non-integer counter counts as behind.
    ``where`` names the store in each message (the refusal quotes it)."""
    out: list[Diagnostic] = []
    for name, value, observed in found:
        if type(value) is int and type(observed) is int and value >= observed:
            continue
        shown = "missing" if value is None else f"{value!r}"
        out.append(
            Diagnostic(
                kind=REWOUND,
                table="counters",
                key=str(name),
                message=(
                    f"store {where}: counter {name!r} is {shown}, below {observed!r}, "
                    "the highest value its data already uses"
                ),
            )
        )
    return out


def refuse_rewound_counters(diagnostics: Iterable[Diagnostic]) -> None:
    """Raise :class:`~wf.errors.CorruptRecord` if any diagnostic is a rewound counter:
    starting would make the first new record reuse a number that is taken, fail
    its commit and stop every write after it."""
    behind = [d for d in diagnostics if d.kind == REWOUND]
    if not behind:
        return
    raise CorruptRecord(
        "; ".join(d.message for d in behind)
        + ": the counters were rewound, so new records would reuse numbers already "
        "taken; refusing to start (see `wf store check` and docs/server.md)",
        counters=[d.key for d in behind],
    )


def verify_migrations(
    applied: dict[int, str],
    known: Sequence[tuple[int, str, str]],
    where: str,
    *,
    pending_ok: bool,
) -> list[tuple[int, str, str]]:
    """The migrations of ``known`` not yet ``applied``; CorruptRecord if ``applied`` is
    not a prefix of them (a newer wf's store, or another schema's history), or if any
    is pending and ``pending_ok`` is false (``wf store check`` never migrates)."""
    names = {version: name for version, name, _sql in known}
    code_version = max(names, default=0)
    newest = max(applied, default=0)
    if newest > code_version:
        raise CorruptRecord(
            f"store {where} has schema version {newest}, newer than this code's "
            f"{code_version}; upgrade wf",
            schema_version=newest,
            code_version=code_version,
        )
    for version, name in sorted(applied.items()):
        if names.get(version) != name:
            raise CorruptRecord(
                f"store {where} recorded migration {version} as {name!r}, which this code "
                f"calls {names.get(version)!r}: not a wf store, or damaged",
                version=version,
            )
    pending = [m for m in known if m[0] not in applied]
    if pending and not pending_ok:
        raise CorruptRecord(
            f"store {where} has schema version {newest}, older than this code's "
            f"{code_version}; run `wf store migrate` first",
            schema_version=newest,
            code_version=code_version,
        )
    return pending


class BodyDecoders(Protocol):
    """The body decoders of the layers above the store (the store sees only
    columns). Each raises :class:`~wf.errors.CorruptRecord` for a record the
    server could not read; ``wf store check`` hands them to
    :meth:`~wf.store.protocol.Store.check`. Called in :data:`SCANS` order, so a
    run's check may rely on every artifact having been seen."""

    def artifact(self, row: ArtifactRow) -> None:
        """Decode one artifact version's plan."""
        ...

    def deployment(self, row: DeploymentRow) -> None:
        """Decode one deployment's body."""
        ...

    def run(self, row: RunRow) -> None:
        """Decode one run's document."""
        ...

    def schedule(self, row: ScheduleRow) -> None:
        """Decode one schedule's body."""
        ...

    def result(self, activity_id: str, result: bytes) -> None:
        """Check one completed activity's stored result, as its run would use it."""
        ...


@dataclass(frozen=True, slots=True)
class Scan:
    """One full-table read of :meth:`~wf.store.protocol.Store.check`."""

    table: str
    """The table read."""
    sql: str
    """Its query: no parameters, the same text for both backends."""


SCANS: Final = (
    Scan(
        "transitions",
        "SELECT id, activity_id, at, from_state, to_state, reason, attempt, failures, "
        "infra_requeues, steals, token, worker_id, lease_expires_at, not_before, error, "
        "result, stack_trace FROM transitions ORDER BY id",
    ),
    Scan(
        "artifacts",
        "SELECT artifact_id, version, plan, content_hash, created_at FROM artifacts "
        "ORDER BY artifact_id, version",
    ),
    Scan(
        "deployments",
        "SELECT deployment_id, body, revision, updated_at FROM deployments ORDER BY deployment_id",
    ),
    Scan(
        "runs",
        "SELECT run_id, seq, deployment_id, tenant, status, schedule_id, body, revision, "
        "created_at, updated_at FROM runs ORDER BY seq",
    ),
    Scan(
        "schedules",
        "SELECT schedule_id, tenant, deployment_id, status, body, revision, created_at, "
        "updated_at FROM schedules ORDER BY schedule_id",
    ),
    Scan(
        "occurrences",
        "SELECT schedule_id, instant, status, run_id, detail, recorded_at FROM occurrences "
        "ORDER BY schedule_id, instant",
    ),
)
"""Every table ``check`` decodes beyond the core's own (activities and workers,
which the backends already scan with their load decoders), in an order where a
record's references come before it."""


class RecordCheck:
    """Decodes the rows of :data:`SCANS` and collects what fails (see the module doc)."""

    def __init__(self, bodies: BodyDecoders | None, where: str) -> None:
        self.bodies = bodies
        """The upper layers' decoders, or ``None`` to check columns only."""
        self.where = where
        """The store, as messages name it."""
        self.found: list[Diagnostic] = []
        """Everything reported so far."""

    def rows(self, table: str, fetched: Iterable[Sequence[Any]]) -> None:
        """Decode one chunk of ``table``'s rows (columns as its :data:`SCANS` query)."""
        decode = {
            "transitions": self._transitions,
            "artifacts": self._artifacts,
            "deployments": self._deployments,
            "runs": self._runs,
            "schedules": self._schedules,
            "occurrences": self._occurrences,
        }[table]
        for row in fetched:
            try:
                decode(row)
            except Exception as exc:  # anything a decoder raises is a record it cannot read
                self.found.append(_corrupt(table, _key(table, row), exc))

    def damaged(self, table: str, exc: BaseException) -> None:
        """``table`` could not be read to the end (the database reports damage)."""
        self.found.append(damaged(self.where, table, exc))

    def integrity(self, lines: Iterable[str]) -> None:
        """The lines of the database's own integrity check (``ok`` alone: nothing)."""
        for index, line in enumerate(lines):
            if index == 0 and line == "ok":
                return
            self.found.append(
                Diagnostic(
                    kind=DAMAGED,
                    table="database",
                    key=f"integrity_check:{index + 1}",
                    message=_clip(f"{self.where}: the database's integrity check reports: {line}"),
                )
            )

    def _transitions(self, row: Sequence[Any]) -> None:
        transition = rows.transition_from_row(tuple(row[1:]))
        if self.bodies is not None and transition.to_state == "completed" and transition.result:
            self.bodies.result(transition.activity_id, transition.result)

    def _artifacts(self, row: Sequence[Any]) -> None:
        decoded = rows.artifact_from_row(row)
        if self.bodies is not None:
            self.bodies.artifact(decoded)

    def _deployments(self, row: Sequence[Any]) -> None:
        decoded = rows.deployment_from_row(row)
        if self.bodies is not None:
            self.bodies.deployment(decoded)

    def _runs(self, row: Sequence[Any]) -> None:
        decoded = rows.run_from_row(row)
        if self.bodies is not None:
            self.bodies.run(decoded)

    def _schedules(self, row: Sequence[Any]) -> None:
        decoded = rows.schedule_from_row(row)
        if decoded.status not in rows.SCHEDULE_STATUSES:
            raise CorruptRecord(f"schedule {decoded.schedule_id!r}: status {decoded.status!r}")
        if self.bodies is not None:
            self.bodies.schedule(decoded)

    def _occurrences(self, row: Sequence[Any]) -> None:
        decoded = rows.occurrence_from_row(row)
        if decoded.status not in rows.OCCURRENCE_STATUSES:
            raise CorruptRecord(
                f"occurrence {decoded.schedule_id!r} at {decoded.instant!r}: "
                f"unknown status {decoded.status!r}"
            )


def damaged(where: str, table: str, exc: BaseException) -> Diagnostic:
    """The ``damaged`` diagnostic of a table (or ``database``) that cannot be read."""
    return Diagnostic(
        kind=DAMAGED,
        table=table,
        key="*",
        message=_clip(f"{where}: {table} cannot be read: {type(exc).__name__}: {exc}"),
    )


def _key(table: str, row: Sequence[Any]) -> str:
    """A scanned row's key as the diagnostics name it."""
    if table in ("artifacts", "occurrences"):
        return f"{row[0]}@{row[1]}"
    return str(row[0])


def _corrupt(table: str, key: str, exc: Exception) -> Diagnostic:
    what = exc.message if isinstance(exc, CorruptRecord) else f"{type(exc).__name__}: {exc}"
    return Diagnostic(
        kind=CORRUPT,
        table=table,
        key=key,
        message=_clip(f"{table} record {key!r} cannot be read: {what}"),
    )


def _clip(text: str) -> str:
    """One line, bounded: diagnostics are printed one per line."""
    flat = " ".join(text.split())
    if len(flat) <= MESSAGE_CHARS_MAX:
        return flat
    return flat[: MESSAGE_CHARS_MAX - 3] + "..."
