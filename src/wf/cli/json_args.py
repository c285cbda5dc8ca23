"""JSON read from the command line and from files named on it, held to what wf stores.

Python's ``json`` reads ``NaN``, ``Infinity`` and ``-Infinity``, and ``1e400``
as infinity; JSON has none of them and the client would send each as
``null``, silently. :func:`loads` refuses them (ValueError, like any other
text that is not JSON), so ``--input x=NaN`` is the string ``"NaN"`` and an
inputs file holding ``NaN`` is refused. So is text nested past Python's
recursion limit.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, NoReturn

from wf.cli.connect import UsageError


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a JSON number")
    return value


def loads(text: str) -> Any:
    """The JSON value of ``text``; ValueError if it is not JSON, holds ``NaN`` or
    ``Infinity``, a number too large for a double, or nests past Python's recursion
    limit (a RecursionError escaped as a traceback)."""
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def load_file(path: str) -> Any:
    """The JSON value in the file ``path`` (``-``: stdin), read with :func:`loads`.

    :class:`~wf.cli.connect.UsageError` when it cannot be read, is not UTF-8
    or is not JSON.
    """
    try:
        if path == "-":
            raw = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                raw = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not valid UTF-8") from None
    try:
        return loads(raw)
    except ValueError as exc:
        raise UsageError(f"{path}: not valid JSON: {exc}") from None
