"""Issue 39, point 5: trust that keeps the internet working. A Namespace labelled, or a workload annotated,
tls-injector.io/public-roots: "true" gets `ca-bundle-with-public-roots.pem` in its trust-bundle ConfigMap:
our CAs followed by every root of the pinned certifi, the annotation naming the release; a pod asking has
SSL_CERT_FILE (and the others) pointed at it by /mutate. One file then verifies a workload signed by our
CA and a server whose chain ends in a public root. With no internet here, the "public" root is a test
root put into certifi's list itself, so it reaches the file through the very code path certifi's roots
take; and every real certifi root is checked to be in the file, byte for byte, and loaded by OpenSSL."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import certifi
import jsonpatch
import pytest

from tests.kubeapi import Emulator
from tests.pki.tls import Party, handshake
from tests.reconcile.cluster import OWN_NS, Clock, data, deployment, namespace, reconciler
from tests.support.reviews import answer, review
from tls_injector.injection import InjectionOptions, make_mutate_handler
from tls_injector.kube import KubeApi
from tls_injector.pki import CertKey, issue_leaf, make_ca, public_roots
from tls_injector.reconcile.core.read import read_cluster

NS = "team-a"
PUBLIC, KEY = "tls-injector.io/public-roots", "ca-bundle-with-public-roots.pem"
SOURCE = "tls-injector.io/public-roots-source"
NOW = datetime.now(UTC)  # real TLS clients check the time
PUBLIC_HOST = "api.example.com"


def _bundle(emu: Emulator, ns: str = NS) -> dict[str, object]:
    return emu.get("configmaps", "tls-injector-trust-bundle", ns) or {}


def _label(emu: Emulator, ns: str, value: str | None) -> None:
    stored = emu.get("namespaces", ns)
    assert stored is not None
    labels = {k: v for k, v in (stored["metadata"].get("labels") or {}).items() if k != PUBLIC}
    stored["metadata"]["labels"] = labels | ({PUBLIC: value} if value is not None else {})
    emu.store.update(emu.resource("namespaces"), None, ns, stored)


@pytest.fixture
def test_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[CertKey]:
    """A root put at the end of certifi's own list (what `certifi.contents()` returns), the cache of the
    public roots emptied before and after: the bundle then carries it exactly as it carries Mozilla's."""
    root = make_ca(common_name="Example Public Root R1", now=NOW)
    real = certifi.contents()
    monkeypatch.setattr(certifi, "contents", lambda: real + "\n# Example Public Root R1\n" + root.cert_pem.decode())
    public_roots.cache_clear()
    yield root
    public_roots.cache_clear()


def test_a_labelled_namespace_gets_every_certifi_root_after_ours_and_the_release_named(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    for ns in (NS, "plain"):
        namespace(kubeapi, ns)
        deployment(kubeapi, "web", ns)
    _label(kubeapi, NS, "true")
    clock = Clock()
    assert reconciler(kubeapi, clock).run_pass().converged
    bundle = _bundle(kubeapi)
    stored = bundle["data"][KEY]  # type: ignore[index]
    ours = bundle["data"]["ca-bundle.crt"]  # type: ignore[index]
    assert stored.startswith(ours.rstrip("\n") + "\n")
    roots = [b + "-----END CERTIFICATE-----\n" for b in certifi.contents().split("-----END CERTIFICATE-----\n")
             if "-----BEGIN CERTIFICATE-----" in b]
    blocks = ["-----BEGIN CERTIFICATE-----" + r.split("-----BEGIN CERTIFICATE-----", 1)[1] for r in roots]
    assert len(blocks) > 100
    assert all(block in stored for block in blocks)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=stored)  # OpenSSL reads every block, ours and certifi's
    assert context.cert_store_stats()["x509_ca"] == len(set(blocks)) + ours.count("BEGIN CERTIFICATE")
    assert bundle["metadata"]["annotations"][SOURCE] == f"certifi {certifi.__version__}"  # type: ignore[index]
    assert KEY not in _bundle(kubeapi, "plain")["data"]  # type: ignore[operator]
    assert not any(k.endswith(".crt") and "BEGIN" in v and v.count("BEGIN") > 20  # no `*.crt` glob gets them
                   for k, v in bundle["data"].items())  # type: ignore[attr-defined]
    clock.advance(timedelta(minutes=1))
    assert reconciler(kubeapi, clock).run_pass().write_count == 0
    _label(kubeapi, NS, None)
    reconciler(kubeapi, clock).run_pass()
    assert KEY not in _bundle(kubeapi)["data"]  # type: ignore[operator]
    assert SOURCE not in (_bundle(kubeapi)["metadata"].get("annotations") or {})  # type: ignore[attr-defined]


def test_one_file_verifies_our_workload_and_a_server_chained_to_a_public_root(
        kubeapi: Emulator, test_root: CertKey) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    deployment(kubeapi, "web", NS)
    deployment(kubeapi, "caller", NS, annotations={PUBLIC: "true"})
    assert reconciler(kubeapi, Clock(NOW)).run_pass().converged
    bundle = _bundle(kubeapi)["data"]
    one_file = bundle[KEY].encode()  # type: ignore[index]
    web = data(kubeapi.get("secrets", "web-tls", NS))
    ours = Party(web["tls.crt"], web["tls.key"])
    intermediate = make_ca(common_name="Example Issuing CA", now=NOW, issuer=test_root, path_length=0)
    public_leaf = issue_leaf(issuer=intermediate, dns_names=[PUBLIC_HOST], now=NOW)
    public = Party(public_leaf.chain_pem, public_leaf.key_pem)
    assert handshake(ours, bundle_pem=one_file, hostname=f"web.{NS}.svc.cluster.local")
    assert handshake(public, bundle_pem=one_file, hostname=PUBLIC_HOST)
    with pytest.raises(ssl.SSLCertVerificationError):  # our bundle alone: what SSL_CERT_FILE gave before
        handshake(public, bundle_pem=bundle["ca-bundle.crt"].encode(), hostname=PUBLIC_HOST)  # type: ignore[index]


def test_a_pod_asking_has_the_tls_variables_pointed_at_the_file_and_the_preview_says_so() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "caller", "namespace": NS, "labels": {"tls-injector.io/inject": "true"},
                        "annotations": {PUBLIC: "true"}},
           "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}}
    response = answer(make_mutate_handler(InjectionOptions()), review(obj=pod, namespace=NS))
    assert response["allowed"], response
    patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    env = {e["name"]: e["value"] for e in patched["spec"]["containers"][0]["env"]}
    assert env == {var: f"/etc/tls-injector/trust/{KEY}"
                   for var in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")}
    pod["metadata"]["annotations"] = {PUBLIC: "yes"}
    refused = answer(make_mutate_handler(InjectionOptions()), review(obj=pod, namespace=NS))
    assert not refused["allowed"]
    assert PUBLIC in refused["status"]["message"]


def test_the_worst_case_bundle_configmap_stays_under_the_apiservers_1_mib(kubeapi: Emulator) -> None:
    """docs/injection.md, "Public roots": measured on a real bundle with every optional key asked for."""
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    deployment(kubeapi, "web", NS, annotations={PUBLIC: "true", "tls-injector.io/truststore": "pkcs12",
                                               "tls-injector.io/client-certificate": "true"})
    assert reconciler(kubeapi, Clock()).run_pass().converged
    bundle = _bundle(kubeapi)
    size = sum(len(k) + len(v) for k, v in bundle["data"].items())  # type: ignore[attr-defined]
    size += sum(len(k) + len(base64.b64decode(v)) for k, v in (bundle.get("binaryData") or {}).items())  # type: ignore[attr-defined]
    assert public_roots().count == len(certifi.contents().split("BEGIN CERTIFICATE")) - 1
    assert size < 1024 * 1024 // 4, size


def test_a_pass_holds_the_public_bundle_as_its_digest_and_rewrites_it_when_edited(kubeapi: Emulator) -> None:
    """read.bundle_shape: ~180 KB per namespace would be held for the length of a pass; the digest is
    enough to decide, and a write sends the text whole."""
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, NS)
    deployment(kubeapi, "caller", NS, annotations={PUBLIC: "true"})
    clock = Clock()
    reconciler(kubeapi, clock).run_pass()
    observed = read_cluster(KubeApi(kubeapi.api_client()))
    held = observed.bundles[NS]["data"][KEY]
    assert held.startswith("sha256:")
    assert len(held) == 7 + 64
    stored = _bundle(kubeapi)
    whole = stored["data"][KEY]  # type: ignore[index]
    stored["data"][KEY] = whole.replace("MII", "MIJ", 1)  # type: ignore[index]
    kubeapi.store.update(kubeapi.resource("configmaps"), NS, "tls-injector-trust-bundle", stored)
    assert reconciler(kubeapi, clock).run_pass().write_count == 1
    assert _bundle(kubeapi)["data"][KEY] == whole  # type: ignore[index]
    assert reconciler(kubeapi, clock).run_pass().write_count == 0
