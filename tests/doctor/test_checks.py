"""The pure checks on hand-made snapshots: the cases a healthy-then-broken cluster does not reach easily
(a rotation under way or stuck, a CA close to expiry, sections the doctor may not read, long reports)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from tls_injector.doctor import DoctorSettings, Snapshot, render_json, render_text, run_checks
from tls_injector.doctor.ca import check_ca
from tls_injector.doctor.model import TEXT_DETAILS, Result, error
from tls_injector.doctor.reconciler import check_lease
from tls_injector.doctor.webhook import check_ca_bundle_trusts_secret, check_served_certificate
from tls_injector.doctor.workloads import check_tls_exceptions
from tls_injector.pki import CaSet, CaState, encode, make_ca
from tls_injector.pki.trust import CaRecord
from tls_injector.reconcile.core import ownership as own
from tls_injector.reconcile.parts.served import Served
from tls_injector.reconcile.parts.webhook_plan import WebhookSettings

NOW = datetime(2026, 6, 1, tzinfo=UTC)
SETTINGS = DoctorSettings(namespace="tls-injector", cluster_domain="cluster.local", webhook=WebhookSettings(),
                          ca_secret="tls-injector-ca")


def _snapshot(**fields: object) -> Snapshot:
    snap = Snapshot(SETTINGS, NOW)
    for name, value in fields.items():
        setattr(snap, name, value)
    return snap


def _ca_secret(*states: tuple[CaState, timedelta, timedelta]) -> dict[str, object]:
    """A CA Secret holding one CA per (state, made this long ago, valid this long)."""
    records = []
    for index, (state, age, validity) in enumerate(states):
        ca = make_ca(common_name=f"CA {index}", now=NOW - age, validity=validity)
        records.append(CaRecord(ca.cert, None if state is CaState.ZOMBIE else ca.key, state, NOW - age))
    data = {k: base64.b64encode(v).decode() for k, v in encode(CaSet(tuple(records))).items()}
    return {"metadata": {"name": "tls-injector-ca", "namespace": "tls-injector", "labels": own.owner_labels("ca")},
            "data": data}


YEAR = timedelta(days=365)


@pytest.mark.parametrize(("states", "statuses", "said"), [
    ([(CaState.TRUSTED_USED, timedelta(days=10), YEAR)], ["ok", "ok"], "1 CA, no rotation"),
    ([(CaState.TRUSTED_USED, timedelta(days=300), YEAR), (CaState.UNTRUSTED, timedelta(minutes=3), YEAR)],
     ["ok", "ok"], "is being added to every trust bundle"),
    ([(CaState.TRUSTED_USED, timedelta(days=300), YEAR), (CaState.UNTRUSTED, timedelta(hours=3), YEAR)],
     ["warning", "ok"], "has not moved for over 1 h"),
    ([(CaState.TRUSTED_USED, timedelta(days=320), YEAR)], ["ok", "warning"], "no successor is on its way"),
    ([(CaState.UNTRUSTED, timedelta(minutes=1), YEAR)], ["warning", "ok"], "no CA may sign yet"),
    ([(CaState.TRUSTED_USED, timedelta(days=400), YEAR)], ["ok", "error"], "expired"),
])
def test_the_ca_checks_tell_a_rotation_a_stall_and_an_expiry(states: list[tuple[CaState, timedelta, timedelta]],
                                                            statuses: list[str], said: str) -> None:
    snap = _snapshot(ca_secrets={"tls-injector-ca": _ca_secret(*states)})
    results = check_ca(snap, label="workload CA", secret_name="tls-injector-ca")
    assert [r.status for r in results] == statuses
    assert any(said in r.message for r in results), results


def test_a_ca_secret_someone_else_owns_is_unusable() -> None:
    secret = _ca_secret((CaState.TRUSTED_USED, timedelta(days=1), YEAR))
    secret["metadata"] = {"name": "tls-injector-ca", "labels": {}}
    [result] = check_ca(_snapshot(ca_secrets={"tls-injector-ca": secret}), label="workload CA",
                        secret_name="tls-injector-ca")
    assert result.status == "error"
    assert "not managed by tls-injector" in result.message


def test_sections_the_doctor_may_not_read_are_reported_and_the_rest_still_checked() -> None:
    snap = _snapshot(errors={"configs": "Forbidden: no", "cluster": "Forbidden: no", "access": "Forbidden: no"})
    results = {r.title: r for r in run_checks(snap)}
    assert results["the webhook configurations exist"].status == "error"
    assert "cannot read them: Forbidden" in results["the webhook configurations exist"].message
    assert results["the opted-in workloads and pods can be read"].status == "error"
    access = results["the reconciler's service account tls-injector/tls-injector-reconciler may make its calls"]
    assert access.status == "warning"
    assert "subjectaccessreviews" in access.hint
    assert results["a reconciler holds the leader Lease"].status == "error"  # the Lease was still read: none


def test_an_address_given_that_does_not_answer_is_a_failure() -> None:
    served = Served("127.0.0.1:9", "tls-injector.tls-injector.svc", error="ConnectionRefusedError", explicit=True)
    result = check_served_certificate(_snapshot(served=[served]))
    assert result.status == "error"
    assert "127.0.0.1:9: ConnectionRefusedError" in result.details


@pytest.mark.parametrize(("spec", "status", "said"), [
    ({"holderIdentity": "a", "renewTime": "2026-06-01T00:00:00.000000Z", "leaseDurationSeconds": 15}, "ok",
     "held by a, renewed 0 s ago"),
    ({"holderIdentity": "a", "renewTime": "2026-05-31T23:59:40.000000Z", "leaseDurationSeconds": 15}, "error",
     "last renewed 20 s ago"),
    ({"holderIdentity": "", "renewTime": "2026-06-01T00:00:00.000000Z", "leaseDurationSeconds": 15}, "error",
     "is not held"),
    ({"holderIdentity": "a", "renewTime": "yesterday", "leaseDurationSeconds": 15}, "error", "is not held"),
])
def test_the_lease_is_fresh_only_within_its_duration(spec: dict[str, object], status: str, said: str) -> None:
    result = check_lease(_snapshot(lease={"metadata": {"name": "tls-injector-leader"}, "spec": spec}))
    assert result.status == status
    assert said in result.message


def test_long_reports_are_cut_in_text_and_counted_in_json() -> None:
    details = [f"ns/pod-{i}" for i in range(TEXT_DETAILS + 5)]
    results: list[Result] = [error("workloads", "opted-in pods carry the injection", "15 pods", hint="restart",
                                   details=details)]
    text = render_text(results)
    assert "ns/pod-9" in text
    assert "ns/pod-10" not in text
    assert "... and 5 more" in text
    assert text.rstrip().endswith("Status check results are ✖: 1 failed, 0 warnings")
    report = orjson.loads(render_json(results))
    assert report["checks"][0]["details"] == details
    assert report["checks"][0]["details_omitted"] == 0


def test_the_ca_bundle_check_is_no_pass_when_no_configuration_entry_was_there_to_check() -> None:
    ca = make_ca(common_name="webhook CA", now=NOW - timedelta(days=1), validity=YEAR)
    secret = {"metadata": {"name": "tls-injector-webhook-tls", "namespace": "tls-injector"},
              "data": {"tls.crt": base64.b64encode(ca.cert_pem).decode()}}
    result = check_ca_bundle_trusts_secret(_snapshot(serving_secret=secret))
    assert result.status == "warning"
    assert "not checked" in result.message


def _workload(kind: str, namespace: str, name: str, annotations: dict[str, object]) -> tuple[str, dict[str, object]]:
    template = {"metadata": {"labels": {"tls-injector.io/inject": "true"}, "annotations": annotations}}
    spec = {"jobTemplate": {"spec": {"template": template}}} if kind == "CronJob" else {"template": template}
    return kind, {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def test_workloads_naming_a_tls_exception_are_listed_as_a_warning_not_a_failure() -> None:
    change = "tls-injector.io/tls-change"
    snap = _snapshot()
    snap.observed.workloads = [_workload("Deployment", "shop", "web", {}),
                               _workload("Deployment", "shop", "api", {change: "api-tls->api-v2-tls"}),
                               _workload("CronJob", "batch", "nightly", {change: "(default)->(off)"}),
                               _workload("StatefulSet", "shop", "db", {change: 7}),  # not a string: names nothing
                               _workload("DaemonSet", "shop", "agent", {"tls-injector.io/secret-name": "x"})]
    found = check_tls_exceptions(snap)
    assert (found.status, found.message) == ("warning", f"2 workloads name a TLS change in {change}")
    assert found.details == ("CronJob batch/nightly: (default)->(off)", "Deployment shop/api: api-tls->api-v2-tls")
    assert "change-tls" in found.hint
    assert found in run_checks(snap)
    snap.observed.workloads = snap.observed.workloads[:1]
    none = check_tls_exceptions(snap)
    assert (none.status, none.message) == ("ok", "none among the 1 workloads read")
    snap.errors["cluster"] = "Forbidden: workloads"  # unread: said by the read check, not as "none named"
    assert not [r for r in run_checks(snap) if r.title == found.title]
