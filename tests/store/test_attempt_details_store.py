"""What attempts leave behind, on both stores (issue 17, store migration 0009).

A renewal's heartbeat details are kept with the activity (the latest win, a
renewal without details keeps them, a stale token writes nothing) and survive
a reopen; the transition that ends a failed attempt keeps its stack trace.
Recovery reads neither: the core keeps no details, so the restored core is
the same as before (``tests/store/test_conformance.py`` checks that in full).
"""

from __future__ import annotations

import asyncio

from _store_backends import Backend

from wf.scheduler import commands as cmd
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, RetryPolicy, WorkerInfo
from wf.scheduler.outputs import LeaseGranted, Outcome
from wf.store.protocol import Store

T0 = 1_767_225_600.0


class _Driver:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.core = SchedulerCore()
        self.now = T0

    async def do(self, command: cmd.Command) -> Outcome:
        out = self.core.handle(command)
        await self.store.append(out.records)
        return out

    async def lease_and_start(self) -> int:
        out = await self.do(cmd.Poll(now=self.now, worker_id="w1", max_items=1))
        await self.do(cmd.CancelPoll(now=self.now, worker_id="w1"))
        (grant,) = [d for d in out.decisions if isinstance(d, LeaseGranted)]
        token = grant.lease.token
        await self.do(cmd.StartActivity(now=self.now, activity_id="a1", token=token))
        return token


def test_details_and_traces_are_kept_and_survive_a_reopen(store_factory: Backend) -> None:
    async def main() -> None:
        store = store_factory.make()
        await store.open()
        try:
            d = _Driver(store)
            info = WorkerInfo(worker_id="w1", max_concurrency=1, heartbeat_interval_s=3600)
            await d.do(cmd.RegisterWorker(now=T0, info=info))
            retry = RetryPolicy(max_attempts=2, initial_backoff_s=0.0)
            submitted = Activity(activity_id="a1", activity_type="t", retry=retry)
            await d.do(cmd.Submit(now=T0, activities=(submitted,)))
            assert await store.heartbeat_details("a1") is None
            token = await d.lease_and_start()
            renew = cmd.RenewLease
            await d.do(renew(now=T0, activity_id="a1", token=token, details=b'{"done":1}'))
            await d.do(renew(now=T0, activity_id="a1", token=token, details=b'{"done":2}'))
            await d.do(renew(now=T0, activity_id="a1", token=token))  # keeps them
            assert await store.heartbeat_details("a1") == b'{"done":2}'
            trace = 'Traceback (most recent call last):\n  File "a.py"\nValueError: \u2713'
            await d.do(
                cmd.Fail(
                    now=T0, activity_id="a1", token=token, error_type="ValueError",
                    stack_trace=trace,
                )
            )  # fmt: skip
            # A stale renewal (the old token) writes nothing.
            assert await store.heartbeat_details("a1") == b'{"done":2}'
            await d.lease_and_start()
            assert await store.heartbeat_details("a1") == b'{"done":2}'  # for the retry
            history = await store.history("a1")
            assert [t.stack_trace for t in history if t.stack_trace] == [trace]
            assert await store.heartbeat_details("never-submitted") is None
        finally:
            await store.close()
        reopened = store_factory.make()
        await reopened.open()
        try:
            assert await reopened.heartbeat_details("a1") == b'{"done":2}'
            history = await reopened.history("a1")
            assert [t.stack_trace for t in history if t.stack_trace] == [trace]
        finally:
            await reopened.close()

    asyncio.run(main())
