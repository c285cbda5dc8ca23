"""Leases survive a failover (issue 15): recovery's grace, and held leases at registration.

While no scheduler runs, nobody can heartbeat, renew or report. So recovery (the
``Recover`` command, which ``recovery.recover`` hands a restored core and a
standby hands its warm one) gives every live worker a fresh heartbeat grace and
every held lease a fresh lease grace, recorded as renewals; and a worker that
registers again listing the leases it holds keeps those and gets the others
requeued at once (``lease_abandoned``). Everything here is the pure core on
explicit instants.
"""

from __future__ import annotations

import msgspec
import pytest
from _core_helpers import T0, act, fingerprint, grants, of_type

from wf.errors import InvalidArgument
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig
from wf.scheduler.dispatcher import SchedulerCore
from wf.scheduler.model import ActivityState, RetryPolicy, WorkerInfo, WorkerStatus
from wf.scheduler.outputs import (
    ActivityFailed,
    LeaseRenewed,
    LeaseRevoked,
    Outcome,
    Transition,
)
from wf.scheduler.recovery import durable_state, recover, restore, snapshot

S = ActivityState
TTL = 30.0
CONFIG = SchedulerConfig(lease_ttl_s=TTL, heartbeat_misses_max=3)
WORKER = WorkerInfo(worker_id="w1", max_concurrency=8, heartbeat_interval_s=5.0)
LIVENESS_S = 5.0 * 3


def leased_core() -> tuple[SchedulerCore, dict[str, int]]:
    """w1 holds four leases granted at T0: ``idem`` and ``risky`` started, ``unstarted``
    and ``retried`` (restart_on_abandon, started) as named."""
    core = SchedulerCore(CONFIG)
    core.handle(cmd.RegisterWorker(now=T0, info=WORKER))
    core.handle(
        cmd.Submit(
            now=T0,
            activities=(
                act("idem", idempotent=True),
                act("risky"),
                act("unstarted"),
                act("retried", retry=RetryPolicy(restart_on_abandon=True)),
            ),
        )
    )
    out = core.handle(cmd.Poll(now=T0, worker_id="w1", max_items=4))
    tokens = {aid: lease.token for aid, lease in grants(out).items()}
    for aid in ("idem", "risky", "retried"):
        core.handle(cmd.StartActivity(now=T0, activity_id=aid, token=tokens[aid]))
    return core, tokens


def held_ids(core: SchedulerCore) -> dict[str, S]:
    return {
        aid: a.state for aid, a in core.activities.items() if a.state in (S.LEASED, S.EXECUTING)
    }


# ------------------------------------------------------------------- recovery


def test_recovery_gives_every_held_lease_one_ttl_from_now_and_records_it() -> None:
    core, tokens = leased_core()
    # The server was down for twice the TTL: every expiry passed meanwhile.
    now = T0 + 2 * TTL
    recovered, out = recover(snapshot(core), now)

    assert held_ids(recovered) == {
        "idem": S.EXECUTING,
        "risky": S.EXECUTING,
        "unstarted": S.LEASED,
        "retried": S.EXECUTING,
    }
    assert {aid: a.lease_expires_at for aid, a in recovered.activities.items()} == dict.fromkeys(
        tokens, now + TTL
    )
    renewed = of_type(out.records, LeaseRenewed)
    assert sorted((r.activity_id, r.token, r.expires_at) for r in renewed) == sorted(
        (aid, token, now + TTL) for aid, token in tokens.items()
    )
    assert of_type(out.records, Transition) == []
    assert of_type(out.decisions, ActivityFailed) == []
    assert recovered.metrics.expired_leases == 0


def test_a_lease_that_still_has_a_full_ttl_left_is_not_renewed_at_recovery() -> None:
    core, _tokens = leased_core()
    recovered, out = recover(snapshot(core), T0)
    assert of_type(out.records, LeaseRenewed) == []
    assert {a.lease_expires_at for a in recovered.activities.values()} == {T0 + TTL}


def test_the_worker_keeps_its_leases_through_recovery_and_completes_them() -> None:
    core, tokens = leased_core()
    now = T0 + 2 * TTL
    recovered, _ = recover(snapshot(core), now)
    # The worker lived through the outage: it heartbeats, renews and reports as usual.
    recovered.handle(cmd.Heartbeat(now=now + 1, worker_id="w1"))
    recovered.handle(cmd.RenewLease(now=now + 1, activity_id="risky", token=tokens["risky"]))
    recovered.handle(
        cmd.Complete(now=now + 2, activity_id="risky", token=tokens["risky"], result=b"1")
    )
    assert recovered.finished["risky"] is S.COMPLETED


def test_leases_of_a_worker_that_died_with_the_server_end_after_the_grace() -> None:
    core, tokens = leased_core()
    now = T0 + 2 * TTL
    recovered, _ = recover(snapshot(core), now)
    # The heartbeat grace (15 s) ends before the lease grace (30 s): the worker is lost.
    just_before = recovered.handle(cmd.Tick(now=now + LIVENESS_S - 0.001))
    assert just_before.records == []
    lost = recovered.handle(cmd.Tick(now=now + LIVENESS_S))
    reasons = {r.activity_id: (r.to_state, r.reason) for r in of_type(lost.records, Transition)}
    assert reasons == {
        "idem": (S.QUEUED, "missed_heartbeats"),
        "risky": (S.FAILED, "may_have_executed"),
        "unstarted": (S.QUEUED, "missed_heartbeats"),
        "retried": (S.QUEUED, "missed_heartbeats"),
    }
    assert recovered.registry.workers["w1"].status is WorkerStatus.FAILED
    assert all(r.token == tokens[r.activity_id] for r in of_type(lost.decisions, LeaseRevoked))


def test_a_lease_grace_ends_like_any_lease_when_the_worker_keeps_heartbeating() -> None:
    core, _tokens = leased_core()
    now = T0 + 2 * TTL
    recovered, _ = recover(snapshot(core), now)
    recovered.handle(cmd.Heartbeat(now=now + TTL - 1, worker_id="w1"))
    out = recovered.handle(cmd.Tick(now=now + TTL))
    assert {r.activity_id: r.reason for r in of_type(out.records, Transition)} == {
        "idem": "lease_expired",
        "risky": "may_have_executed",
        "unstarted": "lease_expired",
        "retried": "lease_expired",
    }


def test_recovery_gives_live_workers_a_heartbeat_grace_from_now() -> None:
    core, _ = leased_core()
    now = T0 + 10 * LIVENESS_S
    recovered, _ = recover(snapshot(core), now)
    assert recovered.registry.workers["w1"].last_seen_at == now
    assert recovered.registry.next_deadline_at() is not None
    assert recovered.handle(cmd.Tick(now=now + LIVENESS_S - 0.001)).records == []
    assert recovered.registry.workers["w1"].status is WorkerStatus.ACTIVE


def test_recovery_drops_poll_demand_because_the_long_polls_died() -> None:
    core = SchedulerCore(CONFIG)
    core.handle(cmd.RegisterWorker(now=T0, info=WORKER))
    core.handle(cmd.Poll(now=T0, worker_id="w1", max_items=3, start=2))
    assert core.waiting
    recovered, _ = recover(snapshot(core), T0 + 1)
    worker = recovered.registry.workers["w1"]
    assert (recovered.waiting, worker.demand, worker.start_demand) == ({}, 0, 0)
    # Nothing is granted to a poll that no longer exists.
    out = recovered.handle(cmd.Submit(now=T0 + 2, activities=(act("later"),)))
    assert grants(out) == {}


def test_the_recover_command_on_a_warm_core_equals_recovery_from_its_snapshot() -> None:
    core, _ = leased_core()
    now = T0 + 2 * TTL
    cold, cold_out = recover(snapshot(core), now)
    warm = restore(snapshot(core))
    warm_out = warm.handle(cmd.Recover(now=now))
    assert msgspec.json.encode(warm_out) == msgspec.json.encode(cold_out)
    assert durable_state(warm) == durable_state(cold)
    assert fingerprint(warm) == fingerprint(cold)


def test_recovery_is_deterministic_and_its_command_replays_from_its_json() -> None:
    core, _ = leased_core()
    now = T0 + 2 * TTL
    command = msgspec.json.decode(msgspec.json.encode(cmd.Recover(now=now)), type=cmd.Command)
    assert command == cmd.Recover(now=now)
    first, second = restore(snapshot(core)), restore(snapshot(core))
    assert msgspec.json.encode(first.handle(command)) == msgspec.json.encode(second.handle(command))
    assert fingerprint(first) == fingerprint(second)


# -------------------------------------------------------- held leases at registration


def register(core: SchedulerCore, now: float, held: tuple[tuple[str, int], ...] | None) -> Outcome:
    return core.handle(cmd.RegisterWorker(now=now, info=WORKER, held=held))


def test_registering_with_held_keeps_the_listed_leases_with_a_fresh_expiry() -> None:
    core, tokens = leased_core()
    now = T0 + TTL - 1
    out = register(core, now, tuple(tokens.items()))
    assert held_ids(core).keys() == tokens.keys()
    assert {a.lease_expires_at for a in core.activities.values()} == {now + TTL}
    assert sorted(r.activity_id for r in of_type(out.records, LeaseRenewed)) == sorted(tokens)
    assert of_type(out.records, Transition) == []
    assert of_type(out.decisions, LeaseRevoked) == []
    # No longer due at the old expiry.
    assert core.handle(cmd.Tick(now=T0 + TTL)).records == []


def test_registering_with_held_abandons_every_lease_the_worker_does_not_list_at_once() -> None:
    core, tokens = leased_core()
    now = T0 + 1
    out = register(core, now, (("idem", tokens["idem"]),))

    moved = {r.activity_id: (r.from_state, r.to_state, r.reason) for r in out.records
             if isinstance(r, Transition)}  # fmt: skip
    assert moved == {
        "unstarted": (S.LEASED, S.QUEUED, "lease_abandoned"),
        "retried": (S.EXECUTING, S.QUEUED, "lease_abandoned"),
        # Not idempotent and it may have run: failed closed, never run twice.
        "risky": (S.EXECUTING, S.FAILED, "may_have_executed"),
    }
    (failed,) = of_type(out.decisions, ActivityFailed)
    assert (failed.activity_id, failed.may_have_executed) == ("risky", True)
    revoked = {(d.activity_id, d.token, d.reason) for d in of_type(out.decisions, LeaseRevoked)}
    assert revoked == {
        (aid, tokens[aid], "lease_abandoned") for aid in ("unstarted", "retried", "risky")
    }
    assert core.registry.workers["w1"].leases == {"idem": tokens["idem"]}
    assert core.activities["unstarted"].infra_requeues == 1
    assert core.activities["retried"].infra_requeues == 1


def test_held_leases_the_core_does_not_know_or_with_another_token_are_ignored() -> None:
    core, tokens = leased_core()
    now = T0 + 1
    listed = (
        ("idem", tokens["idem"]),
        ("risky", tokens["risky"] + 100),  # another token: not this lease
        ("nobody", 7),  # unknown activity
    )
    out = register(core, now, listed)
    moved = {r.activity_id: r.reason for r in of_type(out.records, Transition)}
    assert moved == {
        "risky": "may_have_executed",
        "unstarted": "lease_abandoned",
        "retried": "lease_abandoned",
    }
    assert "nobody" not in core.activities
    assert core.registry.workers["w1"].leases == {"idem": tokens["idem"]}


def test_registering_with_an_empty_held_list_abandons_every_lease_of_the_worker() -> None:
    core, _ = leased_core()
    register(core, T0 + 1, ())
    assert core.registry.workers["w1"].leases == {}
    assert held_ids(core) == {}


def test_registering_without_held_leaves_the_leases_as_they_are() -> None:
    core, _ = leased_core()
    before = fingerprint(core)
    out = register(core, T0, None)
    assert out.records == []
    assert out.decisions == []
    assert fingerprint(core) == before


def test_the_abandoned_work_goes_to_a_waiting_worker_in_the_same_command() -> None:
    core, tokens = leased_core()
    other = WorkerInfo(worker_id="w2", max_concurrency=4, heartbeat_interval_s=5.0)
    core.handle(cmd.RegisterWorker(now=T0, info=other))
    core.handle(cmd.Poll(now=T0, worker_id="w2", max_items=4))
    out = register(core, T0 + 1, ())
    assert set(grants(out)) == {"idem", "unstarted", "retried"}
    assert {lease.worker_id for lease in grants(out).values()} == {"w2"}
    assert min(lease.token for lease in grants(out).values()) > max(tokens.values())


@pytest.mark.parametrize(
    "held",
    [
        (("a", -1),),
        (("a",),),  # type: ignore[arg-type]
        ((1, 2),),  # type: ignore[arg-type]
        (("a", True),),
        tuple((f"a{i}", i) for i in range(10_001)),
    ],
)
def test_a_malformed_held_list_is_refused_and_changes_nothing(held: object) -> None:
    core, _ = leased_core()
    before = fingerprint(core)
    with pytest.raises(InvalidArgument) as refused:
        core.handle(cmd.RegisterWorker(now=T0 + 1, info=WORKER, held=held))  # type: ignore[arg-type]
    assert refused.value.details["field"] == "held"
    assert fingerprint(core) == before


def test_a_registration_with_held_replays_from_its_json_to_the_same_outcome() -> None:
    core, tokens = leased_core()
    command = cmd.RegisterWorker(now=T0 + 1, info=WORKER, held=(("idem", tokens["idem"]),))
    decoded = msgspec.json.decode(msgspec.json.encode(command), type=cmd.Command)
    assert decoded == command
    twin = restore(snapshot(core))
    assert msgspec.json.encode(core.handle(command)) == msgspec.json.encode(twin.handle(decoded))
