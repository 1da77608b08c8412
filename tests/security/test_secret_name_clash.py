"""One workload's client Secret named as another's serving Secret: one is refused, and the pass settles.

Workload `x` asks for a client certificate, so its client Secret is `x-client-tls`; workload `y` names
`x-client-tls` as its serving Secret (tls-injector.io/secret-name). Before, both were planned into that
one Secret: each pass renewed it (`sans-changed`) as one and then the other while the pass said
"converged", and x's pods mounted a serverAuth certificate as their client certificate. Now the serving
Secret keeps its name and x's client certificate is refused with its reason (the report, the log, a
`ClientCertificateRefused` Event once), whichever order the workloads are found in.
"""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, deployment, namespace, reconciler
from tls_injector.names import CLIENT_CERT_ANNOTATION, SECRET_NAME_ANNOTATION

WRITES = ("create", "update", "patch", "delete")


def certificate(emu: Emulator, ns: str, name: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(emu.get("secrets", name, ns)["data"]["tls.crt"]))


@pytest.mark.parametrize(("client", "server"), [("x", "y"), ("zz", "a")], ids=["client first", "server first"])
def test_a_client_secret_named_as_another_workloads_serving_secret_is_refused_and_the_pass_settles(
        kubeapi: Emulator, client: str, server: str) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "shop")
    deployment(kubeapi, client, "shop", annotations={CLIENT_CERT_ANNOTATION: "true"})
    deployment(kubeapi, server, "shop", annotations={SECRET_NAME_ANNOTATION: f"{client}-client-tls"})
    clock = Clock()
    rec = reconciler(kubeapi, clock)
    first = rec.run_pass()
    [said] = [r for r in first.clients_refused if f"{client}-client-tls" in r]
    assert f"Deployment/{client}" in said
    assert f"Deployment/{server}" in said
    assert not first.converged  # a refusal is not converged: `reconcile --once` exits 1 and says why
    for _ in range(3):
        clock.advance(timedelta(minutes=1))
        kubeapi.reset_log()
        again = rec.run_pass()
        assert [r for r in kubeapi.log if r.verb in WRITES] == [], "rewritten at a later pass"
        assert again.clients_refused == first.clients_refused
    clash = certificate(kubeapi, "shop", f"{client}-client-tls")
    usages = clash.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages  # the serving certificate of `server`, kept
    names = clash.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{server}.shop.svc" in names.get_values_for_type(x509.DNSName)
    events = [e for e in kubeapi.objects("events") if e["reason"] == "ClientCertificateRefused"]
    assert [e["involvedObject"]["name"] for e in events] == [client]
    assert kubeapi.get("secrets", f"{client}-tls", "shop")["data"]["tls.crt"]  # its serving one is issued
