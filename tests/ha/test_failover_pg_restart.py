"""PostgreSQL itself restarts (an immediate shutdown: every session killed, crash
recovery at start): one node serves afterwards, and nothing acknowledged is lost
or run twice. The cluster runs on a private instance (:mod:`pg_instance`)."""

from __future__ import annotations

from .cluster import Cluster
from .pg_instance import PgInstance
from .scenario import TAKEOVER_S, begin, finish


def test_a_postgresql_restart_loses_nothing_and_one_node_serves_after_it(
    private_cluster: Cluster, pg_private: PgInstance
) -> None:
    run = begin(private_cluster)
    old = run.active
    pg_private.restart("immediate")
    new = private_cluster.wait_settled(timeout_s=TAKEOVER_S * 2)
    finish(run, new_active=new, deposed=None if new is old else old.node_id)
