"""Process figures for heartbeats (WF-005 §7), from the standard library only.

CPU: user + system time of this process (``resource.getrusage``) over the
wall time since the previous sample, divided by the CPUs available to it.
Memory: resident set size (``/proc/self/statm`` on Linux, else the peak RSS
``getrusage`` reports) over physical memory (``os.sysconf``). Both are
fractions in 0..1; a figure the platform cannot give is 0.
"""

from __future__ import annotations

import os
import resource
import sys
from typing import Final

_STATM: Final = "/proc/self/statm"


def _cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _physical_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0


def _rss_bytes() -> int:
    try:
        with open(_STATM, "rb") as f:
            return int(f.read().split()[1]) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # Linux reports KiB, macOS bytes.
        return peak if sys.platform == "darwin" else peak * 1024


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class ProcessSampler:
    """CPU and memory fractions of this process, sampled at heartbeat times."""

    def __init__(self, now_s: float) -> None:
        self._cpus = _cpu_count()
        self._memory_total = _physical_memory_bytes()
        self._last_at = now_s
        self._last_cpu_s = _cpu_seconds()

    def cpu_fraction(self, now_s: float) -> float:
        """CPU used since the previous call (monotonic ``now_s``), as a share of the CPUs."""
        cpu_s = _cpu_seconds()
        elapsed = now_s - self._last_at
        used = cpu_s - self._last_cpu_s
        self._last_at, self._last_cpu_s = now_s, cpu_s
        if elapsed <= 0:
            return 0.0
        return min(1.0, max(0.0, used / (elapsed * self._cpus)))

    def memory_fraction(self) -> float:
        """Resident memory as a share of physical memory."""
        if self._memory_total <= 0:
            return 0.0
        return min(1.0, _rss_bytes() / self._memory_total)
