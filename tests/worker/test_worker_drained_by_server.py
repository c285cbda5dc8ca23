"""A worker drained by the server stays drained; a worker stopped before it ran.

An operator (or the console's "drain") calls ``scheduler.workers.shutdown`` for
a worker: the worker must stop polling, finish what it runs, hand back what it
had not started, and leave, instead of registering again at its next call.
The end-to-end twin with a real ``wf worker`` process is in
``tests/e2e/test_e2e_worker_drain.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_worker_sdk import cluster, eventually, history, make_worker, run, state, submit

from wf.server.local import build_local_static_workflow_server
from wf.worker import LeaseStatus, Worker, activity


def test_a_worker_drained_by_the_server_finishes_its_work_and_stops(tmp_path: Path) -> None:
    gate = asyncio.Event()

    @activity(name="gated", idempotent=True)
    async def gated(n: int) -> int:
        await gate.wait()
        return n

    async def main() -> None:
        async with cluster(tmp_path) as (server, admin, recorder):
            first = make_worker(server, [gated], worker_id="first", max_concurrency=1, prefetch=2)
            task = asyncio.create_task(first.run())
            await submit(admin, *(gated.activity(f"g-{i}", args=(i,)) for i in range(3)))
            await eventually(lambda: len(first.held()) == 3, "three leases held")
            (running_id,) = [a for a, s in first.held().items() if s is LeaseStatus.EXECUTING]
            unstarted = sorted(a for a in first.held() if a != running_id)

            answer = await admin.call("scheduler.workers.shutdown", {"worker_id": "first"})
            assert answer == {"returned": 2}

            async def returned() -> bool:
                return all([await state(admin, a) == "queued" for a in unstarted])

            await eventually(returned, "unstarted leases back in the queue")
            await eventually(lambda: first.drained_by_server, "the worker sees the drain")
            assert not task.done()  # the executing activity is still running
            gate.set()
            await asyncio.wait_for(task, 10.0)  # run() returns by itself, no error
            assert first.counters.registrations == 1  # never registered again
            assert first.counters.completed == 1
            assert set(recorder.completed()) == {running_id}
            workers = {
                w["info"]["worker_id"]: w["status"]
                for w in (await admin.call("scheduler.workers.list", {}))["workers"]
            }
            assert workers["first"] == "gone"
            # The returned ones run elsewhere, once each.
            second = make_worker(server, [gated], worker_id="second")
            second_task = asyncio.create_task(second.run())
            await eventually(lambda: len(recorder.completed()) == 3, "the rest completes")
            await second.shutdown()
            await second_task
            for aid in unstarted:
                starts = [r for r in await history(admin, aid) if r["to_state"] == "executing"]
                assert [s["worker_id"] for s in starts] == ["second"]

    run(main)


def test_an_idle_worker_drained_by_the_server_stops_at_once(tmp_path: Path) -> None:
    @activity(name="noop")
    def noop() -> None:
        return None

    async def main() -> None:
        async with cluster(tmp_path) as (server, admin, _recorder):
            worker = make_worker(server, [noop], worker_id="idle")
            task = asyncio.create_task(worker.run())
            await eventually(lambda: worker._polled, "a poll accepted")
            await admin.call("scheduler.workers.shutdown", {"worker_id": "idle"})
            await asyncio.wait_for(task, 10.0)
            assert worker.drained_by_server
            assert worker.counters.registrations == 1
            workers = {
                w["info"]["worker_id"]: w["status"]
                for w in (await admin.call("scheduler.workers.list", {}))["workers"]
            }
            assert workers["idle"] == "gone"

    run(main)


def test_a_new_process_under_a_drained_worker_id_registers_and_works(tmp_path: Path) -> None:
    @activity(name="noop")
    def noop() -> None:
        return None

    async def main() -> None:
        async with cluster(tmp_path) as (server, admin, recorder):
            old = make_worker(server, [noop], worker_id="same")
            task = asyncio.create_task(old.run())
            await eventually(lambda: old._polled, "a poll accepted")
            await admin.call("scheduler.workers.shutdown", {"worker_id": "same"})
            await asyncio.wait_for(task, 10.0)
            # A restarted process with the same id is a new worker, not a drained one.
            new = make_worker(server, [noop], worker_id="same")
            new_task = asyncio.create_task(new.run())
            await submit(admin, noop.activity("after"))
            await eventually(lambda: "after" in recorder.completed(), "work after a restart")
            assert not new.drained_by_server
            await new.shutdown()
            await new_task

    run(main)


def test_run_after_shutdown_returns_at_once() -> None:
    @activity(name="noop")
    def noop() -> None:
        return None

    async def main() -> None:
        worker = Worker("http://127.0.0.1:9", [noop])
        await worker.shutdown()
        await asyncio.wait_for(worker.run(), 1.0)  # no "a Worker runs once"
        assert worker.counters.registrations == 0

    run(main)


def test_a_local_server_stopped_right_after_starting_stops_cleanly(tmp_path: Path) -> None:
    @activity(name="noop")
    def noop() -> None:
        return None

    async def main() -> None:
        local = build_local_static_workflow_server(
            tmp_path / "store", activities=[noop], workers=2, durability="process"
        )
        await local.start()
        # The worker tasks have not run a step yet: their run() comes after shutdown().
        await local.stop()
        assert all(not w.connected.is_set() for w in local.workers)

    run(main)
