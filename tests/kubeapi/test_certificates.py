"""The emulator's certificates.k8s.io: PodCertificateRequests and ClusterTrustBundles, served per version,
selected by spec.signerName, status only through /status, and the apiserver's checks on an issued status."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import kubernetes.client as k8s
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.kubeapi import Emulator, running_emulator

NOW = datetime(2026, 3, 1, tzinfo=UTC)
PCRS = "podcertificaterequests.certificates.k8s.io"


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with running_emulator(seed=0, certificates=("v1",), now=lambda: NOW) as api:
        yield api


def _request(emu: Emulator, signer: str = "example.com/a") -> tuple[dict[str, Any], ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([])).sign(key, hashes.SHA256())
    obj = emu.add({"apiVersion": "certificates.k8s.io/v1", "kind": "PodCertificateRequest",
                   "metadata": {"name": f"r-{signer.replace('/', '-').replace('.', '-')}", "namespace": "default"},
                   "spec": {"signerName": signer, "podName": "p", "podUID": "u", "serviceAccountName": "default",
                            "serviceAccountUID": "s", "nodeName": "n", "nodeUID": "nu",
                            "stubPKCS10Request": _b64(csr.public_bytes(serialization.Encoding.DER))}})
    return obj, key


def _b64(der: bytes) -> str:
    return base64.b64encode(der).decode()


def _ca() -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ca")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(NOW - timedelta(days=1)).not_valid_after(NOW + timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    return cert, key


def _issued(request: dict[str, Any], key: Any, *, start: datetime = NOW, hours: int = 24,
            refresh_after: timedelta = timedelta(hours=12)) -> dict[str, Any]:
    ca, ca_key = _ca()
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(2).not_valid_before(start).not_valid_after(start + timedelta(hours=hours))
            .sign(ca_key, hashes.SHA256()))
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    return {**request, "status": {
        "conditions": [{"type": "Issued", "status": "True", "reason": "Issued", "message": "ok",
                        "lastTransitionTime": NOW.strftime(stamp)}],
        "certificateChain": leaf.public_bytes(serialization.Encoding.PEM).decode(),
        "notBefore": start.strftime(stamp), "notAfter": (start + timedelta(hours=hours)).strftime(stamp),
        "beginRefreshAt": (start + refresh_after).strftime(stamp)}}


def test_only_the_versions_served_are_discovered_and_routed() -> None:
    with running_emulator(certificates=("v1beta1",)) as api:
        client = api.api_client()
        groups = k8s.ApisApi(client).get_api_versions().groups
        (certs,) = [g for g in groups if g.name == "certificates.k8s.io"]
        assert [v.version for v in certs.versions] == ["v1beta1"]
        assert k8s.CertificatesV1beta1Api(client).list_cluster_trust_bundle().items == []
        with pytest.raises(k8s.ApiException) as missing:
            k8s.CertificatesV1Api(client).list_cluster_trust_bundle()
        assert missing.value.status == 404
    with running_emulator() as api:
        groups = k8s.ApisApi(api.api_client()).get_api_versions().groups
        assert "certificates.k8s.io" not in [g.name for g in groups]


def test_requests_are_selected_by_signer_name_and_other_fields_are_refused(emu: Emulator) -> None:
    _request(emu, "example.com/a")
    _request(emu, "example.com/b")
    api = k8s.CertificatesV1Api(emu.api_client())
    found = api.list_pod_certificate_request_for_all_namespaces(field_selector="spec.signerName=example.com/b")
    assert [r.spec.signer_name for r in found.items] == ["example.com/b"]
    with pytest.raises(k8s.ApiException) as refused:
        api.list_pod_certificate_request_for_all_namespaces(field_selector="spec.podUID=u")
    assert refused.value.status == 400


def test_status_changes_only_through_the_subresource_and_an_issued_status_is_then_immutable(emu: Emulator) -> None:
    request, key = _request(emu)
    api = k8s.CertificatesV1Api(emu.api_client())
    issued = _issued(request, key)
    api.replace_namespaced_pod_certificate_request("r-example-com-a", "default", issued)
    assert (emu.get(PCRS, "r-example-com-a", "default") or {}).get("status") == {}
    stored = api.replace_namespaced_pod_certificate_request_status("r-example-com-a", "default", issued)
    stored_now = emu.get(PCRS, "r-example-com-a", "default") or {}
    assert stored_now["status"]["conditions"][0]["type"] == "Issued"
    assert stored.metadata is not None
    denied = {**stored_now, "status": {"conditions": [{"type": "Denied", "status": "True", "reason": "No",
                                                       "message": "", "lastTransitionTime": "2026-03-01T00:00:00Z"}]}}
    with pytest.raises(k8s.ApiException) as immutable:
        api.replace_namespaced_pod_certificate_request_status("r-example-com-a", "default", denied)
    assert immutable.value.status == 422


@pytest.mark.parametrize(("change", "field"), [
    ({"start": NOW - timedelta(minutes=6)}, "status.notBefore"),
    ({"hours": 0}, "status.certificateChain"),
    ({"hours": 25}, "status.certificateChain"),
    ({"refresh_after": timedelta(minutes=5)}, "status.beginRefreshAt"),
    ({"refresh_after": timedelta(hours=23, minutes=55)}, "status.beginRefreshAt"),
    ({"key": "other"}, "status.certificateChain"),
])
def test_an_issued_status_the_apiserver_would_reject_is_invalid(emu: Emulator, change: dict[str, Any],
                                                                 field: str) -> None:
    request, key = _request(emu)
    if change.pop("key", None):
        key = ec.generate_private_key(ec.SECP256R1())
    with pytest.raises(k8s.ApiException) as invalid:
        k8s.CertificatesV1Api(emu.api_client()).replace_namespaced_pod_certificate_request_status(
            "r-example-com-a", "default", _issued(request, key, **change))
    assert invalid.value.status == 422
    assert field in str(invalid.value.body)


def test_a_signers_trust_bundle_must_carry_its_name_prefix_and_only_ca_certificates(emu: Emulator) -> None:
    ca, _ = _ca()
    pem = ca.public_bytes(serialization.Encoding.PEM).decode()
    api = k8s.CertificatesV1Api(emu.api_client())
    body = {"metadata": {"name": "example.com:a:one"}, "spec": {"signerName": "example.com/a", "trustBundle": pem}}
    api.create_cluster_trust_bundle(body)  # type: ignore[arg-type]
    for name, bundle in (("other:one", pem), ("example.com:a:two", pem + pem)):
        with pytest.raises(k8s.ApiException) as invalid:
            api.create_cluster_trust_bundle(  # type: ignore[arg-type]
                {"metadata": {"name": name}, "spec": {"signerName": "example.com/a", "trustBundle": bundle}})
        assert invalid.value.status == 422
    assert [b.metadata.name for b in api.list_cluster_trust_bundle(
        field_selector="spec.signerName=example.com/a").items if b.metadata] == ["example.com:a:one"]


def test_an_issued_chain_may_hold_100_kib_and_not_a_byte_more(emu: Emulator) -> None:
    """The apiserver's cap on certificateChain, checked on the length of the PEM text as stored."""
    request, key = _request(emu)
    issued = _issued(request, key)
    leaf = issued["status"]["certificateChain"]
    ca = _ca()[0].public_bytes(serialization.Encoding.PEM).decode()  # any certificate pads the chain
    padded = leaf + ca * ((100 * 1024 - len(leaf)) // len(ca) + 1)
    issued["status"]["certificateChain"] = padded
    with pytest.raises(k8s.ApiException) as invalid:
        k8s.CertificatesV1Api(emu.api_client()).replace_namespaced_pod_certificate_request_status(
            "r-example-com-a", "default", issued)
    assert invalid.value.status == 422
    assert "status.certificateChain" in str(invalid.value.body)
    assert "Too long" in str(invalid.value.body)
    issued["status"]["certificateChain"] = padded[: len(padded) - len(ca)]  # back under the limit
    assert len(issued["status"]["certificateChain"]) <= 100 * 1024
    k8s.CertificatesV1Api(emu.api_client()).replace_namespaced_pod_certificate_request_status(
        "r-example-com-a", "default", issued)
