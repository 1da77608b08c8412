"""The shipped install on the real control plane, and the mission's three uses end to end:
pods mutated on create, `kubectl apply --dry-run=server` refused, policy enforced at apply time."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from typing import Any

import kubernetes.client
import pytest
from cryptography import x509

from tests.cluster.controlplane import ControlPlane
from tests.cluster.install import NS, ROOT, Installation, wait_until

DISABLE_MESSAGE = "can be enabled in place, but not turned off or pointed at another Secret"


def deployment(name: str, namespace: str, *, tls: bool = True, secret: str | None = None,
               replicas: int = 1) -> dict[str, Any]:
    labels: dict[str, str] = {"app": name}
    annotations: dict[str, str] = {}
    if tls:
        labels["tls-injector.io/inject"] = "true"
    if secret:
        annotations["tls-injector.io/secret-name"] = secret
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}}}}


def make_namespace(cluster: ControlPlane, core: kubernetes.client.CoreV1Api, name: str,
                   labels: dict[str, str] | None = None) -> None:
    core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
    cluster.wait_for_service_account(name, "default")


def apply(cluster: ControlPlane, manifest: dict[str, Any], *extra: str) -> Any:
    return cluster.kubectl("apply", *extra, "-f", "-", stdin=json.dumps(manifest), check=False)


def served_certificate(host: str, port: int, server_name: str) -> x509.Certificate:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection((host, port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=server_name) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_the_shipped_manifests_are_accepted_as_they_are(installed: Installation) -> None:
    """Applied once by the fixture; applied again, server-side, they change nothing and are refused nothing."""
    again = installed.cluster.kubectl("apply", "--server-side", "--field-manager=tls-injector-install",
                                      "-k", str(ROOT / "manifests/base"))
    assert "serverside-applied" in again.stdout
    assert "Warning" not in again.stderr


def test_bootstrap_runs_as_its_own_account_under_the_shipped_rbac(installed: Installation) -> None:
    assert installed.bootstrap_result.returncode == 0, installed.bootstrap_result.stderr


def test_every_webhook_configuration_trusts_the_certificate_the_webhook_serves(
    installed: Installation, admin: kubernetes.client.ApiClient
) -> None:
    api = kubernetes.client.AdmissionregistrationV1Api(admin)
    served = served_certificate(installed.service_ip, 443, f"tls-injector.{NS}.svc")
    configurations = [api.read_mutating_webhook_configuration("tls-injector"),
                      api.read_validating_webhook_configuration("tls-injector")]
    for configuration in configurations:
        for webhook in configuration.webhooks:
            bundle = x509.load_pem_x509_certificates(base64.b64decode(webhook.client_config.ca_bundle))
            assert any(served.issuer == ca.subject for ca in bundle), webhook.name
            assert webhook.client_config.service.name == "tls-injector"  # the shipped registration, unchanged


def test_a_deployment_applied_with_kubectl_gets_pods_that_carry_the_mounts(
    cluster: ControlPlane, installed: Installation
) -> None:
    """kubectl → Deployment → the real controller-manager's ReplicaSet and Pods → the apiserver sends
    each Pod CREATE to /mutate over TLS → the stored Pods carry the volumes; the reconciler, as its own
    account, writes the workload's Secret and the namespace's bundle they mount."""
    make_namespace(cluster, installed.core, "mission-pods")
    assert apply(cluster, deployment("web", "mission-pods", replicas=2)).returncode == 0
    pods = wait_until("two pods of web", lambda: [
        p for p in installed.core.list_namespaced_pod("mission-pods", label_selector="app=web").items] if len(
        installed.core.list_namespaced_pod("mission-pods", label_selector="app=web").items) == 2 else None)
    for pod in pods:
        volumes = {v.name: v for v in pod.spec.volumes}
        secrets = {v.secret.secret_name for v in volumes.values() if v.secret}
        config_maps = {v.config_map.name for v in volumes.values() if v.config_map}
        assert "web-tls" in secrets, pod.metadata.name
        assert "tls-injector-trust-bundle" in config_maps
        mounts = {m.mount_path for m in pod.spec.containers[0].volume_mounts}
        assert {"/etc/tls-injector/certs", "/etc/tls-injector/trust"} <= mounts
        assert "tls-injector.io/injected" in pod.metadata.annotations
    secret = wait_until("web-tls", lambda: _secret(installed.core, "mission-pods", "web-tls"))
    assert secret.type == "kubernetes.io/tls"
    leaf = x509.load_pem_x509_certificates(base64.b64decode(secret.data["tls.crt"]))[0]
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert "web.mission-pods.svc" in names
    wait_until("the trust bundle in mission-pods", lambda: _config_map(installed.core, "mission-pods"))


def _secret(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> Any:
    try:
        return core.read_namespaced_secret(name, namespace)
    except kubernetes.client.ApiException:
        return None


def _config_map(core: kubernetes.client.CoreV1Api, namespace: str) -> Any:
    try:
        return core.read_namespaced_config_map("tls-injector-trust-bundle", namespace)
    except kubernetes.client.ApiException:
        return None


@pytest.mark.parametrize(("change", "secret_after"), [("disable", None), ("swap", "other-tls")])
def test_dry_run_server_refuses_turning_tls_off_or_swapping_its_secret(
    cluster: ControlPlane, installed: Installation, change: str, secret_after: str | None
) -> None:
    namespace = f"mission-{change}"
    make_namespace(cluster, installed.core, namespace)
    assert apply(cluster, deployment("api", namespace, secret="api-tls")).returncode == 0
    after = deployment("api", namespace, tls=change != "disable", secret=secret_after)
    refused = apply(cluster, after, "--dry-run=server")
    assert refused.returncode != 0
    assert 'admission webhook "' in refused.stderr
    assert DISABLE_MESSAGE in " ".join(refused.stderr.split())
    stored = cluster.kubectl("get", "deployment", "api", "-n", namespace, "-o", "json")
    assert json.loads(stored.stdout)["spec"]["template"]["metadata"]["annotations"] == {
        "tls-injector.io/secret-name": "api-tls"}  # a dry run, and refused: nothing changed


def test_a_dry_run_create_is_answered_with_a_warning_of_what_its_pods_will_get(
    cluster: ControlPlane, installed: Installation
) -> None:
    make_namespace(cluster, installed.core, "mission-preview")
    created = apply(cluster, deployment("preview", "mission-preview"), "--dry-run=server")
    assert created.returncode == 0, created.stderr
    assert "Warning:" in created.stderr
    assert "preview-tls" in created.stderr
