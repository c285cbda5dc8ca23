"""Rendering shared by the client commands: tables, key/value blocks, times, JSON.

Kept free of the client and the wire so that every command module can import
it without paying for them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final

TIME_KEYS: Final = frozenset(
    {
        "at",
        "candidate",
        "candidate_since",
        "deadline",
        "held_since",
        "occurrence",
        "since",
        "until",
        "watermark",
    }
)
"""Keys (besides every ``*_at``) whose numbers are instants in epoch seconds."""

_OPTIONAL_KEYS: Final = {
    "trace entry": ("output", "error", "wake_at", "activity_id", "attempts"),
    "schedule": ("pending", "blocked"),
    "occurrence": ("detail", "run_id"),
    "attempt": ("attempt", "started_at", "finished_at", "outcome", "error", "stack_trace"),
}
"""Keys the server leaves out when they have no value, by the shape of the object;
``--json`` prints them as ``null`` so that a script may index them blindly."""


def fail(message: str, code: int, *, as_json: bool = False, error_code: str = "usage") -> int:
    """Report a refusal on stderr and return the exit ``code``: one line
    ``wf: error: <message>``, or with ``as_json`` one JSON object
    ``{"error": {"code": ..., "message": ...}}``."""
    if as_json:
        print(
            json.dumps({"error": {"code": error_code, "message": message}}, sort_keys=True),
            file=sys.stderr,
        )
    else:
        print(f"wf: error: {' '.join(message.split())}", file=sys.stderr)
    return code


def emit(args: argparse.Namespace, answer: Any, text: Callable[[], str]) -> int:
    """Print ``answer`` as JSON with ``--json`` (see :func:`jsonable`), else ``text()``."""
    if args.json:
        print(json.dumps(jsonable(answer), indent=2, sort_keys=True))
    else:
        print(text())
    return 0


def iso(t: float) -> str:
    """Epoch seconds as an ISO 8601 UTC instant (the server's own form)."""
    return datetime.fromtimestamp(t, tz=UTC).isoformat()


def jsonable(value: Any, key: str = "") -> Any:
    """``value`` as ``--json`` prints it: plain JSON, every instant an ISO 8601 string
    (never epoch seconds, and an ``x_s`` epoch twin of an ISO ``x`` is dropped), and
    every field of a typed answer present (``null`` when it has no value)."""
    import msgspec

    from wf.wire.views import View

    if isinstance(value, View):
        # Every field under its wire name, but those the server did not send (UNSET).
        fields = msgspec.structs.fields(value)
        value = {f.encode_name: getattr(value, f.name) for f in fields}
        value = {k: v for k, v in value.items() if v is not msgspec.UNSET}
    elif isinstance(value, msgspec.Struct):
        value = {f: getattr(value, f) for f in value.__struct_fields__}
    if isinstance(value, dict):
        shown = {
            k: jsonable(v, k)
            for k, v in value.items()
            if not (k.endswith("_s") and isinstance(value.get(k[:-2]), str))
        }
        for k in _OPTIONAL_KEYS.get(_shape(shown), ()):
            shown.setdefault(k, None)
        return shown
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(jsonable(v) for v in value)
    is_time_key = key.endswith("_at") or key in TIME_KEYS
    if is_time_key and isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return iso(float(value))
        except (OverflowError, OSError, ValueError):
            return value
    return msgspec.to_builtins(value)


def _shape(view: dict[str, Any]) -> str:
    if "node" in view and "kind" in view and "status" in view:
        return "trace entry"
    if "schedule_id" in view and "trigger" in view and "revision" in view:
        return "schedule"
    if "schedule_id" in view and "instant" in view and "status" in view:
        return "occurrence"
    if "token" in view and "leased_at" in view:
        return "attempt"
    return ""


def more(page: dict[str, Any], hint: str = "") -> str:
    """The line that says how to read the next page (nothing on the last one)."""
    cursor = page["next_cursor"]
    return "" if cursor is None else f"\n\nmore: --cursor {cursor}{hint}"


def when(value: Any) -> str:
    """A POSIX time or an ISO 8601 instant as ``YYYY-MM-DDTHH:MM:SSZ`` (``-`` if none)."""
    if value is None:
        return "-"
    try:
        if isinstance(value, int | float):
            at = datetime.fromtimestamp(value, tz=UTC)
        else:
            at = datetime.fromisoformat(str(value)).astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        return str(value)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


_CONTROL: Final = {
    c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if chr(c) not in "\n\t"
}
"""Control characters (C0 but newline and tab, DEL, C1) to a visible escape."""


def printable(value: str) -> str:
    """``value`` with control characters shown as ``\\xNN``: a worker's error message or
    stack trace is its own text, and an ESC sequence in it must not drive the terminal
    of whoever reads it (newlines and tabs stay)."""
    return value.translate(_CONTROL)


def text(value: Any) -> str:
    """``value`` on one line (``-`` for none or empty)."""
    return "-" if value is None or value == "" else printable(" ".join(str(value).split()))


def pairs(items: Sequence[tuple[str, str]]) -> str:
    """``KEY  value`` lines with the keys padded to one width."""
    width = max(len(k) for k, _ in items)
    return "\n".join(f"{k.ljust(width)}  {text(v)}" for k, v in items)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    cells = [list(headers), *([text(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def run_trigger(trigger: Any) -> str:
    """A run's trigger in a few words (``schedule S @ instant``, ``manual``,
    ``manual (schedule S)`` for ``wf schedules trigger``, ...)."""
    if not isinstance(trigger, dict):
        return "-"
    if trigger.get("kind") == "manual" and trigger.get("schedule_id"):
        return f"manual (schedule {trigger['schedule_id']})"
    if trigger.get("schedule_id"):
        shown = f"schedule {trigger['schedule_id']}"
        if trigger.get("occurrence") is not None:
            shown += f" @ {when(trigger['occurrence'])}"
        return shown
    return str(trigger.get("kind", "-"))


def run_text(v: dict[str, Any]) -> str:
    """One run as a key/value block, then its trace as a table."""
    if "corrupt" in v:
        return pairs([("RUN", v["run_id"]), ("STATUS", "corrupt"), ("ERROR", v["corrupt"])])
    artifact = v.get("artifact") or {}
    steps = str(v.get("steps_used", "-"))
    if v.get("max_steps") is not None:
        steps += f" of {v['max_steps']}"
    items: list[tuple[str, str]] = [
        ("RUN", v["run_id"]),
        ("STATUS", v["status"]),
        ("DEPLOYMENT", f"{v['deployment_id']} (revision {v.get('deployment_revision', '-')})"),
        ("ARTIFACT", f"{artifact.get('artifact_id', '-')} v{artifact.get('version', '-')}"),
        ("TRIGGER", run_trigger(v.get("trigger"))),
        ("CREATED", when(v.get("created_at"))),
        ("STARTED", when(v.get("started_at"))),
        ("FINISHED", when(v.get("finished_at"))),
        ("STEPS", steps),
        ("INPUTS", json.dumps(v.get("inputs"), sort_keys=True)),
        ("OUTPUT", "-" if v.get("output") is None else json.dumps(v["output"], sort_keys=True)),
    ]
    if v.get("error") is not None:
        # The stack trace is printed below the table, on lines of its own.
        error = {k: e for k, e in v["error"].items() if k != "stack_trace"}
        items.append(("ERROR", json.dumps(error, sort_keys=True)))
    for waiting in v.get("awaiting") or []:
        items.append(("AWAITING", f"{waiting['node']}: {waiting['prompt']}"))
    shown = pairs(items)
    trace = v.get("trace") or []
    if trace:
        rows = [
            (
                t["node"],
                t["kind"],
                t["status"],
                when(t.get("started_at")),
                when(t.get("finished_at")),
                _attempt_count(t),
                _clip(node_error(t), 80),
            )
            for t in trace
        ]
        headers = ("NODE", "KIND", "STATUS", "STARTED", "FINISHED", "ATTEMPTS", "ERROR")
        shown += "\n\n" + table(headers, rows)
    stack_trace = (v.get("error") or {}).get("stack_trace")
    if stack_trace:
        node = v["error"].get("node", "-")
        shown += f"\n\nstack trace (node {node}, last attempt):\n{printable(stack_trace).rstrip()}"
    return shown


def _attempt_count(t: dict[str, Any]) -> str:
    """A trace entry's attempts: its own, or for a map node its items' summed (``-``
    for a node that runs no activity)."""
    if "attempts" in t:
        return str(len(t["attempts"]))
    if "items" in t:
        return str(sum(len(item.get("attempts") or []) for item in t["items"]))
    return "-"


def node_error(t: dict[str, Any]) -> str:
    """A trace entry's error in a few words: the node's own, else, while it is not done,
    its last attempt's (a node waiting to retry shows why), else nothing. A node that
    completed after failed attempts shows none: ``--attempts`` lists them."""
    error = t.get("error")
    if isinstance(error, dict):
        words = str(error.get("message", ""))
        if error.get("error_type") and not words.startswith(str(error["error_type"])):
            words = f"{error['error_type']}: {words}"
        return words
    attempts = t.get("attempts") or []
    if t.get("status") not in ("completed", "skipped") and attempts and attempts[-1].get("error"):
        return str(attempts[-1]["error"])
    if t.get("unserved"):
        return "waiting: no registered worker takes this activity type"
    return ""


def _clip(value: str, length: int) -> str:
    value = printable(" ".join(value.split()))
    return value if len(value) <= length else value[: length - 3] + "..."


def attempts_text(v: dict[str, Any]) -> str:
    """Every attempt of every activity node of a run (``wf runs inspect --attempts``):
    a table, then each failed attempt's stack trace.

    A map node's items are rows of their own, named ``<node>[<index>]``: one per
    attempt, or one showing the item's status while it has none (waiting, skipped)."""
    rows: list[tuple[str, ...]] = []
    traces: list[str] = []
    for t in v.get("trace") or []:
        _attempt_rows(t["node"], t, rows, traces)
        for item in t.get("items") or []:
            name = f"{t['node']}[{item.get('index', '?')}]"
            if not _attempt_rows(name, item, rows, traces):
                status = text(item.get("status"))
                rows.append((name, "-", "-", "-", "-", "-", status, _clip(node_error(item), 80)))
    if not rows:
        return f"run {v.get('run_id', '-')}: no attempts yet"
    headers = ("NODE", "ATTEMPT", "WORKER", "LEASED", "STARTED", "FINISHED", "OUTCOME", "ERROR")
    return "\n\n".join([table(headers, rows), *traces])


def _attempt_rows(
    name: str, t: dict[str, Any], rows: list[tuple[str, ...]], traces: list[str]
) -> bool:
    """Add the rows of ``t``'s attempts (a trace entry or a map item, shown as ``name``)
    and its stack traces and heartbeat details; whether it had any attempt."""
    found = t.get("attempts") or []
    for number, a in enumerate(found, start=1):
        rows.append(
            (
                name,
                str(a.get("attempt", number)),
                text(a.get("worker_id")),
                when(a.get("leased_at")),
                when(a.get("started_at")),
                when(a.get("finished_at")),
                text(a.get("outcome", "running")),
                _clip(str(a.get("error") or ""), 80),
            )
        )
        if a.get("stack_trace"):
            head = f"node {name}, attempt {a.get('attempt', number)}"
            traces.append(f"stack trace ({head}):\n{printable(a['stack_trace']).rstrip()}")
    if t.get("heartbeat_details") is not None:
        shown = json.dumps(t["heartbeat_details"], sort_keys=True)
        traces.append(f"heartbeat details (node {name}, latest): {_clip(shown, 2000)}")
    return bool(found)
