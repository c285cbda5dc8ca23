"""The operator console: a browser page served by ``wf-rpc-server`` at ``/ui``.

Theory of operation
-------------------
The console is static files (``wf/console/static/``: one HTML page, ES
modules, one stylesheet; no build step; shipped in the wheel as package
data) that talk to the server's existing JSON-RPC API (``POST /rpc``) with
the same bearer tokens every other client uses; it has no API of its own,
so roles and tenant scoping are exactly those of JSON-RPC
(docs/console.md). This module only serves the files:

* they are read once when the server is built and answered from memory, each
  with a strong ``ETag`` (``Cache-Control: no-cache``: a browser revalidates,
  and an upgraded server is never shadowed by a stale cached script);
* every answer carries the headers of :data:`SECURITY_HEADERS`: a strict
  Content-Security-Policy (scripts and styles from this origin only, no
  inline script or style, no framing, no ``<base>``), ``nosniff``,
  ``no-referrer`` and ``X-Frame-Options: DENY``. That is every answer to a
  console path, not only the files: their ``304``, the redirects, the ``404``
  of a missing file, the ``405`` to another method (the console answers every
  standard method on its paths itself, so the router's bare ``405`` never
  does) and a ``500`` should a handler fail;
* ``/`` and ``/ui`` redirect to ``/ui/``. With ``server.ui.enabled`` false
  (``--no-ui``) nothing is installed and those paths are 404.

Nothing here is on the dispatch path: the routes are plain GETs that read a
dictionary (:class:`wf.server.http_server.Router` routes).
"""

from __future__ import annotations

import hashlib
import http
import logging
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from wf.errors import Internal, InvalidArgument
from wf.server.http_server import Handler, Request, Response, Router, rpc_error
from wf.server.rpc import INTERNAL_ERROR, INVALID_REQUEST

log = logging.getLogger("wf.server.console")

STATIC_ROOT: Final = Path(__file__).resolve().parents[1] / "console" / "static"
"""The console's files (``src/wf/console/static``)."""
UI_PATH: Final = "/ui/"
"""Where the console lives."""

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'"
)
"""No inline script or style, nothing from another origin, no framing."""

SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}
"""Headers on every console answer (redirects and errors included)."""


CONSOLE_METHODS: Final = ("GET", "HEAD")
"""What the console answers; every other standard method gets its ``405``."""
_ALLOW: Final = {"Allow": ", ".join(CONSOLE_METHODS)}
_REFUSED_METHODS: Final = tuple(m.value for m in http.HTTPMethod if m.value not in CONSOLE_METHODS)


_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}


@dataclass(frozen=True, slots=True)
class StaticFile:
    """One file of the console, as served."""

    body: bytes
    content_type: str
    etag: str


def load_static() -> dict[str, StaticFile]:
    """Every file under ``static/`` by its path below ``/ui/`` (``index.html`` also as
    the empty path)."""
    files: dict[str, StaticFile] = {}
    pending = [("", STATIC_ROOT)]
    while pending:
        prefix, folder = pending.pop()
        for entry in folder.iterdir():
            name = prefix + entry.name
            if entry.is_dir():
                pending.append((name + "/", entry))
                continue
            suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
            content_type = _TYPES.get(suffix) or (
                mimetypes.guess_type(entry.name)[0] or "application/octet-stream"
            )
            body = entry.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
            files[name] = StaticFile(body, content_type, etag)
    files[""] = files["index.html"]
    return files


class Console:
    """The console's routes on one server (see the module docstring)."""

    def __init__(self) -> None:
        self.files = load_static()

    def install(self, router: Router) -> None:
        """Serve ``/`` and ``/ui`` (redirects) and ``/ui/...`` (the files) on ``router``:
        ``GET`` (and so ``HEAD``), and a ``405`` with the console's headers to every
        other standard method."""
        for path in ("/", "/ui"):
            router.add("GET", path, _secured(self._to_console))
            for method in _REFUSED_METHODS:
                router.add(method, path, _not_allowed)
        router.add_prefix("GET", UI_PATH, _secured(self._file))
        for method in _REFUSED_METHODS:
            router.add_prefix(method, UI_PATH, _not_allowed)

    async def _to_console(self, request: Request) -> Response:
        return Response(302, headers={"Location": UI_PATH, **SECURITY_HEADERS})

    async def _file(self, request: Request) -> Response:
        found = self.files.get(request.match)
        if found is None:
            return rpc_error(
                404,
                InvalidArgument(f"the console has no file {request.path!r}", http_status=404),
                rpc_code=INVALID_REQUEST,
                headers=SECURITY_HEADERS,
            )
        headers = {**SECURITY_HEADERS, "ETag": found.etag, "Cache-Control": "no-cache"}
        if found.etag in request.headers.get("if-none-match", ""):
            return Response(304, headers=headers)
        return Response(body=found.body, content_type=found.content_type, headers=headers)


async def _not_allowed(request: Request) -> Response:
    return rpc_error(
        405,
        InvalidArgument(
            f"the console answers {' and '.join(CONSOLE_METHODS)} only", http_status=405
        ),
        rpc_code=INVALID_REQUEST,
        headers={**SECURITY_HEADERS, **_ALLOW},
    )


def _secured(handler: Handler) -> Handler:
    """``handler``, with a failure answered by a ``500`` that carries the console's
    headers too (the server's own ``500`` has none of them)."""

    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except Exception:
            log.exception(
                "internal error answering a console request",
                extra={"action": "http.internal_error", "status": 500},
            )
            return rpc_error(
                500,
                Internal("internal error serving the console"),
                rpc_code=INTERNAL_ERROR,
                headers=SECURITY_HEADERS,
            )

    return guarded
