"""Each catalog transaction body, held to its queries by a scripted driver.

A body (:mod:`wf.store.catalog`) yields named queries and is sent their rows;
here a :class:`Script` plays the database: it checks each query the body asks
for (its name, its parameters, that it exists in ``sql/queries.sql`` and
renders in both dialects) and answers with scripted rows. No database, no
thread, no event loop: the algorithm alone, the one both stores run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from wf.errors import AlreadyExists, Conflict, CorruptRecord, Internal, InvalidArgument, NotFound
from wf.scheduler.model import ActivityState
from wf.store import catalog, codec, pages
from wf.store.protocol import ArtifactRow, DeploymentRow, OccurrenceRow, RunRow, ScheduleRow
from wf.store.query import Body, Query, Result, render, run_scripted, sql_of

T0 = 1_767_225_600.0

Expect = tuple[str, dict[str, Any] | None, Result]
"""A query name, its exact parameters (``None``: not checked) and the answer."""


class Script:
    """Plays the database for one body: answers the expected queries in order."""

    def __init__(self, *steps: Expect) -> None:
        self.steps = list(steps)
        self.asked: list[Query] = []

    def __call__(self, query: Query) -> Result:
        assert query.name in codec.queries(), f"{query.name} is not in queries.sql"
        for dialect in ("sqlite", "postgres"):
            assert sql_of(query, dialect)  # every query renders in both dialects
        assert self.steps, f"the body asked for an unexpected {query.name}"
        name, params, answer = self.steps.pop(0)
        assert query.name == name
        if params is not None:
            assert query.params == params
        self.asked.append(query)
        return answer

    def run(self, body: Body[Any]) -> Any:
        """Drive ``body`` to its end; every scripted step must have been asked for."""
        value = run_scripted(body, self)
        assert not self.steps, f"the body never asked for {[s[0] for s in self.steps]}"
        return value


def rows(*found: tuple[Any, ...]) -> Result:
    return Result(rows=list(found))


def changed(count: int) -> Result:
    return Result(rowcount=count)


NONE = Result()


# ------------------------------------------------------------------ rows


def artifact(version: int = 1, content_hash: str = "sha256:aa", at: float = T0) -> ArtifactRow:
    return ArtifactRow(
        artifact_id="art", version=version, plan=b"{}", content_hash=content_hash, created_at=at
    )


def artifact_row(a: ArtifactRow) -> tuple[Any, ...]:
    return (a.artifact_id, a.version, a.plan, a.content_hash, a.created_at)


def deployment(revision: int = 1) -> DeploymentRow:
    return DeploymentRow(deployment_id="art.d", body=b"{}", revision=revision, updated_at=T0)


def run_row(seq: int = 1, revision: int = 1, status: str = "admitted") -> RunRow:
    return RunRow(
        run_id=f"run-{seq:06d}",
        seq=seq,
        deployment_id="art.d",
        tenant="t1",
        status=status,
        schedule_id=None,
        body=b"{}",
        revision=revision,
        created_at=T0,
        updated_at=T0,
    )


def run_tuple(r: RunRow) -> tuple[Any, ...]:
    return (r.run_id, r.seq, r.deployment_id, r.tenant, r.status, r.schedule_id, r.body,
            r.revision, r.created_at, r.updated_at)  # fmt: skip


def schedule(revision: int = 1, status: str = "active") -> ScheduleRow:
    return ScheduleRow(
        schedule_id="s1",
        tenant="t1",
        deployment_id="art.d",
        status=status,
        body=b"{}",
        revision=revision,
        created_at=T0,
        updated_at=T0 + revision,
    )


def schedule_tuple(s: ScheduleRow) -> tuple[Any, ...]:
    return (s.schedule_id, s.tenant, s.deployment_id, s.status, s.body, s.revision,
            s.created_at, s.updated_at)  # fmt: skip


def occurrence(instant: float, status: str = "admitted") -> OccurrenceRow:
    return OccurrenceRow(schedule_id="s1", instant=instant, status=status, recorded_at=T0)


def transition_tuple(activity_id: str = "a1", to_state: str = "queued") -> tuple[Any, ...]:
    return (activity_id, T0, "ready", to_state, "submitted", 0, 0, 0, 0, 0, None, 0.0, None,
            None, None, None)  # fmt: skip


# -------------------------------------------------------------- artifacts


def test_put_artifact_inserts_a_new_version_with_one_query() -> None:
    a = artifact()
    script = Script(("insert_artifact", artifact_row_params(a), changed(1)))
    assert script.run(catalog.put_artifact(a)) == a


def artifact_row_params(a: ArtifactRow) -> dict[str, Any]:
    return {
        "artifact_id": a.artifact_id,
        "version": a.version,
        "plan": a.plan,
        "content_hash": a.content_hash,
        "created_at": a.created_at,
    }


def test_put_artifact_with_the_same_content_returns_the_stored_row_unchanged() -> None:
    stored = artifact(at=T0 - 60)
    again = artifact(at=T0)
    script = Script(
        ("insert_artifact", None, changed(0)),
        ("select_artifact", {"artifact_id": "art", "version": 1}, rows(artifact_row(stored))),
    )
    assert script.run(catalog.put_artifact(again)) == stored  # its original created_at


def test_put_artifact_with_other_content_is_refused_naming_the_stored_hash() -> None:
    script = Script(
        ("insert_artifact", None, changed(0)),
        ("select_artifact", None, rows(artifact_row(artifact(content_hash="sha256:bb")))),
    )
    with pytest.raises(AlreadyExists) as caught:
        script.run(catalog.put_artifact(artifact(content_hash="sha256:aa")))
    assert caught.value.details["content_hash"] == "sha256:bb"


def test_put_artifact_whose_conflicting_row_vanished_is_an_internal_error() -> None:
    script = Script(("insert_artifact", None, changed(0)), ("select_artifact", None, NONE))
    with pytest.raises(Internal):
        script.run(catalog.put_artifact(artifact()))


def test_get_artifact_reads_the_latest_or_the_asked_version() -> None:
    a = artifact(version=3)
    latest = Script(("select_latest_artifact", {"artifact_id": "art"}, rows(artifact_row(a))))
    assert latest.run(catalog.get_artifact("art", None)) == a
    one = Script(("select_artifact", {"artifact_id": "art", "version": 3}, NONE))
    assert one.run(catalog.get_artifact("art", 3)) is None


def test_list_artifacts_reads_every_artifact_or_one_artifacts_versions() -> None:
    found = rows(artifact_row(artifact(1)), artifact_row(artifact(2)))
    every = Script(("select_artifacts", {}, found))
    assert [a.version for a in every.run(catalog.list_artifacts(None))] == [1, 2]
    one = Script(("select_artifact_versions", {"artifact_id": "art"}, found))
    assert len(one.run(catalog.list_artifacts("art"))) == 2


def test_artifacts_page_seeks_after_its_key_and_checks_it_at_once() -> None:
    every = Script(
        (
            "select_artifacts_page",
            {"after_id": "a", "after_version": 2, "limit": 5},
            rows(artifact_row(artifact())),
        )
    )
    assert len(every.run(catalog.artifacts_page(after=("a", 2), artifact_id=None, limit=5))) == 1
    versions = Script(
        ("select_artifact_versions_page", {"artifact_id": "art", "after_version": 0, "limit": 5},
         NONE)
    )  # fmt: skip
    assert versions.run(catalog.artifacts_page(after=None, artifact_id="art", limit=5)) == []
    with pytest.raises(InvalidArgument):  # refused before any body exists
        catalog.artifacts_page(after=("a", 1), artifact_id="b", limit=5)
    with pytest.raises(InvalidArgument):
        catalog.artifacts_page(after=None, artifact_id=None, limit=pages.STORE_PAGE_ROWS_MAX + 1)


# ------------------------------------------------------------ deployments


def test_put_deployment_creates_with_an_insert_that_takes_no_expected_revision() -> None:
    d = deployment(1)
    script = Script(
        (
            "insert_deployment",
            {"deployment_id": "art.d", "body": b"{}", "revision": 1, "updated_at": T0},
            changed(1),
        )
    )
    assert script.run(catalog.put_deployment(d, 0)) is None


def test_put_deployment_updates_by_compare_and_set_on_the_revision() -> None:
    script = Script(
        (
            "update_deployment",
            {"deployment_id": "art.d", "body": b"{}", "revision": 3, "updated_at": T0,
             "expected_revision": 2},
            changed(1),
        )
    )  # fmt: skip
    script.run(catalog.put_deployment(deployment(3), 2))


def test_put_deployment_on_a_stale_revision_is_a_conflict_naming_the_current_one() -> None:
    script = Script(
        ("update_deployment", None, changed(0)),
        ("select_deployment_revision", {"deployment_id": "art.d"}, rows((5,))),
    )
    with pytest.raises(Conflict) as caught:
        script.run(catalog.put_deployment(deployment(3), 2))
    assert caught.value.details["current_revision"] == 5


def test_put_deployment_that_exists_already_or_never_did_is_a_conflict() -> None:
    taken = Script(
        ("insert_deployment", None, changed(0)),
        ("select_deployment_revision", None, rows((1,))),
    )
    with pytest.raises(Conflict) as caught:
        taken.run(catalog.put_deployment(deployment(1), 0))
    assert caught.value.details["current_revision"] == 1
    missing = Script(
        ("update_deployment", None, changed(0)),
        ("select_deployment_revision", None, NONE),
    )
    with pytest.raises(Conflict) as caught:
        missing.run(catalog.put_deployment(deployment(2), 1))
    assert caught.value.details["current_revision"] == 0
    assert "does not exist" in caught.value.message


def test_put_deployment_whose_revisions_do_not_follow_is_refused_before_any_query() -> None:
    for revision, expected in ((1, 1), (3, 1), (0, -1)):
        with pytest.raises(InvalidArgument):
            catalog.put_deployment(deployment(revision), expected)


def test_deployment_reads_decode_their_rows() -> None:
    found = rows(("art.d", b"{}", 2, T0))
    one = Script(("select_deployment", {"deployment_id": "art.d"}, found))
    assert one.run(catalog.get_deployment("art.d")) == deployment(2)
    assert Script(("select_deployment", None, NONE)).run(catalog.get_deployment("x")) is None
    assert Script(("select_deployments", {}, found)).run(catalog.list_deployments()) == [
        deployment(2)
    ]
    page = Script(("select_deployments_page", {"after": "a", "limit": 3}, found))
    assert page.run(catalog.deployments_page(after="a", limit=3)) == [deployment(2)]


def test_a_mistyped_catalog_row_is_a_corrupt_record() -> None:
    script = Script(("select_deployment", None, rows(("art.d", "not bytes", 2, T0))))
    with pytest.raises(CorruptRecord):
        script.run(catalog.get_deployment("art.d"))


# ------------------------------------------------------------------- runs


def test_insert_run_numbers_the_run_from_the_counter_in_its_own_transaction() -> None:
    given = msgspec.structs.replace(run_row(), run_id="ignored", seq=0, revision=9)
    script = Script(
        ("next_run_seq", {}, rows((7,))),
        (
            "insert_run",
            {"run_id": "run-000007", "seq": 7, "deployment_id": "art.d", "tenant": "t1",
             "status": "admitted", "schedule_id": None, "body": b"{}", "created_at": T0,
             "updated_at": T0},
            changed(1),
        ),
    )  # fmt: skip
    stored = script.run(catalog.insert_run(given))
    assert (stored.run_id, stored.seq, stored.revision) == ("run-000007", 7, 1)


def test_insert_run_past_six_digits_just_grows_the_id() -> None:
    script = Script(("next_run_seq", None, rows((1_234_567,))), ("insert_run", None, changed(1)))
    assert script.run(catalog.insert_run(run_row())).run_id == "run-1234567"


@pytest.mark.parametrize("counter", [NONE, rows(("7",)), rows((7.0,))])
def test_insert_run_with_a_missing_or_mistyped_counter_is_a_corrupt_record(
    counter: Result,
) -> None:
    with pytest.raises(CorruptRecord):
        Script(("next_run_seq", None, counter)).run(catalog.insert_run(run_row()))


def test_update_run_stores_only_the_mutable_columns_if_the_revision_holds() -> None:
    script = Script(
        (
            "update_run",
            {"run_id": "run-000001", "status": "running", "body": b"{}", "revision": 2,
             "updated_at": T0, "expected_revision": 1},
            changed(1),
        )
    )  # fmt: skip
    script.run(catalog.update_run(run_row(revision=2, status="running"), 1))


def test_update_run_that_matched_nothing_is_not_found_or_a_conflict() -> None:
    missing = Script(("update_run", None, changed(0)), ("select_run_revision", None, NONE))
    with pytest.raises(NotFound):
        missing.run(catalog.update_run(run_row(revision=2), 1))
    stale = Script(
        ("update_run", None, changed(0)),
        ("select_run_revision", {"run_id": "run-000001"}, rows((4,))),
    )
    with pytest.raises(Conflict) as caught:
        stale.run(catalog.update_run(run_row(revision=2), 1))
    assert caught.value.details["current_revision"] == 4


def test_update_run_whose_revisions_do_not_follow_is_refused_before_any_query() -> None:
    for revision, expected in ((2, 0), (3, 1)):
        with pytest.raises(InvalidArgument):
            catalog.update_run(run_row(revision=revision), expected)


def test_run_reads_decode_their_rows() -> None:
    r = run_row(3)
    assert (
        Script(("select_run", {"run_id": "run-000003"}, rows(run_tuple(r)))).run(
            catalog.get_run("run-000003")
        )
        == r
    )
    assert Script(("select_live_runs", {}, rows(run_tuple(r)))).run(catalog.live_runs()) == [r]


def test_list_runs_puts_each_filter_in_the_statement_as_bound_parameters() -> None:
    body = catalog.list_runs(
        after_seq=4,
        limit=10,
        deployment_id="art.d",
        schedule_id=None,
        statuses=["running", "interrupted"],
        tenants=["t'1"],
    )
    script = Script(
        (
            "select_runs",
            {"after_seq": 4, "limit": 10, "deployment_id": "art.d", "status_0": "running",
             "status_1": "interrupted", "tenant_0": "t'1"},
            rows(run_tuple(run_row(5))),
        )
    )  # fmt: skip
    assert [r.seq for r in script.run(body)] == [5]
    (asked,) = script.asked
    assert asked.filters == (
        "deployment_id = :deployment_id",
        "status IN (:status_0, :status_1)",
        "tenant IN (:tenant_0)",
    )
    assert "t'1" not in sql_of(asked, "sqlite")  # values never reach the statement text
    assert "%(status_1)s" in sql_of(asked, "postgres")


def test_list_runs_with_an_empty_list_filter_matches_nothing_without_a_query() -> None:
    for statuses, tenants in (([], None), (None, [])):
        body = catalog.list_runs(
            after_seq=0,
            limit=10,
            deployment_id=None,
            schedule_id=None,
            statuses=statuses,
            tenants=tenants,
        )
        assert Script().run(body) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"limit": -1},
        {"statuses": "running"},
        {"tenants": [1]},
        {"statuses": ["s"] * (catalog.RUN_FILTER_VALUES_MAX + 1)},
    ],
)
def test_list_runs_refuses_bad_filters_before_any_query(bad: dict[str, Any]) -> None:
    args: dict[str, Any] = {
        "after_seq": 0,
        "limit": 10,
        "deployment_id": None,
        "schedule_id": None,
        "statuses": None,
        "tenants": None,
        **bad,
    }
    with pytest.raises(InvalidArgument):
        catalog.list_runs(**args)


# -------------------------------------------------------------- schedules


def test_put_schedule_creates_at_revision_one_and_never_reuses_an_id() -> None:
    params = {"schedule_id": "s1", "tenant": "t1", "deployment_id": "art.d", "status": "active",
              "body": b"{}", "created_at": T0, "updated_at": T0 + 1}  # fmt: skip
    Script(("insert_schedule", params, changed(1))).run(catalog.put_schedule(schedule(1), 0))
    with pytest.raises(AlreadyExists):
        Script(("insert_schedule", None, changed(0))).run(catalog.put_schedule(schedule(1), 0))


def test_put_schedule_updates_by_compare_and_set_and_says_why_it_matched_nothing() -> None:
    params = {"schedule_id": "s1", "status": "paused", "body": b"{}", "revision": 2,
              "updated_at": T0 + 2, "expected_revision": 1}  # fmt: skip
    ok = Script(("update_schedule", params, changed(1)))
    ok.run(catalog.put_schedule(schedule(2, "paused"), 1))
    missing = Script(
        ("update_schedule", None, changed(0)),
        ("select_schedule_revision", {"schedule_id": "s1"}, NONE),
    )
    with pytest.raises(NotFound):
        missing.run(catalog.put_schedule(schedule(2), 1))
    stale = Script(
        ("update_schedule", None, changed(0)),
        ("select_schedule_revision", None, rows((3,))),
    )
    with pytest.raises(Conflict) as caught:
        stale.run(catalog.put_schedule(schedule(2), 1))
    assert caught.value.details["current_revision"] == 3


def test_put_schedule_with_an_unknown_status_or_revision_is_refused_before_any_query() -> None:
    with pytest.raises(InvalidArgument):
        catalog.put_schedule(schedule(1, "sleeping"), 0)
    with pytest.raises(InvalidArgument):
        catalog.put_schedule(schedule(3), 1)


def test_schedule_reads_decode_their_rows() -> None:
    s = schedule(2)
    found = rows(schedule_tuple(s))
    assert (
        Script(("select_schedule", {"schedule_id": "s1"}, found)).run(catalog.get_schedule("s1"))
        == s
    )
    assert Script(("select_schedules", {}, found)).run(catalog.list_schedules(False)) == [s]
    assert Script(("select_all_schedules", {}, found)).run(catalog.list_schedules(True)) == [s]


def test_schedules_page_filters_in_the_statement_and_an_empty_tenant_list_asks_nothing() -> None:
    body = catalog.schedules_page(after="a", limit=5, include_deleted=False, tenants=["t1"])
    expected = {"after": "a", "limit": 5, "tenant_0": "t1"}
    script = Script(("select_schedules_page", expected, rows(schedule_tuple(schedule()))))
    assert len(script.run(body)) == 1
    assert script.asked[0].filters == ("status <> 'deleted'", "tenant IN (:tenant_0)")
    empty = catalog.schedules_page(after="", limit=5, include_deleted=True, tenants=[])
    assert Script().run(empty) == []
    with pytest.raises(InvalidArgument):
        catalog.schedules_page(after="a\x00", limit=5, include_deleted=True, tenants=None)


# ------------------------------------------------------------ occurrences


def test_record_occurrences_updates_the_schedule_numbers_the_run_and_links_the_admitted_one() -> (
    None
):
    occurrences = [occurrence(T0, "skipped-misfire"), occurrence(T0 + 60, "admitted")]
    script = Script(
        ("update_schedule", None, changed(1)),
        ("next_run_seq", None, rows((12,))),
        ("insert_run", None, changed(1)),
        (
            "insert_occurrence",
            {"schedule_id": "s1", "instant": T0, "status": "skipped-misfire", "run_id": None,
             "detail": None, "recorded_at": T0},
            changed(1),
        ),
        (
            "insert_occurrence",
            {"schedule_id": "s1", "instant": T0 + 60, "status": "admitted",
             "run_id": "run-000012", "detail": None, "recorded_at": T0},
            changed(1),
        ),
    )  # fmt: skip
    stored = script.run(catalog.record_occurrences(schedule(2), 1, occurrences, run_row()))
    assert stored is not None
    assert (stored.run_id, stored.schedule_id) == ("run-000012", "s1")
    assert script.asked[2].params["schedule_id"] == "s1"  # the run names its schedule


def test_record_occurrences_without_a_run_inserts_only_the_occurrences() -> None:
    script = Script(
        ("update_schedule", None, changed(1)),
        ("insert_occurrence", None, changed(1)),
    )
    body = catalog.record_occurrences(schedule(2), 1, [occurrence(T0, "coalesced")], None)
    assert script.run(body) is None


def test_record_occurrences_of_an_instant_recorded_before_is_refused() -> None:
    script = Script(
        ("update_schedule", None, changed(1)),
        ("insert_occurrence", None, changed(0)),
    )
    with pytest.raises(AlreadyExists):
        script.run(catalog.record_occurrences(schedule(2), 1, [occurrence(T0, "superseded")], None))


def test_record_occurrences_on_a_stale_schedule_stops_before_the_run() -> None:
    script = Script(
        ("update_schedule", None, changed(0)),
        ("select_schedule_revision", None, rows((7,))),
    )
    with pytest.raises(Conflict):
        script.run(catalog.record_occurrences(schedule(2), 1, [occurrence(T0)], run_row()))


@pytest.mark.parametrize(
    ("expected", "occurrences", "with_run"),
    [
        (0, [occurrence(T0, "coalesced")], False),  # the schedule must exist
        (1, [occurrence(T0)], False),  # admitted without a run
        (1, [occurrence(T0, "coalesced")], True),  # a run but none admitted
        (1, [occurrence(T0), occurrence(T0 + 1)], True),  # two admitted
        (1, [occurrence(math.inf, "coalesced")], False),
        (1, [occurrence(T0, "lost")], False),
        (1, [msgspec.structs.replace(occurrence(T0, "coalesced"), schedule_id="s2")], False),
        (1, [msgspec.structs.replace(occurrence(T0, "coalesced"), run_id="run-1")], False),
    ],
)
def test_record_occurrences_that_break_the_contract_are_refused_before_any_query(
    expected: int, occurrences: list[OccurrenceRow], with_run: bool
) -> None:
    with pytest.raises(InvalidArgument):
        catalog.record_occurrences(
            schedule(expected + 1), expected, occurrences, run_row() if with_run else None
        )


def test_record_occurrences_refuses_a_run_of_another_schedule() -> None:
    other = msgspec.structs.replace(run_row(), schedule_id="s9")
    with pytest.raises(InvalidArgument):
        catalog.record_occurrences(schedule(2), 1, [occurrence(T0)], other)


def test_list_occurrences_pages_after_an_instant_from_minus_infinity() -> None:
    found = rows(("s1", T0, "admitted", "run-000001", None, T0))
    script = Script(
        ("select_occurrences", {"schedule_id": "s1", "after_instant": -math.inf, "limit": 3},
         found)
    )  # fmt: skip
    (got,) = script.run(catalog.list_occurrences("s1", after_instant=None, limit=3))
    assert got.run_id == "run-000001"
    with pytest.raises(InvalidArgument):
        catalog.list_occurrences("s1", after_instant=math.nan, limit=3)
    with pytest.raises(InvalidArgument):
        catalog.list_occurrences("s1", after_instant=None, limit=-1)


# ------------------------------------------------------- activity history


def test_history_reads_decode_transitions_and_their_positions() -> None:
    (t,) = Script(("select_history", {"activity_id": "a1"}, rows(transition_tuple()))).run(
        catalog.history("a1")
    )
    assert t.to_state is ActivityState.QUEUED
    page = Script(
        ("select_history_page", {"activity_id": "a1", "after": 0, "limit": 2},
         rows((*transition_tuple(), 41)))
    )  # fmt: skip
    ((position, _t),) = page.run(catalog.history_page("a1", after=0, limit=2))
    assert position == 41


def test_heartbeat_details_read_bytes_none_or_refuses_a_mistyped_value() -> None:
    def read(*found: tuple[Any, ...]) -> Any:
        query = ("select_heartbeat_details", {"activity_id": "a1"}, rows(*found))
        return Script(query).run(catalog.heartbeat_details("a1"))

    assert read((b'{"done":3}',)) == b'{"done":3}'
    assert read((memoryview(b"[1]"),)) == b"[1]"  # psycopg's bytea
    assert read((None,)) is None
    assert read() is None  # no such activity
    with pytest.raises(CorruptRecord):
        read(("text",))


# ----------------------------------------------------- every read, one query

READS: list[tuple[str, Callable[[], Body[Any]]]] = [
    ("get_artifact", lambda: catalog.get_artifact("a", None)),
    ("list_artifacts", lambda: catalog.list_artifacts("a")),
    ("artifacts_page", lambda: catalog.artifacts_page(after=None, artifact_id=None, limit=5)),
    ("get_deployment", lambda: catalog.get_deployment("d")),
    ("list_deployments", catalog.list_deployments),
    ("deployments_page", lambda: catalog.deployments_page(after="", limit=5)),
    ("get_run", lambda: catalog.get_run("run-000001")),
    ("live_runs", catalog.live_runs),
    (
        "list_runs",
        lambda: catalog.list_runs(
            after_seq=0, limit=5, deployment_id=None, schedule_id="s", statuses=None, tenants=None
        ),
    ),
    ("get_schedule", lambda: catalog.get_schedule("s1")),
    ("list_schedules", lambda: catalog.list_schedules(False)),
    (
        "schedules_page",
        lambda: catalog.schedules_page(after="", limit=5, include_deleted=False, tenants=None),
    ),
    ("list_occurrences", lambda: catalog.list_occurrences("s1", after_instant=None, limit=5)),
    ("history", lambda: catalog.history("a1")),
    ("history_page", lambda: catalog.history_page("a1", after=0, limit=5)),
    ("heartbeat_details", lambda: catalog.heartbeat_details("a1")),
]


@pytest.mark.parametrize(("name", "make"), READS, ids=[name for name, _ in READS])
def test_every_read_body_asks_exactly_one_query(name: str, make: Callable[[], Body[Any]]) -> None:
    """PostgreSQL runs a read body's query in autocommit: one statement, one snapshot."""
    body = make()
    query = next(body)
    assert query.name in codec.queries()
    with pytest.raises(StopIteration):
        body.send(NONE)


# ---------------------------------------------------------------- render


def test_render_puts_filters_at_the_mark_in_each_dialects_parameter_style() -> None:
    sqlite = " ".join(render("select_runs", ("tenant IN (:tenant_0)",), "sqlite").split())
    postgres = " ".join(render("select_runs", ("tenant IN (:tenant_0)",), "postgres").split())
    assert "seq > :after_seq AND tenant IN (:tenant_0)" in sqlite
    assert "seq > %(after_seq)s AND tenant IN (%(tenant_0)s)" in postgres
    assert "/* filters */" not in render("select_runs", (), "sqlite")
    assert render("select_run", (), "postgres") == codec.postgres_queries()["select_run"]
    with pytest.raises(Internal):
        render("select_run", ("status = :status",), "sqlite")
