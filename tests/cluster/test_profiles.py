"""Issue 39, point 3, on the real control plane: the installed reconciler (its own account, the shipped flags)
issues a Deployment's Secret with the key algorithm and duration its profile asks for, and a profile it
refuses gets a Warning Event on the Deployment and a Secret with the default profile (never a stall)."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import kubernetes.client
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.cluster.controlplane import ControlPlane
from tests.cluster.install import Installation, wait_until
from tests.cluster.test_mission import apply, deployment, make_namespace

NS = "profiles"
BACKDATE = timedelta(minutes=5)  # tls_injector.pki.BACKDATE, restated: what a client sees is all this test reads


def _profiled(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    manifest = deployment(name, NS)
    manifest["spec"]["template"]["metadata"]["annotations"].update(annotations)
    return manifest


def _leaf(core: kubernetes.client.CoreV1Api, name: str) -> x509.Certificate | None:
    try:
        secret = core.read_namespaced_secret(name, NS)
    except kubernetes.client.ApiException:
        return None
    return x509.load_pem_x509_certificates(base64.b64decode(secret.data["tls.crt"]))[0]


def _span(leaf: x509.Certificate) -> timedelta:
    return leaf.not_valid_after_utc - leaf.not_valid_before_utc - BACKDATE


def _refusals(core: kubernetes.client.CoreV1Api, name: str) -> list[Any]:
    events = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items
    return [e for e in events if e.reason == "ProfileRefused"] or None  # type: ignore[return-value]


def test_a_profile_gives_its_key_algorithm_and_a_refused_one_an_event_and_the_default(
        cluster: ControlPlane, installed: Installation) -> None:
    make_namespace(cluster, installed.core, NS)
    asked = {"tls-injector.io/key-algorithm": "rsa-3072", "tls-injector.io/duration": "720h",
             "tls-injector.io/renew-before": "240h"}
    refused = {"tls-injector.io/key-algorithm": "rsa-1024", "tls-injector.io/duration": "10000000h"}
    assert apply(cluster, _profiled("billing", asked)).returncode == 0
    assert apply(cluster, _profiled("legacy", refused)).returncode == 0

    leaf = wait_until("billing-tls", lambda: _leaf(installed.core, "billing-tls"))
    key = leaf.public_key()
    assert isinstance(key, rsa.RSAPublicKey)
    assert key.key_size == 3072
    assert _span(leaf) == timedelta(hours=720)
    secret = installed.core.read_namespaced_secret("billing-tls", NS)
    assert secret.metadata.annotations["tls-injector.io/profile"] == (
        "key-algorithm=rsa-3072,duration=720h,renew-before=240h")

    default = wait_until("legacy-tls", lambda: _leaf(installed.core, "legacy-tls"))
    key = default.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey)
    assert key.curve.name == "secp256r1"
    assert _span(default) == timedelta(days=90)
    [event] = wait_until("the ProfileRefused Event on legacy", lambda: _refusals(installed.core, "legacy"))
    assert event.type == "Warning"
    assert event.involved_object.kind == "Deployment"
    assert "rsa-1024" in event.message
    assert "10000000h" in event.message
    assert _refusals(installed.core, "billing") is None
