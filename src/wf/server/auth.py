"""Authentication (WF-005 §24): bearer tokens and client certificates, mapped to callers.

Theory of operation
-------------------
A credential is configured with its *hash*, never the token itself:
``sha256:<hex>`` of the token (tokens are random, high-entropy strings, so a
fast hash is the right tool; ``wf-rpc-server hash-token`` prints one). A
presented bearer token is hashed and compared with *every* configured hash by
``hmac.compare_digest``, with no early exit, so neither where two digests
differ nor which credential matched shows in the response time.

Each credential maps to a :class:`~wf.server.rpc.Caller`: an admin role
(``admin``, ``operator``, ``read-only``) or ``worker``, plus scopes
(tenants for every role; activity types and capabilities for workers only,
since nothing would enforce them on an admin role and a scope that is not
enforced must not be configurable). With mutual TLS, the client
certificate's subject common name is looked up among the configured
certificate identities and maps to exactly the same kind of caller as a
token would; a request may then carry no token at all.

Precedence, when a request carries both: the bearer token decides who the
caller is, and the certificate only proves the channel (the TLS handshake
already checked it against the client CA). A token that is present but
invalid is refused (401) even when the certificate would map to a
credential: a wrong token never silently falls back to another identity.

When security is disabled (no credentials configured and ``required`` off),
every caller without a credential is an anonymous admin: meant for a laptop,
refused by ``required=true``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from typing import Any, Final, Literal

import msgspec

from wf.errors import InvalidArgument, Unauthorized
from wf.server.rpc import ANONYMOUS_ADMIN, Caller

Role = Literal["admin", "operator", "read-only", "worker"]

_HASH_FORM: Final = re.compile(r"sha256:[0-9a-fA-F]{64}")


class CredentialConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One credential: a token hash and/or a certificate identity, and what it may do."""

    name: str
    """Unique name; it is the caller's identity in logs, errors and worker ownership."""
    role: Role
    """Admin role, or ``worker``."""
    token_sha256: str | None = None
    """``sha256:<hex>`` of the bearer token."""
    certificate_cn: str | None = None
    """Subject common name of a client certificate that maps to this credential."""
    tenants: frozenset[str] | None = None
    """Tenants it may act for (``None``: all)."""
    activity_types: frozenset[str] | None = None
    """Activity types a worker may run (``None``: all); workers only."""
    capabilities: frozenset[str] | None = None
    """Capabilities a worker may advertise (``None``: any); workers only."""

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidArgument("a credential needs a non-empty name", field="name")
        if self.token_sha256 is None and not self.certificate_cn:
            raise InvalidArgument(
                f"credential {self.name!r} needs token_sha256 or certificate_cn",
                field="credentials",
            )
        if self.token_sha256 is not None and not _HASH_FORM.fullmatch(self.token_sha256):
            raise InvalidArgument(
                f"credential {self.name!r}: token_sha256 must be 'sha256:<64 hex digits>' "
                "(wf-rpc-server hash-token prints it for a token on standard input)",
                field="token_sha256",
            )
        if self.role != "worker" and (
            self.activity_types is not None or self.capabilities is not None
        ):
            raise InvalidArgument(
                f"credential {self.name!r}: activity_types and capabilities scope workers "
                f"only; role {self.role!r} may be scoped by tenants",
                field="credentials",
            )


def check_credentials(credentials: Sequence[CredentialConfig]) -> None:
    """Refuse ambiguous sets: duplicate names, token hashes or certificate names."""
    for what, values in (
        ("name", [c.name for c in credentials]),
        ("token_sha256", [c.token_sha256.lower() for c in credentials if c.token_sha256]),
        ("certificate_cn", [c.certificate_cn for c in credentials if c.certificate_cn]),
    ):
        seen: set[str] = set()
        for value in values:
            if value in seen:
                shown = value if what != "token_sha256" else value[:15] + "..."
                raise InvalidArgument(
                    f"two credentials share the same {what} {shown!r}", field=what
                )
            seen.add(value)


def hash_token(token: str) -> str:
    """The ``sha256:<hex>`` form to put in the configuration."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


class Authenticator:
    """Maps a request's token or client certificate to a :class:`Caller`."""

    def __init__(self, credentials: Sequence[CredentialConfig], *, required: bool) -> None:
        check_credentials(credentials)
        self.required = required or bool(credentials)
        self._by_hash = [
            (bytes.fromhex(c.token_sha256.partition(":")[2]), _caller(c))
            for c in credentials
            if c.token_sha256 is not None
        ]
        self._by_cn = {c.certificate_cn: _caller(c) for c in credentials if c.certificate_cn}

    def authenticate(self, token: str | None, peer_cert: dict[str, Any] | None) -> Caller:
        """The caller, or :class:`Unauthorized` (see the module docstring for precedence).

        ``peer_cert`` is ``ssl.SSLSocket.getpeercert()`` of a certificate the
        TLS handshake verified; an empty or absent one means none.
        """
        if token is not None:
            presented = hashlib.sha256(token.encode()).digest()
            match: Caller | None = None
            for digest, caller in self._by_hash:
                # No early exit: every configured hash is compared every time.
                if hmac.compare_digest(presented, digest):
                    match = caller
            if match is None:
                raise Unauthorized("the bearer token is not valid", credential="token")
            return match
        if peer_cert:
            cn = _common_name(peer_cert)
            by_cn = self._by_cn.get(cn) if cn is not None else None
            if by_cn is None:
                raise Unauthorized(
                    f"client certificate {cn!r} maps to no credential", credential="certificate"
                )
            return by_cn
        if self.required:
            raise Unauthorized(
                "authentication required: send a bearer token or a client certificate",
                credential="none",
            )
        return ANONYMOUS_ADMIN


def _caller(c: CredentialConfig) -> Caller:
    return Caller(
        identity=c.name,
        role=c.role,
        tenants=c.tenants,
        activity_types=c.activity_types,
        capabilities=c.capabilities,
    )


def _common_name(peer_cert: dict[str, Any]) -> str | None:
    """The subject CN of a certificate as ``ssl.SSLSocket.getpeercert()`` returns it.

    A subject with several CNs is refused (``None``): which one names the
    client would be ambiguous.
    """
    names = [
        str(value)
        for rdn in peer_cert.get("subject", ())
        for key, value in rdn
        if key == "commonName"
    ]
    return names[0] if len(names) == 1 else None
