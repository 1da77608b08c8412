"""A workload certificate's conditions from what the pass told (reason -> message) and its dates: the most
decisive reason is Ready's, the other troubles stand beside it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tls_injector.reconcile.parts.status import NOT_ISSUED, conditions

END = datetime(2027, 1, 1, tzinfo=UTC)
RENEW = END - timedelta(days=35)
CONFLICT = "Secret shop/web-tls exists and is not managed by tls-injector"
WAIT = "Secret shop/web-tls: certificate issue waits: the new CA ..."
NAMES = "Secret shop/web-tls: tls-injector.io/service-names refused ..."
NAMELESS = "Secret shop/web-tls: the certificate names no Service, so no client can verify it: ..."
FAILED = "create: Forbidden"
BUNDLE = "ConfigMap shop/tls-injector-trust-bundle exists and is not managed by tls-injector: ..."


@pytest.mark.parametrize(("told", "not_after", "expected"), [
    ({}, END, [("Ready", "True", "Issued")]),
    ({}, None, [("Ready", "False", "NotIssued")]),
    ({"CertificateWaiting": WAIT}, None, [("Ready", "False", "CertificateWaiting")]),
    ({"CertificateWaiting": WAIT, "SecretConflict": CONFLICT}, None, [("Ready", "False", "SecretConflict")]),
    ({"CertificateWaiting": WAIT, "CertificateFailed": FAILED}, END, [("Ready", "False", "CertificateFailed")]),
    ({"ServiceNamesRefused": NAMES}, END, [("Ready", "True", "Issued"),
                                           ("ServiceNamesRefused", "True", "ServiceNamesRefused")]),
    ({"ServiceNamesRefused": NAMES}, None, [("Ready", "False", "NotIssued"),  # a valid name left: not issued yet
                                            ("ServiceNamesRefused", "True", "ServiceNamesRefused")]),
    ({"TrustBundleExcluded": BUNDLE, "CertificateWaiting": WAIT}, END, [
        ("Ready", "False", "CertificateWaiting"), ("TrustBundleExcluded", "True", "TrustBundleExcluded")]),
], ids=["issued", "not-issued", "waiting", "conflict-beats-waiting", "failed-beats-waiting", "names-beside",
        "names-refused-not-issued-yet", "bundle-beside"])
def test_ready_takes_the_most_decisive_reason_and_the_rest_stand_beside(
    told: dict[str, str], not_after: datetime | None, expected: list[tuple[str, str, str]]
) -> None:
    found = conditions(told, not_after=not_after, renew_at=RENEW if not_after else None)
    assert [(c.type, c.status, c.reason) for c in found] == expected
    ready = found[0]
    if ready.reason == "Issued":
        assert ready.message == "issued, valid until 2027-01-01 00:00 UTC; renewed from 2026-11-27 00:00 UTC"
    elif ready.reason == "NotIssued":
        assert ready.message == NOT_ISSUED
    else:
        assert ready.message == told[ready.reason]


def test_a_certificate_naming_no_service_is_issued_and_says_so_beside_ready() -> None:
    """Every name refused (or none asked for, and the workload's own name no Service name): the certificate
    is issued naming no Service, so Ready is Issued, and NoServiceName stands beside it with the reason the
    Event gives, as names_problem does."""
    told = {"ServiceNamesRefused": NAMES, "NoServiceName": NAMELESS}
    found = conditions(told, not_after=END, renew_at=RENEW)
    assert [(c.type, c.status, c.reason) for c in found] == [
        ("Ready", "True", "Issued"), ("ServiceNamesRefused", "True", "ServiceNamesRefused"),
        ("NoServiceName", "True", "NoServiceName")]
    assert found[2].message == NAMELESS
