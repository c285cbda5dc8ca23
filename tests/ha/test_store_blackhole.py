"""A PostgreSQL store whose route to the server black-holes (the peer swallows every
byte and acknowledges it at the TCP level, so neither keepalives nor the kernel
end a wait) fails its writes within its write bound instead of hanging: the
session is cut off (``wf.store.postgres._cut_after``), the group commit fails as
a lost session, and nothing of it is stored.

The proxy is real (``tests/ha/tcp_proxy.py``), between the store and PostgreSQL.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from wf.errors import StoreUnavailable
from wf.scheduler.model import Activity, ActivityState
from wf.scheduler.outputs import ActivitySubmitted, Transition
from wf.store.postgres import PostgresStore
from wf.store.protocol import OwnerInfo

from .tcp_proxy import TcpProxy

OWNER = OwnerInfo(host="cut-off", pid=1, since="2026-01-01T00:00:00Z")
HANG_BOUND_S = 60.0
"""Far beyond the write bound: reaching it means the write hung."""


def submitted(activity_id: str, seq: int) -> list[ActivitySubmitted | Transition]:
    activity = Activity(activity_id=activity_id, activity_type="t", seq=seq)
    return [
        ActivitySubmitted(at=0.0, activity=activity),
        Transition(
            at=0.0,
            activity_id=activity_id,
            from_state=ActivityState.READY,
            to_state=ActivityState.QUEUED,
            reason="submitted",
            attempt=0,
            failures=0,
            infra_requeues=0,
            token=0,
        ),
    ]


def proxied(dsn: str, port: int) -> str:
    parts = urlsplit(dsn)
    user = parts.username or "postgres"
    return f"postgresql://{user}@127.0.0.1:{port}{parts.path}"


def test_a_write_on_a_black_holed_session_fails_within_its_bound(
    pg_dsn: str, pg_schema: str
) -> None:
    target = urlsplit(pg_dsn)
    with TcpProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:

        async def main() -> None:
            store = PostgresStore(proxied(pg_dsn, proxy.port), schema=pg_schema)
            store.write_timeout_s = 1.0
            await store.open()
            try:
                await store.acquire_ownership(OWNER)
                await store.append(submitted("before", 1))
                proxy.set_mode("blackhole")
                async with asyncio.timeout(HANG_BOUND_S):
                    with pytest.raises(StoreUnavailable):
                        await store.append(submitted("during", 2))
            finally:
                proxy.set_mode("reset")
                async with asyncio.timeout(HANG_BOUND_S):
                    await store.close()

        asyncio.run(main())

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        stored = conn.execute(
            sql.SQL("SELECT activity_id FROM {}.activities ORDER BY seq").format(
                sql.Identifier(pg_schema)
            )
        ).fetchall()
    assert [r[0] for r in stored] == ["before"]
