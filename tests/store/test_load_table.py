"""A load may hand recovery the activity table it built while reading (``StoredState.by_id``).

Both loads fill ``by_id`` as they go (PostgreSQL chunk by chunk while the server
encodes the next chunk, SQLite in its row loop, where each activity is at hand),
and recovery adopts it as the core's activity table instead of building one in
a pass of its own. The table must be exactly the loaded activities (the same
objects, in the same ``seq`` order), rows that fail closed must be out of it as
they are out of ``activities``, and the core built around it must be the core
built without it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from _store_backends import Backend

from wf.scheduler import commands as cmd
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, WorkerInfo
from wf.scheduler.recovery import durable_digest, restore
from wf.store.loader import build_snapshot

T0 = 1_767_225_600.0


def test_the_load_table_is_the_loaded_activities_by_id_and_recovery_adopts_it(
    store_factory: Backend,
) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        core = SchedulerCore()

        async def do(command: Any) -> None:
            await store.append(core.handle(command).records)

        try:
            await do(cmd.RegisterWorker(now=T0, info=WorkerInfo(worker_id="w", max_concurrency=3)))
            acts = tuple(Activity(activity_id=f"t{i}", activity_type="t") for i in range(12))
            await do(cmd.Submit(now=T0, activities=acts))
            await do(cmd.Poll(now=T0, worker_id="w", max_items=3))  # t0..t2 leased
            # Fail closed: an undecodable spec and a mistyped lifecycle column (leased row).
            store_factory.sql("UPDATE activities SET spec = ? WHERE activity_id = 't5'", b"\xc1")
            if store_factory.name == "sqlite":  # PostgreSQL's columns are typed
                store_factory.sql("UPDATE activities SET attempt = 'x' WHERE activity_id = 't1'")
            stored = await store.load()
        finally:
            await store.close()
        blocked = {"t5", "t1"} if store_factory.name == "sqlite" else {"t5"}
        assert {d.activity_id for d in stored.diagnostics} == blocked
        table = stored.by_id
        assert table is not None
        assert list(table) == [a.activity_id for a in stored.activities]
        assert all(table[a.activity_id] is a for a in stored.activities)
        assert blocked.isdisjoint(table)

        for aid in blocked:
            del core.activities[aid]  # what the store blocked; the rest must match exactly
        # t1 is gone with its lease: its worker's lease table must not name it.
        core.registry.workers["w"].leases.pop("t1", None)
        snap, _ = build_snapshot(stored, core.config, T0)
        adopted = restore(snap, adopt=True, by_id=table)
        assert adopted.activities is table
        assert durable_digest(adopted) == durable_digest(restore(snap))

    asyncio.run(main())
