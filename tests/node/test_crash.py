"""Crash tests: a real scheduler process under load, killed with SIGKILL again and again.

For each backend the test starts ``crash_target.py`` (beside this file) as a
real subprocess, waits for its ready line (recovery done), lets it work until its
acknowledgement file has grown by a random number of lines (so the kill lands
while real commits are under way, at a random point), kills it with
``SIGKILL`` and starts it again. A few kills land during start-up and recovery
instead; on SQLite each process draws its durability mode (``fsync`` or
``process``: both must survive a process kill). After the last restart the
target runs a bounded load and stops cleanly; then the store must agree with
everything the target ever acknowledged:

* every acknowledged submission is present, and no activity is lost (each is
  live in the loaded state in the state its history ends in, or finished);
* each history is a legal lifecycle chain; no activity completed twice, and an
  acknowledged completion is the completion recorded (same token, attempt);
* attempt and failure counts never went down along a history; a lease token
  is never granted twice (per activity or across activities);
* every acknowledged grant, start, failure and cancellation is in the history;
* ``store.check()`` and ``wf store check`` report nothing, and every recovery
  report had no diagnostics.

The run is reproducible in its choices by seed: ``WF_CRASH_SEED`` pins it,
otherwise a fresh one is drawn and printed (with the ack file's location)
when the test fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _node_locations import Location

from wf.cli.main import main as wf_main
from wf.scheduler.model import TERMINAL_STATES, ActivityState, check_transition
from wf.scheduler.outputs import Transition

KILLS_UNDER_LOAD = 25
"""Kills while the target is serving load (after its ready line), per backend."""
RECOVERY_KILLS = 5
"""Extra kills at a random instant of start-up (imports, recovery, first commands)."""
ACK_GROWTH_MAX = 40
"""Ack lines a target may add before it is killed (drawn from 1..this)."""
KILL_JITTER_MAX_S = 0.004
"""Random extra wait after the ack growth, so the kill lands mid-commit as often as not."""
RECOVERY_KILL_DELAY_MAX_S = 0.6
"""Latest instant after spawning at which a start-up kill lands."""
READY_TIMEOUT_S = 30.0
"""Longest a target may take to print its ready line."""
ACK_TIMEOUT_S = 20.0
"""Longest a target may take to add its drawn number of ack lines."""
FINAL_OPS = 60
"""Operations of the last, cleanly stopping run."""
FINAL_TIMEOUT_S = 60.0
"""Longest the last run may take to stop by itself."""
TARGET_SECONDS_MAX = 60.0
"""A target stops by itself after this long (it is always killed well before)."""
POLL_S = 0.001
"""How often the test looks at the target's output files."""
S = ActivityState
CRASH_TARGET = Path(__file__).with_name("crash_target.py")
"""The process under test, run as a script (it imports only the installed wf)."""


@dataclass
class CrashRun:
    """One crash campaign over one store location."""

    location: Location
    workdir: Path
    seed: int
    rng: random.Random = field(init=False)
    ack_file: Path = field(init=False)
    spawned: int = 0
    kills_under_load: int = 0
    recovery_kills: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.ack_file = self.workdir / "acks.jsonl"

    def describe(self) -> str:
        return f"crash test seed={self.seed} ack_file={self.ack_file} outputs={self.workdir}"

    # ---------------------------------------------------------------- process

    def spawn(self, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
        self.spawned += 1
        out = self.workdir / f"run-{self.spawned:03d}.out"
        err = self.workdir / f"run-{self.spawned:03d}.err"
        argv = [
            sys.executable,
            str(CRASH_TARGET),
            *self.location.args,
            "--ack-file",
            str(self.ack_file),
            "--seed",
            str(self.seed),
            "--seconds-max",
            str(TARGET_SECONDS_MAX),
            # Both SQLite modes must survive SIGKILL (PostgreSQL ignores the flag).
            "--durability",
            self.rng.choice(["fsync", "process"]),
            *extra,
        ]
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
        return proc, out

    def _died(self, proc: subprocess.Popen[bytes], what: str) -> AssertionError:
        err = self.workdir / f"run-{self.spawned:03d}.err"
        return AssertionError(
            f"target exited by itself ({proc.returncode}) {what}:\n{err.read_text()[-3000:]}"
        )

    def wait_ready(self, proc: subprocess.Popen[bytes], out: Path) -> None:
        give_up = time.monotonic() + READY_TIMEOUT_S
        while b'"op":"ready"' not in out.read_bytes():
            if proc.poll() is not None:
                raise self._died(proc, "before its ready line")
            assert time.monotonic() < give_up, "no ready line in time"
            time.sleep(POLL_S)

    def ack_lines(self) -> int:
        try:
            return self.ack_file.read_bytes().count(b"\n")
        except FileNotFoundError:
            return 0

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.returncode != -signal.SIGKILL:
            raise self._died(proc, "before the kill")

    def kill_under_load(self) -> None:
        proc, out = self.spawn()
        try:
            self.wait_ready(proc, out)
            target = self.ack_lines() + self.rng.randint(1, ACK_GROWTH_MAX)
            give_up = time.monotonic() + ACK_TIMEOUT_S
            while self.ack_lines() < target:
                if proc.poll() is not None:
                    raise self._died(proc, "under load")
                assert time.monotonic() < give_up, "the target stopped acknowledging"
                time.sleep(POLL_S)
            time.sleep(self.rng.uniform(0.0, KILL_JITTER_MAX_S))
        finally:
            if proc.poll() is None:
                self.kill(proc)
        self.kills_under_load += 1

    def kill_during_startup(self) -> None:
        proc, _out = self.spawn()
        try:
            time.sleep(self.rng.uniform(0.0, RECOVERY_KILL_DELAY_MAX_S))
        finally:
            if proc.poll() is None:
                self.kill(proc)
        if proc.returncode != -signal.SIGKILL:
            raise self._died(proc, "during start-up")
        self.recovery_kills += 1

    def final_clean_run(self) -> None:
        proc, _out = self.spawn("--ops-max", str(FINAL_OPS))
        try:
            proc.wait(timeout=FINAL_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                self.kill(proc)
        if proc.returncode != 0:
            raise self._died(proc, "in the final run (expected exit 0)")

    def campaign(self) -> None:
        kinds = ["load"] * KILLS_UNDER_LOAD + ["startup"] * RECOVERY_KILLS
        self.rng.shuffle(kinds)
        for kind in kinds:
            if kind == "load":
                self.kill_under_load()
            else:
                self.kill_during_startup()
        self.final_clean_run()

    # ------------------------------------------------------------ the verdict

    def acks(self) -> list[dict[str, Any]]:
        data = self.ack_file.read_bytes()
        return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines()]

    def ready_lines(self) -> list[dict[str, Any]]:
        """Every ready line printed on stdout (a killed run may have printed one)."""
        found = []
        for out in sorted(self.workdir.glob("run-*.out")):
            data = out.read_bytes()
            for line in data[: data.rfind(b"\n") + 1].splitlines():
                entry = json.loads(line)
                if entry.get("op") == "ready":
                    found.append(entry)
        return found


def check_history(activity_id: str, history: list[Transition], tokens: set[int]) -> None:
    """One activity's transitions: a legal chain whose counters never go down."""
    assert history, f"{activity_id}: no transitions"
    assert history[0].from_state is S.READY, f"{activity_id}: starts at {history[0].from_state}"
    previous: Transition | None = None
    for t in history:
        check_transition(activity_id, t.from_state, t.to_state)
        if previous is not None:
            assert t.from_state is previous.to_state, f"{activity_id}: broken chain at {t}"
            assert t.attempt >= previous.attempt, f"{activity_id}: attempt went down at {t}"
            assert t.failures >= previous.failures, f"{activity_id}: failures went down at {t}"
            assert t.infra_requeues >= previous.infra_requeues, f"{activity_id}: requeues down"
            assert t.token >= previous.token, f"{activity_id}: token went down at {t}"
        if t.to_state is S.LEASED:
            assert t.token not in tokens, f"{activity_id}: lease token {t.token} granted twice"
            tokens.add(t.token)
        previous = t
    completions = [t for t in history if t.to_state is S.COMPLETED]
    assert len(completions) <= 1, f"{activity_id} completed {len(completions)} times"


async def verify(run: CrashRun) -> dict[str, int]:
    """Compare the store with every acknowledgement; returns a few totals."""
    acks = run.acks()
    by_op: dict[str, list[dict[str, Any]]] = {}
    for entry in acks:
        by_op.setdefault(entry["op"], []).append(entry)
    submitted = [aid for entry in by_op.get("submit", []) for aid in entry["ids"]]
    assert len(submitted) == len(set(submitted)), "an activity id was acknowledged twice"
    # A later run may act on an activity whose submission was durable but whose
    # ack was cut off by the kill: check those activities too.
    mentioned = {aid for entry in by_op.get("lease", []) for aid, _t, _a in entry["grants"]}
    mentioned.update(
        e["id"] for op in ("start", "complete", "fail", "cancel") for e in by_op.get(op, [])
    )
    every = list(dict.fromkeys([*submitted, *sorted(mentioned)]))
    store = run.location.make()
    await store.open()
    try:
        present = await store.existing_activity_ids(every)
        missing = sorted(set(every) - present)
        assert not missing, f"acknowledged activities lost: {missing[:10]}"
        loaded = await store.load()
        assert loaded.diagnostics == []
        histories = dict(zip(every, await asyncio.gather(*map(store.history, every)), strict=True))
        check_diagnostics = await store.check()
    finally:
        await store.close()
    assert check_diagnostics == []

    tokens: set[int] = set()
    live = {a.activity_id: a for a in loaded.activities}
    for aid, history in histories.items():
        check_history(aid, history, tokens)
        last = history[-1].to_state
        if aid in live:
            assert live[aid].state is last, f"{aid}: live {live[aid].state}, history {last}"
        else:
            assert last in TERMINAL_STATES, f"{aid}: not live, yet history ends {last}"

    def find(aid: str, **want: Any) -> Transition:
        for t in histories[aid]:
            if all(getattr(t, k) == v for k, v in want.items()):
                return t
        raise AssertionError(f"{aid}: acknowledged {want} is not in its history")

    for entry in by_op.get("lease", []):
        for aid, token, _attempt in entry["grants"]:
            find(aid, to_state=S.LEASED, token=token)
    for entry in by_op.get("start", []):
        find(entry["id"], to_state=S.EXECUTING, token=entry["token"], attempt=entry["attempt"])
    for entry in by_op.get("fail", []):
        find(entry["id"], from_state=S.EXECUTING, to_state=S(entry["to"]), token=entry["token"])
    for entry in by_op.get("cancel", []):
        find(entry["id"], to_state=S.CANCELLED)
    completed = by_op.get("complete", [])
    assert len({e["id"] for e in completed}) == len(completed), "a completion acked twice"
    for entry in completed:
        done = [t for t in histories[entry["id"]] if t.to_state is S.COMPLETED]
        assert len(done) == 1, f"{entry['id']}: acked completion not recorded once: {done}"
        assert (done[0].token, done[0].attempt) == (entry["token"], entry["attempt"])
    workers = {w.info.worker_id for w in loaded.workers}
    acked_workers = {e["worker"] for e in by_op.get("register", [])}
    assert acked_workers <= workers, f"registered workers lost: {acked_workers - workers}"

    reports = run.ready_lines()
    assert len(reports) >= KILLS_UNDER_LOAD + 1
    for ready in reports:
        assert ready["report"]["diagnostics"] == [], ready
    assert [e for e in by_op["ready"] if e["report"]["diagnostics"]] == []
    assert by_op.get("done"), "the final run did not stop cleanly"
    last_states = Counter(h[-1].to_state.value for h in histories.values())
    return {
        "activities": len(every),
        "completions": len(completed),
        "expired_on_recovery": sum(r["report"]["expired_leases"] for r in reports),
        "requeued_on_recovery": sum(r["report"]["requeued"] for r in reports),
        "ownership_waits": sum(r["ownership_waits"] for r in reports),
        **{f"ended_{k}": v for k, v in sorted(last_states.items())},
    }


def pick_seed() -> int:
    pinned = os.environ.get("WF_CRASH_SEED")
    return int(pinned) if pinned else random.SystemRandom().randrange(2**32)


@pytest.mark.slow
def test_sigkill_under_load_loses_nothing(
    location: Location, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workdir = tmp_path / "crash"
    workdir.mkdir()
    run = CrashRun(location=location, workdir=workdir, seed=pick_seed())
    started = time.monotonic()
    try:
        run.campaign()
        totals = asyncio.run(verify(run))
        assert wf_main(["store", "check", *location.args]) == 0
        assert "no contradictions" in capsys.readouterr().out
    except BaseException as exc:
        exc.add_note(run.describe())
        raise
    kills = run.kills_under_load + run.recovery_kills
    assert kills >= KILLS_UNDER_LOAD
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(
            f"\n[{location.name}] {kills} SIGKILLs ({run.kills_under_load} under load, "
            f"{run.recovery_kills} at start-up), {run.spawned} processes, {elapsed:.1f} s, "
            f"{totals}; {run.describe()}"
        )
