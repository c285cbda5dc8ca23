"""How the server serves the console: paths, headers, caching, and turning it off.

No browser here: these read the HTTP answers themselves (the browser tests are in
``test_console_browser.py``).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import aiohttp
import pytest
from _console import World, get

from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig, UiConfig
from wf.server.console import CONTENT_SECURITY_POLICY, SECURITY_HEADERS, STATIC_ROOT
from wf.server.main import apply_flags, build_parser, sample_hint
from wf.server.sample import SampleReport

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'"
)


def test_the_console_is_served_at_ui_with_strict_security_headers(world: World) -> None:
    for path in ("/", "/ui"):
        status, headers, _ = get(world.url, path)
        assert (status, headers["Location"]) == (302, "/ui/"), path
    status, headers, body = get(world.url, "/ui/")
    assert status == 200
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Content-Security-Policy"] == CSP == CONTENT_SECURITY_POLICY
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Cache-Control"] == "no-cache"
    assert b"<title>wf console</title>" in body
    # No inline script or style for the policy to refuse.
    assert re.search(rb"<script(?![^>]*\bsrc=)", body) is None
    assert b"style=" not in body
    assert b"<style" not in body

    status, headers, _script = get(world.url, "/ui/js/app.js")
    assert (status, headers["Content-Type"]) == (200, "text/javascript; charset=utf-8")
    assert headers["Content-Security-Policy"] == CSP
    status, _, _ = get(world.url, "/ui/js/app.js", {"If-None-Match": headers["ETag"]})
    assert status == 304
    status, _, _ = get(world.url, "/ui/js/nothing-here.js")
    assert status == 404


def test_the_console_renders_data_only_as_text() -> None:
    """No script of the console parses markup: every value goes through textContent."""
    scripts = sorted((STATIC_ROOT / "js").glob("*.js"))
    assert scripts
    for script in scripts:
        text = script.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in text, f"{script.name} uses {sink}"
        assert 'setAttribute("style"' not in text
        assert ".cookie" not in text


def test_no_ui_and_the_config_option_turn_the_console_off(tmp_path: Path) -> None:
    assert apply_flags(ServerConfig(), build_parser().parse_args([])).server.ui.enabled
    off = apply_flags(ServerConfig(), build_parser().parse_args(["--no-ui"]))
    assert off.server.ui.enabled is False

    async def main() -> None:
        section = ServerSection(
            port=0, store=StoreConfig(root=str(tmp_path / "store")), ui=UiConfig(enabled=False)
        )
        server = WfServer(ServerConfig(server=section))
        await server.start()
        try:
            async with aiohttp.ClientSession() as session:
                for path in ("/", "/ui", "/ui/", "/ui/js/app.js"):
                    async with session.get(
                        f"http://127.0.0.1:{server.port}{path}", allow_redirects=False
                    ) as response:
                        assert response.status == 404, path
                async with session.get(f"http://127.0.0.1:{server.port}/healthz") as response:
                    assert response.status == 200
        finally:
            await server.stop()

    asyncio.run(main())


def test_the_main_jobs_note_names_the_console_unless_it_is_off() -> None:
    report = SampleReport(oneshot_id="hello-soon", oneshot_at="2026-12-01T00:00:05Z")
    note = sample_hint(report, 8765, 2, ui=True)
    assert "watch it in a browser: http://127.0.0.1:8765/ui (the operator console)" in note
    assert "/ui" not in sample_hint(report, 8765, 2, ui=False)


@pytest.mark.parametrize("name", ["index.html", "app.css", "js/app.js", "favicon.svg"])
def test_the_console_files_ship_inside_the_package(name: str) -> None:
    assert (STATIC_ROOT / name).is_file()
    assert STATIC_ROOT.parts[-3:] == ("wf", "console", "static")


def test_every_answer_on_a_console_path_carries_the_security_headers(tmp_path: Path) -> None:
    """Not only the files: the redirects, a 304, a 404 of a missing file, the 405 the
    router answers to another method, and a HEAD, all carry the same headers."""

    async def main() -> None:
        section = ServerSection(port=0, store=StoreConfig(root=str(tmp_path / "store")))
        server = WfServer(ServerConfig(server=section))
        await server.start()
        base = f"http://127.0.0.1:{server.port}"
        seen: dict[tuple[str, str], int] = {}
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{base}/ui/index.html") as response:
                    etag = response.headers["ETag"]
                for method, path, extra in (
                    ("GET", "/", {}),
                    ("GET", "/ui", {}),
                    ("GET", "/ui/", {}),
                    ("GET", "/ui/index.html", {"If-None-Match": etag}),
                    ("GET", "/ui/js/nothing-here.js", {}),
                    ("GET", "/ui/no/such/folder/", {}),
                    ("HEAD", "/ui/app.css", {}),
                    ("POST", "/ui/", {}),
                    ("DELETE", "/ui", {}),
                ):
                    async with session.request(
                        method, f"{base}{path}", headers=extra, allow_redirects=False
                    ) as response:
                        seen[(method, path)] = response.status
                        for name, value in SECURITY_HEADERS.items():
                            assert response.headers.get(name) == value, (method, path, name)
        finally:
            await server.stop()
        assert seen == {
            ("GET", "/"): 302,
            ("GET", "/ui"): 302,
            ("GET", "/ui/"): 200,
            ("GET", "/ui/index.html"): 304,
            ("GET", "/ui/js/nothing-here.js"): 404,
            ("GET", "/ui/no/such/folder/"): 404,
            ("HEAD", "/ui/app.css"): 200,
            ("POST", "/ui/"): 405,
            ("DELETE", "/ui"): 405,
        }

    asyncio.run(main())
