"""Create, read, update, patch and delete through the official client, with the real API's answers."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any

import kubernetes.client as k8s
import pytest
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import Emulator
from tests.kubeapi.store import GENERATE_NAME_ALPHABET


def status_body(exc: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.value.body)
    assert body["kind"] == "Status"
    assert body["code"] == exc.value.status
    return body


def status_of(exc: pytest.ExceptionInfo[ApiException]) -> tuple[int, str]:
    return exc.value.status, status_body(exc)["reason"]


def secret(name: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, **extra}, "data": {"k": "dg=="}}


def test_create_sets_server_fields_and_get_returns_the_same_object(core: k8s.CoreV1Api) -> None:
    created = core.create_namespaced_secret("demo", secret("a"))
    fetched = core.read_namespaced_secret("a", "demo")
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert created.metadata.namespace == "demo"
    assert fetched.metadata.resource_version == created.metadata.resource_version
    assert fetched.metadata.uid == created.metadata.uid
    assert fetched.data == {"k": "dg=="}
    assert fetched.type == "Opaque"


def test_every_write_gets_a_higher_resource_version_from_one_global_counter(core: k8s.CoreV1Api) -> None:
    a = core.create_namespaced_secret("demo", secret("a"))
    b = core.create_namespaced_config_map("demo", {"metadata": {"name": "b"}})
    a2 = core.patch_namespaced_secret("a", "demo", {"metadata": {"labels": {"x": "y"}}})
    versions = [int(o.metadata.resource_version) for o in (a, b, a2)]
    assert versions == sorted(versions)
    assert len(set(versions)) == 3


def test_creating_an_existing_name_is_409_already_exists(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_secret("demo", secret("a"))
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_secret("demo", secret("a"))
    assert status_of(exc) == (409, "AlreadyExists")


def test_creating_in_a_missing_namespace_is_404(core: k8s.CoreV1Api) -> None:
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_secret("nowhere", secret("a"))
    assert status_of(exc) == (404, "NotFound")
    assert status_body(exc)["message"] == 'namespaces "nowhere" not found'


@pytest.mark.parametrize("call", [
    lambda api: api.read_namespaced_secret("missing", "demo"),
    lambda api: api.replace_namespaced_secret("missing", "demo", secret("missing")),
    lambda api: api.patch_namespaced_secret("missing", "demo", {"metadata": {"labels": {"a": "b"}}}),
    lambda api: api.delete_namespaced_secret("missing", "demo"),
])
def test_every_verb_on_a_missing_object_is_404(core: k8s.CoreV1Api, call: Callable[[Any], Any]) -> None:
    with pytest.raises(ApiException) as exc:
        call(core)
    assert status_of(exc) == (404, "NotFound")


def test_replace_with_a_stale_resource_version_is_409_conflict(core: k8s.CoreV1Api) -> None:
    stale = core.create_namespaced_secret("demo", secret("a"))
    core.patch_namespaced_secret("a", "demo", {"metadata": {"labels": {"by": "someone-else"}}})
    stale.data = {"k": "bmV3"}
    with pytest.raises(ApiException) as exc:
        core.replace_namespaced_secret("a", "demo", stale)
    assert status_of(exc) == (409, "Conflict")
    assert core.read_namespaced_secret("a", "demo").data == {"k": "dg=="}


def test_replace_with_the_current_resource_version_succeeds(core: k8s.CoreV1Api) -> None:
    current = core.create_namespaced_secret("demo", secret("a"))
    current.data = {"k": "bmV3"}
    replaced = core.replace_namespaced_secret("a", "demo", current)
    assert replaced.data == {"k": "bmV3"}
    assert int(replaced.metadata.resource_version) > int(current.metadata.resource_version)


def test_replace_without_resource_version_is_unconditional(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_secret("demo", secret("a"))
    core.patch_namespaced_secret("a", "demo", {"metadata": {"labels": {"x": "y"}}})
    replaced = core.replace_namespaced_secret("a", "demo", {"metadata": {"name": "a"}, "data": {"z": "eg=="}})
    assert replaced.data == {"z": "eg=="}
    assert not replaced.metadata.labels


def test_an_update_that_changes_nothing_keeps_the_resource_version(core: k8s.CoreV1Api, kubeapi: Emulator) -> None:
    created = core.create_namespaced_secret("demo", secret("a"))
    before = kubeapi.resource_version
    same = core.replace_namespaced_secret("a", "demo", created)
    assert same.metadata.resource_version == created.metadata.resource_version
    assert kubeapi.resource_version == before


def test_string_data_is_stored_as_base64_data_like_the_real_api(core: k8s.CoreV1Api) -> None:
    made = core.create_namespaced_secret("demo", {"metadata": {"name": "s"}, "data": {"a": "YQ=="},
                                                  "stringData": {"b": "bee"}})
    assert made.data == {"a": "YQ==", "b": base64.b64encode(b"bee").decode()}
    assert made.string_data is None


def test_generate_name_gets_a_five_character_suffix_and_unique_names(core: k8s.CoreV1Api) -> None:
    names = {core.create_namespaced_config_map("demo", {"metadata": {"generateName": "cm-"}}).metadata.name
             for _ in range(20)}
    assert len(names) == 20
    assert all(re.fullmatch(rf"cm-[{GENERATE_NAME_ALPHABET}]{{5}}", n) for n in names)


def test_neither_name_nor_generate_name_is_422_invalid(core: k8s.CoreV1Api) -> None:
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_config_map("demo", {"metadata": {}})
    assert status_of(exc) == (422, "Invalid")


def test_delete_with_a_stale_precondition_is_409_and_keeps_the_object(core: k8s.CoreV1Api) -> None:
    created = core.create_namespaced_secret("demo", secret("a"))
    core.patch_namespaced_secret("a", "demo", {"metadata": {"labels": {"x": "y"}}})
    options = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(resource_version=created.metadata.resource_version))
    with pytest.raises(ApiException) as exc:
        core.delete_namespaced_secret("a", "demo", body=options)
    assert status_of(exc) == (409, "Conflict")
    assert core.read_namespaced_secret("a", "demo").metadata.labels == {"x": "y"}


def test_deleting_a_namespace_deletes_everything_in_it(core: k8s.CoreV1Api, kubeapi: Emulator) -> None:
    core.create_namespaced_secret("demo", secret("a"))
    core.create_namespaced_config_map("demo", {"metadata": {"name": "b"}})
    core.create_namespaced_secret("default", secret("kept"))
    core.delete_namespace("demo")
    with pytest.raises(ApiException) as exc:
        core.read_namespace("demo")
    assert exc.value.status == 404
    assert [s["metadata"]["name"] for s in kubeapi.objects("secrets")] == ["kept"]
    assert kubeapi.objects("configmaps") == []


def test_namespaces_are_cluster_scoped_and_carry_the_name_label(core: k8s.CoreV1Api) -> None:
    ns = core.read_namespace("demo")
    assert ns.metadata.namespace is None
    assert ns.metadata.labels == {"kubernetes.io/metadata.name": "demo"}
    assert ns.status.phase == "Active"
    names = [n.metadata.name for n in core.list_namespace().items]
    assert names == sorted(names)
    assert "default" in names
    assert "demo" in names


def test_list_across_namespaces_and_in_one_namespace(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_secret("demo", secret("a"))
    core.create_namespaced_secret("default", secret("b"))
    everywhere = core.list_secret_for_all_namespaces()
    assert [(s.metadata.namespace, s.metadata.name) for s in everywhere.items] == [("default", "b"), ("demo", "a")]
    assert [s.metadata.name for s in core.list_namespaced_secret("demo").items] == ["a"]
    newest = core.read_namespaced_secret("a", "demo").metadata.resource_version
    assert int(everywhere.metadata.resource_version) >= int(newest)


def test_list_pages_with_limit_and_continue(core: k8s.CoreV1Api) -> None:
    for i in range(5):
        core.create_namespaced_config_map("demo", {"metadata": {"name": f"cm-{i}"}})
    first = core.list_namespaced_config_map("demo", limit=2)
    second = core.list_namespaced_config_map("demo", limit=2, _continue=first.metadata._continue)
    third = core.list_namespaced_config_map("demo", limit=2, _continue=second.metadata._continue)
    names = [c.metadata.name for page in (first, second, third) for c in page.items]
    assert names == [f"cm-{i}" for i in range(5)]
    assert first.metadata.remaining_item_count == 3
    assert third.metadata._continue is None


def test_list_pages_with_a_selector_across_namespaces_skip_nothing_and_count_nothing(core: k8s.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "zz"}})
    for ns in ("demo", "zz"):
        for i in range(4):
            labels = {"keep": "yes"} if i % 2 == 0 else {}
            core.create_namespaced_config_map(ns, {"metadata": {"name": f"cm-{i}", "labels": labels}})
    pages, token = [], None
    while True:
        page = core.list_config_map_for_all_namespaces(label_selector="keep=yes", limit=1, _continue=token)
        pages.append([(c.metadata.namespace, c.metadata.name) for c in page.items])
        # As in the real API: with a selector the number of remaining items is unknown, so it is left out.
        assert page.metadata.remaining_item_count is None
        token = page.metadata._continue
        if not token:
            break
    assert pages == [[("demo", "cm-0")], [("demo", "cm-2")], [("zz", "cm-0")], [("zz", "cm-2")]]


def test_merge_patch_resource_version_is_a_precondition(core: k8s.CoreV1Api) -> None:
    created = core.create_namespaced_secret("demo", secret("a"))
    core.patch_namespaced_secret("a", "demo", {"metadata": {"labels": {"x": "1"}}})
    stale = {"metadata": {"resourceVersion": created.metadata.resource_version, "labels": {"x": "2"}}}
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_secret("a", "demo", stale, _content_type="application/merge-patch+json")
    assert status_of(exc) == (409, "Conflict")


def test_merge_patch_null_removes_a_key(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_secret("demo", secret("a", labels={"x": "1", "y": "2"}))
    patched = core.patch_namespaced_secret("a", "demo", {"metadata": {"labels": {"x": None}}},
                                           _content_type="application/merge-patch+json")
    assert patched.metadata.labels == {"y": "2"}


def test_json_patch_applies_operations_and_a_failed_test_is_422(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_secret("demo", secret("a"))
    patched = core.patch_namespaced_secret("a", "demo", [{"op": "add", "path": "/data/n", "value": "bg=="}])
    assert patched.data == {"k": "dg==", "n": "bg=="}
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_secret("a", "demo", [{"op": "test", "path": "/data/k", "value": "other"}])
    assert status_of(exc) == (422, "Invalid")


def deployment(name: str, *, containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": containers or [
                {"name": "main", "image": "nginx", "env": [{"name": "A", "value": "1"}]}]},
        }},
    }


def test_strategic_merge_patch_merges_containers_by_name(kube_client: k8s.ApiClient, core: k8s.CoreV1Api) -> None:
    apps = k8s.AppsV1Api(kube_client)
    apps.create_namespaced_deployment("demo", deployment("web"))
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "main", "env": [{"name": "B", "value": "2"}]},
        {"name": "sidecar", "image": "envoy"},
    ]}}}}
    patched = apps.patch_namespaced_deployment("web", "demo", patch)
    containers = patched.spec.template.spec.containers
    assert [(c.name, c.image) for c in containers] == [("main", "nginx"), ("sidecar", "envoy")]
    assert [(e.name, e.value) for e in containers[0].env] == [("B", "2"), ("A", "1")], "new first, as the apiserver"


def test_strategic_patch_delete_directive_removes_a_list_element(kube_client: k8s.ApiClient,
                                                                 core: k8s.CoreV1Api) -> None:
    apps = k8s.AppsV1Api(kube_client)
    two = [{"name": "main", "image": "nginx"}, {"name": "sidecar", "image": "envoy"}]
    apps.create_namespaced_deployment("demo", deployment("web", containers=two))
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}}}
    patched = apps.patch_namespaced_deployment("web", "demo", patch)
    assert [c.name for c in patched.spec.template.spec.containers] == ["main"]


def test_workload_generation_bumps_on_spec_change_and_status_is_not_writable(kube_client: k8s.ApiClient,
                                                                             core: k8s.CoreV1Api) -> None:
    apps = k8s.AppsV1Api(kube_client)
    made = apps.create_namespaced_deployment("demo", {**deployment("web"), "status": {"replicas": 9}})
    assert made.metadata.generation == 1
    assert made.status.replicas is None
    labelled = apps.patch_namespaced_deployment("web", "demo", {"metadata": {"labels": {"x": "y"}}})
    scaled = apps.patch_namespaced_deployment("web", "demo", {"spec": {"replicas": 3}, "status": {"replicas": 3}})
    assert labelled.metadata.generation == 1
    assert scaled.metadata.generation == 2
    assert scaled.status.replicas is None
    status = apps.patch_namespaced_deployment_status("web", "demo", {"status": {"replicas": 3}})
    assert status.status.replicas == 3
    assert status.spec.replicas == 3


@pytest.mark.parametrize(("body", "field"), [
    ({"metadata": {"name": "Bad_Name"}}, "metadata.name"),
    ({"metadata": {"name": "t"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "eA=="}}, "data[tls.key]"),
    ({"metadata": {"name": "k"}, "data": {"bad key": "eA=="}}, "data[bad key]"),
    ({"metadata": {"name": "l", "labels": {"x": "not valid!"}}}, "metadata.labels"),
])
def test_invalid_secrets_are_422_naming_the_field(core: k8s.CoreV1Api, body: dict[str, Any], field: str) -> None:
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_secret("demo", body)
    assert status_of(exc) == (422, "Invalid")
    assert field in [c["field"] for c in status_body(exc)["details"]["causes"]]


def test_invalid_base64_in_secret_data_is_400(core: k8s.CoreV1Api) -> None:
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_secret("demo", {"metadata": {"name": "b"}, "data": {"k": "not base64!"}})
    assert status_of(exc) == (400, "BadRequest")


def test_secret_type_is_immutable(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_secret("demo", secret("a"))
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_secret("a", "demo", {"type": "example.com/other"})
    assert status_of(exc) == (422, "Invalid")


def test_a_deployment_whose_selector_misses_its_template_is_422(kube_client: k8s.ApiClient,
                                                                core: k8s.CoreV1Api) -> None:
    body = deployment("web")
    body["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with pytest.raises(ApiException) as exc:
        k8s.AppsV1Api(kube_client).create_namespaced_deployment("demo", body)
    assert status_of(exc) == (422, "Invalid")


def webhook_config(ca: str) -> dict[str, Any]:
    hook = {"name": "mutate.tls-injector.io", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"name": "tls-injector", "namespace": "tls-injector", "path": "/mutate"},
                             "caBundle": ca},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}
    return {"metadata": {"name": "tls-injector"}, "webhooks": [hook]}


def test_webhook_configurations_are_cluster_scoped_and_patchable_by_webhook_name(kube_client: k8s.ApiClient) -> None:
    admission = k8s.AdmissionregistrationV1Api(kube_client)
    admission.create_mutating_webhook_configuration(webhook_config(base64.b64encode(b"old").decode()))
    new_ca = base64.b64encode(b"new").decode()
    patch = {"webhooks": [{"name": "mutate.tls-injector.io", "clientConfig": {"caBundle": new_ca}}]}
    patched = admission.patch_mutating_webhook_configuration("tls-injector", patch)
    hook = patched.webhooks[0]
    assert hook.client_config.ca_bundle == new_ca  # bytes travel base64-encoded; the client leaves them so
    assert hook.rules[0].resources == ["pods"]
    assert hook.client_config.service.path == "/mutate"
    assert patched.metadata.namespace is None


def test_a_webhook_without_admission_review_versions_is_422(kube_client: k8s.ApiClient) -> None:
    body = webhook_config("")
    body["webhooks"][0]["admissionReviewVersions"] = []
    with pytest.raises(ApiException) as exc:
        k8s.AdmissionregistrationV1Api(kube_client).create_validating_webhook_configuration(body)
    assert status_of(exc) == (422, "Invalid")


def test_leases_support_optimistic_takeover(kube_client: k8s.ApiClient, core: k8s.CoreV1Api) -> None:
    leases = k8s.CoordinationV1Api(kube_client)
    lease = leases.create_namespaced_lease("demo", {"metadata": {"name": "leader"},
                                                    "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})
    lease.spec.holder_identity = "b"
    leases.replace_namespaced_lease("leader", "demo", lease)
    lease.spec.holder_identity = "c"  # same, now stale, resourceVersion: the loser of the race
    with pytest.raises(ApiException) as exc:
        leases.replace_namespaced_lease("leader", "demo", lease)
    assert exc.value.status == 409
    assert leases.read_namespaced_lease("leader", "demo").spec.holder_identity == "b"


def test_events_in_both_apis(kube_client: k8s.ApiClient, core: k8s.CoreV1Api) -> None:
    core.create_namespaced_event("demo", {
        "metadata": {"generateName": "web."}, "reason": "Issued", "message": "certificate issued", "type": "Normal",
        "involvedObject": {"kind": "Deployment", "namespace": "demo", "name": "web", "apiVersion": "apps/v1"}})
    events = k8s.EventsV1Api(kube_client)
    events.create_namespaced_event("demo", {
        "metadata": {"generateName": "web."}, "eventTime": "2026-01-01T00:00:00.000000Z", "type": "Normal",
        "reportingController": "tls-injector.io/reconciler", "reportingInstance": "pod-1", "action": "Issue",
        "reason": "Issued", "regarding": {"kind": "Deployment", "namespace": "demo", "name": "web"}})
    listed = core.list_namespaced_event("demo", field_selector="involvedObject.name=web,reason=Issued")
    assert [e.message for e in listed.items] == ["certificate issued"]
    assert len(events.list_namespaced_event("demo").items) == 1
    with pytest.raises(ApiException) as exc:
        events.create_namespaced_event("demo", {"metadata": {"name": "incomplete"}, "type": "Normal",
                                                "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": ""})
    assert status_of(exc) == (422, "Invalid")


def test_dry_run_validates_without_storing(core: k8s.CoreV1Api, kubeapi: Emulator) -> None:
    before = kubeapi.resource_version
    made = core.create_namespaced_secret("demo", secret("a"), dry_run="All")
    assert made.metadata.name == "a"
    assert kubeapi.get("secrets", "a", "demo") is None
    assert kubeapi.resource_version == before


def test_services_pods_and_service_accounts_round_trip(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_service("demo", {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 443}]}})
    pod_spec = {"containers": [{"name": "c", "image": "i"}]}
    core.create_namespaced_pod("demo", {"metadata": {"name": "p"}, "spec": pod_spec})
    core.create_namespaced_service_account("demo", {"metadata": {"name": "sa"}})
    assert core.read_namespaced_service("web", "demo").spec.ports[0].port == 443
    assert core.read_namespaced_pod("p", "demo").status.phase == "Pending"
    assert core.read_namespaced_service_account("sa", "demo").metadata.name == "sa"
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("demo", {"metadata": {"name": "empty"}, "spec": {"containers": []}})
    assert status_of(exc) == (422, "Invalid")


def test_delete_collection_removes_only_the_selected_objects(core: k8s.CoreV1Api, kubeapi: Emulator) -> None:
    for name, labels in {"a": {"owned": "yes"}, "b": {"owned": "yes"}, "c": {}}.items():
        core.create_namespaced_config_map("demo", {"metadata": {"name": name, "labels": labels}})
    core.delete_collection_namespaced_config_map("demo", label_selector="owned=yes")
    assert [c["metadata"]["name"] for c in kubeapi.objects("configmaps", "demo")] == ["c"]


def test_discovery_documents_list_the_served_groups_and_resources(kube_client: k8s.ApiClient) -> None:
    assert k8s.CoreApi(kube_client).get_api_versions().versions == ["v1"]
    groups = {g.name for g in k8s.ApisApi(kube_client).get_api_versions().groups}
    assert groups == {"apps", "coordination.k8s.io", "admissionregistration.k8s.io", "events.k8s.io",
                      "rbac.authorization.k8s.io", "scheduling.k8s.io", "networking.k8s.io", "policy", "batch",
                      "apiextensions.k8s.io", "authorization.k8s.io"}
    core = {r.name: r.namespaced for r in k8s.CoreV1Api(kube_client).get_api_resources().resources}
    assert core["namespaces"] is False
    assert core["secrets"] is True
    assert k8s.VersionApi(kube_client).get_code().major == "1"


def test_lease_micro_times_round_trip_through_the_client_models(kube_client: k8s.ApiClient) -> None:
    from datetime import UTC, datetime

    leases = k8s.CoordinationV1Api(kube_client)
    renewed = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    body = k8s.V1Lease(metadata=k8s.V1ObjectMeta(name="leader"),
                       spec=k8s.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15, renew_time=renewed))
    leases.create_namespaced_lease("default", body)
    assert leases.read_namespaced_lease("leader", "default").spec.renew_time == renewed


def test_delete_answers_the_object_or_a_status_as_the_client_models_expect(core: k8s.CoreV1Api) -> None:
    pod_spec = {"containers": [{"name": "c", "image": "i"}]}
    core.create_namespaced_pod("demo", {"metadata": {"name": "p"}, "spec": pod_spec})
    core.create_namespaced_service("demo", {"metadata": {"name": "s"}})
    core.create_namespaced_service_account("demo", {"metadata": {"name": "sa"}})
    core.create_namespaced_secret("demo", secret("x"))
    assert core.delete_namespaced_pod("p", "demo").metadata.name == "p"
    assert core.delete_namespaced_service("s", "demo").metadata.name == "s"
    assert core.delete_namespaced_service_account("sa", "demo").metadata.name == "sa"
    assert core.delete_namespaced_secret("x", "demo")["status"] == "Success"
    assert core.delete_namespace("demo")["status"] == {"phase": "Terminating"}
