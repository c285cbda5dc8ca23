"""``same_submission``: a retried submission is recognised by its content, not its state."""

from __future__ import annotations

import msgspec
import pytest

from wf.scheduler import commands as cmd
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, ActivityState, Priority, RetryPolicy, same_submission
from wf.scheduler.outputs import ActivitySubmitted
from wf.scheduler.timer import RelativeDelay

T0 = 1_767_225_600.0


def accepted(spec: Activity, now: float = T0) -> Activity:
    """``spec`` as a core accepts it (state fields set, a delay resolved)."""
    out = SchedulerCore().handle(cmd.Submit(now=now, activities=(spec,)))
    record = out.records[0]
    assert isinstance(record, ActivitySubmitted)
    return record.activity


def test_the_same_fields_match_whatever_state_the_activity_reached() -> None:
    spec = Activity(
        activity_id="a", activity_type="t", payload=b"[1]", capabilities=frozenset({"x"})
    )
    stored = msgspec.structs.replace(
        accepted(spec), state=ActivityState.EXECUTING, attempt=3, token=9, worker_id="w"
    )
    assert same_submission(stored, spec)
    # An int priority is the same level as the enum the core keeps.
    assert same_submission(
        accepted(Activity(activity_id="p", activity_type="t", priority=Priority.HIGH)),
        Activity(activity_id="p", activity_type="t", priority=1),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    "changed",
    [
        {"activity_type": "u"},
        {"payload": b"[2]"},
        {"tenant": "other"},
        {"workflow_id": "wf"},
        {"deadline": T0 + 1},
        {"ordering_key": "k"},
        {"retry": RetryPolicy(max_attempts=1)},
        {"renewable": False},
        {"not_before": T0 + 5},
    ],
)
def test_any_submitted_field_that_differs_is_another_submission(changed: dict[str, object]) -> None:
    spec = Activity(activity_id="a", activity_type="t", payload=b"[1]")
    assert not same_submission(accepted(spec), msgspec.structs.replace(spec, **changed))


def test_a_delay_matches_its_retry_although_the_resolved_instant_cannot_be_repeated() -> None:
    spec = Activity(activity_id="d", activity_type="t", delay=RelativeDelay(seconds=60))
    stored = accepted(spec)
    assert stored.not_before == T0 + 60
    assert same_submission(stored, spec)
    assert same_submission(stored, msgspec.structs.replace(spec, not_before=T0 + 30))
    assert not same_submission(stored, msgspec.structs.replace(spec, not_before=T0 + 90))
    assert not same_submission(
        stored, msgspec.structs.replace(spec, delay=RelativeDelay(seconds=61))
    )
