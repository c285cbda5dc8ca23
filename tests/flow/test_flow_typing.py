"""mypy sees through wf.flow: run inputs, node outputs and paths keep their Python
types, and misuse is a type error before anything is built.

The snippet below is checked by mypy --strict (a fresh cache of its own) and the
revealed types and errors are compared line by line.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SNIPPET = """
from typing import TypedDict

from wf import flow
from wf.worker import activity


class Doubled(TypedDict):
    value: int


@activity(name="double")
def double(x: int) -> Doubled:
    return {"value": 2 * x}


@activity(name="fetch")
async def fetch(url: str) -> list[str]:
    return [url]


@activity(name="count")
def count(words: list[str]) -> dict[str, int]:
    return {"n": len(words)}


@flow.workflow("typed")
def typed() -> flow.Outputs:
    n = flow.input("n", int)
    reveal_type(n)  # T: Revealed type is "wf.flow.refs.Input[int]"
    a = flow.call(double, x=n)
    reveal_type(a)  # T: Revealed type is "wf.flow.refs.Output[TypedDict({'value': int})]"
    reveal_type(a["value"])  # T: Revealed type is "wf.flow.refs.Output[object]"
    pages = flow.call(fetch, url="x")  # an async activity's output is what it returns
    reveal_type(pages)  # T: Revealed type is "wf.flow.refs.Output[list[str]]"
    reveal_type(pages[0])  # T: Revealed type is "wf.flow.refs.Output[str]"
    reveal_type(flow.map(double, pages, x=flow.item))  # T: "wf.flow.refs.Output[list[TypedDict
    reveal_type(flow.interrupt("ok?", schema=bool))  # T: "wf.flow.refs.Output[bool]"
    reveal_type(flow.call(count, words=pages)["n"])  # T: "wf.flow.refs.Output[int]"
    reveal_type(a["value"] > n)  # T: Revealed type is "wf.flow.refs.Expr"
    n["oops"]  # T: Value of type "Input[int]" is not indexable
    pages["key"]  # T: Invalid index type "str" for "Output[list[str]]"; expected type "int"
    flow.call(double, x=n, timeout_s="soon")  # T: No overload variant of "call" matches
    flow.map(double, a, x=flow.item)  # T: Argument 2 to "map" has incompatible type "Output[
    return {"v": a["value"]}


reveal_type(typed)  # T: Revealed type is "wf.flow.builder.Flow"
reveal_type(double(3))  # T: Revealed type is "TypedDict({'value': int})"
"""
"""Each line ending in ``# T: text`` must draw one mypy message containing ``text``;
no other line may draw any."""


def test_mypy_types_inputs_outputs_paths_and_refuses_misuse(tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(SNIPPET)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--show-error-codes",
            "--no-error-summary",
            "--hide-error-context",
            "--no-pretty",
            "--show-traceback",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--config-file",
            "/dev/null",
            str(snippet),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    expected = {
        i: line.split("# T: ", 1)[1]
        for i, line in enumerate(SNIPPET.splitlines(), start=1)
        if "# T: " in line
    }
    got: dict[int, list[str]] = {}
    for line in done.stdout.splitlines():
        match = re.match(r".*snippet\.py:(\d+): (?:note|error): (.*)", line)
        if match is None or match.group(2).startswith(("Possible overload", "    ")):
            continue
        got.setdefault(int(match.group(1)), []).append(match.group(2))
    assert set(got) == set(expected), done.stdout
    for number, text in expected.items():
        assert any(text in message for message in got[number]), (number, text, got[number])
