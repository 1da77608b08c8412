"""The certificate profile: what strict verifiers (and the ESO/cert-controller practice) expect."""

from __future__ import annotations

from datetime import timedelta

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.pki.conftest import NOW
from tls_injector.pki import BACKDATE, LEAF_VALIDITY, CertKey, issue_leaf, load_cert_key, make_ca, make_intermediate


def _ext(cert: x509.Certificate, kind: type[x509.ExtensionType]) -> x509.Extension[x509.ExtensionType]:
    return cert.extensions.get_extension_for_class(kind)


def test_a_leaf_has_critical_constraints_and_usage_and_identifies_its_issuer(ca: CertKey) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=["web", "web.shop"], now=NOW).cert
    constraints, usage = _ext(leaf, x509.BasicConstraints), _ext(leaf, x509.KeyUsage)
    assert constraints.critical
    assert constraints.value == x509.BasicConstraints(ca=False, path_length=None)
    assert usage.critical
    assert usage.value.digital_signature
    assert not usage.value.key_cert_sign
    aki = _ext(leaf, x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == _ext(ca.cert, x509.SubjectKeyIdentifier).value.digest
    assert _ext(leaf, x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName) == ["web", "web.shop"]


@pytest.mark.parametrize(
    ("server", "client", "expected"),
    [
        (True, False, [ExtendedKeyUsageOID.SERVER_AUTH]),
        (True, True, [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
        (False, True, [ExtendedKeyUsageOID.CLIENT_AUTH]),
    ],
)
def test_the_extended_key_usage_is_what_was_asked(ca: CertKey, server: bool, client: bool, expected: list) -> None:  # type: ignore[type-arg]
    leaf = issue_leaf(issuer=ca, dns_names=["web"], now=NOW, server=server, client=client).cert
    assert list(_ext(leaf, x509.ExtendedKeyUsage).value) == expected


def test_validity_is_backdated_for_skew_and_capped_at_the_issuer(ca: CertKey) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=["web"], now=NOW).cert
    assert leaf.not_valid_before_utc == NOW - BACKDATE
    assert leaf.not_valid_after_utc == NOW + LEAF_VALIDITY
    late = issue_leaf(issuer=ca, dns_names=["web"], now=ca.cert.not_valid_after_utc - timedelta(days=10)).cert
    assert late.not_valid_after_utc == ca.cert.not_valid_after_utc


def test_serials_are_random_and_positive(ca: CertKey) -> None:
    serials = {issue_leaf(issuer=ca, dns_names=["web"], now=NOW).cert.serial_number for _ in range(20)}
    assert len(serials) == 20
    assert all(0 < s < 2**159 for s in serials)
    assert max(serials).bit_length() > 100  # 159 random bits: a fixed or counting serial would fail this


def test_a_ca_has_key_cert_sign_and_an_rsa_leaf_may_encipher_keys() -> None:
    rsa_ca = make_ca(common_name="rsa root", now=NOW, key_type="rsa-2048")
    usage = _ext(rsa_ca.cert, x509.KeyUsage).value
    assert usage.key_cert_sign
    assert usage.crl_sign
    leaf = issue_leaf(issuer=rsa_ca, dns_names=["web"], now=NOW, key_type="rsa-2048")
    assert _ext(leaf.cert, x509.KeyUsage).value.key_encipherment  # TLS 1.2 RSA key exchange needs it


def test_a_chain_pem_round_trips_through_load_cert_key(ca: CertKey) -> None:
    leaf = issue_leaf(issuer=make_intermediate(ca, domain="dc1", now=NOW), dns_names=["web"], now=NOW)
    loaded = load_cert_key(leaf.full_chain_pem, leaf.key_pem)
    assert (loaded.cert, loaded.chain, loaded.chain_pem) == (leaf.cert, leaf.chain, leaf.chain_pem)
    with pytest.raises(ValueError, match="does not match"):
        load_cert_key(leaf.cert_pem, ca.key_pem)
    with pytest.raises(ValueError, match="no certificate could be read"):
        load_cert_key(b"", leaf.key_pem)
