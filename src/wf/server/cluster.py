"""One server's role in a cluster of servers on one PostgreSQL store (docs/ha.md).

Theory of operation
-------------------
Every node listens from the start. One is *active*: it owns the store (the
schema's advisory lock and an ownership epoch in the fence row) and serves;
the others are *standbys*: they answer ``/healthz``, ``rpc.discover`` and
``cluster.status``, and every other call with ``not_leader`` naming the
active's advertised URL (read from the fence row, which the owner writes as it
claims its epoch). A standby campaigns every ``campaign_interval_s``: one
``pg_try_advisory_lock`` on its writer session; on winning it starts a new
epoch, recovers from the store and serves.

Correctness never rests on the election. Every write transaction checks the
epoch and commit sequence inside PostgreSQL (the fence, :mod:`wf.store.postgres`),
so a deposed node cannot commit, whatever its clock or session state. The
election and the gate below only keep a deposed node from wasting work and
from answering reads with a stale view:

- *Liveness bound.* Once active, the writer session is bounded on the server
  side (``session_timeout_s``: idle and idle-in-transaction timeouts, TCP user
  timeout and keepalives), so that a frozen or cut-off active loses its lock,
  and a standby takes over, within that bound. The active pings its session
  well within it.
- *Gate.* The active stops answering (``not_leader``) once its session went
  unconfirmed for ``session_timeout_s - gate_margin_s``: before PostgreSQL could
  have let another node in. A confirmation (a fenced commit, or a ping that
  finds the fence where this node's last commit left it; never a bare
  reconnect) opens it again; a gate closed for longer makes the node prove its
  ownership with a fenced empty commit, which either succeeds or deposes it.
- *Deposed.* A node whose fence moved, or which finds another node holding the
  lock as it reconnects, steps down: open long polls are answered at once,
  the schedule service and run engine stop without draining (the new active's
  recovery takes their runs over), ownership is released, and it campaigns
  again as a standby.

Each node's clock is compared with PostgreSQL's before it campaigns: a skew over
``clock_skew_warn_s`` is logged, one over ``clock_skew_max_s`` keeps it from
campaigning. Every ``report_interval_s`` each node records its role and epoch
in ``cluster_nodes`` for ``cluster.status``.

On SQLite there is one server, always active; this module then only answers
``cluster.status`` for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from wf.errors import (
    NotLeader,
    OwnershipConflict,
    OwnershipLost,
    StoreUnavailable,
    WfError,
)
from wf.node import RecoveryReport, SchedulerNode
from wf.server.config import ClusterConfig
from wf.store.protocol import StoredState
from wf.wire.cluster_methods import ClusterStatus, NodeView, Role

if TYPE_CHECKING:
    # psycopg is the ``postgres`` extra: a SQLite-only install never imports these.
    from wf.store.postgres import PostgresStore
    from wf.store.postgres_follow import WarmCopy

log = logging.getLogger("wf.server.cluster")

CLOCK_CHECK_INTERVAL_S: Final = 10.0
"""How often a standby compares its clock with PostgreSQL's while it campaigns."""
UNGATED_METHODS: Final = frozenset({"rpc.discover", "cluster.status"})
WARM_PEER_FRESH_REPORTS: Final = 3
"""A warm peer counts while its last report is at most this many report intervals old."""
STALE_AFTER_REPORTS: Final = 5
"""``cluster.status`` lists a node ``stale`` once its last report is more than this many
report intervals old (it reports every interval while it runs; a loaded host can miss
one or two, so this is well above that)."""
"""What every node answers whatever its role."""


def default_node_id() -> str:
    """Host, process id and start second: unique enough to tell nodes apart."""
    return f"{socket.gethostname()}-{os.getpid()}-{int(time.time())}"


class ClusterRole:
    """This server's role (see the module docstring)."""

    def __init__(
        self,
        node: SchedulerNode,
        config: ClusterConfig,
        *,
        activate: Callable[[], Awaitable[RecoveryReport]],
        deactivate: Callable[[], Awaitable[None]],
    ) -> None:
        self.node = node
        self.config = config
        store = node.store
        self.store: PostgresStore | None = _postgres_store(store)
        """The PostgreSQL store, or ``None`` on SQLite (one server, always active)."""
        self.node_id = config.node_id or default_node_id()
        self.advertise_url = config.advertise_url
        self._activate = activate
        self._deactivate = deactivate
        self.role: Role = "starting"
        self.epoch = 0
        """The ownership epoch served (active) or last seen in the fence (standby)."""
        self.commit_seq = 0
        """The fence's commit sequence as last seen."""
        self.leader_url: str | None = None
        """The active's advertised URL as the fence names it."""
        self.leader_node: str | None = None
        self.takeovers = 0
        """Times this node became active."""
        self.warm_takeovers = 0
        """Of those, the take-overs that recovered from the warm copy."""
        self.recovery: RecoveryReport | None = None
        """The last take-over's recovery."""
        self.role_changes: list[Callable[[Role, int], None]] = []
        """Called with the new role and epoch on every change (the server prints it)."""
        self._started_at = datetime.now(UTC).isoformat(timespec="seconds")
        self._skew_checked_at = -CLOCK_CHECK_INTERVAL_S
        self._skew_refused = False
        self._tasks: list[asyncio.Task[None]] = []
        self._changing = asyncio.Lock()
        self._copy: WarmCopy | None = None
        """A standby's warm copy of the scheduler state (``None``: none yet)."""
        self._warming = asyncio.Lock()
        self._verified_at = time.monotonic()

    @property
    def clustered(self) -> bool:
        """Whether this server is a node of a PostgreSQL cluster."""
        return self.store is not None

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """SQLite: become active. PostgreSQL: open as a standby, campaign once (so a
        lone node is active when this returns), then keep campaigning and reporting
        in the background."""
        if self.store is None:
            self.recovery = await self._activate()
            self._set_role("active")
            return
        self.store.require_ownership = True
        self.store.identity = (self.node_id, self.advertise_url)
        self.node.yields = True
        await self.node.open()
        self._set_role("standby")
        await self._campaign_once()
        if self.role == "standby":
            await self._report_once()  # the active reported as it won
        self._tasks = [
            asyncio.create_task(self._campaign(), name="wf-cluster-campaign"),
            asyncio.create_task(self._report(), name="wf-cluster-report"),
            asyncio.create_task(self._keep_warm(), name="wf-cluster-warm"),
        ]

    async def stop(self) -> None:
        """Stop campaigning and reporting; the role stays as it is, so that an active
        node serves its drain (workers finish the scheduled runs); then the caller
        stops the node, which releases ownership, and a standby takes over."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)
        self._tasks = []

    async def leaving(self) -> None:
        """The server stops serving (after its drain, before its node stops)."""
        if self.role != "stopping":
            self._set_role("stopping")
            await self._report_once()

    # ------------------------------------------------------------ serving

    def check_serving(self, method: str) -> None:
        """Raise :class:`NotLeader` unless this node serves ``method`` now."""
        if method in UNGATED_METHODS or self.store is None:
            return
        if self.role == "active" and not self.gate_closed() and not self.node.ownership_lost:
            return
        leader = None if self.role == "active" else self.leader_url
        raise NotLeader(
            "this server is not the active node of its cluster; retry at the active",
            leader_url=leader,
            epoch=self.epoch,
            role=self.role,
        )

    def gate_closed(self) -> bool:
        """Whether the active's writer session went unconfirmed for too long to answer."""
        if self.store is None:
            return False
        silent_s = time.monotonic() - self.store.confirmed_at
        return silent_s > self.config.session_timeout_s - self.config.gate_margin_s

    async def status(self) -> ClusterStatus:
        """``cluster.status``: this node's view of the cluster."""
        if self.store is None:
            me = NodeView(
                node_id=self.node_id,
                advertise_url=self.advertise_url,
                role=self.role,
                epoch=0,
                seen_s_ago=0.0,
                lag_commits=0,
            )
            return ClusterStatus(
                node_id=self.node_id,
                role=self.role,
                epoch=0,
                commit_seq=0,
                leader_url=self.advertise_url,
                nodes=[me],
            )
        fence = await self.store.fence_state()
        rows = await self.store.cluster_nodes()
        seq = fence.commit_seq if fence is not None else self.commit_seq
        stale_s = STALE_AFTER_REPORTS * self.config.report_interval_s
        return ClusterStatus(
            node_id=self.node_id,
            role=self.role,
            epoch=fence.epoch if fence is not None else self.epoch,
            commit_seq=seq,
            leader_url=self.leader_url if fence is None else fence.owner_url,
            nodes=[
                NodeView(
                    node_id=row.node_id,
                    advertise_url=row.advertise_url,
                    role=_role(row.role, row.seen_s_ago, stale_s),
                    epoch=row.epoch,
                    seen_s_ago=max(0.0, row.seen_s_ago),
                    lag_commits=0 if row.role == "active" else max(0, seq - row.applied_seq),
                )
                for row in rows
            ],
        )

    # ------------------------------------------------------------ campaign

    async def _campaign(self) -> None:
        while True:
            await asyncio.sleep(self.config.campaign_interval_s)
            try:
                if self.role == "active":
                    await self._watch_active()
                elif self.role == "standby":
                    await self._campaign_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # the loop must outlive any one failure
                log.exception("cluster campaign step failed", extra={"action": "cluster.error"})

    async def _campaign_once(self) -> None:
        """One attempt to take ownership; learn who the active is when it fails."""
        store = self.store
        assert store is not None
        if not await self._clock_allows():
            return
        if self._copy is None and await self._warm_peer():
            return  # let a standby with a warm copy take over: it recovers in a fraction
        async with self._changing:
            if self.role != "standby":
                return
            try:
                report = await self._activate()
            except OwnershipConflict:
                await self._learn_leader()
                await self._end_stuck_owner(store)
                return
            except (StoreUnavailable, OwnershipLost) as exc:
                log.warning(
                    "campaign failed: %s",
                    exc.message,
                    extra={"action": "cluster.campaign_failed", "error": exc.message},
                )
                return
            self.recovery = report
            self.takeovers += 1
            self.epoch = store.epoch or 0
            self.commit_seq = store.commit_seq
            self.leader_url, self.leader_node = self.advertise_url, self.node_id
            self._set_role("active")
            log.info(
                "took over as the active node (epoch %d) in %.3f s of recovery",
                self.epoch,
                report.duration_s,
                extra={
                    "action": "cluster.active",
                    "epoch": self.epoch,
                    "recovery_s": round(report.duration_s, 3),
                    "activities": report.activities,
                },
            )
        await self._report_once()

    async def _warm_peer(self) -> bool:
        """Whether another standby with a warm copy reported lately (a cold standby then
        leaves the take-over to it; once that one stops reporting, it campaigns)."""
        store = self.store
        assert store is not None
        try:
            rows = await store.cluster_nodes()
        except WfError:
            return False
        fresh_s = WARM_PEER_FRESH_REPORTS * self.config.report_interval_s
        return any(
            row.role == "standby"
            and row.node_id != self.node_id
            and row.applied_seq > 0
            and row.seen_s_ago < fresh_s
            for row in rows
        )

    async def _end_stuck_owner(self, store: PostgresStore) -> None:
        """End the owner's session if it is stuck mid-transaction on a silent client
        (PostgreSQL's own idle timeouts do not run there); the next campaign wins."""
        try:
            ended = await store.end_stuck_owner(self.config.session_timeout_s)
        except WfError:
            return
        if ended is not None:
            pid, state = ended
            log.warning(
                "ended the active's session (backend %d, %s): it waited on its client "
                "for over %g s inside a transaction",
                pid,
                state,
                self.config.session_timeout_s,
                extra={"action": "cluster.ended_stuck_owner", "backend_pid": pid},
            )

    async def _learn_leader(self) -> None:
        store = self.store
        assert store is not None
        try:
            fence = await store.fence_state()
        except WfError:
            return
        if fence is None:
            return
        self.epoch, self.commit_seq = fence.epoch, fence.commit_seq
        if fence.owner_node == self.node_id:
            self.leader_url = self.leader_node = None  # our own past epoch: nobody known
        else:
            self.leader_url, self.leader_node = fence.owner_url, fence.owner_node

    async def _watch_active(self) -> None:
        """While active: step down once deposed (or given up); make a long-gated node
        prove its ownership."""
        node = self.node
        if node.deposed.is_set() or node.unrecoverable.is_set():
            await self._step_down("deposed" if node.deposed.is_set() else "unrecoverable")
            return
        store = self.store
        assert store is not None
        silent_s = time.monotonic() - store.confirmed_at
        if silent_s > self.config.session_timeout_s and not node.writes_stopped:
            try:
                async with asyncio.timeout(self.config.session_timeout_s):
                    await store.prove_writable()
            except (WfError, TimeoutError) as exc:
                detail = exc.message if isinstance(exc, WfError) else "timed out"
                log.warning(
                    "could not prove ownership after %.1f s of silence: %s",
                    silent_s,
                    detail,
                    extra={"action": "cluster.unproven", "error": detail},
                )
                await self._step_down("unproven")

    async def _step_down(self, why: str) -> None:
        async with self._changing:
            if self.role != "active":
                return
            self._set_role("standby")
            log.warning(
                "stepping down as the active node (%s); campaigning as a standby",
                why,
                extra={"action": "cluster.standby", "reason": why, "epoch": self.epoch},
            )
            self.leader_url = self.leader_node = None
            await self._deactivate()
        await self._learn_leader()
        await self._report_once()

    async def _clock_allows(self) -> bool:
        """Compare the clocks every CLOCK_CHECK_INTERVAL_S; ``False`` while skewed too far."""
        store = self.store
        assert store is not None
        now = time.monotonic()
        if now - self._skew_checked_at < CLOCK_CHECK_INTERVAL_S:
            return not self._skew_refused
        self._skew_checked_at = now
        try:
            skew = await store.clock_skew_s()
        except WfError:
            return not self._skew_refused
        self._skew_refused = abs(skew) > self.config.clock_skew_max_s
        if self._skew_refused:
            log.error(
                "this node's clock is %.3f s off PostgreSQL's (over %g s): not campaigning",
                skew,
                self.config.clock_skew_max_s,
                extra={"action": "cluster.clock_refused", "skew_s": round(skew, 6)},
            )
        elif abs(skew) > self.config.clock_skew_warn_s:
            log.warning(
                "this node's clock is %.3f s off PostgreSQL's (over %g s)",
                skew,
                self.config.clock_skew_warn_s,
                extra={"action": "cluster.clock_skew", "skew_s": round(skew, 6)},
            )
        return not self._skew_refused

    # ------------------------------------------------------------ warm copy

    def lag_commits(self) -> int:
        """How many commits a standby's warm copy is behind the fence it last saw."""
        if self.role == "active" or self.store is None:
            return 0
        copy = self._copy
        return max(0, self.commit_seq - (copy.seq if copy is not None else 0))

    async def warm_state(self) -> StoredState:
        """What the store holds, for a take-over: the warm copy brought up to the fence
        (this node now owns the store, so the fence stands still), else a full load."""
        store = self.store
        assert store is not None
        async with self._warming:
            copy, self._copy = self._copy, None  # an active keeps no copy
            if copy is not None and await store.catch_up(copy):
                self.warm_takeovers += 1
                log.info(
                    "recovering from the warm copy",
                    extra={"action": "cluster.warm_takeover", "activities": len(copy.live)},
                )
                return copy.state()
        return await store.load()

    async def _keep_warm(self) -> None:
        while True:
            await asyncio.sleep(self.config.warm_interval_s)
            if self.role != "standby":
                continue
            try:
                await self._warm_once()
            except asyncio.CancelledError:
                raise
            except WfError as exc:
                log.debug("warm copy not brought up to date: %s", exc.message)
            except Exception:
                log.exception("warm copy failed", extra={"action": "cluster.error"})
                self._copy = None

    async def _warm_once(self) -> None:
        store = self.store
        assert store is not None
        async with self._warming:
            if self.role != "standby":
                return
            if self._copy is None:
                self._copy = await store.warm_copy()
                self._verified_at = time.monotonic()
                return
            if not await store.catch_up(self._copy):
                self._copy = await store.warm_copy()
                self._verified_at = time.monotonic()
                return
            if time.monotonic() - self._verified_at >= self.config.warm_verify_interval_s:
                await self._verify(store, self._copy)

    async def _verify(self, store: PostgresStore, copy: WarmCopy) -> None:
        """Compare the copy with a full load at the same sequence; keep the full load
        if they differ (a bug: logged as an error)."""
        self._verified_at = time.monotonic()
        full = await store.warm_copy()
        if copy.seq > full.seq or not await store.catch_up(copy, until=full.seq):
            self._copy = full
            return
        from wf.store.postgres_follow import differences

        found = differences(copy, full)
        if found:
            log.error(
                "the warm copy differed from the store at commit %d: %s; replaced",
                full.seq,
                "; ".join(found),
                extra={"action": "cluster.warm_mismatch", "commit_seq": full.seq},
            )
            self._copy = full

    # ------------------------------------------------------------ reports

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(self.config.report_interval_s)
            try:
                await self._report_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cluster report failed", extra={"action": "cluster.error"})

    async def _report_once(self) -> None:
        store = self.store
        if store is None:
            return
        from wf.store.postgres_cluster import NodeReport

        active = self.role == "active"
        try:
            await store.report_node(
                NodeReport(
                    node_id=self.node_id,
                    advertise_url=self.advertise_url,
                    role=self.role,
                    epoch=(store.epoch or self.epoch) if active else self.epoch,
                    # A standby that may not campaign (clock) reports no copy, so that
                    # cold standbys do not wait for it (_warm_peer).
                    applied_seq=store.commit_seq
                    if active
                    else (
                        self._copy.seq if self._copy is not None and not self._skew_refused else 0
                    ),
                    host=socket.gethostname(),
                    pid=os.getpid(),
                    started_at=self._started_at,
                )
            )
        except WfError as exc:
            log.debug("cluster report failed: %s", exc.message)

    def _set_role(self, role: Role) -> None:
        self.role = role
        for listener in self.role_changes:
            listener(role, self.epoch)


def _role(text: str, seen_s_ago: float, stale_s: float) -> Role:
    """A node's listed role: the one it last reported, ``stale`` once its reports
    stopped coming (a node that stopped cleanly said so: it stays ``stopped``)."""
    if text == "stopped":
        return "stopped"
    if seen_s_ago > stale_s:
        return "stale"
    if text in ("active", "standby", "starting", "stopping"):
        return text  # type: ignore[return-value]
    return "standby"


def _postgres_store(store: object) -> PostgresStore | None:
    """``store`` if it is a PostgreSQL store. Only a loaded :mod:`wf.store.postgres` can
    have made one, so a SQLite server never imports psycopg (the ``postgres`` extra)."""
    module = sys.modules.get("wf.store.postgres")
    if module is None:
        return None
    found: PostgresStore | None = store if isinstance(store, module.PostgresStore) else None
    return found
