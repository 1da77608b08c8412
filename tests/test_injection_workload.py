"""The one naming: the workload, Secret and services behind a pod or a pod template, for every shape."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.shapes import DELETE, damage, paths
from tls_injector.admission import JsonPatchOp
from tls_injector.injection import cronjob_pins, pod_workload, template_workload
from tls_injector.injection.jobs import job_pin_ops
from tls_injector.injection.mutate import PodObject
from tls_injector.injection.workload import pod_secret_name, pod_workload_name

SECRET = "tls-injector.io/secret-name"
SERVICES = "tls-injector.io/service-names"


def owned(kind: str, name: str, *, controller: bool = True, api_version: str = "apps/v1",
          **labels: str) -> dict[str, Any]:
    owner = {"apiVersion": api_version, "kind": kind, "name": name, "uid": "u", "controller": controller}
    return {"generateName": f"{name}-", "labels": labels, "ownerReferences": [owner]}


@pytest.mark.parametrize(
    ("metadata", "kind", "secret"),
    [
        pytest.param(owned("ReplicaSet", "web-7d4b9c8f6d", **{"pod-template-hash": "7d4b9c8f6d"}),
                     "Deployment", "web-tls", id="a Deployment's pod drops its ReplicaSet's template hash"),
        pytest.param(owned("ReplicaSet", "my-web-app-7d4b9c8f6d", **{"pod-template-hash": "7d4b9c8f6d"}),
                     "Deployment", "my-web-app-tls", id="dashes inside the Deployment name are kept"),
        pytest.param(owned("ReplicaSet", "frontend"), "ReplicaSet", "frontend-tls",
                     id="a bare ReplicaSet without a template hash is the workload itself"),
        pytest.param(owned("ReplicaSet", "frontend", **{"pod-template-hash": "abc"}), "ReplicaSet", "frontend-tls",
                     id="a hash label that is not the name's suffix strips nothing"),
        pytest.param(owned("StatefulSet", "db"), "StatefulSet", "db-tls", id="a StatefulSet's pod"),
        pytest.param(owned("DaemonSet", "agent"), "DaemonSet", "agent-tls", id="a DaemonSet's pod"),
        pytest.param(owned("Job", "backup-20261122", api_version="batch/v1"), "Job", "backup-20261122-tls",
                     id="a Job's pod keeps a digits suffix: only the CronJob's pin names a CronJob"),
        pytest.param(owned("Cluster", "pg-main", api_version="postgres.example.com/v1"), "Cluster", "pg-main-tls",
                     id="a pod of a controller the injector does not know takes its owner's name"),
        pytest.param({"name": "debug", "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": False}]},
                     "Pod", "debug-tls", id="a non-controller owner does not count"),
        pytest.param({"name": "debug"}, "Pod", "debug-tls", id="a bare pod is its own workload"),
        pytest.param({"generateName": "dbg-"}, "Pod", "dbg-tls", id="a bare generated pod takes its stem"),
        pytest.param({"generateName": "dbg-", "name": "dbg-x7k2p"}, "Pod", "dbg-tls",
                     id="the stem wins once the apiserver has generated the name, so both orders agree"),
        pytest.param({}, "Pod", "", id="a pod with no name at all has no Secret"),
        pytest.param({"annotations": {SECRET: " shared-tls "}}, "Pod", "shared-tls",
                     id="the annotation names the Secret even without a name"),
        pytest.param({"name": 7, "generateName": ["x"], "labels": "y", "ownerReferences": {"a": 1}}, "Pod", "",
                     id="values of the wrong JSON type count as absent"),
    ],
)
def test_a_pod_names_its_workload_and_secret(metadata: dict[str, Any], kind: str, secret: str) -> None:
    workload = pod_workload(metadata)
    assert (workload.kind, workload.secret_name) == (kind, secret)
    assert workload.service_names == ((workload.name,) if workload.name else ())
    assert pod_secret_name(metadata) == secret  # what the injection plan reads, without the Workload
    assert pod_workload_name(metadata) == workload.name  # what the status says of a pod, without it either


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "ReplicaSet"])
def test_a_template_names_its_own_object(kind: str) -> None:
    workload = template_workload(kind, "web", {"labels": {"app": "web"}})
    assert (workload.kind, workload.name, workload.secret_name, workload.service_names) == (
        kind, "web", "web-tls", ("web",))


def test_a_deployments_replicaset_in_a_manifest_names_the_deployment_as_its_pods_will() -> None:
    workload = template_workload("ReplicaSet", "web-5f6b7c", {"labels": {"pod-template-hash": "5f6b7c"}})
    assert (workload.kind, workload.secret_name) == ("Deployment", "web-tls")


def test_annotations_choose_the_secret_and_the_sorted_unique_services() -> None:
    workload = template_workload("StatefulSet", "db", {"annotations": {SECRET: "db-certs", SERVICES: "b, a,,b "}})
    assert (workload.secret_name, workload.service_names) == ("db-certs", ("a", "b"))


def test_a_cronjob_pins_only_what_its_template_does_not_set() -> None:
    assert cronjob_pins("nightly", {}) == {SECRET: "nightly-tls", SERVICES: "nightly"}
    assert cronjob_pins("nightly", {SECRET: "mine", SERVICES: " "}) == {SERVICES: "nightly"}


def pin_ops(job: object) -> list[JsonPatchOp] | None:
    """What /mutate makes of this Job's object: decoded as its edge decodes it (`PodObject`), then pinned;
    None when that typed decode refuses the object (a 400 at the edge)."""
    try:
        obj = msgspec.convert(job, PodObject)
    except msgspec.ValidationError:
        return None
    return job_pin_ops(obj.metadata, obj.spec.template if obj.spec is not None else None)


def cron_job(template_metadata: object, *, owner_kind: str = "CronJob") -> dict[str, Any]:
    owner = {"apiVersion": "batch/v1", "kind": owner_kind, "name": "nightly", "uid": "u", "controller": True}
    template: dict[str, Any] = {"spec": {"containers": []}}
    if template_metadata is not None:
        template["metadata"] = template_metadata
    return {"metadata": {"name": "nightly-29400000", "ownerReferences": [owner]}, "spec": {"template": template}}


@pytest.mark.parametrize("template_metadata", [None, {}, {"labels": {"tls-injector.io/inject": "true"}},
                                               {"annotations": {"x": "y"}}, {"annotations": {SERVICES: "api"}}])
def test_a_cronjob_run_is_pinned_to_the_cronjobs_secret_and_pinning_again_changes_nothing(
    template_metadata: object
) -> None:
    job = cron_job(template_metadata)
    pinned = jsonpatch.apply_patch(job, pin_ops(job))
    pod = {**pinned["spec"]["template"]["metadata"], "ownerReferences": job["metadata"]["ownerReferences"]}
    pod["ownerReferences"] = [{**pod["ownerReferences"][0], "kind": "Job", "name": "nightly-29400000"}]
    assert pod_workload(pod).secret_name == "nightly-tls" == template_workload("CronJob", "nightly", {}).secret_name
    assert pin_ops(pinned) == []


@pytest.mark.parametrize("job", [
    cron_job({}, owner_kind="Workflow"),
    cron_job({"labels": {"tls-injector.io/inject": "false"}}),
    cron_job({"annotations": "not a map"}),
    {"metadata": {"name": "bare"}, "spec": {"template": {}}},
    {"metadata": "x", "spec": {}},
])
def test_other_jobs_are_not_pinned(job: dict[str, Any]) -> None:
    assert pin_ops(job) == []


def test_a_job_whose_spec_is_not_an_object_is_refused_by_the_decode() -> None:
    assert pin_ops({"metadata": "x", "spec": []}) is None
    assert pin_ops(cron_job(None) | {"spec": {"template": "x"}}) is None


JOB_BASE = cron_job({"labels": {"tls-injector.io/inject": "true"}, "annotations": {"x": "y"}})
JOB_PATHS = [p for p in paths(JOB_BASE) if p]
hostile = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12),
                    st.lists(st.text(max_size=3), max_size=2), st.dictionaries(st.text(max_size=5), st.text(max_size=5),
                                                                                max_size=2), st.just(DELETE))


@st.composite
def damaged_jobs(draw: st.DrawFn) -> dict[str, Any]:
    job = copy.deepcopy(JOB_BASE)
    for _ in range(draw(st.integers(1, 3))):
        damage(job, draw(st.sampled_from(JOB_PATHS)), draw(hostile))
    return job


@settings(max_examples=300, deadline=None, derandomize=True)
@given(damaged_jobs())
def test_a_damaged_job_gets_a_pin_that_applies_or_none(job: dict[str, Any]) -> None:
    ops = pin_ops(job)
    if ops is None:  # refused by the edge's decode: nothing is pinned
        return
    pinned = jsonpatch.apply_patch(job, ops)  # raises when an op does not apply
    assert pin_ops(pinned) == []
