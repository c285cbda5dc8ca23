"""``wf cluster status`` on a real cluster (three ``wf-rpc-server`` processes on
PostgreSQL): a node that shut down cleanly (SIGTERM, drained) is listed ``stopped``,
not left ``stopping``; a node whose reports stopped coming (frozen) is listed
``stale``, and its own role again once it reports."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

from .cluster import BIN, Cluster, wait_until

ROLE_TIMEOUT_S = 20.0
"""Bound for a node's listed role to change (reports come every second)."""


def _listed_roles(cluster: Cluster) -> dict[str, str]:
    """Every listed node's role, as ``wf cluster status --json`` (a real process) prints it."""
    done = subprocess.run(
        [str(BIN / "wf"), "cluster", "status", "--json", "--server", ",".join(cluster.urls)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return {node["node_id"]: node["role"] for node in answer["nodes"]}


def _wait_role(cluster: Cluster, node_id: str, role: str) -> dict[str, str]:
    seen: list[dict[str, str]] = [{}]

    def listed() -> bool:
        seen[0] = _listed_roles(cluster)
        return seen[0].get(node_id) == role

    try:
        wait_until(listed, f"{node_id} listed {role}", ROLE_TIMEOUT_S)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last listed: {seen[0]}") from None
    return seen[0]


def test_a_cleanly_stopped_node_is_listed_stopped_and_a_silent_one_stale(
    ha_cluster: Cluster,
) -> None:
    active = ha_cluster.start(first="n1")
    assert active.node_id == "n1"
    roles = _wait_role(ha_cluster, "n3", "standby")
    assert roles["n1"] == "active"

    # A standby stopped cleanly: its last word is "stopped", and it stays so.
    standby = ha_cluster.nodes["n2"]
    standby.term()
    # 0: a standby refuses writes by role; nothing it acknowledged was refused.
    assert standby.wait_exit() == 0
    assert any(e.get("event") == "stopped" for e in standby.drain_events() + standby.seen)
    roles = _listed_roles(ha_cluster)
    assert roles["n2"] == "stopped", roles
    assert roles["n1"] == "active"

    # A frozen standby stops reporting without a word: stale, then itself again.
    frozen = ha_cluster.nodes["n3"]
    frozen.freeze()
    try:
        _wait_role(ha_cluster, "n3", "stale")
    finally:
        frozen.thaw()
    _wait_role(ha_cluster, "n3", "standby")

    # The active stopped cleanly: the node that took over lists it stopped.
    fault_at = time.monotonic()
    active.term()
    assert active.wait_exit() == 0
    ha_cluster.wait_active(exclude=("n1",))
    roles = _wait_role(ha_cluster, "n3", "active")
    assert roles["n1"] == "stopped", (roles, time.monotonic() - fault_at)
