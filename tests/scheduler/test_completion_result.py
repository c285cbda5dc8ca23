"""A completion's result travels on its COMPLETED transition record, so the store
keeps it and the runtime can read it back after a crash; no other transition
carries one."""

from __future__ import annotations

import msgspec
import pytest
from _core_helpers import Driver, act, of_type

from wf.errors import StaleLease
from wf.scheduler import commands as cmd
from wf.scheduler.model import ActivityState, RetryPolicy
from wf.scheduler.outputs import ActivityCompleted, Record, Transition

S = ActivityState


def test_the_completed_transition_carries_the_reported_result() -> None:
    d = Driver()
    d.register()
    d.submit(act("a"))
    lease = d.lease()["a"]
    d.start(lease)
    out = d.complete(lease, result=b"\x00\xffresult")
    [done] = of_type(out.records, Transition)
    assert (done.from_state, done.to_state, done.reason) == (S.EXECUTING, S.COMPLETED, "completed")
    assert done.result == b"\x00\xffresult"
    [decision] = of_type(out.decisions, ActivityCompleted)
    assert decision.result == done.result


def test_an_empty_result_is_kept_as_empty_bytes() -> None:
    d = Driver()
    d.register()
    d.submit(act("a"))
    lease = d.lease()["a"]
    d.start(lease)
    [done] = of_type(d.complete(lease).records, Transition)
    assert done.result == b""


def test_no_other_transition_carries_a_result() -> None:
    d = Driver()
    d.register()
    d.submit(
        act("ok"),
        act("retried", retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.0)),
        act("cancelled"),
    )
    d.do(cmd.Cancel, activity_id="cancelled")
    leases = d.lease(n=2)
    for lease in leases.values():
        d.start(lease)
    d.complete(leases["ok"], result=b"r")
    d.fail(leases["retried"], error_type="Boom")  # requeued: a retry
    again = d.lease()["retried"]
    d.start(again)
    d.fail(again, error_type="Boom")  # retries exhausted: failed for good
    assert d.state("retried") is S.FAILED
    transitions = of_type(d.records, Transition)
    with_result = [
        (t.activity_id, t.to_state, t.result) for t in transitions if t.result is not None
    ]
    assert with_result == [("ok", S.COMPLETED, b"r")]


def test_a_refused_completion_records_nothing() -> None:
    d = Driver()
    d.register()
    d.submit(act("a"))
    lease = d.lease()["a"]
    d.start(lease)
    with pytest.raises(StaleLease):
        d.core.handle(
            cmd.Complete(now=d.now, activity_id="a", token=lease.token + 1, result=b"late")
        )
    assert d.state("a") is S.EXECUTING
    assert all(t.result is None for t in of_type(d.records, Transition))


@pytest.mark.parametrize("codec", ["json", "msgpack"])
def test_the_result_survives_encoding(codec: str) -> None:
    d = Driver()
    d.register()
    d.submit(act("a"))
    lease = d.lease()["a"]
    d.start(lease)
    records: list[Record] = d.complete(lease, result=b"\x00\x01\xfe").records
    module = msgspec.json if codec == "json" else msgspec.msgpack
    decoded = module.decode(module.encode(records), type=list[Record])
    assert decoded == records
    assert isinstance(decoded[0], Transition)
    assert decoded[0].result == b"\x00\x01\xfe"
