"""The store's share of issue 15's "nothing twice", on SQLite and PostgreSQL alike.

A run inserted with a request id keeps it, unique per tenant: a second insert
under the same (tenant, request id) is refused with ``AlreadyExists`` naming the
first run, inside the insert's transaction, so nothing of it (not even its
number) is kept. ``submitted_activities`` reads back each submission as the
core accepted it, which the scheduler API compares a retried submission with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from _store_backends import Backend

from wf.errors import AlreadyExists, InvalidArgument
from wf.scheduler import commands as cmd
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import Activity, same_submission
from wf.scheduler.timer import RelativeDelay
from wf.store import catalog
from wf.store.protocol import RunRow, Store
from wf.store.query import Query, Result, run_scripted

R = TypeVar("R")
T0 = 1_767_225_600.0


def run(main: Callable[[], Awaitable[R]]) -> R:
    async def wrapper() -> R:
        return await main()

    return asyncio.run(wrapper())


def run_row(tenant: str = "acme", request_id: str | None = None) -> RunRow:
    return RunRow(
        run_id="",
        seq=0,
        deployment_id="hello.default",
        tenant=tenant,
        status="admitted",
        schedule_id=None,
        body=b"{}",
        revision=1,
        created_at=T0,
        updated_at=T0,
        request_id=request_id,
    )


async def opened(backend: Backend) -> Store:
    store = backend.make()
    await store.open()
    return store


def test_a_request_id_is_unique_per_tenant_and_a_refused_insert_keeps_nothing(
    store_factory: Backend,
) -> None:
    async def main() -> None:
        store = await opened(store_factory)
        try:
            first = await store.insert_run(run_row(request_id="req"))
            assert (first.run_id, first.request_id) == ("run-000001", "req")
            with pytest.raises(AlreadyExists) as refused:
                await store.insert_run(run_row(request_id="req"))
            assert refused.value.details == {"request_id": "req", "run_id": "run-000001"}
            # The refused insert's number was rolled back with it.
            other_tenant = await store.insert_run(run_row(tenant="beta", request_id="req"))
            assert other_tenant.run_id == "run-000002"
            # Runs without a request id never collide.
            plain = [await store.insert_run(run_row()) for _ in range(2)]
            assert [r.run_id for r in plain] == ["run-000003", "run-000004"]

            found = await store.run_for_request("acme", "req")
            assert found is not None
            assert (found.run_id, found.request_id, found.tenant) == ("run-000001", "req", "acme")
            assert await store.run_for_request("acme", "nope") is None
            assert await store.run_for_request("gamma", "req") is None
            assert store_factory.sql("SELECT request_id FROM runs ORDER BY seq") == [
                ("req",),
                ("req",),
                (None,),
                (None,),
            ]
        finally:
            await store.close()

    run(main)


def test_submitted_activities_reads_each_submission_back_as_accepted(
    store_factory: Backend,
) -> None:
    async def main() -> None:
        store = await opened(store_factory)
        try:
            core = SchedulerCore()
            submitted = (
                Activity(activity_id="a", activity_type="t", payload=b"[1]", priority=1),
                Activity(activity_id="d", activity_type="t", delay=RelativeDelay(seconds=60)),
            )
            out = core.handle(cmd.Submit(now=T0, activities=submitted))
            await store.append(out.records)
            ids = ["a", "d", "unknown"] + [f"x{i}" for i in range(600)]
            found = await store.submitted_activities(ids)
            assert set(found) == {"a", "d"}
            assert same_submission(found["a"], submitted[0])
            assert same_submission(found["d"], submitted[1])
            assert found["d"].not_before == T0 + 60  # resolved at acceptance
            assert not same_submission(found["a"], submitted[1])
            # A blob that does not decode is left out: nobody can match it.
            store_factory.sql("UPDATE activities SET spec = ? WHERE activity_id = 'a'", b"\x00")
            assert set(await store.submitted_activities(["a", "d"])) == {"d"}
        finally:
            await store.close()

    run(main)


def script(answers: dict[str, Result]) -> tuple[list[Query], Callable[[Query], Result]]:
    asked: list[Query] = []

    def execute(query: Query) -> Result:
        asked.append(query)
        return answers[query.name]

    return asked, execute


def test_the_insert_body_names_the_run_that_took_the_request_id() -> None:
    asked, execute = script(
        {
            "next_run_seq": Result([(7,)]),
            "insert_requested_run": Result(rowcount=0),
            "select_run_by_request": Result([("run-000003",)]),
        }
    )
    with pytest.raises(AlreadyExists) as refused:
        run_scripted(catalog.insert_run(run_row(request_id="r")), execute)
    assert refused.value.details == {"request_id": "r", "run_id": "run-000003"}
    assert [q.name for q in asked] == [
        "next_run_seq",
        "insert_requested_run",
        "select_run_by_request",
    ]
    assert asked[1].params["request_id"] == "r"
    assert asked[2].params == {"tenant": "acme", "request_id": "r"}


def test_the_insert_body_without_a_request_id_is_the_plain_insert() -> None:
    asked, execute = script({"next_run_seq": Result([(1,)]), "insert_run": Result(rowcount=1)})
    stored = run_scripted(catalog.insert_run(run_row()), execute)
    assert stored.run_id == "run-000001"
    assert [q.name for q in asked] == ["next_run_seq", "insert_run"]
    assert "request_id" not in asked[1].params


def test_the_spec_read_binds_every_id_as_a_parameter() -> None:
    asked, execute = script({"select_activity_specs": Result([])})
    ids = ["a", "b'); DROP TABLE activities; --"]
    assert run_scripted(catalog.submitted_activities(ids), execute) == {}
    (query,) = asked
    assert query.filters == ("activity_id IN (:id_0, :id_1)",)
    assert query.params == {"id_0": ids[0], "id_1": ids[1]}
    assert run_scripted(catalog.submitted_activities([]), execute) == {}
    assert len(asked) == 1  # nothing to read: no query at all


def test_the_spec_read_refuses_more_ids_than_one_query_binds() -> None:
    with pytest.raises(InvalidArgument):
        catalog.submitted_activities([f"x{i}" for i in range(catalog.SPECS_PER_QUERY_MAX + 1)])
