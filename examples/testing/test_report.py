"""Tests of the daily sales report: copy this file and the two modules beside it into
your suite, and replace them with your own activities and plan. No asyncio plugin is
needed; wf's own suite runs this file (tests/testing/test_testing_examples.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import report_activities
from report_activities import RELAY, archive
from report_plan import DAILY_AT_SEVEN, REPORT_PLAN

from wf.client import OccurrenceView, RunView
from wf.testing import ActivityEnvironment, WorkflowEnvironment
from wf.worker import ActivityCancelled

MONDAY = datetime(2026, 3, 2, tzinfo=UTC)


@pytest.fixture(autouse=True)
def a_fresh_relay() -> None:
    RELAY.sent.clear()
    RELAY.failures = 0


# ---------------------------------------------------------- the whole workflow


def test_a_run_fans_out_gathers_and_retries_a_busy_relay_a_minute_later() -> None:
    RELAY.failures = 1

    async def body(env: WorkflowEnvironment) -> RunView:
        deployment = await env.deploy(REPORT_PLAN, name="sales_report")
        return await env.run(deployment)  # skips the minute of backoff

    run = WorkflowEnvironment.run_sync(body, report_activities, start_time=MONDAY)

    assert run.status == "completed"
    assert run.output == {"total": 550}
    assert RELAY.sent == ["north 200, south 200, west 150"]
    assert run.finished_at == MONDAY.timestamp() + 60  # the retry's instant, exactly


def test_a_week_of_daily_reports_takes_seconds() -> None:
    async def body(env: WorkflowEnvironment) -> list[OccurrenceView]:
        deployment = await env.deploy(REPORT_PLAN, name="sales_report")
        await env.api.schedules.create_schedule(
            schedule_id="daily_report", deployment_id=deployment, trigger=DAILY_AT_SEVEN
        )
        await env.advance_to(MONDAY + timedelta(days=7))
        return await env.occurrences("daily_report")

    occurrences = WorkflowEnvironment.run_sync(body, report_activities, start_time=MONDAY)

    assert [o.status for o in occurrences] == ["completed"] * 7
    # 07:00 in Paris is 06:00 UTC in March.
    assert occurrences[0].instant_s == (MONDAY + timedelta(hours=6)).timestamp()
    assert len(RELAY.sent) == 7


# ---------------------------------------------------------- one activity alone


def test_archive_heartbeats_each_file() -> None:
    env = ActivityEnvironment()
    assert env.run_sync(archive, ["a", "b", "c"]) == {"archived": 3, "skipped": 0}
    assert env.heartbeats == [{"done": 1}, {"done": 2}, {"done": 3}]


def test_a_retried_archive_resumes_after_the_last_file_reported() -> None:
    env = ActivityEnvironment(attempt=2, last_heartbeat_details={"done": 2})
    assert env.run_sync(archive, ["a", "b", "c"]) == {"archived": 3, "skipped": 2}
    assert env.heartbeats == [{"done": 3}]


def test_a_cancelled_archive_stops_between_files() -> None:
    def lose_the_lease_at_two(details: Any) -> None:
        if details == {"done": 2}:
            env.cancel()  # as a worker does when its lease is lost

    env = ActivityEnvironment(on_heartbeat=lose_the_lease_at_two)
    with pytest.raises(ActivityCancelled):
        env.run_sync(archive, ["a", "b", "c", "d"])
    assert env.heartbeats == [{"done": 1}, {"done": 2}]
