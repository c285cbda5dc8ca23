"""The core's input log: record commands, replay them, print the decision stream.

Theory of operation
-------------------
Because the core is deterministic, its input log (the configuration, an
optional starting snapshot, and every command in order) fully determines
its decisions. A log is JSON lines: a header
``{"wf_log": 1, "config": {...}, "snapshot": {...} | null}`` and then one
command per line. :func:`replay` feeds the commands to a fresh (or
restored) core and yields one JSON line per command: its decisions, or the
typed error it was refused with (a refusal changes nothing, so replaying it
is harmless and keeps the streams comparable).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from wf.errors import InvalidArgument, WfError
from wf.scheduler.commands import Command
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.recovery import CoreSnapshot, restore

LOG_VERSION = 1


class LogHeader(msgspec.Struct, frozen=True, kw_only=True):
    """First line of an input log."""

    wf_log: int = LOG_VERSION
    """Log format version."""
    config: SchedulerConfig
    """Configuration of the recorded core."""
    snapshot: CoreSnapshot | None = None
    """State the recording started from (``None``: an empty core)."""


_encoder = msgspec.json.Encoder()
_command_decoder = msgspec.json.Decoder(Command)
_header_decoder = msgspec.json.Decoder(LogHeader)


def encode_log(header: LogHeader, commands: Iterable[Command]) -> bytes:
    """The JSON-lines form of a log."""
    lines = [_encoder.encode(header)]
    lines.extend(_encoder.encode(c) for c in commands)
    return b"\n".join(lines) + b"\n"


def decode_log(data: bytes) -> tuple[LogHeader, list[Command]]:
    """Parse a JSON-lines log; InvalidArgument names the first bad line."""
    lines = [line for line in data.splitlines() if line.strip()]
    if not lines:
        raise InvalidArgument("the log is empty")
    try:
        header = _header_decoder.decode(lines[0])
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"line 1: not a wf log header: {exc}", line=1) from exc
    except msgspec.DecodeError as exc:
        raise InvalidArgument(f"line 1: not JSON: {exc}", line=1) from exc
    if header.wf_log != LOG_VERSION:
        raise InvalidArgument(f"unsupported log version {header.wf_log}", line=1)
    commands: list[Command] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            commands.append(_command_decoder.decode(line))
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise InvalidArgument(f"line {number}: {exc}", line=number) from exc
    return header, commands


def start_core(header: LogHeader) -> SchedulerCore:
    """The core a log's commands apply to."""
    return SchedulerCore(header.config) if header.snapshot is None else restore(header.snapshot)


def replay(core: SchedulerCore, commands: Iterable[Command]) -> Iterator[bytes]:
    """Apply each command; yield one canonical JSON line per command."""
    for index, command in enumerate(commands):
        entry: dict[str, Any] = {"i": index}
        try:
            outcome = core.handle(command)
        except WfError as exc:
            entry["error"] = {"code": exc.code, "message": exc.message}
        else:
            entry["decisions"] = outcome.decisions
            entry["records"] = len(outcome.records)
        yield _encoder.encode(entry)
