"""Structured logs: the line format, and correlation ids on every lifecycle line over the wire."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from _obs_server import activity, config, poll, register, run, run_lease, submit

from wf.client.rpc_client import RpcClient
from wf.server.app import WfServer
from wf.server.config import ObservabilityConfig
from wf.server.logs import JsonFormatter, TextFormatter, configure_logging

Lines = Callable[[], list[dict[str, Any]]]


@pytest.fixture
def json_lines() -> Iterator[Lines]:
    """Configure JSON logging at debug into a buffer; restore the root logger afterwards."""
    yield from _captured("debug")


@pytest.fixture
def info_lines() -> Iterator[Lines]:
    """The same at ``info``, the default root level."""
    yield from _captured("info")


def _captured(level: Literal["debug", "info"]) -> Iterator[Lines]:
    root = logging.getLogger()
    saved_level, saved_handlers = root.level, list(root.handlers)
    stream = io.StringIO()
    configure_logging(ObservabilityConfig(log_format="json", log_level=level), stream)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    root.handlers[:] = saved_handlers
    root.setLevel(saved_level)
    logging.getLogger("aiohttp.access").setLevel(logging.NOTSET)


def about(lines: list[dict[str, Any]], activity_id: str) -> dict[str, dict[str, Any]]:
    """The lifecycle lines of one activity, by action (the last of each)."""
    return {line["action"]: line for line in lines if line.get("activity_id") == activity_id}


def test_correlation_id_flows_through_grant_and_completion(
    tmp_path: Path, json_lines: Lines
) -> None:
    async def test(server: WfServer, url: str) -> None:
        async with RpcClient(url) as client:
            await submit(client, activity("x", correlation_id="run-7", workflow_id="wf-7"))
            await submit(client, activity("y", correlation_id="run-8"))
            await register(client, "w1", 1)
            result = await poll(client, "w1", 1)
            grant = result["leases"][0]
            assert grant["correlation_id"] == "run-7"  # what the worker receives
            assert "traceparents" not in result  # tracing is off
            await run_lease(client, grant["lease"], renew=True)
            second = (await poll(client, "w1", 1))["leases"][0]
            assert second["correlation_id"] == "run-8"
            await client.call("scheduler.activities.cancel", {"activity_id": "y"})

    run(config(tmp_path / "store"), test)
    lines = json_lines()
    for line in lines:
        assert {"time", "level", "logger", "message", "action"} <= line.keys()
    x = about(lines, "x")
    for action in (
        "activity.submitted",
        "lease.granted",
        "lease.started",
        "lease.renewed",
        "activity.completed",
    ):
        assert x[action]["correlation_id"] == "run-7", action
    granted = x["lease.granted"]
    assert granted["worker_id"] == "w1"
    assert granted["workflow_id"] == "wf-7"
    assert granted["level"] == "debug"  # activity_log_level's default
    assert granted["logger"] == "wf.lifecycle"
    y = about(lines, "y")
    for action in ("lease.granted", "lease.revoked", "activity.cancelled"):
        assert y[action]["correlation_id"] == "run-8", action
    with_activity = [line for line in lines if "activity_id" in line]
    assert with_activity
    assert all(line["correlation_id"] for line in with_activity)
    calls = [line for line in lines if line["action"] == "rpc.call"]
    assert {"scheduler.workers.poll", "scheduler.leases.complete"} <= {c["method"] for c in calls}
    assert all(c["duration_ms"] >= 0 and c["caller"] == "anonymous" for c in calls)


def test_failures_and_retries_carry_the_correlation_id(tmp_path: Path, json_lines: Lines) -> None:
    async def test(server: WfServer, url: str) -> None:
        async with RpcClient(url) as client:
            retry = {"max_attempts": 2, "initial_backoff_s": 0.0, "jitter_fraction": 0.0}
            await submit(client, activity("f", correlation_id="run-9", retry=retry))
            await register(client, "w1", 1)
            for _ in range(2):
                lease = (await poll(client, "w1", 1))["leases"][0]["lease"]
                fenced = {"activity_id": "f", "token": lease["token"]}
                await client.call("scheduler.leases.start", fenced)
                await client.call(
                    "scheduler.leases.fail", {**fenced, "error_type": "Boom", "message": "no"}
                )

    run(config(tmp_path / "store"), test)
    f = about(json_lines(), "f")
    assert f["activity.retry_scheduled"]["correlation_id"] == "run-9"
    failed = f["activity.failed"]
    assert failed["correlation_id"] == "run-9"
    assert failed["level"] == "warning"
    assert failed["reason"] == "retries_exhausted"
    assert failed["error_type"] == "Boom"


def test_correlation_ids_survive_a_restart(tmp_path: Path, json_lines: Lines) -> None:
    async def before(server: WfServer, url: str) -> None:
        async with RpcClient(url) as client:
            await submit(client, activity("z", correlation_id="run-10"))

    async def after(server: WfServer, url: str) -> None:
        async with RpcClient(url) as client:
            await client.call("scheduler.activities.cancel", {"activity_id": "z"})

    run(config(tmp_path / "store"), before)
    run(config(tmp_path / "store"), after)
    cancelled = about(json_lines(), "z")["activity.cancelled"]
    assert cancelled["correlation_id"] == "run-10"


def _record(**extra: Any) -> logging.LogRecord:
    record = logging.LogRecord("wf.test", logging.INFO, __file__, 1, "hello %s", ("you",), None)
    record.__dict__.update(extra)
    return record


def test_json_formatter_line() -> None:
    line = json.loads(JsonFormatter().format(_record(action="demo.done", path=Path("/tmp/x"), n=3)))
    assert line["message"] == "hello you"
    assert line["action"] == "demo.done"
    assert line["level"] == "info"
    assert line["logger"] == "wf.test"
    assert line["time"].endswith("+00:00")
    assert line["path"] == "/tmp/x"  # not JSON-native: written as str
    assert line["n"] == 3
    assert "args" not in line
    assert "msg" not in line


def test_json_formatter_without_action_and_with_exception() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        record = _record()
        record.exc_info = sys.exc_info()
    line = json.loads(JsonFormatter().format(record))
    assert line["action"] == "log"
    assert "ValueError: bad" in line["exception"]


def test_text_formatter_line() -> None:
    text = TextFormatter().format(_record(action="demo.done", correlation_id="c1"))
    assert " INFO " in text
    assert "wf.test demo.done: hello you correlation_id=c1" in text


def test_configure_logging_replaces_its_handler_and_sets_levels() -> None:
    root = logging.getLogger()
    saved_level, saved_handlers = root.level, list(root.handlers)
    try:
        first = configure_logging(ObservabilityConfig(log_format="json"), io.StringIO())
        stream = io.StringIO()
        second = configure_logging(
            ObservabilityConfig(log_format="text", log_level="warning"), stream
        )
        assert first not in root.handlers
        assert second in root.handlers
        assert root.level == logging.WARNING
        assert logging.getLogger("aiohttp.access").level == logging.WARNING
        logging.getLogger("wf.test").warning("w", extra={"action": "demo.warned"})
        logging.getLogger("wf.test").info("dropped")
        assert stream.getvalue().count("\n") == 1
        assert "demo.warned: w" in stream.getvalue()
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        logging.getLogger("aiohttp.access").setLevel(logging.NOTSET)


SUCCESS_PATH = ("activity.submitted", "lease.granted", "activity.completed")


async def _one_success_one_failure(server: WfServer, url: str) -> None:
    async with RpcClient(url) as client:
        await submit(client, activity("ok", correlation_id="run-1"))
        await submit(client, activity("bad", correlation_id="run-2"))
        await register(client, "w1", 1)
        lease = (await poll(client, "w1", 1))["leases"][0]["lease"]
        await run_lease(client, lease)
        lease = (await poll(client, "w1", 1))["leases"][0]["lease"]
        fenced = {"activity_id": lease["activity_id"], "token": lease["token"]}
        await client.call("scheduler.leases.start", fenced)
        await client.call(
            "scheduler.leases.fail",
            {**fenced, "error_type": "Boom", "message": "no", "retryable": False},
        )


def test_at_the_default_levels_the_success_path_writes_no_server_line(
    tmp_path: Path, info_lines: Lines
) -> None:
    run(config(tmp_path / "store"), _one_success_one_failure)
    lines = info_lines()
    assert not [line for line in lines if line["action"] in SUCCESS_PATH]
    failed = about(lines, "bad")["activity.failed"]
    assert failed["level"] == "warning"
    assert failed["correlation_id"] == "run-2"


def test_activity_log_level_info_writes_the_success_path_at_info(
    tmp_path: Path, info_lines: Lines
) -> None:
    observability = ObservabilityConfig(log_level="info", activity_log_level="info")
    run(config(tmp_path / "store", observability=observability), _one_success_one_failure)
    ok = about(info_lines(), "ok")
    for action in SUCCESS_PATH:
        assert ok[action]["level"] == "info", action
        assert ok[action]["correlation_id"] == "run-1", action
