"""The load client: submits ledger activities through a failover and keeps every
acknowledged id.

It runs its own event loop on a thread with one :class:`wf.client.App` given
every node's URL (the client follows ``not_leader`` and rotates on transport
errors). A submission that fails with a *retryable* error (``not_leader``
while nobody is active yet, ``unavailable``, a store that stopped taking
writes) is sent again unchanged, the same id with the same content, until
it is acknowledged or :data:`RETRY_BUDGET_S` has passed: submissions are
idempotent by content (issue 15), so a retry of one that did commit is
acknowledged with the existing activity. Only an answered call counts as
acknowledged; the checks then demand every acknowledged id in the store.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from wf.client.app import App
from wf.errors import WfError

from .ledger_app import ledger

RETRY_BUDGET_S: Final = 40.0
"""How long one submission is retried before the load gives up on it (a failure)."""
RETRY_PAUSE_S: Final = 0.05
"""Pause between two sends of one submission."""


@dataclass
class LoadReport:
    """What the load client saw."""

    acknowledged: list[str] = field(default_factory=list)
    """Ids whose submission was answered with success, in order."""
    retries: int = 0
    """Sends beyond the first, over all submissions."""
    retry_errors: dict[str, int] = field(default_factory=dict)
    """Error code → how many sends failed with it and were retried."""
    refused: list[tuple[str, str]] = field(default_factory=list)
    """(id, error) of submissions that failed for good (non-retryable or out of budget)."""
    ack_times: dict[str, float] = field(default_factory=dict)
    """Wall time of each acknowledgement."""


class Load:
    """Submits one ``ha.ledger`` activity every ``1 / rate_per_s`` seconds on a thread."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        prefix: str,
        rate_per_s: float = 10.0,
        work_s: float = 0.3,
    ) -> None:
        self.urls = list(urls)
        self.prefix = prefix
        self.interval_s = 1.0 / rate_per_s
        self.work_s = work_s
        self.report = LoadReport()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"load-{prefix}")
        self._sent = 0

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = RETRY_BUDGET_S + 10) -> LoadReport:
        """Stop submitting new activities; wait for those in flight to be answered."""
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"the load client did not stop within {timeout_s} s")
        return self.report

    @property
    def acknowledged_count(self) -> int:
        return len(self.report.acknowledged)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        async with App(self.urls) as app:
            pending: set[asyncio.Task[None]] = set()
            next_at = time.monotonic()
            while not self._stop.is_set():
                aid = f"{self.prefix}-{self._sent:05d}"
                self._sent += 1
                task = asyncio.create_task(self._submit(app, aid))
                pending.add(task)
                task.add_done_callback(pending.discard)
                next_at += self.interval_s
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if pending:
                await asyncio.gather(*pending)

    async def _submit(self, app: App, aid: str) -> None:
        spec = ledger.activity(aid, args=(self.work_s,))
        deadline = time.monotonic() + RETRY_BUDGET_S
        first = True
        while True:
            if not first:
                self.report.retries += 1
            first = False
            try:
                await asyncio.wait_for(app.submit_activities([spec]), RETRY_BUDGET_S)
            except WfError as exc:
                if exc.retryable and time.monotonic() < deadline:
                    codes = self.report.retry_errors
                    codes[exc.code] = codes.get(exc.code, 0) + 1
                    await asyncio.sleep(RETRY_PAUSE_S)
                    continue
                self.report.refused.append((aid, f"{exc.code}: {exc.message}"))
                return
            except TimeoutError:
                self.report.refused.append((aid, "timeout"))
                return
            self.report.acknowledged.append(aid)
            self.report.ack_times[aid] = time.time()
            return
