"""The operator console in a real Chromium against a real server with real workers.

Each view is checked against the JSON-RPC API's own answer for the same
credential; actions are taken through the page's confirmation dialog and their
effect read back over JSON-RPC. With ``WF_CONSOLE_SCREENSHOTS=docs/console`` the
tests also save each view's picture for docs/console.md.
"""

from __future__ import annotations

import json
import time
from typing import Any

from _console import HOSTILE, TOKENS, UI_TIMEOUT_MS, Browser, World, screenshot, wait_for
from playwright.sync_api import Page, expect


def table_rows(page: Page, testid: str, attribute: str) -> list[str]:
    """The ``attribute`` of every row of the table ``testid`` (once it has rendered)."""
    page.get_by_test_id(testid).wait_for()
    rows = page.locator(f"[data-testid={testid}] > tbody > tr")
    return [str(rows.nth(i).get_attribute(attribute)) for i in range(rows.count())]


def counts_table(page: Page, testid: str) -> dict[str, int]:
    """``{status: n}`` of a two-column status table."""
    rows = page.locator(f"[data-testid={testid}] > tbody > tr")
    out = {}
    for i in range(rows.count()):
        row = rows.nth(i)
        out[str(row.get_attribute("data-status"))] = int(row.locator("td").nth(1).inner_text())
    return out


def no_script_ran(page: Page) -> None:
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.errors == []  # type: ignore[attr-defined]  # no page error, no CSP refusal


def confirm(page: Page, button: str, fields: dict[str, str] | None = None) -> str:
    """Click ``button``, fill the dialog, confirm; the answer's code (``ok`` or the
    server's typed error code)."""
    page.get_by_test_id(button).click()
    for name, value in (fields or {}).items():
        page.get_by_test_id(f"field-{name}").fill(value)
    page.get_by_test_id("dialog-confirm").click()
    code = page.get_by_test_id("answer-code").inner_text()
    page.get_by_test_id("dialog-close").click()
    return code


# ------------------------------------------------------------------- views


def test_overview_shows_the_apis_figures_and_updates_live(world: World, browser: Browser) -> None:
    page = browser.signed_in("admin")
    page.get_by_test_id("workers-by-status").wait_for()
    stats = world.call("admin", "scheduler.dispatch.stats")
    assert counts_table(page, "workers-by-status") == stats["workers_by_status"]
    partitions = page.locator("[data-testid=depth-by-partition] tbody td:first-child")
    assert sorted(partitions.all_inner_texts()) == sorted(stats["depth_by_partition"])
    expect(page.get_by_test_id("backpressure-value")).to_have_text(stats["backpressure"])

    def same_counts() -> bool:
        api = world.call("admin", "workflow.runs.counts", {"window_s": 3600})["by_status"]
        return counts_table(page, "runs-by-status") == api

    wait_for(same_counts, "the overview's run counts to match workflow.runs.counts")
    screenshot(page, "overview")

    # Live: a new run shows up without a reload (the marker survives).
    page.evaluate("window.__marker = 'same page'")
    before = counts_table(page, "runs-by-status").get("completed", 0)
    run = world.call(
        "admin", "workflow.runs.start", {"deployment_id": "flow.acme", "inputs": {"v": 1}}
    )
    completed = page.locator("[data-testid=runs-by-status] tr[data-status=completed] td.num")
    expect(completed).to_have_text(str(before + 1), timeout=UI_TIMEOUT_MS)
    assert world.call("admin", "workflow.runs.inspect", {"run_id": run["run_id"]})["status"] == (
        "completed"
    )
    assert page.evaluate("window.__marker") == "same page"
    assert int(page.get_by_test_id("refreshed").get_attribute("data-refreshes") or 0) >= 2
    expect(page.get_by_test_id("rate-value")).not_to_have_text("—")
    no_script_ran(page)


def test_schedules_and_one_schedules_ledger_match_the_api(world: World, browser: Browser) -> None:
    page = browser.signed_in("admin", "/schedules")
    listed = world.call("admin", "workflow.schedules.list", {"limit": 50})["schedules"]
    assert table_rows(page, "schedules", "data-schedule") == [s["schedule_id"] for s in listed]
    nightly = page.locator("[data-testid=schedules] tr[data-schedule='acme.nightly']")
    assert nightly.locator("td.note").inner_text() == HOSTILE  # the note, as text
    assert page.locator("[data-testid=schedules] img, [data-testid=schedules] script").count() == 0
    assert "Europe/Paris" in nightly.inner_text()
    screenshot(page, "schedules")
    no_script_ran(page)

    page.goto(f"{world.url}/ui/#/schedules/acme.soon")
    ledger = world.call(
        "admin", "workflow.schedules.occurrences.list", {"schedule_id": "acme.soon"}
    )["occurrences"]
    page.get_by_test_id("occurrences").wait_for()
    expect(page.locator("[data-testid=occurrences] > tbody > tr")).to_have_count(len(ledger))
    shown = page.locator("[data-testid=occurrences] > tbody > tr")
    for i, occurrence in enumerate(ledger):
        assert shown.nth(i).get_attribute("data-status") == occurrence["status"]
        assert occurrence["instant"] in shown.nth(i).inner_text()
        if occurrence.get("run_id"):
            assert occurrence["run_id"] in shown.nth(i).inner_text()

    # The ledger follows a schedule live: its occurrence appears without a reload.
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 2))
    live = {"schedule_id": "acme.live", "deployment_id": "flow.acme", "inputs": {"v": "l"}}
    world.call(
        "ops", "workflow.schedules.create", {**live, "trigger": {"kind": "oneshot", "at": at}}
    )
    page.goto(f"{world.url}/ui/#/schedules/acme.live")
    page.get_by_test_id("occurrences").wait_for()
    page.evaluate("window.__marker = 'same page'")
    admitted = page.locator("[data-testid=occurrences] > tbody > tr a")
    expect(admitted).to_have_count(1, timeout=UI_TIMEOUT_MS)
    assert page.evaluate("window.__marker") == "same page"
    (occurrence,) = world.call(
        "admin", "workflow.schedules.occurrences.list", {"schedule_id": "acme.live"}
    )["occurrences"]
    assert admitted.inner_text() == occurrence["run_id"]

    page.goto(f"{world.url}/ui/#/schedules/acme.nightly")
    preview = world.call(
        "admin", "workflow.schedules.preview", {"schedule_id": "acme.nightly", "count": 10}
    )
    page.locator("[data-testid=preview] tbody > tr").first.wait_for()
    rows = page.locator("[data-testid=preview] tbody > tr td:first-child").all_inner_texts()
    assert rows == [p["instant"] for p in preview]
    assert page.get_by_test_id("schedule").locator("[data-field=note]").inner_text() == HOSTILE
    screenshot(page, "schedule")
    no_script_ran(page)


def test_runs_are_listed_newest_first_and_filtered(world: World, browser: Browser) -> None:
    page = browser.signed_in("admin", "/runs")
    newest = world.call("admin", "workflow.runs.list", {"newest_first": True, "limit": 50})
    assert table_rows(page, "runs", "data-run") == [r["run_id"] for r in newest["runs"]]
    ids = [r["run_id"] for r in newest["runs"]]
    assert ids == sorted(ids, reverse=True)
    screenshot(page, "runs")

    page.get_by_test_id("filter-status").select_option("failed")
    page.get_by_test_id("apply-filters").click()
    expect(page).to_have_url(f"{world.url}/ui/#/runs?status=failed")
    failed = world.call("admin", "workflow.runs.list", {"newest_first": True, "status": "failed"})
    expect(page.locator("[data-testid=runs] > tbody > tr")).to_have_count(len(failed["runs"]))
    assert table_rows(page, "runs", "data-run") == [r["run_id"] for r in failed["runs"]]
    assert world.runs["boom"] in table_rows(page, "runs", "data-run")

    page.goto(f"{world.url}/ui/#/runs?deployment=flow.globex")
    expect(page.locator("[data-testid=runs] > tbody > tr")).to_have_count(1)
    assert table_rows(page, "runs", "data-run") == [world.runs["globex"]]

    page.goto(f"{world.url}/ui/#/runs?schedule=acme.soon")
    by_schedule = world.call("admin", "workflow.runs.list", {"schedule_id": "acme.soon"})
    expect(page.locator("[data-testid=runs] > tbody > tr")).to_have_count(len(by_schedule["runs"]))

    page.goto(f"{world.url}/ui/#/runs?from=2099-01-01T00:00:00")
    page.get_by_test_id("no-runs").wait_for()
    no_script_ran(page)


def test_run_view_draws_the_dag_by_state_with_attempts_errors_and_io(
    world: World, browser: Browser
) -> None:
    page = browser.signed_in("admin", f"/runs/{world.runs['flow']}")
    page.get_by_test_id("dag").wait_for()
    nodes = page.locator("svg.dag g[data-node]")
    expect(nodes).to_have_count(4)
    assert {nodes.nth(i).get_attribute("data-status") for i in range(4)} == {"completed"}
    edges = page.locator("svg.dag path[data-edge]")
    assert sorted(edges.nth(i).get_attribute("data-edge") or "" for i in range(edges.count())) == [
        "a->b",
        "a->c",
        "b->d",
        "c->d",
    ]
    run = world.call("admin", "workflow.runs.inspect", {"run_id": world.runs["flow"]})
    assert '"result"' in page.get_by_test_id("output").inner_text()
    for entry in run["trace"]:
        section = page.get_by_test_id(f"node-{entry['node']}")
        expect(section.locator(".attempt")).to_have_count(len(entry["attempts"]))
    screenshot(page, "run")

    # A failed node: its error, and every field its attempts carry (a stack trace too,
    # when the server records one), as text.
    page.goto(f"{world.url}/ui/#/runs/{world.runs['boom']}")
    failed = world.call("admin", "workflow.runs.inspect", {"run_id": world.runs["boom"]})
    explode = page.locator("svg.dag g[data-node=explode]")
    expect(explode).to_have_attribute("data-status", "failed")
    expect(page.locator("svg.dag g[data-node=a]")).to_have_attribute("data-status", "completed")
    section = page.get_by_test_id("node-explode")
    expect(section).to_contain_text("kaboom from the console test")
    (entry,) = [t for t in failed["trace"] if t["node"] == "explode"]
    for attempt, shown in zip(entry["attempts"], section.locator(".attempt").all(), strict=True):
        for key, value in attempt.items():
            cell = shown.locator(f"[data-field='{key}']")
            expect(cell).to_have_count(1)
            if isinstance(value, str) and key not in ("leased_at", "started_at", "finished_at"):
                assert value.strip().splitlines()[0] in cell.inner_text()
    expect(page.get_by_test_id("run-error")).to_contain_text("kaboom")
    # The stack trace is shown once, on the attempt that reported it; the node's error
    # and the run's point there instead of repeating it.
    (traced,) = [a for a in entry["attempts"] if a.get("stack_trace")][-1:]
    # A frame line: only a stack trace holds one (the message is repeated elsewhere).
    trace_line = next(
        line.strip()
        for line in traced["stack_trace"].splitlines()
        if line.strip().startswith("File ") and line.rstrip().endswith(", in boom")
    )
    assert trace_line in section.locator(".attempt").last.inner_text()
    assert page.locator("main").inner_text().count(trace_line) == 1
    links = page.get_by_test_id("stack-trace-link")
    expect(links).to_have_count(2)  # the run's error and the node's
    for i in range(2):
        link = links.nth(i)
        assert link.get_attribute("data-node") == "explode"
        assert link.get_attribute("data-attempt") == str(traced["attempt"])
        expect(link).to_contain_text(f"attempt #{traced['attempt']}")
    node_error = section.locator("[data-field='error']").first
    expect(node_error.get_by_test_id("stack-trace-link")).to_have_count(1)
    links.first.click()
    expect(section.locator(f".attempt[data-attempt='{traced['attempt']}']")).to_be_in_viewport()
    screenshot(page, "run-failed")

    # An interrupted run shows what it waits for; hostile inputs show as text.
    page.goto(f"{world.url}/ui/#/runs/{world.runs['ask']}")
    expect(page.get_by_test_id("interrupts")).to_contain_text("Ship it?")
    expect(page.locator("svg.dag g[data-node=approve]")).to_have_attribute(
        "data-status", "awaiting_input"
    )
    page.goto(f"{world.url}/ui/#/runs/{world.runs['globex']}")
    expect(page.get_by_test_id("inputs")).to_contain_text(HOSTILE.replace('"', '\\"'))
    assert page.locator("main img, main script").count() == 0
    no_script_ran(page)


FAN_PLAN: dict[str, Any] = {
    "input_schema": {"type": "object", "required": ["values"]},
    "nodes": [
        {"kind": "map", "id": "each", "activity_type": "console.echo",
         "items": {"$input": "values"}, "args": {"value": {"$item": ""}}, "idempotent": True},
    ],
    "output": {"echoed": {"$node": "each"}},
}  # fmt: skip


def test_run_view_lists_a_map_nodes_items_with_their_attempts(
    world: World, browser: Browser
) -> None:
    world.call("admin", "workflow.artifacts.create", {"artifact_id": "fan", "version": 1,
                                                      "plan": FAN_PLAN})  # fmt: skip
    body = {"artifact_id": "fan", "artifact_version": 1, "name": "acme", "tenant": "acme"}
    world.call("admin", "workflow.deployments.save", {"body": body})
    started = world.call(
        "admin", "workflow.runs.start", {"deployment_id": "fan.acme", "inputs": {"values": [1, 2]}}
    )
    run_id = started["run_id"]

    def inspect() -> dict[str, Any]:
        view: dict[str, Any] = world.call("admin", "workflow.runs.inspect", {"run_id": run_id})
        return view

    wait_for(lambda: inspect()["status"] == "completed", "the map run to complete")
    (entry,) = inspect()["trace"]
    page = browser.signed_in("admin", f"/runs/{run_id}")
    rows = page.locator("[data-testid=items-each] > tbody > tr")
    expect(rows).to_have_count(len(entry["items"]))
    for item, row in zip(entry["items"], rows.all(), strict=True):
        assert row.get_attribute("data-item") == str(item["index"])
        expect(row.locator(".badge")).to_have_text(item["status"])
        expect(row.locator("a")).to_have_text(item["activity_id"])
        shown = row.locator(".item-attempt")
        expect(shown).to_have_count(len(item["attempts"]))
        for attempt, line in zip(item["attempts"], shown.all(), strict=True):
            assert line.get_attribute("data-attempt") == str(attempt["attempt"])
            expect(line).to_contain_text(f"#{attempt['attempt']} {attempt['outcome']}")
            expect(line).to_contain_text(f"on {attempt['worker_id']}")
    # The items are a table of their own, not repeated as a JSON field of the node.
    expect(page.locator("[data-testid=node-each] [data-field=items]")).to_have_count(0)
    no_script_ran(page)


def test_workers_and_activity_views_match_the_api(world: World, browser: Browser) -> None:
    page = browser.signed_in("admin", "/workers")
    workers = world.call("admin", "scheduler.workers.list", {"limit": 100})["workers"]
    assert table_rows(page, "workers", "data-worker") == [w["info"]["worker_id"] for w in workers]
    for w in workers:
        row = page.locator(f"[data-testid=workers] tr[data-worker='{w['info']['worker_id']}']")
        text = row.inner_text()
        assert w["status"] in text
        assert "console.echo" in text  # its activity types
        assert f"/ {w['info']['max_concurrency']}" in row.get_by_test_id("load").inner_text()
    screenshot(page, "workers")

    run = world.call("admin", "workflow.runs.inspect", {"run_id": world.runs["flow"]})
    activity_id = run["trace"][0]["activity_id"]
    history = world.call("admin", "scheduler.activities.history", {"activity_id": activity_id})
    page.goto(f"{world.url}/ui/#/activities/{activity_id}")
    page.get_by_test_id("transitions").wait_for()
    assert table_rows(page, "transitions", "data-to") == [
        t["to_state"] for t in history["transitions"]
    ]
    leases = page.locator("[data-testid=leases] table > tbody > tr")
    expect(leases).to_have_count(1)
    granted = next(t for t in history["transitions"] if t["to_state"] == "leased")
    assert granted["worker_id"] in leases.inner_text()
    screenshot(page, "activity")
    no_script_ran(page)


# ----------------------------------------------------------------- actions


def forced_call(page: Page, who: str, method: str, params: dict[str, Any]) -> str:
    """What the server answers ``who`` for a call the console would not offer."""
    answer = page.evaluate(
        """async ([token, method, params]) => {
            const r = await fetch("/rpc", {method: "POST", headers: {
                "Content-Type": "application/json", Authorization: `Bearer ${token}`},
                body: JSON.stringify({jsonrpc: "2.0", id: 1, method, params})});
            return await r.json();
        }""",
        [TOKENS[who], method, params],
    )
    return str(answer["error"]["data"]["code"] if "error" in answer else "ok")


def test_schedule_actions_work_for_operators_and_are_refused_to_readers(
    world: World, browser: Browser
) -> None:
    viewer = browser.signed_in("viewer", "/schedules/acme.nightly")
    viewer.get_by_test_id("action-preview").wait_for()
    assert viewer.get_by_test_id("action-pause").count() == 0
    assert viewer.get_by_test_id("action-trigger").count() == 0
    assert confirm(viewer, "action-preview", {"count": "3"}) == "ok"
    refused = {"schedule_id": "acme.nightly", "reason": None}
    assert forced_call(viewer, "viewer", "workflow.schedules.pause", refused) == "forbidden"
    assert (
        world.call("admin", "workflow.schedules.get", {"schedule_id": "acme.nightly"})["paused"]
        is False
    )

    ops = browser.signed_in("ops", "/schedules/acme.nightly")
    assert confirm(ops, "action-pause", {"reason": "maintenance <b>window</b>"}) == "ok"
    got = world.call("admin", "workflow.schedules.get", {"schedule_id": "acme.nightly"})
    assert (got["paused"], got["pause_reason"]) == (True, "maintenance <b>window</b>")
    expect(ops.get_by_test_id("schedule").locator("[data-field=pause_reason]")).to_have_text(
        "maintenance <b>window</b>"
    )
    assert confirm(ops, "action-resume") == "ok"
    got = world.call("admin", "workflow.schedules.get", {"schedule_id": "acme.nightly"})
    assert got["paused"] is False
    before = world.call("admin", "workflow.runs.list", {"schedule_id": "acme.nightly"})["runs"]
    assert confirm(ops, "action-trigger") == "ok"
    after = world.call("admin", "workflow.runs.list", {"schedule_id": "acme.nightly"})["runs"]
    assert len(after) == len(before) + 1
    # A refusal is shown with the server's typed error: preview of a bad count.
    assert confirm(ops, "action-preview", {"count": "0"}) == "invalid_argument"
    no_script_ran(ops)


def test_run_actions_work_for_operators_and_are_refused_to_readers(
    world: World, browser: Browser
) -> None:
    target = world.runs["cancel-me"]
    viewer = browser.signed_in("viewer", f"/runs/{target}")
    viewer.get_by_test_id("dag").wait_for()
    assert viewer.get_by_test_id("action-cancel").count() == 0
    assert forced_call(viewer, "viewer", "workflow.runs.cancel", {"run_id": target}) == "forbidden"

    ops = browser.signed_in("ops", f"/runs/{target}")
    assert confirm(ops, "action-cancel", {"reason": "from the console"}) == "ok"
    assert world.call("admin", "workflow.runs.inspect", {"run_id": target})["status"] == "cancelled"

    asked = world.runs["ask"]
    ops.goto(f"{world.url}/ui/#/runs/{asked}")
    # An answer the interrupt's schema refuses: the typed error is shown.
    assert confirm(ops, "action-resume", {"answer": '"not a boolean"'}) == "invalid_argument"
    assert confirm(ops, "action-resume", {"answer": "true"}) == "ok"

    def completed() -> bool:
        return world.call("admin", "workflow.runs.inspect", {"run_id": asked})["status"] == (
            "completed"
        )

    wait_for(completed, "the resumed run to complete")
    no_script_ran(ops)


def test_draining_a_worker_is_for_admins_of_that_worker(world: World, browser: Browser) -> None:
    viewer = browser.signed_in("viewer", "/workers")
    viewer.get_by_test_id("workers").wait_for()
    assert viewer.locator("[data-testid^=drain-]").count() == 0
    drain = {"worker_id": "console-drainee"}
    assert forced_call(viewer, "viewer", "scheduler.workers.shutdown", drain) == "forbidden"

    # A tenant-scoped admin is offered the action, and the server refuses it: the
    # worker is another credential's.
    scoped = browser.signed_in("acme-admin", "/workers")
    assert confirm(scoped, "drain-console-drainee") == "forbidden"

    def departures() -> list[str]:
        """The drainee's status changes to ``draining`` or ``gone``, from the server's log."""
        lines = [json.loads(x) for x in world.server_log.read_text().splitlines() if x[:1] == "{"]
        return [
            line["status"]
            for line in lines
            if line.get("action") == "worker.updated"
            and line.get("worker_id") == "console-drainee"
            and line.get("status") in ("draining", "gone")
        ]

    assert departures() == []
    admin = browser.signed_in("admin", "/workers")
    assert confirm(admin, "drain-console-drainee") == "ok"
    # The server drained it (a running SDK worker then registers again, as after any
    # shutdown it did not ask for).
    wait_for(lambda: departures() != [], "the server to drain the worker")
    no_script_ran(admin)


# ----------------------------------------------------------------- tenants


def test_a_tenant_token_sees_only_its_tenants_objects(world: World, browser: Browser) -> None:
    page = browser.signed_in("acme", "/schedules")
    mine = world.call("acme", "workflow.schedules.list", {"limit": 50})["schedules"]
    shown = table_rows(page, "schedules", "data-schedule")
    assert shown == [s["schedule_id"] for s in mine]
    assert shown
    assert all(s.startswith("acme.") for s in shown)
    assert "globex" not in page.locator("main").inner_text()

    page.goto(f"{world.url}/ui/#/runs")
    runs = world.call("acme", "workflow.runs.list", {"newest_first": True, "limit": 50})
    assert table_rows(page, "runs", "data-run") == [r["run_id"] for r in runs["runs"]]
    assert world.runs["globex"] not in table_rows(page, "runs", "data-run")
    assert "globex" not in page.locator("main").inner_text()

    page.goto(f"{world.url}/ui/#/runs/{world.runs['globex']}")
    expect(page.get_by_test_id("error")).to_contain_text("not_found")
    page.goto(f"{world.url}/ui/#/schedules/globex.hourly")
    expect(page.get_by_test_id("error")).to_contain_text("not_found")

    page.goto(f"{world.url}/ui/#/")
    expect(page.get_by_test_id("figures-refused")).to_contain_text("forbidden")
    page.goto(f"{world.url}/ui/#/workers")
    listed = world.call("acme", "scheduler.workers.list", {"limit": 100})["workers"]
    assert table_rows(page, "workers", "data-worker") == [w["info"]["worker_id"] for w in listed]
    no_script_ran(page)


def test_a_bad_token_is_refused_at_sign_in(world: World, browser: Browser) -> None:
    context = browser.browser.new_context()
    browser.contexts.append(context)
    page = context.new_page()
    page.goto(f"{world.url}/ui/")
    page.get_by_test_id("token").fill("not-a-token")
    page.get_by_test_id("sign-in").click()
    expect(page.get_by_test_id("login-error")).to_contain_text("not valid")
    assert page.evaluate("sessionStorage.length") == 0
    assert context.cookies() == []
