"""The Python flows of the docs run for real: examples/flow_orders.py (a fan-out,
a sum and a condition) on a local server with in-process workers, both ways
through its condition, and the README's "A workflow in Python" as written.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from wf.server.local import build_local_static_workflow_server

ROOT = Path(__file__).resolve().parents[2]


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("flow_orders", ROOT / "examples/flow_orders.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_orders_example_fans_out_sums_and_branches(tmp_path: Path) -> None:
    example = _example()
    orders = example.orders

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        server = build_local_static_workflow_server(
            tmp_path / "store", activities=example.ACTIVITIES, durability="process"
        )
        async with server:
            await server.api.create_artifact_from_plan("orders", 1, orders.to_builtins())
            await server.api.save_deployment({"artifact_id": "orders", "artifact_version": 1})
            views = []
            for amounts in ([10, 20], [30, 120]):
                items = [{"id": f"o{i}", "amount": a} for i, a in enumerate(amounts)]
                run = await server.api.start_run("orders.default", {"orders": items})
                views.append(await server.api.wait_for_run(run["run_id"], timeout=60))
            small, big = views
            return small, big

    small, big = asyncio.run(main())
    assert small["status"] == "completed", small
    assert small["output"] == {"total": 36.0, "review": None}
    statuses = {t["node"]: t["status"] for t in small["trace"]}
    assert statuses["over_limit"] == "completed"
    assert statuses["open_review"] == "skipped"
    assert big["status"] == "completed", big
    assert big["output"] == {"total": 180.0, "review": "review 180: over the limit"}


def test_the_readme_flow_example_prints_the_run_output(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("## A workflow in Python\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    script = tmp_path / "example.py"
    script.write_text(match.group(1))
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
    assert done.stdout.strip().splitlines()[-1] == "{'result': 'HELLO WORLD'}"
