"""Client-side TLS: the context a worker or admin client uses to reach a wf server.

The server's certificate is verified against ``ca`` (only that CA: a private
deployment CA should not be mixed with the public trust store) and its host
name against the URL. For mutual TLS, ``cert`` (and ``key``, unless the key
is in the same PEM file) is presented to the server, whose client CA must
have signed it; the certificate's subject common name is the identity the
server maps to a credential (see ``docs/security.md``).
"""

from __future__ import annotations

import ssl
from os import PathLike

from wf.errors import InvalidArgument

StrPath = str | PathLike[str]


def client_ssl_context(
    ca: StrPath, cert: StrPath | None = None, key: StrPath | None = None
) -> ssl.SSLContext:
    """A TLS 1.2+ client context trusting ``ca``, presenting ``cert``/``key`` when given.

    Raises :class:`InvalidArgument` for a key without a certificate, or for
    files that cannot be read or do not hold what they should.
    """
    if key is not None and cert is None:
        raise InvalidArgument("a client key needs its certificate", field="key")
    try:
        # With a cafile, only that CA is loaded (no system trust store).
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if cert is not None:
            context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidArgument(f"cannot load TLS material: {exc}", ca=str(ca)) from exc
    return context
