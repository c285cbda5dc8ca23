"""Durable state: the Journal and Catalog ports (:mod:`wf.store.protocol`), SQLite
(embedded default) and PostgreSQL backends."""

from __future__ import annotations

from pathlib import Path

from wf.errors import InvalidArgument
from wf.store.protocol import Store


def make_store(
    *,
    store_root: Path | str | None = None,
    postgres_dsn: str | None = None,
    postgres_schema: str = "wf",
    durability: str = "fsync",
    create: bool = True,
) -> Store:
    """The store a command line or config names: PostgreSQL if a DSN is given, else SQLite.

    ``create=False`` opens only an existing store at this code's schema version and
    creates or migrates nothing (``wf store check``)."""
    if postgres_dsn:
        from wf.store.postgres import PostgresStore

        return PostgresStore(postgres_dsn, schema=postgres_schema, create=create)
    if store_root is None:
        raise InvalidArgument("a store needs --store-root (SQLite) or --postgres DSN")
    if durability not in ("fsync", "process"):
        raise InvalidArgument("durability must be 'fsync' or 'process'", field="durability")
    from wf.store.sqlite import SQLiteStore

    return SQLiteStore(
        Path(store_root),
        durability="fsync" if durability == "fsync" else "process",
        create=create,
    )
