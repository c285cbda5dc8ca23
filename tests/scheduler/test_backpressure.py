"""Tests of WF-005 §20 backpressure: levels, hysteresis and the four behaviours."""

from __future__ import annotations

import math

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wf.errors import CorruptRecord, InvalidArgument, Overloaded
from wf.scheduler.backpressure import (
    BackpressureConfig,
    BackpressureController,
    BackpressureLevel,
    BackpressureSnapshot,
    LevelChange,
)
from wf.scheduler.rate_limiter import BucketState

T0 = 1_700_000_000.0

NORMAL = BackpressureLevel.NORMAL
ELEVATED = BackpressureLevel.ELEVATED
CRITICAL = BackpressureLevel.CRITICAL

CONFIG = BackpressureConfig(
    elevated_queue_depth=100,
    critical_queue_depth=1000,
    elevated_utilization=0.9,
    recovery_fraction=0.8,
    elevated_dispatch_per_s=10.0,
    retry_after_s=7.5,
)


def levels_for(
    controller: BackpressureController, depths: list[int], utilization: float = 0.0
) -> list[BackpressureLevel]:
    out = []
    for i, depth in enumerate(depths):
        controller.update(T0 + i, queue_depth=depth, utilization=utilization)
        out.append(controller.level)
    return out


# --- Configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"elevated_queue_depth": 0}, "elevated_queue_depth"),
        ({"critical_queue_depth": -3}, "critical_queue_depth"),
        ({"elevated_queue_depth": 10, "critical_queue_depth": 5}, "elevated_queue_depth"),
        ({"elevated_utilization": 0.0}, "elevated_utilization"),
        ({"elevated_utilization": 1.5}, "elevated_utilization"),
        ({"elevated_utilization": math.nan}, "elevated_utilization"),
        ({"recovery_fraction": 0.0}, "recovery_fraction"),
        ({"recovery_fraction": 1.01}, "recovery_fraction"),
        ({"recovery_fraction": math.nan}, "recovery_fraction"),
        ({"elevated_dispatch_per_s": 0.0}, "elevated_dispatch_per_s"),
        ({"elevated_dispatch_per_s": -1.0}, "elevated_dispatch_per_s"),
        ({"elevated_dispatch_per_s": math.inf}, "elevated_dispatch_per_s"),
        ({"retry_after_s": 0.0}, "retry_after_s"),
        ({"retry_after_s": math.nan}, "retry_after_s"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        BackpressureConfig(**kwargs)  # type: ignore[arg-type]
    assert info.value.details["field"] == field


def test_config_accepts_equal_thresholds_and_decodes() -> None:
    BackpressureConfig(elevated_queue_depth=10, critical_queue_depth=10)
    decoded = msgspec.json.decode(msgspec.json.encode(CONFIG), type=BackpressureConfig)
    assert decoded == CONFIG
    with pytest.raises(InvalidArgument):
        msgspec.json.decode(b'{"recovery_fraction": 2}', type=BackpressureConfig)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"critical_depth": 2}', type=BackpressureConfig)


def test_level_members() -> None:
    assert [m.value for m in BackpressureLevel] == ["normal", "elevated", "critical"]


# --- Levels and hysteresis -------------------------------------------------------------------


def test_levels_by_queue_depth() -> None:
    controller = BackpressureController(CONFIG)
    assert controller.level is NORMAL
    assert levels_for(controller, [0, 99, 100, 999, 1000, 5000]) == [
        NORMAL,
        NORMAL,
        ELEVATED,
        ELEVATED,
        CRITICAL,
        CRITICAL,
    ]


def test_update_returns_a_change_exactly_when_the_level_changes() -> None:
    controller = BackpressureController(CONFIG)
    changes = [
        controller.update(T0 + i, queue_depth=d, utilization=0.5)
        for i, d in enumerate([10, 150, 160, 1200, 1100, 700, 50, 40])
    ]
    assert changes == [
        None,
        LevelChange(previous=NORMAL, level=ELEVATED, queue_depth=150, utilization=0.5, at=T0 + 1),
        None,
        LevelChange(
            previous=ELEVATED, level=CRITICAL, queue_depth=1200, utilization=0.5, at=T0 + 3
        ),
        None,
        LevelChange(previous=CRITICAL, level=ELEVATED, queue_depth=700, utilization=0.5, at=T0 + 5),
        LevelChange(previous=ELEVATED, level=NORMAL, queue_depth=50, utilization=0.5, at=T0 + 6),
        None,
    ]
    assert controller.changed_at == T0 + 6
    assert controller.queue_depth == 40
    assert controller.utilization == 0.5


def test_hysteresis_no_flapping_at_the_threshold() -> None:
    controller = BackpressureController(CONFIG)
    # Oscillating around the elevated threshold (100) changes the level once.
    depths = [99, 100, 99, 101, 95, 100, 81, 80, 99, 100] * 3
    changes = [
        controller.update(T0 + i, queue_depth=d, utilization=0.0) for i, d in enumerate(depths)
    ]
    assert sum(c is not None for c in changes) == 1
    assert controller.level is ELEVATED
    # Below 0.8 × 100 it finally recovers, and stays recovered until 100 again.
    assert levels_for(controller, [79, 99, 80, 100]) == [NORMAL, NORMAL, NORMAL, ELEVATED]


def test_hysteresis_on_critical_and_landing_level() -> None:
    controller = BackpressureController(CONFIG)
    assert levels_for(controller, [1000, 999, 800, 799, 1000, 500, 80, 79]) == [
        CRITICAL,
        CRITICAL,
        CRITICAL,
        ELEVATED,  # below 800: leaves CRITICAL but ELEVATED still holds
        CRITICAL,
        ELEVATED,
        ELEVATED,
        NORMAL,
    ]
    # Straight from CRITICAL to NORMAL when the queue collapses.
    controller.update(T0, queue_depth=2000, utilization=0.0)
    change = controller.update(T0 + 1, queue_depth=0, utilization=0.0)
    assert change is not None
    assert (change.previous, change.level) == (CRITICAL, NORMAL)


def test_utilization_holds_elevated_with_a_short_queue() -> None:
    controller = BackpressureController(CONFIG)
    assert levels_for(controller, [5, 5, 5], utilization=0.95) == [ELEVATED] * 3
    # Hysteresis on utilisation too: leave only below 0.8 × 0.9 = 0.72.
    for utilization, level in [(0.85, ELEVATED), (0.73, ELEVATED), (0.71, NORMAL), (0.89, NORMAL)]:
        controller.update(T0, queue_depth=5, utilization=utilization)
        assert controller.level is level
    # Utilisation never makes the level CRITICAL.
    controller.update(T0, queue_depth=5, utilization=1.0)
    assert controller.level is ELEVATED


def test_recovery_fraction_one_means_no_band() -> None:
    controller = BackpressureController(
        BackpressureConfig(elevated_queue_depth=10, recovery_fraction=1.0)
    )
    assert levels_for(controller, [10, 9, 10]) == [ELEVATED, NORMAL, ELEVATED]


def test_nothing_configured_stays_normal() -> None:
    controller = BackpressureController(BackpressureConfig())
    for depth in (0, 10**9):
        assert controller.update(T0, queue_depth=depth, utilization=1.0) is None
    assert controller.level is NORMAL
    assert controller.allow_dispatch(T0)
    assert controller.next_dispatch_at(T0) is None
    controller.admit_new_workflow(T0)


@pytest.mark.parametrize(
    ("queue_depth", "utilization", "field"),
    [
        (-1, 0.5, "queue_depth"),
        (1, -0.1, "utilization"),
        (1, 1.1, "utilization"),
        (1, math.nan, "utilization"),
    ],
)
def test_update_rejects_bad_inputs_without_change(
    queue_depth: int, utilization: float, field: str
) -> None:
    controller = BackpressureController(CONFIG)
    controller.update(T0, queue_depth=500, utilization=0.5)
    before = controller.snapshot()
    with pytest.raises(InvalidArgument) as info:
        controller.update(T0 + 1, queue_depth=queue_depth, utilization=utilization)
    assert info.value.details["field"] == field
    assert controller.snapshot() == before


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2000), min_size=1, max_size=100))
def test_a_change_is_reported_iff_the_level_moves(depths: list[int]) -> None:
    controller = BackpressureController(CONFIG)
    for i, depth in enumerate(depths):
        before = controller.level
        change = controller.update(T0 + i, queue_depth=depth, utilization=0.0)
        if change is None:
            assert controller.level is before
        else:
            assert change.previous is before
            assert change.level is controller.level is not before
        # Thresholds are always honoured on the way up.
        if depth >= 1000:
            assert controller.level is CRITICAL
        elif depth >= 100:
            assert controller.level is not NORMAL
        elif depth < 80:
            assert controller.level is NORMAL


# --- Rejecting new workflow starts -----------------------------------------------------------


def test_new_workflows_refused_only_while_critical() -> None:
    controller = BackpressureController(CONFIG)
    controller.admit_new_workflow(T0)
    controller.update(T0, queue_depth=500, utilization=0.0)
    controller.admit_new_workflow(T0)  # ELEVATED: queued, not refused
    controller.update(T0, queue_depth=1500, utilization=0.0)
    with pytest.raises(Overloaded) as info:
        controller.admit_new_workflow(T0)
    err = info.value
    assert err.retry_after_s == 7.5
    assert err.retryable
    assert err.details == {"retry_after_s": 7.5, "level": "critical", "queue_depth": 1500}
    assert err.to_dict()["code"] == "overloaded"
    controller.update(T0, queue_depth=10, utilization=0.0)
    controller.admit_new_workflow(T0)


def test_new_workflows_queued_when_rejection_is_off() -> None:
    controller = BackpressureController(
        BackpressureConfig(critical_queue_depth=10, reject_new_workflows=False)
    )
    controller.update(T0, queue_depth=50, utilization=0.0)
    assert controller.level is CRITICAL
    controller.admit_new_workflow(T0)


# --- Slow dispatch ---------------------------------------------------------------------------


def test_dispatch_never_slowed_at_normal() -> None:
    controller = BackpressureController(CONFIG)
    assert all(controller.allow_dispatch(T0) for _ in range(10_000))
    assert controller.next_dispatch_at(T0) is None


def test_no_slowdown_without_a_dispatch_rate() -> None:
    controller = BackpressureController(BackpressureConfig(critical_queue_depth=1))
    controller.update(T0, queue_depth=5, utilization=0.0)
    assert controller.level is CRITICAL
    assert all(controller.allow_dispatch(T0) for _ in range(100))
    assert controller.next_dispatch_at(T0) is None


def test_slow_dispatch_paces_while_elevated_and_critical() -> None:
    controller = BackpressureController(CONFIG)
    controller.update(T0, queue_depth=150, utilization=0.0)
    # Burst max(1, 10) = 10, then one per 0.1 s.
    assert [controller.allow_dispatch(T0) for _ in range(11)] == [True] * 10 + [False]
    at = controller.next_dispatch_at(T0)
    assert at is not None
    # T0 + 0.1 is not a float; the answer is the first float where the token is there.
    assert 0.0 <= at - (T0 + 0.1) < 1e-6
    assert not controller.allow_dispatch(T0 + 0.05)
    assert controller.allow_dispatch(at)
    controller.update(at, queue_depth=5000, utilization=0.0)
    assert controller.level is CRITICAL
    assert not controller.allow_dispatch(at)
    # Back to NORMAL: full speed at once.
    controller.update(T0 + 0.2, queue_depth=0, utilization=0.0)
    assert controller.allow_dispatch(T0 + 0.2)
    assert controller.allow_dispatch(T0 + 0.2)
    assert controller.next_dispatch_at(T0 + 0.2) is None


@settings(max_examples=100, deadline=None)
@given(
    rate_per_s=st.floats(0.1, 500.0),
    gaps=st.lists(st.floats(0.0, 0.05), min_size=1, max_size=300),
)
def test_slow_dispatch_never_exceeds_rate_times_time_plus_burst(
    rate_per_s: float, gaps: list[float]
) -> None:
    config = BackpressureConfig(elevated_queue_depth=1, elevated_dispatch_per_s=rate_per_s)
    controller = BackpressureController(config)
    controller.update(T0, queue_depth=10, utilization=0.0)
    burst = max(1.0, rate_per_s)
    now = T0
    allowed = 0
    for gap in gaps:
        now += gap
        # Greedy: try several times per instant, as a busy dispatcher would.
        while controller.allow_dispatch(now):
            allowed += 1
        assert allowed <= rate_per_s * (now - T0) + burst + 1e-6
        at = controller.next_dispatch_at(now)
        assert at is not None
        assert at > now


def test_waking_at_next_dispatch_at_dispatches() -> None:
    config = BackpressureConfig(elevated_queue_depth=1, elevated_dispatch_per_s=3.0)
    controller = BackpressureController(config)
    controller.update(T0, queue_depth=10, utilization=0.0)
    now = T0
    allowed = 0
    while now < T0 + 10.0:
        while controller.allow_dispatch(now):
            allowed += 1
        at = controller.next_dispatch_at(now)
        assert at is not None
        now = at
    # Burst 3 at T0, then 3 per second for 10 s (give or take the last instant).
    assert 32 <= allowed <= 33


# --- Snapshot and restore --------------------------------------------------------------------


def run(controller: BackpressureController, start: float, steps: int) -> list[object]:
    """A deterministic, irregular load; returns every observable outcome."""
    out: list[object] = []
    now = start
    for i in range(steps):
        now += (i * 31 % 17) / 41.0
        depth = (i * 337) % 1400
        out.append(controller.update(now, queue_depth=depth, utilization=(i % 10) / 10.0))
        out.extend(controller.allow_dispatch(now) for _ in range(i % 5))
        out.append(controller.next_dispatch_at(now))
        try:
            controller.admit_new_workflow(now)
            out.append("admitted")
        except Overloaded as err:
            out.append(err.to_dict())
    return out


def test_snapshot_restore_round_trips_exactly() -> None:
    original = BackpressureController(CONFIG)
    run(original, T0, 200)
    snap = original.snapshot()
    wire = msgspec.json.encode(snap)
    decoded = msgspec.json.decode(wire, type=BackpressureSnapshot)
    assert decoded == snap
    restored = BackpressureController.restore(CONFIG, decoded)
    assert msgspec.json.encode(restored.snapshot()) == wire
    assert restored.level is original.level
    later = T0 + 500.0
    assert run(restored, later, 300) == run(original, later, 300)
    assert msgspec.json.encode(restored.snapshot()) == msgspec.json.encode(original.snapshot())


def test_restore_keeps_hysteresis_memory() -> None:
    original = BackpressureController(CONFIG)
    original.update(T0, queue_depth=150, utilization=0.0)
    restored = BackpressureController.restore(CONFIG, original.snapshot())
    # 90 is inside the band: ELEVATED holds after restore exactly as before.
    assert restored.update(T0 + 1, queue_depth=90, utilization=0.0) is None
    assert restored.level is ELEVATED


def test_restore_under_config_without_slowdown() -> None:
    original = BackpressureController(CONFIG)
    original.update(T0, queue_depth=150, utilization=0.0)
    original.allow_dispatch(T0)
    restored = BackpressureController.restore(
        BackpressureConfig(elevated_queue_depth=100), original.snapshot()
    )
    assert restored.level is ELEVATED
    assert restored.snapshot().dispatch_bucket is None
    assert restored.allow_dispatch(T0)


@pytest.mark.parametrize(
    "snapshot",
    [
        BackpressureSnapshot(version=9),
        BackpressureSnapshot(queue_depth=-1),
        BackpressureSnapshot(utilization=2.0),
        BackpressureSnapshot(dispatch_bucket=BucketState(tokens=math.nan, last_refill_at=T0)),
    ],
)
def test_restore_rejects_corrupt_snapshots(snapshot: BackpressureSnapshot) -> None:
    with pytest.raises(CorruptRecord):
        BackpressureController.restore(CONFIG, snapshot)
