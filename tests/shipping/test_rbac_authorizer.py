"""The test authorizer agrees with Kubernetes RBAC on the cases the manifests rely on."""

from __future__ import annotations

import pytest

from tests.shipping.rbac import Call, authorized, grants_for
from tests.shipping.support import Obj

SA = {"kind": "ServiceAccount", "namespace": "inj", "name": "bot"}


def _objects() -> list[Obj]:
    return [
        {"kind": "ClusterRole", "metadata": {"name": "read"},
         "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]},
                   {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["mine"], "verbs": ["get"]}]},
        {"kind": "ClusterRoleBinding", "metadata": {"name": "read"}, "subjects": [SA],
         "roleRef": {"kind": "ClusterRole", "name": "read"}},
        {"kind": "Role", "metadata": {"name": "lease", "namespace": "inj"},
         "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                   {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["l"],
                    "verbs": ["get", "update"]}]},
        {"kind": "RoleBinding", "metadata": {"name": "lease", "namespace": "inj"}, "subjects": [SA],
         "roleRef": {"kind": "Role", "name": "lease"}},
        {"kind": "ClusterRole", "metadata": {"name": "other"},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}]},
        {"kind": "ClusterRoleBinding", "metadata": {"name": "other"},
         "subjects": [{"kind": "ServiceAccount", "namespace": "inj", "name": "someone-else"}],
         "roleRef": {"kind": "ClusterRole", "name": "other"}},
    ]


@pytest.mark.parametrize(
    ("call", "allowed"),
    [
        (Call("list", "apps", "deployments", None, None), True),
        (Call("watch", "apps", "deployments", "shop", None), True),
        (Call("get", "apps", "deployments", "shop", "web"), False),
        (Call("get", "", "secrets", "shop", "mine"), True),
        (Call("get", "", "secrets", "shop", "theirs"), False),
        (Call("list", "", "secrets", "shop", None), False),
        (Call("create", "coordination.k8s.io", "leases", "inj", "l"), True),
        (Call("create", "coordination.k8s.io", "leases", "shop", "l"), False),
        (Call("update", "coordination.k8s.io", "leases", "inj", "l"), True),
        (Call("update", "coordination.k8s.io", "leases", "inj", "other"), False),
        (Call("delete", "", "pods", "shop", "p"), False),
    ],
)
def test_the_authorizer_applies_scope_resource_names_and_subjects_like_rbac(call: Call, allowed: bool) -> None:
    grants = grants_for(_objects(), namespace="inj", account="bot")
    assert authorized(grants, call) is allowed


def test_a_call_parsed_from_the_emulator_log_splits_group_from_resource() -> None:
    assert Call.of("list", "deployments.apps", None, None) == Call("list", "apps", "deployments", None, None)
    assert Call.of("get", "secrets", "ns", "s") == Call("get", "", "secrets", "ns", "s")
    assert Call.of("update", "leases.coordination.k8s.io", "n", "l").group == "coordination.k8s.io"
