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

:class:`RedactCredentials` (in :mod:`wf.log_lines`, beside the handler, so the
worker's process uses it too) rewrites a record before any handler formats it:
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
from typing import Final

from wf.log_lines import REDACTED, RedactCredentials, redact

__all__ = ["LIBRARY_LOGGERS", "REDACTED", "RedactCredentials", "install_log_redaction", "redact"]

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


def install_log_redaction() -> None:
    """Put :class:`RedactCredentials` on :data:`LIBRARY_LOGGERS` (once each)."""
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactCredentials) for f in logger.filters):
            logger.addFilter(RedactCredentials())
