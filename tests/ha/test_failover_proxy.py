"""The network between the active and PostgreSQL black-holes, then resets: a
standby takes over, the cut-off node closes its own gate, and once the network
is back it rejoins as a standby having committed nothing after the fence moved."""

from __future__ import annotations

import time

from .cluster import Cluster, Node, dsn_host_port, http_status, node_dsn, wait_until
from .conftest import MakeCluster
from .scenario import TAKEOVER_S, begin, finish, takeover
from .tcp_proxy import TcpProxy


def test_a_black_holed_then_reset_active_is_replaced_and_rejoins_as_a_standby(
    make_cluster: MakeCluster, pg_dsn: str
) -> None:
    host, port = dsn_host_port(pg_dsn)
    with TcpProxy(host, port) as proxy:
        cluster = make_cluster(
            node_dsns={"n1": node_dsn(pg_dsn, "n1", host="127.0.0.1", port=proxy.port)}
        )
        run = begin(cluster, first="n1")
        old = run.active
        assert old.node_id == "n1"
        fault_at = time.monotonic()
        proxy.set_mode("blackhole")
        new, _ = takeover(cluster, exclude=("n1",), since=fault_at)
        # Cut off from PostgreSQL, the old active has closed its own gate.
        wait_until(lambda: not old.ready(), "the cut-off node not ready", TAKEOVER_S)
        proxy.set_mode("reset")
        proxy.set_mode("pass")
        wait_until(
            lambda: http_status(f"{old.url}/readyz") == 503 and old.status()["role"] == "standby",
            "the cut-off node back as a standby",
            TAKEOVER_S,
        )
        assert cluster.actives() == [new]
        finish(run, new_active=new, deposed="n1")


def test_a_restarted_node_that_took_over_and_is_then_cut_off_is_replaced_in_its_turn(
    make_cluster: MakeCluster, pg_dsn: str
) -> None:
    """The liveness bounds hold for an active that won its role by a takeover after a
    restart, not only for one that started active. Two nodes, each behind a proxy of
    its own: n1 starts active and is SIGKILLed, n2 takes over, n1 restarts as a
    standby, n2 is SIGKILLed, n1 takes over, n2 restarts, and n1 is cut off."""
    host, port = dsn_host_port(pg_dsn)
    proxies = {n: TcpProxy(host, port).start() for n in ("n1", "n2")}
    try:
        cluster = make_cluster(
            nodes=2,
            node_dsns={
                n: node_dsn(pg_dsn, n, host="127.0.0.1", port=p.port) for n, p in proxies.items()
            },
        )
        run = begin(cluster, first="n1")
        n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
        n1.kill()
        takeover(cluster, exclude=("n1",), since=time.monotonic())
        cluster.restart("n1")
        _wait_standby(cluster, n1)
        n2.kill()
        takeover(cluster, exclude=("n2",), since=time.monotonic())
        cluster.restart("n2")
        _wait_standby(cluster, n2)
        run.epoch_before = cluster.fence()[0]
        fault_at = time.monotonic()
        proxies["n1"].set_mode("blackhole")
        new, _ = takeover(cluster, exclude=("n1",), since=fault_at)
        proxies["n1"].set_mode("reset")
        proxies["n1"].set_mode("pass")
        _wait_standby(cluster, n1)
        finish(run, new_active=new, deposed="n1")
    finally:
        for proxy in proxies.values():
            proxy.close()


def _wait_standby(cluster: Cluster, node: Node) -> None:
    wait_until(
        lambda: http_status(f"{node.url}/readyz") == 503 and node.status()["role"] == "standby",
        f"{node.node_id} back as a standby",
        TAKEOVER_S,
    )
