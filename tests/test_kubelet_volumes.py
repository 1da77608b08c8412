"""The test kubelet (tests/support/kubelet.py) resolves volumes by the API reference's field semantics:
each rule that decides whether a pod starts, checked both ways, so the chain tests that rely on it can
fail. https://kubernetes.io/docs/reference/kubernetes-api/config-and-storage-resources/volume/"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.kubeapi import Emulator, running_emulator
from tests.support.kubelet import Kubelet, Unresolvable
from tls_injector.pki import make_ca

NS = "shop"
SIGNER = "example.com/serving"
Obj = dict[str, Any]


def _pem(common_name: str) -> str:
    return make_ca(common_name=common_name, now=datetime.now(UTC)).cert_pem.decode()


A, B = _pem("ca-a"), _pem("ca-b")


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with running_emulator(seed=0, certificates=("v1",)) as emulator:
        emulator.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        emulator.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls", "namespace": NS},
                      "type": "Opaque", "data": {"tls.crt": base64.b64encode(b"CRT").decode(),
                                                 "tls.key": base64.b64encode(b"KEY").decode()}})
        emulator.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": NS},
                      "data": {"a.txt": "alpha"}, "binaryData": {"b.bin": base64.b64encode(b"\x00\x01").decode()}})
        for name, labels, pem in ((f"{SIGNER.replace('/', ':')}:one", {"team": "a"}, A),
                                  (f"{SIGNER.replace('/', ':')}:two", {"team": "b"}, A + B)):
            emulator.add({"apiVersion": "certificates.k8s.io/v1", "kind": "ClusterTrustBundle",
                          "metadata": {"name": name, "labels": labels},
                          "spec": {"signerName": SIGNER, "trustBundle": pem}})
        yield emulator


def _pod(*volumes: Obj, account: str = "default") -> Obj:
    return {"metadata": {"name": "p", "namespace": NS, "uid": "u-1", "labels": {"app": "p"},
                         "annotations": {"note": "x"}},
            "spec": {"serviceAccountName": account, "volumes": list(volumes),
                     "containers": [{"name": "app", "volumeMounts": [{"name": v["name"], "mountPath": f"/m/{v['name']}"}
                                                                     for v in volumes]}]}}


def _ctb(**fields: Any) -> Obj:
    return {"name": "v", "projected": {"sources": [{"clusterTrustBundle": {"path": "ca.crt", **fields}}]}}


def _certs(files: dict[str, Any]) -> int:
    return bytes(files["ca.crt"].content).count(b"BEGIN CERTIFICATE")


@pytest.mark.parametrize(("fields", "certificates"), [
    ({"signerName": SIGNER, "labelSelector": {}}, 2),  # empty selector: every bundle of the signer, deduplicated
    ({"signerName": SIGNER, "labelSelector": {"matchLabels": {"team": "b"}}}, 2),
    ({"signerName": SIGNER, "labelSelector": {"matchLabels": {"team": "a"}}}, 1),
    ({"signerName": SIGNER, "labelSelector": {"matchExpressions": [{"key": "team", "operator": "In",
                                                                    "values": ["a"]}]}}, 1),
    ({"name": "example.com:serving:one"}, 1),
    ({"name": "example.com:serving:two"}, 2),
], ids=["empty-selector", "label-b", "label-a", "expression", "name-one", "name-two"])
def test_a_cluster_trust_bundle_projection_selects_by_name_or_by_signer_and_selector(
        emu: Emulator, fields: Obj, certificates: int) -> None:
    assert _certs(Kubelet(emu).resolve(_pod(_ctb(**fields)))["v"]) == certificates


@pytest.mark.parametrize("fields", [
    {"signerName": SIGNER},  # an unset labelSelector matches nothing
    {"signerName": SIGNER, "labelSelector": {"matchLabels": {"team": "c"}}},
    {"signerName": "other.example/x", "labelSelector": {}},
    {"name": "example.com:serving:none"},
    {"name": "example.com:serving:one", "signerName": SIGNER},  # mutually exclusive
    {},
], ids=["unset-selector", "no-match", "other-signer", "missing-name", "name-and-signer", "neither"])
def test_a_cluster_trust_bundle_projection_that_selects_nothing_keeps_the_pod_from_starting(
        emu: Emulator, fields: Obj) -> None:
    with pytest.raises(Unresolvable):
        Kubelet(emu).resolve(_pod(_ctb(**fields)))


def test_optional_lets_a_projection_match_nothing(emu: Emulator) -> None:
    assert Kubelet(emu).resolve(_pod(_ctb(signerName=SIGNER, optional=True)))["v"] == {}
    assert Kubelet(emu).resolve(_pod(_ctb(name="example.com:serving:none", optional=True)))["v"] == {}


def test_secret_and_config_map_volumes_project_every_key_or_the_listed_items_with_their_modes(emu: Emulator) -> None:
    pod = _pod({"name": "s", "secret": {"secretName": "tls", "defaultMode": 0o400}},
               {"name": "c", "configMap": {"name": "cm", "items": [{"key": "b.bin", "path": "sub/b", "mode": 0o600}]}})
    volumes = Kubelet(emu).resolve(pod)
    assert {p: (f.content, f.mode) for p, f in volumes["s"].items()} == {"tls.crt": (b"CRT", 0o400),
                                                                          "tls.key": (b"KEY", 0o400)}
    assert {p: (f.content, f.mode) for p, f in volumes["c"].items()} == {"sub/b": (b"\x00\x01", 0o600)}
    files = Kubelet(emu).container_files(pod, "app")
    assert files["/m/s/tls.crt"].content == b"CRT"
    assert files["/m/c/sub/b"].content == b"\x00\x01"


@pytest.mark.parametrize(("volume", "starts"), [
    ({"secret": {"secretName": "absent"}}, False),
    ({"secret": {"secretName": "absent", "optional": True}}, True),
    ({"configMap": {"name": "cm", "items": [{"key": "nope", "path": "x"}]}}, False),
    ({"configMap": {"name": "cm", "optional": True, "items": [{"key": "nope", "path": "x"}]}}, True),
    ({"configMap": {"name": "cm", "items": [{"key": "a.txt", "path": "../x"}]}}, False),
    ({"configMap": {"name": "cm", "items": [{"key": "a.txt", "path": "/x"}]}}, False),
    ({"configMap": {"name": "cm", "defaultMode": 0o1777}}, False),
    ({"projected": {"sources": [{"secret": {"name": "tls"}}, {"secret": {"name": "tls"}}]}}, False),
    ({"projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}, False),
    ({"hostPath": {"path": "/etc"}}, False),
], ids=["missing-secret", "optional-secret", "missing-key", "optional-key", "dotdot-path", "absolute-path",
        "bad-mode", "duplicate-paths", "no-service-account", "unmodelled"])
def test_what_keeps_a_pod_from_starting_and_what_optional_forgives(emu: Emulator, volume: Obj, starts: bool) -> None:
    pod = _pod({"name": "v", **volume})
    if starts:
        Kubelet(emu).resolve(pod)
    else:
        with pytest.raises(Unresolvable):
            Kubelet(emu).resolve(pod)


def test_downward_api_and_service_account_token_sources(emu: Emulator) -> None:
    emu.add({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "runner", "namespace": NS}})
    pod = _pod({"name": "v", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "audience": "vault"}},
        {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                                   {"path": "note", "fieldRef": {"fieldPath": "metadata.annotations['note']"}},
                                   {"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}}]}}]}}, account="runner")
    files = {p: f.content for p, f in Kubelet(emu).resolve(pod)["v"].items()}
    assert files == {"token": b"token:runner:vault", "labels": b'app="p"', "note": b"x", "uid": b"u-1"}


def test_a_pod_certificate_waits_for_an_issued_request(emu: Emulator) -> None:
    pod = _pod({"name": "v", "projected": {"sources": [{"podCertificate": {
        "signerName": SIGNER, "keyType": "ECDSAP256", "keyPath": "tls.key", "certificateChainPath": "tls.crt"}}]}})
    node = Kubelet(emu)
    with pytest.raises(Unresolvable, match="no PodCertificateRequest"):
        node.resolve(pod)
    node.start(pod)
    with pytest.raises(Unresolvable, match="not issued"):
        node.resolve(pod)
