"""Recovery's load and the store check, on a read session of the PostgreSQL store.

Theory of operation
-------------------
:class:`~wf.store.postgres.PostgresStore` runs these functions on a pooled
read session inside one ``REPEATABLE READ`` read-only transaction (one
consistent snapshot); they do no I/O beyond that session's queries.

:func:`load_state` is recovery's load, built for 10^6 live activities (see
:func:`_live_activities`): the scan reads seven narrow columns, the server
folds the state and "never leased" test into one small integer, a chunk of
spec blobs is decoded by one msgspec call, and the next chunk is already
requested while this one is decoded. Every row off that path is re-read whole
afterwards and decoded by :func:`wf.store.rows.activity_from_row`, the one
decoder :func:`check_store` also uses, so its value or diagnostic is exactly
the row-by-row one. Malformed rows come back as diagnostics and are left out
(fail closed).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, TypeAlias

import msgspec
import psycopg

from wf.scheduler.model import TERMINAL_STATES, Activity, ActivityState
from wf.store import check as checks
from wf.store import codec, rows
from wf.store.protocol import Diagnostic, StoredState

Conn: TypeAlias = psycopg.AsyncConnection[tuple[Any, ...]]

LOAD_FETCH_ROWS: Final = 10_000
"""Rows per fetch from a server-side cursor."""
IDS_PER_QUERY_MAX: Final = 10_000
"""Most ids in one ``= ANY(...)`` lookup."""

_SELECT_ALL_ACTIVITIES: Final = """
SELECT activity_id, seq, spec, state, attempt, failures, infra_requeues, steals, token,
       worker_id, lease_expires_at, not_before, queued_at, last_error, submitted_at
FROM activities ORDER BY seq"""
_SELECT_ACTIVITIES_BY_ID: Final = """
SELECT activity_id, seq, spec, state, attempt, failures, infra_requeues, steals, token,
       worker_id, lease_expires_at, not_before, queued_at, last_error, submitted_at
FROM activities WHERE activity_id = ANY(%s) ORDER BY seq"""
_LIVE_STATES: Final = tuple(s for s in ActivityState if s not in TERMINAL_STATES)
_TERMINAL_VALUES: Final = frozenset(s.value for s in TERMINAL_STATES)
_SELECT_LIVE: Final = (
    "SELECT activity_id, seq, spec, CASE WHEN attempt = 0 AND failures = 0 "
    "AND infra_requeues = 0 AND steals = 0 AND token = 0 AND worker_id IS NULL "
    "AND last_error IS NULL AND float8send(lease_expires_at) = '\\x0000000000000000'::bytea "
    "THEN CASE state "
    + " ".join(f"WHEN '{s.value}' THEN {i}" for i, s in enumerate(_LIVE_STATES))
    + " END END AS kind, not_before, queued_at, submitted_at "
    "FROM activities WHERE state NOT IN ('completed', 'failed', 'cancelled') ORDER BY seq"
)
"""Unfinished activities in creation order (the ``activities_live`` index: the WHERE
clause must stay the index's), for recovery: seven narrow columns instead of fifteen.

``kind`` is the index of the state in :data:`_LIVE_STATES` when every lease-driven
column (attempt, failures, requeues, steals, token, worker, expiry, last error)
still holds its default, exactly as in a never-leased activity (the expiry
bit-for-bit +0.0, so that the value set in its place is the very same);
``NULL`` otherwise, or when the state is unknown. A ``NULL`` kind sends the row
to the slow path (:data:`_SELECT_ACTIVITIES_BY_ID`, whole and by id)."""
_activity_list_decoder: Final = msgspec.msgpack.Decoder(list[Activity])


async def load_state(conn: Conn, finished_max: int, where: str) -> StoredState:
    """The durable state, read on ``conn`` inside the caller's read-only snapshot
    transaction; corrupt rows become diagnostics naming ``where``."""
    queries = codec.postgres_queries()
    diagnostics: list[Diagnostic] = []
    cur = await conn.execute(queries["select_counters"])
    counters = rows.counters_from_rows(await cur.fetchall(), diagnostics)
    # Recovery refuses a rewound counter (wf.store.check).
    cur = await conn.execute(queries[checks.COUNTERS_QUERY])
    diagnostics.extend(checks.counters_behind(await cur.fetchall(), where))
    activities = await _live_activities(conn, diagnostics)
    cur = await conn.execute(queries["select_recent_finished"], {"limit": finished_max})
    finished = _finished(await cur.fetchall(), diagnostics)
    cur = await conn.execute(queries["select_workers"], binary=True)
    workers = rows.decode_all(await cur.fetchall(), rows.worker_from_row, diagnostics)
    return StoredState(
        seq=counters["seq"],
        token=counters["token"],
        worker_seq=counters["worker_seq"],
        activities=activities,
        finished=finished,
        workers=workers,
        diagnostics=diagnostics,
    )


async def check_store(
    conn: Conn, bodies: checks.BodyDecoders | None, where: str
) -> list[Diagnostic]:
    """``check`` on ``conn`` inside the caller's read-only snapshot transaction."""
    queries = codec.postgres_queries()
    record = checks.RecordCheck(bodies, where)
    found = record.found
    for name, to_diagnostic in rows.CHECKS:
        cur = await conn.execute(queries[name])
        # Sorted by the row's key so that the report reads the same every time.
        for row in sorted(await cur.fetchall(), key=lambda r: r[0]):
            diagnostic = to_diagnostic(row)
            if diagnostic is not None:
                found.append(diagnostic)
    await _scan_activities(conn, _SELECT_ALL_ACTIVITIES, found)
    cur = await conn.execute(queries["select_workers"], binary=True)
    rows.decode_all(await cur.fetchall(), rows.worker_from_row, found)
    for scan in checks.SCANS:
        await _scan_table(conn, scan, record)
    return found


async def _scan_activities(conn: Conn, query: str, diagnostics: list[Diagnostic]) -> list[Activity]:
    """Decode activity rows chunk by chunk from a binary server-side cursor."""
    activities: list[Activity] = []
    async with conn.cursor(name="wf_scan_activities", binary=True) as cur:
        await cur.execute(query)
        while chunk := await cur.fetchmany(LOAD_FETCH_ROWS):
            for row in chunk:
                decoded = rows.activity_from_row(row)
                if isinstance(decoded, Diagnostic):
                    diagnostics.append(decoded)
                else:
                    activities.append(decoded)
    return activities


def _finished(
    fetched: list[tuple[Any, ...]], diagnostics: list[Diagnostic]
) -> list[tuple[str, ActivityState]]:
    """``select_recent_finished`` rows, oldest first; an unknown state is reported."""
    finished: list[tuple[str, ActivityState]] = []
    for aid, state in reversed(fetched):
        if state not in _TERMINAL_VALUES:
            diagnostics.append(
                Diagnostic(
                    kind="malformed_row",
                    table="transitions",
                    key=str(aid),
                    message=f"transitions row {aid!r}: unknown terminal state {state!r}",
                )
            )
            continue
        finished.append((str(aid), ActivityState(state)))
    return finished


async def _scan_table(conn: Conn, scan: checks.Scan, record: checks.RecordCheck) -> None:
    """Read and decode one whole table for ``check``, in a savepoint so that a table
    PostgreSQL reports damaged (class XX) is reported and the check goes on."""
    try:
        async with conn.transaction():
            cursor = conn.cursor(name=f"wf_check_{scan.table}", binary=True)
            async with cursor as cur:
                await cur.execute(scan.sql)
                while chunk := await cur.fetchmany(LOAD_FETCH_ROWS):
                    record.rows(scan.table, chunk)
    except psycopg.Error as exc:
        if not (exc.sqlstate or "").startswith("XX"):
            raise
        record.damaged(scan.table, exc)


async def _live_activities(conn: Conn, diagnostics: list[Diagnostic]) -> list[Activity]:
    """Unfinished activities in ``seq`` order, read for recovery (see :data:`_SELECT_LIVE`).

    The hot path (10^6 queued, never-leased activities) costs one seven-column
    row from the binary cursor, one slice of a single msgspec decode call, two
    identity comparisons and twelve attribute stores per activity: the same
    values :func:`wf.store.rows.activity_from_row` would give, because a fast
    row's lease-driven columns are known to hold the defaults stored here. The
    next chunk is requested before this one is decoded, so the server produces
    it meanwhile (one round trip per chunk instead of a wait per chunk).

    Every other row (``kind`` NULL, a spec that does not decode or names
    another activity or seq) keeps its place and is re-read whole, by id and in
    ``seq`` order, afterwards in the same snapshot and decoded by
    :func:`~wf.store.rows.activity_from_row`: the very value, or the very
    diagnostic (in the same order), that the row-by-row load gave.
    """
    out: list[Activity | None] = []
    slow: dict[str, int] = {}
    """Activity id -> its place in ``out`` (``None`` there until re-read)."""
    append = out.append
    state_of = _LIVE_STATES
    async with conn.cursor(name="wf_load_live", binary=True) as cur:
        await cur.execute(_SELECT_LIVE)
        pending = asyncio.ensure_future(cur.fetchmany(LOAD_FETCH_ROWS))
        try:
            while batch := await pending:
                pending = asyncio.ensure_future(cur.fetchmany(LOAD_FETCH_ROWS))
                await asyncio.sleep(0)  # the task sends its FETCH before this chunk is decoded
                decoded = _decode_specs([row[2] for row in batch])
                for row, a in zip(batch, decoded, strict=True):
                    aid, seq, _spec, kind, not_before, queued_at, submitted_at = row
                    if kind is None or a is None or a.activity_id != aid or a.seq != seq:
                        slow[aid] = len(out)
                        append(None)
                        continue
                    a.state = state_of[kind]
                    a.attempt = a.failures = a.infra_requeues = a.steals = a.token = 0
                    a.worker_id = a.last_error = None
                    a.lease_expires_at = 0.0
                    a.not_before = not_before
                    a.queued_at = queued_at
                    a.submitted_at = submitted_at
                    append(a)
        finally:
            if not pending.done():  # left early (cancelled, failed): settle the FETCH
                pending.cancel()
                await asyncio.wait([pending])
            if not pending.cancelled():
                pending.exception()  # retrieved (raised, if at all, by the await above)
    if not slow:
        return out  # type: ignore[return-value]  # no None left in it
    ids = list(slow)
    filled = 0
    for start in range(0, len(ids), IDS_PER_QUERY_MAX):
        cur2 = await conn.execute(
            _SELECT_ACTIVITIES_BY_ID, [ids[start : start + IDS_PER_QUERY_MAX]], binary=True
        )
        for row in await cur2.fetchall():
            decoded_row = rows.activity_from_row(row)
            if isinstance(decoded_row, Diagnostic):
                diagnostics.append(decoded_row)
            else:
                out[slow[row[0]]] = decoded_row
                filled += 1
    if filled == len(slow):
        return out  # type: ignore[return-value]  # every None was replaced
    return [a for a in out if a is not None]


def _decode_specs(specs: list[bytes]) -> list[Activity | None]:
    """Every blob of a chunk decoded in one msgspec call; if any is malformed, one by
    one, ``None`` for each that is not an Activity (its row takes the slow path)."""
    n = len(specs)
    try:
        decoded: list[Activity | None] = list(
            _activity_list_decoder.decode(b"\xdd" + n.to_bytes(4, "big") + b"".join(specs))
        )
    except (msgspec.DecodeError, TypeError, ValueError):
        pass
    else:
        if len(decoded) == n:
            return decoded
    return [_decode_one(spec) for spec in specs]


def _decode_one(spec: bytes) -> Activity | None:
    try:
        return codec.activity_decoder.decode(spec)
    except (msgspec.DecodeError, TypeError, ValueError):
        return None
