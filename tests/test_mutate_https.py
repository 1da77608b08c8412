"""/mutate over real HTTPS with the injector behind it: reviews shaped like the kube-apiserver's and the
Kubernetes API round-trip Pods in, patches that apply and yield valid Pods out."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonpatch
import pytest

from tests.support.kube_schema import schema_errors
from tests.support.reviews import answer, fixture, review
from tests.support.server import running_server
from tls_injector.cli import build_handlers
from tls_injector.injection import InjectionOptions, make_mutate_handler
from tls_injector.names import INJECTED_ANNOTATION, SECRET_NAME_ANNOTATION
from tls_injector.settings import ServeSettings

FINGERPRINTS = ["9f86d081884c7d65", "2c26b46b68ffc68f"]
CERT_MOUNT = {"name": "tls-injector-cert", "mountPath": "/etc/tls-injector/certs", "readOnly": True}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    mutate = make_mutate_handler(InjectionOptions(), ca_fingerprints=lambda: FINGERPRINTS)
    with running_server(tmp_path_factory.mktemp("srv"), mutate=mutate) as server, server.client() as c:
        yield c


def post(client: httpx.Client, sent: dict[str, Any]) -> tuple[dict[str, Any], list[Any] | None]:
    """The response and its decoded patch (None when there is none), after checking the envelope."""
    reply = client.post("/mutate", json=sent)
    assert reply.status_code == 200, reply.text
    response: dict[str, Any] = reply.json()["response"]
    assert response["uid"] == sent["request"]["uid"]
    if "patch" not in response:
        assert "patchType" not in response
        return response, None
    assert response["patchType"] == "JSONPatch"
    return response, json.loads(base64.b64decode(response["patch"], validate=True))


def applied(sent: dict[str, Any], ops: list[Any] | None) -> dict[str, Any]:
    pod: dict[str, Any] = jsonpatch.apply_patch(sent["request"]["object"], ops or [])
    assert schema_errors(pod) == []
    return pod


def again(sent: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """The same review carrying the already mutated pod, as on reinvocation."""
    resent = copy.deepcopy(sent)
    resent["request"]["object"] = pod
    return resent


def test_a_deployments_pod_is_injected_and_reinvocation_changes_nothing(client: httpx.Client) -> None:
    sent = fixture("synthetic/pod-create-from-replicaset.json")
    response, ops = post(client, sent)
    assert response["allowed"] is True
    pod = applied(sent, ops)
    assert pod["spec"]["volumes"][1:] == [
        {"name": "tls-injector-cert", "secret": {"secretName": "web-tls"}},
        {"name": "tls-injector-trust", "configMap": {"name": "tls-injector-trust-bundle"}},
    ]
    assert pod["spec"]["containers"][0]["volumeMounts"][1] == CERT_MOUNT
    assert json.loads(pod["metadata"]["annotations"][INJECTED_ANNOTATION])["cas"] == sorted(FINGERPRINTS)
    assert post(client, again(sent, pod)) == ({"uid": sent["request"]["uid"], "allowed": True}, None)


def test_every_init_container_and_native_sidecar_gets_the_mounts_when_no_list_exists(client: httpx.Client) -> None:
    sent = fixture("synthetic/pod-create-no-volumes-with-init-and-native-sidecar.json")
    _, ops = post(client, sent)
    pod = applied(sent, ops)
    every = pod["spec"]["initContainers"] + pod["spec"]["containers"]
    assert [c["volumeMounts"][0] for c in every] == [CERT_MOUNT] * 3
    assert pod["spec"]["initContainers"][1]["restartPolicy"] == "Always"


def test_a_dry_run_gets_exactly_the_patch_of_the_real_request(client: httpx.Client) -> None:
    dry = fixture("synthetic/pod-create-dryrun.json")
    assert dry["request"]["dryRun"] is True
    real = copy.deepcopy(dry)
    real["request"]["dryRun"] = False
    _, dry_ops = post(client, dry)
    assert dry_ops is not None
    assert post(client, real)[1] == dry_ops


@pytest.mark.parametrize("name", ["synthetic/pod-delete.json", "synthetic/pod-connect-attach.json"])
def test_delete_and_connect_are_allowed_untouched(client: httpx.Client, name: str) -> None:
    sent = fixture(name)
    assert post(client, sent) == ({"uid": sent["request"]["uid"], "allowed": True}, None)


def test_a_pod_with_zero_containers_gets_only_volumes_and_the_record(client: httpx.Client) -> None:
    sent = fixture("synthetic/pod-create-zero-containers.json")
    _, ops = post(client, sent)
    pod = applied(sent, ops)
    assert [v["name"] for v in pod["spec"]["volumes"]][1:] == ["tls-injector-cert", "tls-injector-trust"]
    assert pod["spec"]["containers"] == []


@pytest.mark.parametrize("testdata", ["k8s-api-testdata", "k8s-api-testdata-v1.33.0"])
def test_a_pod_with_every_api_field_keeps_all_of_them(client: httpx.Client, testdata: str) -> None:
    pod = fixture(f"{testdata}/core.v1.Pod.json")
    pod["metadata"]["annotations"][SECRET_NAME_ANNOTATION] = "round-trip-tls"
    sent = review(obj=pod, namespace="team-a")
    _, ops = post(client, sent)
    result = applied(sent, ops)
    assert_kept(pod, result)
    assert result["spec"]["volumes"][-2]["secret"] == {"secretName": "round-trip-tls"}
    assert result["spec"]["ephemeralContainers"] == pod["spec"]["ephemeralContainers"]


def assert_kept(original: Any, result: Any, where: str = "") -> None:
    """Everything in `original` is still in `result` at the same place; only appends and new keys differ."""
    if isinstance(original, dict):
        assert isinstance(result, dict), where
        for key, value in original.items():
            assert key in result, f"{where}.{key} was dropped"
            assert_kept(value, result[key], f"{where}.{key}")
    elif isinstance(original, list):
        assert isinstance(result, list), where
        assert len(result) >= len(original), where
        for index, value in enumerate(original):
            assert_kept(value, result[index], f"{where}[{index}]")
    else:
        assert original == result, where


def test_an_invalid_derived_secret_name_is_refused_with_a_message(client: httpx.Client) -> None:
    sent = review(obj=fixture("k8s-api-testdata/core.v1.Pod.json"))  # owner "nameValue": not a DNS name
    response, ops = post(client, sent)
    assert ops is None
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert "'nameValue-tls' is not a valid Secret name" in response["status"]["message"]


def test_a_mount_path_clash_is_refused_with_the_way_out(client: httpx.Client) -> None:
    sent = fixture("synthetic/pod-create-from-replicaset.json")
    sent["request"]["object"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] = "/etc/tls-injector/trust"
    response, _ = post(client, sent)
    assert response["allowed"] is False
    assert "already mounts volume 'kube-api-access-abcde' at /etc/tls-injector/trust" in response["status"]["message"]


def opted_out() -> dict[str, Any]:
    sent = fixture("synthetic/pod-create-from-replicaset.json")
    sent["request"]["object"]["metadata"]["labels"]["tls-injector.io/inject"] = "false"
    return sent


def updated() -> dict[str, Any]:
    pod = fixture("synthetic/pod-create-from-replicaset.json")["request"]["object"]
    return review(operation="UPDATE", obj=pod, old=pod)


def deployment() -> dict[str, Any]:
    return review(obj=fixture("k8s-api-testdata/apps.v1.Deployment.json"), kind=("apps", "v1", "Deployment"))


def binding() -> dict[str, Any]:
    sent = review(obj={"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}})
    sent["request"]["subResource"] = "binding"
    return sent


def job(*, owner: str | None, operation: str = "CREATE") -> dict[str, Any]:
    references = [{"apiVersion": "batch/v1", "kind": owner, "name": "nightly", "uid": "u", "controller": True}]
    obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "nightly-29400000", **({"ownerReferences": references} if owner else {})},
        "spec": {"template": {"metadata": {"labels": {"tls-injector.io/inject": "true"}}, "spec": {}}}}
    return review(operation=operation, obj=obj, old=obj if operation == "UPDATE" else None,
                  kind=("batch", "v1", "Job"))


def bare_job() -> dict[str, Any]:
    return job(owner=None)


def cronjob_run_updated() -> dict[str, Any]:
    return job(owner="CronJob", operation="UPDATE")


def test_a_cronjob_run_is_pinned_to_the_cronjobs_secret(client: httpx.Client) -> None:
    sent = job(owner="CronJob")
    _, ops = post(client, sent)
    pinned = jsonpatch.apply_patch(sent["request"]["object"], ops or [])
    assert pinned["spec"]["template"]["metadata"]["annotations"] == {
        SECRET_NAME_ANNOTATION: "nightly-tls", "tls-injector.io/service-names": "nightly"}
    assert post(client, again(sent, pinned)) == ({"uid": sent["request"]["uid"], "allowed": True}, None)


@pytest.mark.parametrize("make", [opted_out, updated, deployment, binding, bare_job, cronjob_run_updated])
def test_what_is_not_an_opted_in_pod_creation_is_allowed_without_a_patch(client: httpx.Client, make: Any) -> None:
    sent = make()
    assert post(client, sent) == ({"uid": sent["request"]["uid"], "allowed": True}, None)


def test_the_served_mutate_handler_is_the_injector() -> None:
    mutate, _ = build_handlers(ServeSettings())
    response = answer(mutate, fixture("synthetic/pod-create-from-replicaset.json"))
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "add", "path": "/spec/containers/0/volumeMounts/-", "value": CERT_MOUNT} in ops


@pytest.mark.parametrize("length", [254, 64 * 1024])
def test_a_name_past_any_legal_one_is_answered_not_refused(client: httpx.Client, length: int) -> None:
    """Mutating admission runs before the apiserver validates the name (kube-apiserver 1.37 sends a
    254-character pod name to /mutate, then refuses it 422 itself: tests/cluster/test_legal_names.py). A
    400 here turned that 422 into "failed calling webhook" (500) for the user."""
    sent = fixture("synthetic/pod-create-from-replicaset.json")
    sent["request"]["object"]["metadata"]["name"] = sent["request"]["name"] = "p" * length
    response, _ = post(client, sent)
    assert response["allowed"] is True
