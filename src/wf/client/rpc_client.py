"""A JSON-RPC 2.0 client over HTTP/1.1, shared by the worker SDK and ``App``.

Theory of operation
-------------------
One :class:`RpcClient` holds one :class:`~wf.client.http1.Http1Pool`
(keep-alive connections; see that module for why not aiohttp's client),
the server URL(s), the bearer token and the TLS context. :meth:`call` sends
one request; :meth:`batch` sends many in one HTTP request (one round trip,
and on the server one group commit). A JSON-RPC error whose ``data.code`` is
a known wf error code is raised as that :class:`~wf.errors.WfError`
subclass, so callers of the client see exactly the errors the server's
Python API raises; transport failures raise :class:`~wf.errors.RpcUnavailable` (which
is retryable: the caller decides whether to back off and retry).

With several server URLs the client moves to the next one when a server is
unreachable (failover between nodes).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from wf.client.http1 import Http1Pool, HttpError, Origin
from wf.errors import (
    ALL_ERRORS,
    Internal,
    InvalidArgument,
    Overloaded,
    RpcProtocolError,
    RpcUnavailable,
    WfError,
)

_BY_CODE: Final[dict[str, type[WfError]]] = {cls.code: cls for cls in ALL_ERRORS}

RPC_PATH: Final = "/rpc"
"""Where the server answers JSON-RPC, below the URL's own path."""
REQUEST_TIMEOUT_S: Final = 90.0
"""Upper bound of one HTTP request (long polls wait up to 60 s)."""


def error_from_wire(error: dict[str, Any]) -> WfError:
    """The typed error a JSON-RPC error object stands for."""
    data = error.get("data")
    message = str(error.get("message", "error"))
    if isinstance(data, dict) and isinstance(data.get("code"), str):
        cls = _BY_CODE.get(data["code"])
        if cls is not None:
            raw = data.get("details")
            details: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
            if cls is Overloaded:
                retry_after = float(details.pop("retry_after_s", 1.0))
                return Overloaded(message, retry_after_s=retry_after, **details)
            return cls(message, **details)
    if error.get("code") == -32602:
        return InvalidArgument(message)
    return RpcProtocolError(message, jsonrpc_code=error.get("code"))


def _refusal(body: bytes) -> dict[str, Any] | None:
    """A JSON-RPC error object an HTTP error response carries, if it carries one."""
    try:
        answer = msgspec.json.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        return answer
    return None


class RpcClient:
    """See the module docstring."""

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise InvalidArgument("at least one server URL is needed")
        try:
            self._origins = [Origin.parse(url) for url in self.urls]
        except ValueError as exc:
            raise InvalidArgument(str(exc), field="urls") from exc
        self._current = 0
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        try:
            self._heads = [origin.request_head(RPC_PATH, headers) for origin in self._origins]
        except ValueError as exc:
            raise InvalidArgument("the token must not contain line breaks", field="token") from exc
        self._ssl = ssl_context
        self._pool: Http1Pool | None = None
        self._next_id = 0
        self._encoder = msgspec.json.Encoder()

    @property
    def url(self) -> str:
        """The server currently in use."""
        return self.urls[self._current]

    async def close(self) -> None:
        """Close the connections (a later call opens new ones)."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def __aenter__(self) -> RpcClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def call(self, method: str, params: Any = None) -> Any:
        """One call; returns its result or raises its typed error."""
        (result,) = await self.batch([(method, params)])
        if isinstance(result, WfError):
            raise result
        return result

    async def batch(self, calls: Sequence[tuple[str, Any]]) -> list[Any]:
        """Several calls in one HTTP request; each slot is a result or a WfError."""
        first_id = self._next_id + 1
        requests: list[dict[str, Any]] = []
        for method, params in calls:
            self._next_id += 1
            requests.append(
                {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params or {}}
            )
        body = self._encoder.encode(requests)
        answers = await self._post(body)
        if isinstance(answers, dict) and "error" in answers:
            raise error_from_wire(answers["error"])
        if not isinstance(answers, list):
            raise RpcUnavailable("the server answered a batch with a non-list")
        by_id = {a.get("id"): a for a in answers if isinstance(a, dict)}
        results: list[Any] = []
        for offset in range(len(requests)):
            answer = by_id.get(first_id + offset)
            if answer is None:
                results.append(Internal("no answer for a call in the batch"))
            elif "error" in answer:
                results.append(error_from_wire(answer["error"]))
            else:
                results.append(answer.get("result"))
        return results

    async def _post(self, body: bytes) -> Any:
        last: Exception | None = None
        for _ in range(len(self.urls)):
            current = self._current
            try:
                if self._pool is None:
                    self._pool = Http1Pool(self._ssl)
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    response = await self._pool.post(
                        self._origins[current], self._heads[current], body
                    )
                if response.status == 204:
                    return []
                if response.status in (200, 401):
                    return msgspec.json.decode(response.body)
                refusal = _refusal(response.body)
                if refusal is not None:
                    # The server's edge refused the request itself (too large, too many
                    # connections, timed out): its typed error, not a transport failure.
                    return refusal
                raise RpcUnavailable(f"HTTP {response.status} from {self.url}")
            except (HttpError, OSError, TimeoutError, msgspec.DecodeError) as exc:
                last = exc
                self._current = (current + 1) % len(self.urls)
        raise RpcUnavailable(f"no server reachable ({last!r})", urls=self.urls)
