"""Hostile and malformed AdmissionReviews: never a crash, never a stack trace, the server healthy after.

Reviews are made by damaging real ones (the apiserver-shaped fixtures): one to three places anywhere in
the document get a wrong type, a huge or odd unicode string, deep nesting, or disappear. Plus whole
documents of arbitrary JSON. The handlers are the real ones, from `tls_injector.cli.build_handlers`, so the
suite covers the injector and the rules as they land.

Every answer must be a 4xx with a JSON reason or a 200 whose AdmissionReview the apiserver accepts (uid
echoed, a patch that decodes and applies to the object). A 500 means a handler raised: a bug, a failure.
CI runs a slice (300 over HTTPS, 600 in-process); TLS_INJECTOR_LONG=1 runs 10,000 over HTTPS and 50,000 in-process.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonpatch
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reliability.conftest import LONG
from tests.support.reviews import fixture, review
from tests.support.server import RunningServer, running_server
from tests.support.shapes import paths
from tls_injector.admission import BadReview, Route
from tls_injector.cli import admission_handlers, build_handlers
from tls_injector.settings import ServeSettings

HTTPS_EXAMPLES = 10_000 if LONG else 300
IN_PROCESS_EXAMPLES = 50_000 if LONG else 600
FUZZ = settings(deadline=None, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


def base_reviews() -> list[dict[str, Any]]:
    pod = fixture("synthetic/pod-create-from-replicaset.json")
    template = {"metadata": {"labels": {"app": "web", "tls-injector.io/inject": "true"},
                             "annotations": {"tls-injector.io/secret-name": "web-tls"}},
                "spec": copy.deepcopy(pod["request"]["object"]["spec"])}
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template}}
    changed = copy.deepcopy(deployment)
    changed["spec"]["template"]["metadata"]["annotations"]["tls-injector.io/secret-name"] = "other-tls"
    return [pod, fixture("synthetic/pod-delete.json"), fixture("synthetic/pod-create-dryrun.json"),
            review(operation="UPDATE", kind=("apps", "v1", "Deployment"), obj=changed, old=deployment),
            review(operation="UPDATE", kind=("apps", "v1", "Deployment"), obj=deployment, old=deployment)]


BASES = base_reviews()


def nested(depth: int, leaf: object) -> object:
    for level in range(depth):
        leaf = [leaf] if level % 2 else {"a": leaf}
    return leaf


scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
hostile = st.one_of(
    json_values,
    st.text(alphabet=st.characters(codec="utf-8"), max_size=200),  # any unicode, RTL, zero-width, emoji
    st.integers(min_value=1, max_value=200_000).map(lambda n: "\u2603" * n),  # huge strings
    st.integers(min_value=2**63, max_value=2**80),  # integers no int64 holds
    st.integers(min_value=10, max_value=900).map(lambda depth: nested(depth, "deep")),
    st.sampled_from(["", " ", "true", "0", "-", "/", "~1", "../../etc/passwd", "a" * 64 + ".b", "TRUE", "enabled"]),
)
DELETE = object()


BASE_PATHS = [list(paths(base))[1:] for base in BASES]  # computed once: walking each example is the slow part


@st.composite
def damaged_reviews(draw: st.DrawFn) -> dict[str, Any]:
    index = draw(st.integers(min_value=0, max_value=len(BASES) - 1))
    sent = copy.deepcopy(BASES[index])
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        damage(sent, draw(st.sampled_from(BASE_PATHS[index])), draw(hostile | st.just(DELETE)))
    return sent


def damage(document: dict[str, Any], path: tuple[object, ...], replacement: object) -> None:
    """Replace or delete what `path` points at; a no-op when an earlier damage removed the path."""
    parent: Any = document
    try:
        for key in path[:-1]:
            parent = parent[key]
        if replacement is DELETE:
            del parent[path[-1]]
        else:
            parent[path[-1]] = replacement
    except (KeyError, IndexError, TypeError):
        return


documents = damaged_reviews() | json_values


@pytest.fixture(scope="module")
def handlers() -> tuple[Route[Any], Route[Any]]:
    return build_handlers(ServeSettings())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory,
           handlers: tuple[Route[Any], Route[Any]]) -> Iterator[RunningServer]:
    mutate, validate = handlers
    enabled = admission_handlers(ServeSettings()).validate_enabled_namespace
    with running_server(tmp_path_factory.mktemp("fuzz"), mutate=mutate, validate=validate,
                        validate_enabled_namespace=enabled) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with server.client() as kept_alive:
        yield kept_alive


def encode(document: object) -> bytes:
    return json.dumps(document).encode()  # lone surrogates come out as escapes orjson refuses: a 400 case


def check_answer(sent: object, status: int, body: bytes) -> None:
    assert status != 500, f"a handler raised on this review: {body[:300]!r}"
    assert b"Traceback" not in body
    assert b'File "' not in body
    answer = json.loads(body)
    if status != 200:
        assert status in (400, 413), status
        assert isinstance(answer["error"], str)
        assert answer["error"]
        return
    assert isinstance(sent, dict)
    assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    check_response(sent["request"], answer["response"])


def check_response(request: dict[str, Any], response: dict[str, Any]) -> None:
    """What the apiserver checks in an answer, and that a patch really applies to the object."""
    assert response["uid"] == request["uid"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert 400 <= response["status"]["code"] < 500
        assert isinstance(response["status"]["message"], str)
        assert response["status"]["message"]
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(response["patch"], validate=True))
        jsonpatch.apply_patch(request["object"], ops)  # raises when an op does not apply


@settings(FUZZ, max_examples=HTTPS_EXAMPLES)
@given(document=documents, endpoint=st.sampled_from(["/mutate", "/validate", "/validate/enabled-namespace"]))
def test_hostile_reviews_over_https_get_a_4xx_or_a_valid_answer_never_a_crash(
    client: httpx.Client, document: object, endpoint: str
) -> None:
    response = client.post(endpoint, content=encode(document), headers={"content-type": "application/json"})
    check_answer(document, response.status_code, response.content)


def test_the_server_is_healthy_after_the_fuzzing(server: RunningServer, client: httpx.Client) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    sent = fixture("synthetic/pod-create-from-replicaset.json")
    response = client.post("/mutate", json=sent)
    assert response.status_code == 200
    check_response(sent["request"], response.json()["response"])
    metrics = client.get("/metrics").text
    assert 'tls_injector_admission_requests_total{endpoint="mutate",outcome="error"} 0.0' in metrics
    assert 'tls_injector_admission_requests_total{endpoint="validate",outcome="error"} 0.0' in metrics
    assert 'tls_injector_admission_requests_total{endpoint="validate/enabled-namespace",outcome="error"} 0.0' in metrics


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (encode({"x": "y" * (8 * 1024 * 1024)}), 413),  # over the 7 MiB cap
        (b"[" * 100_000, 400),  # nesting orjson refuses
        (b"\xff\xfe\x00garbage", 400),  # not UTF-8
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "' + b"u" * 200 + b'"}}',
         400),
        (b"1e999999", 400),
    ],
)
def test_extreme_bodies_are_refused_with_a_4xx(client: httpx.Client, body: bytes, status: int) -> None:
    response = client.post("/mutate", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status
    check_answer(None, response.status_code, response.content)


@settings(FUZZ, max_examples=IN_PROCESS_EXAMPLES)
@given(document=documents)
def test_each_route_answers_or_raises_bad_review_and_nothing_else(
    handlers: tuple[Route[Any], Route[Any]], document: object
) -> None:
    body = json.dumps(document).encode()
    for route in handlers:
        try:
            response = route.answer(body)
        except BadReview as error:
            message = str(error)
            assert message, "a BadReview must say what is wrong"
            assert len(message) < 2048
            continue
        check_response(orjson.loads(body)["request"], dict(response))
