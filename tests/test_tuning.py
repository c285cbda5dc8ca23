"""``wf.tuning``: what the server and worker entry points do to the collector once booted.

Run in a child interpreter: the collector is the whole process's, and freezing
the test runner's own heap would change every later test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import gc, json
from wf.tuning import GC_THRESHOLDS, tune_gc
before = gc.get_freeze_count()
booted = [object() for _ in range(3)]  # alive at boot, like modules and config
tune_gc()
frozen = gc.get_freeze_count()
tune_gc()  # again: freezes only what was made since, changes nothing else
print(json.dumps({"before": before, "frozen": frozen, "again": gc.get_freeze_count(),
                  "thresholds": list(gc.get_threshold()), "expected": list(GC_THRESHOLDS)}))
"""


def test_tune_gc_freezes_the_booted_heap_and_raises_the_young_threshold() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(done.stdout)
    assert seen["before"] == 0
    # Everything imported so far (wf, msgspec, ...) is now out of the collector's reach.
    assert seen["frozen"] > 1000
    assert seen["again"] >= seen["frozen"]
    assert seen["thresholds"] == seen["expected"]
    assert seen["thresholds"][0] > 700  # CPython's default young threshold


LOOP_PROBE = """
import asyncio
from wf.tuning import run

async def main() -> str:
    return type(asyncio.get_running_loop()).__module__

print(run(main()))
"""


def loop_module(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "WF_EVENT_LOOP"}
    if env_value is not None:
        env["WF_EVENT_LOOP"] = env_value
    done = subprocess.run(
        [sys.executable, "-c", LOOP_PROBE],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    )
    return done.stdout.strip()


def test_run_uses_uvloop_by_default_and_the_standard_loop_on_request() -> None:
    assert loop_module(None).startswith("uvloop")
    assert loop_module("asyncio").startswith("asyncio")


HEAP_PROBE = """
import gc, json, sys
from wf.tuning import recovered_heap, tune_gc
tuned = sys.argv[1] == "tuned"
if tuned:
    tune_gc()
before = gc.get_freeze_count()
with recovered_heap():
    off_inside = not gc.isenabled()
    kept = [[i] for i in range(5000)]  # what recovery builds and keeps: containers
print(json.dumps({"off_inside": off_inside, "on_after": gc.isenabled(),
                  "frozen_by_it": gc.get_freeze_count() - before}))
before = gc.get_freeze_count()
with recovered_heap():  # a second recovery (a reload, a later takeover)
    again = [[i] for i in range(5000)]
second = gc.get_freeze_count() - before
gc.disable()
with recovered_heap():
    pass
print(json.dumps({"stays_off": not gc.isenabled(), "second_frozen": second}))
"""

FAILED_PROBE = """
import gc, json
from wf.tuning import recovered_heap, tune_gc
tune_gc()
before = gc.get_freeze_count()
try:
    with recovered_heap():
        lost = [[i] for i in range(5000)]
        raise RuntimeError("the load failed")
except RuntimeError:
    pass
failed = gc.get_freeze_count() - before
on_after_failure = gc.isenabled()
with recovered_heap():  # the retry that succeeds is the one frozen
    kept = [[i] for i in range(5000)]
print(json.dumps({"failed_frozen": failed, "on_after_failure": on_after_failure,
                  "retry_frozen": gc.get_freeze_count() - before}))
"""


def heap_probe(mode: str) -> tuple[dict[str, object], dict[str, object]]:
    first, second = probe_lines(HEAP_PROBE, mode)
    return first, second


def probe_lines(probe: str, *args: str) -> list[dict[str, object]]:
    """The JSON lines a probe printed in a child interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", probe, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [json.loads(line) for line in done.stdout.strip().splitlines()]


def test_recovery_in_a_tuned_process_freezes_what_it_built_and_turns_the_collector_back_on() -> (
    None
):
    seen, after_off = heap_probe("tuned")
    assert seen["off_inside"] is True
    assert seen["on_after"] is True
    # The 5,000 lists it built (and the list holding them) are out of every pass.
    assert isinstance(seen["frozen_by_it"], int)
    assert seen["frozen_by_it"] >= 5001
    assert after_off["stays_off"] is True  # a collector turned off stays off
    # Only the first recovery freezes: a later core may be replaced and must be freeable.
    assert after_off["second_frozen"] == 0


def test_a_failed_recovery_freezes_nothing_and_the_retry_that_succeeds_is_frozen() -> None:
    (seen,) = probe_lines(FAILED_PROBE)
    assert seen["failed_frozen"] == 0
    assert seen["on_after_failure"] is True
    assert isinstance(seen["retry_frozen"], int)
    assert seen["retry_frozen"] >= 5001


def test_recovery_in_an_untuned_process_freezes_nothing_and_only_pauses_the_collector() -> None:
    seen, after_off = heap_probe("plain")
    assert seen == {"off_inside": True, "on_after": True, "frozen_by_it": 0}
    assert after_off == {"stays_off": True, "second_frozen": 0}
