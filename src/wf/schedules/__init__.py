"""Deployment schedules (contract 004): definitions, admission, occurrences.

See docs/schedules.md. :class:`~wf.schedules.api.ScheduleAPI` is the
administration surface (``server.api.schedules``, ``workflow.schedules.*``);
:class:`~wf.schedules.service.ScheduleService` admits occurrences as runs.
"""

from wf.schedules.config import ScheduleServiceConfig
from wf.schedules.service import SchedulerServiceConfig, ScheduleService, build_scheduler_service

__all__ = [
    "ScheduleService",
    "ScheduleServiceConfig",
    "SchedulerServiceConfig",
    "build_scheduler_service",
]
