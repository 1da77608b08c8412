"""A workload certificate's conditions from what the pass told (reason -> message) and its dates: the most
decisive reason is Ready's, the other troubles stand beside it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.reconcile.status import NOT_ISSUED, conditions

END = datetime(2027, 1, 1, tzinfo=UTC)
RENEW = END - timedelta(days=35)
CONFLICT = "Secret shop/web-tls exists and is not managed by tls-injector"
WAIT = "Secret shop/web-tls: certificate issue waits: the new CA ..."
NAMES = "Secret shop/web-tls: tls-injector.io/service-names refused ..."
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
    assert found == conditions(told, not_after=not_after, renew_at=RENEW if not_after else None, nameless=False)
    assert [(c.type, c.status, c.reason) for c in found] == expected
    ready = found[0]
    if ready.reason == "Issued":
        assert ready.message == "issued, valid until 2027-01-01 00:00 UTC; renewed from 2026-11-27 00:00 UTC"
    elif ready.reason == "NotIssued":
        assert ready.message == NOT_ISSUED
    else:
        assert ready.message == told[ready.reason]


def test_a_workload_with_every_name_refused_is_not_ready_because_of_the_names() -> None:
    [ready] = conditions({"ServiceNamesRefused": NAMES}, not_after=None, renew_at=None, nameless=True)
    assert (ready.type, ready.status, ready.reason, ready.message) == ("Ready", "False", "ServiceNamesRefused", NAMES)

