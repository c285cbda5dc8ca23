"""The wf worker SDK: declare activities, run a worker against a wf server.

::

    from wf.worker import Worker, activity, heartbeat

    @activity(name="resize", idempotent=True)
    def resize(path: str, width: int) -> str:
        for step in range(10):
            heartbeat({"step": step})      # never blocks; keeps the latest details
            ...
        return out_path

    worker = Worker(["http://127.0.0.1:8765"], [resize], max_concurrency=8)
    asyncio.run(worker.run())              # until worker.shutdown() or SIGTERM (CLI)

or from the command line: ``wf worker --app mymodule:worker --server URL``.

Payloads are JSON (see :mod:`wf.worker.activity`): an array is passed as
positional arguments, an object as keyword arguments; results are the JSON
of the return value. An exception fails the attempt with its class name as
``error_type``; :class:`NonRetryableError` (or a subclass) makes the failure
final. The protocol side (register, heartbeat, long poll, start, renew,
complete, fail, shutdown, reconnection) is in :mod:`wf.worker.runtime`.
"""

from wf.worker.activity import (
    ActivityCancelled,
    ActivityContext,
    ActivityDefinition,
    ActivityInfo,
    InvalidPayload,
    NonRetryableError,
    activity,
    activity_info,
    current_context,
    decode_payload,
    decode_result,
    encode_payload,
    encode_result,
    heartbeat,
    is_cancelled,
    last_heartbeat_details,
)
from wf.worker.leases import LeaseStatus, WorkerCounters
from wf.worker.runtime import Worker, default_worker_id

__all__ = [
    "ActivityCancelled",
    "ActivityContext",
    "ActivityDefinition",
    "ActivityInfo",
    "InvalidPayload",
    "LeaseStatus",
    "NonRetryableError",
    "Worker",
    "WorkerCounters",
    "activity",
    "activity_info",
    "current_context",
    "decode_payload",
    "decode_result",
    "default_worker_id",
    "encode_payload",
    "encode_result",
    "heartbeat",
    "is_cancelled",
    "last_heartbeat_details",
]
