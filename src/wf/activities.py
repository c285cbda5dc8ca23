"""Built-in activities, small enough for examples and tests.

``BUILTIN_ACTIVITIES`` is what :func:`wf.server.local.build_local_static_workflow_server`
runs by default and what ``wf worker --app wf.activities:BUILTIN_ACTIVITIES``
serves. Each returns a JSON object so plans can bind into it
(``{"$node": "hello", "path": "text"}``). Register your own with
:func:`wf.worker.activity` (docs/workflows.md, "Your own activities").
"""

from __future__ import annotations

from typing import Any, Final

from wf.errors import InvalidArgument
from wf.worker import ActivityDefinition, activity


@activity(name="format_text", idempotent=True)
def format_text(template: str, **values: Any) -> dict[str, str]:
    """``template`` with ``{name}`` fields filled from ``values``: ``{"text": ...}``."""
    try:
        return {"text": template.format(**values)}
    except (KeyError, IndexError, ValueError) as exc:
        raise InvalidArgument(f"template {template!r} cannot be filled: {exc}") from None


@activity(name="upper", idempotent=True)
def upper(text: str) -> dict[str, str]:
    """``text`` in upper case: ``{"text": ...}``."""
    return {"text": text.upper()}


@activity(name="join_texts", idempotent=True)
def join_texts(texts: list[str], separator: str = " ") -> dict[str, str]:
    """The texts joined by ``separator``: ``{"text": ...}``."""
    return {"text": separator.join(texts)}


@activity(name="sum_numbers", idempotent=True)
def sum_numbers(numbers: list[float]) -> dict[str, float]:
    """The sum of ``numbers``: ``{"sum": ...}``."""
    return {"sum": sum(numbers)}


@activity(name="echo", idempotent=True)
def echo(**values: Any) -> dict[str, Any]:
    """Its keyword arguments, as given."""
    return values


BUILTIN_ACTIVITIES: Final[list[ActivityDefinition]] = [
    format_text,
    upper,
    join_texts,
    sum_numbers,
    echo,
]
"""Every built-in activity."""
