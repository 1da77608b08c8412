"""The control plane of the cluster tier is the real thing, configured as a kubeadm cluster is."""

from __future__ import annotations

import json

import kubernetes.client
import pytest

from tests.cluster.controlplane import ControlPlane


def test_the_apiserver_is_the_pinned_release_built_from_its_modules(cluster: ControlPlane) -> None:
    code, body = cluster.get("/version")
    assert code == 200
    version = json.loads(body)
    assert version["gitVersion"] == "v1.37.2"
    assert (version["major"], version["minor"]) == ("1", "37")


def test_admission_policies_and_webhooks_are_served(cluster: ControlPlane) -> None:
    code, body = cluster.get("/apis/admissionregistration.k8s.io/v1")
    assert code == 200
    kinds = {resource["kind"] for resource in json.loads(body)["resources"]}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration"} <= kinds


def test_rbac_is_enforced_for_a_service_account(cluster: ControlPlane, admin: kubernetes.client.ApiClient) -> None:
    """A fresh service account's token may do nothing: the cluster authorizes, it does not trust."""
    core = kubernetes.client.CoreV1Api(admin)
    core.create_namespace({"metadata": {"name": "rbac-probe"}})
    cluster.wait_for_service_account("rbac-probe", "default")
    token = core.create_namespaced_service_account_token(
        "default", "rbac-probe", {"spec": {"expirationSeconds": 600}}).status.token
    denied = cluster.kubectl("get", "secrets", "-n", "rbac-probe", check=False,
                             kubeconfig=cluster.token_kubeconfig("rbac-probe", token))
    assert denied.returncode != 0
    assert 'User "system:serviceaccount:rbac-probe:default" cannot list resource "secrets"' in denied.stderr


def test_the_controller_manager_turns_a_deployment_into_pods(
    cluster: ControlPlane, admin: kubernetes.client.ApiClient
) -> None:
    core = kubernetes.client.CoreV1Api(admin)
    core.create_namespace({"metadata": {"name": "controllers-probe"}})
    cluster.wait_for_service_account("controllers-probe", "default")
    cluster.kubectl("create", "deployment", "web", "--image=registry.invalid/web:1", "--replicas=2",
                    "-n", "controllers-probe")
    pods = cluster.kubectl("wait", "--for=jsonpath={.status.replicas}=2", "deployment/web",
                           "-n", "controllers-probe", "--timeout=120s", check=False)
    assert pods.returncode == 0, pods.stderr
    listed = core.list_namespaced_pod("controllers-probe").items
    assert len(listed) == 2
    assert all(pod.metadata.owner_references[0].kind == "ReplicaSet" for pod in listed)


# (name, whether a Service may have it): a Deployment's name is a DNS-1123 subdomain (dots, up to 253);
# a Service's is a DNS-1123 label (no dots, up to 63). A leading digit was refused for Services until
# RelaxedServiceNameValidation (beta and on in 1.36, GA and locked on in 1.37): this release accepts it.
WORKLOAD_NAMES = [("web.v2", False), ("a" * 253, False), ("a" * 64, False), ("a" * 63, True), ("1web", True)]


@pytest.mark.parametrize(("name", "service_too"), WORKLOAD_NAMES)
def test_which_workload_names_are_service_names_as_this_release_says(
    cluster: ControlPlane, name: str, service_too: bool
) -> None:
    manifest = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {"containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}}}
    accepted = cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(manifest), check=False)
    assert accepted.returncode == 0, accepted.stderr
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
               "spec": {"ports": [{"port": 443}]}}
    answer = cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(service), check=False)
    assert (answer.returncode == 0) is service_too, answer.stderr
    if not service_too:
        assert "metadata.name: Invalid value" in answer.stderr
