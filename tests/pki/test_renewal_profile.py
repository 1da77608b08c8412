"""Issue 39, point 3: the renewal decision follows the certificate profile: another key algorithm, or a life
longer than the profile's duration, is renewed ("profile-changed"); a shorter one (capped at its CA's end,
or a profile that grew) is kept; renew-before is the lookahead. A seal is made for one profile."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tls_injector import names
from tls_injector.pki import issue_leaf, leaf_renewal, make_ca, sealed_leaf_renewal
from tls_injector.pki.seal import SealedLeaf, open_seal, seal, seal_key

NOW = datetime(2026, 6, 1, tzinfo=UTC)
CA = make_ca(common_name="profile test CA", now=NOW - timedelta(days=1))
DNS = ["web.team-a.svc"]


def _decide(leaf: object, **profile: object) -> object:
    profile.setdefault("lookahead", timedelta(hours=24))  # shorter than the leaves' life: timing is not why
    return leaf_renewal(cert_pem=leaf.chain_pem, key_pem=leaf.key_pem, desired_dns=DNS,  # type: ignore[attr-defined]
                        trusted=[CA.cert], now=NOW, issuer=CA.cert, **profile)  # type: ignore[arg-type]


@pytest.mark.parametrize("algorithm", names.KEY_ALGORITHMS)
def test_a_leaf_of_another_key_algorithm_is_renewed_and_its_own_kept(algorithm: names.KeyAlgorithm) -> None:
    leaf = issue_leaf(issuer=CA, dns_names=DNS, now=NOW, key_type=algorithm, validity=timedelta(hours=720))
    kept = _decide(leaf, key_type=algorithm, duration=timedelta(hours=720), lookahead=timedelta(hours=240))
    assert kept.renew is False  # type: ignore[attr-defined]
    assert kept.due == leaf.cert.not_valid_after_utc - timedelta(hours=240)  # type: ignore[attr-defined]
    other = next(a for a in names.KEY_ALGORITHMS if a != algorithm)
    assert _decide(leaf, key_type=other).reason == "profile-changed"  # type: ignore[attr-defined]


def test_a_leaf_longer_than_its_duration_is_renewed_a_shorter_one_kept() -> None:
    leaf = issue_leaf(issuer=CA, dns_names=DNS, now=NOW, validity=timedelta(hours=720))
    assert _decide(leaf, duration=timedelta(hours=719)).reason == "profile-changed"  # type: ignore[attr-defined]
    assert _decide(leaf, duration=timedelta(hours=720)).renew is False  # type: ignore[attr-defined]
    assert _decide(leaf, duration=timedelta(hours=2000)).renew is False  # type: ignore[attr-defined]


def test_a_leaf_capped_at_its_cas_end_is_not_renewed_for_being_short() -> None:
    short_ca = make_ca(common_name="short CA", now=NOW - timedelta(days=1), validity=timedelta(days=10))
    leaf = issue_leaf(issuer=short_ca, dns_names=DNS, now=NOW, validity=timedelta(days=90))
    decision = leaf_renewal(cert_pem=leaf.chain_pem, key_pem=leaf.key_pem, desired_dns=DNS, trusted=[short_ca.cert],
                            now=NOW, issuer=short_ca.cert, duration=timedelta(days=90), lookahead=timedelta(days=2))
    assert decision.renew is False


def test_the_sealed_window_is_judged_by_the_profiles_duration_and_renew_before() -> None:
    leaf = issue_leaf(issuer=CA, dns_names=DNS, now=NOW, validity=timedelta(hours=720))
    key = seal_key(CA)
    sealed = SealedLeaf("team-a", "web-tls", leaf.chain_pem, leaf.key_pem, DNS, "key-algorithm=ecdsa-p256,x")
    value = seal(key, sealed, not_before=leaf.cert.not_valid_before_utc, not_after=leaf.cert.not_valid_after_utc)
    opened = open_seal(key, sealed, value)
    assert opened is not None
    assert sealed_leaf_renewal(opened, now=NOW, duration=timedelta(hours=100),
                               lookahead=timedelta(hours=24)).reason == "profile-changed"
    due = leaf.cert.not_valid_after_utc - timedelta(hours=100)
    assert sealed_leaf_renewal(opened, now=due, lookahead=timedelta(hours=100)).reason == "expiring"
    assert sealed_leaf_renewal(opened, now=due - timedelta(seconds=1), lookahead=timedelta(hours=100)).renew is False


def test_a_seal_opens_only_for_the_profile_it_was_made_for_and_the_built_in_one_is_the_old_seal() -> None:
    leaf = issue_leaf(issuer=CA, dns_names=DNS, now=NOW)
    key = seal_key(CA)
    window = {"not_before": leaf.cert.not_valid_before_utc, "not_after": leaf.cert.not_valid_after_utc}
    built_in = SealedLeaf("team-a", "web-tls", leaf.chain_pem, leaf.key_pem, DNS)
    rsa = SealedLeaf("team-a", "web-tls", leaf.chain_pem, leaf.key_pem, DNS, "key-algorithm=rsa-3072")
    old = seal(key, built_in, **window)
    assert open_seal(key, built_in, old) is not None
    assert open_seal(key, rsa, old) is None
    assert open_seal(key, built_in, seal(key, rsa, **window)) is None
