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
