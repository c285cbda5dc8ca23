"""docs/testing.md's example runs as written: the page's first Python block is a
pytest module a user copies into their suite; this runs its test function."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def example() -> str:
    """The page's first ``python`` code block."""
    found = re.search(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert found is not None, "docs/testing.md has no python example"
    return found.group(1)


def test_the_testing_guide_example_runs_as_written(tmp_path: Path) -> None:
    namespace: dict[str, Any] = {"__name__": "docs_testing_example"}
    exec(compile(example(), str(DOC), "exec"), namespace)
    tests = [name for name in namespace if name.startswith("test_")]
    assert tests == ["test_a_week_of_daily_hellos"]
    namespace["test_a_week_of_daily_hellos"](tmp_path)
