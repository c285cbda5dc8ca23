"""Fixtures of the failover tests: clusters on a fresh schema, a private PostgreSQL.

Each test gets a schema of its own on ``WF_TEST_POSTGRES_DSN`` (``pg_schema``
of ``tests/conftest.py``: skipped locally without PostgreSQL, a failure
under ``CI=true``), dropped after its processes are killed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from _pg import drop_schema, new_schema_name

from .cluster import Cluster
from .pg_instance import PgInstance, binaries_or_skip

MakeCluster = Callable[..., Cluster]


@pytest.fixture
def make_cluster(tmp_path: Path, pg_dsn: str, pg_schema: str) -> Iterator[MakeCluster]:
    """``make_cluster(**options)``: a :class:`Cluster` on this test's schema (at most one)."""
    made: list[Cluster] = []

    def make(**options: Any) -> Cluster:
        assert not made, "one cluster per test"
        made.append(Cluster(tmp_path, pg_dsn, pg_schema, **options))
        return made[0]

    yield make
    for cluster in made:
        cluster.close()


@pytest.fixture
def ha_cluster(make_cluster: MakeCluster) -> Cluster:
    """Three nodes on this test's schema (not started)."""
    return make_cluster()


@pytest.fixture(scope="module")
def pg_private() -> Iterator[PgInstance]:
    """A private PostgreSQL instance for this module (see :mod:`pg_instance`)."""
    initdb, pg_ctl = binaries_or_skip()
    instance = PgInstance(initdb, pg_ctl).start()
    try:
        yield instance
    finally:
        instance.close()


@pytest.fixture
def private_cluster(tmp_path: Path, pg_private: PgInstance) -> Iterator[Cluster]:
    """Three nodes on a fresh schema of the private instance (not started)."""
    schema = new_schema_name()
    cluster = Cluster(tmp_path, pg_private.dsn, schema)
    try:
        yield cluster
    finally:
        cluster.close()
        drop_schema(pg_private.dsn, schema)
