"""Every result of the ``App`` client and of the Python API is a typed view (issue 17).

Against a real local server (in-process workers over loopback JSON-RPC, schedules
on): each run and schedule method of ``App``, ``SyncApp``, ``server.api`` and
``server.api.schedules`` returns its declared :class:`~wf.wire.views.View`, not a
dict; attribute and mapping reads agree; ``to_builtins()`` equals the JSON-RPC
answer for the same call; a view encodes to the very bytes of the JSON object the
server builds (:func:`wf.runtime.trace.run_view`, :func:`wf.schedules.api.schedule_view`
...), so the wire did not change; the seed example's ``inspected["output"]["result"]``
still works; and an answer with fields a newer server added still decodes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest

import wf.runtime.api as runtime_api
import wf.schedules.api as schedules_api
from wf.client.app import App, SyncApp
from wf.server.local import LocalStaticServer, build_local_static_workflow_server
from wf.wire import run_views, schedule_views, views
from wf.wire.contract import METHODS
from wf.wire.run_views import CorruptRunSummary, NodeTrace, RunPage, RunSummary, RunView
from wf.wire.schedule_views import (
    CorruptScheduleView,
    OccurrencePage,
    PreviewInstant,
    SchedulePage,
    ScheduleView,
)
from wf.wire.views import View
from wf.wire.workflow import Artifact, Deployment, DeploymentPage
from wf.wire.workflow_methods import INSPECT_RUN, RunCounts
from wf.worker import activity

ERROR_RETRY: Final = {"max_attempts": 1}


@activity(name="typed.double", idempotent=True)
def double(x: int) -> dict[str, int]:
    return {"result": 2 * x}


@activity(name="typed.boom", idempotent=True)
def boom() -> None:
    raise RuntimeError("boom on purpose")


MIX_PLAN: Final = {
    "input_schema": {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "xs": {"type": "array"}},
        "required": ["x", "xs"],
    },
    "nodes": [
        {
            "kind": "activity",
            "id": "a",
            "activity_type": "typed.double",
            "args": {"x": {"$input": "x"}},
        },
        {
            "kind": "map",
            "id": "m",
            "activity_type": "typed.double",
            "items": {"$input": "xs"},
            "args": {"x": {"$item": ""}},
            "needs": ["a"],
        },
    ],
    "output": {"result": {"$node": "a", "path": "result"}, "mapped": {"$node": "m"}},
}
BOOM_PLAN: Final = {
    "nodes": [{"kind": "activity", "id": "b", "activity_type": "typed.boom", "retry": ERROR_RETRY}]
}
ASK_PLAN: Final = {
    "nodes": [
        {"kind": "interrupt", "id": "ask", "prompt": "name?", "input_schema": {"type": "string"}}
    ],
    "output": {"name": {"$node": "ask"}},
}
CRON: Final = {"kind": "cron", "expression": "0 9 1 1 *", "timezone": "Europe/Paris"}


class Built:
    """What the server built before typing it: the JSON objects, in call order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.objects: list[Any] = []
        for module, name in (
            (runtime_api, "run_view"),
            (runtime_api, "run_summary"),
            (schedules_api, "schedule_view"),
            (schedules_api, "instant_view"),
        ):
            monkeypatch.setattr(module, name, self._recording(getattr(module, name)))

    def _recording(self, build: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            built = build(*args, **kwargs)
            self.objects.append(built)
            return built

        return recorded

    def take(self) -> list[Any]:
        """The objects built since the last take; encoded now, before they can change."""
        taken = [msgspec.json.encode(o) for o in self.objects]
        self.objects.clear()
        return taken


def serving(tmp_path: Path, test: Callable[[LocalStaticServer], Awaitable[None]]) -> None:
    """Run ``test`` against a started local server (in-process workers, schedules on)."""

    async def main() -> None:
        server = build_local_static_workflow_server(
            tmp_path / "store", activities=[double, boom], schedules=True, durability="process"
        )
        async with server:
            await test(server)

    asyncio.run(main())


async def _deploy(app: App) -> None:
    for name, plan in (("mix", MIX_PLAN), ("boom", BOOM_PLAN), ("ask", ASK_PLAN)):
        assert isinstance(await app.create_artifact_from_plan(name, 1, plan), Artifact)
        saved = await app.save_deployment({"artifact_id": name, "artifact_version": 1})
        assert isinstance(saved, Deployment)


def _reads_alike(view: View) -> None:
    """Mapping reads are the JSON object on the wire; attribute reads agree with them."""
    wire = view.to_builtins()
    assert view.keys() == list(wire)
    assert list(view) == list(wire)
    assert dict(view.items()).keys() == wire.keys()
    assert len(view.values()) == len(wire)
    fields = {f.encode_name: f.name for f in msgspec.structs.fields(type(view))}
    for key in wire:
        assert key in view
        assert view[key] is getattr(view, fields[key])
        assert view.get(key) is view[key]
    assert "no_such_key" not in view
    assert view.get("no_such_key") is None
    assert view.get("no_such_key", 7) == 7
    with pytest.raises(KeyError):
        view["no_such_key"]
    for value in view.values():
        nested = value if isinstance(value, list) else [value]
        for item in nested:
            if isinstance(item, View):
                _reads_alike(item)


def test_app_and_python_api_return_typed_views_equal_to_the_wire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serving(tmp_path, lambda local: _every_method_typed(local, Built(monkeypatch)))


async def _every_method_typed(local: LocalStaticServer, built: Built) -> None:
    api = local.api
    async with App(local.url) as app:
        await _deploy(app)
        rpc = app.rpc

        # start / wait / inspect: a completed run with a map node's items.
        started = await app.start_run("mix.default", {"x": 3, "xs": [1, 2]})
        assert type(started) is RunView
        assert built.take() == [msgspec.json.encode(started)]
        done = await app.wait_for_run(started.run_id, timeout=60)
        assert type(done) is RunView
        assert done.status == "completed"
        built.take()
        inspected = await app.inspect_run(started.run_id)
        assert built.take() == [msgspec.json.encode(inspected)]
        raw = await rpc.call("workflow.runs.inspect", {"run_id": started.run_id})
        assert inspected.to_builtins() == raw
        assert msgspec.json.encode(raw) == msgspec.json.encode(inspected)
        assert inspected == await api.inspect_run(started.run_id)
        built.take()
        # The seed spec's example, on both faces.
        local_view = await api.inspect_run(run_id=started.run_id)
        assert local_view["output"]["result"] == inspected.output["result"] == 6
        assert inspected["output"]["mapped"] == [{"result": 2}, {"result": 4}]
        mapped = next(n for n in inspected.trace if n.node == "m")
        assert type(mapped) is NodeTrace
        assert mapped.map_items is not None
        assert len(mapped.map_items) == 2
        assert mapped["items"] is mapped.map_items
        assert mapped.map_items[0].attempts is not None
        assert mapped["items"][0]["attempts"][0]["outcome"] == "completed"
        _reads_alike(inspected)

        # A failed run: its error carries the stack trace; absent keys stay absent.
        failed = await app.start_run("boom.default")
        failed = await app.wait_for_run(failed.run_id, timeout=60)
        assert failed.status == "failed"
        assert failed.error is not None
        assert failed.error.stack_trace is not None
        assert "boom on purpose" in failed.error.stack_trace
        node = failed.trace[0]
        assert "output" not in node
        assert node.output is msgspec.UNSET
        assert node["error"]["code"] == failed["error"]["code"]
        built.take()
        again = await api.inspect_run(failed.run_id)
        assert built.take() == [msgspec.json.encode(again)]
        _reads_alike(again)

        # list: pages of summaries, typed on both faces, equal to the wire.
        page = await app.list_runs(limit=1)
        assert type(page) is RunPage
        assert type(page.runs[0]) is RunSummary
        assert page.next_cursor is not None
        raw_page = await rpc.call("workflow.runs.list", {"limit": 1})
        assert page.to_builtins() == raw_page
        built.take()
        local_page = await api.list_runs(limit=1)
        assert type(local_page) is RunPage
        assert built.take() == [msgspec.json.encode(local_page.runs[0])]
        assert isinstance(await app.count_runs(), RunCounts)
        assert isinstance(await app.list_deployments(), DeploymentPage)

        # resume and cancel: run views.
        asked = await app.start_run("ask.default")
        assert asked.status == "interrupted"
        assert asked.awaiting[0].node == "ask"
        resumed = await app.resume_run(asked.run_id, "ada")
        assert type(resumed) is RunView
        assert resumed["output"] == {"name": "ada"}
        assert resumed.resumes[-1].state == "applied"
        asked_local = await api.start_run("ask.default")
        cancelled = await api.cancel_run(asked_local.run_id, "typed")
        assert type(cancelled) is RunView
        assert cancelled.status == "cancelled"
        _reads_alike(cancelled)
        waited = await api.wait_for_run(asked_local.run_id)
        assert type(waited) is RunView

        # schedules, over the wire and in process.
        schedules = api.schedules
        built.take()
        made = await app.create_schedule("typed-wire", "ask.default", CRON, note="n")
        assert type(made) is ScheduleView
        assert built.take() == [msgspec.json.encode(made)]
        assert made.to_builtins() == await rpc.call(
            "workflow.schedules.get", {"schedule_id": "typed-wire"}
        )
        assert "pending" not in made
        assert "corrupt" not in made
        _reads_alike(made)
        made_local = await schedules.create_schedule("typed-local", "ask.default", CRON)
        assert type(made_local) is ScheduleView
        for view in (
            await app.get_schedule("typed-wire"),
            await schedules.get_schedule("typed-wire"),
            await app.update_schedule("typed-wire", 1, note="edited"),
            await schedules.update_schedule("typed-local", 1, note="edited"),
            await app.pause_schedule("typed-wire", reason="r"),
            await schedules.pause_schedule("typed-local"),
            await app.resume_schedule("typed-wire"),
            await schedules.resume_schedule("typed-local"),
        ):
            assert type(view) is ScheduleView
        assert (await app.get_schedule("typed-wire")).note == "edited"
        listed = await app.list_schedules()
        assert type(listed) is SchedulePage
        assert type(await schedules.list_schedules()) is SchedulePage
        assert listed.to_builtins() == await rpc.call("workflow.schedules.list", {})
        assert [s.schedule_id for s in listed.schedules] == ["typed-local", "typed-wire"]
        built.take()
        preview = await app.preview_schedule("typed-wire", count=2)
        assert [type(p) for p in preview] == [PreviewInstant, PreviewInstant]
        assert built.take() == [msgspec.json.encode(p) for p in preview]
        assert preview == await schedules.preview_schedule("typed-wire", count=2)
        assert preview[0]["timezone"] == preview[0].timezone == "Europe/Paris"
        occurrences = await app.list_schedule_occurrences("typed-wire")
        assert type(occurrences) is OccurrencePage
        assert type(await schedules.list_schedule_occurrences("typed-wire")) is OccurrencePage
        assert occurrences.to_builtins() == {"occurrences": [], "next_cursor": None}
        triggered = await app.trigger_schedule("typed-wire")
        assert type(triggered) is RunView
        assert triggered.triggered_from == triggered["triggered_from"] == "typed-wire"
        triggered_local = await schedules.trigger_schedule("typed-local")
        assert type(triggered_local) is RunView
        raw_trigger = await rpc.call("workflow.runs.inspect", {"run_id": triggered.run_id})
        assert "triggered_from" not in raw_trigger
        shown = triggered.to_builtins()
        assert shown.pop("triggered_from") == "typed-wire"
        assert shown == raw_trigger
        deleted = await app.delete_schedule("typed-wire")
        assert type(deleted) is ScheduleView
        assert deleted.status == "deleted"
        assert type(await schedules.delete_schedule("typed-local")) is ScheduleView

        # SyncApp: the same types (blocking, so on a thread of its own).
        def blocking() -> tuple[Any, ...]:
            with App.sync(local.url) as sync:
                return (
                    sync.inspect_run(started.run_id),
                    sync.list_runs(limit=1),
                    sync.get_schedule("typed-local"),
                    sync.wait_for_run(started.run_id),
                )

        # Every twin is declared on SyncApp, typed as App's (not only found by name).
        assert set(App.TWINS) <= set(vars(SyncApp))
        sync_views = await asyncio.to_thread(blocking)
        assert [type(v) for v in sync_views] == [RunView, RunPage, ScheduleView, RunView]
        assert sync_views[0] == inspected


def test_a_newer_servers_extra_fields_are_tolerated(tmp_path: Path) -> None:
    answers: list[Any] = []

    async def inspected(local: LocalStaticServer) -> None:
        async with App(local.url) as app:
            await _deploy(app)
            run = await app.start_run("mix.default", {"x": 1, "xs": [1]})
            await app.wait_for_run(run.run_id, timeout=60)
            answers.append(await app.rpc.call("workflow.runs.inspect", {"run_id": run.run_id}))

    serving(tmp_path, inspected)
    raw = answers[0]
    newer = {**raw, "added_later": {"any": "thing"}}
    newer["trace"] = [{**entry, "added_later": 1} for entry in raw["trace"]]
    view = INSPECT_RUN.decode(newer)
    assert type(view) is RunView
    assert view.to_builtins() == raw
    assert "added_later" not in view
    decoded = msgspec.convert({"schedule_id": "s", "status": "active", "new": 1}, ScheduleView)
    assert decoded.schedule_id == "s"


def test_every_result_of_the_contract_is_a_view() -> None:
    """Every method's declared result is a View (or a list of them, or a scalar), and
    no view's field hides a mapping method."""
    reserved = {"get", "keys", "items", "values", "to_builtins"}
    not_views: set[str] = set()
    for spec in METHODS.values():
        result = spec.result
        if result is None or spec.wrap is not None:
            continue
        args = getattr(result, "__args__", None)
        inner = args[0] if args and getattr(result, "__origin__", None) is list else result
        if not (isinstance(inner, type) and issubclass(inner, View)):
            not_views.add(spec.name)
    # The OpenRPC document (free-form JSON) is the only one (wrapped scalars and lists
    # of the scheduler core's own structs travel under a key and are not read as maps).
    assert not_views == {"rpc.discover"}
    for module in (views, run_views, schedule_views):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, View):
                names = {f.name for f in msgspec.structs.fields(value)}
                assert not names & reserved, value


def test_a_view_is_read_only_and_equals_its_wire_object() -> None:
    view = RunSummary(run_id="run-1", status="running")
    wire = view.to_builtins()
    assert view == wire
    assert wire == view
    assert view != {**wire, "status": "failed"}
    assert view == RunSummary(run_id="run-1", status="running")
    assert view != RunSummary(run_id="run-1", status="failed")
    assert view != 1
    assert view != RunView(run_id="run-1", status="running")
    assert hash(view) == hash(RunSummary(run_id="run-1", status="running"))
    with pytest.raises(TypeError):
        view["status"] = "x"  # type: ignore[index]
    with pytest.raises(AttributeError):
        view.status = "x"  # type: ignore[misc]
    assert view.to_builtins()["status"] == "running"
    assert "corrupt" not in view
    assert view.get("corrupt") is None


def test_a_corrupt_record_is_listed_as_before() -> None:
    """A run or schedule whose record does not decode travels as the three keys it
    always did, and a client still reads it (``corrupt`` set)."""
    run = CorruptRunSummary(run_id="run-1", status="running", corrupt="bad record")
    assert isinstance(run, RunSummary)
    sent = {"run_id": "run-1", "status": "running", "corrupt": "bad record"}
    assert msgspec.json.encode(run) == msgspec.json.encode(sent)
    assert run.keys() == list(sent)
    read = msgspec.json.decode(
        msgspec.json.encode(RunPage(runs=[run], next_cursor=None)), type=RunPage
    )
    assert read.runs[0].corrupt == "bad record"
    assert "corrupt" in read.runs[0]
    schedule = CorruptScheduleView(schedule_id="s", corrupt="bad record", status="blocked")
    listed = {"schedule_id": "s", "corrupt": "bad record", "status": "blocked"}
    assert msgspec.json.encode(schedule) == msgspec.json.encode(listed)
    assert (
        msgspec.json.decode(msgspec.json.encode(schedule), type=ScheduleView).corrupt
        == "bad record"
    )
