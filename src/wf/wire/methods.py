"""How the wire contract declares a JSON-RPC method.

Theory of operation
-------------------
Every method wf serves is one :class:`MethodSpec`, declared next to its
parameter Struct in a family module (:mod:`wf.wire.scheduler_methods`,
:mod:`wf.wire.workflow_methods`, :mod:`wf.wire.schedule_methods`, and
:data:`DISCOVER` here); :mod:`wf.wire.contract` gathers them. The one
declaration serves every party:

- the server attaches a handler to it (``wf.server.rpc.Registry``, which
  refuses to start when a declared method has no handler or a handler no
  declaration) and publishes its parameter schema in ``rpc.discover``;
- the ``App`` client builds its twin of the server's Python API from it
  (``python_name``, and ``params`` to build the exact wire form);
- the worker SDK names the methods it calls and builds their parameters
  with it.

A declaration also says how the Python API's result travels (:meth:`MethodSpec.decode`):
as it is, wrapped in a one-key object (``wrap``), or, for methods that
return nothing, as ``{"ok": true}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar

import msgspec

from wf.wire.views import View

INSTANCE_HEADER: Final = "WF-Instance"
"""The HTTP header every response of a wf server carries: a random id of that server
instance, new at each start. A client that sees it change behind one URL knows
another server process answers there now (a restart, or another node behind a load
balancer) and counts it as a failover (``RpcClient.failovers``): a worker then
registers again, listing its leases, whether or not any of its calls failed."""

Access = Literal["worker", "read", "operate", "admin"]
"""What a method needs: a worker credential, or an admin role at this level."""

P = TypeVar("P", bound=msgspec.Struct)


@dataclass(frozen=True, slots=True, kw_only=True)
class MethodSpec(Generic[P]):
    """One JSON-RPC method as the wire contract declares it."""

    name: str
    """The JSON-RPC method name (``scheduler.leases.complete``)."""
    python_name: str
    """The name of its twin on the server's Python API and on the ``App`` client."""
    params: type[P]
    """The parameter Struct: what the server decodes and the clients build."""
    result: Any
    """The type of the Python API's result; ``None`` when it returns nothing."""
    wrap: str | None = None
    """Key of the one-key object the wire wraps the result in (``None``: not wrapped)."""
    access: Access
    """What the caller needs."""
    summary: str
    """One line on what it does (published by ``rpc.discover``)."""

    def decode(self, raw: Any) -> Any:
        """The Python API's result from the wire's answer."""
        if self.result is None:
            return None
        if self.wrap is not None:
            raw = raw[self.wrap]
        return msgspec.convert(raw, self.result)


class NoParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Methods without parameters."""


class MethodInfo(View, frozen=True, kw_only=True):
    """One entry of the compact method listing (``Registry.describe``; ``rpc.discover``
    answers an OpenRPC document)."""

    name: str
    """The JSON-RPC method name."""
    summary: str
    """One line on what it does."""
    access: str
    """What it needs: ``worker``, ``read``, ``operate`` or ``admin``."""
    params: dict[str, Any]
    """JSON Schema of its parameters."""


DISCOVER: Final = MethodSpec(
    name="rpc.discover",
    python_name="discover",
    params=NoParams,
    result=dict[str, Any],
    access="read",
    summary="The server's OpenRPC document: every method with its params, result and errors.",
)
"""``rpc.discover``: the server's own description of its methods, an OpenRPC document
(https://spec.open-rpc.org; built by ``wf.server.openrpc``)."""


class Identity(View, frozen=True, kw_only=True):
    """The caller as the server authenticated it (``rpc.whoami``)."""

    identity: str
    """Credential name (``anonymous`` when authentication is off)."""
    role: str
    """``admin``, ``operator``, ``read-only`` or ``worker``."""
    tenants: list[str] | None
    """Tenants it may act for (``None``: all)."""


WHOAMI: Final = MethodSpec(
    name="rpc.whoami",
    python_name="whoami",
    params=NoParams,
    result=Identity,
    access="read",
    summary="The calling credential's name, role and tenants.",
)
"""``rpc.whoami``: who the server takes the caller for (the console hides the actions
the role may not take; the server still checks every call)."""
