"""CA decisions and user-provided CAs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.pki.conftest import NOW
from tls_injector.pki import CA_LOOKAHEAD, CA_VALIDITY, CertKey, Decision, ca_renewal, issue_leaf, load_user_ca, make_ca

SECOND = timedelta(seconds=1)


def test_a_fresh_ca_is_kept_until_sixty_days_before_it_ends(ca: CertKey) -> None:
    due = NOW + CA_VALIDITY - CA_LOOKAHEAD
    assert ca_renewal(cert_pem=ca.cert_pem, key_pem=ca.key_pem, now=NOW) == Decision.keep(due)
    assert ca_renewal(cert_pem=ca.cert_pem, key_pem=ca.key_pem, now=due - SECOND).renew is False
    assert ca_renewal(cert_pem=ca.cert_pem, key_pem=ca.key_pem, now=due).reason == "expiring"


def test_a_ca_slot_holding_a_leaf_or_nothing_or_a_foreign_key_is_renewed(ca: CertKey, other_ca: CertKey) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=["x"], now=NOW)
    cases = [
        (leaf.cert_pem, leaf.key_pem, "not-a-ca"),
        (None, ca.key_pem, "missing"),
        (ca.cert_pem, b"", "missing"),
        (b"junk", ca.key_pem, "unparsable"),
        (ca.cert_pem, other_ca.key_pem, "key-mismatch"),
    ]
    for cert_pem, key_pem, reason in cases:
        assert ca_renewal(cert_pem=cert_pem, key_pem=key_pem, now=NOW) == Decision.because(reason)  # type: ignore[arg-type]


def test_a_user_ca_with_its_issuers_loads_with_the_chain(ca: CertKey) -> None:
    intermediate = make_ca(common_name="user intermediate", now=NOW, issuer=ca)
    loaded = load_user_ca(intermediate.full_chain_pem, intermediate.key_pem, now=NOW)
    assert loaded.cert == intermediate.cert
    assert loaded.chain == (ca.cert,)
    assert loaded.anchor == ca.cert


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("leaf", "not a CA"),
        ("expired", "expired at"),
        ("future", "not valid before"),
        ("foreign key", "does not belong"),
        ("no key", "required"),
        ("garbage", "not valid PEM"),
        ("wrong order", "is not issued by the next certificate"),
    ],
)
def test_an_unusable_user_ca_is_refused_with_a_message_a_person_can_act_on(
    ca: CertKey, other_ca: CertKey, case: str, message: str
) -> None:
    leaf = issue_leaf(issuer=ca, dns_names=["x"], now=NOW)
    intermediate = make_ca(common_name="user intermediate", now=NOW, issuer=ca)
    inputs: dict[str, tuple[bytes, bytes, timedelta]] = {
        "leaf": (leaf.cert_pem, leaf.key_pem, timedelta(0)),
        "expired": (ca.cert_pem, ca.key_pem, CA_VALIDITY),
        "future": (ca.cert_pem, ca.key_pem, -timedelta(hours=1)),
        "foreign key": (ca.cert_pem, other_ca.key_pem, timedelta(0)),
        "no key": (ca.cert_pem, b"", timedelta(0)),
        "garbage": (b"-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n", ca.key_pem, timedelta(0)),
        "wrong order": (intermediate.cert_pem + other_ca.cert_pem, intermediate.key_pem, timedelta(0)),
    }
    cert_pem, key_pem, shift = inputs[case]
    with pytest.raises(ValueError, match=message):
        load_user_ca(cert_pem, key_pem, now=NOW + shift)
