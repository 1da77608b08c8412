"""The PKCS#12 truststore a workload may ask for (tls-injector.io/truststore: pkcs12): binaryData of its
namespace's trust-bundle ConfigMap, the same CAs as the PEM bundle through a rotation, written only when
they change, gone when nobody asks."""

from __future__ import annotations

import base64
from datetime import timedelta

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, deployment, namespace, reconciler
from tests.reconcile.test_rotation import ca_states, force_replace
from tls_injector.pki import bundle_certificates, fingerprint, truststore_fingerprints

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


def _client_truststore(emu: Emulator, ns: str) -> frozenset[str]:
    bundle = emu.get("configmaps", "tls-injector-trust-bundle", ns) or {}
    stored = (bundle.get("binaryData") or {}).get("client-truststore.p12")
    return truststore_fingerprints(base64.b64decode(stored)) if stored else frozenset()


def _client_pem_bundle(emu: Emulator, ns: str) -> set[str]:
    bundle = emu.get("configmaps", "tls-injector-trust-bundle", ns) or {}
    return {fingerprint(c) for c in bundle_certificates(bundle.get("data") or {}, prefix="client-ca")}


def test_the_client_cas_get_a_truststore_of_their_own_beside_it_and_follow_the_client_ca_rotation(
        kubeapi: Emulator) -> None:
    """A JVM server verifying client certificates reads client-truststore.p12: the client CAs only (the
    serving CAs must not vouch for callers), the same as client-ca-bundle.crt at every pass."""
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "jvm")
    namespace(kubeapi, "go")
    deployment(kubeapi, "billing", "jvm", annotations=ASK)
    deployment(kubeapi, "api", "go")
    clock = Clock()
    assert reconciler(kubeapi, clock).run_pass().converged
    assert _client_truststore(kubeapi, "jvm") == frozenset()  # nobody asks for a client certificate yet
    deployment(kubeapi, "caller", "go", annotations={"tls-injector.io/client-certificate": "true"})
    assert reconciler(kubeapi, clock).run_pass().converged
    client_cas = _client_pem_bundle(kubeapi, "jvm")
    assert _client_truststore(kubeapi, "jvm") == client_cas != frozenset()
    assert not client_cas & _truststore(kubeapi, "jvm"), "two stores, two CA sets"
    assert _client_truststore(kubeapi, "go") == frozenset()  # nobody there asked for a truststore
    clock.advance(timedelta(minutes=1))
    assert reconciler(kubeapi, clock).run_pass().write_count == 0
    ca = kubeapi.get("secrets", "tls-injector-client-ca", OWN_NS) or {}
    ca["metadata"]["annotations"] = {"tls-injector.io/force-replace": "1"}
    kubeapi.store.update(kubeapi.resource("secrets"), OWN_NS, "tls-injector-client-ca", ca)
    sizes = set()
    for _ in range(20):
        clock.advance(timedelta(minutes=6))
        report = reconciler(kubeapi, clock).run_pass()
        assert report.converged, report
        assert _client_truststore(kubeapi, "jvm") == _client_pem_bundle(kubeapi, "jvm")
        sizes.add(len(_client_truststore(kubeapi, "jvm")))
        if report.write_count == 0 and not client_cas & _client_pem_bundle(kubeapi, "jvm"):
            break
    else:
        raise AssertionError("the client CA rotation did not finish")
    assert sizes == {1, 2}, "old and new client CA trusted together during the rotation"
