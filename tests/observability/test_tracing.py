"""Tracing: the no-op paths, ``traceparent`` handling, and the spans over the wire.

OpenTelemetry is an optional extra and is not installed in the test
environment; the span test therefore stands in a minimal fake of the
``opentelemetry.trace`` API surface the server uses (``get_tracer``,
``start_span``, ``set_span_in_context``, ``NonRecordingSpan``,
``SpanContext``, ``TraceFlags``, ``Status``, ``StatusCode``).
"""

from __future__ import annotations

import itertools
import logging
import sys
import types
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from _obs_server import activity, config, poll, register, run, run_lease

from wf.client.rpc_client import RpcClient
from wf.server.app import WfServer
from wf.server.config import ObservabilityConfig
from wf.server.tracing import (
    OtelTracing,
    Tracing,
    format_traceparent,
    make_tracing,
    parse_traceparent,
)

TRACING_ON = ObservabilityConfig(tracing=True)


@pytest.fixture
def no_otel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import opentelemetry`` fail even where the extra is installed."""
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)


def test_tracing_is_off_by_default() -> None:
    tracing = make_tracing(ObservabilityConfig())
    assert type(tracing) is Tracing
    assert not tracing.enabled


def test_tracing_without_opentelemetry_is_a_noop(
    no_otel: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="wf.tracing"):
        tracing = make_tracing(TRACING_ON)
    assert not tracing.enabled
    assert [r.__dict__.get("action") for r in caplog.records] == ["tracing.unavailable"]
    with tracing.incoming(format_traceparent(1, 2, sampled=True)):
        pass


def test_server_with_tracing_configured_but_absent(tmp_path: Path, no_otel: None) -> None:
    async def test(server: WfServer, url: str) -> None:
        assert not server.tracing.enabled
        assert server.scheduler.trace_context is None
        async with RpcClient(url) as client:
            await client.call(
                "scheduler.activities.submit", {"activities": [activity("a", correlation_id="c")]}
            )
            await register(client, "w1", 1)
            result = await poll(client, "w1", 1)
        assert len(result["leases"]) == 1
        assert "traceparents" not in result

    run(config(tmp_path / "store", observability=TRACING_ON), test)


def test_traceparent_round_trip_and_invalid_values() -> None:
    value = format_traceparent(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, sampled=True)
    assert value == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert parse_traceparent(value) == (
        0x4BF92F3577B34DA6A3CE929D0E0E4736,
        0x00F067AA0BA902B7,
        True,
    )
    assert parse_traceparent(value[:-2] + "00") == (
        0x4BF92F3577B34DA6A3CE929D0E0E4736,
        0x00F067AA0BA902B7,
        False,
    )
    assert parse_traceparent("01" + value[2:] + "-future") is not None
    for invalid in (
        None,
        "",
        "garbage",
        "ff" + value[2:],
        value + "-extra",  # version 00 has exactly four fields
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",
        value.upper(),
    ):
        assert parse_traceparent(invalid) is None, invalid


# ------------------------------------------------------------ a fake OTel API


class _SpanContext:
    def __init__(
        self, trace_id: int, span_id: int, is_remote: bool = False, trace_flags: int = 1
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.is_remote = is_remote
        self.trace_flags = trace_flags

    @property
    def is_valid(self) -> bool:
        return self.trace_id != 0 and self.span_id != 0


class _Span:
    def __init__(self, name: str, context: _SpanContext, parent: _Span | None, attrs: Any) -> None:
        self.name = name
        self.context = context
        self.parent = parent
        self.attributes = dict(attrs or {})
        self.ended = False
        self.status: Any = None

    def get_span_context(self) -> _SpanContext:
        return self.context

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def set_status(self, status: Any) -> None:
        self.status = status

    def end(self) -> None:
        assert not self.ended, f"{self.name} ended twice"
        self.ended = True


class _Tracer:
    def __init__(self) -> None:
        self.spans: list[_Span] = []
        self._ids = itertools.count(1)

    def start_span(self, name: str, context: Any = None, attributes: Any = None) -> _Span:
        parent: _Span | None = context["span"] if context is not None else None
        trace_id = parent.context.trace_id if parent is not None else 0xABC000 + next(self._ids)
        span = _Span(name, _SpanContext(trace_id, next(self._ids)), parent, attributes)
        self.spans.append(span)
        return span


def _fake_trace_module(tracer: _Tracer) -> types.ModuleType:
    module = types.ModuleType("opentelemetry.trace")

    def non_recording(context: _SpanContext) -> _Span:
        return _Span("remote", context, None, None)

    namespace: dict[str, Any] = {
        "get_tracer": lambda name: tracer,
        "set_span_in_context": lambda span: {"span": span},
        "NonRecordingSpan": non_recording,
        "SpanContext": _SpanContext,
        "TraceFlags": int,
        "Status": lambda code, description=None: (code, description),
        "StatusCode": types.SimpleNamespace(ERROR="error", OK="ok"),
    }
    module.__dict__.update(namespace)
    return module


@pytest.fixture
def fake_otel(monkeypatch: pytest.MonkeyPatch) -> _Tracer:
    tracer = _Tracer()
    package = types.ModuleType("opentelemetry")
    trace = _fake_trace_module(tracer)
    package.__dict__["trace"] = trace
    monkeypatch.setitem(sys.modules, "opentelemetry", package)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", trace)
    return tracer


def test_spans_and_propagation_over_the_wire(tmp_path: Path, fake_otel: _Tracer) -> None:
    caller_trace, caller_span = 0x1234, 0x5678
    received: dict[str, Any] = {}

    async def test(server: WfServer, url: str) -> None:
        assert isinstance(server.tracing, OtelTracing)
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "scheduler.activities.submit",
            "params": {"activities": [activity("t", correlation_id="run-1")]},
        }
        headers = {"traceparent": format_traceparent(caller_trace, caller_span, sampled=True)}
        async with (
            aiohttp.ClientSession() as session,
            session.post(url + "/rpc", json=body, headers=headers) as response,
        ):
            assert response.status == 200
        async with RpcClient(url) as client:
            await register(client, "w1", 1)
            result = await poll(client, "w1", 1)
            received.update(result)
            await run_lease(client, result["leases"][0]["lease"], renew=True)

    run(config(tmp_path / "store", observability=TRACING_ON), test)
    spans = {s.name: s for s in fake_otel.spans}
    assert set(spans) == {
        "wf.submit",
        "wf.dispatch",
        "wf.lease",
        "wf.lease.start",
        "wf.lease.renew",
        "wf.complete",
    }
    assert all(s.ended for s in fake_otel.spans)
    assert all(s.attributes["wf.correlation_id"] == "run-1" for s in fake_otel.spans)
    submit = spans["wf.submit"]
    assert submit.parent is not None
    assert submit.parent.context.is_remote
    assert (submit.parent.context.trace_id, submit.parent.context.span_id) == (
        caller_trace,
        caller_span,
    )
    lease = spans["wf.lease"]
    assert spans["wf.dispatch"].parent is submit
    assert lease.parent is submit
    for child in ("wf.lease.start", "wf.lease.renew", "wf.complete"):
        assert spans[child].parent is lease, child
    assert lease.attributes["wf.outcome"] == "completed"
    assert lease.status is None
    assert {s.context.trace_id for s in fake_otel.spans} == {caller_trace}
    lease_id = received["leases"][0]["lease"]["lease_id"]
    assert received["traceparents"] == {
        lease_id: format_traceparent(caller_trace, lease.context.span_id, sampled=True)
    }


def test_lost_lease_ends_its_span_with_an_error(tmp_path: Path, fake_otel: _Tracer) -> None:
    async def test(server: WfServer, url: str) -> None:
        async with RpcClient(url) as client:
            await client.call(
                "scheduler.activities.submit", {"activities": [activity("c", correlation_id="r")]}
            )
            await register(client, "w1", 1)
            await poll(client, "w1", 1)
            await client.call("scheduler.activities.cancel", {"activity_id": "c"})

    run(config(tmp_path / "store", observability=TRACING_ON), test)
    lease = next(s for s in fake_otel.spans if s.name == "wf.lease")
    assert lease.ended
    assert lease.attributes["wf.outcome"] == "cancelled"
    assert lease.status == ("error", "cancelled")
    assert "wf.complete" not in {s.name for s in fake_otel.spans}
