"""A real ``wf-rpc-server`` whose store stops taking writes (issue 13, item 3): it says
so (log, ``/readyz``), recovers by itself once the store takes writes again, and
exits with code 3 when it cannot (deadline passed, or SIGTERM while stopped).

The failure is real and reversible. SQLite: the server process's file-size limit
(``RLIMIT_FSIZE``, set from outside with ``prlimit``) drops to one byte, so every
write to the database's WAL and to the lock file fails with ``EFBIG`` while reads
go on; Python ignores ``SIGXFSZ``, so the writes fail instead of killing the
process. PostgreSQL: a trigger on the write fence's row refuses every write
transaction (and the reload's new ownership epoch). Both are undone the same
way. Every wait is bounded.
"""

from __future__ import annotations

import json
import queue
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _node_locations import Location
from psycopg import sql

from wf.activities import echo
from wf.client.app import App
from wf.errors import NotFound, StoreUnavailable
from wf.scheduler.model import ActivityState

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
"""Bound for the server to come up (imports on a loaded 2-core machine)."""
WAIT_MAX_S = 30.0
"""Bound on any other wait."""
EXIT_WRITES_STOPPED = 3


@dataclass
class Server:
    """A running ``wf-rpc-server`` whose stderr is collected as it comes."""

    proc: subprocess.Popen[str]
    port: int
    stderr: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def logs(self, action: str) -> list[dict[str, Any]]:
        found = []
        for line in list(self.stderr):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("action") == action:
                found.append(record)
        return found

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as response:
                return int(response.status), json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


def _drain(stream: Any, sink: list[str], events: queue.Queue[str] | None = None) -> None:
    with stream:
        for line in stream:
            sink.append(line)
            if events is not None:
                events.put(line)


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[[Location, float], Server]]:
    started: list[subprocess.Popen[str]] = []

    def start(location: Location, deadline_s: float) -> Server:
        config = tmp_path / f"config-{len(started)}.json"
        config.write_text(
            json.dumps(
                {
                    "server": {
                        "store": {
                            "recovery_deadline_s": deadline_s,
                            "recovery_backoff_max_s": 0.2,
                        }
                    }
                }
            )
        )
        where = (
            ["--store-root", str(location.store_root)]
            if location.dsn is None
            else ["--postgres", location.dsn, "--postgres-schema", location.schema]
        )
        proc = subprocess.Popen(
            [
                str(BIN / "wf-rpc-server"),
                *where,
                "--port",
                "0",
                "--workers",
                "1",
                "--config",
                str(config),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        started.append(proc)
        assert proc.stdout is not None
        assert proc.stderr is not None
        server_lines: list[str] = []
        events: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_drain, args=(proc.stdout, [], events), daemon=True).start()
        threading.Thread(target=_drain, args=(proc.stderr, server_lines), daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert time.monotonic() < deadline, f"no start: {''.join(server_lines)[-2000:]}"
            try:
                event = json.loads(events.get(timeout=0.5))
            except queue.Empty:
                assert proc.poll() is None, f"exited: {''.join(server_lines)[-2000:]}"
                continue
            if event.get("event") == "listening":
                return Server(proc=proc, port=int(event["port"]), stderr=server_lines)

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(WAIT_MAX_S)


class Fault:
    """Stops and restarts a server's store writes from outside the process."""

    def __init__(self, location: Location, server: Server) -> None:
        self.location = location
        self.server = server

    def stop_writes(self) -> None:
        if self.location.dsn is None:
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.prlimit(self.server.proc.pid, resource.RLIMIT_FSIZE, (1, hard))
            return
        schema = sql.Identifier(self.location.schema)
        with psycopg.connect(self.location.dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "CREATE FUNCTION {}.wf_test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$"
                ).format(schema)
            )
            conn.execute(
                sql.SQL(
                    "CREATE TRIGGER wf_test_refuse BEFORE UPDATE ON {}.fence "
                    "FOR EACH ROW EXECUTE FUNCTION {}.wf_test_refuse()"
                ).format(schema, schema)
            )

    def resume_writes(self) -> None:
        if self.location.dsn is None:
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.prlimit(self.server.proc.pid, resource.RLIMIT_FSIZE, (hard, hard))
            return
        with psycopg.connect(self.location.dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP FUNCTION {}.wf_test_refuse() CASCADE").format(
                    sql.Identifier(self.location.schema)
                )
            )


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_MAX_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def completed(app: Any, activity_id: str) -> bool:
    return bool(app.get_activity(activity_id).finished_state is ActivityState.COMPLETED)


def test_a_server_whose_store_refuses_writes_recovers_by_itself(
    location: Location, start_server: Callable[[Location, float], Server]
) -> None:
    server = start_server(location, 120.0)
    fault = Fault(location, server)
    with App.sync(server.url) as app:
        app.submit_activities([echo.activity("before", kwargs={"n": 1})])
        wait_until(lambda: completed(app, "before"), "a first activity to complete")
        assert server.get("/readyz")[0] == 200

        fault.stop_writes()
        with pytest.raises(StoreUnavailable) as refused:
            app.submit_activities([echo.activity("doomed", kwargs={"n": 2})])
        assert refused.value.retryable
        status, body = server.get("/readyz")
        assert status == 503
        assert body["status"] == "unavailable"
        assert body["reason"] in ("writes_stopped", "recovering")
        assert body["cause"] in ("store_unavailable", "OSError")
        assert server.get("/healthz")[0] == 200
        with pytest.raises(StoreUnavailable):
            app.get_activity("doomed")  # never stored, so never shown
        wait_until(lambda: bool(server.logs("node.recovery_failed")), "a failed reload")
        assert server.get("/readyz")[0] == 503  # reloads fail while the store refuses

        fault.resume_writes()
        wait_until(lambda: server.get("/readyz")[0] == 200, "/readyz to say ready again")
        with pytest.raises(NotFound):
            app.get_activity("doomed")
        app.submit_activities([echo.activity("after", kwargs={"n": 3})])
        wait_until(lambda: completed(app, "after"), "a submission after the recovery")
        [stopped] = server.logs("node.writes_stopped")
        assert stopped["level"] == "error"
        assert stopped["error"]  # the cause, for the operator
        assert len(server.logs("node.writes_resumed")) == 1

        # Stopped again, and told to stop before it recovered: not a clean exit.
        fault.stop_writes()
        with pytest.raises(StoreUnavailable):
            app.submit_activities([echo.activity("doomed-too", kwargs={"n": 4})])
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(WAIT_MAX_S) == EXIT_WRITES_STOPPED


def test_a_server_that_cannot_recover_in_time_exits_non_zero_or_steps_down(
    location: Location, start_server: Callable[[Location, float], Server]
) -> None:
    """SQLite: the lone server exits for its supervisor to restart it. PostgreSQL: a
    node of a cluster steps down to a standby instead, and campaigns until the store
    takes writes again, then serves (docs/ha.md)."""
    server = start_server(location, 1.5)
    fault = Fault(location, server)
    with App.sync(server.url, failover_timeout_s=0) as app:
        app.submit_activities([echo.activity("before", kwargs={"n": 1})])
        # Done first: an in-process worker holding a result it cannot deliver would
        # hold the drain for its drain timeout.
        wait_until(lambda: completed(app, "before"), "a first activity to complete")
        fault.stop_writes()
        with pytest.raises(StoreUnavailable):
            app.submit_activities([echo.activity("doomed", kwargs={"n": 2})])
    if location.dsn is not None:
        wait_until(lambda: bool(server.logs("node.recovery_gave_up")), "the give-up line")
        wait_until(lambda: server.get("/readyz")[1].get("role") == "standby", "the step down")
        assert server.proc.poll() is None
        fault.resume_writes()
        wait_until(lambda: server.get("/readyz")[0] == 200, "the node to serve again")
        return
    assert server.proc.wait(WAIT_MAX_S) == EXIT_WRITES_STOPPED
    wait_until(lambda: bool(server.logs("node.recovery_gave_up")), "the give-up line")
    [gave_up] = server.logs("node.recovery_gave_up")
    assert gave_up["level"] == "error"
