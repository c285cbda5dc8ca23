"""examples/testing/ stays true: its pytest file passes as a user would run it.

The examples are run by a separate pytest process in their own folder, as a user's
copy would be (their modules imported by plain name, no plugin, none of wf's own
fixtures), so what docs/testing.md shows is what works.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "testing"
DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
SECTIONS = ("The test environment in one call", "Testing one activity alone")
"""docs/testing.md's sections whose code blocks are copied from the examples."""


def test_the_testing_examples_pass_as_a_user_runs_them() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLES)],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "\n5 passed" in done.stdout, done.stdout[-2000:]


def test_the_guide_shows_the_examples_as_they_are() -> None:
    text = DOC.read_text(encoding="utf-8")
    source = (EXAMPLES / "test_report.py").read_text(encoding="utf-8")
    for heading in SECTIONS:
        section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
        blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
        assert blocks, f"no example under {heading!r}"
        for block in blocks:
            assert block in source, f"a block under {heading!r} is not in test_report.py"
