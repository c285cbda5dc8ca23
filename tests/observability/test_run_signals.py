"""Run-level signals (issue 17): the scheduling latency measures, run lines and run metrics.

The scheduling-latency histogram once summed to 0.0 over every dispatch of a
real run: the core measured ``now - queued_at`` in command time, and with a
worker already waiting an activity is queued and granted by one command. The
core's figure is now ``wf_queue_wait_seconds`` (still 0 there, by design) and
``wf_scheduling_latency_seconds`` is observed after the grant's commit, with
the clock. The run listeners are checked on their own here; the real
server-and-worker path is in ``tests/e2e/test_e2e_failures.py``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from _obs_server import activity, config, register, run, scrape, submit, value
from prometheus_client import CollectorRegistry

from wf.client.rpc_client import RpcClient
from wf.runtime.runs import Run, RunError, RunStatus, Trigger
from wf.scheduler.model import Priority
from wf.server.app import WfServer
from wf.server.run_signals import (
    DEPLOYMENT_LABELS_MAX,
    OTHER_LABEL,
    BoundedLabel,
    RunMetrics,
    RunProgressLogger,
)


def test_latency_of_a_grant_to_a_waiting_worker_is_measured(tmp_path: Path) -> None:
    async def test(server: WfServer, url: str) -> None:
        async with RpcClient(url) as client:
            await register(client, "w1", 1)
            parked = asyncio.ensure_future(
                client.call(
                    "scheduler.workers.poll", {"worker_id": "w1", "max_items": 1, "wait_s": 10}
                )
            )
            # The poll is parked in the core before the activity exists.
            deadline = asyncio.get_running_loop().time() + 10
            while "w1" not in server.node.core.waiting:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.01)
            await submit(client, activity("a1"))
            answer = await parked
            assert [g["lease"]["activity_id"] for g in answer["leases"]] == ["a1"]
            samples = await scrape(url)
        # The cause: queued and granted by the same command, so 0 in command time.
        assert value(samples, "wf_queue_wait_seconds_count") == 1
        assert value(samples, "wf_queue_wait_seconds_sum") == 0.0
        # The fix: observed after the commit, with the clock.
        noop = {"activity_type": "noop"}
        assert value(samples, "wf_scheduling_latency_seconds_count", **noop) == 1
        assert value(samples, "wf_scheduling_latency_seconds_sum", **noop) > 0.0

    run(config(tmp_path / "store"), test)


def test_a_bounded_label_keeps_the_first_values_then_says_other() -> None:
    label = BoundedLabel(3)
    seen = [label(t) for t in ("a", "b", "a", "c", "d", "e", "b")]
    assert seen == ["a", "b", "a", "c", OTHER_LABEL, OTHER_LABEL, "b"]


def _run(status: RunStatus, **kw: object) -> Run:
    fields: dict[str, object] = {
        "run_id": "run-000001",
        "deployment_id": "pay.main",
        "deployment_revision": 1,
        "artifact_id": "pay",
        "artifact_version": 1,
        "content_hash": "sha256:00",
        "tenant": "default",
        "priority": Priority.NORMAL,
        "inputs": {},
        "created_at": 100.0,
        "status": status,
        "trigger": Trigger(kind="manual"),
        **kw,
    }
    return Run(**fields)  # type: ignore[arg-type]


def test_runs_metrics_count_each_finished_run_once_with_its_duration() -> None:
    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    metrics(_run(RunStatus.ADMITTED))
    metrics(_run(RunStatus.RUNNING, started_at=100.5))
    done = _run(RunStatus.COMPLETED, started_at=100.5, finished_at=102.5, output={})
    metrics(done)
    metrics(done)  # a repeated notification counts nothing
    failed = _run(RunStatus.FAILED, run_id="run-000002", finished_at=130.0)
    metrics(failed)
    get = registry.get_sample_value
    assert get("wf_runs_total", {"deployment": "pay.main", "status": "completed"}) == 1
    assert get("wf_runs_total", {"deployment": "pay.main", "status": "failed"}) == 1
    assert get("wf_run_duration_seconds_count", {"status": "completed"}) == 1
    assert get("wf_run_duration_seconds_sum", {"status": "completed"}) == 2.5
    assert get("wf_run_duration_seconds_sum", {"status": "failed"}) == 30.0


def test_the_deployment_label_is_bounded() -> None:
    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    for i in range(DEPLOYMENT_LABELS_MAX + 5):
        metrics(
            _run(
                RunStatus.COMPLETED,
                run_id=f"run-{i:06d}",
                deployment_id=f"d{i}",
                finished_at=101.0,
            )
        )
    get = registry.get_sample_value
    assert get("wf_runs_total", {"deployment": "d0", "status": "completed"}) == 1
    assert get("wf_runs_total", {"deployment": OTHER_LABEL, "status": "completed"}) == 5


def test_one_line_per_run_event(caplog: pytest.LogCaptureFixture) -> None:
    logger = RunProgressLogger()
    with caplog.at_level(logging.INFO, logger="wf.runs"):
        logger(_run(RunStatus.ADMITTED))
        logger(_run(RunStatus.ADMITTED))
        logger(_run(RunStatus.RUNNING))
        error = RunError(code="activity_failed", message="ValueError: no", node="post")
        failed = _run(RunStatus.FAILED, finished_at=101.0, error=error)
        logger(failed)
        logger(failed)
        logger(_run(RunStatus.CANCELLED, run_id="run-000002", finished_at=101.0))
        logger(_run(RunStatus.COMPLETED, run_id="run-000003", finished_at=101.0, output=1))
    lines = [(r.levelname, getattr(r, "action", None)) for r in caplog.records]
    assert lines == [
        ("INFO", "run.admitted"),
        ("WARNING", "run.failed"),
        ("WARNING", "run.cancelled"),
        ("INFO", "run.completed"),
    ]
    failed_line = caplog.records[1]
    assert getattr(failed_line, "node", None) == "post"
    assert getattr(failed_line, "error_code", None) == "activity_failed"
