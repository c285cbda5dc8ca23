"""Runs ``wf`` commands against one server, for the CLI tests.

:class:`WfRunner` runs each command through ``wf``'s ``main([...])`` in the
test's process with ``--server`` appended; its exit code, stdout and stderr
(captured by pytest's ``capsys``) come back as a :class:`Result`.
:func:`wf_process` runs one as a real ``wf`` process, where the process itself
is the subject; :func:`closed_port` is a loopback port nothing listens on.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from wf.cli.main import main

BIN = Path(sys.executable).parent
"""Where the ``wf`` and ``wf-rpc-server`` scripts of the interpreter under test are."""


def closed_port() -> int:
    """A loopback port that was free a moment ago: a connection to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def pairs(text: str) -> dict[str, str]:
    """A ``KEY  value`` block (keys may hold one space, e.g. ``MAX STEPS``)."""
    found = {}
    for line in text.strip().split("\n"):
        key, _, value = line.partition("  ")
        found[key.strip()] = value.strip()
    return found


def wf_process(*argv: str) -> subprocess.CompletedProcess[str]:
    """``wf *argv`` as a real process (60 s at most); its output is captured."""
    return subprocess.run(
        [str(BIN / "wf"), *argv], capture_output=True, text=True, timeout=60, check=False
    )


@dataclass
class Result:
    """One command's exit code and output."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        """Standard output as JSON (the command must have succeeded)."""
        assert self.code == 0, self.err
        return json.loads(self.out)


class WfRunner:
    """Runs ``wf`` commands (in this process) against the server at ``url``."""

    def __init__(self, url: str, capsys: pytest.CaptureFixture[str], tmp: Path) -> None:
        self.url = url
        self.capsys = capsys
        self.tmp = tmp
        self.files = 0

    def __call__(self, *argv: str, server: str | None = None) -> Result:
        self.capsys.readouterr()
        code = main([*argv, "--server", server or self.url])
        captured = self.capsys.readouterr()
        return Result(code, captured.out, captured.err)

    def ok(self, *argv: str) -> str:
        """Standard output of a command that must succeed, silently on stderr."""
        result = self(*argv)
        assert result.code == 0, result.err
        assert result.err == ""
        return result.out

    def refused(self, code: str, *argv: str) -> str:
        """The one stderr line of a command the server must refuse with ``code``."""
        result = self(*argv)
        assert result.code == 1, (result.out, result.err)
        assert result.out == ""
        assert result.err.startswith(f"wf: error: {code}: "), result.err
        assert result.err.count("\n") == 1
        return result.err

    def file(self, body: Any) -> str:
        """A new file under ``tmp`` holding ``body`` as JSON; returns its path."""
        self.files += 1
        path = self.tmp / f"body-{self.files}.json"
        path.write_text(json.dumps(body))
        return str(path)
