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
        try:
            from wf.store.postgres import PostgresStore
        except ImportError as exc:
            if exc.name is None or not exc.name.startswith("psycopg"):
                raise
            raise InvalidArgument(
                f"a PostgreSQL store needs the driver, {exc.name}, which is not installed: "
                "install wf with its postgres extra (pip install 'wf[postgres]', or "
                "uv sync --extra postgres)",
                field="postgres_dsn",
            ) from None

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
