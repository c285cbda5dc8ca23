"""Python clients of a wf server: the JSON-RPC transport and the admin ``App``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wf.client.app import App, SyncApp

__all__ = ["App", "SyncApp"]


def __getattr__(name: str) -> Any:
    # Lazy: the worker SDK imports wf.client.rpc_client without the admin client's
    # server-side types.
    if name in __all__:
        from wf.client import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
