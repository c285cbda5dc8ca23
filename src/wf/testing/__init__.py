"""Test support for wf users and wf itself: virtual clock, time skipping, test
environments (docs/testing.md).

:class:`WorkflowEnvironment` (:mod:`wf.testing.environment`: wf in process on a
virtual clock) and :class:`ActivityEnvironment` (:mod:`wf.testing.activity_env`: one
activity with a fake context) are imported on first use, so that importing
``wf.testing.clock`` does not load the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wf.testing.activity_env import ActivityEnvironment
    from wf.testing.environment import WorkflowEnvironment

__all__ = ["ActivityEnvironment", "WorkflowEnvironment"]


def __getattr__(name: str) -> Any:
    # Lazy: the workflow environment pulls in the whole server.
    if name == "WorkflowEnvironment":
        from wf.testing.environment import WorkflowEnvironment

        return WorkflowEnvironment
    if name == "ActivityEnvironment":
        from wf.testing.activity_env import ActivityEnvironment

        return ActivityEnvironment
    raise AttributeError(f"module 'wf.testing' has no attribute {name!r}")
