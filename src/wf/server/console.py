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
  ``no-referrer`` and ``X-Frame-Options: DENY``;
* ``/`` and ``/ui`` redirect to ``/ui/``. With ``server.ui.enabled`` false
  (``--no-ui``) nothing is installed and those paths are 404.

Nothing here is on the dispatch path: the routes are plain GETs that read a
dictionary.
"""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from aiohttp import web

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
"""Headers on every console answer (redirects included)."""

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

    def install(self, app: web.Application) -> None:
        """Add ``GET /``, ``GET /ui`` and ``GET /ui/{path}`` to ``app``."""
        app.router.add_get("/", self._to_console)
        app.router.add_get("/ui", self._to_console)
        app.router.add_get(UI_PATH + "{path:.*}", self._file)

    async def _to_console(self, request: web.Request) -> web.StreamResponse:
        return web.Response(status=302, headers={"Location": UI_PATH, **SECURITY_HEADERS})

    async def _file(self, request: web.Request) -> web.StreamResponse:
        found = self.files.get(request.match_info["path"])
        if found is None:
            raise web.HTTPNotFound()
        headers = {**SECURITY_HEADERS, "ETag": found.etag, "Cache-Control": "no-cache"}
        if found.etag in request.headers.get("If-None-Match", ""):
            return web.Response(status=304, headers=headers)
        return web.Response(
            body=found.body, headers={**headers, "Content-Type": found.content_type}
        )
