"""Issue 39, point 3: a certificate profile per workload, bounded by the operator, through the whole chain on
the API emulator: the annotation, the reconciler's pass, the Secret's certificate (key algorithm and validity
as asked), the renewal decision at the profile's time, and a real TLS handshake (OpenSSL through the ssl
module) with what the Secret holds. A refused value: an Event on the workload, the default used, no stall.
A changed profile: one write, then none."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.kubeapi import Emulator
from tests.pki.tls import Party, handshake
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace, reconciler
from tls_injector import names
from tls_injector.injection.profile import ProfileBounds
from tls_injector.pki import BACKDATE, dns_sans, key_type_of, load_certificates
from tls_injector.reconcile.loop.runner import summary
from tls_injector.reconcile.parts.reconciler import Reconciler

NS = "team-a"
# The real time: the handshakes check the certificates against the system clock.
NOW = datetime.now(UTC)


def _cluster(emu: Emulator, **workloads: dict[str, str]) -> None:
    namespace(emu, OWN_NS)
    namespace(emu, NS)
    for name, asked in workloads.items():
        deployment(emu, name, NS, annotations=asked)


def _leaf(emu: Emulator, secret: str = "web-tls") -> Any:
    return load_certificates(data(emu.get("secrets", secret, NS))["tls.crt"])[0]


def _events(emu: Emulator, reason: str) -> list[dict[str, Any]]:
    return [e for e in emu.objects("events", NS) if e.get("reason") == reason]


def _served(emu: Emulator, secret: str = "web-tls") -> str:
    stored = data(emu.get("secrets", secret, NS))
    return handshake(Party(stored["tls.crt"], stored["tls.key"]), bundle_pem=stored["ca.crt"],
                     hostname=f"{secret.removesuffix('-tls')}.{NS}.svc")


def _span(leaf: Any) -> timedelta:
    return leaf.not_valid_after_utc - leaf.not_valid_before_utc - BACKDATE


@pytest.mark.parametrize("algorithm", names.KEY_ALGORITHMS)
def test_each_key_algorithm_is_issued_renewed_on_time_and_served(kubeapi: Emulator, algorithm: str) -> None:
    _cluster(kubeapi, web={names.KEY_ALGORITHM_ANNOTATION: algorithm, names.DURATION_ANNOTATION: "48h",
                           names.RENEW_BEFORE_ANNOTATION: "12h"})
    clock = Clock(NOW)
    rec = reconciler(kubeapi, clock)
    assert rec.run_pass().converged
    leaf = _leaf(kubeapi)
    assert key_type_of(leaf.public_key()) == algorithm
    assert _span(leaf) == timedelta(hours=48)
    assert "web.team-a.svc" in dns_sans(leaf)
    assert _served(kubeapi).startswith("TLSv1")
    secret = kubeapi.get("secrets", "web-tls", NS)
    assert secret["metadata"]["annotations"][names.PROFILE_ANNOTATION] == (
        f"key-algorithm={algorithm},duration=48h,renew-before=12h")
    # Kept until 12h before its end (a sealed pass: nothing to write), renewed from then on.
    clock.now = leaf.not_valid_after_utc - timedelta(hours=12) - timedelta(seconds=1)
    assert rec.run_pass().write_count == 0
    clock.now += timedelta(seconds=1)
    report = rec.run_pass()
    assert report.reasons["renewed:expiring"] == 1, report.reasons
    renewed = _leaf(kubeapi)
    assert key_type_of(renewed.public_key()) == algorithm
    assert renewed.serial_number != leaf.serial_number
    assert rec.run_pass().write_count == 0


def test_a_refused_profile_is_an_event_and_the_default_with_no_stall(kubeapi: Emulator) -> None:
    bounds = ProfileBounds(allowed_key_algorithms=("ecdsa-p256", "ecdsa-p384", "rsa-3072"))
    _cluster(kubeapi, web={names.KEY_ALGORITHM_ANNOTATION: "rsa-2048", names.DURATION_ANNOTATION: "10000000h"},
             api={names.KEY_ALGORITHM_ANNOTATION: "ecdsa-p384"})
    rec = reconciler(kubeapi, Clock(NOW), profiles=bounds)
    report = rec.run_pass()
    [message] = report.profiles_refused
    assert "Deployment/web" in message
    assert "rsa-2048" in message
    assert "10000000h" in message
    assert not report.converged
    assert report.write_count >= 3
    leaf = _leaf(kubeapi)
    assert key_type_of(leaf.public_key()) == "ecdsa-p256"
    assert _span(leaf) == timedelta(days=90)
    assert names.PROFILE_ANNOTATION not in kubeapi.get("secrets", "web-tls", NS)["metadata"]["annotations"]
    assert key_type_of(_leaf(kubeapi, "api-tls").public_key()) == "ecdsa-p384"  # its neighbour is not held back
    [event] = _events(kubeapi, "ProfileRefused")
    assert event["involvedObject"]["name"] == "web"
    assert event["type"] == "Warning"
    assert "not allowed by the operator" in event["message"]
    assert _served(kubeapi).startswith("TLSv1")
    # The next passes: the same refusal said, no write, no second Event.
    again = rec.run_pass()
    assert again.write_count == 0
    assert again.profiles_refused == report.profiles_refused
    assert len(_events(kubeapi, "ProfileRefused")) == 1
    status = {w.secret: w for w in rec.status.workloads} if rec.status else {}
    assert any(c.reason == "ProfileRefused" for c in status["web-tls"].conditions)


def test_a_changed_key_algorithm_reissues_once_then_nothing(kubeapi: Emulator) -> None:
    _cluster(kubeapi, web={})
    clock = Clock(NOW)
    rec = reconciler(kubeapi, clock)
    assert rec.run_pass().converged
    before = _leaf(kubeapi)
    assert key_type_of(before.public_key()) == "ecdsa-p256"
    assert rec.run_pass().write_count == 0
    _set_template_annotations(kubeapi, "web", {names.KEY_ALGORITHM_ANNOTATION: "rsa-3072"})
    report = rec.run_pass()
    assert (report.write_count, dict(report.reasons)) == (1, {"renewed:profile-changed": 1})
    after = _leaf(kubeapi)
    assert key_type_of(after.public_key()) == "rsa-3072"
    assert _served(kubeapi).startswith("TLSv1")
    for _ in range(2):
        clock.advance(timedelta(minutes=10))
        assert rec.run_pass().write_count == 0
    # A fresh reconciler (a restart: nothing remembered) agrees: the seal covers the profile.
    assert reconciler(kubeapi, clock).run_pass().write_count == 0
    # Back to the default: once more, then nothing; the profile annotation goes with it.
    _set_template_annotations(kubeapi, "web", {})
    assert rec.run_pass().reasons == {"renewed:profile-changed": 1}
    assert names.PROFILE_ANNOTATION not in kubeapi.get("secrets", "web-tls", NS)["metadata"]["annotations"]
    assert rec.run_pass().write_count == 0


def test_a_shorter_duration_reissues_once_and_a_longer_one_waits_for_the_renewal(kubeapi: Emulator) -> None:
    _cluster(kubeapi, web={names.DURATION_ANNOTATION: "720h"})
    clock = Clock(NOW)
    rec = reconciler(kubeapi, clock)
    rec.run_pass()
    _set_template_annotations(kubeapi, "web", {names.DURATION_ANNOTATION: "240h"})
    assert rec.run_pass().reasons == {"renewed:profile-changed": 1}
    assert _span(_leaf(kubeapi)) == timedelta(hours=240)
    assert rec.run_pass().write_count == 0
    # Longer, renewed 24h before the end: the 240h certificate is kept, only its profile note and seal brought
    # up to date; the next renewal issues 2000h. (Unset, renew-before would be 35/90 of 2000h, 777h: more than
    # the certificate has left, so it would be renewed at once, as `expiring`.)
    longer = {names.DURATION_ANNOTATION: "2000h", names.RENEW_BEFORE_ANNOTATION: "24h"}
    _set_template_annotations(kubeapi, "web", longer)
    report = rec.run_pass()
    assert report.reasons == {"refreshed": 1}
    assert _span(_leaf(kubeapi)) == timedelta(hours=240)
    assert rec.run_pass().write_count == 0


def test_workloads_sharing_a_secret_with_different_profiles_get_the_default_and_never_flip(
        kubeapi: Emulator) -> None:
    shared = {names.SECRET_NAME_ANNOTATION: "shared-tls", names.SERVICE_NAMES_ANNOTATION: "shared"}
    _cluster(kubeapi, a={**shared, names.KEY_ALGORITHM_ANNOTATION: "rsa-3072"},
             b={**shared, names.KEY_ALGORITHM_ANNOTATION: "ecdsa-p384"})
    clock = Clock(NOW)
    rec = reconciler(kubeapi, clock)
    report = rec.run_pass()
    [message] = report.profiles_refused
    assert "different certificate profiles" in message
    assert key_type_of(_leaf(kubeapi, "shared-tls").public_key()) == "ecdsa-p256"
    assert {e["involvedObject"]["name"] for e in _events(kubeapi, "ProfileRefused")} == {"a", "b"}
    for _ in range(3):
        clock.advance(timedelta(minutes=10))
        assert reconciler(kubeapi, clock).run_pass().write_count == 0
    # They agree: the Secret takes their profile, once.
    _set_template_annotations(kubeapi, "b", {**shared, names.KEY_ALGORITHM_ANNOTATION: "rsa-3072"})
    assert rec.run_pass().reasons == {"renewed:profile-changed": 1}
    assert key_type_of(_leaf(kubeapi, "shared-tls").public_key()) == "rsa-3072"
    assert rec.run_pass().write_count == 0


def test_secrets_issued_before_profiles_existed_are_not_rewritten(kubeapi: Emulator) -> None:
    """The built-in profile leaves the seal and the annotations as they were: an upgrade writes nothing."""
    _cluster(kubeapi, web={})
    rec: Reconciler = reconciler(kubeapi, Clock(NOW))
    rec.run_pass()
    secret = kubeapi.get("secrets", "web-tls", NS)
    assert names.PROFILE_ANNOTATION not in secret["metadata"]["annotations"]
    assert reconciler(kubeapi, Clock(NOW + timedelta(hours=1))).run_pass().write_count == 0


def _set_template_annotations(emu: Emulator, name: str, annotations: dict[str, str]) -> None:
    obj = emu.get("deployments", name, NS)
    obj["spec"]["template"]["metadata"]["annotations"] = annotations
    emu.store.update(emu.resource("deployments"), NS, name, obj)


def test_the_metrics_the_status_and_the_once_line_follow_the_profiles(kubeapi: Emulator) -> None:
    bounds = ProfileBounds(allowed_key_algorithms=("ecdsa-p256", "rsa-3072"))
    _cluster(kubeapi, web={names.KEY_ALGORITHM_ANNOTATION: "rsa-3072", names.DURATION_ANNOTATION: "720h",
                           names.RENEW_BEFORE_ANNOTATION: "100h"},
             api={names.KEY_ALGORITHM_ANNOTATION: "ed25519"}, shop={})
    rec = reconciler(kubeapi, Clock(NOW), profiles=bounds)
    report = rec.run_pass()
    samples = {(s.name, s.labels.get("algorithm", "")): s.value
               for f in text_string_to_metric_families(generate_latest(rec.metrics.registry).decode())
               for s in f.samples}
    assert samples["tls_injector_certificate_profiles_refused", ""] == 1
    assert samples["tls_injector_certificates_by_key_algorithm", "rsa-3072"] == 1
    assert samples["tls_injector_certificates_by_key_algorithm", "ecdsa-p256"] == 2  # api refused, shop's default
    assert samples["tls_injector_certificates_by_key_algorithm", "ed25519"] == 0
    assert "1 Secret with its certificate profile refused" in summary(report)
    assert rec.status is not None
    [web] = [w for w in rec.status.workloads if w.secret == "web-tls"]
    assert web.not_after is not None
    assert web.renew_at == web.not_after - timedelta(hours=100)
