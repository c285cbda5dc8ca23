"""A fan-out (map node) across a SIGKILL of the server and the worker running an item
(issue 19): real ``wf-rpc-server`` and ``wf worker`` processes, SQLite store.

Reuses the harness of ``test_e2e_runs`` (its :class:`RunCluster` and the
``runs.gated`` activity of ``runs_app``, which records each execution in a file
and blocks until the test releases it). The map runs one item at a time; the
test kills everything while item 0 executes, restarts the server on the same
store, starts a fresh worker and releases. A non-idempotent item is never run
twice (the run fails closed with ``may_have_executed``, the other items never
start); an idempotent one is run again and the fan-out completes in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _servers import processes, wait_until
from test_e2e_runs import INPUT_SCHEMA, WORK_S, RunCluster

ITEMS = ["i0", "i1", "i2"]


def gated_map_plan(*, idempotent: bool) -> dict[str, Any]:
    return {
        "input_schema": INPUT_SCHEMA,
        "nodes": [
            {
                "kind": "map",
                "id": "each",
                "activity_type": "runs.gated",
                "items": {"$input": "names"},
                "args": {"workdir": {"$input": "workdir"}, "node": {"$item": ""}},
                "concurrency": 1,
                "max_items": 10,
                "idempotent": idempotent,
                "retry": {"max_attempts": 1},
            }
        ],
        "output": {"nodes": {"$node": "each"}},
    }


@pytest.fixture
def fan_cluster(tmp_path: Path) -> Iterator[RunCluster]:
    with processes(tmp_path) as ps:
        c = RunCluster(ps, tmp_path)
        try:
            yield c
        finally:
            c.close()


def kill_everything_mid_item(cluster: RunCluster, *, idempotent: bool) -> str:
    cluster.start_server()
    cluster.start_workers("w1")
    plan = gated_map_plan(idempotent=idempotent)
    plan["input_schema"] = {
        **INPUT_SCHEMA,
        "properties": {**INPUT_SCHEMA["properties"], "names": {"type": "array"}},
        "required": ["workdir", "names"],
    }
    deployment_id = cluster.deploy("gated_map", plan)
    run_id = cluster.start_run(deployment_id, names=ITEMS)
    wait_until(lambda: len(cluster.executions("i0")) == 1, "item 0 running", WORK_S)
    cluster.kill_server()
    cluster.workers["w1"].kill()
    cluster.start_server()
    cluster.start_workers("w2")
    cluster.release()
    return run_id


def items_of(view: dict[str, Any]) -> list[dict[str, Any]]:
    entry = next(e for e in view["trace"] if e["node"] == "each")
    items: list[dict[str, Any]] = entry["items"]
    return items


def test_a_non_idempotent_item_is_never_run_twice_across_a_crash(fan_cluster: RunCluster) -> None:
    run_id = kill_everything_mid_item(fan_cluster, idempotent=False)

    view = fan_cluster.wait_final(run_id)

    assert view["status"] == "failed", view
    assert view["error"]["code"] == "may_have_executed"
    assert view["error"]["node"] == "each"
    assert view["error"]["message"].startswith("item 0: ")
    assert fan_cluster.executions("i0") == [{"worker": "w1", "attempt": 1}]
    assert fan_cluster.executions("i1") == fan_cluster.executions("i2") == []
    assert [i["status"] for i in items_of(view)] == ["failed", "pending", "pending"]


def test_an_idempotent_fan_out_resumes_and_gathers_in_order(fan_cluster: RunCluster) -> None:
    run_id = kill_everything_mid_item(fan_cluster, idempotent=True)

    view = fan_cluster.wait_final(run_id)

    assert view["status"] == "completed", view
    assert [o["node"] for o in view["output"]["nodes"]] == ITEMS
    assert fan_cluster.executions("i0") == [
        {"worker": "w1", "attempt": 1},
        {"worker": "w2", "attempt": 2},
    ]
    assert fan_cluster.executions("i1") == [{"worker": "w2", "attempt": 1}]
    assert fan_cluster.executions("i2") == [{"worker": "w2", "attempt": 1}]
    assert [i["activity_id"] for i in items_of(view)] == [f"{run_id}.each.{n}" for n in range(3)]
