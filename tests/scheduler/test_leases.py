"""WF-005 §11–§12 leases through ``SchedulerCore.handle``: exclusivity, fencing tokens,
renewal, and refusal of every call made with an expired or superseded lease."""

from __future__ import annotations

from typing import Any

import pytest
from _core_helpers import T0, Driver, act, fingerprint, of_type
from hypothesis import given, settings
from hypothesis import strategies as st

from wf.errors import Conflict, LeaseExpired, NotFound, StaleLease, WfError, WorkerNotActive
from wf.scheduler import commands as cmd
from wf.scheduler.config import SchedulerConfig, StealingConfig
from wf.scheduler.model import ActivityState, Lease, RetryPolicy
from wf.scheduler.outputs import (
    ActivityCompleted,
    LeaseGranted,
    LeaseRenewed,
    LeaseRevoked,
    Transition,
)

S = ActivityState
TTL = 30.0
CONFIG = SchedulerConfig(lease_ttl_s=TTL)


def driver(*workers: str, config: SchedulerConfig = CONFIG) -> Driver:
    d = Driver(config)
    for worker_id in workers:
        d.register(worker_id)
    return d


# --- exclusivity ------------------------------------------------------------------------------


def test_one_activity_polled_by_two_workers_is_leased_to_exactly_one() -> None:
    d = driver("w1", "w2")
    d.do(cmd.Poll, worker_id="w1", max_items=1)
    d.do(cmd.Poll, worker_id="w2", max_items=1)
    out = d.submit(act("a"))
    (granted,) = of_type(out.decisions, LeaseGranted)
    holders = [w for w, state in d.core.registry.workers.items() if "a" in state.leases]
    assert holders == [granted.lease.worker_id]
    # The other worker is still waiting and gets nothing more while the lease is held.
    assert list(d.core.waiting) == [w for w in ("w1", "w2") if w != granted.lease.worker_id]
    assert of_type(d.do(cmd.Tick).decisions, LeaseGranted) == []


def test_only_the_current_token_may_start_a_leased_activity() -> None:
    d = driver("w1")
    d.submit(act("a"))
    (lease,) = d.lease().values()
    before = fingerprint(d.core)
    for wrong in (lease.token - 1, lease.token + 1, 0):
        with pytest.raises(StaleLease):
            d.core.handle(cmd.StartActivity(now=d.now, activity_id="a", token=wrong))
    assert fingerprint(d.core) == before
    d.start(lease)
    assert d.state("a") is S.EXECUTING


def test_lease_carries_the_wf005_contents() -> None:
    d = driver("w1")
    d.now = T0 + 7
    d.submit(act("a", workflow_id="wf", correlation_id="corr", payload=b"args"))
    out = d.do(cmd.Poll, worker_id="w1")
    (granted,) = of_type(out.decisions, LeaseGranted)
    lease = granted.lease
    assert lease == Lease(
        lease_id=f"lease-{lease.token}",
        worker_id="w1",
        activity_id="a",
        token=lease.token,
        granted_at=T0 + 7,
        expires_at=T0 + 7 + TTL,
        renewable=True,
        attempt=1,
    )
    assert (granted.workflow_id, granted.correlation_id, granted.payload) == ("wf", "corr", b"args")


# --- fencing tokens ---------------------------------------------------------------------------


def test_fencing_token_grows_with_every_grant_including_regrants() -> None:
    config = SchedulerConfig(lease_ttl_s=TTL, stealing=StealingConfig(enabled=True))
    d = driver("w1", config=config)
    d.submit(act("a", idempotent=True), act("b"), act("c"))
    first = d.lease(n=3)
    d.start(first["a"])
    # Expiry: both re-granted with new tokens.
    d.tick(T0 + TTL)
    d.lease(n=3)
    # Graceful return and re-grant to another worker.
    d.register("w2")
    d.do(cmd.ShutdownWorker, worker_id="w1")
    d.lease("w2", n=3)
    # Work stealing re-grants too.
    d.register("w3")
    d.poll("w3", n=1)
    tokens = [g.lease.token for g in of_type(d.decisions, LeaseGranted)]
    assert len(tokens) >= 8
    assert tokens == sorted(set(tokens))  # strictly increasing
    assert all(
        g.lease.lease_id == f"lease-{g.lease.token}" for g in of_type(d.decisions, LeaseGranted)
    )
    # Every activity remembers the token of its latest grant.
    latest = {g.lease.activity_id: g.lease.token for g in of_type(d.decisions, LeaseGranted)}
    assert {aid: d.core.activities[aid].token for aid in latest} == latest


# --- renewal ----------------------------------------------------------------------------------


def test_renewal_extends_the_lease_from_the_renewal_instant() -> None:
    d = driver("w1")
    d.submit(act("a"))
    (lease,) = d.lease().values()
    d.start(lease)
    d.now = T0 + 20
    out = d.do(cmd.RenewLease, activity_id="a", token=lease.token)
    assert out.records == [
        LeaseRenewed(at=T0 + 20, activity_id="a", token=lease.token, expires_at=T0 + 50)
    ]
    assert out.decisions == []
    # The original expiry passes without effect.
    tick = d.tick(T0 + TTL + 10)
    assert tick.decisions == []
    assert d.state("a") is S.EXECUTING
    d.now = T0 + 45
    assert of_type(d.complete(lease).decisions, ActivityCompleted) != []


def test_renewal_of_an_expired_lease_is_refused_even_before_a_tick() -> None:
    d = driver("w1")
    d.submit(act("a"))
    (lease,) = d.lease().values()
    d.start(lease)
    before = fingerprint(d.core)
    with pytest.raises(LeaseExpired):
        d.core.handle(cmd.RenewLease(now=T0 + TTL, activity_id="a", token=lease.token))
    assert fingerprint(d.core) == before


def test_renewal_of_a_superseded_lease_is_refused() -> None:
    d = driver("w1", "w2")
    d.submit(act("a"))
    (old,) = d.lease("w1").values()
    d.tick(T0 + TTL)  # expired while unstarted: requeued
    (new,) = d.lease("w2").values()
    assert new.token > old.token
    before = fingerprint(d.core)
    with pytest.raises(StaleLease):
        d.core.handle(cmd.RenewLease(now=d.now, activity_id="a", token=old.token))
    assert fingerprint(d.core) == before
    d.do(cmd.RenewLease, activity_id="a", token=new.token)


def test_renewal_of_a_non_renewable_lease_is_refused() -> None:
    d = driver("w1")
    d.submit(act("a"))
    # No command makes a lease non-renewable (see the report); set the core-maintained
    # flag on the queued activity, as a future submission option would.
    d.core.activities["a"].renewable = False
    (lease,) = d.lease().values()
    assert lease.renewable is False
    d.start(lease)
    before = fingerprint(d.core)
    with pytest.raises(Conflict) as info:
        d.core.handle(cmd.RenewLease(now=T0 + 1, activity_id="a", token=lease.token))
    assert type(info.value) is Conflict
    assert fingerprint(d.core) == before


# --- stale completions: no second result ------------------------------------------------------


def test_stale_completion_is_refused_and_exactly_one_result_is_recorded() -> None:
    d = driver("w1", "w2")
    d.submit(act("a", idempotent=True))
    (old,) = d.lease("w1").values()
    d.start(old)
    # w1 goes silent past the lease; the activity (idempotent) goes to w2.
    out = d.tick(T0 + TTL)
    assert of_type(out.decisions, LeaseRevoked) == [
        LeaseRevoked(worker_id="w1", activity_id="a", token=old.token, reason="lease_expired")
    ]
    (new,) = d.lease("w2").values()
    d.start(new)
    before = fingerprint(d.core)
    with pytest.raises(StaleLease):
        d.core.handle(cmd.Complete(now=d.now, activity_id="a", token=old.token, result=b"old"))
    assert fingerprint(d.core) == before
    d.complete(new, result=b"new")
    # Too late as well once the activity is finished.
    with pytest.raises(StaleLease):
        d.core.handle(cmd.Complete(now=d.now, activity_id="a", token=old.token, result=b"old"))
    with pytest.raises(StaleLease):
        d.core.handle(cmd.Complete(now=d.now, activity_id="a", token=new.token, result=b"again"))
    completed = of_type(d.decisions, ActivityCompleted)
    assert [(c.activity_id, c.result, c.attempt) for c in completed] == [("a", b"new", 2)]
    assert [r.to_state for r in of_type(d.records, Transition)].count(S.COMPLETED) == 1


def test_completion_after_expiry_but_before_the_tick_is_refused() -> None:
    d = driver("w1")
    d.submit(act("a"))
    (lease,) = d.lease().values()
    d.start(lease)
    before = fingerprint(d.core)
    with pytest.raises(LeaseExpired):
        d.core.handle(cmd.Complete(now=T0 + TTL + 0.5, activity_id="a", token=lease.token))
    with pytest.raises(LeaseExpired):
        d.core.handle(cmd.Fail(now=T0 + TTL + 0.5, activity_id="a", token=lease.token))
    assert fingerprint(d.core) == before
    assert of_type(d.decisions, ActivityCompleted) == []


def test_stale_failure_and_start_are_refused() -> None:
    d = driver("w1", "w2")
    d.submit(act("a"))
    (old,) = d.lease("w1").values()
    d.tick(T0 + TTL)
    (new,) = d.lease("w2").values()
    before = fingerprint(d.core)
    with pytest.raises(StaleLease):
        d.core.handle(cmd.StartActivity(now=d.now, activity_id="a", token=old.token))
    with pytest.raises(StaleLease):
        d.core.handle(cmd.Fail(now=d.now, activity_id="a", token=old.token, error_type="E"))
    assert fingerprint(d.core) == before
    d.start(new)


def test_lease_calls_for_an_unknown_activity_raise_not_found() -> None:
    d = driver("w1")
    with pytest.raises(NotFound):
        d.core.handle(cmd.Complete(now=T0, activity_id="ghost", token=1))


# --- property: whatever the interleaving, leases stay exclusive and results single ------------

WORKERS = ("w1", "w2", "w3")
ACTIVITIES = ("a0", "a1", "a2", "a3")

action = st.one_of(
    st.tuples(st.just("poll"), st.sampled_from(WORKERS), st.integers(1, 2)),
    st.tuples(
        st.sampled_from(["start", "complete", "fail", "renew"]),
        st.sampled_from(WORKERS),
        st.integers(0, 7),
    ),
    st.tuples(st.just("tick"), st.sampled_from([1.0, 5.0, 11.0]), st.just(0)),
    st.tuples(st.just("lose"), st.sampled_from(WORKERS), st.just(0)),
    st.tuples(st.just("shutdown"), st.sampled_from(WORKERS), st.just(0)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(action, min_size=1, max_size=60), st.booleans())
def test_any_interleaving_keeps_leases_exclusive_and_results_single(
    actions: list[tuple[str, Any, int]], stealing: bool
) -> None:
    config = SchedulerConfig(
        lease_ttl_s=10.0, stealing=StealingConfig(enabled=stealing, max_steals_per_activity=2)
    )
    d = Driver(config)
    for worker_id in WORKERS:
        d.register(worker_id, max_concurrency=2)
    retry = RetryPolicy(max_attempts=3, initial_backoff_s=0.0)
    d.submit(*(act(aid, idempotent=i % 2 == 0, retry=retry) for i, aid in enumerate(ACTIVITIES)))
    held: dict[str, list[Lease]] = {w: [] for w in WORKERS}
    latest: dict[str, int] = {}
    revoked: set[int] = set()
    last_token = 0

    def absorb(decisions: list[Any]) -> None:
        nonlocal last_token
        for decision in decisions:
            if isinstance(decision, LeaseGranted):
                lease = decision.lease
                assert lease.token > last_token
                last_token = lease.token
                latest[lease.activity_id] = lease.token
                held[lease.worker_id].append(lease)
            elif isinstance(decision, LeaseRevoked):
                revoked.add(decision.token)

    for name, arg, n in actions:
        try:
            if name == "poll":
                out = d.do(cmd.Poll, worker_id=arg, max_items=n)
            elif name == "tick":
                d.now += arg
                out = d.do(cmd.Tick)
            elif name == "lose":
                out = d.do(cmd.WorkersLost, worker_ids=(arg,))
                d.register(arg, max_concurrency=2)
            elif name == "shutdown":
                out = d.do(cmd.ShutdownWorker, worker_id=arg)
            else:
                if not held[arg]:
                    continue
                lease = held[arg][n % len(held[arg])]
                command = {
                    "start": cmd.StartActivity,
                    "complete": cmd.Complete,
                    "fail": cmd.Fail,
                    "renew": cmd.RenewLease,
                }[name]
                before = fingerprint(d.core)
                try:
                    out = d.do(command, activity_id=lease.activity_id, token=lease.token)
                except WfError:
                    assert fingerprint(d.core) == before
                    continue
                # Accepted: the token was the live one, never one revoked.
                assert lease.token == latest[lease.activity_id]
                assert lease.token not in revoked
        except WorkerNotActive:
            if name == "shutdown":
                d.register(arg, max_concurrency=2)  # a drained or gone worker comes back
            continue
        absorb(out.decisions)
        # Exclusivity: a held activity is in exactly its holder's lease table.
        for aid in ACTIVITIES:
            a = d.core.activities.get(aid)
            owners = [w for w, s in d.core.registry.workers.items() if aid in s.leases]
            if a is not None and a.state in (S.LEASED, S.EXECUTING):
                assert owners == [a.worker_id]
                assert d.core.registry.workers[owners[0]].leases[aid] == a.token
            else:
                assert owners == []
    completed = d.count(ActivityCompleted)
    assert all(count == 1 for count in completed.values())
    assert d.core.running == sum(len(w.leases) for w in d.core.registry.workers.values())
