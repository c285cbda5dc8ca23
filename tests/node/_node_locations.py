"""Store locations for the node and crash tests (a module of its own, not ``conftest``,
so that tests import it by a name no other test folder uses).

A :class:`Location` makes stores over a fresh, test-private location (a
temporary store root for SQLite, a unique schema for PostgreSQL) and names it as
command-line arguments (for ``wf store`` and the crash target).

PostgreSQL's DSN comes from ``WF_TEST_POSTGRES_DSN``. Without it, or without a
reachable server, the PostgreSQL cases are skipped locally and FAIL when
``CI=true``: CI never skips them (the same rule as ``tests/store``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from wf.store import make_store
from wf.store.protocol import Store


@dataclass(frozen=True)
class Location:
    """One test-private store location."""

    name: str
    """``sqlite`` or ``postgres``."""
    store_root: Path | None = None
    dsn: str | None = None
    schema: str = "wf"

    def make(self) -> Store:
        """A new, unopened store over this location."""
        return make_store(
            store_root=self.store_root, postgres_dsn=self.dsn, postgres_schema=self.schema
        )

    @property
    def args(self) -> list[str]:
        """The location as ``wf store`` / crash-target arguments."""
        if self.dsn is not None:
            return ["--postgres", self.dsn, "--schema", self.schema]
        return ["--store-root", str(self.store_root)]
