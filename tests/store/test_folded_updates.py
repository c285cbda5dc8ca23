"""One row update per run of transitions (``wf.store.codec.plan_writes``).

A grant committed as its start is two transitions of one activity in one
append; the store writes both history rows but updates the activity row once,
with the effect of both updates in order. These tests hold the folding to
that: the steps it plans, and, on both backends, stored tables identical to
those of the same records appended one at a time (where nothing can fold).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _store_backends import Backend, postgres_backend, sqlite_backend

from _pg import drop_schema, new_schema_name
from wf.scheduler.model import Activity, ActivityState, TransitionReason
from wf.scheduler.outputs import ActivitySubmitted, LeaseRenewed, Record, Transition
from wf.store import codec

T0 = 1_767_225_600.0
S = ActivityState


def transition(activity_id: str, to: ActivityState, at: float, **kw: Any) -> Transition:
    kw.setdefault("from_state", S.QUEUED)
    kw.setdefault("reason", TransitionReason.GRANTED.value)
    kw.setdefault("attempt", 1)
    kw.setdefault("failures", 0)
    kw.setdefault("infra_requeues", 0)
    kw.setdefault("token", 1)
    return Transition(at=at, activity_id=activity_id, to_state=to, **kw)


def test_a_grant_committed_as_its_start_is_one_row_update_and_two_history_rows() -> None:
    steps, _ = codec.plan_writes(
        [
            transition("a", S.LEASED, T0, worker_id="w", lease_expires_at=T0 + 30),
            transition(
                "a", S.EXECUTING, T0, from_state=S.LEASED, worker_id="w", lease_expires_at=T0 + 30
            ),
        ]
    )
    assert [name for name, _ in steps] == [
        "apply_transition",
        "insert_transition",
        "insert_transition",
    ]
    update = steps[0][1]
    assert (update["to_state"], update["held_worker_id"]) == ("executing", "w")
    assert [p["to_state"] for name, p in steps if name == "insert_transition"] == [
        "leased",
        "executing",
    ]


def test_a_renewal_between_two_transitions_keeps_both_row_updates() -> None:
    steps, _ = codec.plan_writes(
        [
            transition("a", S.LEASED, T0, token=7, worker_id="w"),
            LeaseRenewed(at=T0 + 1, activity_id="a", token=7, expires_at=T0 + 60),
            transition("a", S.EXECUTING, T0 + 2, from_state=S.LEASED, token=7, worker_id="w"),
        ]
    )
    assert [name for name, _ in steps].count("apply_transition") == 2


def test_a_folded_update_keeps_what_the_earlier_transition_set_and_the_later_left_unset() -> None:
    steps, _ = codec.plan_writes(
        [
            transition("a", S.QUEUED, T0, from_state=S.EXECUTING, error="boom", not_before=T0 + 5),
            transition("a", S.LEASED, T0 + 5, token=2, worker_id="w"),
        ]
    )
    [(_, update)] = [s for s in steps if s[0] == "apply_transition"]
    assert update["error"] == "boom"
    assert update["not_before"] == T0 + 5
    assert update["queued_at"] == T0  # the requeue's instant: it entered the queue then
    assert (update["to_state"], update["token"]) == ("leased", 2)


# ------------------------------------------------ the same tables, both ways

ACTIVITIES = 120
RECORDS = 900
REASONS = (
    TransitionReason.GRANTED.value,
    TransitionReason.STARTED.value,
    TransitionReason.STOLEN.value,
    TransitionReason.LEASE_ABANDONED.value,
    "operator cancel",
)


def random_records(rng: random.Random) -> list[Record]:
    """Submissions, then transitions and renewals of random activities with random
    fields (the store applies records; it does not judge them)."""
    ids = [f"act-{i:03d}" for i in range(ACTIVITIES)]
    records: list[Record] = [
        ActivitySubmitted(
            at=T0, activity=Activity(activity_id=a, activity_type="t", seq=i + 1, submitted_at=T0)
        )
        for i, a in enumerate(ids)
    ]
    states = list(S)
    at = T0
    token = 0
    for _ in range(RECORDS):
        at += rng.choice((0.0, 0.5))
        a = rng.choice(ids[: rng.choice((3, ACTIVITIES))])  # runs of a few ids, too
        if rng.random() < 0.15:
            records.append(
                LeaseRenewed(at=at, activity_id=a, token=rng.randint(0, token), expires_at=at + 9)
            )
            continue
        token += 1
        records.append(
            transition(
                a,
                rng.choice(states),
                at,
                from_state=rng.choice(states),
                reason=rng.choice(REASONS),
                attempt=rng.randint(0, 4),
                failures=rng.randint(0, 3),
                infra_requeues=rng.randint(0, 3),
                steals=rng.randint(0, 2),
                token=token,
                worker_id=rng.choice((None, "w1", "w2")),
                lease_expires_at=rng.choice((0.0, at + 30)),
                not_before=rng.choice((None, at + 10)),
                error=rng.choice((None, None, f"err {token}")),
                result=rng.choice((None, b"ok")),
            )
        )
    return records


def chunks(records: list[Record], rng: random.Random) -> Iterator[list[Record]]:
    """``records`` in order, cut into appends of random sizes."""
    i = 0
    while i < len(records):
        n = rng.choice((1, 2, 3, 8, 50))
        yield records[i : i + n]
        i += n


async def stored_tables(backend: Backend, appends: Iterator[list[Record]]) -> dict[str, Any]:
    store = backend.make()
    await store.open()
    try:
        for records in appends:
            await store.append(records)
    finally:
        await store.close()
    return {
        "activities": backend.sql("SELECT * FROM activities ORDER BY activity_id"),
        "transitions": backend.sql("SELECT * FROM transitions ORDER BY id"),
    }


@pytest.fixture(params=["sqlite", "postgres"])
def two_locations(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Backend, ...]]:
    """Two fresh, test-private store locations on one backend."""
    if request.param == "sqlite":
        yield sqlite_backend(tmp_path / "one"), sqlite_backend(tmp_path / "each")
        return
    dsn: str = request.getfixturevalue("pg_dsn")
    schemas = (new_schema_name(), new_schema_name())
    try:
        yield tuple(postgres_backend(dsn, s) for s in schemas)
    finally:
        for schema in schemas:
            drop_schema(dsn, schema)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_folded_appends_store_exactly_what_record_by_record_appends_store(
    two_locations: tuple[Backend, Backend], seed: int
) -> None:
    folded, each = two_locations
    records = random_records(random.Random(seed))

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        return (
            await stored_tables(folded, chunks(records, random.Random(seed))),
            await stored_tables(each, ([r] for r in records)),
        )

    by_chunks, one_by_one = asyncio.run(main())
    assert len(by_chunks["transitions"]) == sum(type(r) is Transition for r in records)
    assert by_chunks == one_by_one
