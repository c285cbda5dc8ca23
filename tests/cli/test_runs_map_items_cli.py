"""``wf runs inspect``: a map node's items and their attempts.

``--attempts`` lists each item's attempts as rows named ``<node>[<i>]`` (an item
with none yet shows its status), and the trace table's ATTEMPTS column counts a
map node's item attempts. Checked on a hand-made ``runs.inspect`` answer, then
against a real ``wf-rpc-server`` process (one built-in worker) running a map
whose second item fails on every attempt.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e._servers import rpc_server
from wf.cli.main import main
from wf.cli.output import attempts_text, run_text

BIN = Path(sys.executable).parent
START_TIMEOUT_S = 30.0
HEADERS = ["NODE", "ATTEMPT", "WORKER", "LEASED", "STARTED", "FINISHED", "OUTCOME", "ERROR"]


def _attempt(n: int, outcome: str, **extra: Any) -> dict[str, Any]:
    at = 1_767_225_600.0 + n
    return {
        "token": n,
        "worker_id": "w1",
        "leased_at": at,
        "attempt": n,
        "started_at": at,
        "finished_at": at + 0.5,
        "outcome": outcome,
        **extra,
    }


MAP_VIEW: dict[str, Any] = {
    "run_id": "run-000001",
    "status": "failed",
    "deployment_id": "fan.default",
    "trace": [
        {"node": "list", "kind": "activity", "status": "completed",
         "activity_id": "run-000001.list", "attempts": [_attempt(1, "completed")]},
        {"node": "each", "kind": "map", "status": "failed", "items": [
            {"index": 0, "status": "completed", "activity_id": "run-000001.each.0",
             "attempts": [_attempt(1, "completed")]},
            {"index": 1, "status": "failed", "activity_id": "run-000001.each.1",
             "error": {"error_type": "ValueError", "message": "bad item"},
             "attempts": [
                 _attempt(1, "failed, retried", error="ValueError: bad item",
                          stack_trace="Traceback: item 1, first"),
                 _attempt(2, "failed (error)", error="ValueError: bad item",
                          stack_trace="Traceback: item 1, second"),
             ]},
            {"index": 2, "status": "cancelled", "activity_id": "run-000001.each.2",
             "attempts": []},
            {"index": 3, "status": "submitted", "activity_id": "run-000001.each.3",
             "attempts": [], "unserved": True},
        ]},
    ],
}  # fmt: skip


def _table(text: str) -> list[list[str]]:
    """The rows of the first table of ``text`` (split on runs of two spaces or more)."""
    head, _, _ = text.partition("\n\n")
    header, *lines = head.split("\n")
    assert header.split() == HEADERS
    return [[c.strip() for c in line.split("  ") if c.strip()] for line in lines]


def test_attempts_lists_every_item_attempt_and_items_without_any() -> None:
    text = attempts_text(MAP_VIEW)
    rows = _table(text)
    assert [(r[0], r[1]) for r in rows] == [
        ("list", "1"),
        ("each[0]", "1"),
        ("each[1]", "1"),
        ("each[1]", "2"),
        ("each[2]", "-"),
        ("each[3]", "-"),
    ]
    by_row = {(r[0], r[1]): r for r in rows}
    assert by_row[("each[1]", "1")][6:] == ["failed, retried", "ValueError: bad item"]
    assert by_row[("each[1]", "2")][6:] == ["failed (error)", "ValueError: bad item"]
    # An item with no attempt shows its state, and why it waits when no worker takes it.
    assert by_row[("each[2]", "-")][-2:] == ["cancelled", "-"]
    assert by_row[("each[3]", "-")][-2:] == [
        "submitted",
        "waiting: no registered worker takes this activity type",
    ]
    # Each failed attempt's stack trace, headed by the item it belongs to.
    assert "stack trace (node each[1], attempt 1):\nTraceback: item 1, first" in text
    assert "stack trace (node each[1], attempt 2):\nTraceback: item 1, second" in text


def test_the_trace_table_counts_a_map_nodes_item_attempts() -> None:
    view = {**MAP_VIEW, "inputs": {}, "artifact": {"artifact_id": "fan", "version": 1}}
    _, _, trace = run_text(view).partition("\n\n")
    rows = {line.split()[0]: line.split() for line in trace.strip().split("\n")[1:]}
    assert rows["list"][1:3] == ["activity", "completed"]
    assert rows["each"][1:3] == ["map", "failed"]
    attempts_column = trace.split("\n")[0].split().index("ATTEMPTS")
    assert rows["list"][attempts_column] == "1"
    assert rows["each"][attempts_column] == "3"


# ------------------------------------------------------------ a real server

FAN: dict[str, Any] = {
    "input_schema": {"type": "object", "required": ["words"]},
    "nodes": [
        {"kind": "map", "id": "each", "activity_type": "upper",
         "items": {"$input": "words"}, "args": {"text": {"$item": ""}},
         "concurrency": 1, "retry": {"max_attempts": 2, "initial_backoff_s": 0.0}},
    ],
    "output": {"shouted": {"$node": "each"}},
}  # fmt: skip
"""One item per word; ``upper`` of a number fails (no ``.upper``), every attempt."""


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("cli-map-items")
    with rpc_server(root, "--workers", "1", "--no-ui", start_timeout_s=START_TIMEOUT_S) as url:
        yield url


def test_inspect_attempts_shows_a_real_map_runs_items(
    server_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def wf(*argv: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main([*argv, "--server", server_url])
        captured = capsys.readouterr()
        return code, captured.out

    plan, inputs = tmp_path / "plan.json", tmp_path / "inputs.json"
    plan.write_text(json.dumps(FAN))
    inputs.write_text(json.dumps({"words": ["ok", 7]}))
    assert wf("artifacts", "create", "fan", "--version", "1", "--file", str(plan))[0] == 0
    body = tmp_path / "deployment.json"
    body.write_text(json.dumps({"artifact_id": "fan", "artifact_version": 1}))
    assert wf("deployments", "save", "--file", str(body))[0] == 0
    _, out = wf("runs", "start", "fan.default", "--inputs-file", str(inputs), "--wait", "--json")
    run_id = json.loads(out)["run_id"]
    code, out = wf("runs", "inspect", run_id, "--json")
    assert code == 0
    view = json.loads(out)
    assert view["status"] == "failed", view
    (entry,) = view["trace"]
    items = entry["items"]
    assert [i["status"] for i in items] == ["completed", "failed"]
    assert [len(i["attempts"]) for i in items] == [1, 2]

    code, out = wf("runs", "inspect", run_id, "--attempts")
    assert code == 0
    rows = _table(out)
    expected = [
        (f"each[{item['index']}]", str(a["attempt"]), a["worker_id"], a["outcome"])
        for item in items
        for a in item["attempts"]
    ]
    assert [(r[0], r[1], r[2], r[6]) for r in rows] == expected
    assert rows[-1][6].startswith("failed (")
    assert "AttributeError" in rows[-1][7]
    assert "stack trace (node each[1], attempt 2):\nTraceback" in out
