"""Keyset page queries of the catalog, written once for both backends.

Theory of operation
-------------------
A list method reads one page: ``WHERE key > :after ... ORDER BY key LIMIT
:limit`` on the table's primary key (or, for an activity's history, the
``transitions_by_activity`` index), so the database seeks to the page
through its index and reads at most ``limit`` rows, however many are stored.
Filters (tenants, deleted schedules) are column tests inside the same
statement, so a filtered page costs the database a scan in its own engine,
never rows shipped to Python to be thrown away.

The functions here check the page arguments, which are the store's own
contract (a limit of 0 to :data:`STORE_PAGE_ROWS_MAX`, keys a column can
hold), and return the page's :class:`~wf.store.query.Query`, the same for
both dialects; the read bodies of :mod:`wf.store.catalog` yield it and decode
the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from wf.errors import CorruptRecord, InvalidArgument
from wf.scheduler.outputs import Transition
from wf.store import rows
from wf.store.query import Query

STORE_PAGE_ROWS_MAX: Final = 1_000
"""Most rows one page read returns (list methods ask for ``limit + 1`` of at most 101)."""
TENANT_FILTER_MAX: Final = 1_000
"""Most tenants one page filter names (a credential's tenant set)."""
_I64_MAX: Final = 2**63 - 1


def check_page_limit(limit: object) -> int:
    """``limit`` if a page read may return that many rows, else InvalidArgument."""
    if type(limit) is not int or not 0 <= limit <= STORE_PAGE_ROWS_MAX:
        raise InvalidArgument(
            f"a page read returns 0 to {STORE_PAGE_ROWS_MAX} rows, not {limit!r}", field="limit"
        )
    return limit


def _check_after(after: object, field: str, kind: type) -> Any:
    if type(after) is not kind:
        raise InvalidArgument(f"{field} must be a {kind.__name__}", field=field)
    if isinstance(after, str) and "\x00" in after:
        raise InvalidArgument(f"{field} must not contain NUL", field=field)
    if isinstance(after, int) and not 0 <= after <= _I64_MAX:
        raise InvalidArgument(f"{field} must be 0 to 2**63-1", field=field)
    return after


def schedules_page(
    *,
    after: str,
    limit: int,
    include_deleted: bool,
    tenants: Sequence[str] | None,
) -> Query | None:
    """``select_schedules_page`` with its filters and parameters; ``None`` when an
    empty tenant list leaves nothing to match."""
    params: dict[str, Any] = {
        "after": _check_after(after, "after", str),
        "limit": check_page_limit(limit),
    }
    clauses: list[str] = []
    if not include_deleted:
        # Not ``status IN (...)``: SQLite would pick the status index and sort every
        # matching row for each page; ``<>`` is no index's, so the primary key walks.
        clauses.append("status <> 'deleted'")
    if tenants is not None:
        if (
            isinstance(tenants, str)
            or len(tenants) > TENANT_FILTER_MAX
            or not all(type(t) is str and "\x00" not in t for t in tenants)
        ):
            raise InvalidArgument(
                f"tenants must be a list of at most {TENANT_FILTER_MAX} strings", field="tenants"
            )
        if not tenants:
            return None
        names = [f"tenant_{i}" for i in range(len(tenants))]
        clauses.append(f"tenant IN ({', '.join(f':{n}' for n in names)})")
        params.update(zip(names, tenants, strict=True))
    return Query("select_schedules_page", params, tuple(clauses))


def artifacts_page(
    *,
    after: tuple[str, int] | None,
    artifact_id: str | None,
    limit: int,
) -> Query:
    """``select_artifacts_page`` (every artifact, after ``(artifact_id, version)``) or
    ``select_artifact_versions_page`` (one artifact's versions after ``after``'s version),
    with the parameters."""
    after_id, after_version = after if after is not None else ("", 0)
    params: dict[str, Any] = {
        "after_id": _check_after(after_id, "after", str),
        "after_version": _check_after(after_version, "after", int),
        "limit": check_page_limit(limit),
    }
    if artifact_id is None:
        return Query("select_artifacts_page", params)
    params["artifact_id"] = _check_after(artifact_id, "artifact_id", str)
    if after is not None and after_id != artifact_id:
        raise InvalidArgument("the page key names another artifact", field="after")
    del params["after_id"]
    return Query("select_artifact_versions_page", params)


def deployments_page(*, after: str, limit: int) -> Query:
    """``select_deployments_page`` with its parameters."""
    params = {"after": _check_after(after, "after", str), "limit": check_page_limit(limit)}
    return Query("select_deployments_page", params)


def history_page(*, activity_id: str, after: int, limit: int) -> Query:
    """``select_history_page`` with its parameters."""
    params = {
        "activity_id": _check_after(activity_id, "activity_id", str),
        "after": _check_after(after, "after", int),
        "limit": check_page_limit(limit),
    }
    return Query("select_history_page", params)


def positioned_transition(row: Sequence[Any]) -> tuple[int, Transition]:
    """A ``select_history_page`` row: its position (the transition id) and the transition
    (a mistyped position is CorruptRecord, like any mistyped column)."""
    position = row[-1]
    if type(position) is not int:
        raise CorruptRecord(
            f"transitions row of activity {row[0]!r} has a {type(position).__name__} id",
            table="transitions",
        )
    return position, rows.transition_from_row(tuple(row[:-1]))
