"""Label and field selectors: the grammar, the semantics, and lists filtered through the client."""

from __future__ import annotations

import kubernetes.client as k8s
import pytest
from kubernetes.client.exceptions import ApiException

from tests.kubeapi.errors import ApiError
from tests.kubeapi.selectors import matcher

LABELS = {"app": "web", "tier": "front", "version": "3"}


@pytest.mark.parametrize(("selector", "expected"), [
    ("app=web", True), ("app==web", True), ("app=api", False),
    ("app!=api", True), ("app!=web", False), ("missing!=x", True),
    ("app in (web,api)", True), ("app in (api)", False), ("app notin (api, db)", True), ("missing notin (x)", True),
    ("tier", True), ("missing", False), ("!missing", True), ("!tier", False),
    ("version>2", True), ("version<3", False), ("missing>1", False),
    ("app=web,tier=front", True), ("app=web,tier=back", False), ("app in (web,api),!missing", True),
    (" app = web , tier ", True), ("", True),
])
def test_label_selector_semantics_match_kubernetes(selector: str, expected: bool) -> None:
    assert matcher(selector, None, allowed=())({"metadata": {"labels": LABELS}}) is expected


@pytest.mark.parametrize("selector", ["app=(x)", "app in web", "=web", "app=we b", "bad key!=x", "version>two"])
def test_malformed_label_selectors_are_rejected_as_bad_requests(selector: str) -> None:
    with pytest.raises(ApiError) as exc:
        matcher(selector, None, allowed=())
    assert exc.value.code == 400


@pytest.mark.parametrize(("selector", "expected"), [
    ("metadata.name=a", True), ("metadata.name!=a", False), ("metadata.namespace=demo", True),
    ("type=kubernetes.io/tls", True), ("metadata.name=a,type!=Opaque", True),
])
def test_field_selectors_compare_fields(selector: str, expected: bool) -> None:
    obj = {"metadata": {"name": "a", "namespace": "demo"}, "type": "kubernetes.io/tls"}
    assert matcher(None, selector, allowed=("type",))(obj) is expected


def test_unsupported_field_labels_are_rejected_like_the_real_api() -> None:
    with pytest.raises(ApiError) as exc:
        matcher(None, "spec.whatever=x", allowed=())
    assert exc.value.code == 400
    assert "field label not supported" in exc.value.message


@pytest.fixture
def core(kube_client: k8s.ApiClient) -> k8s.CoreV1Api:
    api = k8s.CoreV1Api(kube_client)
    for ns in ("a", "b"):
        api.create_namespace({"metadata": {"name": ns}})
        for name, labels in {"web": {"app": "web", "tls": "on"}, "db": {"app": "db"}, "bare": {}}.items():
            api.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})
    return api


def names(items: list[k8s.V1ConfigMap]) -> list[str]:
    return [f"{c.metadata.namespace}/{c.metadata.name}" for c in items]


@pytest.mark.parametrize(("selector", "expected"), [
    ("app=web", ["a/web", "b/web"]),
    ("app!=web", ["a/bare", "a/db", "b/bare", "b/db"]),
    ("app in (web,db)", ["a/db", "a/web", "b/db", "b/web"]),
    ("app notin (web)", ["a/bare", "a/db", "b/bare", "b/db"]),
    ("tls", ["a/web", "b/web"]),
    ("!app", ["a/bare", "b/bare"]),
])
def test_list_through_the_client_filters_by_label_selector(core: k8s.CoreV1Api, selector: str,
                                                           expected: list[str]) -> None:
    assert names(core.list_config_map_for_all_namespaces(label_selector=selector).items) == expected


def test_list_in_a_namespace_combines_label_and_field_selectors(core: k8s.CoreV1Api) -> None:
    found = core.list_namespaced_config_map("b", label_selector="app", field_selector="metadata.name!=db")
    assert names(found.items) == ["b/web"]


def test_a_bad_selector_reaches_the_client_as_400(core: k8s.CoreV1Api) -> None:
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_config_map("a", label_selector="app in web")
    assert exc.value.status == 400
