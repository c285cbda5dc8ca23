"""The server serves exactly the methods the wire contract declares, no more, no less.

Each method is one declaration in ``wf.wire`` (name, params, result, access,
summary); the server attaches a handler to each and refuses to be built when
a declared method has no handler or a handler has no declaration. The
``App`` client's twins and the worker SDK use the same declarations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

import wf.server.app
from wf.client.app import App
from wf.scheduler.outputs import LeaseRevoked
from wf.server.app import WfServer
from wf.server.config import ServerConfig, ServerSection, StoreConfig
from wf.server.rpc import Caller, ContractMismatch, Registry
from wf.wire import scheduler_methods
from wf.wire.contract import METHODS, method_table
from wf.wire.methods import DISCOVER, MethodSpec, NoParams
from wf.wire.scheduler_methods import HEARTBEAT, QUEUE_STATS, RENEW_LEASE, START_ACTIVITY


def _config(root: Path) -> ServerConfig:
    return ServerConfig(
        server=ServerSection(port=0, store=StoreConfig(root=str(root), durability="process"))
    )


async def _nothing(params: NoParams, caller: Caller) -> None:
    return None


EXTRA: MethodSpec[NoParams] = MethodSpec(
    name="test.extra",
    python_name="extra",
    params=NoParams,
    result=None,
    access="read",
    summary="A method only this test declares.",
)


def test_the_server_serves_every_declared_method_with_its_declaration(tmp_path: Path) -> None:
    methods = WfServer(_config(tmp_path)).registry.methods
    assert set(methods) == set(METHODS)
    for name, method in methods.items():
        spec = METHODS[name]
        assert method.spec is spec
        assert (method.params, method.access, method.summary) == (
            spec.params,
            spec.access,
            spec.summary,
        )


def test_the_app_client_has_one_twin_per_declaration() -> None:
    assert {twin.name for twin in App.TWINS.values()} == set(METHODS)
    for python_name, twin in App.TWINS.items():
        assert twin is METHODS[twin.name]
        assert twin.python_name == python_name
        assert callable(getattr(App, python_name))


def test_a_handler_for_an_undeclared_method_is_refused() -> None:
    registry = Registry(METHODS.values())
    with pytest.raises(ContractMismatch, match=r"test\.extra, which is not declared"):
        registry.handle(EXTRA, _nothing)
    # A look-alike of a declared method is not its declaration.
    look_alike = MethodSpec(
        name=DISCOVER.name,
        python_name=DISCOVER.python_name,
        params=NoParams,
        result=DISCOVER.result,
        access="read",
        summary=DISCOVER.summary,
    )
    with pytest.raises(ContractMismatch, match=r"rpc\.discover, which is not declared"):
        registry.handle(look_alike, _nothing)


def test_a_declared_method_without_a_handler_fails_the_check() -> None:
    registry = Registry([DISCOVER, EXTRA])
    registry.handle(DISCOVER, _nothing)
    with pytest.raises(ContractMismatch, match=r"without a handler: test\.extra"):
        registry.check()
    registry.handle(EXTRA, _nothing)
    registry.check()
    with pytest.raises(ContractMismatch, match="two handlers"):
        registry.handle(EXTRA, _nothing)


def test_the_server_refuses_to_start_with_a_declared_method_it_does_not_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wf.server.app, "METHODS", {**METHODS, EXTRA.name: EXTRA})
    with pytest.raises(ContractMismatch, match=r"test\.extra"):
        WfServer(_config(tmp_path))


def test_a_name_is_declared_once() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        method_table([QUEUE_STATS, QUEUE_STATS])
    with pytest.raises(ContractMismatch, match="declared twice"):
        Registry([QUEUE_STATS, QUEUE_STATS])


@pytest.mark.parametrize(
    ("spec", "raw", "expected"),
    [
        (START_ACTIVITY, {"ok": True}, None),
        (RENEW_LEASE, {"expires_at": 12.5}, 12.5),
        (
            HEARTBEAT,
            {"revoked": [{"activity_id": "a", "worker_id": "w", "token": 3, "reason": "r"}]},
            [LeaseRevoked(activity_id="a", worker_id="w", token=3, reason="r")],
        ),
    ],
)
def test_a_declaration_says_how_its_result_travels(
    spec: MethodSpec[Any], raw: Any, expected: Any
) -> None:
    assert spec.decode(raw) == expected


def test_every_declaration_has_a_documented_parameter_struct() -> None:
    for spec in METHODS.values():
        assert issubclass(spec.params, msgspec.Struct), spec.name
        assert spec.params.__doc__, spec.name
        assert spec.summary.endswith("."), spec.name
        assert spec.access in ("worker", "read", "operate", "admin"), spec.name
    worker_methods = {s.name for s in scheduler_methods.METHODS if s.access == "worker"}
    assert worker_methods == {
        n for n in METHODS if n.startswith(("scheduler.workers.", "scheduler.leases."))
    } - {"scheduler.workers.list"}
