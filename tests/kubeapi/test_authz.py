"""SubjectAccessReview through the official client: answered from the stored RBAC objects."""

from __future__ import annotations

import kubernetes.client
import pytest

from tests.kubeapi import Emulator

ACCOUNT = "system:serviceaccount:ops:robot"


def _setup(emu: Emulator) -> None:
    rbac = "rbac.authorization.k8s.io/v1"
    emu.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ops"}})
    emu.add({"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": "reader"},
             "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
                       {"apiGroups": ["apps"], "resources": ["*"], "verbs": ["get"], "resourceNames": ["web"]}]})
    emu.add({"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": "reader"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"},
             "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "ops"}]})
    emu.add({"apiVersion": rbac, "kind": "Role", "metadata": {"name": "leases", "namespace": "ops"},
             "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]}]})
    emu.add({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "leases", "namespace": "ops"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leases"},
             "subjects": [{"kind": "Group", "name": "system:serviceaccounts:ops"}]})


@pytest.mark.parametrize(("attributes", "allowed"), [
    ({"verb": "list", "resource": "pods"}, True),
    ({"verb": "list", "resource": "pods", "namespace": "ops"}, True),
    ({"verb": "delete", "resource": "pods"}, False),
    ({"verb": "get", "group": "apps", "resource": "deployments", "namespace": "x", "name": "web"}, True),
    ({"verb": "get", "group": "apps", "resource": "deployments", "namespace": "x", "name": "api"}, False),
    ({"verb": "get", "group": "apps", "resource": "deployments", "namespace": "x"}, False),
    ({"verb": "update", "group": "coordination.k8s.io", "resource": "leases", "namespace": "ops"}, True),
    ({"verb": "update", "group": "coordination.k8s.io", "resource": "leases", "namespace": "default"}, False),
])
def test_a_review_answers_as_the_rbac_authorizer(kubeapi: Emulator, attributes: dict[str, str], allowed: bool) -> None:
    _setup(kubeapi)
    api = kubernetes.client.AuthorizationV1Api(kubeapi.api_client())
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": ACCOUNT, "groups": ["system:serviceaccounts", "system:serviceaccounts:ops"],
                     "resourceAttributes": attributes}}
    answer = api.create_subject_access_review(body)
    assert answer.status.allowed is allowed
    assert kubeapi.objects("subjectaccessreviews.authorization.k8s.io") == []  # answered, never stored


def test_a_review_without_attributes_is_a_bad_request(kubeapi: Emulator) -> None:
    api = kubernetes.client.AuthorizationV1Api(kubeapi.api_client())
    with pytest.raises(kubernetes.client.ApiException) as error:
        api.create_subject_access_review({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                                          "spec": {"user": ACCOUNT}})
    assert error.value.status == 400
