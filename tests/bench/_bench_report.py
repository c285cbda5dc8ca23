"""Runs a benchmark script the way its smoke test does and returns its report.

Every benchmark prints progress lines and, last, one JSON object; a smoke test
asserts the script still runs and what that report holds, never speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def bench_report(
    script: str, *args: str, timeout_s: float, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``python bench/<script> <args>``: its last stdout line, decoded (it must exit 0
    and print progress lines first)."""
    done = subprocess.run(
        [sys.executable, str(BENCH_DIR / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=None if env is None else dict(env),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) > 1, "progress lines come before the report"
    report: dict[str, Any] = json.loads(lines[-1])
    return report
