"""The kubelet's side of a pod's volumes, for tests: every volume of a stored pod resolved against the objects
stored in the API emulator, the way the kubelet fills them in before it starts the containers.

A pod whose volumes cannot be resolved stays in ContainerCreating on a real node; here `resolve` raises
`Unresolvable` with the reason the kubelet would give in its FailedMount event, so the test fails. The
rules are the field semantics of the API reference, not this project's idea of them:
https://kubernetes.io/docs/reference/kubernetes-api/config-and-storage-resources/volume/

- `secret` (SecretVolumeSource: secretName, items, optional, defaultMode) and `configMap`
  (ConfigMapVolumeSource: name, items, optional, defaultMode): the object in the pod's namespace; without
  `items` every key becomes a file named by the key; with `items` only the listed keys, at their `path`
  (relative, no `..` element, not starting with `..`), with their `mode`; a missing object, or a listed
  key missing from it, fails the volume unless `optional` is true (then the object adds nothing, a
  missing key is skipped). ConfigMaps project `data` and `binaryData`; Secrets `data`, base64-decoded.
  https://kubernetes.io/docs/reference/kubernetes-api/config-and-storage-resources/volume/#projections
- `downwardAPI` (DownwardAPIVolumeFile: path, fieldRef, resourceFieldRef, mode): metadata.name,
  metadata.namespace, metadata.uid, metadata.labels, metadata.annotations and one label or annotation
  (`metadata.labels['k']`); resources of a named container (limits and requests; the node's allocatable
  when no limit is set).
- `projected` (ProjectedVolumeSource: sources, defaultMode), each source exactly one of:
  - `secret` / `configMap` (SecretProjection / ConfigMapProjection: name, items, optional), as above;
  - `clusterTrustBundle` (ClusterTrustBundleProjection: name, or signerName + labelSelector; optional;
    path): `name` selects one bundle and is mutually exclusive with signerName and labelSelector;
    `signerName` selects that signer's bundles matching `labelSelector`, where an UNSET selector matches
    NOTHING and an empty one matches everything; the selected bundles' certificates are unified and
    deduplicated into one PEM file. No bundle (or zero matches) fails the volume unless `optional`.
  - `podCertificate` (PodCertificateProjection: signerName, keyType, credentialBundlePath, keyPath,
    certificateChainPath): the kubelet makes a key of `keyType`, sends a PodCertificateRequest to the
    signer, and the pod does not start until that request is Issued; the key is written at keyPath (and
    first in the credential bundle), the issued chain at certificateChainPath.
  - `serviceAccountToken` (audience, expirationSeconds, path): a token of the pod's service account,
    which must exist (the TokenRequest fails otherwise).
  - `downwardAPI` (items), as above.
  Two sources writing one path is refused (the apiserver refuses explicit duplicates: "conflicting
  duplicate paths").
- `emptyDir`: an empty directory. Any other source is not modelled here and fails loudly.

File modes: an item's `mode`, else the volume's `defaultMode`, else 0644; both must be within 0-0777.
"""

from __future__ import annotations

import base64
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

from tests.kubeapi import Emulator
from tests.kubeapi.selectors import Requirement
from tests.kubeapi.validation import selector_requirements
from tls_injector.kube import KubeApi, pod_certificate_requests

Obj = dict[str, Any]
NODE = "node-1"
DEFAULT_MODE = 0o644
# What the node offers a container without limits (a downwardAPI resourceFieldRef then reads these).
NODE_ALLOCATABLE = {"cpu": "2", "memory": "8Gi", "ephemeral-storage": "100Gi"}
_BUNDLES = "clustertrustbundles.certificates.k8s.io"
_REQUESTS = "podcertificaterequests.certificates.k8s.io"
_KEY_TYPES: dict[str, ec.EllipticCurve] = {"ECDSAP256": ec.SECP256R1(), "ECDSAP384": ec.SECP384R1(),
                                           "ECDSAP521": ec.SECP521R1()}
Key = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey


class Unresolvable(AssertionError):
    """The kubelet could not set the volume up: the pod would stay in ContainerCreating."""


@dataclass(frozen=True)
class File:
    content: bytes
    mode: int = DEFAULT_MODE


Files = dict[str, File]  # path relative to the volume's root -> file


@dataclass
class Kubelet:
    """One node: it asks for the pod certificates its pods' volumes want (keeping the keys, which never
    leave it) and resolves volumes against what the emulator stores."""

    emu: Emulator
    node: str = NODE
    keys: dict[str, Key] = field(default_factory=dict)  # PodCertificateRequest name -> the key it was made for

    def start(self, pod: Obj) -> None:
        """What the kubelet does for a pod bound to it before resolving volumes: one PodCertificateRequest per
        `podCertificate` source (created through the API, as the kubelet does)."""
        for volume in pod["spec"].get("volumes") or []:
            for source in (volume.get("projected") or {}).get("sources") or []:
                if "podCertificate" in source:
                    self._request(pod, source["podCertificate"])

    def resolve(self, pod: Obj) -> dict[str, Files]:
        """Every volume of the stored pod, by name; Unresolvable for the first one the kubelet cannot set up."""
        volumes = pod["spec"].get("volumes") or []
        names = [v.get("name") for v in volumes]
        if len(names) != len(set(names)):
            raise Unresolvable(f"duplicate volume names: {names}")
        return {v["name"]: self._volume(pod, v) for v in volumes}

    def container_files(self, pod: Obj, container: str) -> dict[str, File]:
        """The files a container sees through its volumeMounts: absolute path -> file."""
        resolved = self.resolve(pod)
        every = [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]
        (spec,) = [c for c in every if c["name"] == container]
        seen: dict[str, File] = {}
        for mount in spec.get("volumeMounts") or []:
            if mount["name"] not in resolved:
                raise Unresolvable(f"container {container} mounts volume {mount['name']}, which the pod lacks")
            sub = mount.get("subPath") or ""
            for path, found in resolved[mount["name"]].items():
                if sub and path != sub and not path.startswith(sub + "/"):
                    continue
                rest = path[len(sub):].lstrip("/") if sub else path
                seen[posixpath.join(mount["mountPath"], rest) if rest else mount["mountPath"]] = found
        return seen

    # --- the volume sources

    def _volume(self, pod: Obj, volume: Obj) -> Files:
        sources = [k for k in volume if k != "name"]
        if len(sources) != 1:
            raise Unresolvable(f"volume {volume.get('name')}: exactly one source is required, got {sources}")
        kind, spec = sources[0], volume[sources[0]]
        where = f"volume {volume['name']}"
        if kind == "emptyDir":
            return {}
        mode = _mode(spec.get("defaultMode"), DEFAULT_MODE, where)
        if kind == "secret":
            return self._keyed(pod, "secrets", spec.get("secretName"), spec, mode=mode, where=where)
        if kind == "configMap":
            return self._keyed(pod, "configmaps", spec.get("name"), spec, mode=mode, where=where)
        if kind == "downwardAPI":
            return _downward(pod, spec.get("items") or [], mode, where)
        if kind == "projected":
            return self._projected(pod, spec.get("sources") or [], mode, where)
        raise Unresolvable(f"{where}: {kind} volumes are not modelled by this test kubelet")

    def _projected(self, pod: Obj, sources: list[Obj], mode: int, where: str) -> Files:
        files: Files = {}
        for i, source in enumerate(sources):
            kinds = list(source)
            if len(kinds) != 1:
                raise Unresolvable(f"{where}: sources[{i}] must set exactly one projection, got {kinds}")
            kind, spec = kinds[0], source[kinds[0]]
            at = f"{where} sources[{i}].{kind}"
            if kind == "secret":
                found = self._keyed(pod, "secrets", spec.get("name"), spec, mode=mode, where=at)
            elif kind == "configMap":
                found = self._keyed(pod, "configmaps", spec.get("name"), spec, mode=mode, where=at)
            elif kind == "downwardAPI":
                found = _downward(pod, spec.get("items") or [], mode, at)
            elif kind == "clusterTrustBundle":
                found = self._trust_bundle(spec, mode, at)
            elif kind == "podCertificate":
                found = self._pod_certificate(pod, spec, mode, at)
            elif kind == "serviceAccountToken":
                found = self._token(pod, spec, mode, at)
            else:
                raise Unresolvable(f"{at}: not a projection the API knows")
            clash = sorted(set(files) & set(found))
            if clash:
                raise Unresolvable(f"{at}: conflicting duplicate paths {clash}")
            files.update(found)
        return files

    def _keyed(self, pod: Obj, plural: str, name: object, spec: Obj, *, mode: int, where: str) -> Files:
        """A Secret's or ConfigMap's keys as files (SecretVolumeSource, ConfigMapVolumeSource and projections)."""
        optional = spec.get("optional") is True
        if not isinstance(name, str) or not name:
            raise Unresolvable(f"{where}: no name")
        obj = self.emu.get(plural, name, pod["metadata"]["namespace"])
        if obj is None:
            if optional:
                return {}
            raise Unresolvable(f"{where}: {plural[:-1]} {name!r} not found in {pod['metadata']['namespace']}")
        data = _data(plural, obj)
        items = spec.get("items")
        if items is None:
            return {_path(key, where): File(value, mode) for key, value in data.items()}
        files: Files = {}
        for item in items:
            if item["key"] not in data:
                if optional:
                    continue
                raise Unresolvable(f"{where}: key {item['key']!r} not in {plural[:-1]} {name!r}")
            files[_path(item["path"], where)] = File(data[item["key"]], _mode(item.get("mode"), mode, where))
        return files

    def _trust_bundle(self, spec: Obj, mode: int, where: str) -> Files:
        """ClusterTrustBundleProjection: one bundle by name, or a signer's bundles by labelSelector."""
        name, signer, selector = spec.get("name"), spec.get("signerName"), spec.get("labelSelector")
        if name and (signer or selector is not None):
            raise Unresolvable(f"{where}: name is mutually exclusive with signerName and labelSelector")
        if not name and not signer:
            raise Unresolvable(f"{where}: one of name or signerName is required")
        try:
            stored = self.emu.objects(_BUNDLES)
        except ValueError:  # the cluster does not serve ClusterTrustBundles
            stored = []
        if name:
            selected = [b for b in stored if b["metadata"]["name"] == name]
        else:
            # An unset selector matches nothing; an empty one ({}) everything.
            wanted = None if selector is None else selector_requirements(selector)
            selected = [b for b in stored if (b.get("spec") or {}).get("signerName") == signer
                        and wanted is not None and _matches(wanted, b["metadata"].get("labels") or {})]
        if not selected:
            if spec.get("optional") is True:
                return {}
            what = f"ClusterTrustBundle {name!r}" if name else f"signer {signer!r} with labelSelector {selector!r}"
            raise Unresolvable(f"{where}: matched zero ClusterTrustBundles ({what})")
        return {_path(spec["path"], where): File(_unified(selected), mode)}

    def _pod_certificate(self, pod: Obj, spec: Obj, mode: int, where: str) -> Files:
        """PodCertificateProjection: the pod starts only once its request is Issued."""
        meta = pod["metadata"]
        requests = [r for r in self.emu.objects(_REQUESTS, meta["namespace"])
                    if r["spec"].get("podUID") == meta.get("uid") and r["spec"].get("signerName") == spec["signerName"]
                    and r["metadata"]["name"] in self.keys]
        if not requests:
            raise Unresolvable(f"{where}: no PodCertificateRequest to {spec['signerName']} for this pod yet")
        request = requests[-1]
        status = request.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        if "Issued" not in conditions:
            told: Obj = next(iter(conditions.values()), {})
            raise Unresolvable(f"{where}: PodCertificateRequest {request['metadata']['name']} not issued "
                               f"({told.get('type', 'pending')}: {told.get('reason', '')} {told.get('message', '')})")
        key = self.keys[request["metadata"]["name"]]
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        chain = str(status["certificateChain"]).encode()
        leaf = x509.load_pem_x509_certificate(chain)
        if leaf.public_key() != key.public_key():
            raise Unresolvable(f"{where}: the issued leaf is not for the node's key")
        files: Files = {}
        if spec.get("credentialBundlePath"):
            files[_path(spec["credentialBundlePath"], where)] = File(key_pem + chain, mode)
        if spec.get("keyPath"):
            files[_path(spec["keyPath"], where)] = File(key_pem, mode)
        if spec.get("certificateChainPath"):
            files[_path(spec["certificateChainPath"], where)] = File(chain, mode)
        if not files:
            raise Unresolvable(f"{where}: credentialBundlePath, or keyPath and certificateChainPath, are required")
        return files

    def _token(self, pod: Obj, spec: Obj, mode: int, where: str) -> Files:
        account = pod["spec"].get("serviceAccountName") or "default"
        if self.emu.get("serviceaccounts", account, pod["metadata"]["namespace"]) is None:
            raise Unresolvable(f"{where}: service account {account!r} not found (the TokenRequest fails)")
        audience = spec.get("audience") or "https://kubernetes.default.svc"
        return {_path(spec["path"], where): File(f"token:{account}:{audience}".encode(), mode)}

    def _request(self, pod: Obj, spec: Obj) -> None:
        """Through the API, as the kubelet makes it: a stub PKCS#10 request (v1) or the PKIX key (v1beta1)."""
        key = _make_key(spec["keyType"])
        meta, version = pod["metadata"], self.emu.certificates[0]
        body: Obj = {
            "apiVersion": f"certificates.k8s.io/{version}", "kind": "PodCertificateRequest",
            "metadata": {"generateName": f"{meta['name'][:200]}-", "namespace": meta["namespace"]},
            "spec": {"signerName": spec["signerName"], "podName": meta["name"], "podUID": meta["uid"],
                     "serviceAccountName": pod["spec"].get("serviceAccountName") or "default",
                     "nodeName": self.node,
                     **identity_uids(self.emu, self.node, meta["namespace"],
                                     pod["spec"].get("serviceAccountName") or "default"),
                     **({"maxExpirationSeconds": spec["maxExpirationSeconds"]}
                        if spec.get("maxExpirationSeconds") else {})}}
        if version == "v1":
            digest = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
            csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, digest)
            body["spec"]["stubPKCS10Request"] = base64.b64encode(csr.public_bytes(serialization.Encoding.DER)).decode()
        else:
            body["spec"].update(pkix_spec(key, str(meta["uid"])))
        created = KubeApi(self.emu.api_client()).create(pod_certificate_requests(version), body,
                                                         namespace=meta["namespace"])
        self.keys[created["metadata"]["name"]] = key


def controller_defaults(emu: Emulator, namespace: str, *, root_ca_pem: str = "") -> None:
    """What kube-controller-manager puts in every namespace, which the apiserver's `kube-api-access-*`
    volume needs: the ServiceAccount `default` and the ConfigMap `kube-root-ca.crt` (the emulator runs no
    controllers)."""
    if not any(a["metadata"]["name"] == "default" for a in emu.objects("serviceaccounts", namespace)):
        emu.add({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": namespace}})
    emu.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt", "namespace": namespace},
             "data": {"ca.crt": root_ca_pem or "cluster CA"}})


def _data(plural: str, obj: Obj) -> dict[str, bytes]:
    if plural == "secrets":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    return {**{k: v.encode() for k, v in (obj.get("data") or {}).items()},
            **{k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}}


def _downward(pod: Obj, items: list[Obj], mode: int, where: str) -> Files:
    return {_path(item["path"], where): File(_field(pod, item, where), _mode(item.get("mode"), mode, where))
            for item in items}


def _field(pod: Obj, item: Obj, where: str) -> bytes:
    meta = pod["metadata"]
    if "fieldRef" in item:
        path = item["fieldRef"]["fieldPath"]
        simple = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
                  "metadata.uid": meta.get("uid")}
        if path in simple:
            return str(simple[path] or "").encode()
        for group in ("labels", "annotations"):
            values = meta.get(group) or {}
            if path == f"metadata.{group}":
                return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items())).encode()
            prefix = f"metadata.{group}['"
            if path.startswith(prefix) and path.endswith("']"):
                return str(values.get(path[len(prefix):-2], "")).encode()
        raise Unresolvable(f"{where}: fieldPath {path!r} is not supported in volumes")
    ref = item["resourceFieldRef"]
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == ref.get("containerName")]
    group, _, resource = ref["resource"].partition(".")
    value = ((container.get("resources") or {}).get(group) or {}).get(resource) or NODE_ALLOCATABLE[resource]
    return str(value).encode()


def _unified(bundles: list[Obj]) -> bytes:
    """The kubelet's normalisation: every certificate once, re-encoded as PEM (comments and headers dropped)."""
    seen: dict[bytes, bytes] = {}
    for bundle in sorted(bundles, key=lambda b: b["metadata"]["name"]):
        for cert in x509.load_pem_x509_certificates(bundle["spec"]["trustBundle"].encode()):
            der = cert.public_bytes(serialization.Encoding.DER)
            seen.setdefault(der, cert.public_bytes(serialization.Encoding.PEM))
    return b"".join(seen.values())


def _matches(requirements: list[Requirement], labels: Mapping[str, str]) -> bool:
    return all(r.matches(labels) for r in requirements)


def _path(path: object, where: str) -> str:
    """KeyToPath.path and the projections' paths: relative, no '..' element, not starting with '..'."""
    if not isinstance(path, str) or not path or path.startswith("/") or path.startswith("..") \
            or ".." in path.split("/"):
        raise Unresolvable(f"{where}: invalid path {path!r}")
    return path


def _mode(value: object, default: int, where: str) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or not 0 <= value <= 0o777:
        raise Unresolvable(f"{where}: mode {value!r} is not within 0000-0777")
    return value


def pkix_spec(key: Key, pod_uid: str) -> Obj:
    """The key as a v1beta1 kubelet sends it: `pkixPublicKey` and `proofOfPossession`, its signature over the
    pod's UID (Ed25519 over the bytes, ECDSA over their SHA-256 in ASN.1, RSA-PSS with SHA-256). The
    apiserver verifies the signature and refuses a key sent without one."""
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    data = pod_uid.encode()
    if isinstance(key, ed25519.Ed25519PrivateKey):
        proof = key.sign(data)
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        proof = key.sign(data, ec.ECDSA(hashes.SHA256()))
    else:
        proof = key.sign(data, padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.DIGEST_LENGTH),
                         hashes.SHA256())
    return {"pkixPublicKey": base64.b64encode(der).decode(), "proofOfPossession": base64.b64encode(proof).decode()}


def _make_key(key_type: str) -> Key:
    if key_type == "ED25519":
        return ed25519.Ed25519PrivateKey.generate()
    if key_type.startswith("RSA"):
        return rsa.generate_private_key(public_exponent=65537, key_size=int(key_type[3:]))
    if key_type not in _KEY_TYPES:
        raise Unresolvable(f"podCertificate keyType {key_type!r} is not one the kubelet makes")
    return ec.generate_private_key(_KEY_TYPES[key_type])


def identity_uids(emu: Emulator, node: str, namespace: str, account: str) -> dict[str, str]:
    """spec.nodeUID and spec.serviceAccountUID as a kubelet fills them: the UIDs of its registered Node
    and of the pod's ServiceAccount. Both are created here when missing, as the kubelet registers its
    Node and the ServiceAccount controller makes `default` in every namespace."""
    found = emu.get("nodes", node) or emu.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    sa = emu.get("serviceaccounts", account, namespace) or emu.add(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}})
    return {"nodeUID": found["metadata"]["uid"], "serviceAccountUID": sa["metadata"]["uid"]}
