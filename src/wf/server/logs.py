"""Structured logs (WF-005 §25): one JSON object per line, or text for humans.

Theory of operation
-------------------
Every line has ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``
and ``action``: a stable, dotted key (``lease.granted``,
``activity.completed``, ``rpc.call``) that dashboards and alerts match on
instead of the wording of the message. Fields passed with ``extra=`` are
added as they are; standard ``LogRecord`` attributes are not.

Lines about an activity carry its ``correlation_id``, the id of the run it
belongs to (``Activity.correlation_id``). It travels with the activity into
each ``LeaseGranted`` decision, to the worker in its poll result, and back
in its completion. :class:`OutcomeLogger` is a node listener, like the
scheduler API: it sees every committed outcome and logs submissions,
grants, starts, renewals, revocations, retries, completions, failures and
cancellations. Most decisions name their correlation id; for the others
(revocations, renewals, cancellations) it asks the node's committed activity
facts (:meth:`~wf.node_reads.NodeReads.correlation_id`), which remember
recently finished activities too, so a line about an activity that finished
in the same command still names it.

:func:`configure_logging` installs one handler on the root logger from
``server.observability`` (``log_format`` ``json`` or ``text``,
``log_level``): :class:`wf.log_lines.LineHandler`, whose direct path the
lifecycle lines take when nothing but that handler would see them (the same
line for a fraction of the cost; see :mod:`wf.log_lines`). The per-request
access log (``wf.http.access``, see :mod:`wf.server.http_server`) is written
at ``debug`` only, and aiohttp's (for an application embedding the server
beside aiohttp) is kept at ``warning`` unless the level is ``debug``:
``rpc.call`` lines already cover each call.
"""

from __future__ import annotations

import logging
import sys
from logging import DEBUG, INFO, WARNING
from typing import IO, Any, Final

from wf.log_lines import JsonFormatter, LineHandler, RedactCredentials, TextFormatter, line_sink
from wf.node import SchedulerNode
from wf.scheduler.model import ActivityState
from wf.scheduler.outputs import (
    ActivityCompleted,
    ActivityFailed,
    ActivitySubmitted,
    BackpressureChanged,
    Decision,
    LeaseGranted,
    LeaseRenewed,
    LeaseRevoked,
    Outcome,
    RetryScheduled,
    Transition,
    WorkerFailed,
    WorkerUpserted,
)
from wf.server.config import ObservabilityConfig
from wf.server.rpc import Caller

__all__ = [
    "LIFECYCLE_LOGGER",
    "RPC_LOGGER",
    "JsonFormatter",
    "OutcomeLogger",
    "RpcCallLogger",
    "TextFormatter",
    "configure_logging",
]

LIFECYCLE_LOGGER: Final = "wf.lifecycle"
"""Logger of activity, lease and worker lifecycle lines."""
RPC_LOGGER: Final = "wf.rpc"
"""Logger of ``rpc.call`` lines (shared with the dispatcher's own errors)."""

LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
"""A configured level name (``log_level``, ``activity_log_level``) -> its ``logging`` level."""
_HANDLER_MARK: Final = "_wf_observability"


def configure_logging(
    config: ObservabilityConfig, stream: IO[str] | None = None
) -> logging.Handler:
    """Install the configured handler on the root logger (replacing an earlier one)."""
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False):
            old.flush()  # its direct lines that wait
            root.removeHandler(old)
    formatter = JsonFormatter() if config.log_format == "json" else TextFormatter()
    handler = LineHandler(stream if stream is not None else sys.stderr, formatter)
    setattr(handler, _HANDLER_MARK, True)
    handler.addFilter(RedactCredentials())  # no credential in any line, whoever logs it
    level = LEVELS[config.log_level]
    _skip_unprinted_record_fields()
    root.addHandler(handler)
    root.setLevel(level)
    access = logging.DEBUG if level <= logging.DEBUG else logging.WARNING
    logging.getLogger("aiohttp.access").setLevel(access)
    return handler


def _skip_unprinted_record_fields() -> None:
    """Stop ``logging`` from collecting what neither formatter prints: the caller's
    source location (a stack walk per record), thread, process and task names.

    The logging documentation's "Optimization" switches. Together they were a
    third of a lifecycle line's cost, and the server writes three such lines per
    activity at ``info``. They are process-wide: this runs in the server's and the
    worker's own processes, whose lines all go through this handler.
    """
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    if hasattr(logging, "logAsyncioTasks"):  # Python 3.12+
        setattr(logging, "logAsyncioTasks", False)  # noqa: B010


# ---------------------------------------------------------------- rpc calls


class RpcCallLogger:
    """A dispatcher call observer: ``rpc.call`` lines (debug; info for errors)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.log = logger or logging.getLogger(RPC_LOGGER)

    def __call__(self, method: str, duration_s: float, error: str | None, caller: Caller) -> None:
        level = logging.DEBUG if error is None else logging.INFO
        if not self.log.isEnabledFor(level):
            return
        self.log.log(
            level,
            "%s %s",
            method,
            "ok" if error is None else error,
            extra={
                "action": "rpc.call",
                "method": method,
                "duration_ms": round(duration_s * 1000.0, 3),
                "error": error,
                "caller": caller.identity,
            },
        )


# ---------------------------------------------------------------- lifecycle


class OutcomeLogger:
    """A node listener logging lifecycle events with correlation ids."""

    def __init__(
        self,
        node: SchedulerNode,
        logger: logging.Logger | None = None,
        *,
        activity_level: int = DEBUG,
    ) -> None:
        self.node = node
        self.log = logger or logging.getLogger(LIFECYCLE_LOGGER)
        self.activity_level = activity_level
        """The level of the success-path lines (``ObservabilityConfig.activity_log_level``)."""
        self.correlation_id = node.reads.correlation_id
        """The correlation id of an activity ("" if it has none or is unknown)."""
        self._sink: LineHandler | None = None

    def _line(
        self, severity: int, action: str, message: str, /, *args: object, **fields: Any
    ) -> None:
        # Callers test the level first: most fields cost a lookup to build.
        sink = self._sink
        if sink is not None:  # the same line, without a LogRecord (wf.log_lines)
            sink.write_line(severity, self.log.name, action, message % args, fields)
        else:
            self.log.log(severity, message, *args, extra={"action": action, **fields}, stacklevel=2)

    # fmt: off
    # One call per line kind, its fields packed: the formatter would give each
    # field a line of its own and triple the length of what is a table.

    def __call__(self, outcome: Outcome) -> None:
        log, line = self.log, self._line
        info = log.isEnabledFor(logging.INFO)
        debug = log.isEnabledFor(logging.DEBUG)
        level = self.activity_level
        success = log.isEnabledFor(level)
        self._sink = line_sink(log)
        for r in outcome.records:
            if type(r) is ActivitySubmitted and success:
                a = r.activity
                line(level, "activity.submitted", "activity %s submitted", a.activity_id,
                     activity_id=a.activity_id, activity_type=a.activity_type,
                     workflow_id=a.workflow_id, tenant=a.tenant,
                     correlation_id=a.correlation_id)
        if info or success or log.isEnabledFor(logging.WARNING):
            for d in outcome.decisions:
                self._decision(d, info, success)
        for r in outcome.records:
            if type(r) is Transition:
                self._transition(r, info, debug)
            elif type(r) is LeaseRenewed and debug:
                line(DEBUG, "lease.renewed", "lease %s renewed", r.token,
                     activity_id=r.activity_id, token=r.token, expires_at=r.expires_at,
                     correlation_id=self.correlation_id(r.activity_id))
            elif type(r) is WorkerUpserted and info:
                w = r.info
                line(INFO, "worker.updated", "worker %s %s", w.worker_id, r.status.value,
                     worker_id=w.worker_id, status=r.status.value, hostname=w.hostname,
                     max_concurrency=w.max_concurrency)

    def _decision(self, d: Decision, info: bool, success: bool) -> None:
        line = self._line
        if type(d) is LeaseGranted:
            if success:
                lease = d.lease
                line(self.activity_level, "lease.granted", "lease %s granted to %s", lease.token,
                     lease.worker_id, activity_id=lease.activity_id,
                     activity_type=d.activity_type, workflow_id=d.workflow_id,
                     correlation_id=d.correlation_id, worker_id=lease.worker_id,
                     token=lease.token, attempt=lease.attempt,
                     expires_at=lease.expires_at)
        elif type(d) is ActivityCompleted:
            if success:
                line(self.activity_level, "activity.completed", "activity %s completed",
                     d.activity_id, activity_id=d.activity_id, workflow_id=d.workflow_id,
                     correlation_id=d.correlation_id, attempt=d.attempt)
        elif type(d) is ActivityFailed:
            line(WARNING, "activity.failed", "activity %s failed: %s", d.activity_id, d.reason,
                 activity_id=d.activity_id, workflow_id=d.workflow_id,
                 correlation_id=d.correlation_id, attempt=d.attempt, reason=d.reason,
                 error_type=d.error_type, error_message=d.message,
                 may_have_executed=d.may_have_executed)
        elif type(d) is LeaseRevoked:
            if info:
                line(INFO, "lease.revoked", "lease %s revoked: %s", d.token, d.reason,
                     activity_id=d.activity_id,
                     correlation_id=self.correlation_id(d.activity_id),
                     worker_id=d.worker_id, token=d.token, reason=d.reason)
        elif type(d) is RetryScheduled:
            if info:
                line(INFO, "activity.retry_scheduled", "activity %s retry scheduled",
                     d.activity_id, activity_id=d.activity_id,
                     correlation_id=self.correlation_id(d.activity_id), attempt=d.attempt,
                     not_before=d.not_before)
        elif type(d) is WorkerFailed:
            line(WARNING, "worker.lost", "worker %s lost: %s", d.worker_id, d.reason,
                 worker_id=d.worker_id, reason=d.reason)
        elif type(d) is BackpressureChanged:
            line(WARNING, "backpressure.changed", "backpressure %s -> %s", d.previous, d.level,
                 previous=d.previous, level=d.level, queue_depth=d.queue_depth,
                 utilization=d.utilization)

    def _transition(self, r: Transition, info: bool, debug: bool) -> None:
        to_state = r.to_state
        if to_state is ActivityState.EXECUTING:
            if debug:
                self._line(DEBUG, "lease.started", "lease %s started", r.token,
                           activity_id=r.activity_id,
                           correlation_id=self.correlation_id(r.activity_id),
                           worker_id=r.worker_id, token=r.token,
                           attempt=r.attempt)
        elif to_state is ActivityState.CANCELLED and info:
            self._line(INFO, "activity.cancelled", "activity %s cancelled: %s", r.activity_id,
                       r.reason, activity_id=r.activity_id,
                       correlation_id=self.correlation_id(r.activity_id),
                       reason=r.reason)
    # fmt: on
