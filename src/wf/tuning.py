"""Process tuning for wf's long-running processes: the server and the workers.

Theory of operation
-------------------
CPython's cyclic garbage collector runs a *full* collection (generation 2)
every so often, and a full collection walks every container object the
process holds. In a booted server that is mostly what never dies: imported
modules, classes, compiled schemas, the configuration, the store's
statements. On this project's 2-core benchmark machine one such pause took
about 22 ms, stopping the event loop in the middle of whatever was due: an
admission instant, a lease grant, a heartbeat answer. It was the largest
single cause of admission lateness above 10 ms (``bench/schedules.py``).

:func:`tune_gc`, called once the process has booted, does what long-running
CPython services commonly do:

* ``gc.collect()`` then ``gc.freeze()``: everything alive after boot moves
  to the permanent generation, which no later collection walks. Frozen
  objects are never freed by the cyclic collector; that is the point (they
  live as long as the process) and the cost (a cycle among them that dies
  later leaks until exit, which boot-time objects do not do).
* A higher generation-0 threshold (:data:`GC_THRESHOLDS`), so young
  collections run about fourteen times less often; reference counting still
  frees almost everything at once, so memory grows only by the garbage
  cycles made between collections.

Only the process entry points call it (``wf-rpc-server``, ``wf worker``,
the benchmarks); a program that embeds a local server decides for itself,
since the collector is the whole process's.

A process that called :func:`tune_gc` has also opted into
:func:`recovered_heap`, which :class:`~wf.node.SchedulerNode` wraps around
each recovery. Recovery builds millions of objects (10^6 activities, their
queue entries and table slots) that all stay alive, with the collector off.
Left in the young generation, they would be walked by the first collection
after it (about 0.3 s per 10^6 activities, stopping the first dispatch) and
again by every older one; frozen instead, no pass walks them and reference
counting still frees each activity once it finishes (they hold no cycles).
So the wrapper collects the young generations first (what is garbage then
is not frozen with the rest) and freezes at the end, for the first recovery
of the process only (see :func:`recovered_heap` why). Without the opt-in it
only turns the collector off for the duration, as before.

:func:`run` is ``asyncio.run`` on uvloop (libuv's event loop, a drop-in
asyncio loop written in Cython) where it is installed, which it is by
default on Linux and macOS: the server and the workers spend much of each
request in the loop itself (socket reads and writes, timers, wake-ups from the
store's writer thread), and uvloop does that part several times faster.
``WF_EVENT_LOOP=asyncio`` keeps the standard loop (to compare, or to debug
with asyncio's debug mode).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Final, TypeVar

T = TypeVar("T")

GC_THRESHOLDS: Final = (10_000, 10, 10)
"""Generation thresholds after tuning (CPython's default is ``(700, 10, 10)``)."""

_tuned = False
"""Whether this process called :func:`tune_gc` (see :func:`recovered_heap`)."""
_recovery_frozen = False
"""Whether a recovery's heap was frozen already (only the first one is)."""


def tune_gc() -> None:
    """Freeze what booting created and make young collections rarer (see the module doc).

    Idempotent: calling it again freezes what was created since."""
    global _tuned
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    _tuned = True


@contextlib.contextmanager
def recovered_heap() -> Iterator[None]:
    """The collector off for the block; in a tuned process (:func:`tune_gc`), for the
    process's first recovery that succeeds, a collection of the young
    generations before it and a freeze of what it left alive after it (see the
    module doc). The collector's own state (on or off) is restored at the end.

    Only the first. A frozen object is still freed by reference counting, and
    the core keeps no cycle of its own (``tests/scheduler/test_core_is_acyclic.py``),
    so a frozen core that a node later replaces (a reload after a failed
    commit, a second takeover) is freed; but a frozen object that sits in a
    cycle never is, and a recovery builds more than the core (a policy
    plugin's state, say). So the freeze is kept to the one recovery that
    matters most, the one at boot or a standby's first takeover; later ones
    leave their objects to the collector."""
    global _recovery_frozen
    collecting = gc.isenabled()
    freezing = _tuned and collecting and not _recovery_frozen
    if freezing:
        # The young generations only: the old one was collected by tune_gc at boot,
        # and a standby's first takeover must not walk its whole warm copy.
        gc.collect(1)
    gc.disable()
    try:
        yield
    except BaseException:
        if collecting:
            gc.enable()
        raise
    if freezing:
        gc.freeze()
        _recovery_frozen = True
    if collecting:
        gc.enable()


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop constructor, or ``None`` for the standard loop (see the module doc)."""
    if os.environ.get("WF_EVENT_LOOP", "uvloop") == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # not installed here (Windows): the standard loop
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop :func:`loop_factory` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
