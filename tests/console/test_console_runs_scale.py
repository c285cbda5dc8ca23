"""The runs views on a big store: 10^5 runs, each read served by an index.

The store (SQLite) is written directly in one transaction (``_runs_scale``: a few
seconds for 10^5 runs) and a real ``wf-rpc-server`` is started on it. Checked:

- every query shape behind ``workflow.runs.list`` (newest first and oldest first,
  cursor pages, each filter alone and combined, a tenant-scoped caller) and
  ``workflow.runs.counts`` is a SEARCH of an index in seq order on SQLite (EXPLAIN
  QUERY PLAN: no table scan, no sort), and an index scan on PostgreSQL (10^5 rows
  copied into a schema of its own, then ANALYZE);
- each runs-view JSON-RPC call answers within :data:`CALL_BOUND_S` and returns
  what it claims (newest first, only matching runs);
- the console's runs view renders its first page, the next page and a filtered
  page within :data:`VIEW_BOUND_S` of the navigation.

Time ranges are served by the seq index too: a range far in the past is found by
walking down from the newest run (rows are checked, not sorted), so its first page
costs in proportion to the runs created after it (docs/console.md, measured there).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from _console import TOKENS, Browser, browser_for, rpc, server_config
from _runs_scale import ACME_EVERY, FAILED_EVERY, RARE_EVERY, SPACING_S, build_runs_store, run_at
from playwright.sync_api import expect

from e2e._servers import processes
from wf.runtime.runs import run_row
from wf.store import catalog
from wf.store.query import Query, first, sql_of
from wf.store.sqlite_files import DB_NAME
from wf.wire.workflow_methods import RUN_COUNT_SCAN_MAX

RUNS = 100_000
CALL_BOUND_S = 2.0
"""Each runs-view JSON-RPC call's bound with 10^5 runs (measured: under 0.1 s)."""
VIEW_BOUND_S = 3.0
"""Each runs view's render bound with 10^5 runs (as for 10^4 schedules)."""
TOP = 2**62
"""A seq above every run (the first newest-first page)."""


class Big:
    """The built store, its server and its creation instant."""

    def __init__(self, url: str, db: Path, now: float) -> None:
        self.url = url
        self.db = db
        self.now = now


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Big]:
    tmp: Path = tmp_path_factory.mktemp("console-runs-big")
    now = time.time()
    began = time.monotonic()
    build_runs_store(tmp / "store", RUNS, now)
    print(f"{RUNS} runs written in {time.monotonic() - began:.1f} s")
    with processes(tmp) as ps:
        config = server_config()
        config["server"]["store"] = {"durability": "process"}
        server = ps.server(tmp / "store", config=config)
        yield Big(server.url, tmp / "store" / DB_NAME, now)


@pytest.fixture(scope="module")
def browser(big: Big) -> Iterator[Browser]:
    yield from browser_for(big.url)


def listing(**given: Any) -> Query:
    """The query ``workflow.runs.list`` makes (newest first unless ``before_seq=None``)."""
    args: dict[str, Any] = {"after_seq": 0, "limit": 51, "deployment_id": None,
                            "schedule_id": None, "statuses": None, "tenants": None,
                            "before_seq": TOP}  # fmt: skip
    args.update(given)
    step = first(catalog.list_runs(**args))
    assert isinstance(step, Query)
    return step


def counting(tenants: list[str] | None) -> Query:
    """The query ``workflow.runs.counts`` makes."""
    step = first(catalog.recent_run_statuses(limit=RUN_COUNT_SCAN_MAX + 1, tenants=tenants))
    assert isinstance(step, Query)
    return step


def shapes(now: float) -> dict[str, tuple[Query, str | None]]:
    """Every query shape of the runs views and ``wf runs list``, with the index that
    should serve it (``None``: the seq index)."""
    hour_ago, old = now - 3600, now - 9.5 * 86400
    return {
        "first page": (listing(), None),
        "next page": (listing(before_seq=RUNS - 50), None),
        "oldest first": (listing(before_seq=None, after_seq=50), None),
        "status": (listing(statuses=["failed"]), "runs_by_status"),
        "deployment": (listing(deployment_id="rare.default"), "runs_by_deployment"),
        "schedule": (listing(schedule_id="sched-8"), "runs_by_schedule"),
        "tenant": (listing(tenants=["acme"]), "runs_by_tenant"),
        "tenant and status": (listing(tenants=["acme"], statuses=["failed"]), "runs_by_"),
        "deployment and status": (
            listing(deployment_id="scale-0.default", statuses=["failed"]),
            "runs_by_",
        ),
        "last hour": (listing(created_after=hour_ago), None),
        "an old hour": (listing(created_after=old, created_before=old + 3600), None),
        "oldest first since an hour ago": (  # wf runs list --oldest-first --since 1h
            listing(before_seq=None, created_after=hour_ago),
            None,
        ),
        "counts": (counting(None), None),
        "counts for a tenant": (counting(["acme"]), "runs_by_tenant"),
    }


def test_every_runs_query_searches_an_index_on_sqlite(big: Big) -> None:
    conn = sqlite3.connect(f"file:{big.db}?mode=ro", uri=True)
    try:
        for name, (query, index) in shapes(big.now).items():
            plan = [row[3] for row in conn.execute(
                "EXPLAIN QUERY PLAN " + sql_of(query, "sqlite"), query.params)]  # fmt: skip
            assert len(plan) == 1, f"{name}: {plan}"
            assert plan[0].startswith("SEARCH runs USING INDEX"), f"{name}: {plan}"
            assert "seq" in plan[0], f"{name}: not read in seq order: {plan}"
            if index is not None:
                assert f"INDEX {index}" in plan[0], f"{name}: {plan}"
    finally:
        conn.close()


def test_every_runs_query_scans_an_index_on_postgres() -> None:
    import psycopg
    from psycopg import sql

    import _pg
    from wf.store.postgres import PostgresStore

    dsn = _pg.postgres_dsn()
    schema = _pg.new_schema_name()

    async def create() -> None:
        store = PostgresStore(dsn, schema=schema)
        await store.open()
        await store.close()

    # In a thread: an event loop may be running here (Playwright's sync API).
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, create()).result()
    now = time.time()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
            columns = ("run_id, seq, deployment_id, tenant, status, schedule_id, body, "
                       "revision, created_at, updated_at")  # fmt: skip
            with conn.cursor().copy(f"COPY runs ({columns}) FROM STDIN") as copy:
                for i in range(1, RUNS + 1):
                    r = run_row(run_at(i, RUNS, now), seq=i, updated_at=now)
                    copy.write_row((r.run_id, r.seq, r.deployment_id, r.tenant, r.status,
                                    r.schedule_id, r.body, r.revision, r.created_at,
                                    r.updated_at))  # fmt: skip
            conn.execute("ANALYZE runs")
            for name, (query, index) in shapes(now).items():
                text = "EXPLAIN (FORMAT JSON) " + sql_of(query, "postgres")
                found = conn.execute(text, query.params).fetchone()
                assert found is not None
                nodes = _plan_nodes(found[0][0]["Plan"])
                kinds = {kind for kind, _ in nodes}
                assert "Seq Scan" not in kinds, f"{name}: {nodes}"
                indexes = [ix for _, ix in nodes if ix]
                assert indexes, f"{name}: no index: {nodes}"
                if index is not None:
                    assert any(ix.startswith(index) for ix in indexes), f"{name}: {nodes}"
    finally:
        _pg.drop_schema(dsn, schema)


def _plan_nodes(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """``(node type, index name or "")`` of a JSON plan, depth first."""
    nodes = [(str(plan["Node Type"]), str(plan.get("Index Name", "")))]
    for child in plan.get("Plans", []):
        nodes.extend(_plan_nodes(child))
    return nodes


def timed(url: str, who: str, method: str, params: dict[str, Any]) -> tuple[Any, float]:
    began = time.monotonic()
    result = rpc(url, TOKENS[who], method, params)
    return result, time.monotonic() - began


def test_each_runs_call_answers_within_its_bound(big: Big) -> None:
    took: dict[str, float] = {}
    first_page, took["first page"] = timed(
        big.url, "admin", "workflow.runs.list", {"newest_first": True, "limit": 50}
    )
    ids = [r["run_id"] for r in first_page["runs"]]
    assert ids == [f"run-{i:06d}" for i in range(RUNS, RUNS - 50, -1)]

    second, took["next page"] = timed(big.url, "admin", "workflow.runs.list", {
        "newest_first": True, "limit": 50, "cursor": first_page["next_cursor"]})  # fmt: skip
    assert second["runs"][0]["run_id"] == f"run-{RUNS - 50:06d}"

    failed, took["status"] = timed(big.url, "admin", "workflow.runs.list", {
        "newest_first": True, "limit": 50, "status": "failed"})  # fmt: skip
    assert [r["run_id"] for r in failed["runs"]] == [
        f"run-{i:06d}" for i in range(RUNS, RUNS - 50 * FAILED_EVERY, -FAILED_EVERY)
    ]

    rare, took["deployment"] = timed(big.url, "admin", "workflow.runs.list", {
        "newest_first": True, "limit": 50, "deployment_id": "rare.default"})  # fmt: skip
    assert len(rare["runs"]) == RUNS // RARE_EVERY
    assert rare["next_cursor"] is None

    scheduled, took["schedule"] = timed(big.url, "admin", "workflow.runs.list", {
        "newest_first": True, "limit": 50, "schedule_id": "sched-8"})  # fmt: skip
    assert all(r["trigger"]["schedule_id"] == "sched-8" for r in scheduled["runs"])
    assert len(scheduled["runs"]) == 50

    old = big.now - 9.5 * 86400
    window, took["an old hour"] = timed(big.url, "admin", "workflow.runs.list", {
        "newest_first": True, "limit": 50, "created_after": old,
        "created_before": old + 3600})  # fmt: skip
    assert window["runs"]
    assert all(old <= r["created_at"] < old + 3600 for r in window["runs"])

    since = big.now - 3600
    recent, took["oldest first since an hour ago"] = timed(big.url, "admin",
        "workflow.runs.list", {"limit": 50, "created_after": since})  # fmt: skip
    assert len(recent["runs"]) == 50
    assert all(r["created_at"] >= since for r in recent["runs"])
    assert recent["runs"] == sorted(recent["runs"], key=lambda r: str(r["run_id"]))

    acme, took["tenant-scoped"] = timed(
        big.url, "acme", "workflow.runs.list", {"newest_first": True, "limit": 50}
    )
    assert [r["tenant"] for r in acme["runs"]] == ["acme"] * 50

    counts, took["counts"] = timed(big.url, "admin", "workflow.runs.counts", {"window_s": 3600})
    per_hour = int(3600 / SPACING_S)  # fewer as the server's clock moved on since the build
    assert per_hour - 30 <= sum(counts["by_status"].values()) <= per_hour + 1
    assert counts["complete"] is True

    acme_counts, took["tenant counts"] = timed(
        big.url, "acme", "workflow.runs.counts", {"window_s": 3600}
    )
    assert sum(acme_counts["by_status"].values()) <= per_hour // ACME_EVERY + 1

    print({k: round(v * 1000, 1) for k, v in took.items()}, "ms")
    for what, seconds in took.items():
        assert seconds < CALL_BOUND_S, f"{what} took {seconds:.2f} s with {RUNS} runs"


def test_the_runs_view_stays_fast_with_a_hundred_thousand_runs(big: Big, browser: Browser) -> None:
    page = browser.signed_in("admin")
    rows = page.locator("[data-testid=runs] > tbody > tr")
    took: dict[str, float] = {}

    began = time.monotonic()
    page.goto(f"{big.url}/ui/#/runs")
    expect(rows).to_have_count(50)
    expect(rows.first).to_have_attribute("data-run", f"run-{RUNS:06d}")
    took["first page"] = time.monotonic() - began

    began = time.monotonic()
    page.get_by_test_id("next-page").click()
    expect(rows.first).to_have_attribute("data-run", f"run-{RUNS - 50:06d}")
    took["next page"] = time.monotonic() - began

    began = time.monotonic()
    page.goto(f"{big.url}/ui/#/runs?status=failed")
    expect(rows.first).to_have_attribute("data-run", f"run-{RUNS:06d}")
    expect(rows.nth(1)).to_have_attribute("data-run", f"run-{RUNS - FAILED_EVERY:06d}")
    took["failed runs"] = time.monotonic() - began

    old = big.now - 9.5 * 86400
    began = time.monotonic()
    page.goto(f"{big.url}/ui/#/runs?from={_wall(old)}&to={_wall(old + 3600)}")
    expect(rows.first).to_have_attribute("data-run", _newest_before(old + 3600, big.now))
    took["an old hour"] = time.monotonic() - began

    print({k: round(v * 1000) for k, v in took.items()}, "ms")
    for what, seconds in took.items():
        assert seconds < VIEW_BOUND_S, f"{what} took {seconds:.2f} s with {RUNS} runs"


def _wall(instant: float) -> str:
    """``instant`` as the console's filter fields hold it (UTC wall time, seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(instant)))


def _newest_before(instant: float, now: float) -> str:
    """The id of the newest built run created before ``int(instant)`` (the filter's
    whole second)."""
    i = RUNS
    while run_at(i, RUNS, now).created_at >= int(instant):
        i -= 1
    return f"run-{i:06d}"
