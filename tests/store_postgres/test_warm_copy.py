"""A standby's warm copy (issue 15, ``wf.store.postgres_follow``): brought up to date
from the change log, it holds exactly what a full load of the store holds, and it
asks for a full reload once the log it needs was pruned.

The owner is a real :class:`~wf.node.SchedulerNode` running real commands
(submissions, a worker, grants, completions, failures, a cancel); the copy is kept
by a second, non-owning store as a standby keeps it.
"""

from __future__ import annotations

import asyncio

from psycopg import sql
from test_postgres_specific import OWNER_A, OWNER_B, fetch

from wf.errors import OwnershipConflict
from wf.node import SchedulerNode
from wf.scheduler import commands as cmd
from wf.scheduler.model import Activity, WorkerInfo
from wf.scheduler.outputs import LeaseGranted
from wf.store import postgres_follow as follow
from wf.store.postgres import PostgresStore
from wf.testing.clock import VirtualClock


def act(activity_id: str) -> Activity:
    return Activity(activity_id=activity_id, activity_type="t")


async def busy_owner(node: SchedulerNode, prefix: str, count: int) -> None:
    """Submissions, grants, a completion, a failure and a cancel."""
    ids = [f"{prefix}{i}" for i in range(count)]
    await node.execute(lambda t: cmd.Submit(now=t, activities=tuple(act(i) for i in ids)))
    info = WorkerInfo(worker_id=f"w-{prefix}", max_concurrency=4)
    await node.execute(lambda t: cmd.RegisterWorker(now=t, info=info))
    out = await node.execute(lambda t: cmd.Poll(now=t, worker_id=info.worker_id, max_items=3))
    grants = [g.lease for g in out.decisions if isinstance(g, LeaseGranted)]
    assert len(grants) == 3, out.decisions
    first, second = grants[0], grants[1]
    for lease in (first, second):
        await node.execute(
            lambda t, lease=lease: cmd.StartActivity(
                now=t, activity_id=lease.activity_id, token=lease.token
            )
        )
    await node.execute(
        lambda t: cmd.Complete(now=t, activity_id=first.activity_id, token=first.token)
    )
    await node.execute(
        lambda t: cmd.Fail(
            now=t,
            activity_id=second.activity_id,
            token=second.token,
            retryable=False,
        )
    )
    await node.execute(lambda t: cmd.Cancel(now=t, activity_id=ids[-1]))


def test_a_caught_up_copy_holds_what_a_full_load_holds(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        clock = VirtualClock()
        owner = SchedulerNode(PostgresStore(pg_dsn, schema=pg_schema), clock=clock, owner=OWNER_A)
        await owner.start(background=False)
        standby = PostgresStore(pg_dsn, schema=pg_schema)
        await standby.open()
        try:
            await busy_owner(owner, "a", 10)
            copy = await standby.warm_copy()
            seq_before = copy.seq
            await busy_owner(owner, "b", 10)
            assert await standby.catch_up(copy)
            assert copy.seq > seq_before
            full = await standby.warm_copy()
            assert copy.seq == full.seq
            assert follow.differences(copy, full) == []
            # The state a take-over would recover from is the store's own load.
            state, loaded = copy.state(), await standby.load()
            assert state.activities == loaded.activities
            assert state.workers == loaded.workers
            assert (state.seq, state.token, state.worker_seq) == (
                loaded.seq,
                loaded.token,
                loaded.worker_seq,
            )
            assert {aid for aid, _ in state.finished} == {aid for aid, _ in loaded.finished}
            # Caught up, the copy's table is still in seq order: it goes along for the
            # core to adopt, holding exactly the state's activities in their order.
            assert state.by_id is copy.live
            assert list(state.by_id.values()) == state.activities
            # A cold load builds its table as it reads, for the core to adopt too.
            assert loaded.by_id is not None
            assert list(loaded.by_id.values()) == loaded.activities
        finally:
            await standby.close()
            await owner.stop()

    asyncio.run(main())


def test_a_copy_whose_table_left_seq_order_hands_no_table_over() -> None:
    first, second = (
        Activity(activity_id="x", activity_type="t", seq=1),
        Activity(activity_id="y", activity_type="t", seq=2),
    )
    copy = follow.WarmCopy(
        seq=5,
        counters=(2, 0, 0),
        live={"y": second, "x": first},
        finished={},
        finished_max=10,
        workers={},
    )
    state = copy.state()
    assert state.activities == [first, second]
    assert state.by_id is None


def test_a_copy_older_than_the_pruned_log_asks_for_a_full_reload(
    pg_dsn: str, pg_schema: str
) -> None:
    async def main() -> None:
        clock = VirtualClock()
        owner = SchedulerNode(PostgresStore(pg_dsn, schema=pg_schema), clock=clock, owner=OWNER_A)
        await owner.start(background=False)
        standby = PostgresStore(pg_dsn, schema=pg_schema)
        await standby.open()
        try:
            copy = await standby.warm_copy()
            await busy_owner(owner, "a", 5)
            # As the active's pruning does once the log is long (CHANGE_LOG_KEEP).
            await fetch(
                pg_dsn,
                sql.SQL("UPDATE {}.change_log_meta SET pruned_below = {}").format(
                    sql.Identifier(pg_schema), sql.Literal(copy.seq + 1)
                ),
            )
            assert not await standby.catch_up(copy)
        finally:
            await standby.close()
            await owner.stop()

    asyncio.run(main())


def test_every_group_commit_logs_the_ids_it_touched(pg_dsn: str, pg_schema: str) -> None:
    async def main() -> None:
        clock = VirtualClock()
        owner = SchedulerNode(PostgresStore(pg_dsn, schema=pg_schema), clock=clock, owner=OWNER_A)
        await owner.start(background=False)
        try:
            await owner.execute(lambda t: cmd.Submit(now=t, activities=(act("x1"), act("x2"))))
            info = WorkerInfo(worker_id="w1", max_concurrency=1)
            await owner.execute(lambda t: cmd.RegisterWorker(now=t, info=info))
        finally:
            await owner.stop()
        logged = await fetch(
            pg_dsn,
            sql.SQL(
                "SELECT activity_ids, worker_ids FROM {}.change_log ORDER BY commit_seq"
            ).format(sql.Identifier(pg_schema)),
        )
        touched_activities = {aid for aids, _ in logged for aid in aids}
        touched_workers = {wid for _, wids in logged for wid in wids}
        assert {"x1", "x2"} <= touched_activities
        assert "w1" in touched_workers

    asyncio.run(main())


def test_a_standby_ends_an_owner_session_stuck_inside_a_transaction_and_only_then(
    pg_dsn: str, pg_schema: str
) -> None:
    """PostgreSQL's idle timeouts do not run inside a pipeline: a client that stopped
    mid-transaction keeps the ownership lock. The standby ends such a session (and
    never an idle one, which the server's own timeouts govern)."""

    async def main() -> None:
        owner = PostgresStore(pg_dsn, schema=pg_schema)
        await owner.open()
        standby = PostgresStore(pg_dsn, schema=pg_schema)
        await standby.open()
        try:
            await owner.acquire_ownership(OWNER_A)
            # Idle (between commands): left alone however long, whatever the bound.
            assert await standby.end_stuck_owner(0.0) is None
            writer = owner._wconn
            assert writer is not None
            await writer.execute("BEGIN")  # and then the client says nothing more
            ended = None
            for _ in range(200):  # until its silence is past the 10 ms bound
                ended = await standby.end_stuck_owner(0.01)
                if ended is not None:
                    break
            assert ended is not None
            assert ended[1].startswith("idle in transaction")
            # The lock goes with the session (once its backend has exited): the
            # standby may take ownership.
            for attempt in range(100):
                try:
                    await standby.acquire_ownership(OWNER_B)
                    break
                except OwnershipConflict:
                    if attempt == 99:
                        raise
            assert standby.epoch is not None
        finally:
            await standby.close()
            await owner.close()

    asyncio.run(main())
