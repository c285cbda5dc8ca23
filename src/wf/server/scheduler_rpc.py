"""``scheduler.*`` JSON-RPC methods: the wire face of :class:`wf.server.scheduler_api.SchedulerAPI`.

The methods' parameters, results and declarations are the wire contract's
(:mod:`wf.wire.scheduler_methods`); this module attaches a handler to each.
"""

from __future__ import annotations

from typing import Any

from wf.server.rpc import Caller, Registry
from wf.server.scheduler_api import SchedulerAPI
from wf.wire import scheduler_methods as declared
from wf.wire.methods import NoParams
from wf.wire.scheduler import as_core
from wf.wire.scheduler_methods import (
    ActivityIdParams,
    ActivityView,
    CancelParams,
    CompleteParams,
    DispatchStats,
    FailParams,
    FencedParams,
    HeartbeatParams,
    HistoryParams,
    ListWorkersParams,
    PollParams,
    PollResult,
    QueueStats,
    RegisterResult,
    RegisterWorkerParams,
    RenewParams,
    ReportResult,
    SubmitParams,
    TransitionPage,
    WorkerIdParams,
    WorkerPage,
)


def register_scheduler_methods(api: SchedulerAPI, registry: Registry) -> None:
    """Attach a handler to every ``scheduler.*`` method of the wire contract."""

    async def register(p: RegisterWorkerParams, c: Caller) -> RegisterResult:
        return await api.register_worker(p.info, c, p.held)

    async def heartbeat(p: HeartbeatParams, c: Caller) -> dict[str, Any]:
        return {"revoked": await api.heartbeat(p.worker_id, p.stats, c)}

    async def poll(p: PollParams, c: Caller) -> PollResult:
        return await api.poll(p.worker_id, p.max_items, p.wait_s, c, start=p.start)

    async def shutdown(p: WorkerIdParams, c: Caller) -> dict[str, int]:
        return {"returned": await api.shutdown_worker(p.worker_id, c)}

    async def start(p: FencedParams, c: Caller) -> dict[str, bool]:
        await api.start_activity(p.activity_id, p.token, c)
        return {"ok": True}

    async def renew(p: RenewParams, c: Caller) -> dict[str, float]:
        return {"expires_at": await api.renew_lease(p.activity_id, p.token, c, p.details)}

    async def details(p: FencedParams, c: Caller) -> dict[str, bytes | None]:
        return {"details": await api.lease_details(p.activity_id, p.token, c)}

    async def complete(p: CompleteParams, c: Caller) -> ReportResult:
        return await api.complete_activity(
            p.activity_id,
            p.token,
            p.result,
            c,
            unreported_start=p.unreported_start,
            poll=p.poll,
        )

    async def fail(p: FailParams, c: Caller) -> ReportResult:
        return await api.fail_activity(
            p.activity_id,
            p.token,
            p.error_type,
            p.message,
            p.retryable,
            c,
            unreported_start=p.unreported_start,
            stack_trace=p.stack_trace,
            poll=p.poll,
        )

    async def submit(p: SubmitParams, c: Caller) -> dict[str, list[str]]:
        return {"activity_ids": await api.submit_checked(as_core(p.activities), c)}

    async def cancel(p: CancelParams, c: Caller) -> dict[str, bool]:
        await api.cancel_activity(p.activity_id, p.reason, c)
        return {"ok": True}

    async def get(p: ActivityIdParams, c: Caller) -> ActivityView:
        return await api.get_activity(p.activity_id, c)

    async def history(p: HistoryParams, c: Caller) -> TransitionPage:
        return await api.activity_history(p.activity_id, c, p.limit, p.cursor)

    async def workers(p: ListWorkersParams, c: Caller) -> WorkerPage:
        return await api.list_workers(c, p.limit, p.cursor)

    async def stats(p: NoParams, c: Caller) -> QueueStats:
        return await api.queue_stats(c)

    handle = registry.handle
    handle(declared.REGISTER_WORKER, register)
    handle(declared.HEARTBEAT, heartbeat)
    handle(declared.POLL, poll)
    handle(declared.SHUTDOWN_WORKER, shutdown)
    handle(declared.START_ACTIVITY, start)
    handle(declared.RENEW_LEASE, renew)
    handle(declared.LEASE_DETAILS, details)
    handle(declared.COMPLETE_ACTIVITY, complete)
    handle(declared.FAIL_ACTIVITY, fail)
    handle(declared.SUBMIT_ACTIVITIES, submit)
    handle(declared.CANCEL_ACTIVITY, cancel)
    handle(declared.GET_ACTIVITY, get)
    handle(declared.ACTIVITY_HISTORY, history)
    handle(declared.LIST_WORKERS, workers)
    handle(declared.QUEUE_STATS, stats)

    async def dispatch(p: NoParams, c: Caller) -> DispatchStats:
        return await api.dispatch_stats(c)

    handle(declared.DISPATCH_STATS, dispatch)
