"""The workload name behind a pod's default Secret, derived the way users expect for each owner."""

from __future__ import annotations

from typing import Any

import pytest

from app.injection import template_workload_name, workload_name


def owned(kind: str, name: str, *, controller: bool = True, **labels: str) -> dict[str, Any]:
    owner = {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u", "controller": controller}
    return {"generateName": f"{name}-", "labels": labels, "ownerReferences": [owner]}


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        pytest.param(owned("ReplicaSet", "web-7d4b9c8f6d", **{"pod-template-hash": "7d4b9c8f6d"}), "web",
                     id="a Deployment's pod drops its ReplicaSet's template hash"),
        pytest.param(owned("ReplicaSet", "my-web-app-7d4b9c8f6d", **{"pod-template-hash": "7d4b9c8f6d"}),
                     "my-web-app", id="dashes inside the Deployment name are kept"),
        pytest.param(owned("ReplicaSet", "frontend"), "frontend",
                     id="a bare ReplicaSet without a template hash is the workload itself"),
        pytest.param(owned("ReplicaSet", "frontend", **{"pod-template-hash": "abc"}), "frontend",
                     id="a hash label that is not the name's suffix strips nothing"),
        pytest.param(owned("StatefulSet", "db"), "db", id="a StatefulSet's pod takes the owner's name"),
        pytest.param(owned("DaemonSet", "agent"), "agent", id="a DaemonSet's pod takes the owner's name"),
        pytest.param(owned("Job", "migrate"), "migrate", id="a Job's pod takes the owner's name"),
        pytest.param({"name": "debug", "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": False}]},
                     "debug", id="a non-controller owner does not count"),
        pytest.param({"name": "debug"}, "debug", id="a bare pod is its own workload"),
        pytest.param({"generateName": "runner-"}, "runner", id="a bare generated pod takes its generateName stem"),
        pytest.param({"generateName": "runner-", "name": "runner-x7k2p"}, "runner",
                     id="the stem wins once the apiserver has generated the name, so both orders agree"),
        pytest.param({}, "", id="a pod with no name at all has no workload"),
    ],
)
def test_workload_name(metadata: dict[str, Any], expected: str) -> None:
    assert workload_name(metadata) == expected


@pytest.mark.parametrize(
    ("kind", "template_labels", "expected"),
    [
        ("Deployment", {"app": "web"}, "web"),
        ("StatefulSet", {}, "web"),
        ("DaemonSet", {}, "web"),
        ("Job", {}, "web"),
        ("CronJob", {}, "web"),
        ("ReplicaSet", {}, "web"),
    ],
)
def test_a_template_names_the_same_workload_its_pods_will(
    kind: str, template_labels: dict[str, str], expected: str
) -> None:
    assert template_workload_name(kind, "web", {"labels": template_labels}) == expected


def test_a_deployments_replicaset_in_a_manifest_names_the_deployment_as_its_pods_will() -> None:
    template = {"labels": {"pod-template-hash": "5f6b7c"}}
    assert template_workload_name("ReplicaSet", "web-5f6b7c", template) == "web"
