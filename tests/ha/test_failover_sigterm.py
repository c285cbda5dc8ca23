"""SIGTERM of the active node: it hands over and exits cleanly; nothing lost or run twice."""

from __future__ import annotations

import time

from .cluster import Cluster
from .scenario import begin, finish, takeover


def test_sigterm_of_the_active_hands_over_exits_zero_and_loses_nothing(
    ha_cluster: Cluster,
) -> None:
    run = begin(ha_cluster)
    old = run.active
    fault_at = time.monotonic()
    old.term()
    new, _ = takeover(ha_cluster, exclude=(old.node_id,), since=fault_at)
    assert old.wait_exit() == 0
    finish(run, new_active=new, deposed=old.node_id)
