"""Python clients of a wf server: the JSON-RPC transport and the admin ``App``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wf.client.app import App, SyncApp
    from wf.wire.run_views import RunPage, RunSummary, RunView
    from wf.wire.schedule_views import (
        OccurrencePage,
        OccurrenceView,
        PreviewInstant,
        SchedulePage,
        ScheduleView,
    )
    from wf.wire.views import View
    from wf.wire.workflow import Artifact, ArtifactPage, Deployment, DeploymentPage

__all__ = [
    "App",
    "Artifact",
    "ArtifactPage",
    "Deployment",
    "DeploymentPage",
    "OccurrencePage",
    "OccurrenceView",
    "PreviewInstant",
    "RunPage",
    "RunSummary",
    "RunView",
    "SchedulePage",
    "ScheduleView",
    "SyncApp",
    "View",
]


def __getattr__(name: str) -> Any:
    # Lazy: the worker SDK imports wf.client.rpc_client without the admin client's
    # server-side types.
    if name in ("App", "SyncApp"):
        from wf.client import app

        return getattr(app, name)
    if name in __all__:  # a typed result, declared in the wire contract
        import wf.wire

        return getattr(wf.wire, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
