"""Catalog bodies read back from the store, decoded fail-closed.

Deployments, runs and schedules keep their whole document in one ``body``
column, artifacts their plan in ``plan``; the store hands them back as bytes
(:mod:`wf.store.rows`). A body that does not decode is never guessed at: it
is a :class:`~wf.errors.CorruptRecord` naming its table and key, and the
object is blocked. Pure (no store import), so the run model and the DAG
engine that use it stay free of the server side.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import msgspec

from wf.errors import CorruptRecord

_T = TypeVar("_T")


def decode_body(
    decode: Callable[[bytes], _T], body: bytes, table: str, key: str, column: str = "body"
) -> _T:
    """``decode(body)``; a blob that does not decode raises :class:`CorruptRecord`."""
    try:
        return decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise CorruptRecord(
            f"{table} row {key!r}: stored {column} does not decode ({type(exc).__name__}: {exc})",
            table=table,
            key=key,
        ) from None
