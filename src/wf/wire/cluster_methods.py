"""``cluster.*``: which node of a PostgreSQL cluster is active (docs/ha.md).

Every node answers these, the standbys included (every other method on a
standby answers ``not_leader``): a client or an operator asks any node which
one is active, and ``wf cluster status`` prints the answer.
"""

from __future__ import annotations

from typing import Final, Literal

from wf.wire.methods import MethodSpec, NoParams
from wf.wire.views import View

Role = Literal["active", "standby", "starting", "stopping", "stopped", "stale"]
"""A node's role: ``active`` owns the store and serves; a ``standby`` campaigns for
ownership and answers ``not_leader``; ``starting`` and ``stopping`` are transient.
Only in :attr:`ClusterStatus.nodes`: ``stopped``, a node that shut down cleanly, and
``stale``, one whose reports stopped coming without that (killed, frozen, cut off)."""


class NodeView(View, frozen=True, kw_only=True):
    """One node as the cluster table records it."""

    node_id: str
    """The node's id (host, process id and start time unless configured)."""
    advertise_url: str | None
    """Where clients reach it (``--advertise-url``)."""
    role: Role
    """The role it last reported."""
    epoch: int
    """The ownership epoch it serves (active) or last saw (standby)."""
    seen_s_ago: float
    """Seconds since its last report, by PostgreSQL's clock."""
    lag_commits: int
    """How many commits its warm copy is behind the fence (0 on the active)."""


class ClusterStatus(View, frozen=True, kw_only=True):
    """``cluster.status``: the answering node's view of the cluster."""

    node_id: str
    """The node that answered."""
    role: Role
    """Its role."""
    epoch: int
    """The fence's current ownership epoch."""
    commit_seq: int
    """The fence's current commit sequence."""
    leader_url: str | None
    """The active's advertised URL (``None`` while nobody is active, or on SQLite
    when the server advertises none)."""
    nodes: list[NodeView]
    """Every node that reported in the last minute, active first."""


STATUS: Final = MethodSpec(
    name="cluster.status",
    python_name="cluster_status",
    params=NoParams,
    result=ClusterStatus,
    access="read",
    summary="This node's role, the active's URL and every node of the cluster.",
)

METHODS: Final = (STATUS,)
