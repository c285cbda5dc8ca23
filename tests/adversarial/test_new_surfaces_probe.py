"""Hostile input at the entry points added with the console, conditions, maps and retention.

Each finding of the probe is pinned here: the input, and the typed refusal (or
bounded cost) it now meets. The JSON-RPC part runs against a real
``wf-rpc-server`` (SQLite and PostgreSQL) with the harness of
``test_every_entry_point.py``, which itself covers every parameter of every
method ``rpc.discover`` lists (the new ``workflow.runs.counts``,
``scheduler.dispatch.stats``, ``rpc.whoami`` and ``scheduler.leases.details``
included). After each refusal the store's fingerprint is unchanged and the
server still runs; at the end a run completes and the server drains.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_every_entry_point import Server, Store, _a_run_completes, _call, _post

from e2e._servers import BIN, REPO
from wf.cli import json_args
from wf.cli.connect import UsageError
from wf.cli.deploy_cmd import load_flow
from wf.cli.output import printable, text
from wf.cli.store_cmd import parse_duration
from wf.client.app import wait_for_run
from wf.errors import InvalidArgument
from wf.runtime.schema import PROBLEM_LENGTH_MAX, instance_problems, schema_problem
from wf.runtime.schema_limits import RECURSION_PROBLEM, is_recursion
from wf.runtime.trace import decode_cursor, encode_cursor
from wf.server.config import parse_config
from wf.store import sqlite_files

INTERNAL_ERROR = -32603
REDOS_DEADLINE_S = 5.0
"""A refusal of a catastrophic pattern must come at once (it used to block the server
for hours: ``^(a+)+$`` on 40 characters)."""

# ------------------------------------------------------------------ unit level


def _runs_cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(b"runs:" + raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "raw", [str(2**64).encode(), str(2**63).encode(), "٣".encode(), b" 4", b"4_0", b"", b"-1"]
)
def test_a_runs_cursor_outside_the_store_range_or_not_ascii_digits_is_refused(raw: bytes) -> None:
    with pytest.raises(InvalidArgument) as caught:
        decode_cursor(_runs_cursor(raw))
    assert caught.value.details["field"] == "cursor"


def test_a_runs_cursor_round_trips_up_to_the_largest_run_number() -> None:
    assert decode_cursor(encode_cursor(2**63 - 1)) == 2**63 - 1
    assert decode_cursor(encode_cursor(0)) == 0


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^(a+)+$"},
        {"type": "object", "patternProperties": {"^a": {}}},
        {"properties": {"x": {"items": {"pattern": "a"}}}},
        {"$defs": {"s": {"propertyNames": {"pattern": "(a|a)*b"}}}},
        {"anyOf": [{"not": {"pattern": "a"}}]},
    ],
)
def test_regular_expressions_in_a_plan_schema_are_refused(schema: dict[str, Any]) -> None:
    problem = schema_problem(schema)
    assert problem is not None
    assert "is not supported" in problem


def test_data_that_only_looks_like_a_pattern_keyword_is_not_refused() -> None:
    schema = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "default": "x"},
            "patternProperties": {"type": "object", "default": {"pattern": "(a+)+"}},
        },
        "examples": [{"pattern": "(a+)+"}],
    }
    assert schema_problem(schema) is None


@pytest.mark.parametrize("dialect", [5, [], {}, True, None])
def test_a_schema_dialect_that_is_not_a_string_is_a_problem_not_an_exception(
    dialect: object,
) -> None:
    assert schema_problem({"$schema": dialect, "type": "object"}) == (
        "$schema must be a string (the URI of a JSON Schema dialect)"
    )


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"not": {"$ref": "#"}},  # used to end in a native panic, not an exception
        {"if": {"$ref": "#"}},
        {"anyOf": [{"$ref": "#/anyOf/0"}]},
        {"$ref": "#/%24defs/a", "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}},
        {"$dynamicRef": "#meta", "$dynamicAnchor": "meta"},
        {"$anchor": "a", "allOf": [{"$ref": "#a"}]},
        {"type": "object", "properties": {"x": {"$ref": "#/properties/x"}}},
        {
            "properties": {"x": {"$ref": "#/$defs/a"}},
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
        },
    ],
)
def test_a_ref_cycle_that_never_descends_is_refused_when_the_schema_is_checked(
    schema: dict[str, Any],
) -> None:
    assert schema_problem(schema) == RECURSION_PROBLEM


def test_the_recursion_guard_knows_the_native_panic_and_lets_cancellation_through() -> None:
    class PanicException(BaseException):  # pyo3_runtime's, as rpds raises it
        pass

    assert is_recursion(PanicException("__eq__ failed!: RecursionError"))
    assert is_recursion(RecursionError())
    assert not is_recursion(asyncio.CancelledError())
    assert not is_recursion(KeyboardInterrupt())


def test_a_ref_cycle_met_while_checking_a_value_is_a_problem_not_an_exception() -> None:
    # Reachable only through a value the creation-time probes do not build (an array item).
    schema = {"items": {"$ref": "#/items"}}
    assert instance_problems(schema, [1]) == [f"/: {RECURSION_PROBLEM}"]
    # A cycle that does descend into the value is ordinary recursive data.
    tree = {"type": "object", "properties": {"child": {"$ref": "#"}}}
    assert schema_problem(tree) is None
    assert instance_problems(tree, {"child": {"child": {}}}) == []


def test_a_problem_quotes_at_most_a_clip_of_the_offending_value() -> None:
    schema = {"properties": {f"p{i}": {"type": "integer"} for i in range(10)}}
    problems = instance_problems(schema, {f"p{i}": "x" * 500_000 for i in range(10)})
    assert len(problems) == 10  # a 5 MB request used to get a 15 MB refusal
    assert all(len(p) <= len("/p0: ") + PROBLEM_LENGTH_MAX for p in problems)
    assert all(p.endswith("...") for p in problems)


def test_unique_items_is_linear_and_keeps_json_equality() -> None:
    items = [{"a": i, "b": [i, str(i)]} for i in range(20_000)]
    started = time.monotonic()
    assert instance_problems({"uniqueItems": True}, items) == []
    assert time.monotonic() - started < 2.0  # pairwise, 1,500 objects took 14 s
    assert instance_problems({"uniqueItems": True}, [1, 1.0]) != []
    assert instance_problems({"uniqueItems": True}, [{"a": [1]}, {"a": [1.0]}]) != []
    assert instance_problems({"uniqueItems": True}, [1, True]) == []
    assert instance_problems({"uniqueItems": True}, [0, False, None, "0", [0], {"0": 0}]) == []


@pytest.mark.parametrize(
    "text", ["18446744073709551616d", "99999999999999999999w", "5300w", "٣d", "1e308s", "-5"]
)
def test_prune_durations_out_of_range_or_not_ascii_are_refused(text: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_duration(text)


def test_prune_durations_up_to_a_century_are_read() -> None:
    assert parse_duration("30d") == 30 * 86_400
    assert parse_duration("5200w") == 5200 * 604_800


@pytest.mark.parametrize(
    "text", ["NaN", "Infinity", "-Infinity", "1e400", '{"a": NaN}', "[1e999]", "[" * 100_000]
)
def test_cli_json_refuses_what_json_cannot_hold(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not JSON|out of range|too deeply"):
        json_args.loads(text)
    assert json_args.loads('{"a": [1, 1.5, "NaN"]}') == {"a": [1, 1.5, "NaN"]}


@pytest.mark.parametrize(
    "retention",
    [
        {"older_than_s": -1},
        {"older_than_s": 1e308},
        {"older_than_s": 18446744073709551616},
        {"interval_s": 1e-300},
        {"interval_s": 0},
        {"interval_s": 1e308},
        {"batch_pause_s": 1e308},
        {"batch": 0},
        {"batch": 2**64},
    ],
)
def test_retention_values_out_of_range_are_refused_by_the_config_loader(
    retention: dict[str, Any],
) -> None:
    data = json.dumps({"server": {"store": {"retention": retention}}}).encode()
    with pytest.raises(InvalidArgument):
        parse_config(data, source="probe.json")


def test_retention_nan_is_refused_by_the_config_loader() -> None:
    with pytest.raises(InvalidArgument):
        parse_config(b'{"server": {"store": {"retention": {"older_than_s": NaN}}}}')


def test_a_backup_into_a_missing_folder_is_refused_without_naming_a_private_file(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    root.mkdir()
    (root / "scheduler.db").write_bytes(b"")
    with pytest.raises(InvalidArgument) as caught:
        sqlite_files.backup(root, tmp_path / "missing" / "copy.db")
    assert "is not a folder" in caught.value.message
    assert ".new" not in caught.value.message


@pytest.mark.parametrize("spec", ["../../etc/passwd:x", "a/b:x", "flows.py-x:y", "a..b:x"])
def test_deploy_refuses_a_path_in_place_of_a_module_name(spec: str) -> None:
    with pytest.raises(UsageError) as caught:
        load_flow(spec)
    assert "is not a module name" in str(caught.value)


def test_waiting_for_a_run_with_a_nan_timeout_is_refused_not_endless() -> None:
    async def running(run_id: str) -> dict[str, Any]:
        return {"run_id": run_id, "status": "running"}

    with pytest.raises(InvalidArgument):
        asyncio.run(wait_for_run(running, "run-1", float("nan")))


# ------------------------------------------------------------ real server


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Server, Store]]:
    root = tmp_path / "store"
    args = ["--enable-scheduler", "--workers", "1"]
    dsn = schema = None
    if request.param == "sqlite":
        args += ["--store-root", str(root)]
    else:
        dsn = request.getfixturevalue("pg_dsn")
        schema = request.getfixturevalue("pg_schema")
        args += ["--postgres", dsn, "--postgres-schema", schema]
    server = Server(tmp_path, args)
    server.start()
    store = Store(request.param, root, dsn, schema)
    try:
        yield server, store
    finally:
        store.close()
        server.kill()


def _rpc(port: int, method: str, params: dict[str, Any] | bytes) -> Any:
    head = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method})[:-1].encode()
    raw = params if isinstance(params, bytes) else json.dumps(params).encode()
    status, answer = _post(port, head + b',"params":' + raw + b"}")
    assert status == 200, answer
    return answer


def _refused(server: Server, store: Store, method: str, params: dict[str, Any] | bytes) -> str:
    """Send one hostile call; it must be a typed refusal that changed nothing stored.
    Returns the refusal's stable code."""
    before = store.fingerprint()
    answer = _rpc(server.port, method, params)
    what = f"{method} {str(params)[:200]}"
    assert "error" in answer, (what, answer)
    error = answer["error"]
    assert error["code"] != INTERNAL_ERROR, (what, error)
    assert store.fingerprint() == before, f"{what} was refused yet changed the store"
    assert server.alive(), f"{what} stopped the server: {server.log()[-2000:]}"
    code: str = error.get("data", {}).get("code", "")
    return code


def _plan(input_schema: dict[str, Any], *nodes: dict[str, Any]) -> dict[str, Any]:
    body = list(nodes) or [{"kind": "activity", "id": "a", "activity_type": "echo", "args": {}}]
    return {"input_schema": input_schema, "nodes": body}


_MAP = {"kind": "map", "id": "m", "activity_type": "echo", "items": {"$input": "xs"}}
_XS = {"type": "object", "required": ["xs"], "properties": {"xs": {"type": "array"}}}


def _nested(levels: int) -> dict[str, Any]:
    expr: dict[str, Any] = {"op": "eq", "args": [1, 1]}
    for _ in range(levels):
        expr = {"op": "not", "args": [expr]}
    return expr


HOSTILE_PLANS: list[tuple[str, dict[str, Any]]] = [
    (
        "catastrophic pattern",
        _plan(
            {
                "properties": {
                    "x": {"type": "string", "pattern": "^(a+)+$", "default": "a" * 40 + "!"}
                }
            }
        ),
    ),
    ("pattern properties", _plan({"patternProperties": {"^(a|a)*$": {}}})),
    (
        "interrupt pattern",
        _plan(
            {},
            {
                "kind": "interrupt",
                "id": "i",
                "prompt": "p",
                "input_schema": {"properties": {"y": {"pattern": "(a|a)*b"}}},
            },
        ),
    ),
    ("root $ref cycle", _plan({"$ref": "#", "properties": {"x": {"default": 1}}})),
    ("property $ref cycle", _plan({"properties": {"x": {"$ref": "#/properties/x", "default": 1}}})),
    (
        "mutual $ref cycle",
        _plan(
            {
                "properties": {"x": {"$ref": "#/$defs/a"}},
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
            }
        ),
    ),
    ("max_items 0", _plan(_XS, {**_MAP, "max_items": 0})),
    ("max_items negative", _plan(_XS, {**_MAP, "max_items": -1})),
    ("max_items 2^64", _plan(_XS, {**_MAP, "max_items": 2**64})),
    ("concurrency 0", _plan(_XS, {**_MAP, "concurrency": 0})),
    ("concurrency 2^63", _plan(_XS, {**_MAP, "concurrency": 2**63})),
    ("items a literal", _plan(_XS, {**_MAP, "items": {"$literal": [1, 2]}})),
    ("skip_when unknown", _plan(_XS, {**_MAP, "skip_when": "never"})),
    ("condition 17 deep", _plan({}, {"kind": "condition", "id": "c", "when": _nested(17)})),
    (
        "condition 300 ops",
        _plan(
            {},
            {
                "kind": "condition",
                "id": "c",
                "when": {"op": "or", "args": [{"op": "eq", "args": [1, 1]}] * 300},
            },
        ),
    ),
    ("$schema a number", _plan({"$schema": 5, "type": "object"})),
    ("$schema a list", _plan({"$schema": [], "type": "object"})),
    ("condition op a list", _plan({}, {"kind": "condition", "id": "c", "when": {"op": ["eq"]}})),
]


def test_hostile_requests_at_the_new_surfaces_are_refused_and_change_nothing(
    target: tuple[Server, Store],
) -> None:
    server, store = target
    _a_run_completes(server.port, 1)
    port = server.port

    # Run listings: a crafted cursor holding 2^64 reached the store (OverflowError).
    for raw in (str(2**64).encode(), b"99999999999999999999999999", "٣".encode()):
        for newest_first in (False, True):
            params = {"cursor": _runs_cursor(raw), "newest_first": newest_first}
            assert _refused(server, store, "workflow.runs.list", params) == "invalid_argument"
    for value in (b"NaN", b"1e400", b"18446744073709551616", b'"2026-01-01"', b"1e308"):
        for field in (b"created_after", b"created_before"):
            _refused(server, store, "workflow.runs.list", b'{"' + field + b'":' + value + b"}")
    empty = _call(port, "workflow.runs.list", {"created_after": 2e9, "created_before": 1e9})
    assert empty == {"runs": [], "next_cursor": None}  # a reversed range is empty, not an error
    for window in (b"0", b"-1", b"NaN", b"1e400", b"604801"):
        _refused(server, store, "workflow.runs.counts", b'{"window_s":' + window + b"}")
    assert _refused(server, store, "workflow.schedules.list", {"status": "bogus"}) == (
        "invalid_argument"
    )

    # Plans: each hostile plan is a typed refusal, and a catastrophic one comes at once.
    for version, (name, plan) in enumerate(HOSTILE_PLANS, start=100):
        started = time.monotonic()
        code = _refused(
            server,
            store,
            "workflow.artifacts.create",
            {"artifact_id": "hostile", "version": version, "plan": plan},
        )
        assert code == "invalid_argument", name
        assert time.monotonic() - started < REDOS_DEADLINE_S, name

    # uniqueItems over many objects is accepted and costs little.
    started = time.monotonic()
    default = [{"a": i} for i in range(6_000)]
    _call(
        port,
        "workflow.artifacts.create",
        {
            "artifact_id": "unique",
            "version": 1,
            "plan": _plan({"properties": {"x": {"uniqueItems": True, "default": default}}}),
        },
    )
    assert time.monotonic() - started < REDOS_DEADLINE_S

    _hostile_heartbeats_and_failures(server, store)

    # After all of it, work still flows, and the server drains and restarts.
    _a_run_completes(port, 2)
    assert server.stop() == 0, server.log()[-2000:]
    server.start()
    _a_run_completes(server.port, 3)
    assert server.stop() == 0
    check = [str(BIN / "wf"), "store", "check"]
    if store.kind == "sqlite":
        check += ["--store-root", str(store.root)]
    else:
        assert store.dsn is not None
        assert store.schema is not None
        check += ["--postgres", store.dsn, "--schema", store.schema]
    result = subprocess.run(check, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _hostile_heartbeats_and_failures(server: Server, store: Store) -> None:
    """Heartbeat details and failure stack traces from a worker of the test's own."""
    port = server.port
    _call(
        port,
        "scheduler.workers.register",
        {"info": {"worker_id": "w-probe", "activity_types": ["probe_t"], "max_concurrency": 1}},
    )
    _call(
        port,
        "scheduler.activities.submit",
        {"activities": [{"activity_id": "act-probe", "activity_type": "probe_t"}]},
    )
    deadline = time.monotonic() + 30
    leases: list[Any] = []
    while not leases:
        assert time.monotonic() < deadline, "no lease granted"
        polled = _call(port, "scheduler.workers.poll", {"worker_id": "w-probe", "wait_s": 1})
        leases = polled["leases"]
    token = leases[0]["lease"]["token"]
    fenced = {"activity_id": "act-probe", "token": token}
    _call(port, "scheduler.leases.start", fenced)
    for details in (
        b'"\xff\xfe"',  # invalid UTF-8
        b"[" * 100 + b"]" * 100,  # deeper than 64
        b'"a\x00b"',  # a raw NUL: not JSON
        b"NaN",
        b'"' + b"x" * (64 * 1024) + b'"',  # over 64 KiB
    ):
        assert _refused(
            server, store, "scheduler.leases.renew", {**fenced, "details": _b64(details)}
        )
    for trace in ("a\x00b", "x" * 16_385):
        params = {**fenced, "error_type": "E", "message": "m", "stack_trace": trace}
        assert _refused(server, store, "scheduler.leases.fail", params) == "invalid_argument"
    stale = {"activity_id": "act-probe", "token": token + 1}
    assert _refused(server, store, "scheduler.leases.details", stale) == "stale_lease"
    assert _refused(server, store, "scheduler.leases.renew", {**stale, "details": _b64(b"{}")})
    _call(port, "scheduler.leases.renew", {**fenced, "details": _b64(b'{"step": 3}')})
    _call(port, "scheduler.leases.complete", {**fenced, "result": _b64(b"{}")})
    _call(port, "scheduler.workers.shutdown", {"worker_id": "w-probe"})


def test_cli_text_shows_control_characters_instead_of_sending_them_to_the_terminal() -> None:
    hostile = "boom\x1b]0;owned\x07\x1b[2J\x9b31m\rspoof"
    assert text(hostile) == "boom\\x1b]0;owned\\x07\\x1b[2J\\x9b31m spoof"
    assert printable("line 1\n\tline 2\x1b[31m") == "line 1\n\tline 2\\x1b[31m"


def _http(port: int, method: str, path: str, headers: dict[str, str] | None = None) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for key, value in (headers or {}).items():
            conn.putheader(key, value)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_the_console_answers_only_its_own_files(tmp_path: Path) -> None:
    server = Server(tmp_path, ["--store-root", str(tmp_path / "store")])
    server.start()
    try:
        port = server.port
        status, headers, body = _http(port, "GET", "/ui/")
        assert status == 200
        assert body.startswith(b"<!doctype html>")
        etag = headers["ETag"]
        for path in (
            "/ui/../../etc/passwd",
            "/ui/%2e%2e/%2e%2e/etc/passwd",
            "/ui/..%2f..%2fetc%2fpasswd",
            "/ui/..\\..\\etc\\passwd",
            "/ui/index.html%00",
            "/ui/js/../../server/console.py",
            "/ui/%252e%252e/x",
            "/ui/INDEX.HTML",
            "/ui/js/",
            "/ui/" + "a" * 4000,
        ):
            status, _, body = _http(port, "GET", path)
            assert status == 404, (path, status)
            assert json.loads(body)["error"]["code"] != INTERNAL_ERROR
            assert b"root:" not in body
        status, headers, body = _http(port, "HEAD", "/ui/")
        assert (status, body) == (200, b"")
        for method in ("OPTIONS", "POST", "PUT", "DELETE"):
            status, headers, _ = _http(port, method, "/ui/index.html")
            assert status == 405, method
        status, _, body = _http(port, "GET", "/ui/", {"If-None-Match": etag})
        assert (status, body) == (304, b"")
        many = ", ".join(f'"{i:032x}"' for i in range(200))
        status, _, body = _http(port, "GET", "/ui/", {"If-None-Match": many})
        assert status == 200
        assert body.startswith(b"<!doctype html>")
        assert server.alive()
        assert server.stop() == 0
    finally:
        server.kill()


def _wf(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "wf"), *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def test_the_cli_refuses_hostile_arguments_with_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"x": "\xff"}')
    nan = tmp_path / "nan.json"
    nan.write_text('{"x": NaN}')
    # Inputs files are read before any server is contacted: none is needed.
    server = ["--server", "http://127.0.0.1:9"]
    result = _wf("runs", "start", "d.x", *server, "--inputs-file", str(bad))
    assert result.returncode == 2, result.stderr
    assert "not valid UTF-8" in result.stderr
    assert "Traceback" not in result.stderr
    deep = tmp_path / "deep.json"
    deep.write_text('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    result = _wf("runs", "start", "d.x", *server, "--inputs-file", str(deep))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    result = _wf("schedules", "create", "--file", str(deep), *server)
    assert result.returncode == 2, result.stderr
    assert "nested too deeply" in result.stderr
    result = _wf("runs", "start", "d.x", *server, "--inputs-file", str(nan))
    assert result.returncode == 2
    assert "NaN is not JSON" in result.stderr
    result = _wf("store", "prune", "--store-root", str(tmp_path), "--older-than", "2e30d")
    assert result.returncode == 2
    result = _wf(
        "store", "prune", "--store-root", str(tmp_path), "--older-than", "18446744073709551616d"
    )
    assert result.returncode == 2
    assert "at most" in result.stderr
    for since in ("0001-01-01T00:00:00+14:00", "99999999999999999999d", "٣h"):
        result = _wf("runs", "list", *server, "--since", since)
        assert result.returncode == 2, (since, result.stderr)
        assert "Traceback" not in result.stderr
        assert "OverflowError" not in result.stderr
    result = _wf("deploy", "../../etc/passwd:flow", "--name", "x", *server)
    assert result.returncode == 2
    assert "is not a module name" in result.stderr
