"""The README's main job: ``wf-rpc-server --store-root DIR --sample``.

The real script runs as a subprocess (the one installed next to the test
interpreter, as in ``tests/e2e/_servers.py``) on a fresh store: it listens,
installs the sample, and its one-shot schedule fires within seconds; the
``wf`` CLI (run in-process, as a newcomer would run it in another terminal)
shows the occurrence completed and the run's output. SIGTERM drains (exit
0). A second start over the same store finds the sample in place, creates a
fresh one-shot (schedule ids are never reused) and admits again. The flag
logic and the sample's idempotence are also checked in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from wf.cli.main import main as wf_main
from wf.server.config import ServerConfig
from wf.server.local import build_local_static_workflow_server
from wf.server.main import apply_flags, build_parser, main, worker_count
from wf.server.rpc import ANONYMOUS_ADMIN
from wf.server.sample import (
    CRON_SCHEDULE_ID,
    DEPLOYMENT_ID,
    EXPECTED_OUTPUT,
    ONESHOT_DELAY_S,
    install_sample,
)

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
"""Bound for the server to listen and install the sample (imports on a loaded machine)."""
RUN_TIMEOUT_S = ONESHOT_DELAY_S + 30.0
"""Bound for the one-shot to fire and its run to complete."""
STOP_TIMEOUT_S = 20.0
"""Bound for the drain after SIGTERM."""


def _lines_into(stream: IO[str], sink: queue.Queue[str]) -> None:
    with stream:
        for line in stream:
            sink.put(line)


@dataclass
class SampleServer:
    """A running ``wf-rpc-server --sample``: its events so far and its log file."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[str]
    reader: threading.Thread
    log_path: Path
    events: list[dict[str, Any]]

    def event(self, name: str, timeout_s: float) -> dict[str, Any]:
        """The first stdout event called ``name`` (waiting up to ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for event in self.events:
                if event.get("event") == name:
                    return event
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"no {name!r} event within {timeout_s} s (exit {self.proc.poll()}); "
                    f"events {self.events}; log: {self.log_path.read_text()[-3000:]}"
                )
            try:
                line = self.lines.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    # The process is gone: once the reader has drained its stdout
                    # (EOF), nothing more can come.
                    self.reader.join(timeout=remaining)
                    if self.lines.empty():
                        deadline = 0.0
                continue
            self.events.append(json.loads(line))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.event('listening', START_TIMEOUT_S)['port']}"

    def stop(self) -> int:
        """SIGTERM (drain) and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(STOP_TIMEOUT_S)

    def log_actions(self, action: str) -> list[dict[str, Any]]:
        """The JSON log lines with ``action``."""
        found = []
        for raw in self.log_path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                line = json.loads(raw)
                if isinstance(line, dict) and line.get("action") == action:
                    found.append(line)
        return found


@contextlib.contextmanager
def sample_server(store_root: Path, log_path: Path) -> Iterator[SampleServer]:
    """``wf-rpc-server --store-root store_root --sample --port 0``, killed if still running."""
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            [
                str(BIN / "wf-rpc-server"),
                "--store-root",
                str(store_root),
                "--sample",
                "--port",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
            cwd=REPO,
        )
    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=_lines_into, args=(proc.stdout, lines), daemon=True)
    reader.start()
    try:
        yield SampleServer(proc=proc, lines=lines, reader=reader, log_path=log_path, events=[])
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(STOP_TIMEOUT_S)


def wf(*argv: str) -> Any:
    """``wf ARGV --json`` in-process; its decoded answer (fails on a non-zero exit)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = wf_main([*argv, "--json"])
    assert code == 0, f"wf {' '.join(argv)} exited {code}: {err.getvalue()}"
    return json.loads(out.getvalue())


def wait_for_completed_occurrence(url: str, schedule_id: str) -> dict[str, Any]:
    """Poll ``wf schedules occurrences`` until the schedule's occurrence completed."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    page: dict[str, Any] = {}
    while time.monotonic() < deadline:
        page = wf("schedules", "occurrences", schedule_id, "--server", url)
        for occurrence in page["occurrences"]:
            if occurrence["status"] == "completed":
                return dict(occurrence)
            assert occurrence["status"] in {"pending", "admitted", "running"}, page
        time.sleep(0.2)
    pytest.fail(f"{schedule_id}: no completed occurrence within {RUN_TIMEOUT_S} s: {page}")


def check_run(url: str, run_id: str, schedule_id: str) -> None:
    run = wf("runs", "inspect", run_id, "--server", url)
    assert run["status"] == "completed", run
    assert run["output"] == EXPECTED_OUTPUT
    assert run["trigger"]["kind"] == "schedule"
    assert run["trigger"]["schedule_id"] == schedule_id
    listed = wf("runs", "list", "--schedule", schedule_id, "--server", url)
    assert [r["run_id"] for r in listed["runs"]] == [run_id]


def test_main_job_runs_the_sample_and_restarts_over_its_store(tmp_path: Path) -> None:
    store = tmp_path / ".wf_store"

    # A fresh store: the sample is installed and the one-shot fires within seconds.
    with sample_server(store, tmp_path / "first.log") as server:
        url = server.url
        listening = server.event("listening", START_TIMEOUT_S)
        assert listening["workers"] == 2
        assert listening["scheduler"] is True
        sample = server.event("sample", START_TIMEOUT_S)
        assert sample["oneshot_schedule"] == "hello-soon"
        assert sample["cron_schedule"] == CRON_SCHEDULE_ID
        assert sample["deployment"] == DEPLOYMENT_ID
        assert sample["existing"] == []
        assert sorted(sample["created"]) == sorted(
            [
                "artifact hello_schedule v1",
                f"deployment {DEPLOYMENT_ID}",
                f"schedule {CRON_SCHEDULE_ID}",
                "schedule hello-soon",
            ]
        )
        schedules = {s["schedule_id"]: s for s in wf("schedules", "list", "--server", url)}
        assert schedules[CRON_SCHEDULE_ID]["trigger"]["expression"] == "* * * * *"
        assert schedules["hello-soon"]["trigger"]["kind"] == "oneshot"

        occurrence = wait_for_completed_occurrence(url, "hello-soon")
        check_run(url, occurrence["run_id"], "hello-soon")
        assert server.stop() == 0
        assert server.event("stopped", STOP_TIMEOUT_S)
        # The newcomer's view: the hint names the commands, the log shows progress.
        log = server.log_path.read_text()
        assert "uv run wf schedules occurrences hello-soon --server" in log
        assert "uv run wf runs list --server" in log
        admitted = [line["run_id"] for line in server.log_actions("run.admitted")]
        completed = [line["run_id"] for line in server.log_actions("run.completed")]
        assert occurrence["run_id"] in admitted
        assert occurrence["run_id"] in completed
        assert server.log_actions("worker.stopped"), "the in-process workers were not drained"

    # The same store again: the sample is in place, a fresh one-shot admits again.
    with sample_server(store, tmp_path / "second.log") as server:
        url = server.url
        sample = server.event("sample", START_TIMEOUT_S)
        assert sample["oneshot_schedule"] == "hello-soon-2"
        assert sample["created"] == ["schedule hello-soon-2"]
        assert sorted(sample["existing"]) == sorted(
            [
                "artifact hello_schedule v1",
                f"deployment {DEPLOYMENT_ID}",
                f"schedule {CRON_SCHEDULE_ID}",
            ]
        )
        occurrence = wait_for_completed_occurrence(url, "hello-soon-2")
        check_run(url, occurrence["run_id"], "hello-soon-2")
        # The first start's history is still there.
        first = wf("schedules", "occurrences", "hello-soon", "--server", url)
        assert [o["status"] for o in first["occurrences"]] == ["completed"]
        assert server.stop() == 0
        assert server.event("stopped", STOP_TIMEOUT_S)


# ------------------------------------------------------------- in-process


def _flags(*argv: str, config: ServerConfig | None = None) -> tuple[ServerConfig, int]:
    args = build_parser().parse_args(list(argv))
    applied = apply_flags(config or ServerConfig(), args)
    return applied, worker_count(applied, args)


def test_sample_implies_the_scheduler_and_two_workers() -> None:
    config, workers = _flags("--sample")
    assert config.server.scheduler.enabled
    assert workers == 2
    config, workers = _flags("--sample", "--workers", "0")
    assert config.server.scheduler.enabled
    assert workers == 0
    config, workers = _flags("--workers", "3")
    assert not config.server.scheduler.enabled
    assert workers == 3
    config, workers = _flags()
    assert not config.server.scheduler.enabled
    assert workers == 0


@pytest.mark.parametrize(
    ("argv", "config", "message"),
    [
        (["--workers", "-1"], None, "--workers must be >= 0"),
        (
            ["--sample"],
            {"server": {"security": {"required": True}}},
            "not with TLS or authentication",
        ),
        (["--workers", "1", "--host", "192.0.2.1"], None, "is not reachable there"),
    ],
)
def test_in_process_workers_are_refused_where_they_could_not_work(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    config: dict[str, Any] | None,
    message: str,
) -> None:
    extra = []
    if config is not None:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        extra = ["--config", str(path)]
    assert main(["--store-root", str(tmp_path / "store"), *extra, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wf-rpc-server: error:")
    assert message in err


def test_install_sample_is_idempotent_and_never_reuses_schedule_ids(tmp_path: Path) -> None:
    async def scenario() -> None:
        local = build_local_static_workflow_server(
            tmp_path / "store", activities=[], schedules=True, durability="process"
        )
        async with local:
            first = await install_sample(local.server)
            assert first.oneshot_id == "hello-soon"
            assert first.cron_id == CRON_SCHEDULE_ID
            assert first.existing == []
            second = await install_sample(local.server)
            assert second.oneshot_id == "hello-soon-2"
            assert second.created == ["schedule hello-soon-2"]
            assert len(second.existing) == 3
            # A deleted cron schedule stays deleted (its id is never reused).
            await local.api.schedules.delete_schedule(schedule_id=CRON_SCHEDULE_ID)
            third = await install_sample(local.server)
            assert third.cron_id == ""
            assert third.oneshot_id == "hello-soon-3"
            assert third.created == ["schedule hello-soon-3"]
            assert third.to_dict()["cron_schedule"] is None
            # The one-shots fire a few seconds after the install, on whole seconds.
            view = await local.api.schedules.get_schedule(schedule_id="hello-soon-3")
            assert view["trigger"]["at"] == third.oneshot_at.replace("Z", "+00:00")
            deployment = await local.server.workflow.get_deployment(
                DEPLOYMENT_ID, caller=ANONYMOUS_ADMIN
            )
            assert deployment.default_inputs == {"name": "world"}

    asyncio.run(scenario())
