"""Webhook self-care: the serving certificate and caBundle in every entry of both configurations."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, START, data, namespace
from tls_injector.kube import SECRETS, KubeApi
from tls_injector.pki import load_certificates, verify_server
from tls_injector.reconcile.loop.webhook import ensure_webhook_certificate

DNS = "tls-injector.tls-injector.svc"


def install_webhooks(emu: Emulator) -> None:
    if emu.get("namespaces", OWN_NS) is None:
        namespace(emu, OWN_NS)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        entries = [{"name": f"{n}.tls-injector.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                    "clientConfig": {"service": {"name": "tls-injector", "namespace": OWN_NS, "path": f"/{n}"}}}
                   for n in ("first", "second")]
        emu.add({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                 "metadata": {"name": "tls-injector"}, "webhooks": entries})


def ca_bundles(emu: Emulator) -> list[list[Any]]:
    configs = emu.objects("mutatingwebhookconfigurations") + emu.objects("validatingwebhookconfigurations")
    return [load_certificates(base64.b64decode(w["clientConfig"].get("caBundle") or ""))
            for c in configs for w in c["webhooks"]]


def assert_serving_cert_trusted_by_every_entry(emu: Emulator, now: Any) -> None:
    chain = load_certificates(data(emu.get("secrets", "tls-injector-webhook-tls", OWN_NS))["tls.crt"])
    bundles = ca_bundles(emu)
    assert len(bundles) == 4
    for trusted in bundles:
        verify_server(chain[0], chain[1:], trusted=trusted, dns_name=DNS, now=now)


def issuer(emu: Emulator) -> str:
    secret = emu.get("secrets", "tls-injector-webhook-tls", OWN_NS)
    assert secret is not None
    return str(secret["metadata"]["annotations"]["tls-injector.io/issuer"])


def test_bootstrap_issues_the_serving_certificate_and_fills_every_ca_bundle_once(kubeapi: Emulator) -> None:
    install_webhooks(kubeapi)
    api = KubeApi(kubeapi.api_client())
    first = ensure_webhook_certificate(api, namespace=OWN_NS, now=START)
    assert first.converged, first
    assert first.reasons["ca-bundle"] == 2
    assert_serving_cert_trusted_by_every_entry(kubeapi, START)
    secret = kubeapi.get("secrets", "tls-injector-webhook-tls", OWN_NS)
    assert secret is not None
    assert secret["type"] == "kubernetes.io/tls"
    kubeapi.reset_log()
    assert ensure_webhook_certificate(api, namespace=OWN_NS, now=START).write_count == 0
    assert kubeapi.writes() == []


def test_the_webhook_ca_rotates_with_old_and_new_in_every_ca_bundle_until_the_switch(kubeapi: Emulator) -> None:
    install_webhooks(kubeapi)
    api = KubeApi(kubeapi.api_client())
    now = START
    ensure_webhook_certificate(api, namespace=OWN_NS, now=now)
    first_issuer = issuer(kubeapi)
    ca = api.get(SECRETS, "tls-injector-webhook-ca", namespace=OWN_NS)
    ca["metadata"]["annotations"] = {"tls-injector.io/force-replace": "yes"}
    api.replace(SECRETS, ca)
    seen_two = False
    for _ in range(10):
        now += timedelta(minutes=6)
        report = ensure_webhook_certificate(api, namespace=OWN_NS, now=now)
        assert report.converged, report
        assert_serving_cert_trusted_by_every_entry(kubeapi, now)
        seen_two |= all(len(b) == 2 for b in ca_bundles(kubeapi))
        if report.write_count == 0:
            break
    assert seen_two
    assert all(len(b) == 1 for b in ca_bundles(kubeapi))
    assert issuer(kubeapi) != first_issuer


def test_missing_webhook_configurations_still_get_a_serving_certificate(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    report = ensure_webhook_certificate(KubeApi(kubeapi.api_client()), namespace=OWN_NS, now=START)
    assert report.converged
    assert kubeapi.get("secrets", "tls-injector-webhook-tls", OWN_NS) is not None
