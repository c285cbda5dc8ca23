"""A real scheduler process for crash tests: durable load, an acknowledgement log, nothing else.

The project's own fixture for ``test_crash.py`` (not part of the shipped test
kit), run as a script. Usage::

    python tests/node/crash_target.py (--store-root DIR | --postgres DSN --schema S)
        --ack-file PATH --seed N [--durability fsync|process]
        [--ops-max N] [--seconds-max S]

Theory of operation
-------------------
The process starts a :class:`~wf.node.SchedulerNode` (real :class:`SystemClock`,
background tick loop on) over the given store, which runs WF-005 §23 recovery,
then drives it like a small fleet would: it registers a few workers through
the node and loops over submitting small batches of activities, polling,
starting, completing (sometimes several at once, so appends share a group
commit), failing, renewing and cancelling, and now and then lets a worker
vanish (it stops heartbeating; the node's tick loop declares it lost). It stops
itself after ``--ops-max`` operations or ``--seconds-max`` seconds, or whenever
the test kills it with ``SIGKILL``.

Every command goes through :meth:`SchedulerNode.execute`, which returns only
once the command's records are committed. Only *then* does this process append
one JSON line to the acknowledgement file (``--ack-file``) saying what was
acknowledged, and fsync it. So every line in the file describes state that must
survive a ``SIGKILL`` at any instant; the crash test checks the store against
it. Lines (``op`` is the kind):

* ``ready``: recovery finished (``run``, ``pid``, ``report``: the RecoveryReport);
* ``register``: a worker was registered (``worker``);
* ``submit``: activities were accepted (``ids``);
* ``lease``: leases were granted (``grants``: ``[activity id, token, attempt]``);
* ``start``/``complete``/``fail``: fenced calls accepted (``id``, ``token``,
  ``attempt``; ``fail`` adds ``to``, the state the activity went to);
* ``renew``/``cancel``: a lease renewal (``id``, ``token``), a cancellation (``id``);
* ``lost``: workers declared lost on purpose (``workers``);
* ``done``: the bounded run ended and the node stopped cleanly (``ops``).

Activity ids are unique per run and across restarts: they carry the run
number (one more than the ``ready`` lines already in the file) and the pid. A
line cut short by a kill is dropped at the next start, before anything is
appended. The ready line is also printed on stdout (one JSON object), so the
test knows recovery is over.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec

from wf.clock import SystemClock
from wf.errors import Conflict, NotFound, OwnershipConflict, WfError
from wf.node import RecoveryReport, SchedulerNode
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.model import (
    Activity,
    ActivityState,
    Priority,
    RetryPolicy,
    WorkerInfo,
    WorkerStatus,
)
from wf.scheduler.outputs import (
    ActivityCompleted,
    LeaseGranted,
    LeaseRevoked,
    Outcome,
    Transition,
    WorkerFailed,
)
from wf.store import make_store

LEASE_TTL_S: Final = 1.0
"""Short leases, so that expiry (during a run and across a restart) really happens."""
HEARTBEAT_INTERVAL_S: Final = 0.25
"""Workers' promised heartbeat interval (lost after three missed ones)."""
HEARTBEAT_EVERY_S: Final = 0.1
"""How often this process heartbeats its live workers."""
WORKERS_PER_RUN: Final = 3
"""Workers registered at start-up (a vanished one is replaced)."""
WORKER_CONCURRENCY: Final = 4
"""Leases one worker holds at most."""
SUBMIT_BATCH_MAX: Final = 4
"""Most activities per Submit."""
COMPLETE_TOGETHER_MAX: Final = 3
"""Most completions sent concurrently (they share a group commit)."""
OWNERSHIP_WAIT_MAX_S: Final = 15.0
"""How long start-up waits for a killed predecessor's ownership to lapse."""
OWNERSHIP_RETRY_PAUSE_S: Final = 0.05
"""Pause between two ownership attempts."""
OPS_MAX_DEFAULT: Final = 100_000
SECONDS_MAX_DEFAULT: Final = 60.0

_REFUSED: Final = (Conflict, NotFound)
"""Typed refusals a racing or stale caller provokes (expired or revoked leases, lost workers)."""


class AckFile:
    """The append-only, fsynced acknowledgement log."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.runs = 0
        """``ready`` lines already in the file (previous runs that finished recovery)."""
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        data = path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) != len(data):
            # A line cut short by a kill: its command was durable, its ack was not.
            os.ftruncate(self._fd, len(complete))
            os.fsync(self._fd)
        for line in complete.splitlines():
            if json.loads(line).get("op") == "ready":
                self.runs += 1

    def write(self, entry: dict[str, Any]) -> None:
        """Append one line and make it durable before returning."""
        os.write(self._fd, json.dumps(entry, separators=(",", ":")).encode() + b"\n")
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def _heartbeat(worker_id: str) -> Callable[[float], cmd.Command]:
    return lambda t: cmd.Heartbeat(now=t, worker_id=worker_id)


@dataclass
class _Held:
    worker_id: str
    token: int
    started: bool = False


@dataclass
class Workload:
    """The load generator: one random operation per :meth:`step`."""

    node: SchedulerNode
    acks: AckFile
    rng: random.Random
    prefix: str
    live: list[str] = field(default_factory=list)
    held: dict[str, _Held] = field(default_factory=dict)
    unfinished: list[str] = field(default_factory=list)
    ops: int = 0
    refused: int = 0
    _ids: int = 0
    _workers: int = 0
    _last_heartbeat: float = 0.0

    async def run(self, ops_max: int, seconds_max: float) -> None:
        """Set up workers, then step until a bound is reached."""
        await self._lose_previous_workers()
        for _ in range(WORKERS_PER_RUN):
            await self._register()
        deadline = time.monotonic() + seconds_max
        while self.ops < ops_max and time.monotonic() < deadline:
            await self.step()

    async def step(self) -> None:
        """One operation, chosen at random (heartbeats whenever they are due)."""
        self.ops += 1
        now = self.node.clock.now()
        if now - self._last_heartbeat >= HEARTBEAT_EVERY_S:
            self._last_heartbeat = now
            for wid in list(self.live):
                await self._call(_heartbeat(wid))
        actions: list[tuple[int, Callable[[], Awaitable[None]]]] = [
            (25, self._submit),
            (20, self._poll),
            (15, self._start),
            (15, self._complete),
            (7, self._fail),
            (8, self._renew),
            (3, self._cancel),
            (2, self._vanish),
        ]
        weights = [w for w, _ in actions]
        _, action = self.rng.choices(actions, weights=weights)[0]
        await action()

    # ----------------------------------------------------------------- helpers

    async def _call(self, make: Callable[[float], cmd.Command]) -> Outcome | None:
        """Execute; ``None`` if the core refused (the leases it named are dropped)."""
        try:
            outcome = await self.node.execute(make)
        except _REFUSED:
            self.refused += 1
            return None
        self._observe(outcome)
        return outcome

    def _observe(self, outcome: Outcome) -> None:
        for d in outcome.decisions:
            if isinstance(d, LeaseRevoked):
                held = self.held.get(d.activity_id)
                if held is not None and held.token == d.token:
                    del self.held[d.activity_id]
            elif isinstance(d, WorkerFailed):
                self._forget_worker(d.worker_id)

    def _forget_worker(self, worker_id: str) -> None:
        if worker_id in self.live:
            self.live.remove(worker_id)
        for aid in [aid for aid, h in self.held.items() if h.worker_id == worker_id]:
            del self.held[aid]

    def _pick_held(self, started: bool) -> tuple[str, _Held] | None:
        choices = sorted(aid for aid, h in self.held.items() if h.started is started)
        if not choices:
            return None
        aid = self.rng.choice(choices)
        return aid, self.held[aid]

    def _attempt(self, outcome: Outcome, activity_id: str) -> int:
        for r in outcome.records:
            if isinstance(r, Transition) and r.activity_id == activity_id:
                return r.attempt
        return 0

    # -------------------------------------------------------------- operations

    async def _lose_previous_workers(self) -> None:
        """Sometimes declare the previous runs' workers lost (else missed heartbeats do)."""
        if self.rng.random() >= 0.3:
            return
        # Read-only look at the recovered registry, as a supervisor that knows
        # those worker processes died with the old scheduler would.
        gone = sorted(
            wid
            for wid, w in self.node.core.registry.workers.items()
            if w.status in (WorkerStatus.ACTIVE, WorkerStatus.DRAINING)
        )
        if gone and await self._call(lambda t: cmd.WorkersLost(now=t, worker_ids=tuple(gone))):
            self.acks.write({"op": "lost", "workers": gone})

    async def _register(self) -> None:
        self._workers += 1
        wid = f"w{self.prefix}-{self._workers}"
        info = WorkerInfo(
            worker_id=wid,
            max_concurrency=WORKER_CONCURRENCY,
            heartbeat_interval_s=HEARTBEAT_INTERVAL_S,
        )
        await self.node.execute(lambda t: cmd.RegisterWorker(now=t, info=info))
        self.live.append(wid)
        self.acks.write({"op": "register", "worker": wid})

    async def _submit(self) -> None:
        rng = self.rng
        now = self.node.clock.now()
        batch: list[Activity] = []
        for _ in range(rng.randint(1, SUBMIT_BATCH_MAX)):
            self._ids += 1
            batch.append(
                Activity(
                    activity_id=f"a{self.prefix}-{self._ids}",
                    activity_type="t",
                    idempotent=rng.random() < 0.5,
                    priority=rng.choice(list(Priority)),
                    ordering_key=f"k{rng.randint(0, 3)}" if rng.random() < 0.1 else None,
                    not_before=now + rng.uniform(0.05, 0.5) if rng.random() < 0.15 else None,
                    retry=RetryPolicy(
                        max_attempts=rng.randint(1, 3),
                        initial_backoff_s=0.02,
                        max_backoff_s=0.2,
                    ),
                )
            )
        activities = tuple(batch)
        if await self._call(lambda t: cmd.Submit(now=t, activities=activities)) is None:
            raise AssertionError("a submission of fresh ids was refused")
        ids = [a.activity_id for a in activities]
        self.unfinished.extend(ids)
        self.acks.write({"op": "submit", "ids": ids})

    async def _poll(self) -> None:
        free = {
            wid: WORKER_CONCURRENCY - sum(1 for h in self.held.values() if h.worker_id == wid)
            for wid in self.live
        }
        candidates = sorted(wid for wid, n in free.items() if n > 0)
        if not candidates:
            return
        wid = self.rng.choice(candidates)
        outcome = await self._call(lambda t: cmd.Poll(now=t, worker_id=wid, max_items=free[wid]))
        if outcome is None:
            self._forget_worker(wid)
            return
        await self._call(lambda t: cmd.CancelPoll(now=t, worker_id=wid))
        grants = [d.lease for d in outcome.decisions if isinstance(d, LeaseGranted)]
        for lease in grants:
            self.held[lease.activity_id] = _Held(lease.worker_id, lease.token)
        if grants:
            self.acks.write(
                {"op": "lease", "grants": [[g.activity_id, g.token, g.attempt] for g in grants]}
            )

    async def _start(self) -> None:
        picked = self._pick_held(started=False)
        if picked is None:
            return
        aid, held = picked
        outcome = await self._call(
            lambda t: cmd.StartActivity(now=t, activity_id=aid, token=held.token)
        )
        if outcome is None:
            self.held.pop(aid, None)
            return
        held.started = True
        attempt = self._attempt(outcome, aid)
        self.acks.write({"op": "start", "id": aid, "token": held.token, "attempt": attempt})

    async def _complete(self) -> None:
        picks: list[tuple[str, _Held]] = []
        for _ in range(self.rng.randint(1, COMPLETE_TOGETHER_MAX)):
            picked = self._pick_held(started=True)
            if picked is not None and picked not in picks:
                picks.append(picked)
        await asyncio.gather(*(self._complete_one(aid, held) for aid, held in picks))

    async def _complete_one(self, aid: str, held: _Held) -> None:
        outcome = await self._call(
            lambda t: cmd.Complete(now=t, activity_id=aid, token=held.token, result=b"ok")
        )
        self.held.pop(aid, None)
        if outcome is None:
            return
        done = [d for d in outcome.decisions if isinstance(d, ActivityCompleted)]
        self.acks.write(
            {"op": "complete", "id": aid, "token": held.token, "attempt": done[0].attempt}
        )

    async def _fail(self) -> None:
        picked = self._pick_held(started=True)
        if picked is None:
            return
        aid, held = picked
        retryable = self.rng.random() < 0.8
        outcome = await self._call(
            lambda t: cmd.Fail(
                now=t, activity_id=aid, token=held.token, error_type="Boom", retryable=retryable
            )
        )
        self.held.pop(aid, None)
        if outcome is None:
            return
        moved = [r for r in outcome.records if isinstance(r, Transition) and r.activity_id == aid]
        self.acks.write(
            {
                "op": "fail",
                "id": aid,
                "token": held.token,
                "attempt": moved[0].attempt,
                "to": moved[0].to_state.value,
            }
        )

    async def _renew(self) -> None:
        picked = self._pick_held(started=self.rng.random() < 0.7)
        if picked is None:
            return
        aid, held = picked
        outcome = await self._call(
            lambda t: cmd.RenewLease(now=t, activity_id=aid, token=held.token)
        )
        if outcome is None:
            self.held.pop(aid, None)
            return
        self.acks.write({"op": "renew", "id": aid, "token": held.token})

    async def _cancel(self) -> None:
        if not self.unfinished:
            return
        aid = self.unfinished.pop(self.rng.randrange(len(self.unfinished)))
        if aid not in self.node.core.activities:
            return
        outcome = await self._call(lambda t: cmd.Cancel(now=t, activity_id=aid))
        if outcome is None:
            return
        self.held.pop(aid, None)
        if any(
            isinstance(r, Transition) and r.to_state is ActivityState.CANCELLED
            for r in outcome.records
        ):
            self.acks.write({"op": "cancel", "id": aid})

    async def _vanish(self) -> None:
        """A worker stops acting and heartbeating; the tick loop will declare it lost."""
        if not self.live:
            return
        wid = self.rng.choice(self.live)
        self._forget_worker(wid)
        await self._register()


async def _start_node(args: argparse.Namespace) -> tuple[SchedulerNode, RecoveryReport, int]:
    """A started node; waits (bounded) while a killed predecessor still owns the store."""
    config = SchedulerConfig(lease_ttl_s=LEASE_TTL_S)
    waited = 0
    give_up_at = time.monotonic() + OWNERSHIP_WAIT_MAX_S
    while True:
        store = make_store(
            store_root=args.store_root,
            postgres_dsn=args.postgres,
            postgres_schema=args.schema,
            durability=args.durability,
        )
        node = SchedulerNode(store, config, clock=SystemClock())
        try:
            report = await node.start(background=True)
        except OwnershipConflict:
            if time.monotonic() >= give_up_at:
                raise
            waited += 1
            await asyncio.sleep(OWNERSHIP_RETRY_PAUSE_S)
            continue
        return node, report, waited


async def run(args: argparse.Namespace) -> int:
    """The whole process: recover, acknowledge readiness, load, stop cleanly."""
    acks = AckFile(Path(args.ack_file))
    try:
        run_no = acks.runs + 1
        pid = os.getpid()
        node, report, waited = await _start_node(args)
        ready = {
            "op": "ready",
            "run": run_no,
            "pid": pid,
            "ownership_waits": waited,
            "report": msgspec.to_builtins(report),
        }
        acks.write(ready)
        print(json.dumps(ready, separators=(",", ":")), flush=True)
        rng = random.Random(f"{args.seed}:{run_no}:{pid}")
        workload = Workload(node=node, acks=acks, rng=rng, prefix=f"{run_no}-{pid}")
        try:
            await workload.run(args.ops_max, args.seconds_max)
        finally:
            await node.stop()
        done = {"op": "done", "ops": workload.ops, "refused": workload.refused}
        acks.write(done)
        print(json.dumps(done, separators=(",", ":")), flush=True)
    finally:
        acks.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line of the crash target."""
    parser = argparse.ArgumentParser(
        prog="crash_target.py", description="a scheduler process to kill"
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--store-root", help="embedded store folder (SQLite)")
    where.add_argument("--postgres", metavar="DSN", help="PostgreSQL DSN")
    parser.add_argument("--schema", default="wf", help="PostgreSQL schema (default: wf)")
    parser.add_argument("--ack-file", required=True, help="acknowledgement log (JSON lines)")
    parser.add_argument("--seed", type=int, required=True, help="seed of the random load")
    parser.add_argument("--durability", choices=("fsync", "process"), default="fsync")
    parser.add_argument("--ops-max", type=int, default=OPS_MAX_DEFAULT, help="stop after N ops")
    parser.add_argument(
        "--seconds-max", type=float, default=SECONDS_MAX_DEFAULT, help="stop after S seconds"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; exit 0 after a clean bounded run, 2 on a typed error."""
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(run(args))
    except WfError as exc:
        print(f"crash_target: error: {exc.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
