"""The workload CA's NameConstraints, checked by real TLS clients (OpenSSL through the ssl module, and the
web-PKI verifier of `cryptography`): what a constrained CA signs for a Service verifies, and a certificate
it signs for any other name fails the handshake whatever name the client dials.

OpenSSL checks validity against the real clock, so these tests issue at the wall-clock time.
"""

from __future__ import annotations

import ssl
from datetime import UTC, datetime

import pytest

from tests.pki.tls import Party, handshake
from tls_injector.names import BUNDLE_KEY
from tls_injector.pki import (
    CertKey,
    UntrustedChain,
    dns_names_for_services,
    issue_leaf,
    make_ca,
    service_name_constraints,
    trust_bundle,
    verify_server,
)

NOW = datetime.now(UTC)
NAMES = dns_names_for_services(["web"], "shop")  # web.shop.svc, web.shop.svc.cluster.local


@pytest.fixture(scope="module")
def constrained() -> CertKey:
    return make_ca(common_name="constrained", now=NOW, path_length=0, permitted_dns=service_name_constraints())


def _bundle(ca: CertKey) -> bytes:
    return trust_bundle([ca.cert], now=NOW)[BUNDLE_KEY].encode()


def _connect(ca: CertKey, leaf: CertKey, hostname: str) -> str:
    return handshake(Party(leaf.chain_pem, leaf.key_pem), bundle_pem=_bundle(ca), hostname=hostname)


def test_a_workload_certificate_names_the_service_in_its_two_cluster_forms_only() -> None:
    assert NAMES == ["web.shop.svc", "web.shop.svc.cluster.local"]
    assert service_name_constraints("corp.example.") == ("svc", "svc.corp.example")


@pytest.mark.parametrize("hostname", NAMES)
def test_a_constrained_ca_signs_for_a_service_and_clients_connect(constrained: CertKey, hostname: str) -> None:
    leaf = issue_leaf(issuer=constrained, dns_names=NAMES, now=NOW)
    assert _connect(constrained, leaf, hostname).startswith("TLSv1")
    verify_server(leaf.cert, [], trusted=[constrained.cert], dns_name=hostname, now=NOW)


@pytest.mark.parametrize("name", ["example.com", "kubernetes.default", "web", "web.shop", "*.svc.cluster.local.evil",
                                  "svc.cluster.local.example.com"])
def test_a_constrained_ca_cannot_make_a_certificate_clients_believe_for_another_name(
        constrained: CertKey, name: str) -> None:
    """Even signed (a bug, a planted request), it fails verification for the name it carries."""
    leaf = issue_leaf(issuer=constrained, dns_names=[name.replace("*.", "x.")], now=NOW)
    with pytest.raises(ssl.SSLCertVerificationError):
        _connect(constrained, leaf, name.replace("*.", "x."))
    with pytest.raises(UntrustedChain):
        verify_server(leaf.cert, [], trusted=[constrained.cert], dns_name=name.replace("*.", "x."), now=NOW)


def test_one_forbidden_name_spoils_the_whole_certificate_even_for_a_permitted_name(constrained: CertKey) -> None:
    """Clients check every name against the constraints, not only the one they dialled: the short forms
    cannot ride along with the permitted ones, which is why a workload certificate carries neither."""
    leaf = issue_leaf(issuer=constrained, dns_names=[*NAMES, "web"], now=NOW)
    with pytest.raises(ssl.SSLCertVerificationError):
        _connect(constrained, leaf, "web.shop.svc")


def test_a_constrained_ca_cannot_sign_an_ip_address(constrained: CertKey) -> None:
    leaf = issue_leaf(issuer=constrained, dns_names=NAMES, ip_addresses=["127.0.0.1"], now=NOW)
    with pytest.raises(ssl.SSLCertVerificationError):
        _connect(constrained, leaf, "127.0.0.1")


def test_without_constraints_the_same_certificate_is_believed(constrained: CertKey) -> None:
    """The control: the failures above come from the constraints, not from the names or the helper."""
    free = make_ca(common_name="free", now=NOW)
    leaf = issue_leaf(issuer=free, dns_names=["example.com"], now=NOW)
    assert _connect(free, leaf, "example.com").startswith("TLSv1")


def test_the_workload_ca_signs_leaves_only(constrained: CertKey) -> None:
    """Path length 0: a CA it signed is refused by clients."""
    sub = make_ca(common_name="sub", now=NOW, issuer=constrained)
    leaf = issue_leaf(issuer=sub, dns_names=NAMES, now=NOW)
    with pytest.raises(ssl.SSLCertVerificationError):
        _connect(constrained, leaf, NAMES[0])
