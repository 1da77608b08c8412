"""Issue 24, finding 3: a CA planted in a tenant's namespace is never trusted by anyone else.

Before: with no CA set stored (a fresh install, or the CA Secret deleted), the reconciler adopted any CA
found in a bundle in use that a leaf in use chained to; a tenant can create both, with our labels. The
real reconciler against the API emulator; trust checked by a real TLS client holding team-b's bundle.
"""

from __future__ import annotations

import base64
import ssl
from datetime import UTC, datetime

import pytest

from tests.kubeapi import Emulator
from tests.pki.tls import Party, handshake
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace, reconciler
from tls_injector.kube import CONFIG_MAPS, SECRETS, KubeApi
from tls_injector.pki import CertKey, bundle_certificates, fingerprint, issue_leaf, load_certificates, make_ca

LABELS = {"app.kubernetes.io/managed-by": "tls-injector"}


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _plant(emu: Emulator, evil: CertKey, now: datetime, *, replace: bool = False) -> CertKey:
    """What a tenant can create in its own namespace: a leaf Secret and a bundle, labelled as ours."""
    leaf = issue_leaf(issuer=evil, dns_names=["web.team-a.svc", "api.team-b.svc"], now=now)
    if replace:
        api = KubeApi(emu.api_client())
        api.delete(SECRETS, "web-tls", namespace="team-a")
        api.delete(CONFIG_MAPS, "tls-injector-trust-bundle", namespace="team-a")
    emu.add({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
             "metadata": {"name": "web-tls", "namespace": "team-a",
                          "labels": {**LABELS, "tls-injector.io/role": "leaf"}},
             "data": {"tls.crt": _b64(leaf.cert_pem), "tls.key": _b64(leaf.key_pem), "ca.crt": _b64(evil.cert_pem)}})
    emu.add({"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "tls-injector-trust-bundle", "namespace": "team-a",
                          "labels": {**LABELS, "tls-injector.io/role": "bundle"}},
             "data": {"ca-bundle.crt": evil.cert_pem.decode()}})
    return leaf


def _cluster(emu: Emulator) -> None:
    namespace(emu, OWN_NS)
    namespace(emu, "team-a")
    namespace(emu, "team-b")
    deployment(emu, "web", "team-a")
    deployment(emu, "api", "team-b")


def _trusted_anywhere(emu: Emulator, ca: CertKey) -> list[str]:
    return [cm["metadata"]["namespace"] for cm in emu.objects("configmaps")
            if cm["metadata"]["name"] == "tls-injector-trust-bundle"
            and fingerprint(ca.cert) in {fingerprint(c) for c in bundle_certificates(cm.get("data") or {})}]


def test_a_planted_ca_is_not_adopted_on_a_fresh_install(kubeapi: Emulator) -> None:
    _cluster(kubeapi)
    clock = Clock(datetime.now(UTC))
    evil = make_ca(common_name="tls-injector CA", now=clock.now)
    planted = _plant(kubeapi, evil, clock.now)
    assert reconciler(kubeapi, clock).run_pass().converged

    assert _trusted_anywhere(kubeapi, evil) == []
    stored = data(kubeapi.get("secrets", "tls-injector-ca", OWN_NS))
    assert not any(k.startswith(fingerprint(evil.cert)) for k in stored)
    # A team-b client holding its bundle rejects the planted leaf for the name it was planted for...
    bundle = kubeapi.get("configmaps", "tls-injector-trust-bundle", "team-b")["data"]["ca-bundle.crt"].encode()
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(Party(planted.cert_pem, planted.key_pem), bundle_pem=bundle, hostname="api.team-b.svc")
    # ...and team-a's Secret was re-issued by the real CA (it carried our labels, so it was ours to fix).
    leaf = data(kubeapi.get("secrets", "web-tls", "team-a"))
    assert evil.cert.fingerprint != load_certificates(leaf["tls.crt"])[0].fingerprint
    assert fingerprint(evil.cert) not in {fingerprint(c) for c in load_certificates(leaf["ca.crt"])}
    assert handshake(Party(leaf["tls.crt"], leaf["tls.key"]), bundle_pem=bundle, hostname="web.team-a.svc")


def test_after_the_ca_secret_is_deleted_a_planted_ca_is_not_adopted_and_every_leaf_moves_to_the_new_ca(
        kubeapi: Emulator) -> None:
    _cluster(kubeapi)
    clock = Clock(datetime.now(UTC))
    assert reconciler(kubeapi, clock).run_pass().converged
    KubeApi(kubeapi.api_client()).delete(SECRETS, "tls-injector-ca", namespace=OWN_NS)
    evil = make_ca(common_name="tls-injector CA", now=clock.now)
    _plant(kubeapi, evil, clock.now, replace=True)  # written over ours, as a tenant may
    assert reconciler(kubeapi, clock).run_pass().converged
    assert _trusted_anywhere(kubeapi, evil) == []
    # One CA left, and every leaf verifies against every bundle.
    bundles = {cm["metadata"]["namespace"]: cm["data"]["ca-bundle.crt"].encode()
               for cm in kubeapi.objects("configmaps") if cm["metadata"]["name"] == "tls-injector-trust-bundle"}
    for ns, name in (("team-a", "web"), ("team-b", "api")):
        leaf = data(kubeapi.get("secrets", f"{name}-tls", ns))
        for bundle in bundles.values():
            assert handshake(Party(leaf["tls.crt"], leaf["tls.key"]), bundle_pem=bundle, hostname=f"{name}.{ns}.svc")
