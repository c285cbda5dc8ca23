"""Real processes for end-to-end tests: ``wf-rpc-server`` and ``wf worker`` on loopback.

The scripts are the ones installed next to the interpreter running the
tests (no ``uv run`` per process: it would add a second per start). Every
wait is bounded; :class:`Processes` kills whatever is still running when the
test ends, pass or fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 20.0
"""Bound for a process to come up (import time on a loaded 2-core machine)."""
STOP_TIMEOUT_S = 15.0
"""Bound for a process to exit after SIGTERM."""


def _lines_into(stream: IO[str], sink: queue.Queue[str]) -> None:
    with stream:
        for line in stream:
            sink.put(line)


def wait_listening(
    proc: subprocess.Popen[str],
    log_path: Path,
    timeout_s: float,
    lines: queue.Queue[str] | None = None,
) -> int:
    """The port from a starting ``wf-rpc-server``'s ``listening`` line on its stdout.

    Fails (with the tail of the server's stderr log at ``log_path``) when the
    process exits first or ``timeout_s`` passes. The stdout lines after
    ``listening`` keep arriving in ``lines`` when the caller passes a queue.
    """
    assert proc.stdout is not None
    if lines is None:
        lines = queue.Queue()
    threading.Thread(target=_lines_into, args=(proc.stdout, lines), daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or proc.poll() is not None:
            raise AssertionError(
                f"server did not start (exit {proc.poll()}): {log_path.read_text()[-2000:]}"
            )
        try:
            line = lines.get(timeout=min(remaining, 0.5))
        except queue.Empty:
            continue
        event = json.loads(line)
        if event.get("event") == "listening":
            return int(event["port"])


@contextmanager
def rpc_server(root: Path, *flags: str, start_timeout_s: float = START_TIMEOUT_S) -> Iterator[str]:
    """A ``wf-rpc-server`` on ``root / "store"`` with ``flags``; yields its URL.

    For module-scoped fixtures that share one server; the log is
    ``root / "server.log"``. SIGTERM on exit, SIGKILL if it does not stop in time.
    """
    log_path = root / "server.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            [BIN / "wf-rpc-server", "--store-root", root / "store", "--port", "0", *flags],
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
        )
    try:
        port = wait_listening(proc, log_path, start_timeout_s)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@dataclass
class ServerProcess:
    """A running ``wf-rpc-server``."""

    proc: subprocess.Popen[str]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL: no drain, no flush beyond what was committed."""
        self.proc.kill()
        self.proc.wait(STOP_TIMEOUT_S)

    def stop(self) -> int:
        """SIGTERM (drain) and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(STOP_TIMEOUT_S)


@dataclass
class WorkerProcess:
    """A running ``wf worker``; its JSON log lines are in ``log_path``."""

    proc: subprocess.Popen[bytes]
    worker_id: str
    log_path: Path

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(STOP_TIMEOUT_S)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(STOP_TIMEOUT_S)

    def logs(self) -> list[dict[str, Any]]:
        """Every JSON log line so far."""
        lines = []
        for raw in self.log_path.read_text().splitlines():
            try:
                lines.append(json.loads(raw))
            except json.JSONDecodeError:
                continue
        return lines

    def actions(self, action: str) -> list[dict[str, Any]]:
        return [line for line in self.logs() if line.get("action") == action]


@dataclass
class Processes:
    """Starts processes under ``tmp``; :meth:`close` kills the survivors."""

    tmp: Path
    started: list[subprocess.Popen[Any]] = field(default_factory=list)

    def server(
        self,
        store_root: Path,
        *flags: str,
        port: int = 0,
        config: dict[str, Any] | None = None,
        lines: queue.Queue[str] | None = None,
    ) -> ServerProcess:
        """Start a server with ``flags`` and wait for its ``listening`` line (the
        stdout lines after it arrive in ``lines``, if given)."""
        config_path = self.tmp / f"server-{len(self.started)}.json"
        config_path.write_text(json.dumps(config or {}))
        log_path = self.tmp / f"server-{len(self.started)}.log"
        with log_path.open("w") as log_file:
            proc = subprocess.Popen(
                [
                    str(BIN / "wf-rpc-server"),
                    "--store-root",
                    str(store_root),
                    "--port",
                    str(port),
                    "--config",
                    str(config_path),
                    *flags,
                ],
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                cwd=REPO,
            )
        self.started.append(proc)
        port = wait_listening(proc, log_path, START_TIMEOUT_S, lines)
        return ServerProcess(proc=proc, port=port, log_path=log_path)

    def worker(
        self,
        server_url: str,
        worker_id: str,
        *extra: str,
        app: str = "tests.e2e.sample_app:worker",
    ) -> WorkerProcess:
        """Start ``wf worker`` (it registers on its own; see :func:`wait_until`)."""
        log_path = self.tmp / f"{worker_id}.log"
        with log_path.open("w") as log_file:
            proc = subprocess.Popen(
                [
                    str(BIN / "wf"),
                    "worker",
                    "--app",
                    app,
                    "--server",
                    server_url,
                    "--worker-id",
                    worker_id,
                    *extra,
                ],
                stdout=subprocess.DEVNULL,
                stderr=log_file,
                cwd=REPO,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.started.append(proc)
        return WorkerProcess(proc=proc, worker_id=worker_id, log_path=log_path)

    def close(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
        for proc in self.started:
            proc.wait(STOP_TIMEOUT_S)
            if proc.stdout is not None:
                proc.stdout.close()


@contextmanager
def processes(tmp: Path) -> Iterator[Processes]:
    """Processes that cannot outlive the test."""
    ps = Processes(tmp)
    try:
        yield ps
    finally:
        ps.close()


def wait_until(check: Callable[[], bool], what: str, timeout_s: float) -> None:
    """Poll ``check`` until it holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


class Admin:
    """A blocking admin client for tests (one private event loop)."""

    CALL_TIMEOUT_S = 10.0

    def __init__(self, url: str) -> None:
        from wf.client.rpc_client import RpcClient

        self._runner = asyncio.Runner()
        self._client = RpcClient(url)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self._runner.run(
            asyncio.wait_for(self._client.call(method, params or {}), self.CALL_TIMEOUT_S)
        )

    def batch(self, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        return self._runner.run(asyncio.wait_for(self._client.batch(calls), self.CALL_TIMEOUT_S))

    def states(self, activity_ids: list[str]) -> dict[str, str]:
        """Activity id -> state (live or finished), in one request."""
        views = self.batch([("scheduler.activities.get", {"activity_id": a}) for a in activity_ids])
        states = {}
        for aid, view in zip(activity_ids, views, strict=True):
            if isinstance(view, Exception):
                raise view
            live = view["activity"]
            states[aid] = str(live["state"] if live is not None else view["finished_state"])
        return states

    def history(self, activity_id: str) -> list[dict[str, Any]]:
        page = self.call("scheduler.activities.history", {"activity_id": activity_id, "limit": 100})
        assert page["next_cursor"] is None  # the whole history fits one page here
        rows: list[dict[str, Any]] = page["transitions"]
        return rows

    def active_workers(self) -> set[str]:
        return {
            w["info"]["worker_id"]
            for w in self.call("scheduler.workers.list", {"limit": 100})["workers"]
            if w["status"] == "active"
        }

    def close(self) -> None:
        self._runner.run(self._client.close())
        self._runner.close()
