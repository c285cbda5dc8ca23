"""The shared record-to-SQL mapping: step grouping and compact spec blobs."""

from __future__ import annotations

import msgspec

from wf.scheduler.model import Activity, ActivityState, Priority, RetryPolicy
from wf.store import codec


def test_group_steps_keeps_order_inside_each_family_and_merges_runs() -> None:
    steps: list[codec.Step] = [
        ("insert_activity", {"n": 1}),
        ("apply_transition", {"n": 2}),
        ("insert_transition", {"n": 3}),
        ("apply_transition", {"n": 5}),
        ("insert_transition", {"n": 6}),
        ("renew_lease", {"n": 7}),
        ("upsert_worker", {"n": 9}),
        ("insert_activity", {"n": 10}),
        ("apply_transition", {"n": 11}),
        ("insert_transition", {"n": 12}),
    ]
    grouped = [(name, [p["n"] for p in params]) for name, params in codec.group_steps(steps)]
    assert grouped == [
        ("insert_activity", [1, 10]),
        ("apply_transition", [2, 5]),
        ("renew_lease", [7]),
        ("apply_transition", [11]),
        ("upsert_worker", [9]),
        ("insert_transition", [3, 6, 12]),
    ]


def test_spec_blobs_omit_defaults_even_when_equal_values_came_off_the_wire() -> None:
    original = Activity(
        activity_id="a1",
        activity_type="t",
        payload=b"\x00\x01",
        priority=Priority.HIGH,
        capabilities=frozenset(),
        retry=RetryPolicy(),
        seq=7,
        submitted_at=12.5,
        state=ActivityState.QUEUED,
        queue_ticket=3,
    )
    wire = msgspec.msgpack.decode(msgspec.msgpack.encode(original), type=Activity)
    # Equal to the defaults, but not the default objects (what omit_defaults compares).
    assert wire.capabilities == frozenset()
    assert wire.capabilities is not Activity(activity_id="x", activity_type="t").capabilities
    blob = codec.encode(codec._submission(wire))
    fields = msgspec.msgpack.decode(blob)
    assert set(fields) == {
        "activity_id",
        "activity_type",
        "payload",
        "priority",
        "seq",
        "submitted_at",
    }
    decoded = codec.activity_decoder.decode(blob)
    assert type(decoded) is Activity
    assert decoded == msgspec.structs.replace(original, state=ActivityState.READY, queue_ticket=0)


def test_spec_blobs_keep_every_non_default_field() -> None:
    rich = Activity(
        activity_id="r",
        activity_type="t",
        workflow_id="run-000001",
        tenant="acme",
        deadline=99.0,
        capabilities=frozenset({"gpu"}),
        locality="eu",
        region="r1",
        idempotent=True,
        correlation_id="c",
        ordering_key="k",
        policy="default",
        new_workflow=True,
        not_before=5.0,
        retry=RetryPolicy(max_attempts=9, non_retryable_errors=frozenset({"E"})),
        renewable=False,
        seq=3,
        submitted_at=1.0,
    )
    assert codec.activity_decoder.decode(codec.encode(codec._submission(rich))) == rich
