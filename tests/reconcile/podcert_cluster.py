"""A kubelet's side of pod certificates, for tests: pods, and PodCertificateRequests made the way it makes them.

The key is generated here (as on the node) and only its public half travels, in a stub PKCS#10 request
(v1) or as a PKIX key (v1beta1's deprecated field); requests are created through the official client.
"""

from __future__ import annotations

import base64
import itertools
from dataclasses import dataclass
from typing import Any

import kubernetes.client as k8s
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from tests.kubeapi import Emulator
from tests.support.kubelet import identity_uids, pkix_spec
from tls_injector.kube import KubeApi, pod_certificate_requests
from tls_injector.names import MODE_ANNOTATION, MODE_POD_CERTIFICATE, SIGNER_NAME
from tls_injector.pki import load_certificates
from tls_injector.reconcile.native.podcerts import TRUST_BUNDLE_NAME

NODE = "node-1"
_names = itertools.count()
Key = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey


@dataclass(frozen=True)
class Request:
    name: str
    namespace: str
    key: Key


def pod(emu: Emulator, workload: str, ns: str, *, opted_in: bool = True, annotations: dict[str, str] | None = None,
        native: bool = True) -> dict[str, Any]:
    """A running pod of Deployment `workload` (through its ReplicaSet), as the controllers would create it."""
    suffix = f"{next(_names):05d}"
    notes = {**({MODE_ANNOTATION: MODE_POD_CERTIFICATE} if native else {}), **(annotations or {})}
    labels = {"app": workload, "pod-template-hash": "5d4f9", **({"tls-injector.io/inject": "true"} if opted_in else {})}
    return emu.add({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{workload}-5d4f9-{suffix}", "namespace": ns, "labels": labels, "annotations": notes,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{workload}-5d4f9",
                                          "uid": "rs-uid", "controller": True}]},
        "spec": {"nodeName": NODE, "serviceAccountName": "default",
                 "containers": [{"name": "app", "image": "example/app:1"}]},
    })


def make_key(key_type: str) -> Key:
    if key_type == "ED25519":
        return ed25519.Ed25519PrivateKey.generate()
    if key_type.startswith("RSA"):
        return rsa.generate_private_key(public_exponent=65537, key_size=int(key_type[3:]))
    curve = {"ECDSAP256": ec.SECP256R1(), "ECDSAP384": ec.SECP384R1(), "ECDSAP521": ec.SECP521R1()}[key_type]
    return ec.generate_private_key(curve)


def request(emu: Emulator, pod_obj: dict[str, Any], *, key_type: str = "ECDSAP256", version: str = "v1",
            signer: str = SIGNER_NAME, user_annotations: dict[str, str] | None = None, pkix: bool = False,
            uid: str | None = None, max_expiration_seconds: int | None = None,
            node_uid: str | None = None, account_uid: str | None = None) -> Request:
    """Create the PodCertificateRequest the kubelet would for this pod's `podCertificate` volume: the node
    and service-account UIDs are those of the Node and ServiceAccount (created if missing), unless given."""
    key = make_key(key_type)
    meta = pod_obj["metadata"]
    spec: dict[str, Any] = {
        "signerName": signer, "podName": meta["name"], "podUID": uid or meta["uid"],
        "serviceAccountName": "default", "nodeName": NODE,
        **identity_uids(emu, NODE, meta["namespace"], "default"),
        **({"nodeUID": node_uid} if node_uid is not None else {}),
        **({"serviceAccountUID": account_uid} if account_uid is not None else {}),
        **({"unverifiedUserAnnotations": user_annotations} if user_annotations else {}),
        **({"maxExpirationSeconds": max_expiration_seconds} if max_expiration_seconds else {}),
    }
    if pkix:
        spec.update(pkix_spec(key, str(spec["podUID"])))
    else:
        digest = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
        csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, digest)
        spec["stubPKCS10Request"] = base64.b64encode(csr.public_bytes(serialization.Encoding.DER)).decode()
    body = {"apiVersion": f"certificates.k8s.io/{version}", "kind": "PodCertificateRequest",
            "metadata": {"generateName": f"{meta['name']}-", "namespace": meta["namespace"]}, "spec": spec}
    if version == "v1":  # the official client's typed call, as a v1 kubelet's request looks
        api = k8s.CertificatesV1Api(emu.api_client())
        created = api.create_namespaced_pod_certificate_request(meta["namespace"], body)  # type: ignore[arg-type]
        assert created.metadata is not None
        assert created.metadata.name
        return Request(created.metadata.name, meta["namespace"], key)
    # The client's v1beta1 model is 1.37's, which requires stubPKCS10Request; a 1.35 kubelet sends
    # pkixPublicKey and proofOfPossession instead, so that request goes as plain JSON.
    raw = KubeApi(emu.api_client()).create(pod_certificate_requests(version), body, namespace=meta["namespace"])
    return Request(raw["metadata"]["name"], meta["namespace"], key)


def status(emu: Emulator, req: Request) -> dict[str, Any]:
    found = emu.get("podcertificaterequests.certificates.k8s.io", req.name, req.namespace)
    assert found is not None
    result: dict[str, Any] = found.get("status") or {}
    return result


def condition(emu: Emulator, req: Request) -> dict[str, Any]:
    (only,) = status(emu, req).get("conditions") or [{}]
    result: dict[str, Any] = only
    return result


def bundle_anchors(emu: Emulator) -> list[x509.Certificate]:
    """What a pod's `clusterTrustBundle` projection (signerName selector) would hold right now."""
    bundles = [b for b in emu.objects("clustertrustbundles.certificates.k8s.io")
               if (b.get("spec") or {}).get("signerName") == SIGNER_NAME]
    assert [b["metadata"]["name"] for b in bundles] == [TRUST_BUNDLE_NAME]
    return load_certificates(bundles[0]["spec"]["trustBundle"].encode())
