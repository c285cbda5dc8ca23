"""The deterministic simulation: a 200-seed sweep, reproducibility, and proof that it bites."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from wf.cli.main import main
from wf.scheduler.config import PolicyConfig, SchedulerConfig, StealingConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.lease import LeaseTable
from wf.scheduler.model import Activity
from wf.scheduler.outputs import ActivityCancelled
from wf.scheduler.policies import PriorityPolicy, WeightedFairPolicy
from wf.scheduler.rate_limiter import RateLimitConfig
from wf.scheduler.replay import LogHeader, replay, start_core
from wf.testing.invariants import InvariantViolation
from wf.testing.simulation import Simulation, SimulationResult, simulate

SWEEP_SEEDS = range(200)
SWEEP_STEPS = 800
"""Commands per seed in the sweep: 200 seeds take about 15 s on a 2-core machine."""
SHORT_STEPS = 400


def _seed_where(predicate: Callable[[Simulation], bool], *, limit: int = 200) -> int:
    """The first seed whose drawn world satisfies ``predicate``."""
    for seed in range(limit):
        if predicate(Simulation(seed, steps=1, config=None)):
            return seed
    raise AssertionError("no seed draws such a world")


def _policy(sim: Simulation) -> str:
    return next(iter(sim.config.policies.values())).policy


@pytest.mark.parametrize("seed", SWEEP_SEEDS)
def test_seed_keeps_every_invariant(seed: int) -> None:
    result = simulate(seed, steps=SWEEP_STEPS)
    assert result.counts.commands == SWEEP_STEPS
    assert result.counts.submitted > 0


def test_the_sweep_injects_every_fault() -> None:
    totals: dict[str, int] = {}
    for seed in range(40):
        counts = dataclasses.asdict(simulate(seed, steps=SWEEP_STEPS).counts)
        for name, value in counts.items():
            totals[name] = totals.get(name, 0) + value
    never = sorted(name for name, value in totals.items() if value == 0)
    assert never == [], f"the simulation never produced: {never}"


def test_same_seed_same_run() -> None:
    first = simulate(11, steps=SHORT_STEPS)
    second = simulate(11, steps=SHORT_STEPS)
    assert first.digest == second.digest
    assert first.counts == second.counts
    assert msgspec.json.encode(first.commands) == msgspec.json.encode(second.commands)
    assert simulate(12, steps=SHORT_STEPS).digest != first.digest


def test_every_segment_replays_to_the_stream_the_simulation_saw() -> None:
    seed = next(s for s in range(50) if simulate(s, steps=SHORT_STEPS).counts.restarts >= 2)
    result = simulate(seed, steps=SHORT_STEPS)
    assert len(result.segments) == result.counts.restarts + 1
    for segment in result.segments:
        core = start_core(LogHeader(config=result.config, snapshot=segment.start))
        assert list(replay(core, segment.commands)) == list(segment.lines)


def test_custom_config_is_used() -> None:
    config = SchedulerConfig(
        policies={
            "default": PolicyConfig(policy="weighted_fair", options={"weights": {"acme": 3}})
        },
        limits=RateLimitConfig(max_activities_per_second=2.0, max_concurrent_activities=6),
        stealing=StealingConfig(enabled=True),
    )
    result = simulate(5, steps=SHORT_STEPS, config=config)
    assert result.config == config
    assert result.counts.dispatched > 0


def test_steps_must_be_positive() -> None:
    with pytest.raises(ValueError, match="steps"):
        simulate(1, steps=0)


def _expect_violation(seeds: range, steps: int = SHORT_STEPS) -> tuple[int, InvariantViolation]:
    """The first seed (and its violation) that catches a deliberately broken core."""
    for seed in seeds:
        try:
            simulate(seed, steps=steps)
        except InvariantViolation as exc:
            return seed, exc
    raise AssertionError("the simulation missed a deliberately broken core")


def test_a_lost_activity_is_caught_with_a_reproduction_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = SchedulerCore.handle
    calls = {"n": 0}

    def corrupting(self: SchedulerCore, command: Any) -> Any:
        outcome = original(self, command)
        calls["n"] += 1
        if calls["n"] >= 60 and self.activities:
            # Silently forget an activity: the kind of bug a lost update would be.
            del self.activities[next(iter(self.activities))]
        return outcome

    monkeypatch.setattr(SchedulerCore, "handle", corrupting)
    with pytest.raises(InvariantViolation) as caught:
        simulate(3, steps=SHORT_STEPS)
    assert caught.value.invariant == "no_lost_activity"
    message = str(caught.value)
    assert "reproduce: uv run wf simulate --seed 3 --steps 400" in message
    assert "at step 60" in message


def test_a_cancel_nobody_hears_of_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The run engine learns of a cancel only from ActivityCancelled (by its origin).
    original = SchedulerCore.handle

    def silent_cancels(self: SchedulerCore, command: Any) -> Any:
        outcome = original(self, command)
        outcome.decisions = [d for d in outcome.decisions if type(d) is not ActivityCancelled]
        return outcome

    monkeypatch.setattr(SchedulerCore, "handle", silent_cancels)
    _seed, exc = _expect_violation(range(30))
    assert exc.invariant == "exactly_once"
    assert "ActivityCancelled" in str(exc)


def test_disabled_fencing_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def accept_anything(activity: Activity, token: int, now: float) -> None:
        return None

    monkeypatch.setattr(LeaseTable, "check", staticmethod(accept_anything))
    seed, exc = _expect_violation(range(30))
    assert exc.invariant in {"exactly_once", "core_crashed", "exclusive_lease", "records"}
    assert f"reproduce: uv run wf simulate --seed {seed} --steps {SHORT_STEPS}" in str(exc)


_SABOTAGE: dict[str, tuple[str, str, Callable[..., Any]]] = {
    "silent workers never declared lost": (
        "wf.scheduler.worker_registry.WorkerRegistry.pop_dead",
        "detection",
        lambda self, now: [],
    ),
    "leases never expire": (
        "wf.scheduler.lease.LeaseTable.pop_expired",
        "detection",
        lambda self, now: [],
    ),
    "delayed work never wakes": (
        "wf.scheduler.timer.DelayedTimers.pop_due",
        "detection",
        lambda self, now: [],
    ),
    "rate limits ignored": (
        "wf.scheduler.rate_limiter.RateLimiter.blocked",
        "limits",
        lambda self, now, **kwargs: None,
    ),
    "several waiting workers get nothing": (
        "wf.scheduler.dispatcher.SchedulerCore._pick_for_many",
        "work_conserving",
        lambda self, usable: None,
    ),
}


@pytest.mark.parametrize("sabotage", sorted(_SABOTAGE))
def test_each_invariant_family_catches_its_bug(
    monkeypatch: pytest.MonkeyPatch, sabotage: str
) -> None:
    target, invariant, replacement = _SABOTAGE[sabotage]
    monkeypatch.setattr(target, replacement)
    seed, exc = _expect_violation(range(40))
    assert exc.invariant == invariant, str(exc)
    assert f"reproduce: uv run wf simulate --seed {seed} --steps {SHORT_STEPS}" in str(exc)


def test_a_priority_inversion_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    seed = _seed_where(
        lambda s: s.checker.oracle is not None and _policy(s) in ("priority", "deadline_first")
    )
    original = PriorityPolicy.pick

    def worst_first(self: PriorityPolicy, lanes: Any, usable: Any) -> Any:
        live = [lane for lane in lanes if lane.size and lane.head() is not None]
        if len(live) > 1:
            return max(live, key=lambda lane: lane.priority)
        return original(self, lanes, usable)

    monkeypatch.setattr(PriorityPolicy, "pick", worst_first)
    monkeypatch.setattr("wf.scheduler.policies.DeadlineFirstPolicy.pick", worst_first)
    with pytest.raises(InvariantViolation) as caught:
        simulate(seed, steps=SHORT_STEPS)
    assert caught.value.invariant == "policy"


def test_unfair_sharing_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    seed = _seed_where(lambda s: s.checker.oracle is not None and _policy(s) == "weighted_fair")

    def ignore_running(self: WeightedFairPolicy, tenant: str) -> tuple[float, int, str]:
        return (0.0, 0, tenant)  # Always the alphabetically first backlogged tenant.

    monkeypatch.setattr(WeightedFairPolicy, "_tenant_order", ignore_running)
    with pytest.raises(InvariantViolation) as caught:
        simulate(seed, steps=SHORT_STEPS)
    assert caught.value.invariant == "policy"


def test_cli_simulate_prints_a_line_per_seed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--seed", "4", "--seeds", "2", "--steps", "150"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["seed=4", "seed=5"]
    assert lines[0] == simulate(4, steps=150).summary()


def test_cli_simulate_reports_a_violation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(seed: int, *, steps: int, config: object = None) -> SimulationResult:
        raise InvariantViolation(
            "records", f"broken\n  reproduce: uv run wf simulate --seed {seed}"
        )

    monkeypatch.setattr("wf.cli.sim_cmd.simulate", broken)
    assert main(["simulate", "--seed", "9", "--steps", "10"]) == 1
    assert "reproduce: uv run wf simulate --seed 9" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--seed", "1", "--steps", "0"],
        ["simulate", "--seed", "1", "--seeds", "0"],
        ["simulate", "--seed", "1", "--seeds", "2", "--record", "x.log"],
    ],
)
def test_cli_simulate_rejects_bad_arguments(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("wf: error: ")
    assert err.count("\n") == 1
