"""Reports sent in one batch carry one next poll between them: the worker folds the
``poll`` of each report into the batch's last report (the outbox's ``prepare``), so
the server runs one dispatch pass per batch, after every completion in it has freed
its slot (docs/architecture.md, "A report carries the next poll").

The end-to-end behaviour (every activity runs once, within capacity, with few polls)
is covered against a real server by ``test_worker_report_poll.py``; these tests pin
the folding itself.
"""

from __future__ import annotations

import asyncio
import contextlib

import msgspec

from wf.wire.scheduler_methods import (
    COMPLETE_ACTIVITY,
    FAIL_ACTIVITY,
    RENEW_LEASE,
    CompleteParams,
    FailParams,
    RenewParams,
    ReportPoll,
)
from wf.worker import Worker, activity
from wf.worker.outbox import Outbox


@activity(name="noop")
def noop() -> None:
    """Never run: these tests only prepare batches."""


def _worker() -> Worker:
    return Worker("http://127.0.0.1:9", [noop], worker_id="w1", max_concurrency=8)


def _complete(aid: str, poll: ReportPoll | None) -> tuple[str, msgspec.Struct]:
    return COMPLETE_ACTIVITY.name, CompleteParams(activity_id=aid, token=1, poll=poll)


def test_two_reports_in_one_batch_send_one_poll_on_the_last_asking_for_both() -> None:
    worker = _worker()
    first = ReportPoll(worker_id="w1", max_items=3, start=2)
    second = ReportPoll(worker_id="w1", max_items=1, start=1)
    fail = FailParams(
        activity_id="a2", token=2, error_type="E", message="m", retryable=True, poll=second
    )
    renew = (RENEW_LEASE.name, RenewParams(activity_id="a9", token=9))
    calls = [_complete("a1", first), renew, (FAIL_ACTIVITY.name, fail)]

    sent = worker._one_poll_per_batch(calls)

    assert [method for method, _ in sent] == [method for method, _ in calls]
    assert sent[1] == renew
    first_sent, last_sent = sent[0][1], sent[2][1]
    assert isinstance(first_sent, CompleteParams)
    assert isinstance(last_sent, FailParams)
    assert first_sent.poll is None
    assert last_sent.poll == ReportPoll(worker_id="w1", max_items=4, start=3)
    # Everything else about each report is what its caller built.
    assert msgspec.structs.replace(first_sent, poll=first) == calls[0][1]
    assert msgspec.structs.replace(last_sent, poll=second) == fail


def test_a_batch_with_one_report_poll_is_sent_as_it_is() -> None:
    worker = _worker()
    calls = [
        _complete("a1", None),
        _complete("a2", ReportPoll(worker_id="w1", max_items=2, start=0)),
    ]
    assert worker._one_poll_per_batch(calls) is calls


def test_the_folded_poll_stays_within_the_learned_bound_and_starts_no_more_than_it_asks() -> None:
    worker = _worker()
    worker._poll_items_max = 5
    calls = [_complete(f"a{n}", ReportPoll(worker_id="w1", max_items=3, start=3)) for n in range(3)]

    sent = worker._one_poll_per_batch(calls)

    polls = [params.poll for _, params in sent if isinstance(params, CompleteParams)]
    assert polls[:2] == [None, None]
    assert polls[2] == ReportPoll(worker_id="w1", max_items=5, start=5)


class _Client:
    """Stands in for the RPC client: answers every call of a batch with its index."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, msgspec.Struct]]] = []

    async def batch(
        self, calls: list[tuple[str, msgspec.Struct]], timeout_s: float | None = None
    ) -> list[object]:
        self.batches.append(calls)
        return [{"index": n} for n in range(len(calls))]


def test_the_outbox_sends_a_batch_prepared_and_hands_its_answers_back_last_call_first() -> None:
    async def scenario() -> tuple[_Client, list[tuple[int, object]]]:
        client = _Client()
        prepared: list[int] = []

        def prepare(calls: list[tuple[str, msgspec.Struct]]) -> list[tuple[str, msgspec.Struct]]:
            prepared.append(len(calls))
            return [(method, RenewParams(activity_id="x", token=7)) for method, _ in calls]

        outbox = Outbox(client, prepare=prepare)  # type: ignore[arg-type]
        runner = asyncio.create_task(outbox.run())
        for _ in range(3):  # the senders start and wait for work
            await asyncio.sleep(0)
        resumed: list[tuple[int, object]] = []

        async def caller(n: int) -> None:
            answer = await outbox.call(RENEW_LEASE.name, RenewParams(activity_id=f"a{n}", token=n))
            resumed.append((n, answer))

        await asyncio.gather(*(caller(n) for n in range(3)))
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
        assert prepared == [3]
        return client, resumed

    client, resumed = asyncio.run(scenario())

    assert len(client.batches) == 1
    assert [params for _, params in client.batches[0]] == [
        RenewParams(activity_id="x", token=7)
    ] * 3
    # Each caller gets its own call's answer; the last call's caller resumes first.
    assert resumed == [(2, {"index": 2}), (1, {"index": 1}), (0, {"index": 0})]
