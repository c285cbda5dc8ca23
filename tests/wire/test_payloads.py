"""The payload convention is the wire contract's; the worker SDK and the run engine share it."""

from __future__ import annotations

import pytest

import wf.worker
from wf.errors import InvalidArgument
from wf.runtime import dag
from wf.wire import payloads
from wf.worker import InvalidPayload, NonRetryableError, decode_payload


def test_the_worker_sdk_re_exports_the_wire_helpers() -> None:
    assert wf.worker.encode_payload is payloads.encode_payload
    assert wf.worker.encode_result is payloads.encode_result
    assert wf.worker.decode_result is payloads.decode_result


def test_the_run_engine_writes_payloads_with_the_wire_helper() -> None:
    assert dag.encode_payload is payloads.encode_payload


def test_arguments_follow_the_convention() -> None:
    assert payloads.payload_arguments(b"") == ([], {})
    assert payloads.payload_arguments(b'[1,"x"]') == ([1, "x"], {})
    assert payloads.payload_arguments(b'{"a":1}') == ([], {"a": 1})
    assert payloads.encode_payload(1, "x") == b'[1,"x"]'
    assert payloads.encode_payload(a=1) == b'{"a":1}'
    assert payloads.decode_result(payloads.encode_result({"k": [1]})) == {"k": [1]}
    assert payloads.decode_result(b"") is None
    with pytest.raises(InvalidArgument, match="not both"):
        payloads.encode_payload(1, a=2)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"42", "payload must be a JSON array or object, not int"),
        (b"{not json", "payload is not JSON: "),
    ],
)
def test_a_refused_payload_is_invalid_argument_on_the_wire_and_final_for_the_worker(
    payload: bytes, message: str
) -> None:
    with pytest.raises(InvalidArgument) as on_wire:
        payloads.payload_arguments(payload)
    assert on_wire.value.message.startswith(message)
    with pytest.raises(InvalidPayload) as in_worker:
        decode_payload(payload)
    assert isinstance(in_worker.value, NonRetryableError)
    assert str(in_worker.value) == on_wire.value.message
