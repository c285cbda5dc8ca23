"""Bounds on every value that crosses the wire, declared once.

Theory of operation
-------------------
Whatever a request carries must be a value both stores can hold and that no
later step (the run engine, a restart, ``wf store check``) chokes on, and one
caller's value must never cost anyone else. So every kind of value has a
bound here:

- **Strings.** PostgreSQL ``TEXT`` refuses NUL, and control characters in an
  id end up in headers, logs and file names; so ids and names carry no
  control character at all and free text carries no NUL. Lengths are
  bounded so that one string cannot fill memory, a log line or an index.
- **Integers** are signed 64-bit (what ``BIGINT`` and SQLite's ``INTEGER``
  hold); counts, versions and page sizes have tighter ranges of their own.
- **Floats** are finite (JSON has no NaN or infinity, and msgspec refuses
  numbers that overflow a double); instants and durations are bounded to
  ranges a clock can mean.
- **Free-form JSON** (plans, deployment bodies, run inputs, triggers,
  interrupt answers) is walked by :func:`check_json_value`: nesting depth,
  node count, and the string and integer rules above, keys included.
- **Payloads** (activity arguments and results, heartbeat details) are bytes
  the scheduler never reads but the run engine and workers decode: each must
  be empty or one UTF-8 JSON document within :data:`PAYLOAD_BYTES_MAX` and
  :data:`JSON_DEPTH_MAX` (:func:`check_json_bytes`).

The annotated types (:data:`Id`, :data:`Name`, :data:`Text`, :data:`I64`, ...)
are used by the parameter schemas, so msgspec enforces them before any
handler runs and ``rpc.discover`` publishes them. This module imports only
msgspec, so the ``App`` client and the worker SDK check the same bounds
before they send.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

import msgspec

from wf.errors import InvalidArgument

ID_LENGTH_MAX: Final = 256
"""Longest id (activity, worker, run, schedule, deployment, artifact, correlation)."""
NAME_LENGTH_MAX: Final = 256
"""Longest name (tenant, activity type, capability, label, policy, region, hostname)."""
TEXT_LENGTH_MAX: Final = 16_384
"""Longest free text (reasons, notes, error messages and types)."""
PAYLOAD_BYTES_MAX: Final = 2 * 1024 * 1024
"""Largest payload: activity arguments or result, in bytes."""
DETAILS_BYTES_MAX: Final = 64 * 1024
"""Largest heartbeat details, in bytes."""
JSON_DEPTH_MAX: Final = 64
"""Deepest nesting of arrays and objects in any JSON value or payload."""
JSON_NODES_MAX: Final = 20_000
"""Most values (scalars, arrays, objects and keys) in one free-form JSON value."""
I64_MIN: Final = -(2**63)
"""Smallest integer anywhere on the wire."""
I64_MAX: Final = 2**63 - 1
"""Largest integer anywhere on the wire."""
COUNT_MAX: Final = 1_000_000
"""Upper bound of counts a caller sets (attempts, concurrency, active runs, steps)."""
CONCURRENCY_MAX: Final = 10_000
"""Most leases one worker may hold at once (and report in one heartbeat)."""
PAGE_LIMIT_MAX: Final = 100
"""Largest page a list method returns."""
INSTANT_MAX: Final = 253_402_300_799.0
"""Latest instant (seconds since the epoch): 9999-12-31T23:59:59Z."""
DURATION_MAX_S: Final = 366.0 * 24 * 3600 * 100
"""Longest duration, in seconds (a century)."""

_NO_CONTROL: Final = r"^[^\x00-\x1f\x7f]*$"
_NO_NUL: Final = r"^[^\x00]*$"

Id = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=ID_LENGTH_MAX,
        pattern=_NO_CONTROL,
        description="An id: 1-256 characters, no control characters.",
    ),
]
Name = Annotated[
    str,
    msgspec.Meta(
        max_length=NAME_LENGTH_MAX,
        pattern=_NO_CONTROL,
        description="A name: at most 256 characters, no control characters.",
    ),
]
Text = Annotated[
    str,
    msgspec.Meta(
        max_length=TEXT_LENGTH_MAX,
        pattern=_NO_NUL,
        description="Free text: at most 16,384 characters, no NUL.",
    ),
]
Cursor = Annotated[
    str,
    msgspec.Meta(
        max_length=1024,
        pattern=_NO_CONTROL,
        description="An opaque page cursor: at most 1,024 characters, no control characters.",
    ),
]
I64 = Annotated[int, msgspec.Meta(ge=I64_MIN, le=I64_MAX)]
NonNegI64 = Annotated[int, msgspec.Meta(ge=0, le=I64_MAX)]
Positive64 = Annotated[int, msgspec.Meta(ge=1, le=I64_MAX)]
Count = Annotated[int, msgspec.Meta(ge=0, le=COUNT_MAX)]
PositiveCount = Annotated[int, msgspec.Meta(ge=1, le=COUNT_MAX)]
PageLimit = Annotated[int, msgspec.Meta(ge=1, le=PAGE_LIMIT_MAX)]
Instant = Annotated[float, msgspec.Meta(ge=-INSTANT_MAX, le=INSTANT_MAX)]
Seconds = Annotated[float, msgspec.Meta(ge=0.0, le=DURATION_MAX_S)]
Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Payload = Annotated[bytes, msgspec.Meta(max_length=PAYLOAD_BYTES_MAX)]
Details = Annotated[bytes, msgspec.Meta(max_length=DETAILS_BYTES_MAX)]


_AT_PATH: Final = re.compile(r" - at `(?:key` in `)?\$\.?(.*)`$")


def invalid_params(problem: str) -> InvalidArgument:
    """The error for parameters that failed their schema (a type or a bound), naming the
    offending field's path as msgspec reports it (``activities[0].tenant``)."""
    match = _AT_PATH.search(problem)
    details: dict[str, Any] = {"field": match.group(1) or "params"} if match else {}
    return InvalidArgument(f"Invalid params: {problem}", **details)


def _refuse(field: str, problem: str) -> InvalidArgument:
    return InvalidArgument(f"{field}: {problem}", field=field)


def check_text(value: str, field: str, *, length_max: int = TEXT_LENGTH_MAX) -> str:
    """``value`` if it is free text within bounds (no NUL, not too long), else InvalidArgument."""
    if len(value) > length_max:
        raise _refuse(field, f"longer than {length_max} characters")
    if "\x00" in value:
        raise _refuse(field, "contains a NUL character")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: no store can hold it
            raise _refuse(field, "is not valid UTF-8 (a lone surrogate)") from None
    return value


_CONTROL_RE: Final = re.compile(_NO_CONTROL)


def check_name(value: str, field: str) -> str:
    """``value`` if it is a name within bounds (no control character, not too long)."""
    if len(value) > NAME_LENGTH_MAX:
        raise _refuse(field, f"longer than {NAME_LENGTH_MAX} characters")
    if _CONTROL_RE.match(value) is None:
        raise _refuse(field, "contains a control character")
    return value


def check_json_value(value: Any, field: str) -> Any:
    """``value`` if it is free-form JSON within bounds, else InvalidArgument naming ``field``.

    Iterative, so depth is bounded by :data:`JSON_DEPTH_MAX` rather than by
    Python's recursion limit, and bounded in work by :data:`JSON_NODES_MAX`.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    nodes = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > JSON_NODES_MAX:
            raise _refuse(field, f"more than {JSON_NODES_MAX} JSON values")
        if isinstance(item, str):
            if "\x00" in item:
                raise _refuse(field, "a string contains a NUL character")
        elif isinstance(item, bool) or item is None or isinstance(item, float):
            continue
        elif isinstance(item, int):
            if not I64_MIN <= item <= I64_MAX:
                raise _refuse(field, "an integer is outside the signed 64-bit range")
        elif isinstance(item, dict | list):
            if depth >= JSON_DEPTH_MAX:
                raise _refuse(field, f"nested deeper than {JSON_DEPTH_MAX} levels")
            if isinstance(item, dict):
                for key, inner in item.items():
                    stack.append((key, depth + 1))
                    stack.append((inner, depth + 1))
            else:
                stack.extend((inner, depth + 1) for inner in item)
        else:
            # Typed values a Python caller passes (a trigger struct, a datetime) are
            # checked as the JSON they will be sent as.
            try:
                builtin = msgspec.to_builtins(item)
            except (TypeError, msgspec.EncodeError):
                raise _refuse(field, f"{type(item).__name__} is not a JSON value") from None
            if type(builtin) is type(item):
                raise _refuse(field, f"{type(item).__name__} is not a JSON value")
            nodes -= 1
            stack.append((builtin, depth))
    return value


_STRING_RE: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")
_TO_SQUARE: Final = bytes.maketrans(b"{}", b"[]")


def json_depth_exceeds(data: bytes, depth_max: int = JSON_DEPTH_MAX) -> bool:
    """Whether the well-formed JSON text ``data`` nests deeper than ``depth_max``.

    Works on the bytes (C-speed passes, no Python walk): strings are cut out,
    every byte but brackets dropped, and innermost ``[]`` pairs peeled one
    level per pass; text that is still not empty after ``depth_max`` passes
    is too deep. Few brackets in all means shallow without any pass.
    """
    if data.count(b"[") + data.count(b"{") <= depth_max:
        return False
    brackets = _STRING_RE.sub(b"", data).translate(_TO_SQUARE, _NOT_BRACKETS)
    for _ in range(depth_max):
        if not brackets:
            return False
        brackets = brackets.replace(b"[]", b"")
    return bool(brackets)


def check_json_bytes(data: bytes, field: str, *, bytes_max: int = PAYLOAD_BYTES_MAX) -> bytes:
    """``data`` if it is empty or one UTF-8 JSON document within bounds, else InvalidArgument."""
    if not data:
        return data
    if len(data) > bytes_max:
        raise _refuse(field, f"larger than {bytes_max} bytes")
    try:
        msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        reason = "not valid UTF-8" if isinstance(exc, UnicodeDecodeError) else "not valid JSON"
        raise _refuse(field, reason) from None
    if json_depth_exceeds(data):
        raise _refuse(field, f"nested deeper than {JSON_DEPTH_MAX} levels")
    return data
