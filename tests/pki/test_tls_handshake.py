"""Certificates and bundles in real TLS handshakes (OpenSSL through the ssl module, loopback).

OpenSSL checks validity against the real clock, so these tests issue at the wall-clock time.
"""

from __future__ import annotations

import ssl
from datetime import UTC, datetime, timedelta

import pytest

from tests.pki.tls import Party, handshake
from tls_injector.names import BUNDLE_KEY
from tls_injector.pki import (
    BUNDLE_PREFIX,
    CertKey,
    dns_names_for_services,
    issue_client,
    issue_leaf,
    make_ca,
    make_intermediate,
    make_root,
    trust_bundle,
)

NAMES = dns_names_for_services(["web"], "shop")
NOW = datetime.now(UTC)


@pytest.fixture(scope="module")
def ca() -> CertKey:
    return make_root("serving", now=NOW)


@pytest.fixture(scope="module")
def other_ca() -> CertKey:
    return make_root("serving", now=NOW)  # the same name: only the key tells them apart


def _party(leaf: CertKey) -> Party:
    return Party(leaf.chain_pem, leaf.key_pem)


def _bundle(*cas: CertKey) -> bytes:
    return trust_bundle([c.anchor for c in cas], now=NOW)[BUNDLE_KEY].encode()


@pytest.mark.parametrize("hostname", NAMES)
def test_a_client_trusting_the_bundle_connects_by_every_service_name(ca: CertKey, hostname: str) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=NAMES, now=NOW)
    assert handshake(_party(leaf), bundle_pem=_bundle(ca), hostname=hostname) in {"TLSv1.2", "TLSv1.3"}


def test_a_client_trusting_another_ca_refuses_the_server(ca: CertKey, other_ca: CertKey) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=NAMES, now=NOW)
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer certificate"):
        handshake(_party(leaf), bundle_pem=_bundle(other_ca), hostname="web.shop.svc")


def test_a_client_asking_for_a_name_not_in_the_certificate_refuses_the_server(ca: CertKey) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=NAMES, now=NOW)
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        handshake(_party(leaf), bundle_pem=_bundle(ca), hostname="web.other.svc")


def test_during_a_rotation_old_and_new_leaves_both_verify_against_the_bundle_with_both_cas() -> None:
    old = make_root("serving", now=NOW - timedelta(days=300))
    new = make_root("serving", now=NOW)
    both = _bundle(old, new)
    old_leaf = issue_leaf(issuer=old, dns_names=NAMES, now=NOW - timedelta(days=10))
    new_leaf = issue_leaf(issuer=new, dns_names=NAMES, now=NOW)
    for leaf in (old_leaf, new_leaf):
        handshake(_party(leaf), bundle_pem=both, hostname="web.shop.svc")
    # What the state machine prevents: dropping the old CA while a pod still serves an old leaf.
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer certificate"):
        handshake(_party(old_leaf), bundle_pem=_bundle(new), hostname="web.shop.svc")


def test_a_leaf_from_a_domain_intermediate_verifies_against_the_root_when_served_with_its_chain(ca: CertKey) -> None:
    intermediate = make_intermediate(ca, domain="dc1", now=NOW)
    leaf = issue_leaf(issuer=intermediate, dns_names=NAMES, now=NOW)
    handshake(_party(leaf), bundle_pem=_bundle(ca), hostname="web.shop.svc.cluster.local")
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer certificate"):
        handshake(Party(leaf.cert_pem, leaf.key_pem), bundle_pem=_bundle(ca), hostname="web.shop.svc")


def test_mutual_tls_accepts_a_client_cert_from_the_client_ca_only() -> None:
    serving, client_ca = make_root("serving", now=NOW), make_root("client", now=NOW)
    server = issue_leaf(issuer=serving, dns_names=NAMES, now=NOW)
    client_bundle = trust_bundle([client_ca.cert], now=NOW, prefix=BUNDLE_PREFIX["client"])
    client_ca_pem = client_bundle["client-ca-bundle.crt"].encode()
    good = issue_client(client_ca, names=["job.batch"], now=NOW)
    assert handshake(_party(server), bundle_pem=_bundle(serving), hostname="web.shop.svc", client=_party(good),
                     client_ca_pem=client_ca_pem)
    # Role separation: a certificate from the serving CA does not log in, even with a clientAuth EKU.
    impostor = issue_leaf(issuer=serving, dns_names=["job.batch"], now=NOW, server=False, client=True)
    with pytest.raises(ssl.SSLError, match="unknown ca"):
        handshake(_party(server), bundle_pem=_bundle(serving), hostname="web.shop.svc", client=_party(impostor),
                  client_ca_pem=client_ca_pem)


def test_a_server_only_certificate_cannot_be_used_as_a_client_certificate() -> None:
    serving, client_ca = make_root("serving", now=NOW), make_root("client", now=NOW)
    server = issue_leaf(issuer=serving, dns_names=NAMES, now=NOW)
    server_only = issue_leaf(issuer=client_ca, dns_names=["job.batch"], now=NOW)  # EKU serverAuth only
    with pytest.raises(ssl.SSLError, match="unsupported certificate"):
        handshake(_party(server), bundle_pem=_bundle(serving), hostname="web.shop.svc", client=_party(server_only),
                  client_ca_pem=client_ca.cert_pem)


def test_an_ed25519_chain_works_in_tls_1_3_where_openssl_accepts_it() -> None:
    root = make_ca(common_name="ed root", now=NOW, key_type="ed25519")
    leaf = issue_leaf(issuer=root, dns_names=NAMES, now=NOW, key_type="ed25519")
    assert handshake(_party(leaf), bundle_pem=_bundle(root), hostname="web.shop.svc") == "TLSv1.3"
