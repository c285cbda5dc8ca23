"""WF-005 §15 load balancing: which eligible worker gets the next activity.

Theory of operation
-------------------
The dispatcher filters workers down to the *candidates* for one activity
(capabilities, tenant, activity types and partitions all match, and each
candidate has a free slot) and asks a :class:`LoadBalancer` to pick one. The
balancer only ranks; it never rejects, so ``choose`` always returns one of the
candidates.

Every strategy is a lexicographic minimum over a per-worker key whose last
component is the worker's registration ``seq``. The caller passes candidates in
ascending ``seq`` order, so "lowest seq wins a tie" is simply "the first
minimum wins": each loop keeps its best on a strict ``<`` and never compares
``seq`` itself. That, and the absence of clocks and randomness, is what makes
the choice deterministic (WF-005 §28): the same candidates give the same worker.

``choose`` runs on every dispatch, so each implementation is a single pass over
the candidates with no per-call allocation. Loads are compared by cross
multiplication (``a/m < b/n`` as ``a*n < b*m``), exact on integers, and a
loop stops early once no later candidate can beat the best (an idle worker
for least loaded, for example): the earliest such candidate has the lowest seq.

Only round robin has state (the last chosen ``seq``); :meth:`LoadBalancer.snapshot`
and :meth:`LoadBalancer.restore` carry it across restarts so that recovery
(WF-005 §23) continues the rotation where it stopped.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, Final, Protocol

from wf.errors import Internal, InvalidArgument, UnknownPolicy
from wf.scheduler.model import Activity, WorkerState

LOCALITY_LABEL: Final = "locality"
"""The worker label that locality-aware balancing matches against ``Activity.locality``."""


class BalancingStrategy(enum.StrEnum):
    """WF-005 §15 load-balancing strategies."""

    LEAST_LOADED = "least_loaded"
    """Lowest ``leases / max_concurrency``, then fewest leases, then lowest seq."""
    ROUND_ROBIN = "round_robin"
    """Rotate by registration seq: the first candidate after the last one chosen, wrapping."""
    CAPABILITY_AWARE = "capability_aware"
    """Fewest capabilities beyond the required (GPU workers stay free for GPU work), then load."""
    RESOURCE_AWARE = "resource_aware"
    """Lowest ``max(cpu, memory, load)`` from the latest heartbeat, then load, then seq."""
    LOCALITY_AWARE = "locality_aware"
    """Workers whose ``locality`` label matches the activity's first; least loaded in a group."""


class LoadBalancer(Protocol):
    """Picks one worker among eligible candidates; pure and deterministic."""

    @property
    def strategy(self) -> BalancingStrategy:
        """The strategy this balancer implements."""
        ...

    def choose(self, activity: Activity, candidates: Sequence[WorkerState]) -> WorkerState:
        """Return the candidate that should receive ``activity``.

        The caller guarantees that ``candidates`` is non-empty, that every
        candidate is eligible for ``activity`` (capabilities, tenant, activity
        type, partition) and has a free slot, and that candidates are in
        ascending ``seq`` order. The result is always one of ``candidates``
        (the same object). Raises :class:`~wf.errors.Internal` if
        ``candidates`` is empty: that is a dispatcher bug.
        """
        ...

    def snapshot(self) -> dict[str, int]:
        """The balancer's state, to persist with the core's; ``{}`` when stateless."""
        ...

    def restore(self, state: dict[str, int]) -> None:
        """Replace the state with one taken by :meth:`snapshot`.

        A snapshot taken under another strategy is ignored (stateless
        balancers ignore every snapshot), so changing the configured strategy
        across a restart never blocks recovery. Raises
        :class:`~wf.errors.InvalidArgument` if a value has the wrong type.
        """
        ...


def _no_candidates(strategy: BalancingStrategy, activity: Activity) -> Internal:
    return Internal(
        "load balancer called without candidates",
        strategy=strategy.value,
        activity_id=activity.activity_id,
    )


def _least_loaded(candidates: Sequence[WorkerState]) -> WorkerState:
    """Least loaded, then fewest leases; the first (lowest seq) wins ties."""
    best = candidates[0]
    best_leases = len(best.leases)
    if best_leases == 0:
        return best
    best_max = best.info.max_concurrency
    for worker in candidates:
        leases = len(worker.leases)
        if leases == 0:
            # Nothing beats an idle worker and this is the first one.
            return worker
        max_concurrency = worker.info.max_concurrency
        lhs = leases * best_max
        rhs = best_leases * max_concurrency
        if lhs < rhs or (lhs == rhs and leases < best_leases):
            best, best_leases, best_max = worker, leases, max_concurrency
    return best


def _ranked_then_least_loaded(
    candidates: Sequence[WorkerState],
    rank: Callable[[WorkerState, str | None], int],
    key: str | None,
    best_possible: int,
) -> WorkerState:
    """Lowest ``rank(worker, key)``, then least loaded, then fewest leases; the first
    (lowest seq) wins ties. A candidate of rank ``best_possible`` without leases ends
    the pass: nothing later can beat it."""
    best = candidates[0]
    best_rank = rank(best, key)
    best_leases = len(best.leases)
    best_max = best.info.max_concurrency
    for worker in candidates:
        worker_rank = rank(worker, key)
        if worker_rank > best_rank:
            continue
        leases = len(worker.leases)
        if worker_rank == best_possible and leases == 0:
            return worker
        max_concurrency = worker.info.max_concurrency
        if worker_rank < best_rank:
            better = True
        else:
            lhs = leases * best_max
            rhs = best_leases * max_concurrency
            better = lhs < rhs or (lhs == rhs and leases < best_leases)
        if better:
            best, best_rank, best_leases, best_max = worker, worker_rank, leases, max_concurrency
    return best


def _capability_count(worker: WorkerState, _key: str | None) -> int:
    # Candidates hold every required capability: the count is the surplus plus a constant.
    return len(worker.info.capabilities)


def _elsewhere(worker: WorkerState, locality: str | None) -> int:
    return 0 if worker.info.labels.get(LOCALITY_LABEL) == locality else 1


class _Stateless:
    """Snapshot and restore for the balancers that have nothing to remember."""

    __slots__ = ()

    def snapshot(self) -> dict[str, int]:
        """Always ``{}``: this strategy has no state."""
        return {}

    def restore(self, state: dict[str, int]) -> None:
        """Ignore ``state``: this strategy has no state."""
        del state


class LeastLoadedBalancer(_Stateless):
    """:attr:`BalancingStrategy.LEAST_LOADED`."""

    __slots__ = ()
    strategy: ClassVar[BalancingStrategy] = BalancingStrategy.LEAST_LOADED

    def choose(self, activity: Activity, candidates: Sequence[WorkerState]) -> WorkerState:
        """Lowest load, then fewest leases, then lowest seq."""
        if not candidates:
            raise _no_candidates(self.strategy, activity)
        return _least_loaded(candidates)


class RoundRobinBalancer:
    """:attr:`BalancingStrategy.ROUND_ROBIN`.

    The rotation is kept as the last chosen ``seq`` rather than an index, so it
    stays fair when the candidate set changes between calls: a worker that
    leaves does not shift everyone's turn, and a new worker (a higher seq)
    takes its turn at the end of the current round.
    """

    __slots__ = ("_last_seq",)
    strategy: ClassVar[BalancingStrategy] = BalancingStrategy.ROUND_ROBIN

    def __init__(self) -> None:
        self._last_seq: int | None = None

    def choose(self, activity: Activity, candidates: Sequence[WorkerState]) -> WorkerState:
        """The first candidate whose seq is above the last chosen one, else the first."""
        if not candidates:
            raise _no_candidates(self.strategy, activity)
        chosen = candidates[0]
        last_seq = self._last_seq
        if last_seq is not None:
            for worker in candidates:
                if worker.seq > last_seq:
                    chosen = worker
                    break
        self._last_seq = chosen.seq
        return chosen

    def snapshot(self) -> dict[str, int]:
        """``{"last_seq": n}`` once a worker was chosen, ``{}`` before."""
        return {} if self._last_seq is None else {"last_seq": self._last_seq}

    def restore(self, state: dict[str, int]) -> None:
        """Continue the rotation after ``state["last_seq"]`` (restart it if absent)."""
        last_seq = state.get("last_seq")
        # bool is an int subclass; a stored True is corruption, not seq 1.
        if last_seq is not None and type(last_seq) is not int:
            raise InvalidArgument(
                "round robin snapshot: last_seq must be an integer", last_seq=repr(last_seq)
            )
        self._last_seq = last_seq


class CapabilityAwareBalancer(_Stateless):
    """:attr:`BalancingStrategy.CAPABILITY_AWARE`.

    Candidates are eligible, so each one's capabilities include the required
    ones and "capabilities beyond the required" is just the size of its
    capability set minus a constant; comparing sizes avoids building a set
    difference per candidate.
    """

    __slots__ = ()
    strategy: ClassVar[BalancingStrategy] = BalancingStrategy.CAPABILITY_AWARE

    def choose(self, activity: Activity, candidates: Sequence[WorkerState]) -> WorkerState:
        """Fewest surplus capabilities, then lowest load, then fewest leases, then seq."""
        if not candidates:
            raise _no_candidates(self.strategy, activity)
        return _ranked_then_least_loaded(
            candidates, _capability_count, None, len(activity.capabilities)
        )


class ResourceAwareBalancer(_Stateless):
    """:attr:`BalancingStrategy.RESOURCE_AWARE`.

    The score is the scarcest of the worker's CPU, memory (from its latest
    heartbeat) and lease slots: a worker at 90 % CPU is as busy as one with
    90 % of its slots leased, whatever the other two figures say.
    """

    __slots__ = ()
    strategy: ClassVar[BalancingStrategy] = BalancingStrategy.RESOURCE_AWARE

    def choose(self, activity: Activity, candidates: Sequence[WorkerState]) -> WorkerState:
        """Lowest ``max(cpu_fraction, memory_fraction, load)``, then lowest load, then seq."""
        if not candidates:
            raise _no_candidates(self.strategy, activity)
        best = candidates[0]
        best_score = math.inf  # the first candidate always takes over
        best_load = math.inf
        for worker in candidates:
            stats = worker.stats
            load = len(worker.leases) / worker.info.max_concurrency
            score = load
            if stats.cpu_fraction > score:
                score = stats.cpu_fraction
            if stats.memory_fraction > score:
                score = stats.memory_fraction
            if score < best_score or (score == best_score and load < best_load):
                if score <= 0.0:
                    # Idle on every axis: nothing later can beat it.
                    return worker
                best, best_score, best_load = worker, score, load
        return best


class LocalityAwareBalancer(_Stateless):
    """:attr:`BalancingStrategy.LOCALITY_AWARE`.

    Locality is a soft preference: a matching worker always wins over a
    non-matching one, but when none matches the activity still runs on the
    least loaded of the rest.
    """

    __slots__ = ()
    strategy: ClassVar[BalancingStrategy] = BalancingStrategy.LOCALITY_AWARE

    def choose(self, activity: Activity, candidates: Sequence[WorkerState]) -> WorkerState:
        """Matching ``locality`` label first, then lowest load, fewest leases, seq."""
        if not candidates:
            raise _no_candidates(self.strategy, activity)
        locality = activity.locality
        if locality is None:
            return _least_loaded(candidates)
        return _ranked_then_least_loaded(candidates, _elsewhere, locality, 0)


_FACTORIES: Final[Mapping[BalancingStrategy, Callable[[], LoadBalancer]]] = {
    BalancingStrategy.LEAST_LOADED: LeastLoadedBalancer,
    BalancingStrategy.ROUND_ROBIN: RoundRobinBalancer,
    BalancingStrategy.CAPABILITY_AWARE: CapabilityAwareBalancer,
    BalancingStrategy.RESOURCE_AWARE: ResourceAwareBalancer,
    BalancingStrategy.LOCALITY_AWARE: LocalityAwareBalancer,
}


def make_load_balancer(strategy: BalancingStrategy | str) -> LoadBalancer:
    """A fresh balancer for ``strategy`` (a member or its value, e.g. ``"round_robin"``).

    Raises :class:`~wf.errors.UnknownPolicy` if the name is not a
    :class:`BalancingStrategy` value; ``details["known"]`` lists the values.
    """
    try:
        member = BalancingStrategy(strategy)
    except ValueError:
        raise UnknownPolicy(
            f"unknown load-balancing strategy {strategy!r}",
            strategy=str(strategy),
            known=[s.value for s in BalancingStrategy],
        ) from None
    return _FACTORIES[member]()
