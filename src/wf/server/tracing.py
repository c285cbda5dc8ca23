"""OpenTelemetry traces (WF-005 §25), optional and off by default.

Theory of operation
-------------------
Tracing is on only when ``server.observability.tracing`` is true *and* the
``opentelemetry`` package imports (the ``otel`` extra); otherwise
:func:`make_tracing` returns :class:`Tracing`, whose methods do nothing, and
the server wires no listener at all, so the hot path pays nothing. The
module imports OpenTelemetry lazily (``importlib``) and treats its objects as
``Any``, so type checking does not depend on the extra being installed.
The server uses only the OpenTelemetry *API*; exporting (an SDK with an
OTLP exporter) is the deployment's choice, configured in the usual way
before the server starts (see ``docs/observability.md``).

:class:`OtelTracing` is a node listener. One trace per activity:

* ``wf.submit`` when the activity is accepted; its parent is the caller's
  span when the submitting request carried a W3C ``traceparent`` header;
* ``wf.dispatch`` when a lease is granted, and ``wf.lease``, which stays
  open for the life of the lease;
* ``wf.lease.start`` and ``wf.lease.renew`` (children of ``wf.lease``);
* ``wf.complete`` when the lease ends by completion or failure, after which
  ``wf.lease`` ends with the outcome (a lost or revoked lease ends it with
  an error status).

Every span carries ``wf.correlation_id`` and ``wf.activity_id``. The spans
opened for a decision take the correlation id from it; the lease's children
(start, renew, complete) from the node's committed activity facts
(:meth:`~wf.node_reads.NodeReads.correlation_id`, which :func:`install`
wires in), so tracing keeps no index of activities beside its open spans.

Propagation to workers: the poll result carries, next to its leases,
``traceparents``: lease id -> W3C ``traceparent`` of that lease's
``wf.lease`` span. A worker that traces makes its execution span a child of
it; the worker SDK needs nothing from OpenTelemetry to pass it on. The
field is omitted from the wire when tracing is off. (The ``LeaseGranted``
decision is a core type and stays free of tracing.)

Open spans and submit contexts are bounded (:data:`SPANS_OPEN_MAX`): the
oldest is ended, marked ``wf.evicted``, when the bound is reached.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any, Final

from wf.node import SchedulerNode
from wf.scheduler.model import TERMINAL_STATES, ActivityState
from wf.scheduler.outputs import (
    ActivitySubmitted,
    LeaseGranted,
    LeaseRenewed,
    Outcome,
    Transition,
)
from wf.server.config import ObservabilityConfig
from wf.server.scheduler_api import SchedulerAPI

log = logging.getLogger("wf.tracing")

TRACEPARENT_HEADER: Final = "traceparent"
"""The W3C Trace Context header (and the poll-result field holds its values)."""
SPANS_OPEN_MAX: Final = 100_000
"""Most open lease spans, and most remembered submit contexts, at once."""
TRACER_NAME: Final = "wf.server"

_TRACEPARENT: Final = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_HELD: Final = (ActivityState.LEASED, ActivityState.EXECUTING)
_REPORTED: Final = frozenset({"completed", "retry", "non_retryable", "retries_exhausted"})
"""Transition reasons of a lease ended by the worker's own complete or fail."""


def format_traceparent(trace_id: int, span_id: int, *, sampled: bool) -> str:
    """A version-00 W3C ``traceparent`` value."""
    assert 0 < trace_id < 1 << 128, "invalid trace id"
    assert 0 < span_id < 1 << 64, "invalid span id"
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def parse_traceparent(value: str | None) -> tuple[int, int, bool] | None:
    """``(trace_id, span_id, sampled)`` of a ``traceparent`` value, or ``None`` if invalid.

    Follows the W3C rules: version ``ff`` and all-zero ids are invalid; a
    version-00 value has exactly four fields; later versions may append more.
    """
    if value is None:
        return None
    value = value.strip()
    match = _TRACEPARENT.match(value)
    if match is None:
        return None
    version, trace_hex, span_hex, flags_hex = match.groups()
    if version == "ff" or (version == "00" and len(value) != 55):
        return None
    if len(value) > 55 and value[55] != "-":
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if trace_id == 0 or span_id == 0:
        return None
    return trace_id, span_id, bool(int(flags_hex, 16) & 1)


class Tracing:
    """Tracing switched off: every method does nothing (see the module docstring)."""

    enabled: bool = False
    """Whether spans are recorded (the server wires the listener only then)."""

    def on_outcome(self, outcome: Outcome) -> None:
        """Node listener: open and close spans for a committed outcome."""

    def traceparent(self, grant: LeaseGranted) -> str | None:
        """The ``traceparent`` to send to the worker with this lease, if any."""
        return None

    def incoming(self, header: str | None) -> contextlib.AbstractContextManager[None]:
        """Within it, submissions are children of the caller's ``traceparent``."""
        return contextlib.nullcontext()


_incoming: contextvars.ContextVar[Any] = contextvars.ContextVar("wf_trace_parent", default=None)


class OtelTracing(Tracing):
    """Spans through the OpenTelemetry API (see the module docstring)."""

    enabled = True

    def __init__(self, trace: Any) -> None:
        self._trace = trace
        self._tracer = trace.get_tracer(TRACER_NAME)
        self._submits: dict[str, Any] = {}
        """Activity id -> context of its ``wf.submit`` span (parent of its other spans)."""
        self._leases: dict[int, tuple[Any, Any]] = {}
        """Token -> (``wf.lease`` span, its context) of open leases."""
        self.correlation_id: Callable[[str], str] = lambda activity_id: ""
        """An activity's correlation id (:func:`install` sets the node's)."""

    # ------------------------------------------------------------- helpers

    def _span(self, name: str, parent: Any, attributes: dict[str, Any]) -> Any:
        return self._tracer.start_span(name, context=parent, attributes=attributes)

    def _child(self, name: str, token: int, attributes: dict[str, Any]) -> None:
        held = self._leases.get(token)
        if held is None:
            return
        attributes["wf.correlation_id"] = self.correlation_id(attributes["wf.activity_id"])
        self._span(name, held[1], attributes).end()

    @contextlib.contextmanager
    def _parent_from(self, header: str | None) -> Iterator[None]:
        parsed = parse_traceparent(header)
        if parsed is None:
            yield
            return
        trace_id, span_id, sampled = parsed
        trace = self._trace
        remote = trace.NonRecordingSpan(
            trace.SpanContext(
                trace_id=trace_id,
                span_id=span_id,
                is_remote=True,
                trace_flags=trace.TraceFlags(0x01 if sampled else 0x00),
            )
        )
        token = _incoming.set(trace.set_span_in_context(remote))
        try:
            yield
        finally:
            _incoming.reset(token)

    def incoming(self, header: str | None) -> contextlib.AbstractContextManager[None]:
        return self._parent_from(header)

    def traceparent(self, grant: LeaseGranted) -> str | None:
        held = self._leases.get(grant.lease.token)
        if held is None:
            return None
        ctx = held[0].get_span_context()
        if not ctx.is_valid:
            return None
        return format_traceparent(ctx.trace_id, ctx.span_id, sampled=bool(ctx.trace_flags & 1))

    # ------------------------------------------------------------ listener

    def on_outcome(self, outcome: Outcome) -> None:
        for r in outcome.records:
            if type(r) is ActivitySubmitted:
                self._submitted(r)
        for d in outcome.decisions:
            if type(d) is LeaseGranted:
                self._granted(d)
        for r in outcome.records:
            if type(r) is Transition:
                self._transition(r)
            elif type(r) is LeaseRenewed:
                self._child(
                    "wf.lease.renew",
                    r.token,
                    {"wf.activity_id": r.activity_id, "wf.lease.token": r.token},
                )

    def _submitted(self, r: ActivitySubmitted) -> None:
        a = r.activity
        span = self._span(
            "wf.submit",
            _incoming.get(),
            {
                "wf.activity_id": a.activity_id,
                "wf.activity_type": a.activity_type,
                "wf.workflow_id": a.workflow_id,
                "wf.tenant": a.tenant,
                "wf.correlation_id": a.correlation_id,
            },
        )
        span.end()
        submits = self._submits
        if len(submits) >= SPANS_OPEN_MAX:
            del submits[next(iter(submits))]
        submits[a.activity_id] = self._trace.set_span_in_context(span)

    def _granted(self, d: LeaseGranted) -> None:
        lease = d.lease
        parent = self._submits.get(lease.activity_id)
        attributes = {
            "wf.activity_id": lease.activity_id,
            "wf.activity_type": d.activity_type,
            "wf.workflow_id": d.workflow_id,
            "wf.correlation_id": d.correlation_id,
            "wf.worker_id": lease.worker_id,
            "wf.lease.token": lease.token,
            "wf.attempt": lease.attempt,
        }
        self._span("wf.dispatch", parent, attributes).end()
        span = self._span("wf.lease", parent, attributes)
        leases = self._leases
        if len(leases) >= SPANS_OPEN_MAX:
            oldest = next(iter(leases))
            evicted = leases.pop(oldest)[0]
            evicted.set_attribute("wf.evicted", True)
            evicted.end()
        leases[lease.token] = (span, self._trace.set_span_in_context(span))

    def _transition(self, r: Transition) -> None:
        to_state = r.to_state
        if to_state is ActivityState.EXECUTING:
            self._child(
                "wf.lease.start",
                r.token,
                {"wf.activity_id": r.activity_id, "wf.lease.token": r.token},
            )
        elif r.from_state in _HELD:
            self._lease_ended(r)
        if to_state in TERMINAL_STATES:
            self._submits.pop(r.activity_id, None)

    def _lease_ended(self, r: Transition) -> None:
        attributes = {
            "wf.activity_id": r.activity_id,
            "wf.lease.token": r.token,
            "wf.outcome": r.to_state.value,
            "wf.reason": r.reason,
        }
        if r.reason in _REPORTED:
            self._child("wf.complete", r.token, dict(attributes))
        held = self._leases.pop(r.token, None)
        if held is None:
            return
        span = held[0]
        span.set_attribute("wf.outcome", r.to_state.value)
        span.set_attribute("wf.reason", r.reason)
        if r.to_state is not ActivityState.COMPLETED:
            trace = self._trace
            span.set_status(trace.Status(trace.StatusCode.ERROR, r.error or r.reason))
        span.end()


def make_tracing(config: ObservabilityConfig) -> Tracing:
    """:class:`OtelTracing` if tracing is configured and OpenTelemetry imports, else a no-op."""
    if not config.tracing:
        return Tracing()
    try:
        trace = importlib.import_module("opentelemetry.trace")
    except ImportError:
        log.warning(
            "tracing is configured but OpenTelemetry is not installed (install wf[otel])",
            extra={"action": "tracing.unavailable"},
        )
        return Tracing()
    return OtelTracing(trace)


def install(tracing: Tracing, node: SchedulerNode, scheduler: SchedulerAPI) -> None:
    """Wire an enabled tracing into a node and the poll results (nothing when it is off)."""
    if tracing.enabled:
        if isinstance(tracing, OtelTracing):
            tracing.correlation_id = node.reads.correlation_id
        node.listeners.append(tracing.on_outcome)
        scheduler.trace_context = tracing.traceparent
