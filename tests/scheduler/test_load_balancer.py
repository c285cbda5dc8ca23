from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wf.errors import Internal, InvalidArgument, UnknownPolicy
from wf.scheduler.load_balancer import (
    BalancingStrategy,
    LoadBalancer,
    make_load_balancer,
)
from wf.scheduler.model import Activity, HeartbeatStats, WorkerInfo, WorkerState

ALL_STRATEGIES = list(BalancingStrategy)
STATELESS = [s for s in ALL_STRATEGIES if s is not BalancingStrategy.ROUND_ROBIN]


def worker(
    seq: int,
    *,
    leases: int = 0,
    max_concurrency: int = 4,
    capabilities: frozenset[str] = frozenset(),
    locality: str | None = None,
    cpu: float = 0.0,
    memory: float = 0.0,
) -> WorkerState:
    labels = {} if locality is None else {"locality": locality}
    return WorkerState(
        info=WorkerInfo(
            worker_id=f"w{seq}",
            capabilities=capabilities,
            max_concurrency=max_concurrency,
            labels=labels,
        ),
        seq=seq,
        stats=HeartbeatStats(cpu_fraction=cpu, memory_fraction=memory),
        leases={f"a{seq}-{i}": i + 1 for i in range(leases)},
    )


def activity(
    *, capabilities: frozenset[str] = frozenset(), locality: str | None = None
) -> Activity:
    return Activity(
        activity_id="act", activity_type="t", capabilities=capabilities, locality=locality
    )


def ids(workers: Sequence[WorkerState]) -> list[str]:
    return [w.info.worker_id for w in workers]


# -- per-strategy choices ------------------------------------------------


def test_least_loaded_prefers_lowest_load_then_fewest_leases_then_seq() -> None:
    lb = make_load_balancer(BalancingStrategy.LEAST_LOADED)
    # w1 50 %, w2 25 % with 2 leases, w3 25 % with 1 lease, w4 like w3.
    ws = [
        worker(1, leases=2, max_concurrency=4),
        worker(2, leases=2, max_concurrency=8),
        worker(3, leases=1, max_concurrency=4),
        worker(4, leases=1, max_concurrency=4),
    ]
    assert lb.choose(activity(), ws) is ws[2]
    assert lb.choose(activity(), ws[:2]) is ws[1]
    assert lb.choose(activity(), [ws[3], *ws[:2]]) is ws[3]


def test_least_loaded_takes_first_idle_worker() -> None:
    lb = make_load_balancer("least_loaded")
    ws = [worker(1, leases=1), worker(2), worker(3)]
    assert lb.choose(activity(), ws) is ws[1]


def test_capability_aware_keeps_special_workers_free() -> None:
    lb = make_load_balancer(BalancingStrategy.CAPABILITY_AWARE)
    gpu = worker(1, capabilities=frozenset({"gpu", "llm"}))
    plain = worker(2, leases=3, max_concurrency=4)
    llm = worker(3, capabilities=frozenset({"llm"}))
    # Plain work goes to the plain worker although it is busier.
    assert lb.choose(activity(), [gpu, plain, llm]) is plain
    # LLM work goes to the llm-only worker, not the GPU one.
    need_llm = activity(capabilities=frozenset({"llm"}))
    assert lb.choose(need_llm, [gpu, llm]) is llm
    # Equal surplus: least loaded decides.
    llm_busy = worker(0, leases=1, capabilities=frozenset({"llm"}))
    assert lb.choose(need_llm, [llm_busy, gpu, llm]) is llm
    assert lb.choose(need_llm, [llm_busy, gpu]) is llm_busy


def test_resource_aware_scores_by_scarcest_resource() -> None:
    lb = make_load_balancer(BalancingStrategy.RESOURCE_AWARE)
    hot_cpu = worker(1, cpu=0.9)  # score 0.9
    full_mem = worker(2, memory=0.8, leases=1)  # score 0.8
    busy = worker(3, leases=3, cpu=0.1)  # score 0.75
    assert lb.choose(activity(), [hot_cpu, full_mem, busy]) is busy
    # Equal scores: lower load wins, then seq.
    a = worker(4, cpu=0.5, leases=1)  # score 0.5, load 0.25
    b = worker(5, cpu=0.5)  # score 0.5, load 0
    c = worker(6, memory=0.5)  # score 0.5, load 0
    assert lb.choose(activity(), [a, b, c]) is b
    idle = worker(7)
    assert lb.choose(activity(), [a, b, c, idle]) is idle


def test_resource_aware_handles_scores_above_one() -> None:
    lb = make_load_balancer(BalancingStrategy.RESOURCE_AWARE)
    ws = [worker(1, cpu=3.0), worker(2, cpu=2.5)]
    assert lb.choose(activity(), ws) is ws[1]


def test_locality_aware_prefers_matching_label() -> None:
    lb = make_load_balancer(BalancingStrategy.LOCALITY_AWARE)
    far_idle = worker(1, locality="eu")
    near_busy = worker(2, leases=3, locality="us")
    near_less_busy = worker(3, leases=2, locality="us")
    unlabelled = worker(4)
    ws = [far_idle, near_busy, near_less_busy, unlabelled]
    assert lb.choose(activity(locality="us"), ws) is near_less_busy
    # No match at all: least loaded of the rest.
    assert lb.choose(activity(locality="ap"), [near_busy, far_idle]) is far_idle
    # No locality requested: plain least loaded.
    assert lb.choose(activity(), [near_busy, far_idle]) is far_idle


def test_round_robin_rotates_by_seq() -> None:
    lb = make_load_balancer(BalancingStrategy.ROUND_ROBIN)
    ws = [worker(1), worker(2), worker(3)]
    chosen = [lb.choose(activity(), ws).seq for _ in range(7)]
    assert chosen == [1, 2, 3, 1, 2, 3, 1]


@pytest.mark.parametrize(("n", "k"), [(1, 5), (3, 4), (7, 10)])
def test_round_robin_is_fair(n: int, k: int) -> None:
    lb = make_load_balancer(BalancingStrategy.ROUND_ROBIN)
    ws = [worker(10 * i + 3) for i in range(n)]
    counts = Counter(lb.choose(activity(), ws).seq for _ in range(k * n))
    assert counts == {w.seq: k for w in ws}


def test_round_robin_is_stable_when_candidates_come_and_go() -> None:
    lb = make_load_balancer(BalancingStrategy.ROUND_ROBIN)
    w1, w2, w3, w4, w5 = (worker(s) for s in (1, 2, 3, 4, 5))
    assert lb.choose(activity(), [w1, w2, w3]) is w1
    # The last chosen worker is busy (not a candidate): the turn still moves on.
    assert lb.choose(activity(), [w2, w3]) is w2
    # w2 leaves; a newcomer w5 joins and takes its turn at the end of the round.
    assert lb.choose(activity(), [w1, w3, w5]) is w3
    assert lb.choose(activity(), [w1, w3, w4, w5]) is w4
    assert lb.choose(activity(), [w1, w3, w4, w5]) is w5
    assert lb.choose(activity(), [w1, w3, w4, w5]) is w1
    # Only workers before the last chosen: wrap around to the first.
    assert lb.choose(activity(), [w1]) is w1


def test_round_robin_snapshot_restore_continues_identically() -> None:
    ws = [worker(s) for s in (2, 4, 6, 8)]
    original = make_load_balancer(BalancingStrategy.ROUND_ROBIN)
    assert original.snapshot() == {}
    for _ in range(5):
        original.choose(activity(), ws)
    state = original.snapshot()
    assert state == {"last_seq": 2}
    copy = make_load_balancer("round_robin")
    copy.restore(dict(state))
    for _ in range(9):
        assert copy.choose(activity(), ws) is original.choose(activity(), ws)
    assert copy.snapshot() == original.snapshot()
    # An empty snapshot restarts the rotation.
    copy.restore({})
    assert copy.choose(activity(), ws) is ws[0]


def test_round_robin_restore_rejects_corrupt_state() -> None:
    lb = make_load_balancer(BalancingStrategy.ROUND_ROBIN)
    with pytest.raises(InvalidArgument):
        lb.restore({"last_seq": True})


@pytest.mark.parametrize("strategy", STATELESS)
def test_stateless_strategies_snapshot_nothing(strategy: BalancingStrategy) -> None:
    lb = make_load_balancer(strategy)
    assert lb.strategy is strategy
    lb.choose(activity(), [worker(1), worker(2)])
    assert lb.snapshot() == {}
    lb.restore({"last_seq": 7})  # another strategy's snapshot is ignored
    assert lb.snapshot() == {}


@pytest.mark.parametrize("strategy", ALL_STRATEGIES)
def test_no_candidates_is_an_internal_error(strategy: BalancingStrategy) -> None:
    with pytest.raises(Internal):
        make_load_balancer(strategy).choose(activity(), [])


@pytest.mark.parametrize("name", ["", "LEAST_LOADED", "random", "least-loaded"])
def test_unknown_strategy_name(name: str) -> None:
    with pytest.raises(UnknownPolicy) as info:
        make_load_balancer(name)
    assert info.value.details["strategy"] == name
    assert "round_robin" in info.value.details["known"]


def test_every_strategy_has_a_balancer() -> None:
    for strategy in BalancingStrategy:
        assert make_load_balancer(strategy.value).strategy is strategy


# -- properties ----------------------------------------------------------

CAPS = ("gpu", "llm", "ssd")
LOCALITIES = (None, "eu", "us")


@st.composite
def worker_states(draw: st.DrawFn) -> list[WorkerState]:
    seqs = sorted(draw(st.sets(st.integers(0, 1000), min_size=1, max_size=12)))
    out: list[WorkerState] = []
    for seq in seqs:
        max_concurrency = draw(st.integers(1, 8))
        out.append(
            worker(
                seq,
                max_concurrency=max_concurrency,
                leases=draw(st.integers(0, max_concurrency - 1)),
                capabilities=frozenset(draw(st.sets(st.sampled_from(CAPS)))),
                locality=draw(st.sampled_from(LOCALITIES)),
                cpu=draw(st.floats(0.0, 1.0)),
                memory=draw(st.floats(0.0, 1.0)),
            )
        )
    return out


def reference_key(strategy: BalancingStrategy, act: Activity, w: WorkerState) -> tuple[object, ...]:
    """The specification of each stateless strategy, written as a sort key."""
    load = len(w.leases) / w.info.max_concurrency
    least_loaded = (load, len(w.leases), w.seq)
    match strategy:
        case BalancingStrategy.LEAST_LOADED:
            return least_loaded
        case BalancingStrategy.CAPABILITY_AWARE:
            return (len(w.info.capabilities - act.capabilities), *least_loaded)
        case BalancingStrategy.RESOURCE_AWARE:
            return (max(w.stats.cpu_fraction, w.stats.memory_fraction, load), load, w.seq)
        case BalancingStrategy.LOCALITY_AWARE:
            mismatch = act.locality is not None and w.info.labels.get("locality") != act.locality
            return (mismatch, *least_loaded)
    raise AssertionError(strategy)


def eligible(act: Activity, ws: list[WorkerState]) -> list[WorkerState]:
    return [w for w in ws if act.capabilities <= w.info.capabilities]


@given(
    ws=worker_states(),
    required=st.sets(st.sampled_from(CAPS), max_size=1),
    locality=st.sampled_from(LOCALITIES),
    strategy=st.sampled_from(STATELESS),
)
def test_stateless_choice_matches_specification(
    ws: list[WorkerState],
    required: set[str],
    locality: str | None,
    strategy: BalancingStrategy,
) -> None:
    act = activity(capabilities=frozenset(required), locality=locality)
    candidates = eligible(act, ws)
    if not candidates:
        act = activity(locality=locality)
        candidates = ws
    chosen = make_load_balancer(strategy).choose(act, candidates)
    assert chosen is min(candidates, key=lambda w: reference_key(strategy, act, w))


@given(
    ws=worker_states(),
    locality=st.sampled_from(LOCALITIES),
    strategy=st.sampled_from(ALL_STRATEGIES),
    calls=st.integers(1, 30),
)
def test_choice_is_deterministic_and_a_candidate(
    ws: list[WorkerState], locality: str | None, strategy: BalancingStrategy, calls: int
) -> None:
    act = activity(locality=locality)
    first: LoadBalancer = make_load_balancer(strategy)
    second: LoadBalancer = make_load_balancer(strategy)
    for i in range(calls):
        # Vary the candidate set between calls: drop every (i % len)-th worker.
        candidates = [w for j, w in enumerate(ws) if len(ws) == 1 or j != i % len(ws)]
        a = first.choose(act, candidates)
        b = second.choose(act, candidates)
        assert a is b
        assert any(a is c for c in candidates)
    assert first.snapshot() == second.snapshot()


@given(ws=worker_states(), calls=st.integers(1, 40))
def test_round_robin_matches_specification(ws: list[WorkerState], calls: int) -> None:
    lb = make_load_balancer(BalancingStrategy.ROUND_ROBIN)
    last: int | None = None
    for i in range(calls):
        candidates = ws[i % len(ws) :] or ws
        after = [w for w in candidates if last is None or w.seq > last]
        expected = after[0] if after else candidates[0]
        assert lb.choose(activity(), candidates) is expected
        last = expected.seq
