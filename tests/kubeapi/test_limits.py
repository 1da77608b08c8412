"""The apiserver's size and syntax limits, enforced as the apiserver enforces them: a write a real cluster
would refuse is refused here too (422; 413 for a body over 3 MiB; 500 for an object etcd cannot store), so
a test of code that writes it fails. Each limit is checked at its boundary: the largest accepted and the
smallest refused."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import kubernetes.client as k8s
import orjson
import pytest
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import Emulator
from tests.kubeapi.errors import MAX_REQUEST_BODY, MAX_STORED_OBJECT
from tests.kubeapi.test_crud import status_body, status_of

KIB, MIB = 1024, 1024 * 1024


def _refused(call: Any, *args: Any) -> list[str]:
    """The fields of a 422's causes; fails when the write is accepted."""
    with pytest.raises(ApiException) as exc:
        call(*args)
    assert status_of(exc) == (422, "Invalid")
    return [c["field"] for c in status_body(exc)["details"]["causes"]]


def _annotated(name: str, value_size: int) -> dict[str, Any]:
    key = "example.com/note"  # 16 bytes of the 256 KiB, which count keys and values together
    return {"metadata": {"name": name, "annotations": {key: "x" * (value_size - len(key))}}}


def test_all_annotations_together_may_hold_256_kib_and_not_a_byte_more(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_config_map("demo", _annotated("at-limit", 256 * KIB))
    assert _refused(core.create_namespaced_config_map, "demo", _annotated("over", 256 * KIB + 1)) == [
        "metadata.annotations"]
    stored = core.read_namespaced_config_map("at-limit", "demo")
    assert _refused(core.patch_namespaced_config_map, "at-limit", "demo",
                    {"metadata": {"annotations": {"b": "y"}}}) == ["metadata.annotations"], "on update too"
    assert stored.metadata.annotations


@pytest.mark.parametrize(("key", "accepted"), [
    ("a" * 63, True), ("a" * 64, False),
    (f"{'p' * 253}/name", True), (f"{'p' * 254}/name", False),
    (f"example.com/{'n' * 63}", True), (f"example.com/{'n' * 64}", False),
])
def test_label_and_annotation_keys_are_qualified_names(core: k8s.CoreV1Api, key: str, accepted: bool) -> None:
    for n, field in enumerate(("labels", "annotations")):
        body = {"metadata": {"name": f"k{n}-{len(key)}-{accepted}".lower(), field: {key: "v"}}}
        if accepted:
            core.create_namespaced_config_map("demo", body)
        else:
            assert _refused(core.create_namespaced_config_map, "demo", body) == [f"metadata.{field}"]


def test_a_label_key_prefix_is_lower_case_and_an_annotation_key_is_checked_lower_cased(core: k8s.CoreV1Api) -> None:
    """The apiserver lower-cases annotation keys before checking them, not label keys."""
    assert _refused(core.create_namespaced_config_map, "demo",
                    {"metadata": {"name": "upper-label", "labels": {"Example.com/x": "v"}}}) == ["metadata.labels"]
    noted = {"metadata": {"name": "upper-note", "annotations": {"Example.com/x": "v"}}}
    core.create_namespaced_config_map("demo", noted)


def test_a_label_value_is_at_most_63_characters(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_config_map("demo", {"metadata": {"name": "v63", "labels": {"app": "a" * 63}}})
    assert _refused(core.create_namespaced_config_map, "demo",
                    {"metadata": {"name": "v64", "labels": {"app": "a" * 64}}}) == ["metadata.labels"]


def _b64(size: int) -> str:
    return base64.b64encode(b"x" * size).decode()


def test_a_secret_holds_1_mib_of_decoded_data(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_secret("demo", {"metadata": {"name": "full"}, "data": {"a": _b64(MIB - 1), "b": _b64(1)}})
    assert _refused(core.create_namespaced_secret, "demo",
                    {"metadata": {"name": "over"}, "data": {"a": _b64(MIB - 1), "b": _b64(2)}}) == ["data"]


def test_a_config_map_holds_1_mib_of_data_and_binary_data_together(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_config_map("demo", {"metadata": {"name": "full"}, "data": {"a": "x" * (MIB - 3)},
                                               "binaryData": {"b": _b64(3)}})
    assert _refused(core.create_namespaced_config_map, "demo", {"metadata": {"name": "over"}, "data": {
        "a": "x" * (MIB - 3)}, "binaryData": {"b": _b64(4)}}) == ["[]"]


def test_a_config_key_is_at_most_253_characters(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_config_map("demo", {"metadata": {"name": "k253"}, "data": {"k" * 253: "v"}})
    assert _refused(core.create_namespaced_config_map, "demo", {"metadata": {"name": "k254"},
                                                                "data": {"k" * 254: "v"}}) == [f"data[{'k' * 254}]"]


def test_a_name_is_a_subdomain_of_at_most_253_characters(core: k8s.CoreV1Api) -> None:
    core.create_namespaced_secret("demo", {"metadata": {"name": "s" * 253}})
    assert _refused(core.create_namespaced_secret, "demo", {"metadata": {"name": "s" * 254}}) == ["metadata.name"]


def test_a_generated_name_stays_within_63_characters(kubeapi: Emulator, core: k8s.CoreV1Api) -> None:
    """The apiserver cuts a generateName prefix to 58 characters before adding its 5."""
    made = core.create_namespaced_secret("demo", {"metadata": {"generateName": "g" * 200 + "-"}})
    assert len(made.metadata.name) == 63
    assert made.metadata.name.startswith("g" * 58)


def _post(kubeapi: Emulator, path: str, body: bytes) -> httpx.Response:
    return httpx.post(f"{kubeapi.url}{path}", content=body, headers={"Content-Type": "application/json"})


def test_a_request_body_may_be_3_mib_and_not_a_byte_more(kubeapi: Emulator, core: k8s.CoreV1Api) -> None:
    """kube-apiserver's MaxRequestBodyBytes: 413 RequestEntityTooLarge, before the body is even decoded
    (JSON may end in whitespace, so a small object is padded to the size)."""
    path = "/api/v1/namespaces/demo/configmaps"
    at_limit = orjson.dumps({"metadata": {"name": "padded"}}).ljust(MAX_REQUEST_BODY)
    assert _post(kubeapi, path, at_limit).status_code == 201
    over = orjson.dumps({"metadata": {"name": "over"}}).ljust(MAX_REQUEST_BODY + 1)
    reply = _post(kubeapi, path, over)
    assert reply.status_code == 413
    assert reply.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": "Request entity too large: limit is 3145728",
                            "reason": "RequestEntityTooLarge", "code": 413}
    assert kubeapi.get("configmaps", "over", "demo") is None


def _pod(name: str, size: int) -> dict[str, Any]:
    """A pod of about `size` bytes stored: no validation limits a container's args, only etcd does."""
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "a", "image": "i", "args": ["x" * size]}]}}


def test_an_object_over_etcds_1_5_mib_is_refused_as_the_apiserver_passes_on_etcds_error(
        kubeapi: Emulator, core: k8s.CoreV1Api) -> None:
    """etcd's --max-request-bytes (1.5 MiB by default) refuses the write, and kube-apiserver answers a 500
    whose message is etcd's: the object is not stored and no watcher hears of it. A dry run never reaches
    etcd, so it is accepted."""
    core.create_namespaced_pod("demo", _pod("fits", MAX_STORED_OBJECT - 4 * KIB))
    version = kubeapi.resource_version
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("demo", _pod("huge", MAX_STORED_OBJECT))
    assert exc.value.status == 500
    assert json.loads(exc.value.body) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                          "message": "etcdserver: request is too large", "code": 500}
    assert kubeapi.get("pods", "huge", "demo") is None
    assert kubeapi.resource_version == version
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("fits", "demo", {"metadata": {"annotations": {"note": "y" * 8 * KIB}}})
    assert exc.value.status == 500, "an update too"
    assert kubeapi.resource_version == version
    core.create_namespaced_pod("demo", _pod("huge", MAX_STORED_OBJECT), dry_run="All")


def test_a_full_secret_is_counted_by_its_decoded_data_as_etcd_stores_it(core: k8s.CoreV1Api) -> None:
    """1 MiB of data (the most validation allows) is 1.33 MiB in base64 on the wire, yet fits: the
    apiserver stores the bytes."""
    core.create_namespaced_secret("demo", {"metadata": {"name": "full", "annotations": {"n": "x" * 255 * KIB}},
                                           "data": {"a": _b64(MIB)}})
