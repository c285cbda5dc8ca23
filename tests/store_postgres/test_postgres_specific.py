"""What only the PostgreSQL store has: advisory-lock ownership, guarded migrations,
schemas as isolation, the group-commit writer's session (failure, reconnect, fencing).

Each test gets a fresh schema (``pg_schema``) and drops it afterwards. The
shared behaviour of every store is in ``tests/store/test_conformance.py``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from wf.errors import CorruptRecord, InvalidArgument, OwnershipConflict, StoreUnavailable
from wf.scheduler.model import Activity, ActivityState, WorkerInfo, WorkerStatus
from wf.scheduler.outputs import (
    ActivitySubmitted,
    LeaseRenewed,
    Record,
    Transition,
    WorkerUpserted,
)
from wf.store import codec
from wf.store import postgres as pg
from wf.store import postgres_load as pg_load
from wf.store.postgres import PostgresStore, migration_lock_key, writer_application_name
from wf.store.protocol import OwnerInfo

T0 = 1_767_225_600.0
WAIT_MAX_S = 10.0
"""Bound on waiting for the server to notice a dead session."""

OWNER_A = OwnerInfo(host="node-a", pid=1111, since="2026-01-01T00:00:00Z")
OWNER_B = OwnerInfo(host="node-b", pid=2222, since="2026-01-02T00:00:00Z")


# -- helpers --------------------------------------------------------------------


def submitted(activity_id: str, seq: int) -> list[Record]:
    """The records of one accepted activity that went straight to the queue."""
    activity = Activity(activity_id=activity_id, activity_type="t", seq=seq, submitted_at=T0)
    return [
        ActivitySubmitted(at=T0, activity=activity),
        Transition(
            at=T0,
            activity_id=activity_id,
            from_state=ActivityState.READY,
            to_state=ActivityState.QUEUED,
            reason="submitted",
            attempt=0,
            failures=0,
            infra_requeues=0,
            token=0,
        ),
    ]


async def opened(dsn: str, schema: str, **kw: Any) -> PostgresStore:
    store = PostgresStore(dsn, schema=schema, **kw)
    await store.open()
    return store


async def side(dsn: str) -> psycopg.AsyncConnection[tuple[Any, ...]]:
    """A connection of the test's own, outside any store."""
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True)


async def fetch(dsn: str, query: sql.Composable | str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one statement on a side connection; its rows, if it returns any."""
    async with await side(dsn) as conn:
        cur = await conn.execute(query, params or None)
        return await cur.fetchall() if cur.description is not None else []


async def terminate_writer(dsn: str, schema: str, *, owner: bool = False) -> int:
    """Kill a store's writer session on the server (the owner's if ``owner``); its pid."""
    if owner:
        query = sql.SQL("SELECT backend_pid FROM {}.owner").format(sql.Identifier(schema))
    else:
        query = sql.SQL("SELECT pid FROM pg_stat_activity WHERE application_name = {}").format(
            sql.Literal(writer_application_name(schema))
        )
    rows = await fetch(dsn, query)
    assert len(rows) == 1, rows
    pid = int(rows[0][0])
    assert await fetch(dsn, "SELECT pg_terminate_backend(%s)", pid) == [(True,)]
    await until(lambda: _backend_gone(dsn, pid))
    return pid


async def _backend_gone(dsn: str, pid: int) -> bool:
    return not await fetch(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", pid)


async def until(probe: Callable[[], Awaitable[bool]]) -> None:
    deadline = time.monotonic() + WAIT_MAX_S
    while not await probe():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def owned_by_b_eventually(dsn: str, schema: str) -> PostgresStore:
    """Open a second store and take ownership as soon as the lock is free."""
    b = await opened(dsn, schema)

    async def probe() -> bool:
        try:
            await b.acquire_ownership(OWNER_B)
        except OwnershipConflict:
            return False
        return True

    await until(probe)
    return b


# -- migrations -----------------------------------------------------------------


def test_open_creates_the_schema_and_applies_every_migration(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        store = await opened(pg_dsn, pg_schema)
        try:
            known = codec.migrations("postgres")
            assert await store.schema_version() == known[-1][0]
            rows = await fetch(
                pg_dsn,
                sql.SQL("SELECT version, name FROM {}.schema_migrations ORDER BY version").format(
                    sql.Identifier(pg_schema)
                ),
            )
            assert rows == [(version, name) for version, name, _ in known]
            tables = await fetch(
                pg_dsn,
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                pg_schema,
            )
            assert {t for (t,) in tables} >= {"activities", "transitions", "counters", "owner"}
        finally:
            await store.close()

    asyncio.run(main())


def test_concurrent_opens_migrate_once(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        stores = await asyncio.gather(*(opened(pg_dsn, pg_schema) for _ in range(4)))
        query = sql.SQL("SELECT version, applied_at FROM {}.schema_migrations").format(
            sql.Identifier(pg_schema)
        )
        first = await fetch(pg_dsn, query)
        assert len(first) == len(codec.migrations("postgres"))
        again = await opened(pg_dsn, pg_schema)
        stores.append(again)
        assert await fetch(pg_dsn, query) == first  # reopening applies nothing
        for store in stores:
            await store.close()

    asyncio.run(main())


def test_migration_waits_for_the_migration_lock(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        async with await side(pg_dsn) as holder:
            await holder.execute("BEGIN")
            await holder.execute(
                "SELECT pg_advisory_xact_lock(%s::bigint)", [migration_lock_key(pg_schema)]
            )
            store = PostgresStore(pg_dsn, schema=pg_schema)
            opening = asyncio.create_task(store.open())
            await asyncio.sleep(0.5)
            assert not opening.done()  # another node is migrating: wait for it
            await holder.execute("COMMIT")
            await asyncio.wait_for(opening, WAIT_MAX_S)
        await store.close()

    asyncio.run(main())


def test_a_newer_schema_is_refused(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        store = await opened(pg_dsn, pg_schema)
        await store.close()
        await fetch(
            pg_dsn,
            sql.SQL(
                "INSERT INTO {}.schema_migrations (version, name) VALUES (9999, 'future.sql')"
            ).format(sql.Identifier(pg_schema)),
        )
        newer = PostgresStore(pg_dsn, schema=pg_schema)
        with pytest.raises(CorruptRecord, match="9999"):
            await newer.open()
        with pytest.raises(StoreUnavailable):
            await newer.load()
        await newer.close()

    asyncio.run(main())


# -- isolation and configuration -----------------------------------------------


def test_stores_in_different_schemas_are_isolated(pg_dsn: str, pg_schema: str) -> None:
    other = pg_schema + "_other"

    async def main() -> None:
        a = await opened(pg_dsn, pg_schema)
        b = await opened(pg_dsn, other)
        try:
            await a.append(submitted("x1", 1))
            assert await a.existing_activity_ids(["x1"]) == {"x1"}
            assert await b.existing_activity_ids(["x1"]) == set()
            assert (await b.load()).activities == []
            await a.acquire_ownership(OWNER_A)
            await b.acquire_ownership(OWNER_B)  # a different schema is a different store
        finally:
            await a.close()
            await b.close()
            await fetch(
                pg_dsn,
                sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(other)),
            )

    asyncio.run(main())


@pytest.mark.parametrize("schema", ["", "Upper", "has-dash", "x" * 64, "1leading"])
def test_an_unsafe_schema_name_is_rejected(schema: str) -> None:
    with pytest.raises(InvalidArgument):
        PostgresStore("postgresql://unused", schema=schema)


def test_an_unreachable_server_fails_open_with_store_unavailable() -> None:
    async def main() -> None:
        store = PostgresStore("postgresql://postgres@127.0.0.1:1/test", schema="wf")
        with pytest.raises(StoreUnavailable):
            await store.open()
        await store.close()

    asyncio.run(main())


# -- ownership ------------------------------------------------------------------


def test_a_second_owner_is_refused_with_the_holder_named(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        a = await opened(pg_dsn, pg_schema)
        b = await opened(pg_dsn, pg_schema)
        try:
            await a.acquire_ownership(OWNER_A)
            await a.acquire_ownership(OWNER_A)  # idempotent for the holder
            with pytest.raises(OwnershipConflict) as refused:
                await b.acquire_ownership(OWNER_B)
            assert "node-a" in str(refused.value)
            assert "1111" in str(refused.value)
            assert refused.value.details["host"] == "node-a"
            assert refused.value.details["pid"] == 1111
            assert refused.value.details["since"] == OWNER_A.since
            await a.release_ownership()
            await a.release_ownership()  # idempotent
            await b.acquire_ownership(OWNER_B)
            with pytest.raises(OwnershipConflict, match="node-b"):
                await a.acquire_ownership(OWNER_A)
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_close_releases_ownership(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        a = await opened(pg_dsn, pg_schema)
        await a.acquire_ownership(OWNER_A)
        await a.close()
        b = await opened(pg_dsn, pg_schema)
        await b.acquire_ownership(OWNER_B)
        await b.close()

    asyncio.run(main())


_OWNER_CHILD = """
import asyncio, os, sys
from wf.store.postgres import PostgresStore
from wf.store.protocol import OwnerInfo

async def main() -> None:
    store = PostgresStore(sys.argv[1], schema=sys.argv[2])
    await store.open()
    await store.acquire_ownership(
        OwnerInfo(host="child-host", pid=os.getpid(), since="2026-01-03T00:00:00Z")
    )
    print("owned", flush=True)
    await asyncio.sleep(120)

asyncio.run(main())
"""


def test_a_killed_owner_process_never_blocks_the_next_owner(pg_dsn: str, pg_schema: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _OWNER_CHILD, pg_dsn, pg_schema],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "owned"

        async def refused() -> None:
            b = await opened(pg_dsn, pg_schema)
            try:
                with pytest.raises(OwnershipConflict) as conflict:
                    await b.acquire_ownership(OWNER_B)
                assert conflict.value.details["pid"] == child.pid
                assert conflict.value.details["host"] == "child-host"
            finally:
                await b.close()

        asyncio.run(refused())
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert child.stdout is not None
        child.stdout.close()

    async def taken_over() -> None:
        b = await owned_by_b_eventually(pg_dsn, pg_schema)
        await b.append(submitted("after-kill", 1))
        await b.close()

    asyncio.run(taken_over())


# -- the writer -----------------------------------------------------------------


def test_a_failed_append_stores_nothing(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        store = await opened(pg_dsn, pg_schema)
        try:
            await store.append(submitted("a1", 1))
            duplicate = submitted("a1", 3)  # the id is taken: the whole append must go
            with pytest.raises(StoreUnavailable) as failed:
                await store.append([*submitted("a2", 2), *duplicate])
            assert failed.value.retryable
            assert await store.existing_activity_ids(["a1", "a2"]) == {"a1"}
            assert await store.history("a2") == []
            state = await store.load()
            assert (state.seq, [a.activity_id for a in state.activities]) == (1, ["a1"])
            # The failure fences the store until the owner lifts it.
            with pytest.raises(StoreUnavailable, match="earlier commit failed"):
                await store.append(submitted("a3", 3))
            await store.clear_write_fence()
            await store.append(submitted("a3", 3))  # the writer carries on
            assert await store.existing_activity_ids(["a3"]) == {"a3"}
        finally:
            await store.close()

    asyncio.run(main())


def test_a_failed_group_commit_fails_every_append_in_it(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        store = await opened(pg_dsn, pg_schema)
        try:
            await store.append(submitted("a1", 1))
            # Queued in one loop iteration, so the writer takes them as one group.
            results = await asyncio.gather(
                store.append(submitted("g1", 2)),
                store.append(submitted("a1", 3)),
                store.append(submitted("g2", 4)),
                return_exceptions=True,
            )
            assert all(isinstance(r, StoreUnavailable) for r in results), results
            assert await store.existing_activity_ids(["g1", "g2"]) == set()
        finally:
            await store.close()

    asyncio.run(main())


def test_concurrent_appends_share_commits_and_keep_order(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        store = await opened(pg_dsn, pg_schema)
        try:
            await asyncio.gather(*(store.append(submitted(f"c{i}", i + 1)) for i in range(500)))
            state = await store.load()
            assert [a.seq for a in state.activities] == list(range(1, 501))
            assert state.seq == 500
            assert all(a.state is ActivityState.QUEUED for a in state.activities)
        finally:
            await store.close()

    asyncio.run(main())


def test_the_writer_reconnects_after_its_session_is_killed(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        store = await opened(pg_dsn, pg_schema)
        try:
            await store.append(submitted("before", 1))
            killed = await terminate_writer(pg_dsn, pg_schema)
            # Nothing had been sent on the dead session, so the group is resent.
            await store.append(submitted("after", 2))
            assert await store.existing_activity_ids(["before", "after"]) == {"before", "after"}
            new_pid = await terminate_writer(pg_dsn, pg_schema)
            assert new_pid != killed
        finally:
            await store.close()

    asyncio.run(main())


def _lose_the_commit_reply(store: PostgresStore, *, send_commit: bool) -> None:
    """Fault injection: the writer's session dies around its next COMMIT."""
    conn = store._wconn
    assert conn is not None
    real = conn.execute

    async def lossy(query: Any, *args: Any, **kwargs: Any) -> Any:
        if query != "COMMIT":
            return await real(query, *args, **kwargs)
        if send_commit:
            await real(query)
        await conn.close()
        raise psycopg.OperationalError("injected: the session died around COMMIT")

    conn.execute = lossy  # type: ignore[method-assign]


@pytest.mark.parametrize("send_commit", [True, False], ids=["committed", "aborted"])
def test_a_lost_commit_reply_is_resolved_by_transaction_status(
    pg_dsn: str, pg_schema: str, send_commit: bool
) -> None:
    async def main() -> None:
        store = await opened(pg_dsn, pg_schema)
        try:
            await store.append(submitted("a1", 1))
            _lose_the_commit_reply(store, send_commit=send_commit)
            if send_commit:
                await store.append(submitted("a2", 2))  # it did commit: acknowledged
            else:
                with pytest.raises(StoreUnavailable) as failed:
                    await store.append(submitted("a2", 2))
                assert failed.value.details["in_doubt"] is False
            expected = {"a1", "a2"} if send_commit else {"a1"}
            assert await store.existing_activity_ids(["a1", "a2"]) == expected
            if expected == {"a1"}:  # the aborted commit fenced the store
                await store.clear_write_fence()
            await store.append(submitted("a3", 3))  # on a fresh session
        finally:
            await store.close()

    asyncio.run(main())


def test_an_owner_keeps_ownership_through_a_reconnect(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        a = await opened(pg_dsn, pg_schema)
        b = await opened(pg_dsn, pg_schema)
        try:
            await a.acquire_ownership(OWNER_A)
            await terminate_writer(pg_dsn, pg_schema, owner=True)
            await a.append(submitted("a1", 1))  # reconnects and takes the lock again
            with pytest.raises(OwnershipConflict, match="node-a"):
                await b.acquire_ownership(OWNER_B)
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_an_owner_whose_lock_was_taken_over_cannot_write(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        a = await opened(pg_dsn, pg_schema)
        await a.acquire_ownership(OWNER_A)
        await a.append(submitted("a1", 1))
        await terminate_writer(pg_dsn, pg_schema)
        b = await owned_by_b_eventually(pg_dsn, pg_schema)
        try:
            with pytest.raises(StoreUnavailable, match="node-b"):
                await a.append(submitted("a2", 2))
            with pytest.raises(StoreUnavailable, match="ownership"):
                await a.append(submitted("a3", 3))  # fenced for good, not just once
            await b.append(submitted("b2", 2))
            assert await a.existing_activity_ids(["a2", "a3", "b2"]) == {"b2"}  # reads work
            with pytest.raises(OwnershipConflict):
                await a.acquire_ownership(OWNER_A)
            with pytest.raises(StoreUnavailable, match="ownership"):
                await a.append(submitted("a4", 4))  # a failed re-acquire keeps the fence
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_close_flushes_appends_under_way_then_refuses_more(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg, "APPEND_QUEUE_MAX", 1)  # most of them wait for room

    async def main() -> None:
        store = await opened(pg_dsn, pg_schema)
        pending = [asyncio.create_task(store.append(submitted(f"p{i}", i + 1))) for i in range(5)]
        await asyncio.sleep(0)
        await store.close()
        await asyncio.gather(*pending)
        with pytest.raises(StoreUnavailable, match="closed"):
            await store.append(submitted("late", 9))
        reopened = await opened(pg_dsn, pg_schema)
        ids = [f"p{i}" for i in range(5)]
        assert await reopened.existing_activity_ids(ids) == set(ids)
        await reopened.close()

    asyncio.run(main())


# -- reads ----------------------------------------------------------------------


def test_load_fetches_in_chunks_and_skips_malformed_rows(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_load, "LOAD_FETCH_ROWS", 7)

    async def main() -> None:
        store = await opened(pg_dsn, pg_schema)
        try:
            for i in range(30):
                await store.append(submitted(f"m{i:02}", i + 1))
            await fetch(
                pg_dsn,
                sql.SQL(
                    "UPDATE {}.activities SET spec = '\\x00c1'::bytea WHERE activity_id = 'm13'"
                ).format(sql.Identifier(pg_schema)),
            )
            state = await store.load()
            ids = [a.activity_id for a in state.activities]
            assert ids == [f"m{i:02}" for i in range(30) if i != 13]
            assert [(d.kind, d.table, d.key, d.activity_id) for d in state.diagnostics] == [
                ("malformed_row", "activities", "m13", "m13")
            ]
            assert [(d.kind, d.key) for d in await store.check()] == [("malformed_row", "m13")]
        finally:
            await store.close()

    asyncio.run(main())


def test_existing_ids_are_looked_up_in_chunks(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg, "IDS_PER_QUERY_MAX", 3)

    async def main() -> None:
        store = await opened(pg_dsn, pg_schema)
        try:
            for i in range(10):
                await store.append(submitted(f"e{i}", i + 1))
            asked = [f"e{i}" for i in range(0, 20, 2)] + ["e0"]
            assert await store.existing_activity_ids(asked) == {"e0", "e2", "e4", "e6", "e8"}
            assert await store.existing_activity_ids([]) == set()
        finally:
            await store.close()

    asyncio.run(main())


def test_every_named_query_runs_on_postgres(pg_dsn: str, pg_schema: str) -> None:
    """Each record kind, each read and each check query, on the real server."""
    leased = Transition(
        at=T0 + 1,
        activity_id="a1",
        from_state=ActivityState.QUEUED,
        to_state=ActivityState.LEASED,
        reason="granted",
        attempt=0,
        failures=0,
        infra_requeues=0,
        token=1,
        worker_id="w1",
        lease_expires_at=T0 + 31,
    )
    records: list[Record] = [
        WorkerUpserted(
            at=T0,
            info=WorkerInfo(worker_id="w1"),
            seq=1,
            status=WorkerStatus.ACTIVE,
            registered_at=T0,
        ),
        *submitted("a1", 1),
        leased,
        LeaseRenewed(at=T0 + 2, activity_id="a1", token=1, expires_at=T0 + 62),
        LeaseRenewed(at=T0 + 3, activity_id="a1", token=0, expires_at=T0 + 999),  # stale
    ]

    async def main() -> None:
        store = await opened(pg_dsn, pg_schema)
        try:
            await store.append(records)
            state = await store.load(finished_max=10)
            (a1,) = state.activities
            assert (a1.state, a1.token, a1.worker_id) == (ActivityState.LEASED, 1, "w1")
            assert (a1.lease_expires_at, a1.queued_at, a1.submitted_at) == (T0 + 62, T0, T0)
            assert [w.info.worker_id for w in state.workers] == ["w1"]
            assert (state.seq, state.token, state.worker_seq) == (1, 1, 1)
            assert [t.to_state for t in await store.history("a1")] == [
                ActivityState.QUEUED,
                ActivityState.LEASED,
            ]
            assert await store.check() == []

            def q(text: str) -> sql.Composed:
                return sql.SQL(text).format(s=sql.Identifier(pg_schema))

            await fetch(pg_dsn, q("DELETE FROM {s}.workers"))
            await fetch(pg_dsn, q("UPDATE {s}.counters SET value = 0 WHERE name = 'token'"))
            await fetch(
                pg_dsn,
                q(
                    "INSERT INTO {s}.transitions (activity_id, at, from_state, to_state, reason,"
                    " attempt, failures, infra_requeues, steals, token, lease_expires_at)"
                    " VALUES ('ghost', 0, 'ready', 'queued', 'x', 0, 0, 0, 0, 0, 0)"
                ),
            )
            found = {(d.kind, d.activity_id or d.key) for d in await store.check()}
            assert found == {
                ("unknown_worker", "a1"),
                ("counter_behind", "token"),
                ("unknown_activity", "ghost"),
            }
            await fetch(pg_dsn, q("UPDATE {s}.activities SET state = 'executing'"))
            assert ("state_mismatch", "a1") in {(d.kind, d.key) for d in await store.check()}
        finally:
            await store.close()

    asyncio.run(main())
