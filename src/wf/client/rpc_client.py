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
Python API raises.

Following the active node
-------------------------
A wf cluster is several servers on one PostgreSQL store, one of them active
(docs/ha.md). The client is given the list of their URLs (a list, or
comma-separated: :func:`split_urls`) and keeps using the last one that
answered. A call that is not answered there moves on:

* ``not_leader`` (:class:`~wf.errors.NotLeader`, a standby's answer): when
  its ``leader_url`` is one of the configured URLs (compared after
  normalising: scheme, host, port and path prefix), the call goes there
  next; otherwise (unknown, or ``None`` during a takeover) to the next
  configured URL. The bearer token is only ever sent to a URL the user
  configured, never to one a server named. In a batch, only the calls
  answered ``not_leader`` are sent again.
* a transport failure (no connection, a reset, no answer within the call's
  timeout, HTTP 502/503/504 from a proxy without a JSON-RPC body): the next
  configured URL (the same one when there is only one: behind a load
  balancer it may be another node by now).

Every configured URL is tried at least once per call, without waiting;
after that the call retries with a jittered backoff from
:data:`RETRY_DELAY_INITIAL_S` to :data:`RETRY_DELAY_MAX_S` until
``failover_timeout_s`` (:data:`FAILOVER_TIMEOUT_S`) has passed since its
first failure, and then raises the last typed error: ``NotLeader``, or
:class:`~wf.errors.RpcUnavailable` for transport failures (both
retryable). A client given ``refused_timeout_s`` (the command line's
one-call commands) gives up sooner on a call whose every attempt was refused
outright (``connection refused``): nothing listens there, so there is no
takeover to ride out. A TLS refusal is configuration, not a passing failure:
a URL that refused TLS is not tried again within the call. :attr:`RpcClient.failovers`
counts the moves, so a worker knows when it must register again; a move is also
another server instance answering at a URL with no call failing (a server
restarted between two calls): every wf response names its instance in the
``WF-Instance`` header (:data:`~wf.wire.methods.INSTANCE_HEADER`).

No call hangs across a failover: connecting gives up after
:data:`~wf.client.http1.CONNECT_TIMEOUT_S`, each attempt after its timeout
(:data:`REQUEST_TIMEOUT_S`; a long poll's own wait plus
:data:`LONG_POLL_MARGIN_S`; ``timeout_s`` of :meth:`~RpcClient.call` and
:meth:`~RpcClient.batch` overrides both), and the sockets carry TCP
keepalive and ``TCP_USER_TIMEOUT`` (:mod:`wf.client.http1`). A call
therefore returns within ``failover_timeout_s`` plus one attempt's timeout.

Why retrying is safe
--------------------
A transport failure after the request was sent leaves it unknown whether
the server applied it, so a retry may deliver a call twice. Per family:

* reads (``*.get``, ``*.list``, ``*.history``, ``*.stats``, ``rpc.discover``,
  ``cluster.status``) change nothing;
* ``scheduler.activities.submit`` is idempotent by content: a retried submit
  that already committed answers with the existing activity, not
  ``already_exists``; so is ``workflow.artifacts.create``. Schedule and
  deployment edits name their object: a repeat writes the same body again
  or, with an ``expected_revision`` or a create's id already taken, is
  refused (``conflict``, ``already_exists``), never applied twice over;
* ``workflow.runs.start`` and ``workflow.schedules.trigger`` carry a
  ``request_id`` (``App`` draws one per logical call and keeps it across
  retries): the server answers a repeated id with the run it started, never
  a second run;
* lease calls (``scheduler.leases.*``) are fenced by the lease's token: a
  repeated start, renewal, completion or failure is refused as stale or
  already done, never applied twice (the worker drops such a refusal);
* worker calls (register, heartbeat, shutdown) set state rather than add to
  it; a repeated poll may grant leases whose answer was lost, and the
  worker's next registration lists the leases it holds, so the server
  requeues the others at once (docs/ha.md);
* cancels and pauses are idempotent or refused the second time
  (``illegal_transition``, ``conflict``), never applied twice.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import ssl
from collections.abc import Callable, Sequence
from typing import Any, Final

import msgspec

from wf.client.http1 import (
    CONNECT_TIMEOUT_S,
    Http1Pool,
    HttpConnectError,
    HttpError,
    HttpTlsError,
    Origin,
)
from wf.errors import (
    ALL_ERRORS,
    Internal,
    InvalidArgument,
    NotLeader,
    Overloaded,
    OwnershipLost,
    RpcProtocolError,
    RpcUnavailable,
    WfError,
)

_BY_CODE: Final[dict[str, type[WfError]]] = {cls.code: cls for cls in ALL_ERRORS}

RPC_PATH: Final = "/rpc"
"""Where the server answers JSON-RPC, below the URL's own path."""
REQUEST_TIMEOUT_S: Final = 10.0
"""Default bound of one attempt of a call (the server answers ordinary calls in
milliseconds; a frozen one must not hold the caller for long)."""
LONG_POLL_MARGIN_S: Final = 5.0
"""Added to a long poll's ``wait_s`` for its attempt's timeout."""
LONG_POLL_METHODS: Final = frozenset({"scheduler.workers.poll"})
"""Methods whose ``wait_s`` parameter makes the server hold the answer."""
FAILOVER_TIMEOUT_S: Final = 15.0
"""Default failover budget: how long a call keeps retrying after its first failure
(covers a takeover, at most 5 s after a freeze, with room for a slow restart)."""
REFUSED_TIMEOUT_S: Final = 2.5
"""The command line's budget for a call every attempt of which was refused
outright (``connection refused``: nothing listens there, so no takeover is under
way to wait for): see :attr:`RpcClient.refused_timeout_s`."""
RETRY_DELAY_INITIAL_S: Final = 0.05
"""First delay before trying an already tried server again."""
RETRY_DELAY_MAX_S: Final = 1.0
"""Longest delay between two tries (so a call notices the new active within a second)."""
SUSPECT_S: Final = 10.0
"""How long a server that left a call unanswered is tried after every other one."""
RETRY_JITTER_FRACTION: Final = 0.5
"""Up to this fraction of each delay is taken off, so clients spread their retries."""
RETRYABLE_HTTP_STATUSES: Final = frozenset({502, 503, 504})
"""Proxy answers (no JSON-RPC body) that mean: this node is not reachable now."""


def split_urls(urls: str | Sequence[str]) -> list[str]:
    """The server URLs ``urls`` names: one URL, a list, each item possibly
    comma-separated (``"http://a:8765,http://b:8765"``); blanks are dropped."""
    items = [urls] if isinstance(urls, str) else list(urls)
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


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


def _wait_of(params: Any) -> float | None:
    """A long poll's ``wait_s``, from a params dict or Struct."""
    wait = params.get("wait_s") if isinstance(params, dict) else getattr(params, "wait_s", None)
    if isinstance(wait, int | float) and not isinstance(wait, bool):
        return float(wait)
    return None


def _reason(exc: BaseException) -> str:
    """A transport failure in words (``connection refused``), not a Python repr."""
    root: BaseException = exc
    while root.__cause__ is not None:
        root = root.__cause__
    if isinstance(root, TimeoutError):
        return "timed out"
    if isinstance(root, OSError) and (root.errno or root.strerror):
        # The errno's own words: asyncio's loop puts "Connect call failed (...)" in
        # strerror where uvloop puts "Connection refused".
        words = os.strerror(root.errno) if root.errno else str(root.strerror)
        return words[0].lower() + words[1:]
    return str(root) or type(root).__name__


def _refused(exc: BaseException) -> bool:
    """The connection was refused outright (nothing listens at that address)."""
    root: BaseException = exc
    while root.__cause__ is not None:
        root = root.__cause__
    return isinstance(root, ConnectionRefusedError) or (
        isinstance(root, OSError) and root.errno == errno.ECONNREFUSED
    )


class _Unanswered(Exception):
    """One attempt got no usable answer from a server (a transport failure);
    ``refused``: the connection was refused outright."""

    def __init__(
        self, cause: BaseException | str, *, tls: bool = False, refused: bool = False
    ) -> None:
        super().__init__(cause)
        self.cause = cause
        self.tls = tls
        self.refused = refused


class _Attempts:
    """The failover state of one call: which URLs it tried, and its budget."""

    def __init__(self, client: RpcClient) -> None:
        self.client = client
        self.tried: set[int] = set()
        self.refused_tls: set[int] = set()
        self.first_failure: float | None = None
        self.refused_only = True
        """Every attempt so far was refused outright (no answer, no timeout)."""
        self.retries = 0

    @property
    def budget_s(self) -> float:
        """The call's failover budget: the short one while it was only ever refused."""
        client = self.client
        if self.refused_only and client.refused_timeout_s is not None:
            return min(client.failover_timeout_s, client.refused_timeout_s)
        return client.failover_timeout_s

    @property
    def deadline(self) -> float | None:
        """When the budget is spent (``None`` before the first failure)."""
        if self.first_failure is None:
            return None
        return self.first_failure + self.budget_s

    def next_target(self, preferred: int) -> int | None:
        """Where to go next, starting from ``preferred``; ``None``: give up.

        A server that left a call unanswered lately (frozen, cut off, gone) comes
        last: a frozen node holds every call to it for a whole attempt timeout, so
        going back to it while another node may answer costs that much again."""
        n = len(self.client.urls)
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self.first_failure is None:
            self.first_failure = now
        deadline = self.deadline
        assert deadline is not None
        order = [(preferred + step) % n for step in range(n)]
        order.sort(key=lambda target: self.client._suspect_until[target] > now)
        for target in order:
            if target not in self.tried:
                return target
        within_budget = now < deadline
        for target in order:
            if within_budget and target not in self.refused_tls:
                return target
        return None

    async def pause_before(self, target: int) -> bool:
        """Wait before trying ``target`` (at once if it was not tried yet); False if
        the budget would be spent by the wait."""
        if target not in self.tried:
            return True
        deadline = self.deadline
        assert deadline is not None
        delay = self.client._retry_delay_s(self.retries)
        self.retries += 1
        loop = asyncio.get_running_loop()
        if loop.time() + delay > deadline:
            return False
        await asyncio.sleep(delay)
        return True


class RpcClient:
    """See the module docstring.

    ``failover_timeout_s`` is the failover budget of each call (0: each
    configured URL is tried once, nothing is retried); ``refused_timeout_s``, if
    given, a shorter budget for a call whose every attempt was refused outright
    (``connection refused``: nothing listens, no takeover to ride out; the command
    line's one-call commands use :data:`REFUSED_TIMEOUT_S`, workers and ``App``
    keep the full budget); ``request_timeout_s``
    the default bound of one attempt; ``jitter_seed`` decorrelates the retries
    of many clients (default: the process id and this object).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        failover_timeout_s: float = FAILOVER_TIMEOUT_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        jitter_seed: str | None = None,
        refused_timeout_s: float | None = None,
    ) -> None:
        self.urls = split_urls(urls)
        if not self.urls:
            raise InvalidArgument("at least one server URL is needed", field="urls")
        try:
            self._origins = [Origin.parse(url) for url in self.urls]
        except ValueError as exc:
            raise InvalidArgument(str(exc), field="urls") from exc
        if not 0 <= failover_timeout_s <= 3600:
            raise InvalidArgument(
                "failover_timeout_s must be in [0, 3600]", field="failover_timeout_s"
            )
        if not 0 < request_timeout_s <= 3600 or not 0 < connect_timeout_s <= 3600:
            raise InvalidArgument("timeouts must be in (0, 3600]", field="request_timeout_s")
        if refused_timeout_s is not None and not 0 <= refused_timeout_s <= 3600:
            raise InvalidArgument(
                "refused_timeout_s must be in [0, 3600]", field="refused_timeout_s"
            )
        self.failover_timeout_s = failover_timeout_s
        self.refused_timeout_s = refused_timeout_s
        """The budget of a call only ever refused outright (``None``: the full one)."""
        self.request_timeout_s = request_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._current = 0
        self._suspect_until = [0.0] * len(self.urls)
        """Per URL: until when it is tried last (it left a call unanswered lately)."""
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
        self._jitter_seed = jitter_seed or f"{os.getpid()}:{id(self)}"
        self._draws = 0
        self.on_unanswered: Callable[[str], None] | None = None
        """Told, in words, each time an attempt of a call got no answer (the call then
        moves on or gives up): lets an interactive caller say what it is waiting for."""
        self.failovers = 0
        """How many times a call moved on from a server (followed ``not_leader`` or
        gave up on it after a transport failure), or found another server instance
        answering at a URL (its ``WF-Instance`` header changed: a restart, or another
        node behind one address). A worker registers again when it changes: it may be
        talking to another node, or a restarted one, now."""
        self._instances: list[bytes | None] = [None] * len(self.urls)
        """Per URL: the ``WF-Instance`` of the server that last answered there."""

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

    async def call(self, method: str, params: Any = None, *, timeout_s: float | None = None) -> Any:
        """One call; returns its result or raises its typed error.

        ``timeout_s`` bounds each attempt (default: :data:`REQUEST_TIMEOUT_S`, or a
        long poll's wait plus :data:`LONG_POLL_MARGIN_S`)."""
        result, _ = await self.call_answered_by(method, params, timeout_s=timeout_s)
        return result

    async def call_answered_by(
        self, method: str, params: Any = None, *, timeout_s: float | None = None
    ) -> tuple[Any, str]:
        """:meth:`call`, and the configured URL of the server that answered it (which
        :attr:`url` may no longer name once concurrent calls moved on)."""
        (result,), url = await self._batch([(method, params)], timeout_s)
        if isinstance(result, WfError):
            raise result
        return result, url

    async def batch(
        self, calls: Sequence[tuple[str, Any]], *, timeout_s: float | None = None
    ) -> list[Any]:
        """Several calls in one HTTP request; each slot is a result or a WfError.

        Calls answered ``not_leader`` are sent again at the active (see the module
        docstring); a transport failure the failover budget does not cover raises
        :class:`~wf.errors.RpcUnavailable` (or, once some calls were answered, fills
        the slots of the others with it)."""
        results, _ = await self._batch(calls, timeout_s)
        return results

    async def _batch(
        self, calls: Sequence[tuple[str, Any]], timeout_s: float | None
    ) -> tuple[list[Any], str]:
        timeout = timeout_s if timeout_s is not None else self._timeout_for(calls)
        # Ids are drawn once: a call sent again carries the id it had.
        requests: list[dict[str, Any]] = []
        for method, params in calls:
            self._next_id += 1
            requests.append(
                {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params or {}}
            )
        results: list[Any] = [None] * len(calls)
        pending = list(range(len(calls)))
        attempts = _Attempts(self)
        target = answered_by = self._current
        while True:
            try:
                answers = await self._attempt(target, [requests[i] for i in pending], timeout)
            except _Unanswered as exc:
                if self.on_unanswered is not None:
                    self.on_unanswered(
                        exc.cause if isinstance(exc.cause, str) else _reason(exc.cause)
                    )
                attempts.tried.add(target)
                attempts.refused_only = attempts.refused_only and exc.refused
                self._suspect_until[target] = asyncio.get_running_loop().time() + SUSPECT_S
                if exc.tls:
                    attempts.refused_tls.add(target)
                try:
                    target = await self._move_on(attempts, (target + 1) % len(self.urls), exc)
                except RpcUnavailable as unavailable:
                    if len(pending) == len(calls):
                        raise
                    # Some calls were answered before: their answers stand.
                    for i in pending:
                        results[i] = unavailable
                    return results, self.urls[answered_by]
                continue
            attempts.tried.add(target)
            attempts.refused_only = False  # a server answered: a takeover may be under way
            self._suspect_until[target] = 0.0
            self._current = answered_by = target
            # ``ownership_lost``: that node was just deposed and stored nothing; the
            # call belongs at the active, as after ``not_leader``.
            refused = [
                i
                for i, a in zip(pending, answers, strict=True)
                if isinstance(a, NotLeader | OwnershipLost)
            ]
            for i, answer in zip(pending, answers, strict=True):
                results[i] = answer
            if not refused:
                return results, self.urls[answered_by]
            refusal: NotLeader | OwnershipLost = results[refused[0]]
            preferred = self._leader_index(refusal)
            if preferred is None or preferred == target:
                preferred = (target + 1) % len(self.urls)
            try:
                target = await self._move_on(attempts, preferred, refusal)
            except (NotLeader, OwnershipLost):
                # The budget is spent: those slots keep their refusal.
                return results, self.urls[answered_by]
            pending = refused

    def _timeout_for(self, calls: Sequence[tuple[str, Any]]) -> float:
        timeout = self.request_timeout_s
        for method, params in calls:
            if method in LONG_POLL_METHODS:
                wait = _wait_of(params)
                if wait is not None:
                    timeout = max(timeout, wait + LONG_POLL_MARGIN_S)
        return timeout

    def _leader_index(self, refusal: NotLeader | OwnershipLost) -> int | None:
        """The configured URL the refusal names as the active, if it names one."""
        leader = refusal.details.get("leader_url")
        if not isinstance(leader, str):
            return None
        try:
            origin = Origin.parse(leader)
        except ValueError:
            return None
        for index, known in enumerate(self._origins):
            if known == origin:
                return index
        return None

    async def _move_on(
        self, attempts: _Attempts, preferred: int, failure: _Unanswered | NotLeader | OwnershipLost
    ) -> int:
        """The next server to try (after a pause when it was tried already); raises
        the call's error when the budget is spent."""
        target = attempts.next_target(preferred)
        if target is not None and await attempts.pause_before(target):
            self.failovers += 1
            self._current = target
            return target
        if isinstance(failure, NotLeader | OwnershipLost):
            raise failure
        cause = failure.cause
        shown = cause if isinstance(cause, str) else _reason(cause)
        raise RpcUnavailable(
            f"{shown} (no server answered within the {attempts.budget_s:g} s failover budget)",
            urls=self.urls,
        )

    def _retry_delay_s(self, retry: int) -> float:
        base = min(RETRY_DELAY_MAX_S, RETRY_DELAY_INITIAL_S * 2.0 ** min(retry, 32))
        self._draws += 1
        digest = hashlib.blake2b(
            f"{self._jitter_seed}:{self._draws}".encode(), digest_size=8
        ).digest()
        unit = int.from_bytes(digest, "big") / 2.0**64
        return base * (1.0 - RETRY_JITTER_FRACTION * unit)

    async def _attempt(
        self, target: int, requests: list[dict[str, Any]], timeout_s: float
    ) -> list[Any]:
        """One HTTP request to ``target``: a slot per request, or :class:`_Unanswered`."""
        answers = await self._post(target, self._encoder.encode(requests), timeout_s)
        if isinstance(answers, dict) and "error" in answers:
            error = error_from_wire(answers["error"])
            if isinstance(error, NotLeader):
                return [error] * len(requests)
            raise error
        if not isinstance(answers, list):
            raise RpcUnavailable("the server answered a batch with a non-list")
        by_id = {a.get("id"): a for a in answers if isinstance(a, dict)}
        results: list[Any] = []
        for request in requests:
            answer = by_id.get(request["id"])
            if answer is None:
                results.append(Internal("no answer for a call in the batch"))
            elif "error" in answer:
                results.append(error_from_wire(answer["error"]))
            else:
                results.append(answer.get("result"))
        return results

    async def _post(self, target: int, body: bytes, timeout_s: float) -> Any:
        if self._pool is None:
            self._pool = Http1Pool(self._ssl, connect_timeout_s=self._connect_timeout_s)
        try:
            async with asyncio.timeout(timeout_s):
                response = await self._pool.post(self._origins[target], self._heads[target], body)
        except HttpTlsError as exc:
            raise _Unanswered(exc, tls=True) from exc
        except TimeoutError as exc:  # before OSError, of which it is a subclass
            raise _Unanswered(f"no answer from {self.urls[target]} within {timeout_s} s") from exc
        except HttpConnectError as exc:
            # Say what most likely went wrong, not a repr: nothing listens there.
            raise _Unanswered(
                f"cannot connect to {self.urls[target]} ({_reason(exc)}):"
                " is wf-rpc-server running?",
                refused=_refused(exc),
            ) from exc
        except (HttpError, OSError) as exc:
            raise _Unanswered(exc) from exc
        instance = response.instance
        if instance is not None and instance != self._instances[target]:
            if self._instances[target] is not None:
                # The same address, another server process: a move all the same,
                # even though no call failed (a quick restart between two calls).
                self.failovers += 1
            self._instances[target] = instance
        if response.status == 204:
            return []
        if response.status in (200, 401):
            try:
                return msgspec.json.decode(response.body)
            except msgspec.DecodeError as exc:
                raise _Unanswered(exc) from exc
        refusal = _refusal(response.body)
        if refusal is not None:
            # The server's edge refused the request itself (too large, too many
            # connections, timed out): its typed error, not a transport failure.
            return refusal
        if response.status in RETRYABLE_HTTP_STATUSES:
            raise _Unanswered(f"HTTP {response.status} from {self.urls[target]}")
        raise RpcUnavailable(f"HTTP {response.status} from {self.urls[target]}")
