"""The vocabulary of transaction bodies: a query asked for, the result sent back.

Theory of operation
-------------------
A *transaction body* (:mod:`wf.store.catalog`) is a generator that yields
:class:`Query` values and is sent a :class:`Result` for each; what it returns
is the operation's result. It does no I/O: a backend's *driver* runs the
queries it yields, on one connection, inside one transaction, and a test runs
it with a scripted driver that feeds rows. This module is what both sides
share: the two value types, :func:`run_scripted` (the driver loop without a
database), and :func:`render`, which turns a query into the text of one SQL
dialect.

A query names a statement of ``sql/queries.sql``; SQL text never travels
inside a query. A listing narrowed by filters (tenants, statuses) carries them
as fixed column tests with ``:name`` placeholders, put where the named query
holds ``/* filters */``; every value is a bound parameter, so no input ever
reaches the statement text. :func:`render` caches each (name, filters,
dialect) text, so a driver pays one dictionary lookup per statement.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final, Literal, TypeAlias, TypeVar

from wf.errors import Internal
from wf.store import codec

Row: TypeAlias = tuple[Any, ...]
"""One result row, columns in the order of its named query."""
Dialect: TypeAlias = Literal["sqlite", "postgres"]
"""The SQL dialects a query renders to."""

FILTERS_MARK: Final = "/* filters */"
"""Where a named query takes its filters."""
RENDERED_MAX: Final = 1_024
"""Most distinct rendered statements kept (filters of 0-1,000 values make many)."""

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Query:
    """One statement a body asks its driver to run."""

    name: str
    """A query name of ``sql/queries.sql``."""
    params: dict[str, Any] = field(default_factory=dict)
    """Its bound parameters, by name."""
    filters: tuple[str, ...] = ()
    """Column tests (``:name`` placeholders, values in ``params``) ANDed in at the
    query's ``/* filters */`` mark."""


@dataclass(frozen=True, slots=True)
class Result:
    """What the driver sends back for one :class:`Query`."""

    rows: list[Row] = field(default_factory=list)
    """The rows it returned (empty for a statement that returns none)."""
    rowcount: int = 0
    """How many rows it changed (an INSERT, UPDATE or DELETE)."""

    def one(self) -> Row | None:
        """The first row, or ``None``."""
        return self.rows[0] if self.rows else None


Body: TypeAlias = Generator[Query, Result, _T]
"""A transaction body returning ``_T`` (see the module docstring)."""


def done(value: _T) -> Body[_T]:
    """A body that needs no query: it returns ``value`` at once (drivers then open no
    transaction at all)."""
    yield from ()
    return value


def first(body: Body[_T]) -> Query | tuple[_T]:
    """Start ``body``: its first query, or its result (a 1-tuple) if it needs none.

    Drivers call this before they open a transaction, so a body that asks for
    nothing costs no round trip (and the argument checks a body makes before its
    first query run on the caller's side)."""
    try:
        return next(body)
    except StopIteration as stop:
        return (stop.value,)


def run_scripted(body: Body[_T], execute: Callable[[Query], Result]) -> _T:
    """Drive ``body`` to its end, answering each query with ``execute(query)``: the
    driver loop without a transaction (backends wrap it in theirs; tests pass a
    script)."""
    step = first(body)
    if isinstance(step, tuple):
        return step[0]
    return finish(body, step, execute)


def finish(body: Body[_T], query: Query, execute: Callable[[Query], Result]) -> _T:
    """Drive a started ``body`` from its pending ``query`` to its end."""
    try:
        while True:
            query = body.send(execute(query))
    except StopIteration as stop:
        value: _T = stop.value
        return value


@lru_cache(maxsize=RENDERED_MAX)
def render(name: str, filters: tuple[str, ...], dialect: Dialect) -> str:
    """The SQL text of named query ``name`` in ``dialect``, with ``filters`` in place
    of its ``/* filters */`` mark (Internal if the query holds no such mark once)."""
    text = codec.queries()[name]
    if filters or FILTERS_MARK in text:
        if text.count(FILTERS_MARK) != 1:
            raise Internal(f"query {name!r} must hold {FILTERS_MARK!r} once to take filters")
        text = text.replace(FILTERS_MARK, "".join(f" AND {clause}" for clause in filters))
    return codec.postgres_style(text) if dialect == "postgres" else text


def sql_of(query: Query, dialect: Dialect) -> str:
    """The SQL text of ``query`` in ``dialect`` (see :func:`render`)."""
    return render(query.name, query.filters, dialect)
