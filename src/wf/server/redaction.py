"""No credential in any log line: a logging filter that scrubs them.

Theory of operation
-------------------
A bearer token reaches a log line when something logs request data: aiohttp's
``aiohttp.server`` logger writes the whole offending header line (token
included) when its parser refuses a request, for instance a valid token
followed by a stray CR, LF or NUL; a traceback may quote a header value in
an exception message. The HTTP edge (:mod:`wf.server.http_edge`) no longer
logs parser messages, and wf never logs headers, but a filter makes the rule
hold for whatever a library logs tomorrow.

:class:`RedactCredentials` rewrites a record before any handler formats it:
its message (arguments merged in), its traceback text and its string extra
fields. Whatever follows ``Bearer`` or an ``Authorization`` /
``Proxy-Authorization`` key (``:``, ``=`` or a quoted dict key) up to the end
of the line is replaced with :data:`REDACTED`. The end of the line, not the
end of a token-like run, because a token may hold any character a log line
can show (quotes, backslashes, escapes such as ``\\x00``); losing the rest of
such a line is the price of never showing part of a credential.

It is installed twice, so that both paths are covered:
:func:`install_log_redaction` puts it on the loggers of the libraries under
the server (aiohttp's and asyncio's), so a record is clean for *every*
handler, a test's capture included; :func:`~wf.server.logs.configure_logging`
puts it on wf's own handler, which sees every record that reaches standard
error, wf's included.
"""

from __future__ import annotations

import logging
import re
from typing import Final

REDACTED: Final = "[redacted]"
"""What replaces a credential."""

LIBRARY_LOGGERS: Final = (
    "aiohttp.access",
    "aiohttp.client",
    "aiohttp.internal",
    "aiohttp.server",
    "aiohttp.web",
    "aiohttp.websocket",
    "asyncio",
)
"""Loggers that may quote request data, filtered at the source."""

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
_STANDARD_ATTRIBUTES: Final = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys() | {"message", "asctime"}
)


def redact(text: str) -> str:
    """``text`` with every credential replaced (see the module docstring)."""
    if _HINT.search(text) is None:
        return text
    return _CREDENTIAL.sub(lambda m: m.group(1) + REDACTED, text)


class RedactCredentials(logging.Filter):
    """Scrubs credentials out of a record in place; never drops one."""

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


def install_log_redaction() -> None:
    """Put :class:`RedactCredentials` on :data:`LIBRARY_LOGGERS` (once each)."""
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactCredentials) for f in logger.filters):
            logger.addFilter(RedactCredentials())
