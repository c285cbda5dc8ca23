"""``wf.log_lines``: direct lines are the lines ``logging`` would write, for less.

The direct path (:func:`~wf.log_lines.line_sink`, then
:meth:`~wf.log_lines.LineHandler.write_line`) is taken only when wf's handler
is the only thing a record would reach. Under pytest the root logger also
holds pytest's capture handlers, so these tests install wf's handler as the
root's only one for their own span (:func:`sole_handler`) and put pytest's
back afterwards.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _obs_server import activity, config, poll, register, run, run_lease, submit

from wf.client.rpc_client import RpcClient
from wf.log_lines import REDACTED, LineHandler, line_sink
from wf.server.app import WfServer
from wf.server.config import ObservabilityConfig
from wf.server.logs import LIFECYCLE_LOGGER, configure_logging

FIELDS: dict[str, Any] = {"activity_id": "a-1", "token": 7, "attempt": 1, "expires_at": 12.5}


class CountingStream(io.StringIO):
    """A text stream that counts its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


@contextmanager
def sole_handler(log_format: str = "json", level: str = "info") -> Iterator[CountingStream]:
    """wf's handler as the root logger's only handler, into a counting stream."""
    root = logging.getLogger()
    saved_level, saved_handlers = root.level, list(root.handlers)
    stream = CountingStream()
    try:
        root.handlers[:] = []
        configure_logging(ObservabilityConfig(log_format=log_format, log_level=level), stream)
        yield stream
    finally:
        for handler in root.handlers:
            handler.flush()
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        logging.getLogger("aiohttp.access").setLevel(logging.NOTSET)


def _sink(name: str = "wf.test.lines") -> tuple[logging.Logger, LineHandler]:
    log = logging.getLogger(name)
    sink = line_sink(log)
    assert sink is not None
    return log, sink


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_a_direct_line_is_the_line_logging_writes(log_format: str) -> None:
    with sole_handler(log_format) as stream:
        log, sink = _sink()
        log.info("lease %s granted", 7, extra={"action": "lease.granted", **FIELDS})
        sink.write_line(logging.INFO, log.name, "lease.granted", "lease 7 granted", dict(FIELDS))
    first, second = stream.getvalue().splitlines()
    if log_format == "json":
        by_record, direct = json.loads(first), json.loads(second)
        assert by_record.pop("time")[:10] == direct.pop("time")[:10]
        assert by_record == direct
        assert list(direct) == ["level", "logger", "message", "action", *FIELDS]
    else:
        # Everything after the timestamp is the same text.
        assert first.split(" ", 1)[1] == second.split(" ", 1)[1]
        assert second.endswith(
            "lease.granted: lease 7 granted activity_id=a-1 token=7 attempt=1 expires_at=12.5"
        )


def test_direct_lines_are_scrubbed_like_records() -> None:
    with sole_handler() as stream:
        log, sink = _sink()
        sink.write_line(
            logging.INFO,
            log.name,
            "demo.secret",
            "saw Authorization: Bearer s3cret",
            {"header": "Bearer s3cret-too", "n": 1},
        )
    text = stream.getvalue()
    assert "s3cret" not in text
    line = json.loads(text)
    assert REDACTED in line["message"]
    assert REDACTED in line["header"]
    assert line["n"] == 1


def test_a_line_that_cannot_be_formatted_is_reported_never_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no text for this")

    reported: list[logging.LogRecord | None] = []
    monkeypatch.setattr(LineHandler, "handleError", lambda self, record: reported.append(record))
    with sole_handler() as stream:
        log, sink = _sink()
        sink.write_line(logging.INFO, log.name, "demo.bad", "bad", {"value": Unprintable()})
        sink.write_line(logging.INFO, log.name, "demo.good", "good", {})
    assert len(reported) == 1
    assert [json.loads(line)["action"] for line in stream.getvalue().splitlines()] == ["demo.good"]


def test_lines_of_one_loop_turn_are_one_write_and_come_before_a_later_record() -> None:
    async def main(stream: CountingStream) -> None:
        log, sink = _sink()
        for n in range(5):
            sink.write_line(logging.INFO, log.name, "demo.line", f"line {n}", {"n": n})
        assert stream.writes == 0  # waiting for the end of this turn
        await asyncio.sleep(0)
        assert stream.writes == 1
        sink.write_line(logging.INFO, log.name, "demo.line", "line 5", {"n": 5})
        log.warning("a record", extra={"action": "demo.record"})  # writes line 5 first

    with sole_handler() as stream:
        asyncio.run(main(stream))
    actions = [json.loads(line)["action"] for line in stream.getvalue().splitlines()]
    assert actions == ["demo.line"] * 6 + ["demo.record"]
    numbers = [json.loads(line).get("n") for line in stream.getvalue().splitlines()]
    assert numbers[:6] == list(range(6))


def test_lines_left_by_a_loop_that_closed_are_written_by_the_next_one() -> None:
    def one_line_then_stop(loop: asyncio.AbstractEventLoop, action: str) -> None:
        def write() -> None:
            log, sink = _sink()
            sink.write_line(logging.INFO, log.name, action, action, {})
            loop.stop()  # the loop stops after this turn, before the write is due

        loop.call_soon(write)
        loop.run_forever()

    with sole_handler() as stream:
        first = asyncio.new_event_loop()
        one_line_then_stop(first, "demo.first")
        first.close()
        assert stream.writes == 0
        second = asyncio.new_event_loop()
        try:
            one_line_then_stop(second, "demo.second")
            assert stream.writes == 0
            second.run_until_complete(asyncio.sleep(0))  # its turn ends: both lines
        finally:
            second.close()
        assert stream.writes == 1
    actions = [json.loads(line)["action"] for line in stream.getvalue().splitlines()]
    assert actions == ["demo.first", "demo.second"]


def test_outside_a_loop_a_direct_line_is_written_at_once_and_below_the_level_dropped() -> None:
    with sole_handler(level="warning") as stream:
        log, sink = _sink()
        logging.getLogger().handlers[0].setLevel(logging.WARNING)
        sink.write_line(logging.INFO, log.name, "demo.dropped", "dropped", {})
        sink.write_line(logging.WARNING, log.name, "demo.kept", "kept", {})
        assert stream.writes == 1
    assert [json.loads(line)["action"] for line in stream.getvalue().splitlines()] == ["demo.kept"]


def test_the_direct_path_is_off_whenever_something_else_could_see_the_record() -> None:
    with sole_handler():
        log = logging.getLogger("wf.test.sink")
        root = logging.getLogger()
        (handler,) = root.handlers
        assert line_sink(log) is handler

        capture = logging.Handler()
        root.addHandler(capture)  # a second handler on the root (a test's capture)
        assert line_sink(log) is None
        root.removeHandler(capture)

        log.addHandler(capture)  # a handler on the way
        assert line_sink(log) is None
        log.removeHandler(capture)

        only_some = logging.Filter("elsewhere")
        log.addFilter(only_some)  # a filter on the logger
        assert line_sink(log) is None
        log.removeFilter(only_some)

        handler.addFilter(only_some)  # a filter on the handler other than the scrub
        assert line_sink(log) is None
        handler.removeFilter(only_some)

        log.propagate = False
        assert line_sink(log) is None
        log.propagate = True

        formatter = handler.formatter
        handler.setFormatter(logging.Formatter())  # someone else's line format
        assert line_sink(log) is None
        handler.setFormatter(formatter)

        factory = logging.getLogRecordFactory()
        logging.setLogRecordFactory(lambda *a, **k: factory(*a, **k))
        try:
            assert line_sink(log) is None
        finally:
            logging.setLogRecordFactory(factory)
        assert line_sink(log) is handler


def test_a_server_writes_its_lifecycle_lines_directly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    direct: list[str] = []
    write_line = LineHandler.write_line

    def counted(self: LineHandler, levelno: int, logger: str, action: str, *rest: Any) -> None:
        direct.append(action)
        write_line(self, levelno, logger, action, *rest)

    monkeypatch.setattr(LineHandler, "write_line", counted)

    async def test(server: WfServer, url: str) -> None:
        assert line_sink(logging.getLogger(LIFECYCLE_LOGGER)) is not None
        async with RpcClient(url) as client:
            await submit(client, activity("x", correlation_id="run-1"))
            await register(client, "w1", 1)
            grant = (await poll(client, "w1", 1))["leases"][0]
            await run_lease(client, grant["lease"])

    observability = ObservabilityConfig(activity_log_level="info")
    with sole_handler() as stream:
        run(config(tmp_path / "store", observability=observability), test)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    x = {line["action"]: line for line in lines if line.get("activity_id") == "x"}
    assert {"activity.submitted", "lease.granted", "activity.completed"} <= x.keys()
    assert all(line["correlation_id"] == "run-1" for line in x.values())
    assert x["lease.granted"]["logger"] == LIFECYCLE_LOGGER
    assert x["lease.granted"]["worker_id"] == "w1"
    lifecycle = [line["action"] for line in lines if line["logger"] == LIFECYCLE_LOGGER]
    assert direct == lifecycle  # every lifecycle line took the direct path
