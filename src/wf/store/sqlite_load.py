"""Recovery's load and the store check, on a read connection of the SQLite store.

Theory of operation
-------------------
:class:`~wf.store.sqlite.SQLiteStore` runs these functions on its read-only
connection inside one read transaction (WAL: one consistent snapshot beside
the writer); they do no I/O of their own beyond that connection's queries.

:func:`load_state` is recovery's load, built for 10^6 live activities:
``activities`` is stored in ``seq`` (rowid) order, spec blobs are compact
(defaults omitted), SQLite aggregates a chunk of rows in one step on a helper
thread while this one decodes the chunk before with one msgspec call, and the
lease-driven columns are read only for activities that were ever leased.
SQLite columns are dynamically typed, so every value is type-checked before
it reaches the core; a malformed row is a diagnostic and its activity is
blocked (fail closed). :func:`check_store` is ``wf store check``: SQLite's own
``PRAGMA integrity_check``, the contradiction queries and every record of
every table decoded; a step SQLite cannot finish (a damaged page) is
reported and the next one still runs.
"""

from __future__ import annotations

import operator
import sqlite3
import sys
from array import array
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Final

import msgspec

from wf.scheduler.model import TERMINAL_STATES, Activity, ActivityState
from wf.store import check as checks
from wf.store import codec, rows
from wf.store.protocol import Diagnostic, StoredState, StoredWorker

FETCH_ROWS_MAX: Final = 20_000
"""Rows fetched per ``fetchmany`` while loading or scanning."""
ID_CHUNK_MAX: Final = 500
"""Ids per ``IN (...)`` query (SQLite's bound-parameter limit is far higher)."""

DAMAGE: Final = (sqlite3.DatabaseError, UnicodeDecodeError)
"""What reading a damaged file raises (a text that is not UTF-8 comes back as
UnicodeDecodeError, not as an SQLite error)."""

_STATES: Final = {s.value: s for s in ActivityState}
_id_of: Final = operator.attrgetter("activity_id")
_activity_list_decoder: Final = msgspec.msgpack.Decoder(list[Activity])


def _malformed(table: str, key: str, what: str, activity_id: str | None) -> Diagnostic:
    blocked = "; the activity is blocked" if activity_id is not None else ""
    return Diagnostic(
        kind="malformed_row",
        table=table,
        key=key,
        message=f"{table} row {key!r}: {what}{blocked}",
        activity_id=activity_id,
    )


def _decode_specs(specs: list[bytes]) -> list[Activity | None] | None:
    """Every blob of a chunk decoded in one call; ``None`` if any is malformed."""
    try:
        joined = b"".join(specs)
    except TypeError:  # a spec that is not a blob
        return None
    decoded = _decode_specs_blob(joined, len(specs))
    return None if decoded is None else list(decoded)


def _decode_specs_blob(joined: bytes, n: int) -> list[Activity] | None:
    """``n`` spec blobs, concatenated, decoded in one call; ``None`` unless the bytes are
    exactly ``n`` well-formed activities.

    The bytes become one msgpack array of ``n`` items: a blob that is more or less than
    one map shifts the ones after it, which leaves the array short (an error), bytes
    over (an error) or, at worst, activities that name other rows (the callers compare
    ids)."""
    try:
        decoded: list[Activity] = _activity_list_decoder.decode(
            b"\xdd" + n.to_bytes(4, "big") + joined
        )
    # ValueError: msgspec reports a str that is not UTF-8 as UnicodeDecodeError.
    except (msgspec.DecodeError, TypeError, ValueError):
        return None
    return decoded if len(decoded) == n else None


def _decode_one(spec: object) -> Activity | str:
    """One blob decoded, or why it is not an Activity."""
    if not isinstance(spec, bytes):
        return f"spec is {type(spec).__name__}, not a blob"
    try:
        return codec.activity_decoder.decode(spec)
    except (msgspec.DecodeError, ValueError) as exc:
        return f"spec blob is not a valid Activity ({type(exc).__name__}: {exc})"


_LIVE_STATE_OF: Final = {s.value: s for s in ActivityState if s not in TERMINAL_STATES}
"""A live state's column value -> the state (the query selects no other)."""

_LIVE_WHERE: Final = "state NOT IN ('completed', 'failed', 'cancelled')"
"""Unfinished activities: the ``activities_live`` index's own clause (it must stay so)."""
_ROW_COLUMNS: Final = "activity_id, spec, queued_at, not_before, state, token, seq"
"""What :func:`_from_rows` reads of a row.

Plain columns only: at 10^6 rows an SQL expression that folded the state and the
column types into one small integer (``CASE state WHEN ...``, ``typeof``) cost
more inside SQLite than the per-row dict lookup and type tests in Python that
replace it. A row whose state, types or token are wrong is re-read by id to say
what is wrong (:func:`_why_malformed`)."""
_SELECT_LIVE_RANGE: Final = (
    f"SELECT {_ROW_COLUMNS} FROM activities "
    f"WHERE {_LIVE_WHERE} AND seq > ? AND seq <= ? ORDER BY seq"
)
_SELECT_LIVE_SEQS: Final = (
    f"SELECT {_ROW_COLUMNS} FROM activities WHERE {_LIVE_WHERE} AND seq IN ({{marks}}) ORDER BY seq"
)
SPEC_BYTES_MAX: Final = 2_048
"""Largest spec blob on the hot path; a larger one (a big payload) is read on its own,
so that a chunk's concatenation stays within about 50 MB (:data:`LOAD_CHUNK_ROWS`
times this), far below SQLite's own limit on one value (10^9 bytes)."""
LOAD_CHUNK_ROWS: Final = 25_000
"""Rows per chunk of :data:`_SELECT_LIVE_CHUNK` (a few MB of specs at most)."""
_HOT: Final = (
    "state = 'queued' AND typeof(token) = 'integer' AND token = 0 AND not_before IS NULL "
    "AND typeof(queued_at) = 'real' AND typeof(submitted_at) = 'real' "
    f"AND queued_at = submitted_at AND typeof(spec) = 'blob' "
    f"AND length(spec) BETWEEN 3 AND {SPEC_BYTES_MAX}"
)
"""A row whose whole state the SQL proves (see :func:`_live_activities`)."""
_SELECT_LIVE_CHUNK: Final = (
    "SELECT count(*), max(seq), count(h), CAST(group_concat(h, '') AS BLOB), "
    "group_concat(CASE WHEN h IS NOT NULL THEN activity_id END, char(31)), "
    "group_concat(CASE WHEN h IS NOT NULL THEN printf('%016x', seq) END, ''), "
    "group_concat(CASE WHEN h IS NULL THEN seq END, ',') "
    f"FROM (SELECT seq, activity_id, CASE WHEN {_HOT} THEN spec END AS h "
    f"FROM activities WHERE {_LIVE_WHERE} AND seq > ? ORDER BY seq LIMIT ?)"
)
"""One chunk of unfinished activities after a ``seq``, in creation order: its row count
and last ``seq`` (where the next chunk starts); the count, concatenated spec blobs,
ids (joined by U+001F) and ``seq`` values (16 hex digits each: int64, big-endian) of
its hot rows; the ``seq`` values of the others (joined by commas). ``group_concat``
appends a blob's bytes as they are (NUL and bytes that are not UTF-8 included) and
the ``CAST`` hands them back as a blob. The aggregates take the rows in the sorted
subquery's order, which SQLite does not promise in writing: the loader checks that
the decoded ``seq`` values ascend, and reads a chunk that does not so again, row by
row."""
_SEQ_MIN: Final = -(2**63)
"""Below every ``seq``: where the first chunk starts."""
_ID_SEPARATOR: Final = "\x1f"
_QUEUED: Final = ActivityState.QUEUED
_LITTLE_ENDIAN: Final = sys.byteorder == "little"
_seq_of: Final = operator.attrgetter("seq")


@dataclass(frozen=True, slots=True)
class _Chunk:
    """One :data:`_SELECT_LIVE_CHUNK` answer."""

    lo: int
    """The ``seq`` it starts after."""
    rows: int
    hi: int
    hot: int
    blob: bytes
    ids: str
    seqs: bytes
    """The hot rows' ``seq`` values, int64 big-endian each."""
    cold: list[int]


def _fetch_chunk(conn: sqlite3.Connection, after: int) -> _Chunk:
    """The chunk after ``after`` (on the helper thread: one SQLite step, GIL released)."""
    found = conn.execute(_SELECT_LIVE_CHUNK, (after, LOAD_CHUNK_ROWS)).fetchone()
    rows, hi, hot, blob, ids, seqs, cold = found
    return _Chunk(
        lo=after,
        rows=int(rows),
        hi=int(hi) if rows else after,
        hot=int(hot),
        blob=blob or b"",
        ids=ids or "",
        seqs=bytes.fromhex(seqs) if seqs else b"",
        cold=[int(seq) for seq in cold.split(",")] if cold else [],
    )


def _settle(pending: Future[_Chunk] | None) -> None:
    """Wait for the helper's query in flight (its outcome stays in the future)."""
    if pending is not None:
        wait([pending])


def _hot_part(chunk: _Chunk) -> list[Activity] | None:
    """The chunk's hot rows decoded, state applied; ``None`` if they are not provably
    exactly its rows' (then the whole chunk is read row by row)."""
    if not chunk.hot:
        return []
    decoded = _decode_specs_blob(chunk.blob, chunk.hot)
    if decoded is None:
        return None
    seqs = [a.seq for a in decoded]
    try:
        packed = array("q", seqs)
    except OverflowError:  # a spec's seq beyond int64: no row's
        return None
    if _LITTLE_ENDIAN:
        packed.byteswap()
    if (
        chunk.ids.count(_ID_SEPARATOR) != chunk.hot - 1
        or _ID_SEPARATOR.join([a.activity_id for a in decoded]) != chunk.ids
        or packed.tobytes() != chunk.seqs
        or seqs != sorted(seqs)
    ):
        return None
    queued = _QUEUED
    for a in decoded:
        a.state = queued
        a.queued_at = a.submitted_at
        a.not_before = None
    return decoded


def _merged(hot: list[Activity], cold: list[Activity]) -> list[Activity]:
    """Two lists in ascending ``seq`` as one (two sorted runs: one merge)."""
    if not hot or not cold:
        return hot or cold
    both = hot + cold
    both.sort(key=_seq_of)
    return both


def _cold_rows(
    conn: sqlite3.Connection,
    seqs: list[int],
    diagnostics: list[Diagnostic],
    touched: dict[str, Activity],
) -> list[Activity]:
    """The rows of ``seqs`` read whole, row by row, in ``seq`` order."""
    out: list[Activity] = []
    for start in range(0, len(seqs), ID_CHUNK_MAX):
        chunk = seqs[start : start + ID_CHUNK_MAX]
        sql = _SELECT_LIVE_SEQS.format(marks=",".join("?" * len(chunk)))
        out += _from_rows(conn, sql, chunk, diagnostics, touched)
    return out


def _from_rows(
    conn: sqlite3.Connection,
    sql: str,
    params: Sequence[object],
    diagnostics: list[Diagnostic],
    touched: dict[str, Activity],
) -> list[Activity]:
    """The unfinished activities ``sql`` selects (:data:`_ROW_COLUMNS`), decoded row by
    row; a malformed row becomes a diagnostic and is left out (fail closed).

    Only a lease moves the other lifecycle columns (attempt, failures, requeues,
    steals, token, worker, expiry, last error), so they are read by id, afterwards,
    for the rows that were ever leased (token != 0: put in ``touched``); ``check``
    reports rows that break that rule. SQLite columns are dynamically typed, so every
    value is type-checked before it reaches the core.
    """
    out: list[Activity] = []
    state_of = _LIVE_STATE_OF.get
    real, integer = float, int  # locals: the loop below runs once per row
    append = out.append
    spec_of = operator.itemgetter(1)
    cursor = conn.execute(sql, params)
    while batch := cursor.fetchmany(FETCH_ROWS_MAX):
        # A non-blob spec makes the bulk decode fail (TypeError), and so the
        # per-row fallback below name it: no per-row type test on the hot path.
        decoded = _decode_specs(list(map(spec_of, batch)))
        if decoded is None:
            decoded = []
            for row in batch:
                one = _decode_one(row[1])
                if isinstance(one, str):
                    diagnostics.append(_malformed("activities", str(row[0]), one, str(row[0])))
                    decoded.append(None)
                else:
                    decoded.append(one)
        for (aid, _spec, queued_at, not_before, state, token, seq), a in zip(
            batch, decoded, strict=True
        ):
            if a is None:
                continue
            live = state_of(state)
            if (
                live is None
                or type(queued_at) is not real
                or (not_before is not None and type(not_before) is not real)
                or type(token) is not integer
                or a.activity_id != aid
                or a.seq != seq
            ):
                what = _why_malformed(conn, aid, a, seq)
                diagnostics.append(_malformed("activities", str(aid), what, str(aid)))
                continue
            a.state = live
            a.queued_at = queued_at
            a.not_before = not_before
            if token:
                touched[aid] = a
            append(a)
    return out


def _live_activities(
    conn: sqlite3.Connection, diagnostics: list[Diagnostic], by_id: dict[str, Activity]
) -> list[Activity]:
    """Unfinished activities in creation order, lifecycle applied; each chunk's also into
    ``by_id`` (the table recovery adopts: filled here, while each activity is still in
    the cache, it costs less than a pass of its own).

    Chunks of :data:`LOAD_CHUNK_ROWS` rows by ``seq``. SQLite aggregates each chunk in
    one step (:data:`_SELECT_LIVE_CHUNK`), which Python's ``sqlite3`` runs with the GIL
    released, so a helper thread reads the next chunk while this one decodes the
    current one: the load splits over two cores. A row on the hot path (queued, never
    leased, not delayed, queued when submitted: a backlog's rows) comes back only as
    its spec blob, concatenated with the chunk's others, and the whole chunk decodes
    in one msgspec call; the joined ids prove that every decoded activity is its own
    row's, and the packed ``seq`` values that each is its row's, in order; the rest of
    its state is what the SQL proved: queued, no ``not_before``, ``queued_at`` equal to
    the ``submitted_at`` column (written with the spec's own, which it takes), never
    leased (token 0: the lease-driven columns hold their defaults, as ``check``
    verifies). Every other row, and every row of a chunk that does not decode
    or prove so, is read whole and goes through :func:`_from_rows`, the row-by-row
    decoding (its values and diagnostics exactly as before), and is put in its
    ``seq`` place.
    """
    out: list[Activity] = []
    touched: dict[str, Activity] = {}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="wf-sqlite-load") as helper:
        # One statement on the connection at a time: before this thread uses ``conn``
        # itself it waits for the helper's query in flight (``_settle``).
        pending: Future[_Chunk] | None = helper.submit(_fetch_chunk, conn, _SEQ_MIN)
        while pending is not None:
            chunk = pending.result()
            if not chunk.rows:
                break
            pending = None
            if chunk.rows >= LOAD_CHUNK_ROWS:
                pending = helper.submit(_fetch_chunk, conn, chunk.hi)
            part = _hot_part(chunk)
            if part is None:  # not provably its rows: every row of the chunk on its own
                _settle(pending)
                part = _from_rows(
                    conn, _SELECT_LIVE_RANGE, (chunk.lo, chunk.hi), diagnostics, touched
                )
            elif chunk.cold:
                _settle(pending)
                part = _merged(part, _cold_rows(conn, chunk.cold, diagnostics, touched))
            out += part
            by_id.update(zip(map(_id_of, part), part, strict=True))
    bad = _apply_lifecycle(conn, touched, diagnostics)
    if not bad:
        return out
    for aid in bad:
        del by_id[aid]
    return [a for a in out if a.activity_id not in bad]


def _why_malformed(conn: sqlite3.Connection, aid: object, a: Activity, seq: object) -> str:
    """What is wrong with a live row of :func:`_from_rows` whose state, column types or
    token are wrong, or whose spec names another activity or ``seq`` (the rare path:
    re-read in the same read transaction)."""
    if a.activity_id != aid:
        return f"spec blob names activity {a.activity_id!r}"
    if a.seq != seq:
        return f"spec blob names seq {a.seq!r}, row seq {seq!r}"
    found = conn.execute(
        "SELECT state, queued_at, not_before, token FROM activities WHERE activity_id = ?",
        (aid,),
    ).fetchone()
    if found is None:  # not possible inside one read transaction
        return "row vanished while loading"
    state, queued_at, not_before, token = found
    if state not in _STATES:
        return f"unknown state {state!r}"
    if type(queued_at) is not float or (not_before is not None and type(not_before) is not float):
        return f"bad queued_at {queued_at!r} or not_before {not_before!r}"
    return f"bad token {token!r}"


_INTS: Final = frozenset({int})
_STR_OR_NONE: Final = frozenset({str, type(None)})


def _apply_lifecycle(
    conn: sqlite3.Connection, touched: dict[str, Activity], diagnostics: list[Diagnostic]
) -> set[str]:
    """Read and apply the lease-driven columns of ``touched``; returns the malformed ids."""
    bad: set[str] = set()
    ids = list(touched)
    for start in range(0, len(ids), ID_CHUNK_MAX):
        chunk = ids[start : start + ID_CHUNK_MAX]
        sql = _SELECT_LIFECYCLE.format(marks=",".join("?" * len(chunk)))
        for aid, *ints, worker_id, lease_expires_at, last_error in conn.execute(sql, chunk):
            if (
                any(type(v) not in _INTS or v < 0 for v in ints)
                or type(worker_id) not in _STR_OR_NONE
                or type(last_error) not in _STR_OR_NONE
                or type(lease_expires_at) is not float
            ):
                what = f"bad lifecycle columns {(*ints, worker_id, lease_expires_at, last_error)!r}"
                diagnostics.append(_malformed("activities", aid, what, aid))
                bad.add(aid)
                continue
            a = touched[aid]
            a.attempt, a.failures, a.infra_requeues, a.steals, a.token = ints
            a.worker_id = worker_id
            a.lease_expires_at = lease_expires_at
            a.last_error = last_error
    return bad


_SELECT_LIFECYCLE: Final = (
    "SELECT activity_id, attempt, failures, infra_requeues, steals, token, worker_id, "
    "lease_expires_at, last_error FROM activities WHERE activity_id IN ({marks})"
)
"""The lifecycle columns of the activities :data:`_SELECT_LIVE` marked as touched."""


def load_state(conn: sqlite3.Connection, finished_max: int, where: str) -> StoredState:
    """The durable state, read on ``conn`` inside one read transaction (the caller's);
    corrupt rows become diagnostics naming ``where``."""
    q = codec.queries()
    diagnostics: list[Diagnostic] = []
    counters = rows.counters_from_rows(conn.execute(q["select_counters"]).fetchall(), diagnostics)
    # Recovery refuses a rewound counter (wf.store.check); its one full scan, for
    # the largest token, costs ~60 ms per 10^6 activities.
    diagnostics.extend(
        checks.counters_behind(conn.execute(q[checks.COUNTERS_QUERY]).fetchall(), where)
    )
    by_id: dict[str, Activity] = {}
    activities = _live_activities(conn, diagnostics, by_id)
    finished: list[tuple[str, ActivityState]] = []
    if finished_max:
        for aid, state in conn.execute(q["select_recent_finished"], {"limit": finished_max}):
            value = _STATES.get(state)
            if value is None or value not in TERMINAL_STATES:
                diagnostics.append(
                    _malformed("transitions", str(aid), f"unknown terminal state {state!r}", None)
                )
                continue
            finished.append((aid, value))
        finished.reverse()
    return StoredState(
        seq=counters["seq"],
        token=counters["token"],
        worker_seq=counters["worker_seq"],
        activities=activities,
        finished=finished,
        workers=_workers(conn, diagnostics),
        diagnostics=diagnostics,
        by_id=by_id,
    )


def _workers(conn: sqlite3.Connection, diagnostics: list[Diagnostic]) -> list[StoredWorker]:
    fetched = conn.execute(codec.queries()["select_workers"]).fetchall()
    return rows.decode_all(fetched, rows.worker_from_row, diagnostics)


def check_store(
    conn: sqlite3.Connection, bodies: checks.BodyDecoders | None, where: str
) -> list[Diagnostic]:
    """``check`` in one read transaction (the caller's). A step SQLite cannot finish (a damaged
    page) is reported and the next one still runs, so one bad page hides nothing else."""
    q = codec.queries()
    record = checks.RecordCheck(bodies, where)
    found = record.found
    try:
        lines = conn.execute(f"PRAGMA integrity_check({checks.INTEGRITY_ERRORS_MAX})")
        record.integrity(str(line) for (line,) in lines.fetchall())
    except DAMAGE as exc:
        record.damaged("database", exc)
    for name, to_diagnostic in rows.CHECKS:
        try:
            for row in conn.execute(q[name]).fetchall():
                diagnostic = to_diagnostic(row)
                if diagnostic is not None:
                    found.append(diagnostic)
        except DAMAGE as exc:
            record.damaged(name.removeprefix("check_"), exc)
    _scan_malformed(conn, record)
    for scan in checks.SCANS:
        try:
            cursor = conn.execute(scan.sql)
            while batch := cursor.fetchmany(FETCH_ROWS_MAX):
                record.rows(scan.table, batch)
        except DAMAGE as exc:
            record.damaged(scan.table, exc)
    return found


def _scan_malformed(conn: sqlite3.Connection, record: checks.RecordCheck) -> None:
    """Every activity and worker row whose blob or state does not decode (full scans);
    a table SQLite cannot read to the end is reported as damaged."""
    found = record.found
    try:
        _scan_activities(conn, found)
    except DAMAGE as exc:
        record.damaged("activities", exc)
    try:
        _workers(conn, found)
    except DAMAGE as exc:
        record.damaged("workers", exc)


def _scan_activities(conn: sqlite3.Connection, found: list[Diagnostic]) -> None:
    """Every activity row whose blob or state does not decode, or names another row."""
    cursor = conn.execute("SELECT activity_id, seq, spec, state FROM activities ORDER BY seq")
    while batch := cursor.fetchmany(FETCH_ROWS_MAX):
        specs = [row[2] for row in batch]
        decoded = _decode_specs(specs) if all(type(b) is bytes for b in specs) else None
        for i, (aid, seq, spec, state) in enumerate(batch):
            item = decoded[i] if decoded is not None else None
            one: Activity | str = item if item is not None else _decode_one(spec)
            if isinstance(one, str):
                found.append(_malformed("activities", str(aid), one, str(aid)))
            elif state not in _STATES:
                found.append(
                    _malformed("activities", str(aid), f"unknown state {state!r}", str(aid))
                )
            elif one.activity_id != aid or one.seq != seq:
                found.append(
                    _malformed(
                        "activities",
                        str(aid),
                        f"spec blob names {one.activity_id!r} seq {one.seq}, row seq {seq}",
                        str(aid),
                    )
                )
