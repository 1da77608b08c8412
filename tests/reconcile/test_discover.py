"""Discovery: which workloads opted in, and which Secret with which names each namespace needs."""

from __future__ import annotations

from typing import Any

import pytest

from tls_injector.reconcile.core.discover import (
    MAX_REMEMBERED_RECORD,
    _recorded_mode,
    discover,
    enabled_namespaces,
    opted_in,
    pod_mode,
)

INJECT = "tls-injector.io/inject"


def workload(name: str, namespace: str = "apps", *, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None, template_annotations: dict[str, str] | None = None
             ) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "annotations": annotations or {}},
        "spec": {"template": {"metadata": {"labels": labels or {}, "annotations": template_annotations or {}}}},
    }


def pod(name: str, namespace: str = "apps", *, labels: dict[str, str], controlled: bool = False) -> dict[str, Any]:
    owners = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True}] if controlled else []
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
    assert target.dns_names == ("web.apps.svc", "web.apps.svc.cluster.local")
    assert [str(w) for w in target.workloads] == ["Deployment/web"]


def test_template_annotations_choose_the_secret_and_services_and_the_workloads_own_do_not() -> None:
    # The pods see only their template's annotations; reading the object's own would issue a Secret
    # that no pod mounts.
    obj = workload("db", labels={INJECT: "true"},
                   annotations={"tls-injector.io/secret-name": "ignored", "tls-injector.io/service-names": "ignored"},
                   template_annotations={"tls-injector.io/secret-name": "db-certs",
                                         "tls-injector.io/service-names": "x"})
    [target] = discover([("StatefulSet", obj)], [], enabled=set(), cluster_domain="example.org")
    assert target.secret_name == "db-certs"
    assert target.dns_names == ("x.apps.svc", "x.apps.svc.example.org")


def test_workloads_sharing_a_secret_share_one_target_with_the_union_of_their_names() -> None:
    shared = {"tls-injector.io/secret-name": "shared"}
    a = workload("a", labels={INJECT: "true"}, template_annotations=shared)
    b = workload("b", labels={INJECT: "true"}, template_annotations=shared)
    [target] = discover([("Deployment", a), ("DaemonSet", b)], [], enabled=set())
    assert {"a.apps.svc", "b.apps.svc"} <= set(target.dns_names)
    assert [str(w) for w in target.workloads] == ["DaemonSet/b", "Deployment/a"]


def test_namespace_opt_in_covers_unlabelled_workloads_but_not_opted_out_ones() -> None:
    workloads = [("Deployment", workload("in")), ("Deployment", workload("out", labels={INJECT: "false"})),
                 ("Deployment", workload("elsewhere", namespace="other"))]
    targets = discover(workloads, [], enabled={"apps"})
    assert [t.secret_name for t in targets] == ["in-tls"]


def test_bare_pods_count_but_pods_run_by_a_listed_kind_do_not() -> None:
    pods = [pod("bare", labels={INJECT: "true"}), pod("web-abc", labels={INJECT: "true"}, controlled=True)]
    targets = discover([], pods, enabled=set())
    assert [(t.secret_name, str(t.workloads[0])) for t in targets] == [("bare-tls", "Pod/bare")]
    assert targets[0].workloads[0].api_version == "v1"


def test_a_generated_bare_pod_gets_its_stems_secret_not_one_named_after_the_full_name() -> None:
    generated = pod("dbg-x7k2p", labels={INJECT: "true"})
    generated["metadata"]["generateName"] = "dbg-"
    [target] = discover([], [generated], enabled=set())
    assert (target.secret_name, str(target.workloads[0])) == ("dbg-tls", "Pod/dbg-x7k2p")


def crd_pod(name: str, owner: str, *, api_version: str = "postgres.example.com/v1", kind: str = "Cluster",
            labels: dict[str, str] | None = None) -> dict[str, Any]:
    reference = {"apiVersion": api_version, "kind": kind, "name": owner, "uid": f"uid-{owner}", "controller": True}
    return {"metadata": {"name": name, "namespace": "apps", "labels": labels or {}, "ownerReferences": [reference]}}


def test_pods_of_an_unknown_controller_are_found_from_the_pods_and_grouped_under_it() -> None:
    pods = [crd_pod("pg-1", "pg", labels={INJECT: "true"}), crd_pod("pg-2", "pg", labels={INJECT: "true"}),
            crd_pod("node-1", "node", labels={}), crd_pod("off", "off", labels={INJECT: "false"})]
    targets = discover([], pods, enabled={"apps"})
    assert [(t.secret_name, [str(w) for w in t.workloads]) for t in targets] == [
        ("node-tls", ["Cluster/node"]), ("pg-tls", ["Cluster/pg"])]
    assert targets[1].workloads[0].uid == "uid-pg"
    assert targets[1].workloads[0].api_version == "postgres.example.com/v1"


def test_a_kind_named_like_a_listed_one_in_another_group_is_unknown() -> None:
    [target] = discover([], [crd_pod("j-1", "j", api_version="example.com/v1", kind="Job",
                                     labels={INJECT: "true"})], enabled=set())
    assert (target.secret_name, str(target.workloads[0])) == ("j-tls", "Job/j")


def owned_by(obj: dict[str, Any], kind: str, name: str, api_version: str) -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": name,
                                           "uid": f"uid-{name}", "controller": True}]
    return obj


def cronjob(name: str, template_annotations: dict[str, str] | None = None) -> dict[str, Any]:
    template = workload(name, labels={INJECT: "true"}, template_annotations=template_annotations)["spec"]["template"]
    return {"metadata": {"name": name, "namespace": "apps", "uid": f"uid-{name}"},
            "spec": {"jobTemplate": {"spec": {"template": template}}}}


def test_a_cronjob_covers_its_pinned_runs_and_an_unpinned_run_keeps_its_own_secret() -> None:
    pinned = owned_by(workload("nightly-29400000", labels={INJECT: "true"},
                               template_annotations={"tls-injector.io/secret-name": "nightly-tls"}),
                      "CronJob", "nightly", "batch/v1")
    unpinned = owned_by(workload("nightly-29398560", labels={INJECT: "true"}), "CronJob", "nightly", "batch/v1")
    targets = discover([("CronJob", cronjob("nightly")), ("Job", pinned), ("Job", unpinned)], [], enabled=set())
    assert [(t.secret_name, [str(w) for w in t.workloads]) for t in targets] == [
        ("nightly-29398560-tls", ["Job/nightly-29398560"]), ("nightly-tls", ["CronJob/nightly"])]
    assert targets[1].workloads[0].api_version == "batch/v1"


def test_a_deployments_replicaset_is_covered_by_it_and_a_bare_or_orphaned_one_is_not() -> None:
    hashed = {INJECT: "true", "pod-template-hash": "5f6b7c"}
    owned = owned_by(workload("web-5f6b7c", labels=hashed), "Deployment", "web", "apps/v1")
    orphan = owned_by(workload("gone-5f6b7c", labels=hashed), "Deployment", "gone", "apps/v1")
    bare = workload("cache", labels={INJECT: "true"})
    listed = [("Deployment", workload("web", labels={INJECT: "true"})), ("ReplicaSet", owned),
              ("ReplicaSet", orphan), ("ReplicaSet", bare)]
    targets = discover(listed, [], enabled=set())
    assert [(t.secret_name, [str(w) for w in t.workloads]) for t in targets] == [
        ("cache-tls", ["ReplicaSet/cache"]), ("gone-tls", ["ReplicaSet/gone-5f6b7c"]),
        ("web-tls", ["Deployment/web"])]


def test_a_bare_job_gets_its_own_name_even_with_a_digits_suffix() -> None:
    [target] = discover([("Job", workload("backup-20261122", labels={INJECT: "true"}))], [], enabled=set())
    assert target.secret_name == "backup-20261122-tls"


def _with_record(record: str, mode: str | None = None) -> dict[str, Any]:
    annotations = {"tls-injector.io/injected": record, **({"tls-injector.io/mode": mode} if mode else {})}
    return {"metadata": {"name": "p", "namespace": "apps", "annotations": annotations}}


@pytest.mark.parametrize("padding", [0, MAX_REMEMBERED_RECORD], ids=["remembered", "past-the-limit"])
def test_a_pods_mode_is_its_records_else_what_it_asks_for_whether_the_record_is_remembered_or_not(
        padding: int) -> None:
    pad = f',"pad":"{"x" * padding}"' if padding else ""
    assert pod_mode(_with_record('{"mode":"pod-certificate"' + pad + "}")) == "pod-certificate"
    assert pod_mode(_with_record('{"mode":"pod-certificate"' + pad + "}")) == "pod-certificate"  # asked again
    assert pod_mode(_with_record('{"containers":["app"]' + pad + "}")) == "secret"  # a record without one
    assert pod_mode(_with_record('not json' + "x" * padding, mode="trust-only")) == "trust-only"
    assert pod_mode(_with_record('["a list"' + pad.replace('"pad":', "") + "]", mode=" trust-only ")) == "trust-only"


def test_only_short_records_are_remembered() -> None:
    before = _recorded_mode.cache_info().currsize
    long_record = '{"mode":"secret","pad":"' + "y" * MAX_REMEMBERED_RECORD + '"}'
    for n in range(5):
        assert pod_mode(_with_record(long_record.replace("y", str(n)))) == "secret"
    assert _recorded_mode.cache_info().currsize == before
    assert pod_mode(_with_record('{"mode":"secret","n":"fresh-record-for-this-test"}')) == "secret"
    assert _recorded_mode.cache_info().currsize == min(before + 1, _recorded_mode.cache_info().maxsize or 0)
