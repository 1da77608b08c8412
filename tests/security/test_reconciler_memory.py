"""A tenant cannot outgrow the reconciler's memory with objects it is allowed to make.

Before, a pass listed every Service of the cluster and every workload whole, 500 to a page: 40 valid
Services of ~600 KB (40,000-label selectors) in a namespace with nothing opted in took the reconciler to
415 MiB against its 256 MiB limit, and 40 such Deployments the same. Now (app/reconcile/core/read.py,
app/kube/api.py): Services are read only in namespaces where something opted in; each listed object is
kept as discovery reads it, a page at a time; a page holds at most `page_bytes` of JSON (one over it is
asked again with a smaller limit, and an object alone over it is skipped by name); an object whose kept
part is over its kind's cap is left out with its reason (log, report, Event) and the rest goes on.
The peak memory itself is a benchmark (`python -m bench.reconcile --hostile 40`), not a test.
"""

from __future__ import annotations

import base64

import pytest
from cryptography import x509

from tests.kubeapi import Emulator
from tests.reconcile.cluster import OWN_NS, Clock, deployment, namespace, reconciler
from tls_injector.kube import SERVICES, KubeApi, ListTooLarge
from tls_injector.reconcile.core.read import (
    MAX_SERVICE_BYTES,
    MAX_WORKLOAD_BYTES,
    SERVICE_LISTS,
    read_cluster,
    service_shape,
    workload_shape,
)


def dns_names(emu: Emulator, ns: str, secret: str) -> list[str]:
    pem = base64.b64decode(emu.get("secrets", secret, ns)["data"]["tls.crt"])
    san = x509.load_pem_x509_certificate(pem).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    return san.value.get_values_for_type(x509.DNSName)


def selector(labels: int) -> dict[str, str]:
    """A valid selector of `labels` labels (each key a DNS-1123 label, each value too): ~15 bytes each."""
    return {f"k{i}": f"v{i}" for i in range(labels)}


def service(emu: Emulator, name: str, ns: str, chosen: dict[str, str]) -> None:
    emu.add({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
             "spec": {"selector": chosen, "ports": [{"port": 443}]}})


def big_deployment(emu: Emulator, name: str, ns: str, labels: int) -> None:
    """A valid Deployment whose pod template carries `labels` labels beyond the opt-in, and not opted in."""
    pod_labels = {"app": name, **selector(labels)}
    emu.add({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
             "spec": {"selector": {"matchLabels": {"app": name}},
                      "template": {"metadata": {"labels": pod_labels},
                                   "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}}}})


def test_services_of_a_namespace_where_nothing_opted_in_are_never_read(kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "shop")
    deployment(kubeapi, "web", "shop")
    service(kubeapi, "front", "shop", {"app": "web"})
    namespace(kubeapi, "idle")
    for i in range(3):
        service(kubeapi, f"huge{i}", "idle", selector(2_000))
    kubeapi.reset_log()
    report = reconciler(kubeapi, Clock()).run_pass()
    assert report.converged, report
    service_lists = {(r.namespace or "*") for r in kubeapi.log if r.verb == "list" and r.resource == "services"}
    assert service_lists == {"shop"}
    # The Service of the opted-in namespace still names its workload's certificate.
    assert "front.shop.svc" in dns_names(kubeapi, "shop", "web-tls")


def test_an_oversized_service_where_a_workload_opted_in_is_left_out_with_its_reason_and_the_rest_goes_on(
        kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "shop")
    deployment(kubeapi, "web", "shop")
    service(kubeapi, "web", "shop", {"app": "web"})
    service(kubeapi, "huge", "shop", {"app": "web", **selector(1_000)})  # ~15 KB of selector
    rec = reconciler(kubeapi, Clock())
    report = rec.run_pass()
    [said] = [r for r in report.refused if "huge" in r]
    assert "Service shop/huge" in said
    assert str(MAX_SERVICE_BYTES) in said
    assert not report.failed
    assert kubeapi.get("secrets", "web-tls", "shop")["data"]["tls.crt"]
    events = [e for e in kubeapi.objects("events") if e["reason"] == "ObjectTooLarge"]
    assert [(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events] == [("Service", "huge")]
    rec.run_pass()  # said again in the report, not in a second Event
    assert len([e for e in kubeapi.objects("events") if e["reason"] == "ObjectTooLarge"]) == 1


def test_a_list_page_over_the_byte_budget_is_read_again_smaller_and_nothing_is_lost(kubeapi: Emulator) -> None:
    namespace(kubeapi, "shop")
    for i in range(40):
        service(kubeapi, f"s{i:02}", "shop", selector(100 if i % 10 else 2_000))  # four of ~30 KB, 36 of ~1.5 KB
    api = KubeApi(kubeapi.api_client(), page_bytes=64 * 1024)
    kubeapi.reset_log()
    listed = api.list_objects(SERVICES, namespace="shop")
    assert sorted(s["metadata"]["name"] for s in listed.items) == [f"s{i:02}" for i in range(40)]
    assert listed.oversized == ()
    assert len([r for r in kubeapi.log if r.verb == "list"]) > 1


def test_an_object_alone_over_the_page_budget_is_skipped_by_name_and_the_list_goes_on(kubeapi: Emulator) -> None:
    namespace(kubeapi, "shop")
    for name in ("a", "b", "c"):
        service(kubeapi, name, "shop", selector(10))
    service(kubeapi, "bb", "shop", selector(20_000))  # ~300 KB: over the 64 KiB page by itself
    api = KubeApi(kubeapi.api_client(), page_bytes=64 * 1024)
    listed = api.list_objects(SERVICES, namespace="shop", max_object_bytes=MAX_SERVICE_BYTES)
    assert [s["metadata"]["name"] for s in listed.items] == ["a", "b", "c"]
    [skipped] = listed.oversized
    assert (skipped.namespace, skipped.name) == ("shop", "bb")
    assert skipped.size > 64 * 1024
    # A caller that gives no cap cannot report what it would lose: the list fails instead.
    with pytest.raises(ListTooLarge):
        api.list_objects(SERVICES, namespace="shop")


def test_a_kept_part_over_its_cap_is_left_out_and_named() -> None:
    # As read.py keeps them: a Service as its selector; a workload that did not opt in as almost nothing.
    assert service_shape({"metadata": {"name": "s", "namespace": "n", "managedFields": [{}] * 100},
                          "spec": {"selector": {"a": "b"}, "ports": [{"port": 1}] * 100}}) == {
        "metadata": {"name": "s", "namespace": "n"}, "spec": {"selector": {"a": "b"}}}
    huge = {"apiVersion": "apps/v1", "metadata": {"name": "d", "namespace": "idle"},
            "spec": {"template": {"metadata": {"labels": selector(40_000)}, "spec": {"containers": []}}}}
    opted: set[str] = set()
    assert workload_shape("Deployment", huge, enabled=set(), opted=opted)["spec"]["template"] == {
        "metadata": {"labels": {}, "annotations": {}}}
    assert opted == set()
    joined = {**huge, "metadata": {"name": "d", "namespace": "shop"}}
    kept = workload_shape("Deployment", joined, enabled={"shop"}, opted=opted)
    assert len(kept["spec"]["template"]["metadata"]["labels"]) == 40_000
    assert opted == {"shop"}


def test_forty_large_deployments_that_opted_nothing_in_are_kept_as_stubs_and_an_opted_in_one_is_refused(
        kubeapi: Emulator) -> None:
    namespace(kubeapi, OWN_NS)
    namespace(kubeapi, "idle")
    for i in range(40):
        big_deployment(kubeapi, f"big{i}", "idle", 300)
    namespace(kubeapi, "shop", enabled=True)
    big_deployment(kubeapi, "fat", "shop", 3_000)  # opted in by its namespace, ~45 KB of labels kept
    deployment(kubeapi, "web", "shop")
    rec = reconciler(kubeapi, Clock())
    report = rec.run_pass()
    assert [r for r in report.refused if "Deployment shop/fat" in r and str(MAX_WORKLOAD_BYTES) in r]
    assert kubeapi.get("secrets", "web-tls", "shop")["data"]["tls.crt"]
    assert not [s for s in kubeapi.objects("secrets") if s["metadata"]["namespace"] == "idle"]


def test_past_the_per_namespace_lists_one_cluster_wide_list_keeps_only_the_opted_in_namespaces_services(
        kubeapi: Emulator) -> None:
    namespace(kubeapi, "idle")
    for i in range(3):
        service(kubeapi, f"huge{i}", "idle", selector(2_000))  # over the cap, but in no namespace that matters
    for n in range(SERVICE_LISTS + 1):
        namespace(kubeapi, f"ns{n}", enabled=True)
        service(kubeapi, "web", f"ns{n}", {"app": "web"})
    kubeapi.reset_log()
    observed = read_cluster(KubeApi(kubeapi.api_client()))
    assert [(r.namespace or "*") for r in kubeapi.log if r.verb == "list" and r.resource == "services"] == ["*"]
    assert sorted(s["metadata"]["namespace"] for s in observed.services) == sorted(
        f"ns{n}" for n in range(SERVICE_LISTS + 1))
    assert observed.oversized == []
