"""The typed forms of a schedule's trigger, as they travel (contract 004).

Data only: the schedules layer (:mod:`wf.schedules.model`, which re-exports
these) parses the instant, resolves the zone and checks the expression. A
caller may pass either these Structs or the same JSON objects.
"""

from __future__ import annotations

from typing import TypeAlias

import msgspec


class OneShotTrigger(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag="oneshot",
    tag_field="kind",
    forbid_unknown_fields=True,
):
    """Fire once at ``at`` (ISO 8601 with an offset; naive times are refused)."""

    at: str
    """The instant as written (its offset kept)."""


class CronTrigger(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag="cron",
    tag_field="kind",
    forbid_unknown_fields=True,
):
    """Fire at every instant of a five-field cron expression in an IANA zone."""

    expression: str
    """Five-field Unix cron (``0`` and ``7`` are Sunday; day fields match with OR)."""
    timezone: str = "UTC"
    """IANA zone the expression is read in."""


Trigger: TypeAlias = OneShotTrigger | CronTrigger
"""Either trigger (tagged by ``kind``)."""
