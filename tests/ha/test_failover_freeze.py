"""SIGSTOP of the active for 10 s, then SIGCONT: a standby takes over while it is
frozen, and the woken node commits nothing, answers ``not_leader`` and stays standby."""

from __future__ import annotations

import time
from typing import Final

import pytest

from .cluster import Cluster, RpcError, http_status, rpc, wait_until
from .scenario import TAKEOVER_S, begin, finish, takeover

FREEZE_S: Final = 10.0
"""How long the active stays stopped (the fault's own length, issue 15)."""


def test_a_frozen_active_is_replaced_and_commits_nothing_after_it_wakes(
    ha_cluster: Cluster,
) -> None:
    run = begin(ha_cluster)
    old = run.active
    fault_at = time.monotonic()
    old.freeze()
    new, took_s = takeover(ha_cluster, exclude=(old.node_id,), since=fault_at)
    assert took_s < FREEZE_S, "the standby must take over while the active is still frozen"
    # The fault lasts FREEZE_S by definition; this is its length, not a hopeful wait.
    time.sleep(max(0.0, fault_at + FREEZE_S - time.monotonic()))
    old.thaw()
    wait_until(
        lambda: http_status(f"{old.url}/readyz") == 503, "the woken node not ready", TAKEOVER_S
    )
    with pytest.raises(RpcError) as refused:
        rpc(old.url, "scheduler.queue.stats")
    assert refused.value.code == "not_leader"
    wait_until(
        lambda: _leader_url(old.url) == new.url, "the woken node naming the new active", TAKEOVER_S
    )
    assert ha_cluster.actives() == [new]
    finish(run, new_active=new, deposed=old.node_id)


def _leader_url(url: str) -> str | None:
    try:
        rpc(url, "scheduler.queue.stats")
    except RpcError as exc:
        leader = exc.details.get("leader_url")
        return str(leader) if leader is not None else None
    return url
