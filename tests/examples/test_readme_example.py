"""The README's Python example runs as written (in a scratch folder)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_block(heading: str) -> str:
    text = README.read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, f"no python block under {heading!r}"
    return match.group(1)


def test_the_readme_schedule_example_prints_the_run_output(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_python_block("A schedule from Python"))
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "{'result': 'hello on a schedule'}"
    assert (tmp_path / ".wf_example" / "scheduler.db").exists()
