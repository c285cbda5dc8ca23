"""Records to rows and rows to values: the one mapping both backends share.

Theory of operation
-------------------
:func:`plan_writes` turns a batch of core records into an ordered list of
``(query name, parameters)`` steps plus the counters the batch moves
forward; a backend executes the steps in one transaction. Lifecycle columns
follow one rule the core also keeps: ``worker_id`` and ``lease_expires_at``
describe the *current* lease, so they are cleared whenever the activity is
not leased or executing (the history keeps who held it).

Blobs (an activity's submission, a worker's registration) are msgpack,
decoded with msgspec into the same types the core uses, so a malformed blob
is caught by type validation and reported, never guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import cache
from importlib import resources
from typing import Any, Final

import msgspec

from wf.errors import Internal
from wf.scheduler.model import Activity, ActivityState, TransitionReason, WorkerInfo
from wf.scheduler.outputs import (
    ActivitySubmitted,
    LeaseRenewed,
    Record,
    Transition,
    WorkerRemoved,
    WorkerUpserted,
)

_HELD: Final = frozenset({ActivityState.LEASED, ActivityState.EXECUTING})

_encoder = msgspec.msgpack.Encoder()
activity_decoder: Final = msgspec.msgpack.Decoder(Activity)
worker_info_decoder: Final = msgspec.msgpack.Decoder(WorkerInfo)


def encode(value: object) -> bytes:
    """msgpack bytes of a msgspec value."""
    return _encoder.encode(value)


Step = tuple[str, dict[str, Any]]
"""A named query and its parameters."""


class _CompactActivity(Activity, omit_defaults=True, kw_only=True, gc=False):
    """An :class:`Activity` that encodes without the fields still at their defaults.

    Same fields and layout as ``Activity`` (no new fields), so an ``Activity``
    copy can take this class just to be encoded. A spec blob shrinks from ~430
    to ~100 bytes for a typical activity and decodes several times faster with
    the plain ``Activity`` decoder, which fills the defaults back in (and does
    not allocate a fresh, GC-tracked empty ``frozenset`` per row: that alone
    made loading 10^6 activities twice as slow).
    """


_ACTIVITY_DEFAULTS: Final[dict[str, Any]] = dict(
    zip(
        Activity.__struct_fields__[-len(Activity.__struct_defaults__) :],
        Activity.__struct_defaults__,
        strict=True,
    )
)


def _submission(a: Activity) -> Activity:
    """The part of an activity that is fixed once accepted (state fields reset), ready
    to encode compactly.

    ``omit_defaults`` compares by identity, so equal values that are not the
    default objects themselves (an empty ``frozenset`` decoded from the wire,
    a ``0.0`` set by the core) are swapped for the default objects first.
    """
    d = _ACTIVITY_DEFAULTS
    spec = msgspec.structs.replace(
        a,
        state=ActivityState.READY,
        queue_ticket=0,
        tenant=d["tenant"] if a.tenant == d["tenant"] else a.tenant,
        capabilities=a.capabilities or d["capabilities"],
        retry=d["retry"] if a.retry == d["retry"] else a.retry,
        lease_expires_at=a.lease_expires_at or d["lease_expires_at"],
        queued_at=a.queued_at or d["queued_at"],
        submitted_at=a.submitted_at or d["submitted_at"],
    )
    spec.__class__ = _CompactActivity
    return spec


def plan_writes(records: Iterable[Record]) -> tuple[list[Step], dict[str, int]]:
    """The ordered SQL steps for ``records`` and the counters they raise.

    Every transition is one history row, but the activity row is updated once per
    run of transitions of one activity with no other update of it in between
    (:func:`_merged_update`): a grant committed as its start (``LEASED`` then
    ``EXECUTING``) is one ``UPDATE``, not two.
    """
    steps: list[Step] = []
    updates: dict[str, int] = {}
    """Activity id -> index in ``steps`` of its row update that a next transition of
    the same activity may be folded into."""
    seq = token = worker_seq = 0
    for r in records:
        if type(r) is Transition:
            held = r.to_state in _HELD
            params = {
                "activity_id": r.activity_id,
                "at": r.at,
                # ``_value_``: the plain attribute behind ``.value``, several times cheaper.
                "from_state": r.from_state._value_,
                "to_state": r.to_state._value_,
                "reason": r.reason,
                "attempt": r.attempt,
                "failures": r.failures,
                "infra_requeues": r.infra_requeues,
                "steals": r.steals,
                "token": r.token,
                "worker_id": r.worker_id,
                "lease_expires_at": r.lease_expires_at,
                "not_before": r.not_before,
                "error": r.error,
                "result": r.result,
                "stack_trace": r.stack_trace,
                "held_worker_id": r.worker_id if held else None,
                "held_expires_at": r.lease_expires_at if held else 0.0,
                "queued_at": (r.at if r.to_state is _QUEUED and r.reason != _STOLEN else None),
            }
            earlier = updates.get(r.activity_id)
            if earlier is None:
                updates[r.activity_id] = len(steps)
                steps.append(("apply_transition", params))
            else:
                steps[earlier] = ("apply_transition", _merged_update(steps[earlier][1], params))
            steps.append(("insert_transition", params))
            if r.token > token:
                token = r.token
        elif type(r) is ActivitySubmitted:
            a = r.activity
            steps.append(
                (
                    "insert_activity",
                    {
                        "activity_id": a.activity_id,
                        "seq": a.seq,
                        "spec": encode(_submission(a)),
                        "state": a.state.value,
                        "not_before": a.not_before,
                        "at": r.at,
                    },
                )
            )
            if a.seq > seq:
                seq = a.seq
        elif type(r) is LeaseRenewed:
            # A renewal matches the token the last update set: nothing folds across it.
            updates.pop(r.activity_id, None)
            steps.append(
                (
                    "renew_lease",
                    {
                        "activity_id": r.activity_id,
                        "token": r.token,
                        "expires_at": r.expires_at,
                        "details": r.details,
                        "at": r.at,
                    },
                )
            )
        elif type(r) is WorkerUpserted:
            steps.append(
                (
                    "upsert_worker",
                    {
                        "worker_id": r.info.worker_id,
                        "seq": r.seq,
                        "info": encode(r.info),
                        "status": r.status.value,
                        "registered_at": r.registered_at,
                        "at": r.at,
                    },
                )
            )
            if r.seq > worker_seq:
                worker_seq = r.seq
        elif type(r) is WorkerRemoved:
            steps.append(("delete_worker", {"worker_id": r.worker_id}))
        else:  # pragma: no cover - the Record union is closed
            raise Internal(f"no storage rule for record {type(r).__name__}")
    counters = {
        name: value
        for name, value in (("seq", seq), ("token", token), ("worker_seq", worker_seq))
        if value
    }
    return steps, counters


_STOLEN: Final = TransitionReason.STOLEN.value
_QUEUED: Final = ActivityState.QUEUED
_KEPT_UNLESS_SET: Final = ("not_before", "error", "queued_at")
"""``apply_transition`` columns a ``NULL`` parameter leaves as they are (COALESCE)."""


def _merged_update(first: dict[str, Any], then: dict[str, Any]) -> dict[str, Any]:
    """One ``apply_transition`` with the effect of ``first`` then ``then`` on one row.

    Every column the query sets outright comes from ``then``; the columns it keeps
    when given ``NULL`` (:data:`_KEPT_UNLESS_SET`) take ``then``'s value if set,
    else ``first``'s, which is what running both in order leaves. ``first`` is not
    changed: it is also a history row's parameters.
    """
    merged = dict(then)
    for key in _KEPT_UNLESS_SET:
        if merged[key] is None:
            merged[key] = first[key]
    return merged


_FAMILY: Final[dict[str, int]] = {
    "insert_activity": 0,
    "apply_transition": 1,
    "renew_lease": 1,
    "upsert_worker": 2,
    "delete_worker": 2,
    "insert_transition": 3,
}
"""Query -> family. Families touch disjoint rows, so only the order inside one
family matters: activity inserts (each precedes its own updates), activity
updates (a renewal matches the token the last transition set), workers (a
removal and a later registration of one id), and the history (its ids are its
order)."""


def group_steps(steps: Sequence[Step]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The steps as ``executemany`` groups, with the same final effect as running
    them one by one in order.

    Steps are stably partitioned by family (see :data:`_FAMILY`), then
    consecutive steps of one query are merged. Without the partition a batch of
    transitions alternates ``apply_transition`` and ``insert_transition`` and
    nothing merges; with it a whole batch is a handful of ``executemany`` calls.
    """
    families: list[list[Step]] = [[] for _ in range(max(_FAMILY.values()) + 1)]
    for step in steps:
        family = _FAMILY.get(step[0])
        if family is None:
            raise Internal(f"no family for query {step[0]!r}")
        families[family].append(step)
    grouped: list[tuple[str, list[dict[str, Any]]]] = []
    for family_steps in families:
        for name, params in family_steps:
            if grouped and grouped[-1][0] == name:
                grouped[-1][1].append(params)
            else:
                grouped.append((name, [params]))
    return grouped


_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@cache
def queries() -> dict[str, str]:
    """The named queries of ``sql/queries.sql`` (SQLite ``:name`` parameter style)."""
    text = resources.files("wf.store").joinpath("sql/queries.sql").read_text()
    parts = _NAME.split(text)
    named: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [line for line in body.strip().splitlines() if not line.startswith("--")]
        named[name] = "\n".join(lines).strip().rstrip(";")
    return named


_PARAM = re.compile(r"(?<!:):(\w+)")


def postgres_style(sql: str) -> str:
    """``sql`` with psycopg's ``%(name)s`` parameters in place of ``:name``."""
    return _PARAM.sub(r"%(\1)s", sql)


@cache
def postgres_queries() -> dict[str, str]:
    """The same queries with psycopg's ``%(name)s`` parameters."""
    return {name: postgres_style(sql) for name, sql in queries().items()}


def migrations(backend: str) -> list[tuple[int, str, str]]:
    """``(version, file name, sql)`` for a backend's migrations, ascending."""
    folder = resources.files("wf.store").joinpath(f"sql/{backend}")
    found: list[tuple[int, str, str]] = []
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            found.append((int(name[:4]), name, entry.read_text()))
    return sorted(found)
