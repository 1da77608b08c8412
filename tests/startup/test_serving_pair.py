"""check_serving_pair names every unusable serving pair in one line, before a server would use it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, rsa

from tls_injector.pki import KeyType, issue_leaf, make_ca
from tls_injector.pki.serving import ServingPairError, check_serving_pair

NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)
CA = make_ca(common_name="startup test CA", now=NOW - timedelta(days=1), validity=timedelta(days=400))


def leaf(*, start: datetime = NOW - timedelta(hours=1), days: int = 30,
         key_type: KeyType = "ecdsa-p256") -> tuple[bytes, bytes]:
    pair = issue_leaf(issuer=CA, dns_names=["localhost"], now=start, validity=timedelta(days=days),
                      key_type=key_type)
    return pair.cert_pem, pair.key_pem


def pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed448.Ed448PrivateKey,
        password: bytes | None = None) -> bytes:
    encryption = (serialization.BestAvailableEncryption(password) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def test_a_current_matching_pair_passes_and_reports_its_validity() -> None:
    cert, key = leaf()
    pair = check_serving_pair(cert, key, now=NOW, cert_name="tls.crt", key_name="tls.key")
    assert pair.not_before < NOW < pair.not_after


def test_an_rsa_2048_pair_passes() -> None:
    cert, key = leaf(key_type="rsa-2048")
    assert check_serving_pair(cert, key, now=NOW).not_after > NOW


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("expired", "tls.crt: the certificate expired on"),
        ("not yet valid", "tls.crt: the certificate is not valid until"),
        ("other key", "tls.key: the private key does not belong to the certificate in tls.crt"),
        ("rsa 1024", "tls.key: RSA key of 1024 bits is too weak"),
        ("encrypted", "tls.key: the private key is encrypted"),
        ("ed448", "tls.key: Ed448PrivateKey keys cannot serve TLS"),
        ("curve p-224", "tls.key: elliptic curve secp224r1 is not accepted"),
        ("no certificate", "tls.crt: no PEM certificate could be read"),
        ("no key", "tls.key: no PEM private key could be read"),
    ],
)
def test_each_unusable_pair_is_one_line_naming_the_file(case: str, expected: str) -> None:
    cert, key = _case(case)
    with pytest.raises(ServingPairError) as caught:
        check_serving_pair(cert, key, now=NOW, cert_name="tls.crt", key_name="tls.key")
    message = str(caught.value)
    assert message.startswith(expected)
    assert "\n" not in message


def test_the_boundaries_of_validity_are_exact() -> None:
    cert, key = leaf(start=NOW, days=1)
    pair = check_serving_pair(cert, key, now=NOW + timedelta(hours=1))
    assert check_serving_pair(cert, key, now=pair.not_after) == pair  # notAfter itself is inside the period
    with pytest.raises(ServingPairError, match="expired"):
        check_serving_pair(cert, key, now=pair.not_after + timedelta(seconds=1))
    with pytest.raises(ServingPairError, match="not valid until"):
        check_serving_pair(cert, key, now=pair.not_before - timedelta(seconds=1))


def _case(case: str) -> tuple[bytes, bytes]:
    cert, key = leaf()
    other_keys = {
        "other key": lambda: pem(ec.generate_private_key(ec.SECP256R1())),
        "rsa 1024": lambda: pem(rsa.generate_private_key(public_exponent=65537, key_size=1024)),
        "encrypted": lambda: pem(ec.generate_private_key(ec.SECP256R1()), password=b"secret"),
        "ed448": lambda: pem(ed448.Ed448PrivateKey.generate()),
        "curve p-224": lambda: pem(ec.generate_private_key(ec.SECP224R1())),
        "no key": lambda: b"-----BEGIN PRIVATE KEY-----\nbm9wZQ==\n-----END PRIVATE KEY-----\n",
    }
    if case in other_keys:
        return cert, other_keys[case]()
    if case == "expired":
        return leaf(start=NOW - timedelta(days=40))
    if case == "not yet valid":
        return leaf(start=NOW + timedelta(days=1))
    return b"not a certificate", key  # "no certificate"
