"""Recovery's load and the store check, on a read session of the PostgreSQL store.

Theory of operation
-------------------
:class:`~wf.store.postgres.PostgresStore` runs these functions on a pooled
read session inside one ``REPEATABLE READ`` read-only transaction (one
consistent snapshot); they do no I/O beyond that session's queries.

:func:`load_state` is recovery's load, built for 10^6 live activities (see
:func:`_live_activities`): PostgreSQL re-encodes each unfinished row as one
whole msgpack map (the spec's pairs, then the lifecycle columns, the floats
bit for bit with ``float8send``) and joins a chunk of them into one blob, so
Python decodes a chunk into finished :class:`~wf.scheduler.model.Activity`
values with one msgspec call and no per-row work, while the server encodes the
next chunk (the work splits over two processes). Two C-speed comparisons prove
each decoded activity is its own row's. Every row off that path (a spec that
is not a map, too large, or naming another activity; a state that is not
live) is read whole and decoded by :func:`wf.store.rows.activity_from_row`, the
one decoder :func:`check_store` also uses, so its value or diagnostic is
exactly the row-by-row one. Malformed rows come back as diagnostics and are
left out (fail closed).
"""

from __future__ import annotations

import asyncio
import bisect
import operator
import struct
from typing import Any, Final, TypeAlias, get_type_hints

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
_LIVE_WHERE: Final = "state NOT IN ('completed', 'failed', 'cancelled')"
"""Unfinished activities: the ``activities_live`` index's own clause (it must stay so)."""

SPEC_BYTES_MAX: Final = 16_384
"""Largest spec blob the server re-encodes in a chunk; a larger one (a big payload) is
read whole and decoded on its own, so that a chunk's blob stays small."""


def _bytea(value: bytes) -> str:
    """A ``bytea`` literal (the bytes are ours: msgpack of fixed keys and values)."""
    return f"'\\x{value.hex()}'::bytea"


def _pair(key: str, value: bytes = b"") -> bytes:
    """The msgpack of a map key followed by ``value`` (a value or a value's prefix)."""
    return codec.encode(key) + value


_NIL: Final = b"\xc0"
_MAP16: Final = b"\xde"
_INT64: Final = b"\xd3"
_FLOAT64: Final = b"\xcb"
_STR32: Final = b"\xdb"
_INTS: Final = ("attempt", "failures", "infra_requeues", "steals", "token")
_TEXTS: Final = ("worker_id", "last_error")
_LEASE_DRIVEN: Final = (*_INTS, *_TEXTS, "lease_expires_at")
"""The columns only a lease moves: a never-leased row holds their defaults."""


def _mirror() -> tuple[type[msgspec.Struct] | None, dict[str, str]]:
    """A struct laid out exactly as :class:`Activity` whose lease-driven fields are
    encoded under keys no spec can hold (``~0``, ``~1``...), and those keys.

    Decoded with it, a spec that carries a lease-driven field under its own name
    fails (unknown field) instead of setting it, so a never-leased row needs no
    pairs for those fields at all: absent, they take their defaults, which are the
    row's. A decoded value becomes an ``Activity`` by ``__class__`` assignment (same
    layout). ``(None, plain names)`` if this Python refuses that assignment."""
    hints = get_type_hints(Activity, include_extras=True)  # constraints (Meta) kept
    defaults = dict(
        zip(
            Activity.__struct_fields__[-len(Activity.__struct_defaults__) :],
            Activity.__struct_defaults__,
            strict=True,
        )
    )
    renamed = {name: f"~{i}" for i, name in enumerate(_LEASE_DRIVEN)}
    mirror = msgspec.defstruct(
        "_LoadedActivity",
        [
            (n, hints[n], defaults[n]) if n in defaults else (n, hints[n])
            for n in Activity.__struct_fields__
        ],
        kw_only=True,
        gc=False,
        forbid_unknown_fields=True,
        rename=renamed,
    )
    try:
        probe = mirror(activity_id="", activity_type="")
        probe.__class__ = Activity
    except TypeError:  # pragma: no cover - a layout this Python will not swap
        return None, {name: name for name in _LEASE_DRIVEN}
    return mirror, renamed


_LOADED, _KEY = _mirror()


def _lifecycle_pairs(hot: bool) -> tuple[str, int]:
    """The msgpack pairs of a row's lifecycle columns as one ``bytea`` expression
    (``NULL`` for a state that is not live), and how many pairs it holds.

    Every column sent is written as the row holds it (ints as int64, floats bit
    for bit with ``float8send``, texts as str32) and comes after the spec's own
    pairs (the later key wins), so the decoded value is exactly the one
    :func:`wf.store.rows.activity_from_row` sets. A never-leased row (``hot``)
    sends no lease-driven pair when :func:`_mirror` renamed them (their defaults
    are the row's), else one constant for their defaults.
    """
    state = (
        "CASE state "
        + " ".join(
            f"WHEN '{s.value}' THEN {_bytea(_pair('state', codec.encode(s.value)))}"
            for s in _LIVE_STATES
        )
        + " END"
    )
    timing = (
        f"{_bytea(_pair('queued_at', _FLOAT64))} || float8send(queued_at) || "
        f"{_bytea(_pair('submitted_at', _FLOAT64))} || float8send(submitted_at) || "
        f"CASE WHEN not_before IS NULL THEN {_bytea(_pair('not_before', _NIL))} "
        f"ELSE {_bytea(_pair('not_before', _FLOAT64))} || float8send(not_before) END"
    )
    if hot and _LOADED is not None:
        return f"{state} || {timing}", 4
    if hot:
        defaults = b"".join(
            [*(_pair(n, b"\x00") for n in _INTS), *(_pair(n, _NIL) for n in _TEXTS)]
        )
        zero = _pair("lease_expires_at", _FLOAT64 + bytes(8))
        return f"{state} || {timing} || {_bytea(defaults + zero)}", 4 + len(_LEASE_DRIVEN)
    ints = " || ".join(f"{_bytea(_pair(_KEY[n], _INT64))} || int8send({n})" for n in _INTS)
    texts = " || ".join(
        f"CASE WHEN {n} IS NULL THEN {_bytea(_pair(_KEY[n], _NIL))} "
        f"ELSE {_bytea(_pair(_KEY[n], _STR32))} "
        f"|| int4send(octet_length(convert_to({n}, 'UTF8'))) || convert_to({n}, 'UTF8') END"
        for n in _TEXTS
    )
    lease = f"{_bytea(_pair(_KEY['lease_expires_at'], _FLOAT64))} || float8send(lease_expires_at)"
    return f"{state} || {timing} || {ints} || {texts} || {lease}", 4 + len(_LEASE_DRIVEN)


def _header(extra: int) -> str:
    """The spec's map header counting ``extra`` more pairs (a map16 header: the count
    may no longer fit a fixmap), then the spec's own pairs; ``NULL`` when the spec
    is not a fixmap or a map16 (that row is decoded on its own)."""
    fixmaps = " ".join(
        f"WHEN {0x80 + k} THEN {_bytea(_MAP16 + (k + extra).to_bytes(2, 'big'))} || substr(spec, 2)"
        for k in range(16)
    )
    count = f"get_byte(spec, 1) * 256 + get_byte(spec, 2) + {extra}"
    return (
        f"CASE get_byte(spec, 0) {fixmaps} WHEN {_MAP16[0]} THEN CASE WHEN {count} <= 65535 "
        f"THEN {_bytea(_MAP16)} || substr(int4send({count}), 3) || substr(spec, 4) END END"
    )


def _row_map_sql() -> str:
    """One row as one msgpack map (see :data:`_SELECT_LIVE_CHUNK`), or ``NULL``."""
    never_leased = " AND ".join(
        [
            *(f"{n} = 0" for n in _INTS),
            *(f"{n} IS NULL" for n in _TEXTS),
            # Bit for bit +0.0 (-0.0 equals it but is not the default's value).
            f"float8send(lease_expires_at) = {_bytea(bytes(8))}",
        ]
    )
    hot, hot_pairs = _lifecycle_pairs(hot=True)
    cold, cold_pairs = _lifecycle_pairs(hot=False)
    return (
        f"CASE WHEN octet_length(spec) NOT BETWEEN 3 AND {SPEC_BYTES_MAX} THEN NULL "
        f"WHEN {never_leased} THEN {_header(hot_pairs)} || {hot} "
        f"ELSE {_header(cold_pairs)} || {cold} END"
    )


_SELECT_LIVE_CHUNK: Final = (
    "SELECT count(*), max(seq), count(b), string_agg(b, ''::bytea), "
    "string_agg(activity_id, E'\\x1f') FILTER (WHERE b IS NOT NULL), "
    "string_agg(int8send(seq), ''::bytea) FILTER (WHERE b IS NOT NULL), "
    "array_agg(seq) FILTER (WHERE b IS NULL) "
    f"FROM (SELECT seq, activity_id, {_row_map_sql()} AS b "
    f"FROM activities WHERE {_LIVE_WHERE} AND seq > %s ORDER BY seq LIMIT %s) AS chunk"
)
"""One chunk of unfinished activities after a ``seq``, in creation order, for recovery:
the server writes each row as one msgpack map (its spec's pairs, then every
lifecycle column: a later key wins when msgspec decodes, so the columns override
whatever the spec says) and joins the chunk's maps into one blob that one msgspec
call decodes into whole :class:`~wf.scheduler.model.Activity` values. Beside it:
the row count, the last ``seq`` (where the next chunk starts), the count, ids
(joined by U+001F) and ``seq`` values (int64 each) of the rows in the blob, and
the ``seq`` values of the rows left out of it (a state that is not live, a spec
that is not a map, or too large), which are decoded on their own.

The aggregates take the rows in the order of the sorted subquery, which
PostgreSQL documents as what usually happens rather than as a promise (an
``ORDER BY`` inside each aggregate would sort the chunk once per aggregate and
double the server's work). Every aggregate takes the same rows in the same
order, so the loader checks that the ``seq`` values are ascending and reads a
chunk that is not so again, row by row."""
_SELECT_LIVE_RANGE: Final = f"""
SELECT activity_id, seq, spec, state, attempt, failures, infra_requeues, steals, token,
       worker_id, lease_expires_at, not_before, queued_at, last_error, submitted_at
FROM activities WHERE {_LIVE_WHERE} AND seq > %s AND seq <= %s ORDER BY seq"""
_SELECT_LIVE_BY_SEQ: Final = f"""
SELECT activity_id, seq, spec, state, attempt, failures, infra_requeues, steals, token,
       worker_id, lease_expires_at, not_before, queued_at, last_error, submitted_at
FROM activities WHERE {_LIVE_WHERE} AND seq = ANY(%s) ORDER BY seq"""
_SEQ_MIN: Final = -(2**63)
"""Below every ``seq``: where the first chunk starts."""
_ID_SEPARATOR: Final = "\x1f"
_chunk_decoder: Final[msgspec.msgpack.Decoder[list[Any]]] = msgspec.msgpack.Decoder(
    list[_LOADED or Activity]  # type: ignore[misc]  # a class chosen at import
)


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
    by_id: dict[str, Activity] = {}
    activities = await _live_activities(conn, diagnostics, by_id)
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
        by_id=by_id,
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


async def _live_activities(
    conn: Conn, diagnostics: list[Diagnostic], by_id: dict[str, Activity] | None = None
) -> list[Activity]:
    """Unfinished activities in ``seq`` order, read for recovery, a chunk at a time
    (see :data:`_SELECT_LIVE_CHUNK`); each chunk's also into ``by_id`` (keyed by id, in
    the same order: recovery adopts it as the core's activity table). Filled here it
    costs about what restore's own pass would (0.5-0.6 s at 10^6 activities), but
    while the server encodes the next chunk.

    The hot path costs the server the re-encoding of each row and costs Python one
    msgspec call per chunk (no row tuple, no attribute store per activity), plus
    two C-speed comparisons that prove every decoded activity is its own row's
    (ids and ``seq`` values, in order). The next chunk is requested before this
    one is decoded, so the server encodes it meanwhile.

    Whatever is off that path gives exactly what decoding each row on its own
    gives (:func:`wf.store.rows.activity_from_row`, the decoder ``check`` uses):
    rows the server left out of the blob are read whole by ``seq`` and put in
    their place; a chunk whose blob does not decode, or decodes into activities
    that are not its rows' (a spec naming another activity or seq), is read again
    whole, row by row. Their diagnostics come in ``seq`` order.
    """
    out: list[Activity] = []
    limit = LOAD_FETCH_ROWS
    lo = _SEQ_MIN
    pending: asyncio.Future[tuple[Any, ...] | None] | None = asyncio.ensure_future(
        _fetch_chunk(conn, lo, limit)
    )
    try:
        while pending is not None:
            chunk = await pending
            pending = None
            if chunk is None or not chunk[0]:
                break
            count, hi, in_blob, blob, ids, seqs, left_out = chunk
            if count == limit:
                pending = asyncio.ensure_future(_fetch_chunk(conn, hi, limit))
                await asyncio.sleep(0)  # the task sends its query before this chunk is decoded
            decoded = _decode_chunk(blob, in_blob) if in_blob else []
            start = len(out)
            if decoded is None or (
                in_blob and not _are_rows(decoded, ids, seqs)
            ):  # not its rows: every row of the chunk on its own
                await _rows_on_their_own(conn, _SELECT_LIVE_RANGE, [lo, hi], out, diagnostics)
            elif left_out:
                await _merge_left_out(conn, decoded, left_out, out, diagnostics)
            else:
                out += decoded
            if by_id is not None:
                added = out[start:]
                by_id.update(zip(map(_id_of, added), added, strict=True))
            lo = hi
    finally:
        if pending is not None and not pending.done():  # left early: settle the query
            pending.cancel()
            await asyncio.wait([pending])
        if pending is not None and not pending.cancelled():
            pending.exception()  # retrieved (raised, if at all, by the await above)
    return out


async def _fetch_chunk(conn: Conn, after: int, limit: int) -> tuple[Any, ...] | None:
    cur = await conn.execute(_SELECT_LIVE_CHUNK, [after, limit], binary=True)
    return await cur.fetchone()


def _decode_chunk(blob: bytes, n: int) -> list[Activity] | None:
    """The ``n`` activities of a chunk's blob, or ``None`` if it is not exactly that.

    A spec that is not one well-formed map cannot hide in the blob: its map header
    counts its pairs plus ours, so a spec with a pair too many or too few shifts
    every following pair, and a shifted map starts at a key or ends in the next
    row's header (both fail to decode), or leaves the list short or long."""
    try:
        decoded: list[Activity] = _chunk_decoder.decode(b"\xdd" + n.to_bytes(4, "big") + blob)
    except (msgspec.DecodeError, TypeError, ValueError):
        return None
    if len(decoded) != n:
        return None
    if _LOADED is not None:
        for a in decoded:
            a.__class__ = Activity  # see _mirror: the same layout
    return decoded


def _are_rows(decoded: list[Activity], ids: str, seqs: bytes) -> bool:
    """Whether each activity names its row's id and ``seq``, in ascending ``seq`` order.

    ``ids`` is the rows' ids joined by U+001F; with exactly ``n - 1`` separators in
    it no id holds one, so equal joins mean equal ids one by one."""
    n = len(decoded)
    in_order = [a.seq for a in decoded]
    return (
        ids.count(_ID_SEPARATOR) == n - 1
        and _ID_SEPARATOR.join([a.activity_id for a in decoded]) == ids
        and struct.pack(f">{n}q", *in_order) == seqs
        and in_order == sorted(in_order)  # ascending (see _SELECT_LIVE_CHUNK)
    )


async def _rows_on_their_own(
    conn: Conn, query: str, params: list[Any], out: list[Activity], diagnostics: list[Diagnostic]
) -> None:
    """Read rows whole and decode each on its own, in ``seq`` order."""
    cur = await conn.execute(query, params, binary=True)
    for row in await cur.fetchall():
        decoded = rows.activity_from_row(row)
        if isinstance(decoded, Diagnostic):
            diagnostics.append(decoded)
        else:
            out.append(decoded)


async def _merge_left_out(
    conn: Conn,
    decoded: list[Activity],
    left_out: list[int],
    out: list[Activity],
    diagnostics: list[Diagnostic],
) -> None:
    """Append ``decoded`` (checked: each has its row's ``seq``) and the rows the blob
    left out, read whole and decoded on their own, in ``seq`` order."""
    cur = await conn.execute(_SELECT_LIVE_BY_SEQ, [sorted(left_out)], binary=True)
    taken = 0
    for row in await cur.fetchall():
        place = bisect.bisect_left(decoded, row[1], lo=taken, key=_seq_of)
        out += decoded[taken:place]
        taken = place
        one = rows.activity_from_row(row)
        if isinstance(one, Diagnostic):
            diagnostics.append(one)
        else:
            out.append(one)
    out += decoded[taken:]


def _seq_of(a: Activity) -> int:
    return a.seq


_id_of: Final = operator.attrgetter("activity_id")
