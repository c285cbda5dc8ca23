"""004 ``server.scheduler``: the settings of the deployment-schedule service."""

from __future__ import annotations

import msgspec

from wf.errors import InvalidArgument


class ScheduleServiceConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """004 ``server.scheduler``: the deployment-schedule service."""

    enabled: bool = False
    """Scheduling is disabled by default."""
    poll_interval_s: float = 1.0
    """How often the admission loop looks at schedules (timers fire in between)."""
    max_concurrent_runs: int = 4
    """The execution-slot bound for scheduled runs."""
    drain_grace_s: float = 30.0
    """How long shutdown waits for active scheduled work."""
    misfire_lateness_s: float = 60.0
    """Lateness allowance before a start counts as missed."""

    def __post_init__(self) -> None:
        if self.poll_interval_s <= 0 or self.max_concurrent_runs < 1 or self.drain_grace_s < 0:
            raise InvalidArgument("server.scheduler values out of range", field="server.scheduler")
        if self.misfire_lateness_s < 0:
            raise InvalidArgument("misfire_lateness_s must be >= 0", field="misfire_lateness_s")
