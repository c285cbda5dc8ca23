"""WF-005 §24 over the wire: every refusal, against a real TLS server.

Each test starts an in-process :class:`~wf.server.app.WfServer` (port 0,
temporary SQLite store) serving HTTPS with certificates made at test time by
``trustme``, and talks to it with :class:`~wf.client.rpc_client.RpcClient`
(or raw sockets, for the TLS handshake itself). Each refusal is paired with
the call that *does* succeed, so a test cannot pass because nothing works.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from wf.client.rpc_client import RpcClient
from wf.client.tls import client_ssl_context
from wf.errors import Forbidden, NotFound, RpcUnavailable, Unauthorized
from wf.server.app import WfServer
from wf.server.auth import CredentialConfig, hash_token
from wf.server.config import (
    SecurityConfig,
    ServerConfig,
    ServerSection,
    StoreConfig,
    TlsConfig,
)
from wf.server.rpc import Caller
from wf.server.scheduler_api import OWNER_LABEL
from wf.wire.methods import MethodSpec, NoParams

TOKENS = {
    "admin": "tok-admin-7f3c9a",
    "admin-t1": "tok-admin-t1-0d2e",
    "operator": "tok-operator-51aa",
    "ops-t1": "tok-ops-t1-c0ffee",
    "reader": "tok-reader-9b9b",
    "worker-a": "tok-worker-a-1234",
    "worker-b": "tok-worker-b-5678",
}
WRONG_TOKEN = "tok-admin-7f3c9b"
"""One character off the admin token."""

CREDENTIALS = [
    CredentialConfig(name="admin", role="admin", token_sha256=hash_token(TOKENS["admin"])),
    CredentialConfig(
        name="admin-t1",
        role="admin",
        token_sha256=hash_token(TOKENS["admin-t1"]),
        tenants=frozenset({"t1"}),
    ),
    CredentialConfig(name="operator", role="operator", token_sha256=hash_token(TOKENS["operator"])),
    CredentialConfig(
        name="ops-t1",
        role="operator",
        token_sha256=hash_token(TOKENS["ops-t1"]),
        tenants=frozenset({"t1"}),
    ),
    CredentialConfig(name="reader", role="read-only", token_sha256=hash_token(TOKENS["reader"])),
    CredentialConfig(
        name="worker-a",
        role="worker",
        token_sha256=hash_token(TOKENS["worker-a"]),
        certificate_cn="worker-a",
        tenants=frozenset({"t1"}),
        activity_types=frozenset({"X"}),
        capabilities=frozenset({"cpu"}),
    ),
    CredentialConfig(name="worker-b", role="worker", token_sha256=hash_token(TOKENS["worker-b"])),
    CredentialConfig(name="ops-cert", role="operator", certificate_cn="ops-cert"),
]


@dataclass(frozen=True)
class Pki:
    """PEM files made at test time."""

    ca: Path
    server_cert: Path
    server_key: Path
    clients: dict[str, tuple[Path, Path]]
    """Client certificate and key by name."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    ca, foreign_ca = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(root / "ca.pem")
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(root / "server.pem")
    server.private_key_pem.write_to_path(root / "server.key")
    clients: dict[str, tuple[Path, Path]] = {}
    for name, issuer, cn in (
        ("worker-a", ca, "worker-a"),
        ("ops-cert", ca, "ops-cert"),
        ("unmapped", ca, "nobody"),
        # Same CN as a real credential, signed by a CA the server does not trust.
        ("foreign", foreign_ca, "worker-a"),
    ):
        leaf = issuer.issue_cert(f"{name}.clients.test", common_name=cn)
        cert, key = root / f"{name}.pem", root / f"{name}.key"
        leaf.cert_chain_pems[0].write_to_path(cert)
        leaf.private_key_pem.write_to_path(key)
        clients[name] = (cert, key)
    return Pki(root / "ca.pem", root / "server.pem", root / "server.key", clients)


def _config(root: Path, pki: Pki, *, require_client_certificate: bool) -> ServerConfig:
    tls = TlsConfig(
        certificate=str(pki.server_cert),
        private_key=str(pki.server_key),
        client_ca=str(pki.ca),
        require_client_certificate=require_client_certificate,
    )
    return ServerConfig(
        server=ServerSection(
            host="127.0.0.1",
            port=0,
            store=StoreConfig(root=str(root), durability="process"),
            security=SecurityConfig(credentials=CREDENTIALS, tls=tls),
        )
    )


@contextlib.asynccontextmanager
async def serving(
    root: Path, pki: Pki, *, require_client_certificate: bool = False
) -> AsyncIterator[WfServer]:
    server = WfServer(_config(root, pki, require_client_certificate=require_client_certificate))

    async def admin_only(params: NoParams, caller: Caller) -> dict[str, str]:
        return {"who": caller.identity}

    # No shipped method needs the admin level yet; this one proves the wire enforces it.
    admin_only_method = MethodSpec(
        name="test.admin_only",
        python_name="admin_only",
        params=NoParams,
        result=dict[str, str],
        access="admin",
        summary="test method",
    )
    server.registry.declare(admin_only_method)
    server.registry.handle(admin_only_method, admin_only)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def _url(server: WfServer) -> str:
    return f"https://127.0.0.1:{server.port}"


def client(
    server: WfServer, pki: Pki, *, token: str | None = None, cert: str | None = None
) -> RpcClient:
    """A client as ``token`` (by credential name, or a literal) and/or certificate ``cert``."""
    files = pki.clients[cert] if cert is not None else (None, None)
    context = client_ssl_context(pki.ca, *files)
    literal = TOKENS.get(token, token) if token is not None else None
    return RpcClient(_url(server), token=literal, ssl_context=context)


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def activity(activity_id: str, activity_type: str = "X", tenant: str = "t1") -> dict[str, Any]:
    return {"activity_id": activity_id, "activity_type": activity_type, "tenant": tenant}


async def submit(c: RpcClient, *activities: dict[str, Any]) -> None:
    await c.call("scheduler.activities.submit", {"activities": list(activities)})


async def register(c: RpcClient, worker_id: str, **info: Any) -> dict[str, Any]:
    result: dict[str, Any] = await c.call(
        "scheduler.workers.register", {"info": {"worker_id": worker_id, **info}}
    )
    return result


async def poll(c: RpcClient, worker_id: str, *, wait_s: float = 0.2, max_items: int = 10) -> Any:
    answer = await c.call(
        "scheduler.workers.poll",
        {"worker_id": worker_id, "wait_s": wait_s, "max_items": max_items},
    )
    return [grant["lease"] for grant in answer["leases"]]


async def workers_by_id(c: RpcClient) -> dict[str, Any]:
    page = await c.call("scheduler.workers.list", {"limit": 100})
    return {w["info"]["worker_id"]: w for w in page["workers"]}


# ------------------------------------------------------------ authentication


def test_missing_token_is_401_with_a_stable_code(tmp_path: Path, pki: Pki) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki) as server:
            async with client(server, pki) as anonymous:
                with pytest.raises(Unauthorized) as refused:
                    await anonymous.call("scheduler.queue.stats")
            assert refused.value.code == "unauthorized"
            status, body = await _raw_post(server, pki, headers={})
            assert status == 401
            assert body["error"]["code"] == -32030
            assert body["error"]["data"]["code"] == "unauthorized"
            assert body["error"]["data"]["fault"] == "caller"
            async with client(server, pki, token="admin") as admin:
                assert (await admin.call("scheduler.queue.stats"))["depth"] == 0

    run(scenario)


@pytest.mark.parametrize(
    "header",
    [f"Bearer {WRONG_TOKEN}", "Bearer ", f"Bearer {TOKENS['admin']}x", "Basic YWRtaW46YWRtaW4="],
)
def test_wrong_or_malformed_token_is_401(tmp_path: Path, pki: Pki, header: str) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki) as server:
            status, body = await _raw_post(server, pki, headers={"Authorization": header})
            assert status == 401
            assert body["error"]["data"]["code"] == "unauthorized"
            async with client(server, pki, token=WRONG_TOKEN) as wrong:
                with pytest.raises(Unauthorized):
                    await wrong.call("scheduler.queue.stats")

    run(scenario)


def test_forbidden_carries_a_stable_code_on_the_wire(tmp_path: Path, pki: Pki) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki) as server:
            status, body = await _raw_post(
                server, pki, headers={"Authorization": f"Bearer {TOKENS['reader']}"}
            )
            assert status == 200
            assert body["error"]["code"] == -32031
            assert body["error"]["data"]["code"] == "forbidden"
            assert body["error"]["data"]["details"]["needs"] == "operate"

    run(scenario)


async def _raw_post(server: WfServer, pki: Pki, *, headers: dict[str, str]) -> tuple[int, Any]:
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "scheduler.activities.submit",
        "params": {"activities": [activity("raw-1")]},
    }
    connector = aiohttp.TCPConnector(ssl=client_ssl_context(pki.ca))
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(_url(server) + "/rpc", json=request, headers=headers) as response,
    ):
        return response.status, await response.json()


# ------------------------------------------------------------------- roles


def test_read_only_may_read_but_not_submit(tmp_path: Path, pki: Pki) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki) as server:
            async with client(server, pki, token="reader") as reader:
                with pytest.raises(Forbidden) as refused:
                    await submit(reader, activity("r1"))
                assert refused.value.details == {
                    "method": "scheduler.activities.submit",
                    "role": "read-only",
                    "needs": "operate",
                }
                with pytest.raises(Forbidden):
                    await reader.call("scheduler.activities.cancel", {"activity_id": "r1"})
                assert await reader.call("scheduler.workers.list") == {
                    "workers": [],
                    "next_cursor": None,
                }
            async with client(server, pki, token="operator") as operator:
                await submit(operator, activity("r1"))

    run(scenario)


def test_operator_is_refused_an_admin_method(tmp_path: Path, pki: Pki) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki) as server:
            for name in ("operator", "reader", "worker-a"):
                async with client(server, pki, token=name) as c:
                    with pytest.raises(Forbidden):
                        await c.call("test.admin_only")
            async with client(server, pki, token="admin") as admin:
                assert await admin.call("test.admin_only") == {"who": "admin"}

    run(scenario)


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("scheduler.activities.submit", {"activities": [activity("w1")]}),
        ("scheduler.activities.cancel", {"activity_id": "w1"}),
        ("scheduler.activities.get", {"activity_id": "w1"}),
        ("scheduler.activities.history", {"activity_id": "w1"}),
        ("scheduler.workers.list", {}),
        ("scheduler.queue.stats", {}),
        ("rpc.discover", {}),
        ("test.admin_only", {}),
    ],
)
def test_worker_credentials_are_refused_admin_methods(
    tmp_path: Path, pki: Pki, method: str, params: dict[str, Any]
) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki) as server:
            for name in ("worker-a", "worker-b"):
                async with client(server, pki, token=name) as worker:
                    with pytest.raises(Forbidden) as refused:
                        await worker.call(method, params)
                    assert refused.value.details["role"] == "worker"

    run(scenario)


@pytest.mark.parametrize("role", ["operator", "reader", "ops-t1"])
def test_worker_methods_are_refused_to_admin_roles_below_admin(
    tmp_path: Path, pki: Pki, role: str
) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki) as server, client(server, pki, token=role) as c:
            with pytest.raises(Forbidden) as refused:
                await register(c, "w-ops")
            assert refused.value.details["needs"] == "worker"
            for method, params in (
                ("scheduler.workers.heartbeat", {"worker_id": "w-ops"}),
                ("scheduler.workers.poll", {"worker_id": "w-ops", "wait_s": 0}),
                ("scheduler.leases.complete", {"activity_id": "a", "token": 1}),
            ):
                with pytest.raises(Forbidden):
                    await c.call(method, params)

    run(scenario)


# ------------------------------------------------------------ worker scopes


@pytest.mark.parametrize(
    ("info", "refused_what"),
    [
        ({"capabilities": ["cpu", "gpu"]}, "capabilities ['gpu']"),
        ({"tenants": ["t1", "t2"]}, "tenants ['t2']"),
        ({"activity_types": ["X", "Y"]}, "activity types ['Y']"),
    ],
)
def test_registration_outside_the_credential_scope_is_refused(
    tmp_path: Path, pki: Pki, info: dict[str, Any], refused_what: str
) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki) as server:
            async with client(server, pki, token="worker-a") as worker:
                with pytest.raises(Forbidden) as refused:
                    await register(worker, "wa-1", **info)
                assert refused_what in refused.value.message
                # Nothing was registered by the refused call.
                async with client(server, pki, token="admin") as admin:
                    assert await workers_by_id(admin) == {}
                # Within scope it is accepted, and narrowed to the credential's scope.
                await register(worker, "wa-1", capabilities=["cpu"])
                async with client(server, pki, token="admin") as admin:
                    registered = (await workers_by_id(admin))["wa-1"]["info"]
            assert registered["tenants"] == ["t1"]
            assert registered["activity_types"] == ["X"]
            assert registered["labels"] == {OWNER_LABEL: "worker-a"}

    run(scenario)


def test_a_worker_cannot_forge_its_owner_label(tmp_path: Path, pki: Pki) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki) as server:
            async with client(server, pki, token="worker-b") as worker_b:
                await register(worker_b, "wb-1", labels={OWNER_LABEL: "worker-a", "zone": "z1"})
            async with client(server, pki, token="admin") as admin:
                labels = (await workers_by_id(admin))["wb-1"]["info"]["labels"]
            assert labels == {OWNER_LABEL: "worker-b", "zone": "z1"}

    run(scenario)


def test_a_type_scoped_worker_never_receives_another_type(tmp_path: Path, pki: Pki) -> None:
    async def scenario() -> None:
        async with (
            serving(tmp_path, pki) as server,
            client(server, pki, token="operator") as operator,
            client(server, pki, token="worker-a") as worker_a,
            client(server, pki, token="worker-b") as worker_b,
        ):
            # It asks for everything: no types, no tenants in its registration.
            await register(worker_a, "wa-1", max_concurrency=10)
            await submit(operator, activity("y1", "Y", "t1"), activity("x2", "X", "t2"))
            assert await poll(worker_a, "wa-1", wait_s=0.2) == []
            # The work was dispatchable: an unscoped worker gets it at once.
            await register(worker_b, "wb-1", max_concurrency=10)
            taken = await poll(worker_b, "wb-1", wait_s=0.2, max_items=2)
            assert sorted(lease["activity_id"] for lease in taken) == ["x2", "y1"]
            # And worker-a does get work of its own type and tenant.
            await submit(operator, activity("x1", "X", "t1"))
            (lease,) = await poll(worker_a, "wa-1", wait_s=2.0)
            assert lease["activity_id"] == "x1"

    run(scenario)


def test_a_worker_cannot_act_for_another_credentials_worker(tmp_path: Path, pki: Pki) -> None:
    async def scenario() -> None:
        async with (
            serving(tmp_path, pki) as server,
            client(server, pki, token="operator") as operator,
            client(server, pki, token="worker-a") as worker_a,
            client(server, pki, token="worker-b") as worker_b,
        ):
            await register(worker_a, "wa-1")
            await submit(operator, activity("x1"))
            (lease,) = await poll(worker_a, "wa-1", wait_s=2.0)
            fenced = {"activity_id": "x1", "token": lease["token"]}

            with pytest.raises(Forbidden, match="belongs to another credential"):
                await register(worker_b, "wa-1")
            for method, params in (
                ("scheduler.workers.heartbeat", {"worker_id": "wa-1"}),
                ("scheduler.workers.poll", {"worker_id": "wa-1", "wait_s": 0}),
                ("scheduler.workers.shutdown", {"worker_id": "wa-1"}),
                ("scheduler.leases.start", fenced),
                ("scheduler.leases.renew", fenced),
                ("scheduler.leases.complete", {**fenced, "result": "InN0b2xlbiI="}),
                ("scheduler.leases.fail", {**fenced, "retryable": False}),
            ):
                with pytest.raises(Forbidden):
                    await worker_b.call(method, params)

            # The rightful holder is unaffected and finishes its work.
            await worker_a.call("scheduler.leases.start", fenced)
            await worker_a.call("scheduler.leases.complete", {**fenced, "result": "Im9rIg=="})
            view = await operator.call("scheduler.activities.get", {"activity_id": "x1"})
            assert view["finished_state"] == "completed"

    run(scenario)


def test_worker_ownership_survives_a_server_restart(tmp_path: Path, pki: Pki) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki) as server, client(server, pki, token="worker-a") as a:
            await register(a, "wa-1")
        # Same store, new process state: nothing of the owner is kept in memory.
        async with (
            serving(tmp_path, pki) as server,
            client(server, pki, token="worker-a") as worker_a,
            client(server, pki, token="worker-b") as worker_b,
        ):
            with pytest.raises(Forbidden, match="belongs to another credential"):
                await register(worker_b, "wa-1")
            with pytest.raises(Forbidden):
                await worker_b.call("scheduler.workers.heartbeat", {"worker_id": "wa-1"})
            await register(worker_a, "wa-1")
            await worker_a.call("scheduler.workers.heartbeat", {"worker_id": "wa-1"})

    run(scenario)


def test_a_tenant_scoped_admin_is_bound_like_a_worker(tmp_path: Path, pki: Pki) -> None:
    async def scenario() -> None:
        async with (
            serving(tmp_path, pki) as server,
            client(server, pki, token="admin-t1") as admin_t1,
            client(server, pki, token="worker-b") as worker_b,
            client(server, pki, token="admin") as admin,
        ):
            with pytest.raises(Forbidden):
                await register(admin_t1, "at-1", tenants=["t2"])
            await register(admin_t1, "at-1")
            await register(worker_b, "wb-1")
            with pytest.raises(Forbidden):
                await admin_t1.call("scheduler.workers.heartbeat", {"worker_id": "wb-1"})
            workers = await workers_by_id(admin)
            assert workers["at-1"]["info"]["tenants"] == ["t1"]
            # An unscoped admin may act for any worker (operator tooling).
            await admin.call("scheduler.workers.heartbeat", {"worker_id": "wb-1"})

    run(scenario)


# --------------------------------------------------------- tenant isolation


def test_a_tenant_scoped_operator_sees_and_touches_only_its_tenants(
    tmp_path: Path, pki: Pki
) -> None:
    async def scenario() -> None:
        async with (
            serving(tmp_path, pki) as server,
            client(server, pki, token="ops-t1") as ops_t1,
            client(server, pki, token="admin") as admin,
            client(server, pki, token="worker-a") as worker_a,
            client(server, pki, token="worker-b") as worker_b,
        ):
            with pytest.raises(Forbidden) as refused:
                await submit(ops_t1, activity("t1.a1", tenant="t1"), activity("a2", tenant="t2"))
            assert refused.value.details == {"tenants": ["t2"]}
            await submit(ops_t1, activity("t1.a1", tenant="t1"))
            await submit(admin, activity("a2", tenant="t2"))

            await register(worker_a, "wa-t1")
            await register(worker_b, "wb-t2", tenants=["t2"])
            await register(worker_b, "wb-any", max_concurrency=10)
            taken = await poll(worker_b, "wb-any", wait_s=2.0)
            assert sorted(lease["activity_id"] for lease in taken) == ["a2", "t1.a1"]

            # Another tenant's activity is indistinguishable from an unknown id.
            for method in ("scheduler.activities.get", "scheduler.activities.history"):
                with pytest.raises(NotFound):
                    await ops_t1.call(method, {"activity_id": "a2"})
                with pytest.raises(NotFound):
                    await ops_t1.call(method, {"activity_id": "never-submitted"})
                await ops_t1.call(method, {"activity_id": "t1.a1"})
            with pytest.raises(NotFound):
                await ops_t1.call("scheduler.activities.cancel", {"activity_id": "a2"})
            with pytest.raises(Forbidden):
                await ops_t1.call("scheduler.queue.stats")

            seen = await workers_by_id(ops_t1)
            assert sorted(seen) == ["wa-t1", "wb-any"]
            assert list(seen["wb-any"]["leases"]) == ["t1.a1"]
            everything = await workers_by_id(admin)
            assert sorted(everything) == ["wa-t1", "wb-any", "wb-t2"]
            assert sorted(everything["wb-any"]["leases"]) == ["a2", "t1.a1"]

            # Finished activities stay isolated too.
            for lease in taken:
                fenced = {"activity_id": lease["activity_id"], "token": lease["token"]}
                await worker_b.call("scheduler.leases.start", fenced)
                await worker_b.call("scheduler.leases.complete", fenced)
            with pytest.raises(NotFound):
                await ops_t1.call("scheduler.activities.get", {"activity_id": "a2"})
            with pytest.raises(NotFound):
                await ops_t1.call("scheduler.activities.history", {"activity_id": "a2"})
            view = await ops_t1.call("scheduler.activities.get", {"activity_id": "t1.a1"})
            assert view["finished_state"] == "completed"
            view = await admin.call("scheduler.activities.get", {"activity_id": "a2"})
            assert view["finished_state"] == "completed"

    run(scenario)


def test_metrics_need_an_unscoped_read_credential(tmp_path: Path, pki: Pki) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki) as server:
            connector = aiohttp.TCPConnector(ssl=client_ssl_context(pki.ca))
            async with aiohttp.ClientSession(connector=connector) as session:
                statuses = {}
                for name in (None, "worker-a", "ops-t1", "reader"):
                    headers = {"Authorization": f"Bearer {TOKENS[name]}"} if name else {}
                    url = _url(server) + "/metrics"
                    async with session.get(url, headers=headers) as response:
                        statuses[name] = response.status
            assert statuses == {None: 401, "worker-a": 403, "ops-t1": 403, "reader": 200}

    run(scenario)


# -------------------------------------------------------------- mutual TLS


async def _tls_refused(port: int, context: ssl.SSLContext) -> bool:
    """Whether the server refuses this TLS client before any HTTP is exchanged.

    With TLS 1.2 the handshake itself fails; with TLS 1.3 the client's side
    of the handshake completes first and the server's alert arrives on the
    first read.
    """
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    except (ssl.SSLError, ConnectionError):
        return True
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        await writer.drain()
        data = await reader.read()
    except (ssl.SSLError, ConnectionError):
        return True
    finally:
        writer.close()
        with contextlib.suppress(ssl.SSLError, ConnectionError):
            await writer.wait_closed()
    if not data:
        return True
    assert data.startswith(b"HTTP/1.1 200"), data[:100]
    return False


def _context(pki: Pki, cert: str | None, tls_max: ssl.TLSVersion) -> ssl.SSLContext:
    files = pki.clients[cert] if cert is not None else (None, None)
    context = client_ssl_context(pki.ca, *files)
    context.maximum_version = tls_max
    return context


@pytest.mark.parametrize("tls_max", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
@pytest.mark.parametrize("cert", [None, "foreign"])
def test_mtls_refuses_clients_without_a_valid_certificate(
    tmp_path: Path,
    pki: Pki,
    monkeypatch: pytest.MonkeyPatch,
    cert: str | None,
    tls_max: ssl.TLSVersion,
) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki, require_client_certificate=True) as server:
            assert server.port is not None
            authenticated: list[Any] = []
            real = server.authenticator.authenticate

            def counting(token: str | None, peer: dict[str, Any] | None) -> Caller:
                authenticated.append((token, peer))
                return real(token, peer)

            monkeypatch.setattr(server.authenticator, "authenticate", counting)
            assert await _tls_refused(server.port, _context(pki, cert, tls_max))
            # Even with a valid admin token: the connection never reaches HTTP.
            files = pki.clients[cert] if cert is not None else (None, None)
            context = client_ssl_context(pki.ca, *files)
            # No failover budget: one server, refused for good (the budget only waits).
            async with RpcClient(
                _url(server), token=TOKENS["admin"], ssl_context=context, failover_timeout_s=0
            ) as c:
                with pytest.raises(RpcUnavailable):
                    await c.call("scheduler.queue.stats")
            assert authenticated == []
            # Control: a certificate from the right CA gets through the same way.
            assert not await _tls_refused(server.port, _context(pki, "worker-a", tls_max))

    run(scenario)


def test_a_certificate_maps_to_its_credential_with_the_same_scopes(
    tmp_path: Path, pki: Pki
) -> None:
    async def scenario() -> None:
        async with (
            serving(tmp_path, pki, require_client_certificate=True) as server,
            client(server, pki, cert="worker-a") as by_cert,
            client(server, pki, cert="worker-a", token="worker-a") as by_token,
            client(server, pki, cert="ops-cert") as operator,
            client(server, pki, cert="ops-cert", token="admin") as admin,
        ):
            with pytest.raises(Forbidden):
                await register(by_cert, "wa-cert", activity_types=["Y"])
            with pytest.raises(Forbidden):
                await by_cert.call("scheduler.workers.list")
            await register(by_cert, "wa-cert")
            await register(by_token, "wa-token")
            workers = await workers_by_id(admin)
            assert workers["wa-cert"]["info"] == {
                **workers["wa-token"]["info"],
                "worker_id": "wa-cert",
            }
            # One credential, two ways in: the token may act for the cert's worker.
            await by_token.call("scheduler.workers.heartbeat", {"worker_id": "wa-cert"})
            # The operator certificate carries the operator role.
            await submit(operator, activity("x1"))
            with pytest.raises(Forbidden):
                await operator.call("test.admin_only")
            (lease,) = await poll(by_cert, "wa-cert", wait_s=2.0)
            assert lease["activity_id"] == "x1"

    run(scenario)


def test_a_certificate_mapping_to_no_credential_is_401(tmp_path: Path, pki: Pki) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki, require_client_certificate=True) as server:
            async with client(server, pki, cert="unmapped") as nobody:
                with pytest.raises(Unauthorized, match="'nobody' maps to no credential"):
                    await nobody.call("scheduler.queue.stats")
            # A valid token on the same channel is accepted (the token decides).
            async with client(server, pki, cert="unmapped", token="admin") as admin:
                assert (await admin.call("test.admin_only"))["who"] == "admin"

    run(scenario)


def test_a_token_takes_precedence_over_the_certificate(tmp_path: Path, pki: Pki) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki, require_client_certificate=True) as server:
            async with client(server, pki, cert="worker-a", token="admin") as admin:
                assert (await admin.call("test.admin_only"))["who"] == "admin"
            async with client(server, pki, cert="ops-cert", token="reader") as reader:
                with pytest.raises(Forbidden):
                    await submit(reader, activity("x1"))
            # A wrong token never falls back to the certificate's identity.
            async with client(server, pki, cert="ops-cert", token=WRONG_TOKEN) as wrong:
                with pytest.raises(Unauthorized):
                    await wrong.call("scheduler.workers.list")

    run(scenario)


def test_optional_client_certificates_still_need_a_credential(tmp_path: Path, pki: Pki) -> None:
    async def scenario() -> None:
        async with serving(tmp_path, pki, require_client_certificate=False) as server:
            assert server.port is not None
            # The handshake accepts a client without a certificate...
            assert not await _tls_refused(server.port, _context(pki, None, ssl.TLSVersion.TLSv1_3))
            # ...but not one whose certificate a foreign CA signed.
            assert await _tls_refused(server.port, _context(pki, "foreign", ssl.TLSVersion.TLSv1_3))
            async with client(server, pki) as anonymous:
                with pytest.raises(Unauthorized):
                    await anonymous.call("scheduler.workers.list")
            async with client(server, pki, cert="ops-cert") as operator:
                assert (await operator.call("scheduler.workers.list"))["workers"] == []

    run(scenario)
