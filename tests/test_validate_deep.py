"""Any nesting the JSON parser accepts gets a verdict over HTTPS: never a 500, never a traceback."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.support.reviews import answer, review
from tests.support.server import RunningServer, running_server
from tls_injector.cli import build_handlers
from tls_injector.rules.judge import MAX_SELF_DEPTH, MAX_SELF_VALUES, measure, nesting_depth
from tls_injector.settings import ServeSettings

INJECT = "tls-injector.io/inject"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    _, validate = build_handlers(ServeSettings())
    with running_server(tmp_path_factory.mktemp("srv"), validate=validate) as running:
        yield running


def deep(levels: int) -> str:
    """JSON objects nested `levels` deep, written by hand: the encoders stop at 254 or 1000 levels."""
    return '{"a":' * (levels - 1) + '{"a":1' + "}" * levels


def deployment_update(old_labels: str, new_labels: str) -> bytes:
    def deployment(labels: str) -> str:
        return ('{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default"},'
                f'"spec":{{"template":{{"metadata":{{"labels":{labels}}}}}}}}}')
    request = {"uid": str(uuid.uuid4()), "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
               "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
               "operation": "UPDATE", "namespace": "default", "name": "web", "object": "NEW", "oldObject": "OLD",
               "dryRun": False, "userInfo": {"username": "someone"}}
    body = orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    return body.replace(b'"NEW"', deployment(new_labels).encode()).replace(b'"OLD"', deployment(old_labels).encode())


def post(server: RunningServer, body: bytes) -> httpx.Response:
    with server.client() as client:
        return client.post("/validate", content=body, headers={"content-type": "application/json"})


def labels(nested: str) -> str:
    return f'{{"{INJECT}":"true","x":{nested}}}'


# The object nests 5 levels above `labels` (the review's own envelope adds 2 more above the object).
@pytest.mark.parametrize("levels", [MAX_SELF_DEPTH + 1, 500, 950])
def test_a_self_nested_past_the_limit_is_denied_with_the_reason(server: RunningServer, levels: int,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        response = post(server, deployment_update(labels("1"), labels(deep(levels))))
    assert response.status_code == 200, response.text[:300]
    answer = response.json()["response"]
    assert answer["allowed"] is False
    assert f"nested deeper than {MAX_SELF_DEPTH} levels" in answer["status"]["message"]
    assert len(response.content) < 2048
    assert not any(record.exc_info for record in caplog.records)


def test_a_body_nested_past_what_the_decode_takes_is_a_400_with_the_reason(server: RunningServer) -> None:
    response = post(server, deployment_update(labels("1"), labels(deep(1000))))  # 1008 levels in all
    assert response.status_code == 400
    assert "nested too deeply" in response.json()["error"]


def test_a_deep_but_real_sized_object_is_judged_normally(server: RunningServer) -> None:
    nested = deep(MAX_SELF_DEPTH - 3)  # labels -> x -> the nested value: within the limit
    allowed = post(server, deployment_update(labels(nested), labels(nested))).json()["response"]
    assert allowed["allowed"] is True
    denied = post(server, deployment_update(labels(nested), '{"x":1}')).json()["response"]
    assert denied["allowed"] is False
    assert "can be enabled in place" in denied["status"]["message"]


def test_nesting_depth_counts_without_recursion_and_stops_past_the_limit() -> None:
    value: object = 1
    for _ in range(100_000):
        value = [value]
    assert nesting_depth(value, limit=10) == 11
    assert nesting_depth({"a": [{"b": 1}], "c": {}}, limit=10) == 3
    assert nesting_depth("text", limit=10) == 0


def test_measure_counts_values_at_every_depth_and_stops_past_either_limit() -> None:
    assert measure({"a": [1, 2], "b": {"c": 3}}, max_depth=10, max_values=100) == (2, 5)
    depth, values = measure({str(i): i for i in range(1000)}, max_depth=10, max_values=10)
    assert (depth, values) == (1, 1000)  # one level read whole, then it stops


@pytest.mark.parametrize(("labels", "denied"), [(MAX_SELF_VALUES - 10, False), (MAX_SELF_VALUES + 1, True)])
def test_a_self_with_more_values_than_the_limit_is_denied_unevaluated(labels: int, denied: bool) -> None:
    _, validate = build_handlers(ServeSettings())
    many = {"tls-injector.io/inject": "true", **{f"k{i}": "v" for i in range(labels)}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                  "spec": {"template": {"metadata": {"labels": many}}}}
    got = answer(validate, review(operation="UPDATE", obj=deployment, old=deployment,
                                  kind=("apps", "v1", "Deployment")))
    assert got["allowed"] is not denied
    if denied:
        assert f"holds more than {MAX_SELF_VALUES:,} values" in got["status"]["message"]
