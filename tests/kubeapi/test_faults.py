"""Fault injection and the request log, seen through the official client."""

from __future__ import annotations

import json

import kubernetes.client as k8s
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import Emulator


@pytest.fixture
def core(kube_client: k8s.ApiClient) -> k8s.CoreV1Api:
    api = k8s.CoreV1Api(kube_client)
    api.create_namespace({"metadata": {"name": "demo"}})
    api.create_namespaced_secret("demo", {"metadata": {"name": "a"}, "data": {"k": "dg=="}})
    return api


@pytest.mark.parametrize("code", [500, 503, 409, 403, 404])
def test_fail_next_answers_the_code_then_serves_normally(core: k8s.CoreV1Api, kubeapi: Emulator, code: int) -> None:
    kubeapi.fail_next("get", "secrets", "a", code=code)
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_secret("a", "demo")
    assert exc.value.status == code
    assert core.read_namespaced_secret("a", "demo").metadata.name == "a"


def test_fail_next_only_hits_matching_requests_and_counts_down(core: k8s.CoreV1Api, kubeapi: Emulator) -> None:
    kubeapi.fail_next("create", "secrets", count=2, code=503)
    core.create_namespaced_config_map("demo", {"metadata": {"name": "unaffected"}})
    for _ in range(2):
        with pytest.raises(ApiException):
            core.create_namespaced_secret("demo", {"metadata": {"name": "b"}})
    assert core.create_namespaced_secret("demo", {"metadata": {"name": "b"}}).metadata.name == "b"


@pytest.mark.parametrize(("verb", "code", "reason"), [
    ("create", 409, "AlreadyExists"), ("update", 409, "Conflict"), ("get", 404, "NotFound"),
    ("get", 500, "InternalError"), ("list", 503, "ServiceUnavailable"), ("get", 403, "Forbidden"),
])
def test_injected_codes_carry_the_reason_the_real_api_gives(core: k8s.CoreV1Api, kubeapi: Emulator, verb: str,
                                                            code: int, reason: str) -> None:
    kubeapi.fail_next(verb, "secrets", code=code)
    calls = {"create": lambda: core.create_namespaced_secret("demo", {"metadata": {"name": "new"}}),
             "update": lambda: core.replace_namespaced_secret("a", "demo", {"metadata": {"name": "a"}}),
             "get": lambda: core.read_namespaced_secret("a", "demo"),
             "list": lambda: core.list_namespaced_secret("demo")}
    with pytest.raises(ApiException) as exc:
        calls[verb]()
    assert (exc.value.status, json.loads(exc.value.body)["reason"]) == (code, reason)


def test_a_create_fault_can_target_the_name_in_the_body(core: k8s.CoreV1Api, kubeapi: Emulator) -> None:
    kubeapi.fail_next("create", "secrets", "ca", code=503)
    core.create_namespaced_secret("demo", {"metadata": {"name": "other"}})
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_secret("demo", {"metadata": {"name": "ca"}})
    assert exc.value.status == 503


def test_a_throttled_request_carries_retry_after_which_the_client_honours(core: k8s.CoreV1Api,
                                                                          kubeapi: Emulator) -> None:
    kubeapi.retry_after = 0
    kubeapi.reset_log()
    kubeapi.fail_next("list", "*", code=429)
    core.list_namespaced_secret("demo")  # urllib3 retried it after Retry-After seconds
    assert [r.code for r in kubeapi.log] == [429, 200]
    kubeapi.fail_next("list", "*", code=429, count=10)
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_secret("demo")
    assert exc.value.status == 429
    assert exc.value.headers["Retry-After"] == "0"


def test_a_503_outage_fails_everything_until_it_ends(core: k8s.CoreV1Api, kubeapi: Emulator) -> None:
    kubeapi.outage()
    for call in (core.list_namespace, lambda: core.read_namespaced_secret("a", "demo")):
        with pytest.raises(ApiException) as exc:
            call()
        assert exc.value.status == 503
    kubeapi.end_outage()
    assert core.read_namespaced_secret("a", "demo").metadata.name == "a"


def test_a_refusing_outage_refuses_connections_then_the_same_url_serves_again(kubeapi: Emulator) -> None:
    config = k8s.Configuration(host=kubeapi.url)
    config.retries = False  # see the refusal itself, not urllib3's retries of it
    core = k8s.CoreV1Api(k8s.ApiClient(config))
    assert core.read_namespace("default").metadata.name == "default"
    kubeapi.outage(refuse=True)
    with pytest.raises((urllib3.exceptions.HTTPError, ConnectionError)):
        core.read_namespace("default")
    with pytest.raises(urllib3.exceptions.NewConnectionError):  # now a fresh connection: refused
        core.read_namespace("default")
    kubeapi.end_outage()
    assert core.read_namespace("default").metadata.name == "default"
    core.api_client.close()


def test_conflict_on_first_write_answers_409_once_per_object(core: k8s.CoreV1Api, kubeapi: Emulator) -> None:
    kubeapi.conflict_on_first_write()
    patch = {"metadata": {"labels": {"x": "1"}}}
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_secret("a", "demo", patch)
    assert exc.value.status == 409
    assert core.read_namespaced_secret("a", "demo").metadata.labels is None
    assert core.patch_namespaced_secret("a", "demo", patch).metadata.labels == {"x": "1"}


def test_conflict_with_touch_is_a_real_concurrent_write(core: k8s.CoreV1Api, kubeapi: Emulator) -> None:
    kubeapi.conflict_on_first_write(touch=True)
    mine = core.read_namespaced_secret("a", "demo")
    mine.data = {"k": "bmV3"}
    with pytest.raises(ApiException) as exc:
        core.replace_namespaced_secret("a", "demo", mine)
    assert exc.value.status == 409
    current = core.read_namespaced_secret("a", "demo")
    assert current.metadata.annotations == {kubeapi.touch_annotation: "1"}
    current.data = {"k": "bmV3"}
    kept = core.replace_namespaced_secret("a", "demo", current)
    assert kept.data == {"k": "bmV3"}
    assert kept.metadata.annotations == {kubeapi.touch_annotation: "1"}


def test_the_request_log_counts_calls_per_verb_and_resource(core: k8s.CoreV1Api, kubeapi: Emulator,
                                                            kube_client: k8s.ApiClient) -> None:
    kubeapi.reset_log()
    core.read_namespaced_secret("a", "demo")
    core.list_namespaced_secret("demo")
    k8s.AppsV1Api(kube_client).list_deployment_for_all_namespaces()
    assert kubeapi.calls() == 3
    assert kubeapi.calls("get", "secrets") == 1
    assert kubeapi.calls("list") == 2
    assert kubeapi.calls("list", "deployments") == kubeapi.calls("list", "deployments.apps") == 1
    assert kubeapi.writes() == []
    core.create_namespaced_config_map("demo", {"metadata": {"generateName": "x-"}})
    [write] = kubeapi.writes()
    assert (write.verb, write.resource, write.namespace, write.code) == ("create", "configmaps", "demo", 201)
    assert write.name is not None
    assert write.name.startswith("x-")


def test_failed_requests_are_logged_with_their_code(core: k8s.CoreV1Api, kubeapi: Emulator) -> None:
    kubeapi.reset_log()
    with pytest.raises(ApiException):
        core.read_namespaced_secret("missing", "demo")
    assert [(r.verb, r.name, r.code) for r in kubeapi.log] == [("get", "missing", 404)]


def test_core_and_events_api_events_are_counted_apart(kube_client: k8s.ApiClient, kubeapi: Emulator) -> None:
    k8s.CoreV1Api(kube_client).list_event_for_all_namespaces()
    k8s.EventsV1Api(kube_client).list_event_for_all_namespaces()
    k8s.EventsV1Api(kube_client).list_event_for_all_namespaces()
    assert kubeapi.calls("list", "events") == 1
    assert kubeapi.calls("list", "events.events.k8s.io") == 2
