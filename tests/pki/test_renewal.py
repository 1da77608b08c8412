"""Leaf and CA renewal decisions, with a fake `now`, verified the way a TLS client would."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.pki.conftest import NOW
from tls_injector.pki import (
    LEAF_LOOKAHEAD,
    LEAF_VALIDITY,
    CertKey,
    Decision,
    issue_leaf,
    leaf_renewal,
    make_ca,
)

NAMES = ["web", "web.shop", "web.shop.svc", "web.shop.svc.cluster.local"]
SECOND = timedelta(seconds=1)


def _decide(leaf: CertKey | None, trusted: list[CertKey], *, now=NOW, names=NAMES, issuer=None, **kw) -> Decision:  # type: ignore[no-untyped-def]
    return leaf_renewal(
        cert_pem=leaf.chain_pem if leaf else None,
        key_pem=leaf.key_pem if leaf else None,
        desired_dns=names,
        trusted=[t.anchor for t in trusted],
        now=now,
        issuer=issuer.cert if issuer else None,
        **kw,
    )


def test_a_fresh_leaf_from_the_signing_ca_is_kept_until_its_lookahead(ca: CertKey) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=NAMES, now=NOW)
    decision = _decide(leaf, [ca], issuer=ca)
    assert decision == Decision(renew=False, reason=None, due=NOW + LEAF_VALIDITY - LEAF_LOOKAHEAD)


@pytest.mark.parametrize(
    ("offset", "renew"),
    [
        (-SECOND, False),  # one second before `not_after - lookahead`: still fine
        (timedelta(0), True),  # exactly at the boundary: renew (the lookahead is a minimum)
        (LEAF_LOOKAHEAD - SECOND, True),  # the last second of its life
    ],
)
def test_renewal_starts_exactly_lookahead_before_the_end(ca: CertKey, offset: timedelta, renew: bool) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=NAMES, now=NOW)
    boundary = leaf.cert.not_valid_after_utc - LEAF_LOOKAHEAD
    decision = _decide(leaf, [ca], now=boundary + offset)
    assert (decision.renew, decision.reason) == (renew, "expiring" if renew else None)


def test_an_expired_leaf_is_renewed_as_expiring_with_zero_lookahead(ca: CertKey) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=NAMES, now=NOW)
    end = leaf.cert.not_valid_after_utc
    assert _decide(leaf, [ca], now=end - SECOND, lookahead=timedelta(0)).renew is False
    assert _decide(leaf, [ca], now=end, lookahead=timedelta(0)).reason == "expiring"


def test_a_leaf_from_the_future_is_not_yet_valid(ca: CertKey) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=NAMES, now=NOW + timedelta(hours=1))
    assert _decide(leaf, [ca]).reason == "not-yet-valid"


def test_the_backdated_start_accepts_a_leaf_issued_by_a_clock_minutes_ahead(ca: CertKey) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=NAMES, now=NOW + timedelta(minutes=4))
    assert _decide(leaf, [ca]).renew is False


def test_a_leaf_signed_by_a_ca_that_is_not_trusted_is_renewed(ca: CertKey, other_ca: CertKey) -> None:
    leaf = issue_leaf(issuer=other_ca, dns_names=NAMES, now=NOW)
    assert _decide(leaf, [ca]).reason == "untrusted-issuer"
    assert _decide(leaf, []).reason == "untrusted-issuer"


def test_a_leaf_from_a_trusted_but_replaced_ca_is_renewed_as_ca_rotated(ca: CertKey, other_ca: CertKey) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=NAMES, now=NOW)
    assert _decide(leaf, [ca, other_ca], issuer=other_ca).reason == "ca-rotated"
    assert _decide(leaf, [ca, other_ca], issuer=ca).renew is False


@pytest.mark.parametrize(
    "names",
    [NAMES[:3], [*NAMES, "api"], ["web", "web.other", "web.other.svc", "web.other.svc.cluster.local"]],
)
def test_a_leaf_whose_names_differ_from_the_desired_ones_is_renewed(ca: CertKey, names: list[str]) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=names, now=NOW)
    assert _decide(leaf, [ca]).reason == "sans-changed"


def test_the_order_of_desired_names_does_not_matter(ca: CertKey) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=NAMES, now=NOW)
    assert _decide(leaf, [ca], names=list(reversed(NAMES))).renew is False


def test_missing_garbage_and_mismatched_secrets_are_renewed_with_their_reason(ca: CertKey) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=NAMES, now=NOW)
    other = issue_leaf(issuer=ca, dns_names=NAMES, now=NOW)
    cases = [
        (None, leaf.key_pem, "missing"),
        (leaf.cert_pem, None, "missing"),
        (b"  \n", leaf.key_pem, "missing"),
        (b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n", leaf.key_pem, "unparsable"),
        (b"hello", leaf.key_pem, "unparsable"),
        (leaf.cert_pem, b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "unparsable"),
        (leaf.cert_pem, other.key_pem, "key-mismatch"),
    ]
    for cert_pem, key_pem, reason in cases:
        got = leaf_renewal(cert_pem=cert_pem, key_pem=key_pem, desired_dns=NAMES, trusted=[ca.cert], now=NOW)
        assert got == Decision.because(reason), (cert_pem, key_pem)  # type: ignore[arg-type]


def test_a_leaf_from_an_intermediate_is_kept_when_served_with_its_chain(ca: CertKey) -> None:
    intermediate = make_ca(common_name="test intermediate", now=NOW, issuer=ca, path_length=0)
    leaf = issue_leaf(issuer=intermediate, dns_names=NAMES, now=NOW)
    assert leaf.chain_pem.count(b"BEGIN CERTIFICATE") == 2  # leaf + intermediate, never the root
    assert _decide(leaf, [ca], issuer=intermediate).renew is False
    served_alone = leaf_renewal(cert_pem=leaf.cert_pem, key_pem=leaf.key_pem, desired_dns=NAMES,
                                trusted=[ca.cert], now=NOW)
    assert served_alone.reason == "untrusted-issuer"  # a client without the intermediate cannot build the chain
    assert _decide(leaf, [ca], issuer=ca).reason == "ca-rotated"  # signed by the intermediate, not the root


@pytest.mark.parametrize("key_type", ["ecdsa-p256", "rsa-2048", "ed25519"])
def test_every_selectable_key_type_yields_a_leaf_that_is_kept(key_type: str) -> None:
    root = make_ca(common_name="typed root", now=NOW, key_type=key_type)  # type: ignore[arg-type]
    leaf = issue_leaf(issuer=root, dns_names=NAMES, now=NOW, key_type=key_type)  # type: ignore[arg-type]
    assert _decide(leaf, [root], issuer=root).renew is False
    assert _decide(leaf, [make_ca(common_name="typed root", now=NOW)]).reason == "untrusted-issuer"


def test_a_client_certificate_is_checked_for_client_use(ca: CertKey) -> None:
    client = issue_leaf(issuer=ca, dns_names=["job.batch"], now=NOW, server=False, client=True)
    assert _decide(client, [ca], names=["job.batch"], client=True).renew is False
    assert _decide(client, [ca], names=["job.batch"]).reason == "untrusted-issuer"  # no serverAuth EKU


def test_a_leaf_wanted_without_names_is_kept_when_it_names_nothing_and_renewed_when_it_names_something(
        ca: CertKey) -> None:
    """A workload no Service selects, whose own name is no Service name, gets a certificate naming nothing
    (issue 39): kept while it chains to the signer, re-issued when it carries names or another CA signed it."""
    nameless = issue_leaf(issuer=ca, dns_names=[], now=NOW)
    assert _decide(nameless, [ca], names=[], issuer=ca).renew is False
    assert _decide(issue_leaf(issuer=ca, dns_names=NAMES, now=NOW), [ca], names=[]).reason == "sans-changed"
    other = make_ca(common_name="other root", now=NOW)
    assert _decide(issue_leaf(issuer=other, dns_names=[], now=NOW), [ca], names=[]).reason == "untrusted-issuer"
    assert _decide(nameless, [ca], names=NAMES).reason == "sans-changed"  # a Service selects it now
