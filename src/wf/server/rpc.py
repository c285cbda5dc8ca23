"""JSON-RPC 2.0, transport-free: a method registry, decoding, dispatch, errors.

Theory of operation
-------------------
Every method is declared once, in the wire contract
(:mod:`wf.wire.contract`): its name, a msgspec ``Struct`` describing its
parameters, its result and the access it requires. The :class:`Registry`
holds the declarations the server must serve and attaches one async handler
taking ``(params, caller)`` to each; it refuses a handler for a method that
is not declared, and :meth:`Registry.check` (called when the server is
built) refuses a declared method without a handler, so the contract and the
server cannot drift. The declaration drives three things: parameter
validation (``msgspec.convert`` with strict types: a wrong type or a missing
field is ``-32602 Invalid params`` naming the path), the method listing
``rpc.discover`` (each method's JSON Schema generated from its Struct), and
authorization (the caller's role and scopes are checked before the handler
runs).

Batches are processed concurrently (``asyncio.gather``), which is how many
lease completions in one HTTP request share one store commit. Notifications
(requests without ``id``) run and produce no response; a batch of only
notifications yields no body at all, as the specification requires.

Application errors are :class:`~wf.errors.WfError` subclasses; each maps one
to one to its ``rpc_code`` with ``error.data`` carrying its stable ``code``,
classification and details. Anything else is an internal error whose details
are logged, never sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar

import msgspec

from wf.errors import Forbidden, InvalidArgument, WfError
from wf.wire.bounds import invalid_params
from wf.wire.methods import Access as Access
from wf.wire.methods import MethodSpec

log = logging.getLogger("wf.rpc")

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603

BATCH_MAX: Final = 1_000
"""Most calls one batch may carry."""

P = TypeVar("P", bound=msgspec.Struct)


@dataclass(frozen=True, slots=True, kw_only=True)
class Caller:
    """Who is calling, as authentication established it."""

    identity: str
    """Credential or certificate name, for logs."""
    role: Literal["admin", "operator", "read-only", "worker"]
    """Admin roles, or ``worker`` for worker credentials."""
    tenants: frozenset[str] | None = None
    """Tenants it may act for (``None``: all)."""
    activity_types: frozenset[str] | None = None
    """Activity types a worker credential may run (``None``: all)."""
    capabilities: frozenset[str] | None = None
    """Capabilities a worker credential may advertise (``None``: any)."""


ANONYMOUS_ADMIN: Final = Caller(identity="anonymous", role="admin")
"""The caller when authentication is disabled (local development only)."""

_ROLE_RANK: Final = {"read-only": 1, "operator": 2, "admin": 3}
_NEEDED_RANK: Final = {"read": 1, "operate": 2, "admin": 3}


def authorize(caller: Caller, access: Access, method: str) -> None:
    """Raise :class:`Forbidden` unless ``caller`` may use a method needing ``access``."""
    if access == "worker":
        if caller.role in ("worker", "admin"):
            return
    elif caller.role != "worker" and _ROLE_RANK[caller.role] >= _NEEDED_RANK[access]:
        return
    raise Forbidden(
        f"{caller.identity!r} ({caller.role}) may not call {method}",
        method=method,
        role=caller.role,
        needs=access,
    )


class ContractMismatch(Exception):
    """The server's handlers and the wire contract disagree: a bug, found at start."""


@dataclass(frozen=True, slots=True)
class Method(Generic[P]):
    """One method the server serves: its declaration's fields and its handler.

    The fields are copied from the declaration so that a call reads them directly."""

    name: str
    """The JSON-RPC method name."""
    params: type[P]
    """The parameter Struct calls are decoded into."""
    handler: Callable[[P, Caller], Awaitable[Any]]
    """Runs a call whose parameters decoded and whose caller is authorized."""
    access: Access
    """What the caller needs."""
    summary: str
    """One line on what it does."""
    spec: MethodSpec[P]
    """The declaration it serves."""


class Registry:
    """All methods of a server: the declarations it serves and their handlers."""

    def __init__(self, contract: Iterable[MethodSpec[Any]] = ()) -> None:
        self.declared: dict[str, MethodSpec[Any]] = {}
        """Every method the server must serve, by name."""
        self.methods: dict[str, Method[Any]] = {}
        """The methods with their handlers, by name."""
        self._openrpc: dict[str, Any] | None = None
        for spec in contract:
            self.declare(spec)

    def declare(self, spec: MethodSpec[Any]) -> None:
        """Add a method the server must serve (beyond the contract it was built with:
        tests and extensions); names are unique."""
        if spec.name in self.declared:
            raise ContractMismatch(f"method {spec.name} is declared twice")
        self.declared[spec.name] = spec

    def handle(self, spec: MethodSpec[P], handler: Callable[[P, Caller], Awaitable[Any]]) -> None:
        """Attach the handler of a declared method (once)."""
        if self.declared.get(spec.name) is not spec:
            raise ContractMismatch(f"a handler for {spec.name}, which is not declared")
        if spec.name in self.methods:
            raise ContractMismatch(f"method {spec.name} has two handlers")
        self.methods[spec.name] = Method(
            spec.name, spec.params, handler, spec.access, spec.summary, spec
        )

    def check(self) -> None:
        """Raise :class:`ContractMismatch` unless every declared method has a handler."""
        missing = sorted(set(self.declared) - set(self.methods))
        if missing:
            raise ContractMismatch(f"declared methods without a handler: {', '.join(missing)}")

    def openrpc(self) -> dict[str, Any]:
        """The ``rpc.discover`` answer: the served methods as an OpenRPC document
        (:mod:`wf.server.openrpc`), built once (the registry is fixed once serving)."""
        if self._openrpc is None:
            from wf.server.openrpc import openrpc_document

            self._openrpc = openrpc_document(m.spec for m in self.methods.values())
        return self._openrpc

    def describe(self) -> list[dict[str, Any]]:
        """The method listing: name, summary, access and parameter JSON Schema."""
        return [
            {
                "name": m.name,
                "summary": m.summary,
                "access": m.access,
                "params": msgspec.json.schema(m.params),
            }
            for m in sorted(self.methods.values(), key=lambda m: m.name)
        ]


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def _error(code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return error


def _response(request_id: Any, *, result: Any = None, error: dict[str, Any] | None = None) -> Any:
    if error is not None:
        return {"jsonrpc": "2.0", "id": request_id, "error": error}
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


CallObserver = Callable[[str, float, str | None, Caller], None]
"""Told of every call: method (``unknown`` if unregistered), duration in seconds,
error code (the wf error's stable code or the JSON-RPC error's name) or ``None``, caller."""

_PROTOCOL_CODES: Final = {
    METHOD_NOT_FOUND: "method_not_found",
    INVALID_PARAMS: "invalid_params",
    INTERNAL_ERROR: "internal",
}


def _error_code(error: dict[str, Any]) -> str:
    data = error.get("data")
    if isinstance(data, dict) and isinstance(data.get("code"), str):
        return str(data["code"])
    return _PROTOCOL_CODES.get(error["code"], str(error["code"]))


class Dispatcher:
    """Decodes a request body, runs the calls, encodes the response body."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.call_observers: list[CallObserver] = []
        """Called after every call (metrics and logs); they must not raise or block."""
        self.gate: Callable[[str], None] | None = None
        """Called with the method's name before each authorized call; raises a
        :class:`~wf.errors.WfError` to refuse it (a standby's ``not_leader``)."""

    async def handle(self, body: bytes, caller: Caller) -> bytes | None:
        """The HTTP body of the response, or ``None`` when there is none to send."""
        try:
            payload = _decoder.decode(body)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
            return _encoder.encode(
                _response(None, error=_error(PARSE_ERROR, f"Parse error: {_parse_problem(exc)}"))
            )
        if isinstance(payload, list):
            if not payload:
                return _encoder.encode(
                    _response(None, error=_error(INVALID_REQUEST, "Invalid Request: empty batch"))
                )
            if len(payload) > BATCH_MAX:
                return _encoder.encode(
                    _response(
                        None,
                        error=_error(INVALID_REQUEST, f"Invalid Request: batch over {BATCH_MAX}"),
                    )
                )
            if len(payload) == 1:
                # Most batches hold one call (the SDK's clients batch what is ready at
                # once): awaited directly, its answer goes out without the two extra
                # loop turns a gather's task and callback cost.
                results = [await self._one(payload[0], caller)]
            else:
                results = await asyncio.gather(*(self._one(item, caller) for item in payload))
            answers = [r for r in results if r is not None]
            return _encoder.encode(answers) if answers else None
        answer = await self._one(payload, caller)
        return None if answer is None else _encoder.encode(answer)

    async def _one(self, request: Any, caller: Caller) -> Any:
        if (
            not isinstance(request, dict)
            or request.get("jsonrpc") != "2.0"
            or not isinstance(request.get("method"), str)
            or ("id" in request and not isinstance(request["id"], str | int | None))
            or isinstance(request.get("id"), bool)
        ):
            return _response(None, error=_error(INVALID_REQUEST, "Invalid Request"))
        is_notification = "id" not in request
        request_id = request.get("id")
        name: str = request["method"]
        started = time.perf_counter()
        result_or_error = await self._call(name, request.get("params", {}), caller)
        if self.call_observers:
            self._observe(name, time.perf_counter() - started, result_or_error, caller)
        if is_notification:
            return None
        if isinstance(result_or_error, _Failure):
            return _response(request_id, error=result_or_error.error)
        return _response(request_id, result=result_or_error)

    def _observe(self, name: str, duration_s: float, result: Any, caller: Caller) -> None:
        method = name if name in self.registry.methods else "unknown"
        error = _error_code(result.error) if isinstance(result, _Failure) else None
        for observer in self.call_observers:
            observer(method, duration_s, error, caller)

    async def _call(self, name: str, raw_params: Any, caller: Caller) -> Any:
        method = self.registry.methods.get(name)
        if method is None:
            return _Failure(_error(METHOD_NOT_FOUND, f"Method not found: {name}"))
        if isinstance(raw_params, list):
            return _Failure(
                _error(INVALID_PARAMS, "Invalid params: pass parameters by name (an object)")
            )
        if not isinstance(raw_params, dict):
            return _Failure(_error(INVALID_PARAMS, "Invalid params: expected an object"))
        try:
            authorize(caller, method.access, name)
            if self.gate is not None:
                self.gate(name)
            params = msgspec.convert(raw_params, method.params, strict=True)
        except msgspec.ValidationError as exc:
            return _Failure(_invalid_params(str(exc)))
        except RecursionError:
            return _Failure(_invalid_params("nested too deeply"))
        except WfError as exc:
            return _Failure(_error(exc.rpc_code, exc.message, exc.to_dict()))
        try:
            return await method.handler(params, caller)
        except WfError as exc:
            return _Failure(_error(exc.rpc_code, exc.message, exc.to_dict()))
        except Exception:
            log.exception("internal error in %s", name, extra={"action": "rpc.internal_error"})
            return _Failure(_error(INTERNAL_ERROR, "Internal error"))


def _parse_problem(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "the body is not valid UTF-8"
    if isinstance(exc, RecursionError):
        return "the body is nested too deeply"
    return str(exc)


def _invalid_params(problem: str) -> dict[str, Any]:
    """A ``-32602`` error that also carries the ``invalid_argument`` classification and
    the offending field's path, so a bound violation reads like any other bad input."""
    error = invalid_params(problem)
    return _error(INVALID_PARAMS, error.message, error.to_dict())


@dataclass(frozen=True, slots=True)
class _Failure:
    error: dict[str, Any]


def invalid(message: str, **details: Any) -> InvalidArgument:
    """Shorthand for handlers: an InvalidArgument to raise."""
    return InvalidArgument(message, **details)
