"""Pages of list answers: the page-size bound and opaque keyset cursors, declared once.

Theory of operation
-------------------
Every list method answers one page, ``{"<things>": [...], "next_cursor": ...}``,
of at most ``limit`` (1 to :data:`~wf.wire.bounds.PAGE_LIMIT_MAX`) items in a
fixed order, and ``next_cursor`` is ``None`` on the last page. So no answer,
and no read behind it, grows with the number of stored objects: one caller
listing 10,000 schedules costs everyone else a page at a time.

A cursor is the *key* of the last item a page held (keyset pagination:
``WHERE key > :after ORDER BY key LIMIT :limit``), so the store finds the next
page through its index in O(limit) and an object created or deleted between
two calls never shifts the rest: every object that exists for the whole walk
is listed exactly once, in order. The key travels as
``base64url(JSON [kind, key...])``, opaque to callers; ``kind`` names the
method, so a cursor of one method is refused by another, and every decoded
key is checked against the bounds the store can hold (ids without control
characters, integers in the signed 64-bit range) before it reaches a query.
Anything else is :class:`~wf.errors.InvalidArgument` naming ``cursor``.

Building a page's items can cost more than reading them (a schedule's view
resolves its next cron instant, about 0.2 ms each), so
:func:`views_in_slices` builds them in slices of about
:data:`VIEW_SLICE_S` and yields the event loop between slices: a page of 100
never holds the loop for the whole page, and other calls are served in
between.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Final, TypeVar

import msgspec

from wf.errors import InvalidArgument
from wf.wire.bounds import I64_MAX, I64_MIN, ID_LENGTH_MAX, PAGE_LIMIT_MAX

PAGE_LIMIT_DEFAULT: Final = 50
"""Page size when the caller names none."""
PAGE_BYTES_MAX: Final = 4 * 1024 * 1024
"""Most stored bytes (artifact plans) one page carries: a page of large items stops
early, never before its first item, and ``next_cursor`` continues after it."""
VIEW_SLICE_S: Final = 0.002
"""How long :func:`views_in_slices` works before it yields the event loop."""

T = TypeVar("T")
V = TypeVar("V")

Limit = Annotated[
    int,
    msgspec.Meta(
        ge=I64_MIN,
        le=I64_MAX,
        description=f"Page size, 1 to {PAGE_LIMIT_MAX} (others are refused naming limit).",
    ),
]
"""The ``limit`` of list methods' parameters. Any 64-bit integer decodes, so that the
handler's :func:`check_limit` refuses 0 or 101 with the very error the Python API
raises (the ``App`` twin and the API answer alike); the range is in the description
``rpc.discover`` publishes."""

_KEY_STR: Final = re.compile(r"^[^\x00-\x1f\x7f]*$")
_decoder: Final = msgspec.json.Decoder(list[Any])


def check_limit(limit: object) -> int:
    """``limit`` if it is a page size (an ``int``, 1 to ``PAGE_LIMIT_MAX``), else
    InvalidArgument naming ``limit``."""
    if type(limit) is not int or not 1 <= limit <= PAGE_LIMIT_MAX:
        raise InvalidArgument(
            f"limit must be an integer from 1 to {PAGE_LIMIT_MAX}", field="limit", limit=limit
        )
    return limit


def encode_cursor(kind: str, *key: str | int) -> str:
    """The opaque cursor that resumes a ``kind`` listing after the item keyed ``key``."""
    raw = msgspec.json.encode([kind, *key])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: object, kind: str, shape: tuple[type, ...]) -> tuple[Any, ...]:
    """The key a ``kind`` cursor resumes after, each part of the type ``shape`` names.

    InvalidArgument (field ``cursor``) for anything :func:`encode_cursor` did not
    make for ``kind``, and for keys no store could hold: a string longer than an
    id or with a control character, an integer outside ``0..2**63-1``.
    """
    try:
        if not isinstance(cursor, str) or len(cursor) > 4 * ID_LENGTH_MAX * len(shape) + 64:
            raise ValueError("not a cursor")
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        decoded = _decoder.decode(raw)
        if len(decoded) != 1 + len(shape) or decoded[0] != kind:
            raise ValueError("another listing's cursor")
        key = tuple(decoded[1:])
        for part, expected in zip(key, shape, strict=True):
            _check_part(part, expected)
    except (ValueError, binascii.Error, msgspec.DecodeError):
        raise InvalidArgument(
            f"cursor is not a {kind} cursor: pass back a next_cursor as it was given",
            field="cursor",
        ) from None
    return key


def _check_part(part: object, expected: type) -> None:
    if type(part) is not expected:
        raise ValueError("mistyped key")
    if isinstance(part, str) and (len(part) > ID_LENGTH_MAX or not _KEY_STR.match(part)):
        raise ValueError("not an id")
    if isinstance(part, int) and not 0 <= part <= I64_MAX:
        raise ValueError("out of range")


async def views_in_slices(
    items: Sequence[T], view: Callable[[T], V], *, slice_s: float = VIEW_SLICE_S
) -> list[V]:
    """``[view(item) for item in items]``, yielding the event loop whenever about
    ``slice_s`` of work has passed since the last yield (see the module docstring)."""
    views: list[V] = []
    started = time.perf_counter()
    for item in items:
        views.append(view(item))
        if time.perf_counter() - started >= slice_s:
            await asyncio.sleep(0)
            started = time.perf_counter()
    return views
