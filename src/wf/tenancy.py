"""Tenant namespaces: which ids a tenant-scoped caller may choose.

Theory of operation
-------------------
Ids are global (one activity ``a1``, one schedule ``nightly``), so a
tenant-scoped caller that picks an id another tenant already holds would be
told so (``already_exists``, or ``forbidden`` naming the other tenant), and
could map another tenant's objects by probing. wf closes that channel by
giving each tenant a namespace of its own: a caller scoped to tenants
chooses only ids that begin with one of them followed by a separator
(``acme.nightly``, ``acme-job-17``, ``acme_daily``), and the object it
creates belongs to that same tenant. An id outside the caller's namespaces
is refused with ``forbidden`` *before* anything is looked up, so the answer
never depends on whether the id exists; inside its namespaces only the
tenant itself (and unscoped admins) can create, so ``already_exists`` only
ever speaks of the caller's own tenant.

Unscoped callers (admins without a tenant list, the in-process Python API)
choose any id. Artifacts are a shared, tenant-free catalog (plans are code,
readable by every tenant), so their ids are not namespaced. Worker ids are
not namespaced either: registering an id another credential holds is
refused (``forbidden``), which tells only that the id is taken; the SDK's
default worker ids are random.
"""

from __future__ import annotations

from typing import Final

from wf.errors import Forbidden

SEPARATORS: Final = ".-_:"
"""Characters that may end a tenant's prefix in a namespaced id."""


def in_namespace(identifier: str, tenant: str, separators: str = SEPARATORS) -> bool:
    """Whether ``identifier`` lies in ``tenant``'s namespace."""
    return (
        len(identifier) > len(tenant) + 1
        and identifier.startswith(tenant)
        and identifier[len(tenant)] in separators
    )


def require_namespace(
    identifier: str,
    tenant: str,
    tenants: frozenset[str] | None,
    *,
    kind: str,
    field: str,
    separators: str = SEPARATORS,
) -> None:
    """Refuse (``Forbidden``) a tenant-scoped caller's ``identifier`` for an object of
    ``tenant`` unless it lies in that tenant's namespace (see the module docstring).

    ``tenants`` is the caller's scope (``None``: unscoped, any id). The answer
    depends only on the caller and the id, never on what the store holds."""
    if tenants is None or in_namespace(identifier, tenant, separators):
        return
    allowed = " ".join(repr(s) for s in separators)
    raise Forbidden(
        f"a tenant-scoped credential chooses {kind} ids in its tenant's namespace: "
        f"{field} must begin with the tenant ({tenant!r}) and one of {allowed}",
        field=field,
        tenant=tenant,
    )
