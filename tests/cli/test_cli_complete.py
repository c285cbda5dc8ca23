"""The client commands of issue 17 against a real ``wf-rpc-server`` process.

One server (SQLite, one in-process worker serving the built-in activities)
serves the module. Commands run through ``wf``'s ``main([...])`` in this
process (their stdout, stderr and exit code are checked), or as real ``wf``
processes where the process itself is the subject: ``--version``, the
start-up imports, the connection error, ``hash-token``'s standard input.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from _wf_runner import WfRunner, closed_port, pairs, wf_process

from e2e._servers import rpc_server
from wf.cli import worker_cmd
from wf.cli.main import COMMANDS, build_parser, main
from wf.client.app import App
from wf.errors import RpcUnavailable
from wf.server.auth import hash_token
from wf.server.config import ServerConfig
from wf.server.main import apply_flags
from wf.server.main import build_parser as server_parser
from wf.worker import Worker

BIN = Path(sys.executable).parent
START_TIMEOUT_S = 30.0

UPPER = {
    "input_schema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    },
    "nodes": [
        {
            "kind": "activity",
            "id": "shout",
            "activity_type": "upper",
            "args": {"text": {"$input": "name"}},
        }
    ],
    "output": {"shouted": {"$node": "shout", "path": "text"}},
}
ASK = {
    "nodes": [
        {"kind": "interrupt", "id": "ask", "prompt": "name?", "input_schema": {"type": "string"}}
    ],
    "output": {"name": {"$node": "ask"}},
}
STUCK = {
    "nodes": [{"kind": "activity", "id": "never", "activity_type": "no.worker.serves.this"}],
}


class Wf(WfRunner):
    """Runs ``wf`` commands (in this process) against the module's server."""


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("cli-complete")
    with rpc_server(root, "--workers", "1", "--no-ui", start_timeout_s=START_TIMEOUT_S) as url:
        yield url


@pytest.fixture
def wf(server_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Wf:
    return Wf(server_url, capsys, tmp_path)


def _rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.strip().split("\n")[1:]]


def _iso(value: Any) -> datetime:
    assert isinstance(value, str), value
    at = datetime.fromisoformat(value)
    assert at.utcoffset() == timedelta(0), value
    return at


# ------------------------------------------------------ catalog and runs


def test_artifacts_deployments_and_a_run_from_the_command_line(wf: Wf) -> None:
    out = wf.ok("artifacts", "create", "shout", "--version", "1", "--file", wf.file(UPPER))
    assert out.startswith("created artifact shout v1\n")
    assert pairs(out.partition("\n\n")[2])["NODES"] == "shout"
    # Idempotent by content, like the API.
    assert wf("artifacts", "create", "shout", "--version", "1", "--file", wf.file(UPPER)).code == 0
    got = wf("artifacts", "get", "shout", "--json").json()
    assert (got["artifact_id"], got["version"]) == ("shout", 1)
    assert got["plan"]["nodes"][0]["activity_type"] == "upper"
    _iso(got["created_at"])
    assert "PLAN" in wf.ok("artifacts", "get", "shout", "--version", "1")
    listed = wf.ok("artifacts", "list", "--artifact", "shout")
    assert _rows(listed)[0][:3] == ["shout", "1", "1"]

    body = {"artifact_id": "shout", "artifact_version": 1, "default_inputs": {"name": "x"}}
    out = wf.ok("deployments", "save", "--file", wf.file(body))
    assert out.startswith("saved deployment shout.default (revision 1)\n")
    saved = wf("deployments", "get", "shout.default", "--json").json()
    # Every field, null when unset (the typed answer omits its defaults on the wire).
    assert saved["policy"] is None
    assert saved["max_steps"] is None
    assert saved["revision"] == 1
    _iso(saved["updated_at"])
    stale = wf("deployments", "save", "--file", wf.file(body), "--expected-revision", "0")
    assert stale.code == 1, stale.err
    assert stale.err.startswith("wf: error: "), stale.err
    assert "shout.default" in [r[0] for r in _rows(wf.ok("deployments", "list"))]

    # start --wait: the run completes on the server's worker; exit 0 and its output.
    out = wf.ok("runs", "start", "shout.default", "--input", "name=ada", "--wait")
    fields = pairs(out.partition("\n\n")[0])
    assert fields["STATUS"] == "completed"
    assert json.loads(fields["OUTPUT"]) == {"shouted": "ADA"}
    done = wf("runs", "start", "shout.default", "--input", "name=bob", "--wait", "--json").json()
    assert (done["status"], done["output"]) == ("completed", {"shouted": "BOB"})
    # Inputs from a file, overlaid by --input; a request id makes the start idempotent.
    inputs = wf.file({"name": "file"})
    first = wf(
        "runs", "start", "shout.default", "--inputs-file", inputs, "--request-id", "r1", "--json"
    )
    again = wf(
        "runs", "start", "shout.default", "--inputs-file", inputs, "--request-id", "r1", "--json"
    )
    assert first.json()["run_id"] == again.json()["run_id"]
    assert first.json()["inputs"] == {"name": "file"}
    bad = wf("runs", "start", "shout.default", "--input", "novalue")
    assert (bad.code, bad.err) == (2, "wf: error: --input 'novalue': expected KEY=VALUE\n")


def test_runs_list_is_newest_first_and_filters_by_since(wf: Wf) -> None:
    wf.ok("artifacts", "create", "order", "--version", "1", "--file", wf.file(ASK))
    wf.ok("deployments", "save", "--file", wf.file({"artifact_id": "order", "artifact_version": 1}))
    started = [wf("runs", "start", "order.default", "--json").json()["run_id"] for _ in range(3)]
    page = wf("runs", "list", "--deployment", "order.default", "--json").json()
    assert [r["run_id"] for r in page["runs"]] == started[::-1]
    for run in page["runs"]:
        _iso(run["created_at"])
    page = wf("runs", "list", "--deployment", "order.default", "--oldest-first", "--json").json()
    assert [r["run_id"] for r in page["runs"]] == started
    # Newest first, page by page.
    first = wf("runs", "list", "--deployment", "order.default", "--limit", "2", "--json").json()
    assert [r["run_id"] for r in first["runs"]] == started[:0:-1]
    rest = wf(
        "runs", "list", "--deployment", "order.default", "--cursor", first["next_cursor"], "--json"
    ).json()
    assert [r["run_id"] for r in rest["runs"]] == started[:1]
    # --since: a duration back from now, or an instant.
    recent = wf("runs", "list", "--deployment", "order.default", "--since", "1h", "--json").json()
    assert len(recent["runs"]) == 3
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    none = wf("runs", "list", "--deployment", "order.default", "--since", later, "--json").json()
    assert none["runs"] == []
    table = wf.ok("runs", "list", "--deployment", "order.default", "--since", "2d")
    assert [r[0] for r in _rows(table)] == started[::-1]
    bad = wf("runs", "list", "--since", "yesterday")
    assert bad.code == 2
    assert "--since 'yesterday'" in bad.err
    naive = wf("runs", "list", "--since", "2026-01-01T00:00:00")
    assert naive.code == 2
    assert "zone" in naive.err


def test_resume_cancel_and_wait(wf: Wf) -> None:
    wf.ok("artifacts", "create", "ask", "--version", "1", "--file", wf.file(ASK))
    wf.ok("deployments", "save", "--file", wf.file({"artifact_id": "ask", "artifact_version": 1}))
    # --wait stops at the interrupt: exit 4, the run's view shows what it awaits.
    waiting = wf("runs", "start", "ask.default", "--wait")
    assert waiting.code == 4, waiting.err
    fields = pairs(waiting.out.partition("\n\n")[0])
    assert (fields["STATUS"], fields["AWAITING"]) == ("interrupted", "ask: name?")
    run_id = fields["RUN"]
    out = wf.ok("runs", "resume", run_id, "--answer", '"Ada"')
    assert out.startswith(f"answered {run_id}\n")
    with App.sync(wf.url) as app:
        view = app.wait_for_run(run_id, 20)
    assert (view["status"], view["output"]) == ("completed", {"name": "Ada"})
    # An answer that is not JSON is taken as a string.
    other = wf("runs", "start", "ask.default", "--json").json()["run_id"]
    with App.sync(wf.url) as app:
        assert app.wait_for_run(other, 20)["status"] == "interrupted"
    wf.ok("runs", "resume", other, "--answer", "Grace", "--node", "ask")
    with App.sync(wf.url) as app:
        assert app.wait_for_run(other, 20)["output"] == {"name": "Grace"}

    third = wf("runs", "start", "ask.default", "--json").json()["run_id"]
    out = wf.ok("runs", "cancel", third, "--reason", "not needed")
    assert out.startswith(f"cancelled {third}\n")
    assert pairs(out.partition("\n\n")[2])["STATUS"] == "cancelled"
    again = wf("runs", "cancel", third)
    assert again.code == 1, again.err
    assert again.err.startswith("wf: error: "), again.err


def test_wait_for_run_times_out_and_wait_exits_4(wf: Wf) -> None:
    wf.ok("artifacts", "create", "stuck", "--version", "1", "--file", wf.file(STUCK))
    wf.ok("deployments", "save", "--file", wf.file({"artifact_id": "stuck", "artifact_version": 1}))
    result = wf("runs", "start", "stuck.default", "--wait", "--timeout", "0.3")
    assert result.code == 4
    assert "is still running after 0.3 s" in result.err
    run_id = pairs(result.out)["RUN"]
    with App.sync(wf.url) as app:
        began = time.monotonic()
        with pytest.raises(TimeoutError, match="still running"):
            app.wait_for_run(run_id, 0.2)
        assert time.monotonic() - began < 5
    as_json = wf("runs", "start", "stuck.default", "--wait", "--timeout", "0", "--json")
    assert as_json.code == 4
    assert json.loads(as_json.out)["status"] == "running"
    assert json.loads(as_json.err)["error"]["code"] == "timeout"
    wf.ok("runs", "cancel", run_id)


def test_workers_list_and_queue_stats(wf: Wf) -> None:
    table = wf.ok("workers", "list")
    header, *rows = table.strip().split("\n")
    assert header.split()[:3] == ["WORKER", "STATUS", "HOST"]
    assert len(rows) == 1
    assert rows[0].split()[1] == "active"
    page = wf("workers", "list", "--json").json()
    (worker,) = page["workers"]
    assert worker["status"] == "active"
    _iso(worker["last_seen_at"])
    _iso(worker["registered_at"])
    assert "upper" in worker["info"]["activity_types"]
    stats = pairs(wf.ok("queue", "stats"))
    assert stats["WORKERS ACTIVE"] == "1"
    assert stats["BACKPRESSURE"]
    figures = wf("queue", "stats", "--json").json()
    assert figures["workers_active"] == 1
    assert set(figures) >= {"depth", "running", "capacity", "delayed", "backpressure"}


# ------------------------------------------------------------- --json and errors


def test_json_has_iso_times_and_null_for_absent_keys(wf: Wf) -> None:
    wf.ok("artifacts", "create", "iso", "--version", "1", "--file", wf.file(UPPER))
    wf.ok("deployments", "save", "--file", wf.file({"artifact_id": "iso", "artifact_version": 1}))
    run = wf("runs", "start", "iso.default", "--input", "name=z", "--wait", "--json").json()
    view = wf("runs", "inspect", run["run_id"], "--json").json()
    for key in ("created_at", "started_at", "finished_at"):
        _iso(view[key])

    def no_epoch_times(value: Any, key: str = "") -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                no_epoch_times(v, k)
        elif isinstance(value, list):
            for v in value:
                no_epoch_times(v)
        elif key.endswith("_at") or key in ("deadline", "occurrence", "wake_at"):
            assert value is None or isinstance(value, str), (key, value)

    no_epoch_times(view)
    (entry,) = view["trace"]
    # The server leaves out what a node does not have; --json says null.
    assert entry["wake_at"] is None
    assert entry["error"] is None
    assert entry["output"] == {"text": "Z"}


def test_refusals_are_json_with_json(wf: Wf) -> None:
    result = wf("runs", "inspect", "run-999999", "--json")
    assert result.code == 1
    assert result.out == ""
    error = json.loads(result.err)["error"]
    assert error["code"] == "not_found"
    assert "run-999999" in error["message"]
    usage = wf("runs", "start", "x.default", "--inputs-file", "/nonexistent.json", "--json")
    assert usage.code == 2
    assert json.loads(usage.err)["error"]["code"] == "usage"
    # Without --json: one line.
    assert wf("runs", "inspect", "run-999999").err.startswith("wf: error: not_found: ")


def test_a_connection_error_names_the_likely_cause() -> None:
    port = closed_port()
    done = wf_process(
        "runs", "list", "--server", f"http://127.0.0.1:{port}", "--failover-timeout", "0"
    )
    assert done.returncode == 1
    assert done.stdout == ""
    err = done.stderr
    assert err.startswith(f"wf: error: rpc_unavailable: cannot connect to http://127.0.0.1:{port}")
    assert "is wf-rpc-server running?" in err
    assert "Error(" not in err, err  # no Python repr
    assert "(111" not in err, err


def test_the_client_tells_a_waiting_caller_why_it_retries() -> None:
    # On a terminal the CLI prints this once, then keeps retrying within the budget.
    port = closed_port()
    heard: list[str] = []

    async def main() -> None:
        async with App(f"http://127.0.0.1:{port}", failover_timeout_s=0.3) as app:
            app.rpc.on_unanswered = heard.append
            with pytest.raises(RpcUnavailable):
                await app.queue_stats()

    asyncio.run(main())
    assert len(heard) >= 2  # every attempt, the retries included
    assert heard[0] == (
        f"cannot connect to http://127.0.0.1:{port} (connection refused): is wf-rpc-server running?"
    )


# ----------------------------------------------------------------- flags


def test_version_flags() -> None:
    for script in ("wf", "wf-rpc-server"):
        done = subprocess.run(
            [str(BIN / script), "--version"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"{script} 0.1.0"


def test_hash_token_reads_the_secret_from_standard_input() -> None:
    done = subprocess.run(
        [str(BIN / "wf-rpc-server"), "hash-token"],
        input="s3cret-token\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == hash_token("s3cret-token")
    # On the command line it is refused: other users of the host could read it.
    done = subprocess.run(
        [str(BIN / "wf-rpc-server"), "hash-token", "s3cret-token"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "standard input" in done.stderr
    assert done.stdout == ""
    empty = subprocess.run(
        [str(BIN / "wf-rpc-server"), "hash-token"],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert empty.returncode == 2
    assert "no token" in empty.stderr


def test_server_log_flags_override_the_config() -> None:
    args = server_parser().parse_args(["--log-level", "debug", "--log-format", "text"])
    config = apply_flags(ServerConfig(), args)
    assert config.server.observability.log_level == "debug"
    assert config.server.observability.log_format == "text"
    kept = apply_flags(ServerConfig(), server_parser().parse_args([]))
    assert kept.server.observability == ServerConfig().server.observability
    with pytest.raises(SystemExit):
        server_parser().parse_args(["--log-level", "loud"])


def test_the_cli_failover_default_is_the_clients() -> None:
    # wf.cli.connect keeps its own copy so that building the parser loads no client.
    from wf.cli import connect
    from wf.client import rpc_client

    assert connect.FAILOVER_TIMEOUT_S == rpc_client.FAILOVER_TIMEOUT_S


def test_worker_help_shows_the_workers_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["worker", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    defaults = inspect.signature(Worker).parameters
    assert defaults["max_concurrency"].default == worker_cmd.MAX_CONCURRENCY_DEFAULT
    assert defaults["prefetch"].default == worker_cmd.PREFETCH_DEFAULT
    assert defaults["heartbeat_interval_s"].default == worker_cmd.HEARTBEAT_INTERVAL_DEFAULT_S
    assert defaults["poll_wait_s"].default == worker_cmd.POLL_WAIT_DEFAULT_S
    assert f"activities run at once (default {defaults['max_concurrency'].default})" in text
    assert f"extra leases held unstarted (default {defaults['prefetch'].default})" in text
    assert f"(default {defaults['heartbeat_interval_s'].default:g})" in text
    assert f"long-poll seconds (default {defaults['poll_wait_s'].default:g})" in text
    assert "(default json)" in text
    assert "(default info)" in text


# --------------------------------------------------------------- imports


def test_each_module_registers_the_groups_the_command_map_names() -> None:
    import importlib

    registered: dict[str, str] = {}
    for name in dict.fromkeys(COMMANDS.values()):
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(f"wf.cli.{name}").register(sub)
        registered.update(dict.fromkeys(sub.choices, name))
    assert registered == COMMANDS
    full = build_parser()
    action = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    assert list(action.choices) == list(COMMANDS)


def test_a_client_command_imports_neither_server_store_worker_nor_croniter(
    server_url: str,
) -> None:
    code = (
        "import sys\n"
        "from wf.cli.main import main\n"
        f"code = main(['runs', 'list', '--server', {server_url!r}])\n"
        "loaded = [m for m in sys.modules if m.startswith(('wf.server', 'wf.store', "
        "'wf.worker', 'wf.runtime', 'wf.node', 'wf.schedules', 'croniter', 'aiohttp'))]\n"
        "print(code, sorted(loaded), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "0 []"
