"""The read methods the console added to the JSON-RPC contract, over the wire.

``workflow.runs.list`` newest first and by creation time, ``workflow.runs.counts``,
``scheduler.dispatch.stats`` and ``rpc.whoami``: each authorized and tenant-scoped
like its neighbours. A real server (in this process, SQLite, authentication on),
called through the ``App`` client with each credential's token; no workers, so
every run stays live with its first activity queued.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from _console import TOKENS, server_config

import wf.runtime.api
from wf.client.app import App
from wf.errors import Forbidden, InvalidArgument
from wf.server.app import WfServer
from wf.server.config import parse_config

PLAN = {"nodes": [{"kind": "activity", "id": "a", "activity_type": "console.echo"}]}


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The store section: SQLite, or PostgreSQL in a schema of its own (the new reads
    are SQL on both)."""
    if request.param == "sqlite":
        return {"root": str(tmp_path / "store")}
    schema = request.getfixturevalue("pg_schema")
    return {"postgres_dsn": request.getfixturevalue("pg_dsn"), "postgres_schema": schema}


def served(
    store: dict[str, Any], check: Callable[[dict[str, App], list[str]], Awaitable[None]]
) -> None:
    """Run ``check(apps by credential, run ids oldest first)`` against a seeded server:
    runs of tenants acme, globex, acme, globex, acme."""

    async def main() -> None:
        config = server_config()
        config["server"].update(port=0, store=store)
        server = WfServer(parse_config(msgspec.json.encode(config)))
        await server.start()
        url = f"http://127.0.0.1:{server.port}"
        apps = {name: App(url, token=token) for name, token in TOKENS.items()}
        try:
            admin = apps["admin"]
            await admin.create_artifact_from_plan("flow", 1, PLAN)
            for tenant in ("acme", "globex"):
                body = {"artifact_id": "flow", "artifact_version": 1, "name": tenant}
                await admin.save_deployment({**body, "tenant": tenant})
            runs = []
            for tenant in ("acme", "globex", "acme", "globex", "acme"):
                runs.append((await admin.start_run(f"flow.{tenant}"))["run_id"])
            await check(apps, runs)
        finally:
            for app in apps.values():
                await app.close()
            await server.stop()

    asyncio.run(main())


def ids(page: dict[str, Any]) -> list[str]:
    return [r["run_id"] for r in page["runs"]]


def test_runs_list_newest_first_pages_down_and_keeps_tenants_apart(store: dict[str, Any]) -> None:
    async def check(apps: dict[str, App], runs: list[str]) -> None:
        admin = apps["admin"]
        first = await admin.list_runs(newest_first=True, limit=2)
        second = await admin.list_runs(newest_first=True, limit=2, cursor=first["next_cursor"])
        third = await admin.list_runs(newest_first=True, limit=2, cursor=second["next_cursor"])
        assert [ids(first), ids(second), ids(third)] == [runs[:2:-1], runs[2:0:-1], runs[:1]]
        assert third["next_cursor"] is None
        acme = await apps["acme"].list_runs(newest_first=True)
        assert ids(acme) == [runs[4], runs[2], runs[0]]
        assert ids(await admin.list_runs()) == runs  # oldest first, as before

    served(store, check)


def test_runs_list_filters_by_creation_time(store: dict[str, Any]) -> None:
    async def check(apps: dict[str, App], runs: list[str]) -> None:
        admin = apps["admin"]
        created = [(await admin.inspect_run(r))["created_at"] for r in runs]
        after = await admin.list_runs(created_after=created[2])
        assert ids(after) == runs[2:]
        before = await admin.list_runs(newest_first=True, created_before=created[2])
        assert ids(before) == runs[1::-1]
        both = await admin.list_runs(created_after=created[1], created_before=created[3])
        assert ids(both) == runs[1:3]
        scoped = await apps["acme"].list_runs(created_after=created[1])
        assert ids(scoped) == [runs[2], runs[4]]

    served(store, check)


def test_runs_counts_counts_the_window_by_status_for_the_callers_tenants(
    store: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def check(apps: dict[str, App], runs: list[str]) -> None:
        counts = await apps["admin"].count_runs()
        assert (counts.by_status, counts.complete) == ({"running": 5}, True)
        assert counts.until - counts.since == pytest.approx(3600.0)
        assert (await apps["acme"].count_runs()).by_status == {"running": 3}
        await apps["admin"].cancel_run(runs[0])
        assert (await apps["acme"].count_runs()).by_status == {"running": 2, "cancelled": 1}
        assert (await apps["viewer"].count_runs(window_s=1e-6)).by_status == {}
        with pytest.raises(InvalidArgument):
            await apps["admin"].count_runs(window_s=0)
        # The read is bounded: past the scan limit the answer says it is partial.
        monkeypatch.setattr(wf.runtime.api, "RUN_COUNT_SCAN_MAX", 2)
        partial = await apps["admin"].count_runs()
        assert (sum(partial.by_status.values()), partial.complete) == (2, False)
        with pytest.raises(Forbidden):
            await apps["workers"].count_runs()

    served(store, check)


def test_dispatch_stats_are_cluster_wide_figures_for_unscoped_readers(tmp_path: Path) -> None:
    async def check(apps: dict[str, App], runs: list[str]) -> None:
        stats = await apps["viewer"].dispatch_stats()
        queue = await apps["viewer"].queue_stats()
        assert (stats.depth, stats.running, stats.backpressure) == (
            queue.depth,
            queue.running,
            queue.backpressure,
        )
        assert stats.depth == 5
        assert stats.submitted == 5
        assert stats.dispatched == 0
        assert {(lane.tenant, lane.depth) for lane in stats.lanes} == {("acme", 3), ("globex", 2)}
        assert stats.lanes_total == 2
        assert len(stats.latency_buckets) == len(stats.latency_bounds_s) + 1
        assert stats.workers_by_status["active"] == 0
        for scoped in ("acme", "acme-admin"):
            with pytest.raises(Forbidden):
                await apps[scoped].dispatch_stats()

    served({"root": str(tmp_path / "store")}, check)


def test_whoami_names_the_credential_its_role_and_tenants(tmp_path: Path) -> None:
    async def check(apps: dict[str, App], runs: list[str]) -> None:
        expected = {
            "admin": ("admin", None),
            "ops": ("operator", None),
            "viewer": ("read-only", None),
            "acme": ("operator", ["acme"]),
        }
        for name, (role, tenants) in expected.items():
            me = await apps[name].whoami()
            assert (me.identity, me.role, me.tenants) == (name, role, tenants)

    served({"root": str(tmp_path / "store")}, check)
