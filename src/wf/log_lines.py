"""wf's log line format, its handler, and lines written straight from their fields.

Theory of operation
-------------------
Every wf process (the server, ``wf worker``) logs through one handler that
:func:`wf.server.logs.configure_logging` puts on the root logger: a
:class:`LineHandler` with a :class:`JsonFormatter` or a :class:`TextFormatter`
and :class:`RedactCredentials` (see :mod:`wf.server.redaction`). Records from any
logger reach it the ordinary way.

The lines a busy process writes per activity (the server's ``lease.granted``
and ``activity.completed``, the worker's ``lease.completed``) also have a
direct path, :func:`line_sink` then :meth:`LineHandler.write_line`. Through
``logging`` one such line cost about 25 µs: a ``LogRecord`` and its
``__dict__``, the filter's pass over every attribute, the formatter's pass
over them again, a lock, a write and a flush; at three lines per activity
that was about 30 % of the stock server's CPU (docs/benchmarks.md). The
direct path builds the same line from the fields the caller already holds
(about 6 µs), scrubs its message and string fields with the same
:func:`redact`, and hands the lines of one event-loop turn to the stream in
one write and one flush, at the end of that turn (``call_soon``), so no
answer to a client waits for them.

The direct path is taken only when nothing could tell the difference:
:func:`line_sink` returns the handler only if a record from that logger would
reach this handler and nothing else (no filters or handlers on the way, the
root's only handler this one, its filters only the credential filter, its
formatter its own, the standard record factory). Under a test's log capture,
an application's own handler or a custom record factory, every line goes
through ``logging`` as before. Lines already waiting are written before any
record the handler emits, so the order of a stream's lines is the order they
were logged; :meth:`LineHandler.flush` (called by ``logging.shutdown`` at
exit) writes what waits.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from datetime import UTC, datetime
from typing import IO, Any, Final

import msgspec

REDACTED: Final = "[redacted]"
"""What replaces a credential."""

_CREDENTIAL: Final = re.compile(
    r"""(?ix)
    (                                               # kept: the keyword and separators
        \bbearer\b (?:[\s:=]|\\[rnt]|%20)*           # the scheme ("Bearer ", "bearer\\r")
      | \b(?:proxy-)?authorization\b ['"]?\s*[:=,]\s*['"]?   # a header name or a dict key
    )
    [^\n]+                                          # replaced: the rest of the line
    """
)
_HINT: Final = re.compile(r"bearer|authorization", re.IGNORECASE)
"""What every match of :data:`_CREDENTIAL` contains: a text without it is left as it is
(nearly every line), at the cost of one plain search instead of the full pattern."""

_STANDARD: Final = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys()
    | {"message", "asctime", "taskName", "action"}
)
"""A record's own attributes: everything else in its ``__dict__`` is an extra field."""


def redact(text: str) -> str:
    """``text`` with every credential replaced (see :mod:`wf.server.redaction`)."""
    if _HINT.search(text) is None:
        return text
    return _CREDENTIAL.sub(lambda m: m.group(1) + REDACTED, text)


_STANDARD_ATTRIBUTES: Final = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys() | {"message", "asctime"}
)


class RedactCredentials(logging.Filter):
    """Scrubs credentials out of a record in place; never drops one (see
    :mod:`wf.server.redaction`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: logging reports it itself
            return True
        cleaned = redact(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        if record.exc_info:
            # The traceback is formatted here, once, so the text every formatter
            # prints is the scrubbed one (formatters print ``exc_text`` when
            # ``exc_info`` is gone).
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text, record.exc_info = redact(text), None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        fields = record.__dict__
        # The extra fields only (a set difference in C, not a test per attribute).
        for key in fields.keys() - _STANDARD_ATTRIBUTES:
            value = fields[key]
            if isinstance(value, str):
                fields[key] = redact(value)
        return True


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD}


_last_time: tuple[int, str] = (-1, "")
"""The last millisecond formatted and its text: a busy process logs many lines in one."""


def _time(created: float) -> str:
    global _last_time
    millisecond = int(created * 1000)
    seen, text = _last_time
    if millisecond != seen:
        text = datetime.fromtimestamp(millisecond / 1000, UTC).isoformat(timespec="milliseconds")
        _last_time = (millisecond, text)
    return text


class LineFormatter(logging.Formatter):
    """A formatter that also builds a line from its fields (:meth:`format_fields`)."""

    def format_fields(
        self,
        created: float,
        levelno: int,
        logger: str,
        message: str,
        action: str,
        fields: dict[str, Any],
    ) -> str:
        """The line of a record with these attributes and extra fields (no exception)."""
        raise NotImplementedError


class JsonFormatter(LineFormatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``,
    ``action``, then the extra fields as they were given."""

    def __init__(self) -> None:
        super().__init__()
        self._encoder = msgspec.json.Encoder(enc_hook=str)

    def _head(
        self, created: float, levelno: int, logger: str, message: str, action: str
    ) -> dict[str, Any]:
        return {
            "time": _time(created),
            "level": logging.getLevelName(levelno).lower(),
            "logger": logger,
            "message": message,
            "action": action,
        }

    def format_fields(
        self,
        created: float,
        levelno: int,
        logger: str,
        message: str,
        action: str,
        fields: dict[str, Any],
    ) -> str:
        line = self._head(created, levelno, logger, message, action)
        line.update(fields)
        return self._encoder.encode(line).decode()

    def format(self, record: logging.LogRecord) -> str:
        line = self._head(
            record.created,
            record.levelno,
            record.name,
            record.getMessage(),
            getattr(record, "action", "log"),
        )
        line.update(_extras(record))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:  # formatted (and scrubbed) by wf.server.redaction
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return self._encoder.encode(line).decode()


class TextFormatter(LineFormatter):
    """``time level logger action: message key=value ...`` for humans."""

    def format_fields(
        self,
        created: float,
        levelno: int,
        logger: str,
        message: str,
        action: str,
        fields: dict[str, Any],
    ) -> str:
        level = logging.getLevelName(levelno)
        line = f"{_time(created)} {level:<7} {logger} {action}: {message}"
        if fields:
            line = f"{line} " + " ".join(f"{k}={v}" for k, v in fields.items())
        return line

    def format(self, record: logging.LogRecord) -> str:
        line = self.format_fields(
            record.created,
            record.levelno,
            record.name,
            record.getMessage(),
            getattr(record, "action", "log"),
            _extras(record),
        )
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        elif record.exc_text:  # formatted (and scrubbed) by wf.server.redaction
            line = f"{line}\n{record.exc_text}"
        return line


class LineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """wf's handler: records as a :class:`logging.StreamHandler` writes them, and
    direct lines (:meth:`write_line`) written once per event-loop turn."""

    def __init__(self, stream: IO[str], formatter: LineFormatter) -> None:
        super().__init__(stream)
        self.setFormatter(formatter)
        self.line_formatter = formatter
        """The formatter direct lines use (the direct path is off if it is replaced)."""
        self._waiting: list[str] = []
        self._flush_loop: asyncio.AbstractEventLoop | None = None
        """The loop on which a write of the waiting lines is due, if any."""

    def write_line(
        self, levelno: int, logger: str, action: str, message: str, fields: dict[str, Any]
    ) -> None:
        """Write one line built from its fields, scrubbed as the filter scrubs a record.

        In an event loop's thread the line waits for the end of the loop's turn
        (see the module doc); elsewhere it is written at once. Below the handler's
        level it is dropped, as ``logging`` drops a record."""
        if levelno < self.level:
            return
        try:
            for key, value in fields.items():
                if type(value) is str and _HINT.search(value) is not None:
                    fields[key] = redact(value)
            text = self.line_formatter.format_fields(
                time.time(), levelno, logger, redact(message), action, fields
            )
        except Exception:
            # As logging does with a record it cannot format: reported on standard
            # error, never raised into the caller (a node listener, a worker's report).
            self.handleError(logging.makeLogRecord({"name": logger, "msg": message}))
            return
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self.lock:  # type: ignore[union-attr]
            self._waiting.append(text)
            if loop is not None:
                if self._flush_loop is loop:
                    return  # this turn's write is due already
                # (A write due on another loop, one that closed before its turn
                # ended, would never come: this one takes its lines too.)
                self._flush_loop = loop
        if loop is None:
            self.write_waiting()
        else:
            loop.call_soon(self.write_waiting)

    def write_waiting(self) -> None:
        """Write the direct lines that wait, in one write and one flush."""
        with self.lock:  # type: ignore[union-attr]
            self._flush_loop = None
            if not self._waiting:
                return
            text = self.terminator.join(self._waiting) + self.terminator
            self._waiting.clear()
            try:
                self.stream.write(text)
                self.stream.flush()
            except Exception:
                self.handleError(logging.makeLogRecord({"msg": text}))

    def emit(self, record: logging.LogRecord) -> None:
        if self._waiting:
            self.write_waiting()  # lines logged before this record come first
        super().emit(record)

    def flush(self) -> None:
        if self._waiting:
            self.write_waiting()
        super().flush()


def line_sink(logger: logging.Logger) -> LineHandler | None:
    """wf's handler, if a record from ``logger`` would reach it and nothing else
    (see the module doc); ``None`` otherwise (log through ``logging``).

    The caller tests ``logger.isEnabledFor(level)`` first, as ``logging`` does."""
    if logging.getLogRecordFactory() is not logging.LogRecord:
        return None
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters or current.disabled:
            return None
        handlers = current.handlers
        if handlers:
            if current.parent is not None or len(handlers) != 1:
                return None
            handler = handlers[0]
            if (
                type(handler) is not LineHandler
                or handler.formatter is not handler.line_formatter
                # The one filter the direct path may skip: write_line scrubs the same.
                or any(type(f) is not RedactCredentials for f in handler.filters)
            ):
                return None
            return handler
        if not current.propagate:
            return None
        current = current.parent
    return None
