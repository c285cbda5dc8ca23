"""No interleaving of worker-protocol calls reaches an internal error (issue 13 item 5).

A hypothesis state machine drives a real :class:`~wf.server.app.WfServer`
(a fresh store per example, SQLite and PostgreSQL; port 0; the real HTTP and
JSON-RPC stack) with raw
JSON-RPC requests from several workers and an operator. Each step is a burst
of 1..6 calls issued at once (``asyncio.gather``), so that a call's command is
decided while another call's commit is still in flight: register, heartbeat,
poll (with and without waiting, with and without start-on-grant), start,
renew, complete and fail (with current and stale tokens, with and without
``unreported_start``), cancel, submit, shutdown, calls naming unknown
workers, admin reads, and time moving on (a virtual clock, so leases expire,
silent workers are declared lost and departed ones are purged while calls
are in flight).

What must hold, for every call and after every example:

- every answer is a result or a wf error (JSON-RPC code -32000..-32099), never
  an internal error (-32603, ``internal`` -32090, ``corrupt_record`` -32091)
  and never a protocol error (the calls are well formed);
- nothing is logged at error level (no ``rpc.internal_error``, no failed task,
  no HTTP 500);
- the API keeps per-worker state only for ids that registered (never for the
  unknown ids the calls also name);
- the server still commits afterwards, and a restart on its store recovers
  with no diagnostics.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from _pg import drop_schema, new_schema_name
from wf.scheduler.config import SchedulerConfig
from wf.server.app import RPC_PATH, WfServer
from wf.server.config import SecurityConfig, ServerConfig, ServerSection, StoreConfig
from wf.testing.clock import VirtualClock

LEASE_TTL_S = 10.0
HEARTBEAT_S = 2.0
"""Workers' heartbeat interval: silent for 3 × 2 s, a worker is declared lost."""
RETENTION_S = 20.0
"""Departed workers are purged this long after leaving, so purges happen mid-run."""
WORKERS = 3
INTERNAL_CODES = frozenset({-32603, -32090, -32091})
"""JSON-RPC internal error, wf ``internal`` and ``corrupt_record``."""
CALL_TIMEOUT_S = 10.0
"""Bound on one burst (real time); a long poll waits at most 0.05 s here."""


class ErrorLog(logging.Handler):
    """Keeps every record at error level or above, and every ``rpc.internal_error``."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or getattr(record, "action", "") == (
            "rpc.internal_error"
        ):
            self.records.append(record)


def _config(root: Path, dsn: str | None, schema: str) -> ServerConfig:
    return ServerConfig(
        server=ServerSection(
            port=0,
            store=StoreConfig(
                root=str(root), durability="process", postgres_dsn=dsn, postgres_schema=schema
            ),
            security=SecurityConfig(),
        ),
        dispatch=SchedulerConfig(
            lease_ttl_s=LEASE_TTL_S,
            heartbeat_misses_max=3,
            departed_worker_retention_s=RETENTION_S,
        ),
    )


# An operation is plain data (indices are resolved against what exists when it runs),
# so hypothesis can shrink a failing burst to the calls that matter.
worker_ix = st.integers(0, WORKERS - 1)
lease_ix = st.integers(0, 50)
activity_ix = st.integers(0, 50)
operation = st.one_of(
    st.tuples(st.just("register"), worker_ix, st.integers(1, 3)),
    st.tuples(st.just("heartbeat"), worker_ix),
    st.tuples(
        st.just("poll"),
        worker_ix,
        st.integers(1, 3),
        st.sampled_from([0.0, 0.0, 0.02, 0.05]),
        st.integers(0, 3),
    ),
    st.tuples(st.just("start"), lease_ix),
    st.tuples(st.just("renew"), lease_ix),
    st.tuples(st.just("complete"), lease_ix, st.booleans()),
    st.tuples(st.just("fail"), lease_ix, st.booleans(), st.booleans()),
    st.tuples(st.just("cancel"), activity_ix),
    st.tuples(st.just("get"), activity_ix),
    st.tuples(st.just("shutdown"), worker_ix),
    st.tuples(st.just("stranger"), st.sampled_from(["poll", "heartbeat", "shutdown"])),
    st.tuples(st.just("workers")),
    st.tuples(st.just("advance"), st.sampled_from([0.5, 3.0, LEASE_TTL_S + 1, RETENTION_S])),
)
submission = st.tuples(st.integers(1, 3), st.booleans(), st.integers(1, 3))
"""(how many, idempotent, max_attempts)."""
race_operation = st.one_of(
    st.tuples(st.sampled_from(["start", "renew"]), st.just(0)),
    st.tuples(st.just("complete"), st.just(0), st.booleans()),
    st.tuples(st.just("fail"), st.just(0), st.booleans(), st.booleans()),
    st.tuples(st.sampled_from(["cancel_held", "holder_heartbeat", "holder_shutdown"])),
    st.tuples(st.just("holder_poll"), st.sampled_from([0.0, 0.02])),
    st.tuples(st.just("advance"), st.sampled_from([0.5, LEASE_TTL_S, 3 * HEARTBEAT_S])),
)
"""What can happen to one freshly granted lease (index 0: the latest grant)."""


class WorkerProtocolMachine(RuleBasedStateMachine):
    """One fresh server per example (SQLite, or PostgreSQL with ``dsn``); rules are
    bursts of concurrent calls."""

    def __init__(self, dsn: str | None = None) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.root = Path(tempfile.mkdtemp(prefix="wf-proto-"))
        self.dsn = dsn
        self.schema = new_schema_name()
        self.clock = VirtualClock()
        self.errors = ErrorLog()
        logging.getLogger().addHandler(self.errors)
        self.config = _config(self.root, dsn, self.schema)
        self.server = WfServer(self.config, clock=self.clock)
        self.loop.run_until_complete(self.server.start())
        self.url = f"http://127.0.0.1:{self.server.port}{RPC_PATH}"
        self.session = self.loop.run_until_complete(self._session())
        self.ids = itertools.count(1)
        self.activities: list[str] = []
        self.leases: list[tuple[str, int]] = []
        """Every (activity id, token) ever granted: current and stale ones alike."""
        self.holder = self._worker(0)
        """The worker of the lease a race is about (``race_on_a_fresh_lease``)."""
        self.answers: list[tuple[str, dict[str, Any]]] = []

    @staticmethod
    async def _session() -> aiohttp.ClientSession:
        return aiohttp.ClientSession()

    # ------------------------------------------------------------- plumbing

    def _run(self, *calls: Any) -> list[Any]:
        async def burst() -> list[Any]:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                return list(await asyncio.gather(*calls))

        return self.loop.run_until_complete(burst())

    async def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        async with self.session.post(self.url, json=request) as response:
            assert response.status == 200, (method, response.status, await response.text())
            answer: dict[str, Any] = await response.json()
        self.answers.append((method, answer))
        result = answer.get("result")
        if method == "scheduler.workers.poll" and isinstance(result, dict):
            for grant in result.get("leases", []):
                lease = grant["lease"]
                self.leases.append((lease["activity_id"], lease["token"]))
        return answer

    def _worker(self, index: int) -> str:
        return f"w{index}"

    def _lease(self, index: int) -> tuple[str, int]:
        if not self.leases:
            return ("no-such-activity", 1)
        # Mostly recent leases (likely current), sometimes old ones (likely stale).
        return self.leases[-1 - index % len(self.leases)]

    def _activity(self, index: int) -> str:
        return self.activities[index % len(self.activities)] if self.activities else "nothing"

    async def _advance(self, seconds: float) -> dict[str, Any]:
        self.clock.advance(seconds)  # wakes the node's tick loop on this clock
        await asyncio.sleep(0)
        return {"result": None}

    def _op(self, op: tuple[Any, ...]) -> Any:
        kind = op[0]
        call = self._call
        if kind == "register":
            info = {
                "worker_id": self._worker(op[1]),
                "max_concurrency": op[2],
                "heartbeat_interval_s": HEARTBEAT_S,
            }
            return call("scheduler.workers.register", {"info": info})
        if kind == "heartbeat":
            return call("scheduler.workers.heartbeat", {"worker_id": self._worker(op[1])})
        if kind == "poll":
            _, w, max_items, wait_s, start = op
            params = {
                "worker_id": self._worker(w),
                "max_items": max_items,
                "wait_s": wait_s,
                "start": min(start, max_items),
            }
            return call("scheduler.workers.poll", params)
        if kind in ("start", "renew"):
            activity_id, token = self._lease(op[1])
            return call(f"scheduler.leases.{kind}", {"activity_id": activity_id, "token": token})
        if kind == "complete":
            activity_id, token = self._lease(op[1])
            params = {"activity_id": activity_id, "token": token, "unreported_start": op[2]}
            return call("scheduler.leases.complete", params)
        if kind == "fail":
            activity_id, token = self._lease(op[1])
            params = {
                "activity_id": activity_id,
                "token": token,
                "error_type": "Boom",
                "message": "failed on purpose",
                "retryable": op[2],
                "unreported_start": op[3],
            }
            return call("scheduler.leases.fail", params)
        if kind == "cancel":
            return call(
                "scheduler.activities.cancel",
                {"activity_id": self._activity(op[1]), "reason": "operator"},
            )
        if kind == "get":
            return call("scheduler.activities.get", {"activity_id": self._activity(op[1])})
        if kind == "shutdown":
            return call("scheduler.workers.shutdown", {"worker_id": self._worker(op[1])})
        if kind == "stranger":
            return call(f"scheduler.workers.{op[1]}", {"worker_id": f"stranger-{next(self.ids)}"})
        if kind == "workers":
            return call("scheduler.workers.list", {})
        if kind == "cancel_held":
            return call(
                "scheduler.activities.cancel",
                {"activity_id": self._lease(0)[0], "reason": "operator"},
            )
        if kind == "holder_heartbeat":
            return call("scheduler.workers.heartbeat", {"worker_id": self.holder})
        if kind == "holder_shutdown":
            return call("scheduler.workers.shutdown", {"worker_id": self.holder})
        if kind == "holder_poll":
            return call(
                "scheduler.workers.poll", {"worker_id": self.holder, "wait_s": op[1], "start": 1}
            )
        assert kind == "advance"
        return self._advance(op[1])

    def _submit(self, spec: tuple[int, bool, int]) -> Any:
        count, idempotent, max_attempts = spec
        batch = []
        for _ in range(count):
            activity_id = f"act-{next(self.ids)}"
            self.activities.append(activity_id)
            batch.append(
                {
                    "activity_id": activity_id,
                    "activity_type": "t",
                    "idempotent": idempotent,
                    "retry": {"max_attempts": max_attempts, "initial_backoff_s": 0.0},
                }
            )
        return self._call("scheduler.activities.submit", {"activities": batch})

    # ---------------------------------------------------------------- rules

    @initialize()
    def workers_and_work(self) -> None:
        """Every worker registered and some work queued, so leases exist from the start."""
        self._run(
            *(
                self._call(
                    "scheduler.workers.register",
                    {
                        "info": {
                            "worker_id": self._worker(w),
                            "max_concurrency": 2,
                            "heartbeat_interval_s": HEARTBEAT_S,
                        }
                    },
                )
                for w in range(WORKERS)
            ),
            self._submit((3, False, 2)),
            self._submit((3, True, 1)),
        )

    @rule(
        worker=worker_ix,
        idempotent=st.booleans(),
        started=st.booleans(),
        ops=st.lists(race_operation, min_size=2, max_size=5),
    )
    def race_on_a_fresh_lease(
        self, worker: int, idempotent: bool, started: bool, ops: list[tuple[Any, ...]]
    ) -> None:
        """Take one fresh lease, then let several things happen to it at once (the
        interleavings of item 5: renew or start against complete, cancel, expiry,
        worker loss or shutdown)."""
        wid = self.holder = self._worker(worker)
        info = {"worker_id": wid, "max_concurrency": 3, "heartbeat_interval_s": HEARTBEAT_S}
        self._run(
            self._call("scheduler.workers.register", {"info": info}),
            self._submit((1, idempotent, 2)),
        )
        (polled,) = self._run(
            self._call(
                "scheduler.workers.poll",
                {"worker_id": wid, "max_items": 1, "wait_s": 0.0, "start": int(started)},
            )
        )
        if not polled.get("result", {}).get("leases"):
            return  # The worker was busy or other work came first: nothing to race on.
        self._run(*(self._op(op) for op in ops))

    @rule(
        ops=st.lists(operation, min_size=1, max_size=6),
        submissions=st.lists(submission, max_size=2),
    )
    def burst(self, ops: list[tuple[Any, ...]], submissions: list[tuple[int, bool, int]]) -> None:
        """Several calls at once, submissions among them."""
        calls = [self._op(op) for op in ops] + [self._submit(s) for s in submissions]
        self._run(*calls)

    @rule(worker=worker_ix, capacity=st.integers(1, 3))
    def worker_round(self, worker: int, capacity: int) -> None:
        """One worker's ordinary round, racing nothing but the tick loop: register, poll
        with start, then complete everything it got (keeps work flowing)."""
        wid = self._worker(worker)
        info = {"worker_id": wid, "max_concurrency": capacity, "heartbeat_interval_s": HEARTBEAT_S}
        (registered,) = self._run(self._call("scheduler.workers.register", {"info": info}))
        if "error" in registered:
            return
        (polled,) = self._run(
            self._call(
                "scheduler.workers.poll",
                {"worker_id": wid, "max_items": capacity, "wait_s": 0.0, "start": capacity},
            )
        )
        grants = polled.get("result", {}).get("leases", [])
        self._run(
            *(
                self._call(
                    "scheduler.leases.complete",
                    {
                        "activity_id": g["lease"]["activity_id"],
                        "token": g["lease"]["token"],
                        "unreported_start": True,
                    },
                )
                for g in grants
            )
        )

    # ----------------------------------------------------------- invariants

    @invariant()
    def per_worker_state_only_for_registered_ids(self) -> None:
        # Strangers' ids (a fresh one per call) are never kept: memory is bounded by
        # the workers that registered, whatever ids the calls name.
        api = self.server.scheduler
        registered = {self._worker(w) for w in range(WORKERS)}
        for kept in (api._mailbox, api._revoked, api._arrived):
            assert set(kept) <= registered, sorted(kept)

    @invariant()
    def no_internal_error_was_answered_or_logged(self) -> None:
        for method, answer in self.answers:
            error = answer.get("error")
            if error is None:
                continue
            code = error["code"]
            assert code not in INTERNAL_CODES, (method, error)
            assert -32099 <= code <= -32000, (method, error)
        self.answers.clear()
        assert not self.errors.records, [
            (r.name, r.getMessage(), getattr(r, "action", None)) for r in self.errors.records
        ]

    def teardown(self) -> None:
        try:
            self._finish()
        finally:
            logging.getLogger().removeHandler(self.errors)
            self.loop.close()
            shutil.rmtree(self.root, ignore_errors=True)
            if self.dsn is not None:
                drop_schema(self.dsn, self.schema)

    def _finish(self) -> None:
        # The server still commits: an ordinary submission goes through.
        (answer,) = self._run(self._submit((1, False, 1)))
        assert "result" in answer, answer
        self.loop.run_until_complete(self.session.close())
        self.loop.run_until_complete(self.server.stop())
        # And it comes back: a restart on the same store recovers cleanly.
        again = WfServer(self.config, clock=self.clock)
        self.loop.run_until_complete(again.start())
        try:
            assert again.recovery is not None
            assert again.recovery.diagnostics == []
        finally:
            self.loop.run_until_complete(again.stop())
        self.no_internal_error_was_answered_or_logged()


def test_no_interleaving_answers_an_internal_error_on_sqlite() -> None:
    run_state_machine_as_test(
        WorkerProtocolMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_no_interleaving_answers_an_internal_error_on_postgres(pg_dsn: str) -> None:
    # Fewer examples: each one migrates a schema of its own.
    run_state_machine_as_test(
        lambda: WorkerProtocolMachine(pg_dsn),
        settings=settings(
            max_examples=12,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
