"""The active's writer session is killed (``pg_terminate_backend``), and the ABA
sequence: killed, replaced by a node that writes and leaves, then the first node
reconnects: it must commit nothing with its old epoch."""

from __future__ import annotations

import time

from .cluster import Cluster, wait_until
from .scenario import AFTER_ACKS, TAKEOVER_S, begin, finish, takeover


def test_killing_the_active_writer_session_loses_nothing_and_runs_nothing_twice(
    ha_cluster: Cluster,
) -> None:
    run = begin(ha_cluster)
    old = run.active
    killed = ha_cluster.terminate_writer()
    # Someone holds the lock again: another node, or the same one on a new session
    # (it may keep its epoch if nobody wrote in between: the fence allows that).
    wait_until(
        lambda: ha_cluster.writer_backend() not in (None, killed),
        "the ownership lock held by a new session",
        TAKEOVER_S,
    )
    new = ha_cluster.wait_settled(timeout_s=TAKEOVER_S)
    finish(run, new_active=new, deposed=None if new is old else old.node_id)


def test_aba_the_first_active_reconnecting_after_two_takeovers_commits_nothing_old(
    ha_cluster: Cluster,
) -> None:
    run = begin(ha_cluster)
    first = run.active
    # Frozen, so that it cannot reconnect before the others have taken over.
    first.freeze()
    ha_cluster.terminate_writer()
    fault_at = time.monotonic()
    second, _ = takeover(ha_cluster, exclude=(first.node_id,), since=fault_at)
    acked = run.load.acknowledged_count
    wait_until(
        lambda: run.load.acknowledged_count >= acked + AFTER_ACKS,
        "the second active acknowledging writes",
        30.0,
    )
    second_epoch = ha_cluster.fence()[0]
    second.term()
    assert second.wait_exit() == 0
    third, _ = takeover(ha_cluster, exclude=(first.node_id, second.node_id), since=time.monotonic())
    assert ha_cluster.fence()[0] > second_epoch
    first.thaw()
    # The first node wakes believing it is active on a dead session: it must notice,
    # step down, and never be ready again while the third holds the fence.
    wait_until(lambda: not first.ready(), "the first node not ready after waking", TAKEOVER_S)
    history = finish(run, new_active=third, deposed=first.node_id)
    first_epochs = [e for e, nodes in history.writers.items() if first.node_id in nodes]
    assert first_epochs, "the first node committed nothing before the fault"
    assert max(first_epochs) < second_epoch, (
        f"the first node wrote in epochs {first_epochs}; the second took {second_epoch}"
    )
    assert second.node_id in history.writers[second_epoch]
