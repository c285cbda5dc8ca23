"""Units of WF-005 §24: token hashes, credential validation, constant-time
comparison, the role ladder, TLS contexts and ``wf-rpc-server hash-token``."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trustme

from wf.client.tls import client_ssl_context
from wf.errors import Forbidden, InvalidArgument, Unauthorized
from wf.server.app import ssl_context
from wf.server.auth import Authenticator, CredentialConfig, hash_token
from wf.server.config import TlsConfig, parse_config
from wf.server.main import main
from wf.server.rpc import ANONYMOUS_ADMIN, Access, Caller, authorize

# ------------------------------------------------------------------ hashes


def test_hash_token_is_prefixed_sha256_hex() -> None:
    # FIPS 180-2 test vector for "abc".
    assert hash_token("abc") == (
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )
    assert hash_token("tök") == "sha256:" + hashlib.sha256("tök".encode()).hexdigest()


def test_hash_token_cli_prints_the_hash_of_the_token_on_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("s3cret\n"))
    assert main(["hash-token"]) == 0
    assert capsys.readouterr().out == hash_token("s3cret") + "\n"


@pytest.mark.parametrize("argv", [["hash-token", "a"], ["hash-token", "a", "b"]])
def test_hash_token_cli_refuses_a_token_on_the_command_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "usage: wf-rpc-server hash-token < FILE" in err
    assert "standard input" in err


def test_hash_token_cli_refuses_an_empty_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["hash-token"]) == 2
    assert "no token on standard input" in capsys.readouterr().err


def test_hash_token_cli_output_configures_a_working_credential(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "wf.server.main", "hash-token"],
        input="worker-secret\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    document = {
        "server": {
            "security": {"credentials": [{"name": "w1", "role": "worker", "token_sha256": out}]}
        }
    }
    config = parse_config(json.dumps(document).encode())
    authenticator = Authenticator(config.server.security.credentials, required=True)
    assert authenticator.authenticate("worker-secret", None).identity == "w1"
    with pytest.raises(Unauthorized):
        authenticator.authenticate("worker-secreT", None)


# ---------------------------------------------------------- configuration


def _credential(**fields: Any) -> CredentialConfig:
    return CredentialConfig(**{"name": "c", "role": "worker", **fields})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "needs token_sha256 or certificate_cn"),
        ({"certificate_cn": ""}, "needs token_sha256 or certificate_cn"),
        ({"name": "", "certificate_cn": "x"}, "non-empty name"),
        ({"token_sha256": "md5:" + "0" * 64}, "sha256:<64 hex digits>"),
        ({"token_sha256": "sha256:" + "0" * 63}, "sha256:<64 hex digits>"),
        ({"token_sha256": "sha256:" + "0" * 65}, "sha256:<64 hex digits>"),
        ({"token_sha256": "sha256:" + "g" * 64}, "sha256:<64 hex digits>"),
        ({"token_sha256": "sha256:" + "00 " * 21 + "0"}, "sha256:<64 hex digits>"),
        ({"token_sha256": "plain-token"}, "sha256:<64 hex digits>"),
        (
            {"role": "operator", "certificate_cn": "x", "activity_types": frozenset({"X"})},
            "scope workers only",
        ),
        (
            {"role": "admin", "certificate_cn": "x", "capabilities": frozenset({"gpu"})},
            "scope workers only",
        ),
    ],
)
def test_credential_config_refuses_invalid_credentials(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(")):
        _credential(**fields)


def test_credential_config_accepts_valid_forms() -> None:
    _credential(token_sha256=hash_token("t"))
    _credential(token_sha256=hash_token("t").upper().replace("SHA256", "sha256"))
    _credential(certificate_cn="w", tenants=frozenset({"t1"}), capabilities=frozenset())
    _credential(role="operator", token_sha256=hash_token("t"), tenants=frozenset({"t1"}))


@pytest.mark.parametrize(
    ("second", "what"),
    [
        ({"name": "a", "certificate_cn": "other"}, "name"),
        ({"name": "b", "token_sha256": hash_token("same")}, "token_sha256"),
        ({"name": "b", "certificate_cn": "cn-a"}, "certificate_cn"),
    ],
)
def test_ambiguous_credential_sets_are_refused_at_config_time(
    second: dict[str, Any], what: str
) -> None:
    first = {
        "name": "a",
        "role": "worker",
        "token_sha256": hash_token("same"),
        "certificate_cn": "cn-a",
    }
    document = {"server": {"security": {"credentials": [first, {"role": "worker", **second}]}}}
    with pytest.raises(InvalidArgument, match=f"share the same {what}"):
        parse_config(json.dumps(document).encode(), source="wf.json")


def test_unknown_credential_keys_are_refused_with_their_path() -> None:
    document = {
        "server": {"security": {"credentials": [{"name": "a", "role": "worker", "token": "x"}]}}
    }
    with pytest.raises(InvalidArgument, match=r"\$\.server\.security\.credentials\[0\]"):
        parse_config(json.dumps(document).encode())


# --------------------------------------------------------- authentication


def test_every_configured_hash_is_compared_with_compare_digest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    credentials = [
        _credential(name=f"w{i}", token_sha256=hash_token(f"token-{i}")) for i in range(5)
    ]
    credentials.append(_credential(name="cert-only", certificate_cn="cn"))
    authenticator = Authenticator(credentials, required=True)
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    # A match first, last, in the middle, and no match: always every hash, once.
    for token in ("token-0", "token-4", "token-2", "nope"):
        calls.clear()
        try:
            authenticator.authenticate(token, None)
        except Unauthorized:
            assert token == "nope"
        assert len(calls) == 5
        presented = hashlib.sha256(token.encode()).digest()
        assert all(a == presented for a, _ in calls)
        assert {b.hex() for _, b in calls} == {
            hash_token(f"token-{i}").partition(":")[2] for i in range(5)
        }


def test_authenticate_token_certificate_and_anonymous() -> None:
    worker = _credential(
        name="w",
        token_sha256=hash_token("t"),
        certificate_cn="w-cn",
        tenants=frozenset({"t1"}),
        activity_types=frozenset({"X"}),
        capabilities=frozenset({"cpu"}),
    )
    ops = _credential(name="ops", role="operator", certificate_cn="ops-cn")
    authenticator = Authenticator([worker, ops], required=False)
    assert authenticator.required  # implied by configured credentials
    cert = {"subject": ((("organizationName", "o"),), (("commonName", "w-cn"),))}
    by_token = authenticator.authenticate("t", None)
    by_cert = authenticator.authenticate(None, cert)
    assert (
        by_token
        == by_cert
        == Caller(
            identity="w",
            role="worker",
            tenants=frozenset({"t1"}),
            activity_types=frozenset({"X"}),
            capabilities=frozenset({"cpu"}),
        )
    )
    ops_cert = {"subject": ((("commonName", "ops-cn"),),)}
    assert authenticator.authenticate("t", ops_cert).identity == "w"  # the token decides
    with pytest.raises(Unauthorized):
        authenticator.authenticate("wrong", ops_cert)  # never falls back to the certificate
    with pytest.raises(Unauthorized, match="maps to no credential"):
        authenticator.authenticate(None, {"subject": ((("commonName", "nobody"),),)})
    two_cns = {"subject": ((("commonName", "w-cn"),), (("commonName", "ops-cn"),))}
    with pytest.raises(Unauthorized):
        authenticator.authenticate(None, two_cns)
    with pytest.raises(Unauthorized, match="authentication required"):
        authenticator.authenticate(None, None)
    with pytest.raises(Unauthorized, match="authentication required"):
        authenticator.authenticate(None, {})  # no verified certificate


def test_required_without_credentials_refuses_everyone() -> None:
    assert Authenticator([], required=False).authenticate(None, None) is ANONYMOUS_ADMIN
    with pytest.raises(Unauthorized):
        Authenticator([], required=True).authenticate(None, None)


# ------------------------------------------------------------- role ladder

ROLES = ("admin", "operator", "read-only", "worker")
ALLOWED: dict[Access, set[str]] = {
    "read": {"admin", "operator", "read-only"},
    "operate": {"admin", "operator"},
    "admin": {"admin"},
    "worker": {"admin", "worker"},
}


@pytest.mark.parametrize("access", sorted(ALLOWED))
@pytest.mark.parametrize("role", ROLES)
def test_role_ladder(role: Any, access: Access) -> None:
    caller = Caller(identity="c", role=role)
    if role in ALLOWED[access]:
        authorize(caller, access, "m")
    else:
        with pytest.raises(Forbidden) as refused:
            authorize(caller, access, "m")
        assert refused.value.details == {"method": "m", "role": role, "needs": access}


# ------------------------------------------------------------ TLS contexts


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[trustme.CA, Path]:
    authority = trustme.CA()
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    authority.cert_pem.write_to_path(path)
    return authority, path


def test_server_context_trusts_only_the_configured_client_ca(
    tmp_path: Path, ca: tuple[trustme.CA, Path]
) -> None:
    authority, ca_path = ca
    leaf = authority.issue_cert("127.0.0.1")
    leaf.cert_chain_pems[0].write_to_path(tmp_path / "s.pem")
    leaf.private_key_pem.write_to_path(tmp_path / "s.key")
    plain = ssl_context(
        TlsConfig(certificate=str(tmp_path / "s.pem"), private_key=str(tmp_path / "s.key"))
    )
    assert plain.verify_mode == ssl.CERT_NONE
    assert plain.minimum_version >= ssl.TLSVersion.TLSv1_2
    mutual = ssl_context(
        TlsConfig(
            certificate=str(tmp_path / "s.pem"),
            private_key=str(tmp_path / "s.key"),
            client_ca=str(ca_path),
            require_client_certificate=True,
        )
    )
    assert mutual.verify_mode == ssl.CERT_REQUIRED
    assert mutual.cert_store_stats()["x509_ca"] == 1  # no system trust store


def test_require_client_certificate_needs_a_client_ca() -> None:
    with pytest.raises(InvalidArgument, match="needs client_ca"):
        TlsConfig(certificate="c", private_key="k", require_client_certificate=True)


def test_client_ssl_context(tmp_path: Path, ca: tuple[trustme.CA, Path]) -> None:
    authority, ca_path = ca
    context = client_ssl_context(ca_path)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert len(context.get_ca_certs()) == 1  # only the given CA
    leaf = authority.issue_cert("w.test", common_name="w")
    leaf.cert_chain_pems[0].write_to_path(tmp_path / "w.pem")
    leaf.private_key_pem.write_to_path(tmp_path / "w.key")
    leaf.private_key_and_cert_chain_pem.write_to_path(tmp_path / "w-both.pem")
    client_ssl_context(ca_path, tmp_path / "w.pem", tmp_path / "w.key")
    client_ssl_context(str(ca_path), str(tmp_path / "w-both.pem"))
    with pytest.raises(InvalidArgument, match="needs its certificate"):
        client_ssl_context(ca_path, None, tmp_path / "w.key")
    with pytest.raises(InvalidArgument, match="cannot load TLS material"):
        client_ssl_context(tmp_path / "missing.pem")
    with pytest.raises(InvalidArgument, match="cannot load TLS material"):
        client_ssl_context(ca_path, tmp_path / "w.pem", tmp_path / "s.key")
