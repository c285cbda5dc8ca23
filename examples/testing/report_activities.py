"""The activities of a daily sales report: your own code, declared with ``@activity``.

``fetch_sales`` and ``summarize`` are pure; ``publish`` sends through ``RELAY``, a
stand-in for your mail client that a test can make fail; ``archive`` is long work
that heartbeats its progress, resumes where an earlier attempt stopped, and stops
when cancelled.
"""

from __future__ import annotations

from typing import Any

from wf.scheduler.model import RetryPolicy
from wf.worker import activity, heartbeat, is_cancelled, last_heartbeat_details

SALES: dict[str, list[int]] = {"north": [120, 80], "south": [200], "west": [50, 50, 50]}
"""Stands in for your database."""


class Relay:
    """Stands in for your mail client: keeps what it sent; ``failures`` makes the next
    sends fail (a busy relay), as a test wants it."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.failures = 0

    def send(self, text: str) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("the mail relay is busy")
        self.sent.append(text)


RELAY = Relay()


@activity(name="fetch_sales", idempotent=True)
def fetch_sales(region: str) -> dict[str, Any]:
    """The region's sales total."""
    return {"region": region, "total": sum(SALES[region])}


@activity(name="summarize", idempotent=True)
def summarize(totals: list[dict[str, Any]]) -> dict[str, Any]:
    """One line for the report, and the grand total."""
    text = ", ".join(f"{t['region']} {t['total']}" for t in totals)
    return {"text": text, "total": sum(t["total"] for t in totals)}


@activity(
    name="publish",
    idempotent=True,
    # A busy relay is retried a minute later (no jitter: a test can name the instant).
    retry=RetryPolicy(max_attempts=3, initial_backoff_s=60.0, jitter_fraction=0.0),
)
def publish(text: str) -> dict[str, Any]:
    """Mail the report."""
    RELAY.send(text)
    return {"sent": text}


@activity(name="archive", idempotent=True)
def archive(files: list[str]) -> dict[str, Any]:
    """Archive ``files`` one by one, heartbeating after each; a retried attempt skips
    what an earlier one reported done, and a cancelled one stops between files."""
    done: int = (last_heartbeat_details() or {"done": 0})["done"]
    for index in range(done, len(files)):
        if is_cancelled():
            return {"archived": index}  # discarded: the attempt was cancelled
        heartbeat({"done": index + 1})
    return {"archived": len(files), "skipped": done}
