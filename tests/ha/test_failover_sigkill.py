"""SIGKILL of the active node: a standby takes over, nothing is lost or run twice."""

from __future__ import annotations

import time

from .cluster import Cluster
from .scenario import begin, finish, takeover


def test_sigkill_of_the_active_loses_nothing_and_runs_nothing_twice(ha_cluster: Cluster) -> None:
    run = begin(ha_cluster)
    old = run.active
    fault_at = time.monotonic()
    old.kill()
    new, _ = takeover(ha_cluster, exclude=(old.node_id,), since=fault_at)
    finish(run, new_active=new, deposed=old.node_id)
