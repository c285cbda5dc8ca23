"""The PostgreSQL write fence (issue 13, item 4): after any loss of its writer
session, an owner writes again only if it proves, inside the write's own
transaction, that nobody took ownership or wrote in between; otherwise nothing
of the write commits, and the owner must take ownership again and reload.

The session is really killed (``pg_terminate_backend``) and a second store or a
second :class:`~wf.node.SchedulerNode` really writes in the gap. What was stored
is read back from the database, never from the stores' memory.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

import pytest
from psycopg import sql
from test_postgres_specific import (
    OWNER_A,
    OWNER_B,
    fetch,
    opened,
    owned_by_b_eventually,
    submitted,
    terminate_writer,
    until,
)

from wf.errors import OwnershipConflict, OwnershipLost, StoreUnavailable
from wf.node import RECOVERY_BACKOFF_INITIAL_S, SchedulerNode
from wf.scheduler import commands as cmd
from wf.scheduler.model import Activity
from wf.store.postgres import PostgresStore
from wf.store.protocol import ArtifactRow, DeploymentRow
from wf.testing.clock import VirtualClock

T0 = 1_767_225_600.0


def artifact(version: int) -> ArtifactRow:
    plan = b'{"nodes": [%d]}' % version
    return ArtifactRow(
        artifact_id="hello",
        version=version,
        plan=plan,
        content_hash="sha256:" + hashlib.sha256(plan).hexdigest(),
        created_at=T0,
    )


def deployment() -> DeploymentRow:
    return DeploymentRow(deployment_id="hello.default", body=b"{}", revision=1, updated_at=T0)


async def stored_ids(dsn: str, schema: str) -> set[str]:
    rows = await fetch(
        dsn, sql.SQL("SELECT activity_id FROM {}.activities").format(sql.Identifier(schema))
    )
    return {str(r[0]) for r in rows}


async def stored_catalog(dsn: str, schema: str) -> tuple[list[Any], list[Any]]:
    s = sql.Identifier(schema)
    artifacts = await fetch(
        dsn, sql.SQL("SELECT artifact_id, version FROM {}.artifacts ORDER BY 1, 2").format(s)
    )
    deployments = await fetch(dsn, sql.SQL("SELECT deployment_id FROM {}.deployments").format(s))
    return artifacts, deployments


async def fence_row(dsn: str, schema: str) -> tuple[int, int]:
    [(epoch, seq)] = await fetch(
        dsn,
        sql.SQL("SELECT epoch, commit_seq FROM {}.fence WHERE id = 1").format(
            sql.Identifier(schema)
        ),
    )
    return int(epoch), int(seq)


def test_an_owner_whose_session_died_never_writes_over_another_owners_writes(
    pg_dsn: str, pg_schema: str
) -> None:
    async def main() -> None:
        a = await opened(pg_dsn, pg_schema)
        lost: list[OwnershipLost] = []
        a.on_ownership_lost = lost.append
        b: PostgresStore | None = None
        try:
            await a.acquire_ownership(OWNER_A)
            await a.append(submitted("a1", 1))
            await a.put_artifact(artifact(1))
            epoch_a, _ = await fence_row(pg_dsn, pg_schema)

            await terminate_writer(pg_dsn, pg_schema, owner=True)
            b = await owned_by_b_eventually(pg_dsn, pg_schema)
            await b.append(submitted("b1", 2))
            await b.release_ownership()  # the lock is free again when a comes back
            before = await fence_row(pg_dsn, pg_schema)
            assert before[0] == epoch_a + 1

            # a reconnects and takes the free lock again, but cannot prove the gap empty:
            # its catalog write and its append are refused inside their transactions.
            with pytest.raises(OwnershipLost, match="another writer"):
                await a.put_artifact(artifact(2))
            with pytest.raises(OwnershipLost):
                await a.put_deployment(deployment(), expected_revision=0)
            with pytest.raises(OwnershipLost):
                await a.append(submitted("a2", 2))
            assert await stored_ids(pg_dsn, pg_schema) == {"a1", "b1"}
            assert await stored_catalog(pg_dsn, pg_schema) == ([("hello", 1)], [])
            assert await fence_row(pg_dsn, pg_schema) == before  # not one write advanced it
            assert len(lost) == 1  # the owner hears of it once

            # Taking ownership again starts a new epoch; after reloading, a writes again.
            await a.clear_write_fence()
            await a.acquire_ownership(OWNER_A)
            state = await a.load()
            assert [x.activity_id for x in state.activities] == ["a1", "b1"]
            await a.append(submitted("a2", 3))
            await a.put_deployment(deployment(), expected_revision=0)
            assert await stored_ids(pg_dsn, pg_schema) == {"a1", "b1", "a2"}
            assert (await fence_row(pg_dsn, pg_schema))[0] == epoch_a + 2
        finally:
            await a.close()
            if b is not None:
                await b.close()

    asyncio.run(main())


def test_a_silent_reconnect_writes_on_when_nobody_wrote_in_between(
    pg_dsn: str, pg_schema: str
) -> None:
    async def main() -> None:
        a = await opened(pg_dsn, pg_schema)
        lost: list[OwnershipLost] = []
        a.on_ownership_lost = lost.append
        try:
            await a.acquire_ownership(OWNER_A)
            await a.append(submitted("a1", 1))
            epoch, seq = await fence_row(pg_dsn, pg_schema)
            await terminate_writer(pg_dsn, pg_schema, owner=True)
            await a.put_artifact(artifact(1))  # reconnected, lock retaken, fence intact
            await terminate_writer(pg_dsn, pg_schema, owner=True)
            await a.append(submitted("a2", 2))
            assert await fence_row(pg_dsn, pg_schema) == (epoch, seq + 2)
            assert await stored_ids(pg_dsn, pg_schema) == {"a1", "a2"}
            assert lost == []
        finally:
            await a.close()

    asyncio.run(main())


def test_a_write_by_a_store_without_ownership_fences_the_owner(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        owner = await opened(pg_dsn, pg_schema)
        tool = await opened(pg_dsn, pg_schema)
        try:
            await owner.acquire_ownership(OWNER_A)
            await owner.append(submitted("o1", 1))
            # The owner's core never saw this (and it collides with nothing the owner
            # writes next: only the fence can refuse the owner).
            await tool.append(submitted("t1", 100))
            with pytest.raises(OwnershipLost):
                await owner.append(submitted("o2", 2))
            assert await stored_ids(pg_dsn, pg_schema) == {"o1", "t1"}
        finally:
            await owner.close()
            await tool.close()

    asyncio.run(main())


def test_a_writer_session_reconnected_after_a_takeover_confirms_nothing(
    pg_dsn: str, pg_schema: str
) -> None:
    """The server's gate opens on :attr:`PostgresStore.confirmed_at`. A cut-off owner
    that reaches PostgreSQL again after another node took over gets a new session, but
    no lock and no fence: that must not count as a confirmation, or the deposed node
    answers from its stale core until its next write fails."""

    async def main() -> None:
        a = await opened(pg_dsn, pg_schema)
        b: PostgresStore | None = None
        try:
            await a.acquire_ownership(OWNER_A)
            await a.append(submitted("a1", 1))
            await terminate_writer(pg_dsn, pg_schema, owner=True)
            b = await owned_by_b_eventually(pg_dsn, pg_schema)
            await b.append(submitted("b1", 2))
            silent_since = a.confirmed_at
            with pytest.raises((OwnershipConflict, OwnershipLost)):
                await a.prove_writable()  # a new session; b holds the lock
            assert a._wconn is not None  # it did reconnect
            assert a.confirmed_at == silent_since
        finally:
            await a.close()
            if b is not None:
                await b.close()

    asyncio.run(main())


def test_the_owners_ping_gives_up_ownership_once_the_fence_moved(
    pg_dsn: str, pg_schema: str
) -> None:
    """The idle owner's ping confirms its session only while the fence stands where its
    last commit left it; a write it never saw moves the fence, and the ping then loses
    ownership instead of confirming a stale core."""

    async def main() -> None:
        owner = await opened(pg_dsn, pg_schema)
        tool = await opened(pg_dsn, pg_schema)
        lost: list[OwnershipLost] = []
        owner.on_ownership_lost = lost.append
        try:
            await owner.acquire_ownership(OWNER_A)
            await owner.append(submitted("o1", 1))
            await owner.arm_liveness(1.0)  # a ping every sixth of a second when idle
            confirmed = owner.confirmed_at

            async def pinged() -> bool:
                return owner.confirmed_at > confirmed

            await until(pinged)  # the ping confirms while nothing moved
            await tool.append(submitted("t1", 100))
            moved_at = time.monotonic()

            async def gave_up() -> bool:
                return bool(lost)

            await until(gave_up)
            assert "fence moved" in lost[0].message
            assert owner.epoch is None
            assert owner.confirmed_at < moved_at
        finally:
            await owner.disarm_liveness()
            await owner.close()
            await tool.close()

    asyncio.run(main())


def test_a_deposed_node_refuses_to_write_and_reloads_before_writing_again(
    pg_dsn: str, pg_schema: str
) -> None:
    async def main() -> None:
        clock = VirtualClock()
        a = SchedulerNode(PostgresStore(pg_dsn, schema=pg_schema), clock=clock, owner=OWNER_A)
        await a.start(background=True)
        try:
            await a.execute(lambda t: cmd.Submit(now=t, activities=(act("a1"),)))
            await terminate_writer(pg_dsn, pg_schema, owner=True)

            # A second server takes the store over in the gap, writes, and leaves.
            b = SchedulerNode(PostgresStore(pg_dsn, schema=pg_schema), clock=clock, owner=OWNER_B)
            await b.start(background=False)
            await b.execute(lambda t: cmd.Submit(now=t, activities=(act("b1"),)))
            await b.stop()

            # The first node's next write: refused inside its transaction, never stored.
            with pytest.raises(OwnershipLost):
                await a.execute(lambda t: cmd.Submit(now=t, activities=(act("a2"),)))
            assert await stored_ids(pg_dsn, pg_schema) == {"a1", "b1"}
            readiness = a.readiness()
            assert (readiness.ready, readiness.cause) == (False, "ownership_lost")
            with pytest.raises(StoreUnavailable):
                await a.durable()  # its core still holds a2 and lacks b1: not shown

            # It recovers by itself: a new epoch, a reload that brings b1, then writes.
            clock.advance(RECOVERY_BACKOFF_INITIAL_S)
            await until(_async(lambda: not a.writes_stopped))
            assert set(a.core.activities) == {"a1", "b1"}
            await a.execute(lambda t: cmd.Submit(now=t, activities=(act("a3"),)))
            assert await stored_ids(pg_dsn, pg_schema) == {"a1", "b1", "a3"}
        finally:
            await a.stop()

    asyncio.run(main())


def act(activity_id: str) -> Activity:
    return Activity(activity_id=activity_id, activity_type="t")


def _async(predicate: Any) -> Any:
    async def probe() -> bool:
        return bool(predicate())

    return probe
