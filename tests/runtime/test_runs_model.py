"""The run document's store row: it round-trips, corruption is reported, ids parse."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wf.errors import CorruptRecord
from wf.runtime.runs import (
    Checkpoint,
    NodeRun,
    NodeStatus,
    ResumeMark,
    Run,
    RunError,
    RunStatus,
    Trigger,
    activity_id_for,
    node_of_activity,
    run_from_row,
    run_row,
    run_seq,
)
from wf.scheduler.model import Priority
from wf.store.protocol import RunRow


def full_run(**kw: Any) -> Run:
    fields: dict[str, Any] = {
        "run_id": "run-000001",
        "deployment_id": "demo.main",
        "deployment_revision": 3,
        "artifact_id": "demo",
        "artifact_version": 2,
        "content_hash": "sha256:ab",
        "tenant": "acme",
        "priority": Priority.HIGH,
        "inputs": {"name": "ada", "n": [1, 2]},
        "created_at": 100.0,
        "status": RunStatus.INTERRUPTED,
        "policy": "batch",
        "max_steps": 10,
        "deadline": 900.0,
        "trigger": Trigger(kind="schedule", schedule_id="nightly", occurrence=86_400.0),
        "steps_used": 2,
        "nodes": {
            "a": NodeRun(
                status=NodeStatus.COMPLETED,
                activity_id="run-000001.a",
                started_at=101.0,
                finished_at=102.0,
                output={"v": 1},
            ),
            "ok": NodeRun(status=NodeStatus.AWAITING_INPUT, started_at=102.0),
            "b": NodeRun(),
        },
        "started_at": 101.0,
        "checkpoint": Checkpoint(
            at=102.0,
            status=RunStatus.INTERRUPTED,
            revision=4,
            completed={"a": {"v": 1}},
            awaiting=["ok"],
        ),
        "resumes": [
            ResumeMark(
                attempt=1,
                node="ok",
                at=103.0,
                base_revision=4,
                state="rejected",
                finished_at=103.0,
            )
        ],
        "revision": 5,
        **kw,
    }
    return Run(**fields)


def test_a_run_round_trips_through_its_row() -> None:
    run = full_run()
    row = run_row(run, seq=1, updated_at=104.0)
    assert row.run_id == "run-000001"
    assert row.seq == 1
    assert row.deployment_id == "demo.main"
    assert row.tenant == "acme"
    assert row.status == "interrupted"
    assert row.schedule_id == "nightly"
    assert row.revision == 5
    assert row.created_at == 100.0
    assert row.updated_at == 104.0
    # The running size is the row's (not part of the body), as the revision is.
    assert run_from_row(row) == msgspec.structs.replace(run, size=len(row.body))


def test_a_failed_run_with_its_error_round_trips() -> None:
    error = RunError(
        code="activity_failed",
        message="boom",
        node="a",
        error_type="ValueError",
        may_have_executed=True,
    )
    run = full_run(status=RunStatus.FAILED, error=error, finished_at=110.0, trigger=Trigger())
    row = run_row(run, seq=1, updated_at=110.0)
    assert row.schedule_id is None
    back = run_from_row(row)
    assert back == msgspec.structs.replace(run, size=len(row.body))
    assert back.error == error
    assert back.final


def test_the_revision_is_the_rows_not_the_bodys() -> None:
    run = full_run()
    row = run_row(run, seq=1, updated_at=104.0)
    assert "revision" not in msgspec.json.decode(row.body)
    assert run_from_row(msgspec.structs.replace(row, revision=42)).revision == 42
    # Even a body that carries a revision of its own does not decide it.
    body = msgspec.json.decode(row.body)
    body["revision"] = 3
    tampered = msgspec.structs.replace(row, body=msgspec.json.encode(body), revision=9)
    assert run_from_row(tampered).revision == 9


def test_the_body_is_canonical() -> None:
    run = full_run()
    first = run_row(run, seq=1, updated_at=104.0).body
    again = run_row(run_from_row(run_row(run, seq=1, updated_at=1.0)), seq=1, updated_at=2.0)
    assert again.body == first
    keys = list(msgspec.json.decode(first))
    assert keys == sorted(keys)


def row_of(run: Run, **changes: Any) -> RunRow:
    return msgspec.structs.replace(run_row(run, seq=1, updated_at=104.0), **changes)


def corrupt(row: RunRow) -> CorruptRecord:
    with pytest.raises(CorruptRecord) as info:
        run_from_row(row)
    return info.value


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"{not json", id="not-json"),
        pytest.param(b"[]", id="not-an-object"),
        pytest.param(b'{"run_id": "run-000001"}', id="missing-fields"),
        pytest.param(
            msgspec.json.encode({**msgspec.to_builtins(full_run()), "status": "bogus"}),
            id="unknown-status",
        ),
        pytest.param(
            msgspec.json.encode({**msgspec.to_builtins(full_run()), "priority": "high"}),
            id="mistyped-field",
        ),
    ],
)
def test_a_body_that_does_not_decode_is_a_corrupt_record(body: bytes) -> None:
    error = corrupt(row_of(full_run(), body=body))
    assert error.details["table"] == "runs"
    assert error.details["key"] == "run-000001"
    assert "does not decode" in error.message


def test_a_body_naming_another_run_is_a_corrupt_record() -> None:
    other = run_row(full_run(run_id="run-000002"), seq=2, updated_at=104.0).body
    error = corrupt(row_of(full_run(), body=other))
    assert error.details["table"] == "runs"
    assert error.details["key"] == "run-000001"
    assert "run-000002" in error.message


def test_a_body_with_another_status_than_its_row_is_a_corrupt_record() -> None:
    error = corrupt(row_of(full_run(), status="running"))
    assert error.details["table"] == "runs"
    assert error.details["key"] == "run-000001"
    assert "interrupted" in error.message


# -------------------------------------------------------------------- ids


def test_activity_ids_of_run_nodes() -> None:
    assert activity_id_for("run-000001", "step_1") == "run-000001.step_1"
    assert node_of_activity("run-000001.step_1") == ("run-000001", "step_1")
    assert node_of_activity("run-1234567.b") == ("run-1234567", "b")


@pytest.mark.parametrize(
    "activity_id",
    [
        "plain",
        "run-000001",  # a run id, no node
        "job-000001.a",
        "run-.a",
        "run-abc.a",
        "run-12x.a",
        "run--1.a",
        "run-+1.a",
        "run- 1.a",
        "RUN-000001.a",
        "xrun-000001.a",
        "",
    ],
)
def test_other_activity_ids_are_not_run_nodes(activity_id: str) -> None:
    assert node_of_activity(activity_id) is None


@pytest.mark.parametrize(
    ("run_id", "seq"),
    [
        ("run-000001", 1),
        ("run-000042", 42),
        ("run-1234567", 1_234_567),
        ("run-0", 0),
        ("run-", -1),
        ("run", -1),
        ("run-x", -1),
        ("run-1.a", -1),
        ("run--1", -1),
        ("job-000001", -1),
        ("", -1),
    ],
)
def test_run_seq(run_id: str, seq: int) -> None:
    assert run_seq(run_id) == seq


@pytest.mark.parametrize("text", ["run-²", "run-1²", "run-①"])
def test_run_seq_of_non_ascii_digits_is_not_a_run(text: str) -> None:
    assert run_seq(text) == -1
    assert node_of_activity(f"{text}.a") is None


@given(
    seq=st.integers(min_value=0, max_value=10**9),
    node=st.from_regex(r"[a-z0-9][a-z0-9_]{0,63}", fullmatch=True),
)
def test_run_node_activity_ids_round_trip(seq: int, node: str) -> None:
    run_id = f"run-{seq:06d}"
    assert run_seq(run_id) == seq
    assert node_of_activity(activity_id_for(run_id, node)) == (run_id, node)
