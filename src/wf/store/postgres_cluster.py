"""What the nodes of a cluster on one PostgreSQL store read and write about each other.

None of this is scheduler state, and none of it is fenced: a standby has no
epoch, and a node's report says only what it believes (docs/ha.md). The fence
row's owner columns are written by the owner as it claims its epoch (in
:mod:`wf.store.postgres`), so that whoever reads the fence learns whom to send
clients to; ``cluster_nodes`` is where every node reports its role.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

from wf.store.postgres_load import Conn

_SELECT_FENCE: Final = "SELECT epoch, commit_seq, owner_node, owner_url FROM fence WHERE id = 1"
_REPORT: Final = """
INSERT INTO cluster_nodes
    (node_id, advertise_url, role, epoch, applied_seq, host, pid, started_at, seen_at)
VALUES (%(node_id)s, %(url)s, %(role)s, %(epoch)s, %(applied_seq)s, %(host)s, %(pid)s,
        %(started_at)s, now())
ON CONFLICT (node_id) DO UPDATE SET
    advertise_url = excluded.advertise_url, role = excluded.role, epoch = excluded.epoch,
    applied_seq = excluded.applied_seq, host = excluded.host, pid = excluded.pid,
    started_at = excluded.started_at, seen_at = now()"""
_SELECT_NODES: Final = """
SELECT node_id, advertise_url, role, epoch, applied_seq,
       EXTRACT(EPOCH FROM (now() - seen_at))::double precision
FROM cluster_nodes
WHERE seen_at > now() - make_interval(secs => %s)
ORDER BY (role = 'active') DESC, node_id"""
_MARK_STOPPED: Final = """
UPDATE cluster_nodes SET role = 'stopped', seen_at = now() WHERE node_id = %s"""
_FORGET: Final = "DELETE FROM cluster_nodes WHERE seen_at < now() - make_interval(secs => %s)"
_DB_CLOCK: Final = "SELECT EXTRACT(EPOCH FROM clock_timestamp())::double precision"
_END_STUCK_OWNER: Final = """
SELECT a.pid, a.state, a.wait_event, pg_terminate_backend(a.pid)
FROM pg_stat_activity a
WHERE a.pid = (
    SELECT l.pid FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND ((l.classid::bigint << 32) | l.objid::bigint) = %(key)s::bigint
    LIMIT 1)
  AND a.state <> 'idle'
  AND a.wait_event IN ('ClientRead', 'ClientWrite')
  AND a.state_change < now() - make_interval(secs => %(silent_s)s)"""
"""Ends the owner's session when it has sat inside a transaction or a pipeline, waiting
on its client, for longer than the bound (see :func:`end_stuck_owner`)."""

NODES_SEEN_WITHIN_S: Final = 60.0
"""``cluster.status`` lists the nodes that reported within this long."""
NODES_FORGOTTEN_AFTER_S: Final = 3600.0
"""A node's row is deleted once it has not reported for this long."""


@dataclass(frozen=True, slots=True)
class FenceState:
    """The fence row as a reader sees it."""

    epoch: int
    commit_seq: int
    owner_node: str | None
    owner_url: str | None


@dataclass(frozen=True, slots=True)
class NodeReport:
    """What one node says of itself."""

    node_id: str
    advertise_url: str | None
    role: str
    epoch: int
    applied_seq: int
    host: str
    pid: int
    started_at: str


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node as ``cluster_nodes`` records it."""

    node_id: str
    advertise_url: str | None
    role: str
    epoch: int
    applied_seq: int
    seen_s_ago: float


async def read_fence(conn: Conn) -> FenceState | None:
    """The fence row (``None`` if it is missing: a damaged store)."""
    cur = await conn.execute(_SELECT_FENCE)
    row = await cur.fetchone()
    if row is None:
        return None
    return FenceState(int(row[0]), int(row[1]), row[2], row[3])


async def report(conn: Conn, node: NodeReport) -> None:
    """Record ``node``'s report (now, by PostgreSQL's clock) and forget long-gone nodes."""
    await conn.execute(
        _REPORT,
        {
            "node_id": node.node_id,
            "url": node.advertise_url,
            "role": node.role,
            "epoch": node.epoch,
            "applied_seq": node.applied_seq,
            "host": node.host,
            "pid": node.pid,
            "started_at": node.started_at,
        },
    )
    await conn.execute(_FORGET, [NODES_FORGOTTEN_AFTER_S])


async def mark_stopped(conn: Conn, node_id: str) -> None:
    """Record that ``node_id`` stopped cleanly (its last word: it reports no more)."""
    await conn.execute(_MARK_STOPPED, [node_id])


async def nodes(conn: Conn) -> list[NodeRow]:
    """The nodes that reported recently, the active first."""
    cur = await conn.execute(_SELECT_NODES, [NODES_SEEN_WITHIN_S])
    return [
        NodeRow(str(r[0]), r[1], str(r[2]), int(r[3]), int(r[4]), float(r[5]))
        for r in await cur.fetchall()
    ]


async def clock_skew_s(conn: Conn) -> float:
    """This process's clock minus PostgreSQL's, read at the middle of one round trip."""
    before = time.time()
    cur = await conn.execute(_DB_CLOCK)
    row = await cur.fetchone()
    after = time.time()
    assert row is not None
    return (before + after) / 2 - float(row[0])


async def end_stuck_owner(conn: Conn, lock_key: int, silent_s: float) -> tuple[int, str] | None:
    """Terminate the owner's session if it waits on its client, mid-transaction or
    mid-pipeline, for more than ``silent_s``; the ended session's (pid, state), if any.

    PostgreSQL's idle timeouts run only between two commands: a client that stopped
    in the middle of a pipelined transaction (frozen, or behind a route that swallows
    bytes, which TCP cannot tell from a slow peer) leaves its session waiting with
    no timeout, holding the ownership lock. The owner's own writes never wait on it
    that long, so a standby ends such a session and the lock with it; the fence
    keeps that owner from writing whatever it believes (docs/ha.md)."""
    cur = await conn.execute(_END_STUCK_OWNER, {"key": lock_key, "silent_s": silent_s})
    row = await cur.fetchone()
    return None if row is None else (int(row[0]), f"{row[1]} ({row[2]})")
