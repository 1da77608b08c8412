"""Trust bundle ConfigMap data."""

from __future__ import annotations

from datetime import timedelta

from tests.pki.conftest import NOW
from tls_injector.pki import CertKey, bundle_certificates, fingerprint, make_ca, trust_bundle


def test_the_bundle_holds_each_ca_once_oldest_first_whatever_the_input_order(ca: CertKey) -> None:
    newer = make_ca(common_name="newer", now=NOW + timedelta(days=1))
    forward = trust_bundle([ca.cert, newer.cert, ca.cert], now=NOW)
    backward = trust_bundle([newer.cert, ca.cert], now=NOW)
    assert forward == backward
    assert bundle_certificates(forward) == [ca.cert, newer.cert]
    per_ca = {f"ca-{fingerprint(ca.cert)[:16]}.crt", f"ca-{fingerprint(newer.cert)[:16]}.crt"}
    assert set(forward) == {"ca-bundle.crt", *per_ca}
    assert forward[f"ca-{fingerprint(newer.cert)[:16]}.crt"] == newer.cert_pem.decode()


def test_an_expired_ca_is_dropped_at_its_end_not_before(ca: CertKey) -> None:
    end = ca.cert.not_valid_after_utc
    assert bundle_certificates(trust_bundle([ca.cert], now=end - timedelta(seconds=1))) == [ca.cert]
    assert trust_bundle([ca.cert], now=end) == {"ca-bundle.crt": ""}
    assert bundle_certificates({"ca-bundle.crt": ""}) == []


def test_a_client_ca_bundle_uses_its_own_key_prefix(ca: CertKey) -> None:
    data = trust_bundle([ca.cert], now=NOW, prefix="client-ca")
    assert set(data) == {"client-ca-bundle.crt", f"client-ca-{fingerprint(ca.cert)[:16]}.crt"}


def test_a_mangled_bundle_reads_as_trusting_nothing_instead_of_failing(ca: CertKey) -> None:
    pem = ca.cert_pem.decode()
    for mangled in ["junk", pem[:40], pem.replace("MII", "xyz", 1), pem + pem.replace("MII", "#", 1)]:
        assert bundle_certificates({"ca-bundle.crt": mangled}) == [], mangled
    assert bundle_certificates({}) == []
