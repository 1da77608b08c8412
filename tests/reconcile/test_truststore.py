"""The PKCS#12 truststore a workload may ask for (tls-injector.io/truststore: pkcs12): binaryData of its
namespace's trust-bundle ConfigMap, the same CAs as the PEM bundle through a rotation, written only when
they change, gone when nobody asks."""

from __future__ import annotations

import base64
from datetime import timedelta

from app.pki import bundle_certificates, fingerprint, truststore_fingerprints
from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, deployment, namespace, reconciler
from tests.reconcile.test_rotation import ca_states, force_replace

ASK = {"tls-injector.io/truststore": "pkcs12"}


def _truststore(emu: Emulator, ns: str) -> frozenset[str]:
    bundle = emu.get("configmaps", "tls-injector-trust-bundle", ns) or {}
    stored = (bundle.get("binaryData") or {}).get("truststore.p12")
    return truststore_fingerprints(base64.b64decode(stored)) if stored else frozenset()


def _pem_bundle(emu: Emulator, ns: str) -> set[str]:
    bundle = emu.get("configmaps", "tls-injector-trust-bundle", ns) or {}
    return {fingerprint(c) for c in bundle_certificates(bundle.get("data") or {})}


def test_a_workload_asking_gets_the_truststore_beside_the_pem_bundle_and_only_its_namespace(
        kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    for ns in ("jvm", "go"):
        namespace(kubeapi, ns)
    deployment(kubeapi, "billing", "jvm", annotations=ASK)
    deployment(kubeapi, "api", "go")
    clock = Clock()
    assert reconciler(kubeapi, clock).run_pass().converged
    assert _truststore(kubeapi, "jvm") == _pem_bundle(kubeapi, "jvm") != frozenset()
    assert _truststore(kubeapi, "go") == frozenset()
    clock.advance(timedelta(minutes=1))
    assert reconciler(kubeapi, clock).run_pass().write_count == 0  # same CAs: the random-salted bytes are kept


def test_the_truststore_follows_the_ca_set_through_a_rotation_and_goes_when_nobody_asks(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "jvm")
    deployment(kubeapi, "billing", "jvm", annotations=ASK)
    clock = Clock()
    assert reconciler(kubeapi, clock).run_pass().converged
    (old,) = ca_states(kubeapi)
    force_replace(kubeapi)
    seen_both = False
    for _ in range(20):
        clock.advance(timedelta(minutes=6))
        report = reconciler(kubeapi, clock).run_pass()
        assert report.converged, report
        assert _truststore(kubeapi, "jvm") == _pem_bundle(kubeapi, "jvm")
        seen_both |= len(_truststore(kubeapi, "jvm")) == 2
        if old not in ca_states(kubeapi) and report.write_count == 0:
            break
    assert seen_both, "old and new CA must be trusted together during the rotation"
    assert len(_truststore(kubeapi, "jvm")) == 1
    deployment_obj = kubeapi.get("deployments", "billing", "jvm") or {}
    deployment_obj["spec"]["template"]["metadata"]["annotations"] = {}
    kubeapi.store.update(kubeapi.resource("deployments"), "jvm", "billing", deployment_obj)
    assert reconciler(kubeapi, clock).run_pass().converged
    assert "binaryData" not in (kubeapi.get("configmaps", "tls-injector-trust-bundle", "jvm") or {})
