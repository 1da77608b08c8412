"""Discovery: which workloads opted in, and which Secret with which names each namespace needs."""

from __future__ import annotations

from typing import Any

import pytest

from app.reconcile.discover import discover, enabled_namespaces, opted_in

INJECT = "tls-injector.io/inject"


def workload(name: str, namespace: str = "apps", *, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None, template_annotations: dict[str, str] | None = None
             ) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "annotations": annotations or {}},
        "spec": {"template": {"metadata": {"labels": labels or {}, "annotations": template_annotations or {}}}},
    }


def pod(name: str, namespace: str = "apps", *, labels: dict[str, str], controlled: bool = False) -> dict[str, Any]:
    owners = [{"kind": "ReplicaSet", "name": "rs", "controller": True}] if controlled else []
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": owners}}


@pytest.mark.parametrize(
    ("label", "namespace_enabled", "expected"),
    [
        ("true", False, True),
        ("true", True, True),
        (None, True, True),
        ("false", True, False),
        (None, False, False),
        ("false", False, False),
        ("yes", False, False),  # only the exact value opts in
        ("TRUE", False, False),
    ],
)
def test_opt_in_follows_the_pod_label_then_the_namespace_label(
    label: str | None, namespace_enabled: bool, expected: bool
) -> None:
    labels = {INJECT: label} if label is not None else {}
    assert opted_in(labels, namespace_enabled=namespace_enabled) is expected


def test_only_namespaces_labelled_enabled_count() -> None:
    namespaces: list[dict[str, Any]] = [
        {"metadata": {"name": "a", "labels": {INJECT: "enabled"}}},
        {"metadata": {"name": "b", "labels": {INJECT: "true"}}},
        {"metadata": {"name": "c"}},
    ]
    assert enabled_namespaces(namespaces) == {"a"}


def test_an_opted_in_deployment_gets_a_secret_named_after_it_with_its_service_names() -> None:
    [target] = discover([("Deployment", workload("web", labels={INJECT: "true"}))], [], enabled=set())
    assert (target.namespace, target.secret_name) == ("apps", "web-tls")
    assert target.dns_names == ("web", "web.apps", "web.apps.svc", "web.apps.svc.cluster.local")
    assert [str(w) for w in target.workloads] == ["Deployment/web"]


def test_template_annotations_choose_the_secret_and_services_and_win_over_the_workload_ones() -> None:
    obj = workload("db", labels={INJECT: "true"},
                   annotations={"tls-injector.io/secret-name": "ignored", "tls-injector.io/service-names": "x"},
                   template_annotations={"tls-injector.io/secret-name": "db-certs"})
    [target] = discover([("StatefulSet", obj)], [], enabled=set(), cluster_domain="example.org")
    assert target.secret_name == "db-certs"
    assert target.dns_names == ("x", "x.apps", "x.apps.svc", "x.apps.svc.example.org")


def test_workloads_sharing_a_secret_share_one_target_with_the_union_of_their_names() -> None:
    shared = {"tls-injector.io/secret-name": "shared"}
    a = workload("a", labels={INJECT: "true"}, template_annotations=shared)
    b = workload("b", labels={INJECT: "true"}, template_annotations=shared)
    [target] = discover([("Deployment", a), ("DaemonSet", b)], [], enabled=set())
    assert {"a", "b"} <= set(target.dns_names)
    assert [str(w) for w in target.workloads] == ["DaemonSet/b", "Deployment/a"]


def test_namespace_opt_in_covers_unlabelled_workloads_but_not_opted_out_ones() -> None:
    workloads = [("Deployment", workload("in")), ("Deployment", workload("out", labels={INJECT: "false"})),
                 ("Deployment", workload("elsewhere", namespace="other"))]
    targets = discover(workloads, [], enabled={"apps"})
    assert [t.secret_name for t in targets] == ["in-tls"]


def test_bare_pods_count_but_pods_run_by_a_controller_do_not() -> None:
    pods = [pod("bare", labels={INJECT: "true"}), pod("web-abc", labels={INJECT: "true"}, controlled=True)]
    targets = discover([], pods, enabled=set())
    assert [(t.secret_name, str(t.workloads[0])) for t in targets] == [("bare-tls", "Pod/bare")]
    assert targets[0].workloads[0].api_version == "v1"
