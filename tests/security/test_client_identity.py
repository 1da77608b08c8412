"""A client certificate names a ServiceAccount that exists.

A client certificate's SPIFFE ID is `spiffe://<trust domain>/ns/<ns>/sa/<account>`, the account taken
from the pod template. Before, it was issued whatever the account: a template naming an account that
does not exist (its pods cannot even be created: the ServiceAccount admission plugin refuses them) got a
certificate for that identity, and whoever created the account later found one already made for it. Now
the reconciler reads the account (one `get` per account asked for, per pass, as the pod-certificate
signer does for each request); a missing one refuses that client certificate with its reason (report,
log, `ClientCertificateRefused` Event once) and removes one issued before, while every other certificate
is issued; an API error keeps what is issued.
"""

from __future__ import annotations

import base64
from datetime import timedelta

from cryptography import x509

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, namespace, reconciler, service_account
from tls_injector.kube import SERVICE_ACCOUNTS, KubeApi
from tls_injector.names import CLIENT_CERT_ANNOTATION

ASKS = {CLIENT_CERT_ANNOTATION: "true"}


def run_as(emu: Emulator, name: str, account: str) -> None:
    """An opted-in Deployment asking for a client certificate, its pods running as `account`."""
    emu.add({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "shop"},
             "spec": {"selector": {"matchLabels": {"app": name}},
                      "template": {"metadata": {"labels": {"app": name, "tls-injector.io/inject": "true"},
                                                "annotations": ASKS},
                                   "spec": {"serviceAccountName": account,
                                            "containers": [{"name": "app", "image": "example/app:1"}]}}}})


def uri(emu: Emulator, secret: str) -> list[str]:
    pem = base64.b64decode(emu.get("secrets", secret, "shop")["data"]["tls.crt"])
    cert = x509.load_pem_x509_certificate(pem)
    return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.UniformResourceIdentifier)


def client_secrets(emu: Emulator) -> set[str]:
    names = (s["metadata"]["name"] for s in emu.objects("secrets", "shop"))
    return {name for name in names if name.endswith("-client-tls")}


def test_a_client_certificate_for_a_service_account_that_does_not_exist_is_refused_and_the_rest_is_issued(
        kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "shop")
    service_account(kubeapi, "real", "shop")
    run_as(kubeapi, "ghostly", "ghost")
    run_as(kubeapi, "honest", "real")
    clock = Clock()
    rec = reconciler(kubeapi, clock)
    report = rec.run_pass()
    [said] = [r for r in report.clients_refused if "ghost" in r]
    assert "Secret shop/ghostly-client-tls" in said
    assert "service account ghost does not exist in namespace shop" in said
    assert client_secrets(kubeapi) == {"honest-client-tls"}
    assert uri(kubeapi, "honest-client-tls") == ["spiffe://cluster.local/ns/shop/sa/real"]
    assert kubeapi.get("secrets", "ghostly-tls", "shop")["data"]["tls.crt"]  # its serving certificate is issued
    events = [e for e in kubeapi.objects("events") if e["reason"] == "ClientCertificateRefused"]
    assert [e["involvedObject"]["name"] for e in events] == ["ghostly"]
    # Once the account exists, the next pass issues it.
    service_account(kubeapi, "ghost", "shop")
    clock.advance(timedelta(minutes=1))
    assert rec.run_pass().converged
    assert uri(kubeapi, "ghostly-client-tls") == ["spiffe://cluster.local/ns/shop/sa/ghost"]


def test_a_client_certificate_whose_service_account_is_deleted_is_removed_and_an_api_error_keeps_it(
        kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "shop")
    service_account(kubeapi, "real", "shop")
    run_as(kubeapi, "honest", "real")
    clock = Clock()
    rec = reconciler(kubeapi, clock)
    assert rec.run_pass().converged
    assert client_secrets(kubeapi) == {"honest-client-tls"}
    kubeapi.fail_next("get", "serviceaccounts", "real", code=500)
    clock.advance(timedelta(minutes=1))
    rec.run_pass()
    assert client_secrets(kubeapi) == {"honest-client-tls"}  # one failed read removes nothing
    KubeApi(kubeapi.api_client()).delete(SERVICE_ACCOUNTS, "real", namespace="shop")
    clock.advance(timedelta(minutes=1))
    report = rec.run_pass()
    assert [r for r in report.clients_refused if "service account real does not exist" in r]
    assert client_secrets(kubeapi) == set()
