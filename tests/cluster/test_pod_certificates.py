"""Pod certificates on the real apiserver (certificates.k8s.io/v1, GA in 1.37): the webhook gives a pod
that asks for one the projected `podCertificate` volume, a kubelet (a node's own credentials, judged by
the Node authorizer and NodeRestriction) asks for it as it would, our reconciler signs as
`tls-injector.io/serving` and the apiserver's own validation accepts the status; the certificate
chains to the ClusterTrustBundle the reconciler stored, which is what the pod's trust projection reads."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import kubernetes.client
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.cluster.controlplane import ControlPlane, api_client
from tests.cluster.install import Installation, wait_until
from tests.cluster.test_mission import make_namespace
from tls_injector.names import CLUSTER_TRUST_BUNDLE, MODE_ANNOTATION, MODE_POD_CERTIFICATE, SIGNER_NAME
from tls_injector.pki import load_certificates, verify_server

NODE = "node-1"
NS = "podcert"


def pod_certificate_volume(pod: Any) -> Any:
    for volume in pod.spec.volumes or []:
        for source in (volume.projected.sources if volume.projected else []):
            if source.pod_certificate is not None:
                return source.pod_certificate
    return None


def test_a_pod_certificate_is_asked_for_by_the_kubelet_signed_by_us_and_accepted_by_the_apiserver(
    cluster: ControlPlane, installed: Installation, admin: kubernetes.client.ApiClient
) -> None:
    core = installed.core
    node = core.create_node({"metadata": {"name": NODE}})
    make_namespace(cluster, core, NS)
    pod = core.create_namespaced_pod(NS, {
        "metadata": {"name": "db-0", "labels": {"tls-injector.io/inject": "true"},
                     "annotations": {MODE_ANNOTATION: MODE_POD_CERTIFICATE}},
        "spec": {"nodeName": NODE, "containers": [{"name": "db", "image": "registry.invalid/db:1"}]}})
    projection = pod_certificate_volume(pod)
    assert projection is not None, "the webhook gave the pod no podCertificate volume"
    assert projection.signer_name == SIGNER_NAME

    key = ec.generate_private_key(ec.SECP256R1())  # on the node; only the public half travels
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, hashes.SHA256())
    account = core.read_namespaced_service_account("default", NS)
    kubelet = kubernetes.client.CertificatesV1Api(api_client(cluster.node_kubeconfig(NODE)))
    created = kubelet.create_namespaced_pod_certificate_request(NS, {
        "apiVersion": "certificates.k8s.io/v1", "kind": "PodCertificateRequest",
        "metadata": {"generateName": "db-0-", "namespace": NS},
        "spec": {"signerName": SIGNER_NAME, "podName": "db-0", "podUID": pod.metadata.uid,
                 "serviceAccountName": "default", "serviceAccountUID": account.metadata.uid,
                 "nodeName": NODE, "nodeUID": node.metadata.uid,
                 "stubPKCS10Request": base64.b64encode(csr.public_bytes(serialization.Encoding.DER)).decode()}})

    def issued() -> Any:
        try:
            found = kubelet.read_namespaced_pod_certificate_request(created.metadata.name, NS)
        except kubernetes.client.exceptions.ForbiddenException as e:
            # The Node authorizer learns the request's edge to the node from its own informer, a moment
            # after the create: until then it answers "no relationship found" (seen on a busy machine).
            if "no relationship found" in str(e.body):
                return None
            raise
        return found if found.status and found.status.certificate_chain else None

    signed = wait_until("the signed PodCertificateRequest", issued, timeout=60)
    chain = load_certificates(signed.status.certificate_chain.encode())
    assert chain[0].public_key().public_numbers() == key.public_key().public_numbers()  # type: ignore[union-attr]
    (condition,) = [c for c in signed.status.conditions if c.type == "Issued"]
    assert condition.status == "True"

    bundle = kubernetes.client.CertificatesV1Api(admin).read_cluster_trust_bundle(CLUSTER_TRUST_BUNDLE)
    assert bundle.spec.signer_name == SIGNER_NAME
    anchors = load_certificates(bundle.spec.trust_bundle.encode())
    names = chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    verify_server(chain[0], chain[1:], trusted=anchors, dns_name=names[0], now=datetime.now(UTC))


def test_a_kubelet_cannot_ask_for_a_pod_on_another_node(
    cluster: ControlPlane, installed: Installation
) -> None:
    """NodeRestriction, the real one: the request's node must be the requester and the pod's."""
    core = installed.core
    other = core.create_node({"metadata": {"name": "node-2"}})
    pod = core.read_namespaced_pod("db-0", NS)
    account = core.read_namespaced_service_account("default", NS)
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, hashes.SHA256())
    intruder = kubernetes.client.CertificatesV1Api(api_client(cluster.node_kubeconfig("node-2")))
    with pytest.raises(kubernetes.client.ApiException) as refused:
        intruder.create_namespaced_pod_certificate_request(NS, {
            "apiVersion": "certificates.k8s.io/v1", "kind": "PodCertificateRequest",
            "metadata": {"generateName": "db-0-", "namespace": NS},
            "spec": {"signerName": SIGNER_NAME, "podName": "db-0", "podUID": pod.metadata.uid,
                     "serviceAccountName": "default", "serviceAccountUID": account.metadata.uid,
                     "nodeName": "node-2", "nodeUID": other.metadata.uid,
                     "stubPKCS10Request": base64.b64encode(csr.public_bytes(serialization.Encoding.DER)).decode()}})
    assert refused.value.status == 403, refused.value.body
