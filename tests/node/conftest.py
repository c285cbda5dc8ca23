"""Node fixtures: ``location``, a fresh store location per test on every backend
(see :mod:`_node_locations`; PostgreSQL is skipped locally without a server and
fails in CI)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _node_locations import Location

from _pg import drop_schema, new_schema_name, postgres_dsn


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Location]:
    """A fresh store location on each backend."""
    if request.param == "sqlite":
        yield Location(name="sqlite", store_root=tmp_path / "store")
        return
    dsn = postgres_dsn()
    schema = new_schema_name()
    try:
        yield Location(name="postgres", dsn=dsn, schema=schema)
    finally:
        drop_schema(dsn, schema)
