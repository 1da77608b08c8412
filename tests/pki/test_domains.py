"""Serving and client roles, per-domain intermediates, client certificates."""

from __future__ import annotations

from datetime import timedelta

import pytest
from cryptography import x509

from tests.pki.conftest import NOW
from tls_injector.pki import (
    BUNDLE_PREFIX,
    CA_LOOKAHEAD,
    CertKey,
    Decision,
    UntrustedChain,
    intermediate_renewal,
    issue_client,
    issue_leaf,
    leaf_renewal,
    make_intermediate,
    make_root,
    verify_client,
    verify_server,
)


def test_roots_are_named_after_their_role_and_bundles_use_distinct_keys() -> None:
    serving, client = make_root("serving", now=NOW), make_root("client", now=NOW)
    assert "serving root" in serving.cert.subject.rfc4514_string()
    assert "client root" in client.cert.subject.rfc4514_string()
    assert BUNDLE_PREFIX["serving"] != BUNDLE_PREFIX["client"]


def test_an_intermediate_signs_leaves_but_no_further_ca(ca: CertKey) -> None:
    intermediate = make_intermediate(ca, domain="dc1", now=NOW)
    constraints = intermediate.cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert (constraints.ca, constraints.path_length) == (True, 0)
    assert intermediate.anchor == ca.cert
    leaf = issue_leaf(issuer=intermediate, dns_names=["web"], now=NOW)
    chain = verify_server(leaf.cert, [intermediate.cert], trusted=[ca.cert], dns_name="web", now=NOW)
    assert chain == [leaf.cert, intermediate.cert, ca.cert]


def test_an_intermediate_never_outlives_its_root(ca: CertKey) -> None:
    late = make_intermediate(ca, domain="dc1", now=NOW + timedelta(days=200))
    assert late.cert.not_valid_after_utc == ca.cert.not_valid_after_utc


def test_an_intermediate_is_renewed_when_expiring_or_when_its_root_is_replaced(ca: CertKey, other_ca: CertKey) -> None:
    intermediate = make_intermediate(ca, domain="dc1", now=NOW)
    pems = {"cert_pem": intermediate.full_chain_pem, "key_pem": intermediate.key_pem}
    due = intermediate.cert.not_valid_after_utc - CA_LOOKAHEAD
    assert intermediate_renewal(**pems, signer=ca.cert, now=NOW) == Decision.keep(due)
    assert intermediate_renewal(**pems, signer=ca.cert, now=due).reason == "expiring"
    assert intermediate_renewal(**pems, signer=other_ca.cert, now=NOW).reason == "ca-rotated"
    assert intermediate_renewal(cert_pem=None, key_pem=None, signer=ca.cert, now=NOW).reason == "missing"


def test_a_leaf_is_renewed_when_its_domain_intermediate_is_replaced(ca: CertKey) -> None:
    first = make_intermediate(ca, domain="dc1", now=NOW)
    second = make_intermediate(ca, domain="dc1", now=NOW)
    leaf = issue_leaf(issuer=first, dns_names=["web"], now=NOW)
    decide = {"cert_pem": leaf.chain_pem, "key_pem": leaf.key_pem, "desired_dns": ["web"], "trusted": [ca.cert],
              "now": NOW}
    assert leaf_renewal(**decide, issuer=first.cert).renew is False  # type: ignore[arg-type]
    assert leaf_renewal(**decide, issuer=second.cert).reason == "ca-rotated"  # type: ignore[arg-type]


def test_a_client_certificate_verifies_for_clients_only_and_only_against_the_client_ca() -> None:
    serving, client_ca = make_root("serving", now=NOW), make_root("client", now=NOW)
    client = issue_client(client_ca, names=["job.batch"], now=NOW)
    chain = verify_client(client.cert, [], trusted=[client_ca.cert], now=NOW)
    assert chain == [client.cert, client_ca.cert]
    with pytest.raises(UntrustedChain):
        verify_client(client.cert, [], trusted=[serving.cert], now=NOW)
    with pytest.raises(UntrustedChain):
        verify_server(client.cert, [], trusted=[client_ca.cert], dns_name="job.batch", now=NOW)
    with pytest.raises(ValueError, match="at least one name"):
        issue_client(client_ca, names=[], now=NOW)
