"""The payload convention: how an activity's arguments and result are written.

The scheduler treats ``Activity.payload`` and a completion's ``result`` as
opaque bytes; everything else in wf reads them as UTF-8 JSON:

==================  ===========================================
payload             call
==================  ===========================================
``b""`` (empty)     ``fn()``
JSON array          ``fn(*array)`` (positional arguments)
JSON object         ``fn(**object)`` (keyword arguments)
anything else       refused
==================  ===========================================

A result is the JSON of the activity's return value (``null`` for
``None``). The run engine writes payloads for the activity nodes it submits
and reads results; the worker SDK reads payloads and writes results
(re-exported as ``wf.worker.encode_payload`` and friends, where a refused
payload is the worker's non-retryable ``InvalidPayload``). Both import the
convention from here, so neither depends on the other.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from wf.errors import InvalidArgument

_encoder: Final = msgspec.json.Encoder()


def encode_payload(*args: Any, **kwargs: Any) -> bytes:
    """The payload for ``fn(*args)`` or ``fn(**kwargs)`` (one form, not both)."""
    if args and kwargs:
        raise InvalidArgument(
            "a payload carries positional or keyword arguments, not both", field="payload"
        )
    if kwargs:
        return _encoder.encode(kwargs)
    if args:
        return _encoder.encode(list(args))
    return b""


def payload_arguments(payload: bytes) -> tuple[list[Any], dict[str, Any]]:
    """``(args, kwargs)`` from a payload; ``InvalidArgument`` if it breaks the convention."""
    if not payload:
        return [], {}
    try:
        value = msgspec.json.decode(payload)
    except msgspec.DecodeError as exc:
        raise InvalidArgument(f"payload is not JSON: {exc}", field="payload") from None
    if isinstance(value, list):
        return value, {}
    if isinstance(value, dict):
        return [], value
    raise InvalidArgument(
        f"payload must be a JSON array or object, not {type(value).__name__}", field="payload"
    )


def encode_result(value: Any) -> bytes:
    """The reported result: the JSON of an activity's return value."""
    return _encoder.encode(value)


def decode_result(result: bytes) -> Any:
    """An activity's return value from its reported result (``None`` if empty)."""
    return msgspec.json.decode(result) if result else None
