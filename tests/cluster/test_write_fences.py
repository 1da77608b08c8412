"""Every write our accounts hold, tried out of bounds on the real kube-apiserver with each account's own
token: the reconciler's, the bootstrap Job's and a member's hub account (the base, certs-bootstrap and the
member component applied, as docs/install.md and docs/multicluster.md say). For each write verb on each
resource the account holds (tests/shipping/test_write_fences.py enumerates them), its forbidden variants:
another name, another type, another namespace, another field, a verb or group it was not given. Each is
refused with 403, by the policy named (or by RBAC where it never granted it; an answer to a pod certificate
request for another signer by the apiserver's own `sign` check, a 422 with a Forbidden cause); and a
legitimate write of each
account (a dry run) passes, so the refusals are not those of a token that works for nothing.

Its own control plane: the variants are sent for real (no dry run), so a fence that failed would leave
its trace here, not in the session's cluster.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.cluster.controlplane import ControlPlane
from tests.cluster.controlplane import api_client as cluster_client
from tests.cluster.install import NS, Installation, wait_until
from tests.cluster.test_mission import make_namespace
from tests.cluster.tokens import Answer, Token, stored
from tests.shipping.support import render_with_components
from tls_injector.pki import make_ca

TENANT = "team-a"
OURS = {"app.kubernetes.io/managed-by": "tls-injector"}
RECONCILER, BOOTSTRAP, HUB = "tls-injector-reconciler", "tls-injector-bootstrap", "tls-injector-hub"
REACH, RESERVED, HUB_REACH = "tls-injector.reconciler-reach", "tls-injector.reserved-objects", "tls-injector.hub-reach"
CONFIGS = "tls-injector.webhook-configurations"
BUNDLES = "tls-injector.trust-bundle-reach"
RBAC = None
SIGNER = "signer"  # the apiserver's own check of `sign` on a request's signer
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
# A trust anchor an attacker would plant (the apiserver refuses a bundle without one before any policy).
ANCHOR = make_ca(common_name="corp roots", now=datetime.now(UTC)).cert_pem.decode()


def secrets(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/secrets" + (f"/{name}" if name else "")


def configmaps(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps" + (f"/{name}" if name else "")


def leases(namespace: str, name: str = "") -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases" + (f"/{name}" if name else "")


def secret(name: str, *, labels: dict[str, str] | None = None, kind: str = "Opaque",
           annotations: dict[str, str] | None = None) -> dict[str, Any]:
    data = {"tls.crt": "", "tls.key": ""} if kind == "kubernetes.io/tls" else {}
    return {"apiVersion": "v1", "kind": "Secret", "type": kind, "data": data,
            "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}}}


def configmap(name: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels or {}}}


def lease(name: str) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}}


@dataclass(frozen=True)
class Variant:
    account: str
    what: str
    method: str
    path: str
    body: Any  # a dict, or a callable of the stored object for an update
    fence: str | None  # the policy that must refuse it; None: RBAC


class Cluster:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.tokens = {name: Token(plane, NS, name) for name in (RECONCILER, BOOTSTRAP, HUB)}
        self.bundles = self._trust_bundle_path()
        self.foreign_request = ""  # the status path of a PodCertificateRequest addressed to another signer

    def _trust_bundle_path(self) -> str | None:
        """Where this apiserver serves ClusterTrustBundles (v1 or v1beta1), if it does."""
        group = json.loads(self.plane.kubectl("get", "--raw", "/apis/certificates.k8s.io").stdout)
        for version in (v["version"] for v in group["versions"]):
            resources = json.loads(self.plane.kubectl("get", "--raw", f"/apis/certificates.k8s.io/{version}").stdout)
            if any(r["name"] == "clustertrustbundles" for r in resources["resources"]):
                return f"/apis/certificates.k8s.io/{version}/clustertrustbundles"
        return None

    def send(self, variant: Variant, *, dry_run: bool = False) -> Answer:
        body = variant.body
        if callable(body):
            body = body(stored(self.plane, variant.path))
        return self.tokens[variant.account].call(variant.method, variant.path, body, dry_run=dry_run)


def admin_apply(plane: ControlPlane, *objects: dict[str, Any]) -> None:
    plane.kubectl("apply", "--server-side", "--field-manager=test", "-f", "-", stdin=yaml.safe_dump_all(objects))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    plane = ControlPlane(tmp_path_factory.mktemp("fences-plane")).start()
    try:
        install = Installation(plane, cluster_client(plane.admin_kubeconfig),
                               Path(tmp_path_factory.mktemp("fences-install")))
        install.apply_manifests()
        member = render_with_components("manifests/base", "manifests/components/member")
        plane.kubectl("apply", "--server-side", "--field-manager=tls-injector-install", "-f", "-",
                      stdin=yaml.safe_dump_all(member))
        make_namespace(plane, install.core, TENANT)
        # What the variants aim at, made by the admin: objects that are not ours, in and out of tls-injector.
        for namespace, obj in ((TENANT, secret("db-password")), (TENANT, configmap("app-config")),
                               (NS, secret("someone-elses")), (NS, secret("tls-injector-intermediate-ca")),
                               (NS, lease("other-lease")), (TENANT, lease("their-lease"))):
            obj["metadata"]["namespace"] = namespace
            admin_apply(plane, obj)
        admin_apply(plane, {"apiVersion": "admissionregistration.k8s.io/v1",
                            "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "someone-else"}})
        found = Cluster(plane)
        found.foreign_request = foreign_pod_certificate_request(plane, install)
        yield found
    finally:
        plane.stop()


def foreign_pod_certificate_request(plane: ControlPlane, install: Installation) -> str:
    """A PodCertificateRequest for another signer, made by a node for a pod on it as its kubelet would: the
    reconciler's ClusterRole lets it update any request's status, and the apiserver's own `sign` check
    on the request's signer is what narrows it."""
    node = install.core.create_node({"metadata": {"name": "node-1"}})
    pod = install.core.create_namespaced_pod(TENANT, {"metadata": {"name": "db-0"}, "spec": {
        "nodeName": "node-1", "containers": [{"name": "db", "image": "registry.invalid/db:1"}],
        "volumes": [{"name": "cert", "projected": {"sources": [{"podCertificate": {
            "signerName": "example.com/other", "keyType": "ECDSAP256", "credentialBundlePath": "bundle.pem"}}]}}]}})
    account = install.core.read_namespaced_service_account("default", TENANT)
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, hashes.SHA256())
    kubelet = kubernetes.client.CertificatesV1Api(cluster_client(plane.node_kubeconfig("node-1")))
    created = kubelet.create_namespaced_pod_certificate_request(TENANT, {
        "apiVersion": "certificates.k8s.io/v1", "kind": "PodCertificateRequest",
        "metadata": {"generateName": "db-0-", "namespace": TENANT},
        "spec": {"signerName": "example.com/other", "podName": "db-0", "podUID": pod.metadata.uid,
                 "serviceAccountName": "default", "serviceAccountUID": account.metadata.uid,
                 "nodeName": "node-1", "nodeUID": node.metadata.uid,
                 "stubPKCS10Request": base64.b64encode(csr.public_bytes(serialization.Encoding.DER)).decode()}})
    return f"/apis/certificates.k8s.io/v1/namespaces/{TENANT}/podcertificaterequests/{created.metadata.name}/status"


def denied(obj: dict[str, Any]) -> dict[str, Any]:
    obj["status"] = {"conditions": [{"type": "Denied", "status": "True", "reason": "Planted", "message": "x",
                                     "lastTransitionTime": "2026-12-06T00:00:00Z"}]}
    return obj


def with_field(field: str, value: Any) -> Any:
    def change(obj: dict[str, Any]) -> dict[str, Any]:
        obj[field] = value
        return obj
    return change


def relabelled(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["labels"] = OURS
    return obj


def first_entry_flipped(obj: dict[str, Any]) -> dict[str, Any]:
    entry = obj["webhooks"][0]
    entry["failurePolicy"] = "Ignore" if entry.get("failurePolicy") == "Fail" else "Fail"
    return obj


def variants(bundles: str | None, foreign_request: str) -> list[Variant]:
    token_secret = secret("minted", labels=OURS, kind="kubernetes.io/service-account-token",
                          annotations={"kubernetes.io/service-account.name": RECONCILER})
    found = [
        # The reconciler: Secrets and ConfigMaps cluster-wide, only labelled ours, only two Secret types.
        Variant(RECONCILER, "create an unlabelled Secret", "POST", secrets(TENANT), secret("mine"), REACH),
        Variant(RECONCILER, "create a token Secret labelled ours", "POST", secrets(NS), token_secret, REACH),
        Variant(RECONCILER, "overwrite a Secret not ours", "PUT", secrets(TENANT, "db-password"),
                with_field("data", {"password": "b3ducWQ="}), REACH),
        Variant(RECONCILER, "label a Secret not ours to take it", "PUT", secrets(TENANT, "db-password"), relabelled,
                REACH),
        Variant(RECONCILER, "delete a Secret not ours", "DELETE", secrets(TENANT, "db-password"), None, REACH),
        Variant(RECONCILER, "patch a Secret (a verb not given)", "PATCH", secrets(TENANT, "db-password"),
                {"data": {"password": "eA=="}}, RBAC),
        Variant(RECONCILER, "delete every Secret of a namespace (deletecollection)", "DELETE", secrets(TENANT), None,
                RBAC),
        Variant(RECONCILER, "create an unlabelled ConfigMap", "POST", configmaps(TENANT), configmap("mine"), REACH),
        Variant(RECONCILER, "overwrite a ConfigMap not ours", "PUT", configmaps(TENANT, "app-config"),
                with_field("data", {"k": "v"}), REACH),
        Variant(RECONCILER, "delete a ConfigMap not ours", "DELETE", configmaps(TENANT, "app-config"), None, REACH),
        Variant(RECONCILER, "create a Lease in another namespace", "POST", leases(TENANT), lease("leader"), RBAC),
        Variant(RECONCILER, "update another Lease of tls-injector", "PUT", leases(NS, "other-lease"),
                with_field("spec", {"holderIdentity": "me"}), RBAC),
        Variant(RECONCILER, "delete a Lease", "DELETE", leases(NS, "other-lease"), None, RBAC),
        Variant(RECONCILER, "create an events.k8s.io Event (another group)", "POST",
                f"/apis/events.k8s.io/v1/namespaces/{TENANT}/events",
                {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
                 "eventTime": "2026-12-06T00:00:00.000000Z", "reportingController": "x",
                 "reportingInstance": "x", "action": "x", "reason": "x", "type": "Normal",
                 "regarding": {"kind": "Pod", "name": "p", "namespace": TENANT}}, RBAC),
        Variant(RECONCILER, "change a field of its webhook configuration", "PUT",
                f"{ADMISSION}/validatingwebhookconfigurations/tls-injector", first_entry_flipped, CONFIGS),
        Variant(RECONCILER, "update another webhook configuration", "PUT",
                f"{ADMISSION}/validatingwebhookconfigurations/someone-else", with_field("webhooks", []), RBAC),
        Variant(RECONCILER, "create a webhook configuration", "POST", f"{ADMISSION}/mutatingwebhookconfigurations",
                {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                 "metadata": {"name": "planted"}}, RBAC),
        Variant(RECONCILER, "delete its webhook configuration", "DELETE",
                f"{ADMISSION}/mutatingwebhookconfigurations/tls-injector", None, RBAC),
        Variant(RECONCILER, "create a Pod (a resource not given)", "POST", f"/api/v1/namespaces/{TENANT}/pods",
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                 "spec": {"containers": [{"name": "c", "image": "x"}]}}, RBAC),
        # The bootstrap Job: two Secrets of tls-injector and caBundle, nothing else.
        Variant(BOOTSTRAP, "create a Secret of another name", "POST", secrets(NS), secret("planted"), RESERVED),
        Variant(BOOTSTRAP, "create its serving Secret as a token Secret", "POST", secrets(NS),
                secret("tls-injector-webhook-tls", kind="kubernetes.io/service-account-token",
                       annotations={"kubernetes.io/service-account.name": RECONCILER}), RESERVED),
        Variant(BOOTSTRAP, "create a Secret in another namespace", "POST", secrets(TENANT), secret("x"), RBAC),
        Variant(BOOTSTRAP, "update a Secret of another name", "PUT", secrets(NS, "someone-elses"),
                with_field("data", {"k": "dg=="}), RBAC),
        Variant(BOOTSTRAP, "delete a Secret", "DELETE", secrets(NS, "someone-elses"), None, RBAC),
        Variant(BOOTSTRAP, "create a ConfigMap", "POST", configmaps(NS), configmap("x"), RBAC),
        Variant(BOOTSTRAP, "change a field of its webhook configuration", "PUT",
                f"{ADMISSION}/validatingwebhookconfigurations/tls-injector", first_entry_flipped, CONFIGS),
        Variant(BOOTSTRAP, "update another webhook configuration", "PUT",
                f"{ADMISSION}/validatingwebhookconfigurations/someone-else", with_field("webhooks", []), RBAC),
        # The hub, in a member: its two intermediates (and their key-less records), labelled, kubernetes.io/tls.
        Variant(HUB, "create a Secret of another name", "POST", secrets(NS),
                secret("planted", labels=OURS, kind="kubernetes.io/tls"), HUB_REACH),
        Variant(HUB, "create an intermediate as Opaque", "POST", secrets(NS),
                secret("tls-injector-client-intermediate-ca", labels=OURS), HUB_REACH),
        Variant(HUB, "create an intermediate unlabelled", "POST", secrets(NS),
                secret("tls-injector-client-intermediate-ca", kind="kubernetes.io/tls"), HUB_REACH),
        Variant(HUB, "create a Secret in another namespace", "POST", secrets(TENANT), secret("x"), RBAC),
        Variant(HUB, "update a Secret of another name", "PUT", secrets(NS, "someone-elses"),
                with_field("data", {"k": "dg=="}), RBAC),
        Variant(HUB, "delete an intermediate nobody asked to replace", "DELETE",
                secrets(NS, "tls-injector-intermediate-ca"), None, HUB_REACH),
        Variant(HUB, "create a ConfigMap of another name", "POST", configmaps(NS), configmap("planted", labels=OURS),
                HUB_REACH),
        Variant(HUB, "update the trust bundle", "PUT", configmaps(NS, "tls-injector-trust-bundle"),
                configmap("tls-injector-trust-bundle"), RBAC),
        Variant(HUB, "update a webhook configuration", "PUT",
                f"{ADMISSION}/validatingwebhookconfigurations/tls-injector", first_entry_flipped, RBAC),
    ]
    found.append(Variant(RECONCILER, "answer a pod certificate request addressed to another signer", "PUT",
                         foreign_request, denied, SIGNER))
    if bundles:
        unsigned = {"apiVersion": "certificates.k8s.io/" + bundles.split("/")[3], "kind": "ClusterTrustBundle",
                    "metadata": {"name": "corp-roots"}, "spec": {"trustBundle": ANCHOR}}
        found += [
            Variant(RECONCILER, "create an unsigned ClusterTrustBundle of another name", "POST", bundles, unsigned,
                    BUNDLES),
            Variant(RECONCILER, "update another ClusterTrustBundle", "PUT", f"{bundles}/corp-roots", unsigned, RBAC),
            Variant(RECONCILER, "delete a ClusterTrustBundle", "DELETE", f"{bundles}/tls-injector.io:serving:cas",
                    None, RBAC),
        ]
    return found


def test_each_token_is_refused_every_forbidden_variant_of_every_write_it_holds(cluster: Cluster) -> None:
    found = variants(cluster.bundles, cluster.foreign_request)
    # A new policy binding is enforced a moment after it is created: wait for the first of each.
    for fence in (REACH, RESERVED, HUB_REACH, CONFIGS):
        probe = next(v for v in found if v.fence == fence)
        wait_until(f"{fence} in force", lambda p=probe: cluster.send(p, dry_run=True).status == 403, timeout=60)
    wrong = {}
    for variant in found:
        answer = cluster.send(variant)
        if not answer.refused_by(variant.fence):
            wrong[f"{variant.account}: {variant.what}"] = f"{answer.status} {answer.text[:300]}"
    assert wrong == {}, json.dumps(wrong, indent=1)
    held = {(v.account, v.method) for v in found}
    assert {(a, m) for a in (RECONCILER, BOOTSTRAP, HUB) for m in ("POST", "PUT", "DELETE")} <= held
    print(f"{len(found)} forbidden variants refused; ClusterTrustBundles served at {cluster.bundles}")


def test_the_ordinary_write_of_each_token_passes(cluster: Cluster) -> None:
    """A dry run of each account's legitimate write: the refusals above are the fences', not a dead token's."""
    ordinary = {
        RECONCILER: (secrets(TENANT), secret("web-tls", labels=OURS, kind="kubernetes.io/tls")),
        BOOTSTRAP: (secrets(NS), secret("tls-injector-webhook-tls", kind="kubernetes.io/tls")),
        HUB: (secrets(NS), secret("tls-injector-client-intermediate-ca", labels=OURS, kind="kubernetes.io/tls")),
    }
    for account, (path, body) in ordinary.items():
        answer = cluster.tokens[account].call("POST", path, body, dry_run=True)
        assert answer.status == 201, (account, answer)
