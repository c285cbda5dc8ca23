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


def test_the_flow_example_runs_as_written() -> None:
    """Issue 17: ``env.deploy`` takes a ``wf.flow`` Flow, as "Testing a Python flow" shows."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Testing a Python flow\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    namespace: dict[str, Any] = {"__name__": "docs_testing_flow_example"}
    exec(compile(block, str(DOC), "exec"), namespace)
    tests = [name for name in namespace if name.startswith("test_")]
    assert tests == ["test_a_flow_deploys_under_its_own_name_and_runs"]
    namespace[tests[0]]()
