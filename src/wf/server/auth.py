"""Authentication (WF-005 §24): bearer tokens and client certificates, mapped to callers.

Theory of operation
-------------------
A credential is configured with its *hash*, never the token itself:
``sha256:<hex>`` of the token (tokens are random, high-entropy strings, so a
fast hash is the right tool; ``wf-rpc-server hash-token`` prints one). A
presented bearer token is hashed and compared with every configured hash by
``hmac.compare_digest``, so the comparison time does not depend on where the
strings differ.

Each credential maps to a :class:`~wf.server.rpc.Caller`: an admin role
(``admin``, ``operator``, ``read-only``) or ``worker``, plus scopes
(tenants, activity types, capabilities). With mutual TLS, the client
certificate's subject common name is looked up among the configured
certificate identities and maps to the same kind of caller; a request may
then carry no token at all.

When security is disabled (no credentials configured and ``required`` off),
every caller is an anonymous admin: meant for a laptop, refused by
``required=true``.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Literal

import msgspec

from wf.errors import InvalidArgument, Unauthorized
from wf.server.rpc import ANONYMOUS_ADMIN, Caller

Role = Literal["admin", "operator", "read-only", "worker"]


class CredentialConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One credential: a token hash or a certificate identity, and what it may do."""

    name: str
    """Name for logs and errors."""
    role: Role
    """Admin role, or ``worker``."""
    token_sha256: str | None = None
    """``sha256:<hex>`` of the bearer token."""
    certificate_cn: str | None = None
    """Subject common name of a client certificate that maps to this credential."""
    tenants: frozenset[str] | None = None
    """Tenants it may act for (``None``: all)."""
    activity_types: frozenset[str] | None = None
    """Activity types a worker may run (``None``: all)."""
    capabilities: frozenset[str] | None = None
    """Capabilities a worker may advertise (``None``: any)."""

    def __post_init__(self) -> None:
        if self.token_sha256 is None and self.certificate_cn is None:
            raise InvalidArgument(
                f"credential {self.name!r} needs token_sha256 or certificate_cn",
                field="credentials",
            )
        if self.token_sha256 is not None:
            prefix, _, digest = self.token_sha256.partition(":")
            if prefix != "sha256" or len(digest) != 64:
                raise InvalidArgument(
                    f"credential {self.name!r}: token_sha256 must be 'sha256:<64 hex digits>'",
                    field="token_sha256",
                )
            try:
                bytes.fromhex(digest)
            except ValueError:
                raise InvalidArgument(
                    f"credential {self.name!r}: token_sha256 is not hexadecimal",
                    field="token_sha256",
                ) from None


def hash_token(token: str) -> str:
    """The ``sha256:<hex>`` form to put in the configuration."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


class Authenticator:
    """Maps a request's token or client certificate to a :class:`Caller`."""

    def __init__(self, credentials: list[CredentialConfig], *, required: bool) -> None:
        self.required = required or bool(credentials)
        self._by_hash = [
            (bytes.fromhex(c.token_sha256.partition(":")[2]), c)
            for c in credentials
            if c.token_sha256 is not None
        ]
        self._by_cn = {c.certificate_cn: c for c in credentials if c.certificate_cn is not None}

    def authenticate(self, token: str | None, peer_cert: dict[str, Any] | None) -> Caller:
        """The caller, or :class:`Unauthorized`."""
        if token is not None:
            presented = hashlib.sha256(token.encode()).digest()
            match: CredentialConfig | None = None
            for digest, credential in self._by_hash:
                # No early exit: every configured hash is compared every time.
                if hmac.compare_digest(presented, digest):
                    match = credential
            if match is None:
                raise Unauthorized("the bearer token is not valid")
            return _caller(match)
        if peer_cert is not None:
            cn = _common_name(peer_cert)
            by_cn = self._by_cn.get(cn) if cn is not None else None
            if by_cn is None:
                raise Unauthorized(f"client certificate {cn!r} maps to no credential")
            return _caller(by_cn)
        if self.required:
            raise Unauthorized("authentication required: send a bearer token or a certificate")
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
    """The subject CN of a certificate as ``ssl.SSLSocket.getpeercert()`` returns it."""
    for rdn in peer_cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
