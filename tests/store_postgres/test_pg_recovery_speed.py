"""PostgreSQL recovery's load path: the chunked fast path (each row re-encoded by the
server as one whole msgpack map, one msgspec decode per chunk, the next chunk
requested early) gives exactly what decoding every row on its own gives, for every
kind of row, on the fast path or off it.

Behaviour only: the speed itself is measured by ``bench/store.py``, never asserted.
Each test works in a fresh schema (``pg_schema``) and drops it afterwards.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import psycopg
import pytest
from psycopg import sql

from wf.scheduler.model import Activity, ActivityState, Priority, RetryPolicy
from wf.scheduler.outputs import ActivitySubmitted, Record, Transition
from wf.store import codec, rows
from wf.store import postgres_load as pg_load
from wf.store.postgres import PostgresStore
from wf.store.protocol import Diagnostic

T0 = 1_767_225_600.0
N = 40


def _submitted(i: int) -> list[Record]:
    aid = f"r{i:03}"
    activity = Activity(
        activity_id=aid, activity_type="t", tenant=f"t{i % 3}", seq=i + 1, submitted_at=T0 + i
    )
    return [
        ActivitySubmitted(at=T0 + i, activity=activity),
        Transition(
            at=T0 + i,
            activity_id=aid,
            from_state=ActivityState.READY,
            to_state=ActivityState.QUEUED,
            reason="submitted",
            attempt=0,
            failures=0,
            infra_requeues=0,
            token=0,
        ),
    ]


# Rows moved off the never-leased fast path, one way each (``{s}`` is the schema).
_PLANTED: list[tuple[str, tuple[Any, ...]]] = [
    # Ever leased: the lifecycle columns come from the row.
    (
        "UPDATE {s}.activities SET state = 'leased', attempt = 1, token = 4, worker_id = 'w1', "
        "lease_expires_at = %s WHERE activity_id = 'r002'",
        (T0 + 30,),
    ),
    (
        "UPDATE {s}.activities SET state = 'executing', attempt = 2, failures = 1, token = 5, "
        "worker_id = 'w2', lease_expires_at = %s, last_error = 'boom' WHERE activity_id = 'r003'",
        (T0 + 31,),
    ),
    (
        "UPDATE {s}.activities SET state = 'queued', attempt = 1, infra_requeues = 1, "
        "steals = 2, token = 6 WHERE activity_id = 'r005'",
        (),
    ),
    ("UPDATE {s}.activities SET last_error = 'x' WHERE activity_id = 'r006'", ()),
    # An expiry of -0.0 equals 0 but is not the default's +0.0.
    ("UPDATE {s}.activities SET lease_expires_at = '-0'::float8 WHERE activity_id = 'r007'", ()),
    # Fast-path rows with their own timing columns.
    (
        "UPDATE {s}.activities SET state = 'delayed', not_before = %s, queued_at = %s "
        "WHERE activity_id = 'r008'",
        (T0 + 99, T0 + 9),
    ),
    ("UPDATE {s}.activities SET state = 'ready' WHERE activity_id = 'r009'", ()),
    # Malformed: fail closed with the row-by-row diagnostic.
    ("UPDATE {s}.activities SET spec = '\\x00c1'::bytea WHERE activity_id = 'r011'", ()),
    ("UPDATE {s}.activities SET spec = ''::bytea WHERE activity_id = 'r013'", ()),
    ("UPDATE {s}.activities SET spec = '\\x93010203'::bytea WHERE activity_id = 'r014'", ()),
    ("UPDATE {s}.activities SET state = 'bogus' WHERE activity_id = 'r017'", ()),
    (
        "UPDATE {s}.activities SET spec = (SELECT spec FROM {s}.activities "
        "WHERE activity_id = 'r021') WHERE activity_id = 'r020'",
        (),
    ),
    ("UPDATE {s}.activities SET seq = seq + 1000 WHERE activity_id = 'r025'", ()),
]


async def _plant(dsn: str, schema: str) -> None:
    """Every row of :data:`_PLANTED`, plus a spec blob that carries lease-driven fields."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for statement, params in _PLANTED:
            await conn.execute(statement.format(s=sql.Identifier(schema).as_string(conn)), params)
        table = sql.SQL("{}.activities").format(sql.Identifier(schema))
        cur = await conn.execute(
            sql.SQL("SELECT spec FROM {} WHERE activity_id = 'r030'").format(table)
        )
        found = await cur.fetchone()
        assert found is not None
        spec = msgspec.structs.replace(
            codec.activity_decoder.decode(found[0]),
            attempt=5,
            token=7,
            worker_id="ghost",
            lease_expires_at=T0,
            last_error="stale",
        )
        await conn.execute(
            sql.SQL("UPDATE {} SET spec = %s WHERE activity_id = 'r030'").format(table),
            [codec.encode(spec)],
        )


async def _row_by_row(dsn: str, schema: str) -> tuple[list[Activity], list[Diagnostic]]:
    """What decoding each live row on its own gives (the reference)."""
    activities: list[Activity] = []
    diagnostics: list[Diagnostic] = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        cur = await conn.execute(codec.postgres_queries()["select_live_activities"], binary=True)
        for row in await cur.fetchall():
            decoded = rows.activity_from_row(row)
            if isinstance(decoded, Diagnostic):
                diagnostics.append(decoded)
            else:
                activities.append(decoded)
    return activities, diagnostics


@pytest.mark.parametrize("fetch_rows", [1, 4, 10_000])
def test_load_gives_exactly_the_row_by_row_result(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch, fetch_rows: int
) -> None:
    monkeypatch.setattr(pg_load, "LOAD_FETCH_ROWS", fetch_rows)

    async def main() -> None:
        store = PostgresStore(pg_dsn, schema=pg_schema)
        await store.open()
        try:
            await store.append([r for i in range(N) for r in _submitted(i)])
            await _plant(pg_dsn, pg_schema)
            expected, expected_diagnostics = await _row_by_row(pg_dsn, pg_schema)
            state = await store.load()
        finally:
            await store.close()
        # repr tells -0.0 from 0.0 (== does not) and shows every field.
        assert [repr(a) for a in state.activities] == [repr(a) for a in expected]
        # The planted seq (r025, +1000) and tokens (r002-r005) are above the counters
        # the appends left: load reports that too (recovery refuses such a store),
        # beside the rows' own diagnostics.
        behind = [d.key for d in state.diagnostics if d.kind == "counter_behind"]
        assert sorted(behind) == ["seq", "token"]
        row_diagnostics = [d for d in state.diagnostics if d.kind != "counter_behind"]
        assert row_diagnostics == expected_diagnostics
        assert {d.key for d in row_diagnostics} == {
            "r011",
            "r013",
            "r014",
            "r017",
            "r020",
            "r025",
        }
        by_id = {a.activity_id: a for a in state.activities}
        assert (by_id["r002"].state, by_id["r002"].token, by_id["r002"].worker_id) == (
            ActivityState.LEASED,
            4,
            "w1",
        )
        assert (by_id["r030"].token, by_id["r030"].worker_id, by_id["r030"].attempt) == (
            0,
            None,
            0,
        )
        assert (by_id["r008"].state, by_id["r008"].not_before) == (
            ActivityState.DELAYED,
            T0 + 99,
        )
        assert len(state.activities) == N - 6

    asyncio.run(main())


class _Injected(Exception):
    pass


@pytest.mark.parametrize("how", ["cancelled", "raised"])
def test_a_load_interrupted_mid_scan_leaves_the_store_usable(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Interrupted while the next chunk's FETCH is in flight (the load's task
    cancelled, or an error raised between two chunks): the load fails with that,
    and the next load on the same (only) pooled session reads everything."""
    monkeypatch.setattr(pg_load, "LOAD_FETCH_ROWS", 3)
    real_decode = pg_load._decode_chunk
    calls = 0

    def decode_then_interrupt(blob: bytes, n: int) -> list[Activity] | None:
        nonlocal calls
        calls += 1
        if calls == 2:
            if how == "raised":
                raise _Injected
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
        return real_decode(blob, n)

    async def main() -> None:
        store = PostgresStore(pg_dsn, schema=pg_schema, pool_max=1)
        await store.open()
        try:
            await store.append([r for i in range(N) for r in _submitted(i)])
            monkeypatch.setattr(pg_load, "_decode_chunk", decode_then_interrupt)
            with pytest.raises(asyncio.CancelledError if how == "cancelled" else _Injected):
                await store.load()
            monkeypatch.setattr(pg_load, "_decode_chunk", real_decode)
            state = await asyncio.wait_for(store.load(), timeout=30)
            assert [a.activity_id for a in state.activities] == [f"r{i:03}" for i in range(N)]
            assert state.diagnostics == []
        finally:
            await store.close()

    asyncio.run(main())


def _shaped(i: int, aid: str, **fields: Any) -> list[Record]:
    """An activity with its own id and fields, submitted and queued."""
    records = _submitted(i)
    first = records[0]
    assert isinstance(first, ActivitySubmitted)
    activity = msgspec.structs.replace(first.activity, activity_id=aid, **fields)
    queued = msgspec.structs.replace(records[1], activity_id=aid)
    return [ActivitySubmitted(at=first.at, activity=activity), queued]


_MANY_FIELDS: dict[str, Any] = {
    "workflow_id": "wf-1",
    "priority": Priority.HIGH,
    "deadline": T0 + 500,
    "capabilities": frozenset({"gpu"}),
    "locality": "rack-1",
    "region": "eu",
    "idempotent": True,
    "correlation_id": "c-1",
    "ordering_key": "k-1",
    "policy": "fifo",
    "new_workflow": True,
    "retry": RetryPolicy(max_attempts=7),
    "payload": b"\x00\xc1\xde\xad",
    "renewable": False,
}
"""Enough non-default fields that the spec's map header is a map16, not a fixmap."""


def _shapes() -> list[Record]:
    """Every spec shape the chunk path must take or hand over exactly."""
    out = [r for i in range(N) for r in _submitted(i)]
    out += _shaped(N, "s-map16", **_MANY_FIELDS)
    out += _shaped(N + 1, "s-big", payload=bytes(range(256)) * (pg_load.SPEC_BYTES_MAX // 128))
    out += _shaped(N + 2, "s-sep\x1fid")
    out += _shaped(N + 3, "s-unicode-é✓")
    return out


@pytest.mark.parametrize("fetch_rows", [1, 3, 10_000])
def test_every_spec_shape_loads_exactly_as_row_by_row(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch, fetch_rows: int
) -> None:
    """A map16 spec, a spec past SPEC_BYTES_MAX (left out of the blob, read on its
    own), an id holding the ids' separator (its chunk read row by row), a non-ASCII
    id and lease-driven columns of every kind all load as decoding each row alone."""
    monkeypatch.setattr(pg_load, "LOAD_FETCH_ROWS", fetch_rows)

    async def main() -> None:
        store = PostgresStore(pg_dsn, schema=pg_schema)
        await store.open()
        try:
            await store.append(_shapes())
            table = sql.SQL("{}.activities").format(sql.Identifier(pg_schema))
            async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
                await conn.execute(
                    sql.SQL(
                        "UPDATE {} SET state = 'leased', attempt = 3, failures = 2, "
                        "infra_requeues = 1, steals = 4, token = 9, worker_id = 'wé', "
                        "lease_expires_at = %s, last_error = 'boom ✓' "
                        "WHERE activity_id IN ('s-map16', 'r004')"
                    ).format(table),
                    [T0 + 0.1],
                )
                await conn.execute(
                    sql.SQL(
                        "UPDATE {} SET state = 'delayed', not_before = %s "
                        "WHERE activity_id = 's-unicode-é✓'"
                    ).format(table),
                    [T0 + 1e-7],
                )
            expected, expected_diagnostics = await _row_by_row(pg_dsn, pg_schema)
            state = await store.load()
        finally:
            await store.close()
        assert [repr(a) for a in state.activities] == [repr(a) for a in expected]
        assert [type(a) for a in state.activities] == [Activity] * len(expected)
        assert expected_diagnostics == []
        # The planted token (9) is above the counter the appends left.
        assert [(d.kind, d.key) for d in state.diagnostics] == [("counter_behind", "token")]
        assert len(state.activities) == N + 4

    asyncio.run(main())


def test_a_store_of_ordinary_rows_is_read_on_the_fast_path_alone(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never-leased, leased, delayed and map16 rows: every chunk decodes as one blob
    (neither the row-by-row reread nor the left-out merge runs)."""
    monkeypatch.setattr(pg_load, "LOAD_FETCH_ROWS", 16)

    async def off_the_fast_path(*args: Any) -> None:
        raise AssertionError("left the fast path")

    async def main() -> None:
        store = PostgresStore(pg_dsn, schema=pg_schema)
        await store.open()
        try:
            await store.append(
                [r for i in range(N) for r in _submitted(i)] + _shaped(N, "s-map16", **_MANY_FIELDS)
            )
            await _plant_rows(pg_dsn, pg_schema, _PLANTED[:7])  # none of them malformed
            expected, _ = await _row_by_row(pg_dsn, pg_schema)
            monkeypatch.setattr(pg_load, "_rows_on_their_own", off_the_fast_path)
            monkeypatch.setattr(pg_load, "_merge_left_out", off_the_fast_path)
            state = await store.load()
        finally:
            await store.close()
        assert [repr(a) for a in state.activities] == [repr(a) for a in expected]
        assert [d.kind for d in state.diagnostics] == ["counter_behind"]  # planted tokens

    asyncio.run(main())


async def _plant_rows(dsn: str, schema: str, planted: list[tuple[str, tuple[Any, ...]]]) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for statement, params in planted:
            await conn.execute(statement.format(s=sql.Identifier(schema).as_string(conn)), params)


def test_the_load_mirror_is_activity_but_for_the_lease_driven_keys() -> None:
    """The chunk decoder's struct has Activity's fields, types, defaults and order;
    only the lease-driven fields are renamed, and a decoded value becomes a plain
    Activity, equal to the same activity built directly."""
    mirror = pg_load._LOADED
    assert mirror is not None
    assert mirror.__struct_fields__ == Activity.__struct_fields__
    assert mirror.__struct_defaults__ == Activity.__struct_defaults__
    renamed = {
        f: e
        for f, e in zip(mirror.__struct_fields__, mirror.__struct_encode_fields__, strict=True)
        if f != e
    }
    assert renamed == {n: f"~{i}" for i, n in enumerate(pg_load._LEASE_DRIVEN)}
    blob = codec.encode({"activity_id": "a", "activity_type": "t", "~0": 2, "~5": "w"})
    decoded = pg_load._decode_chunk(blob, 1)
    assert decoded is not None
    assert type(decoded[0]) is Activity
    assert decoded[0] == Activity(activity_id="a", activity_type="t", attempt=2, worker_id="w")
    # A spec naming a lease-driven field itself does not decode on the fast path.
    assert (
        pg_load._decode_chunk(
            codec.encode({"activity_id": "a", "activity_type": "t", "attempt": 2}), 1
        )
        is None
    )
