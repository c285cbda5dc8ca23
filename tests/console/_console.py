"""The console's browser-test world: one real server with authentication, real workers,
seeded objects in two tenants, and a Chromium driven by Playwright.

Chromium is Debian's ``/usr/bin/chromium`` (``.ci/run`` installs it): Playwright's
own browser download is not used. Without it the tests are skipped locally and FAIL
under ``CI=true`` (CI never skips them).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from wf.server.auth import hash_token

CHROMIUM = Path(os.environ.get("WF_TEST_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = os.environ.get("WF_CONSOLE_SCREENSHOTS")
"""A folder to save each view's screenshot into (``docs/console`` regenerates the
docs' pictures: ``WF_CONSOLE_SCREENSHOTS=docs/console pytest tests/console``)."""
UI_TIMEOUT_MS = 10_000
"""Bound of every wait for the page (a loaded 2-core machine)."""

HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
"""A note and an input that would run script if the console parsed data as HTML."""

TOKENS = {
    "admin": "console-admin-token-0123456789abcdef",
    "ops": "console-operator-token-0123456789abcd",
    "viewer": "console-viewer-token-0123456789abcdef",
    "acme": "console-acme-operator-token-01234567",
    "acme-admin": "console-acme-admin-token-0123456789",
    "workers": "console-worker-token-0123456789abcdef",
}
ROLES = {
    "admin": ("admin", None),
    "ops": ("operator", None),
    "viewer": ("read-only", None),
    "acme": ("operator", ["acme"]),
    "acme-admin": ("admin", ["acme"]),
    "workers": ("worker", None),
}


def server_config(*, ui: bool = True) -> dict[str, Any]:
    """Authentication on (one credential per entry of :data:`TOKENS`), schedules kept."""
    credentials = []
    for name, token in TOKENS.items():
        role, tenants = ROLES[name]
        credential: dict[str, Any] = {"name": name, "role": role, "token_sha256": hash_token(token)}
        if tenants is not None:
            credential["tenants"] = tenants
        credentials.append(credential)
    return {
        "server": {
            "security": {"required": True, "credentials": credentials},
            "scheduler": {"enabled": True, "poll_interval_s": 0.2},
            "ui": {"enabled": ui},
        }
    }


class RpcFailure(Exception):
    """A JSON-RPC error answer."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.code = (error.get("data") or {}).get("code")
        self.error = error


def rpc(url: str, token: str, method: str, params: dict[str, Any] | None = None) -> Any:
    """One JSON-RPC call with a bearer token; the result, or RpcFailure."""
    answer = _post(
        url, token, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    )
    if "error" in answer:
        raise RpcFailure(answer["error"])
    return answer["result"]


def batch(url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """One JSON-RPC batch; each answer's result (an error answer raises)."""
    body = [{"jsonrpc": "2.0", "id": i, "method": m, "params": p} for i, (m, p) in enumerate(calls)]
    answers = sorted(_post(url, token, body), key=lambda a: a["id"])
    for answer in answers:
        if "error" in answer:
            raise RpcFailure(answer["error"])
    return [a["result"] for a in answers]


def _post(url: str, token: str, body: Any) -> Any:
    request = urllib.request.Request(
        f"{url}/rpc",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())


def get(url: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
    """``GET path`` without following redirects: status, headers, body."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    request = urllib.request.Request(f"{url}{path}", headers=headers or {})
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    """Poll ``check`` until it holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def require_chromium() -> None:
    """Skip without Chromium locally; fail under CI (browser tests never skip there)."""
    if CHROMIUM.exists():
        return
    message = f"Chromium not found at {CHROMIUM} (apt-get install -y chromium; .ci/run does)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


# ---------------------------------------------------------------- the world

FLOW_PLAN: dict[str, Any] = {
    "input_schema": {"type": "object", "required": ["v"]},
    "nodes": [
        {"kind": "activity", "id": "a", "activity_type": "console.echo",
         "args": {"value": {"$input": "v"}}, "idempotent": True},
        {"kind": "activity", "id": "b", "activity_type": "console.echo",
         "args": {"value": {"$node": "a"}}, "needs": ["a"], "idempotent": True},
        {"kind": "activity", "id": "c", "activity_type": "console.echo",
         "args": {"value": {"$node": "a"}}, "needs": ["a"], "idempotent": True},
        {"kind": "activity", "id": "d", "activity_type": "console.echo",
         "args": {"value": [{"$node": "b"}, {"$node": "c"}]}, "needs": ["b", "c"],
         "idempotent": True},
    ],
    "output": {"result": {"$node": "d"}},
}  # fmt: skip
BOOM_PLAN: dict[str, Any] = {
    "input_schema": {"type": "object", "required": ["msg"]},
    "nodes": [
        {"kind": "activity", "id": "a", "activity_type": "console.echo",
         "args": {"value": 1}, "idempotent": True},
        {"kind": "activity", "id": "explode", "activity_type": "console.boom",
         "args": {"message": {"$input": "msg"}}, "needs": ["a"],
         "retry": {"max_attempts": 1}},
    ],
}  # fmt: skip
GATE_PLAN: dict[str, Any] = {
    "input_schema": {"type": "object", "required": ["path"]},
    "nodes": [
        {"kind": "activity", "id": "wait", "activity_type": "console.gate",
         "args": {"path": {"$input": "path"}}, "idempotent": True},
    ],
}  # fmt: skip
ASK_PLAN: dict[str, Any] = {
    "nodes": [
        {"kind": "activity", "id": "a", "activity_type": "console.echo",
         "args": {"value": "x"}, "idempotent": True},
        {"kind": "interrupt", "id": "approve", "prompt": "Ship it?", "needs": ["a"],
         "input_schema": {"type": "boolean"}},
        {"kind": "activity", "id": "after", "activity_type": "console.echo",
         "args": {"value": {"$node": "approve"}}, "needs": ["approve"], "idempotent": True},
    ],
}  # fmt: skip


@dataclass
class World:
    """The running server and what the tests seeded."""

    url: str
    tmp: Path
    server_log: Path
    """The server's JSON log lines (stderr)."""
    runs: dict[str, str] = field(default_factory=dict)
    """Seeded run ids by purpose."""

    def call(self, who: str, method: str, params: dict[str, Any] | None = None) -> Any:
        return rpc(self.url, TOKENS[who], method, params)


def seed(world: World) -> None:
    """Artifacts, deployments in tenants acme and globex, schedules and runs."""
    call = world.call
    for artifact, plan in (("flow", FLOW_PLAN), ("boom", BOOM_PLAN), ("gate", GATE_PLAN),
                           ("ask", ASK_PLAN)):  # fmt: skip
        call(
            "admin",
            "workflow.artifacts.create",
            {"artifact_id": artifact, "version": 1, "plan": plan},
        )
    for artifact, tenant in (("flow", "acme"), ("flow", "globex"), ("boom", "acme"),
                             ("gate", "acme"), ("ask", "acme")):  # fmt: skip
        body = {"artifact_id": artifact, "artifact_version": 1, "name": tenant, "tenant": tenant}
        call("admin", "workflow.deployments.save", {"body": body})
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1.5))
    call("admin", "workflow.schedules.create", {
        "schedule_id": "acme.nightly", "deployment_id": "flow.acme", "inputs": {"v": "n"},
        "trigger": {"kind": "cron", "expression": "0 3 1 1 *", "timezone": "Europe/Paris"},
        "note": HOSTILE,
    })  # fmt: skip
    call("admin", "workflow.schedules.create", {
        "schedule_id": "acme.soon", "deployment_id": "flow.acme", "inputs": {"v": "s"},
        "trigger": {"kind": "oneshot", "at": soon}, "note": "fires once, soon",
    })  # fmt: skip
    call("admin", "workflow.schedules.create", {
        "schedule_id": "globex.hourly", "deployment_id": "flow.globex", "inputs": {"v": "g"},
        "trigger": {"kind": "cron", "expression": "0 0 1 1 *", "timezone": "UTC"},
        "note": "globex only",
    })  # fmt: skip

    def start(dep: str, inputs: dict[str, Any]) -> str:
        return call("admin", "workflow.runs.start", {"deployment_id": dep, "inputs": inputs})[
            "run_id"
        ]

    world.runs["flow"] = start("flow.acme", {"v": "plain"})
    world.runs["globex"] = start("flow.globex", {"v": HOSTILE})
    world.runs["boom"] = start("boom.acme", {"msg": "kaboom from the console test"})
    world.runs["gate"] = start("gate.acme", {"path": str(world.tmp / "never")})
    world.runs["ask"] = start("ask.acme", {})
    world.runs["cancel-me"] = start("gate.acme", {"path": str(world.tmp / "never-either")})

    def status(name: str) -> str:
        return str(call("admin", "workflow.runs.inspect", {"run_id": world.runs[name]})["status"])

    wanted = {"flow": "completed", "globex": "completed", "boom": "failed",
              "ask": "interrupted", "gate": "running"}  # fmt: skip
    wait_for(lambda: all(status(n) == s for n, s in wanted.items()), "the seeded runs' states")

    def occurrences() -> list[dict[str, Any]]:
        return call("admin", "workflow.schedules.occurrences.list", {"schedule_id": "acme.soon"})[
            "occurrences"
        ]

    wait_for(lambda: any(o.get("run_id") for o in occurrences()), "acme.soon to admit its run")


def screenshot(page: Any, name: str) -> None:
    """Save the page's picture as ``<name>.png`` when screenshots are asked for."""
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True)


@dataclass
class Browser:
    """One Chromium for a module; a fresh context (session storage) per sign-in."""

    browser: Any
    url: str
    contexts: list[Any] = field(default_factory=list)

    def signed_in(self, who: str, route: str = "") -> Any:
        """A page signed in through the login form as ``who``, at ``#route``."""
        context = self.browser.new_context(viewport={"width": 1360, "height": 900})
        self.contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(UI_TIMEOUT_MS)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on(
            "console",
            lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
        )
        page.errors = errors  # type: ignore[attr-defined]
        page.goto(f"{self.url}/ui/")
        page.get_by_test_id("token").fill(TOKENS[who])
        page.get_by_test_id("sign-in").click()
        page.get_by_test_id("who").wait_for()
        if route:
            page.goto(f"{self.url}/ui/#{route}")
        return page

    def close(self) -> None:
        for context in self.contexts:
            context.close()


def browser_for(url: str) -> Iterator[Browser]:
    """A headless Chromium (Debian's) driven by Playwright, closed afterwards."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        browser = Browser(chromium, url)
        try:
            yield browser
        finally:
            browser.close()
            chromium.close()
