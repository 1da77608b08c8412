"""Nothing a client sends reaches a response or a log line unbounded."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator
from datetime import datetime

import orjson
import pytest

from tests.rules_matrix import workload
from tests.support.reviews import decode, review
from tests.support.server import RunningServer, running_server
from tls_injector.admission import MAX_ECHO_CHARS, BadReview, clip, shown
from tls_injector.cli import build_handlers
from tls_injector.injection import InjectionOptions
from tls_injector.injection.choices import InjectionRefused
from tls_injector.injection.plan import MAX_CONTAINERS, plan_pod
from tls_injector.logs import MAX_TRACEBACK_CHARS, AccessLog, JsonFormatter
from tls_injector.settings import ServeSettings
from tls_injector.web.endpoints import _fields

MEGA = "k" * 1_000_000
INJECT = "tls-injector.io/inject"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    mutate, validate = build_handlers(ServeSettings())
    with running_server(tmp_path_factory.mktemp("srv"), mutate=mutate, validate=validate) as running:
        yield running


def test_clip_keeps_short_text_and_says_how_much_it_cut() -> None:
    assert clip("web") == "web"
    assert clip("x" * 300) == "x" * MAX_ECHO_CHARS + "...(+44 characters)"
    assert shown({"a": MEGA}) == "an object"
    assert shown([1]) == "an array"
    assert shown(MEGA).startswith("'kkk")
    assert len(shown(MEGA)) < MAX_ECHO_CHARS + 40


@pytest.mark.parametrize("field", ["apiVersion", "kind"])
def test_a_megabyte_envelope_field_gives_a_small_400(server: RunningServer, field: str) -> None:
    sent = review(obj={"metadata": {"name": "p"}})
    sent[field] = MEGA
    with server.client() as client:
        response = client.post("/mutate", content=orjson.dumps(sent), headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert len(response.content) < 1024
    assert "(+" in response.text


def test_a_megabyte_object_as_the_kind_is_named_by_its_type() -> None:
    with pytest.raises(BadReview) as caught:
        decode({"apiVersion": "admission.k8s.io/v1", "kind": {"k": MEGA}, "request": {}})
    assert "got an object" in str(caught.value)
    assert len(str(caught.value)) < 1024


def test_a_denial_quoting_a_megabyte_label_key_stays_small(server: RunningServer) -> None:
    old = workload("Deployment", ("true", MEGA))
    new = workload("Deployment", ("true", MEGA + "x"))  # a swap of a megabyte-long Secret name
    sent = review(operation="UPDATE", obj=new, old=old, kind=("apps", "v1", "Deployment"))
    with server.client() as client:
        response = client.post("/validate", content=orjson.dumps(sent), headers={"content-type": "application/json"})
    answer = response.json()["response"]
    assert answer["allowed"] is False
    assert len(answer["status"]["message"]) < 4096


def test_a_megabyte_kind_is_refused_before_anything_logs_it(server: RunningServer) -> None:
    sent = review(obj={"metadata": {"name": "p"}})
    sent["request"]["kind"]["kind"] = MEGA
    with server.client() as client:
        response = client.post("/mutate", content=orjson.dumps(sent), headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert len(response.content) < 1024
    assert "request.kind" in response.text


@pytest.mark.parametrize("field", ["name", "namespace"])
def test_a_megabyte_name_or_namespace_is_answered_and_logged_clipped(server: RunningServer, field: str) -> None:
    """The apiserver sends a user's name before validating it (app/admission/review.py,
    MAX_SENT_NAME_LENGTH): answered as any review, and the access line carries it clipped."""
    sent = review(obj={"metadata": {"name": "p"}})
    sent["request"][field] = MEGA
    with server.client() as client:
        response = client.post("/mutate", content=orjson.dumps(sent), headers={"content-type": "application/json"})
    assert response.status_code == 200
    assert len(response.content) < 4096
    request = decode(sent)
    logged = _fields("mutate", request)
    key = "object_name" if field == "name" else "namespace"
    assert len(str(logged[key])) <= MAX_ECHO_CHARS + 40


def test_the_access_log_line_is_one_line_in_the_json_formatter_shape() -> None:
    logging.getLogger("test.access").setLevel(logging.INFO)
    stream = io.StringIO()
    AccessLog("test.access", stream).info("admission", {"kind": "Pod", "object_name": "web", "latency_ms": 0.1})
    line = stream.getvalue()
    assert line.count("\n") == 1
    fields = orjson.loads(line)
    assert fields["latency_ms"] == 0.1
    assert datetime.fromisoformat(fields["time"]).tzinfo is not None
    assert (fields["level"], fields["logger"], fields["msg"]) == ("info", "test.access", "admission")


def test_a_repeated_failure_logs_its_traceback_once_then_one_short_line() -> None:
    formatter = JsonFormatter()
    lines = []
    for _ in range(3):
        try:
            {}[MEGA]  # the KeyError carries a megabyte key, as a request's value would
        except KeyError:
            record = logging.LogRecord("t", logging.ERROR, __file__, 1, "handler failed: %s", (MEGA,),
                                       sys.exc_info())
            lines.append(formatter.format(record))
    first, second, third = (orjson.loads(line) for line in lines)
    assert "Traceback" in first["exception"]
    assert len(first["exception"]) <= MAX_TRACEBACK_CHARS + MAX_ECHO_CHARS + 100
    assert "traceback logged before" in second["exception"]
    assert second["exception"] == third["exception"]
    assert all(len(line) < 4096 for line in lines)


def test_a_pod_far_bigger_than_any_real_one_is_refused_quickly_with_the_reason(server: RunningServer) -> None:
    containers = [{"name": f"c{i}", "image": "nginx"} for i in range(200_000)]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big", "labels": {INJECT: "true"}},
           "spec": {"containers": containers}}
    with server.client() as client:
        response = client.post("/mutate", content=orjson.dumps(review(obj=pod)),
                               headers={"content-type": "application/json"})
    answer = response.json()["response"]
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 422
    assert f"at most {MAX_CONTAINERS}" in answer["status"]["message"]
    assert "patch" not in answer
    assert len(response.content) < 2048


@pytest.mark.parametrize(("init", "regular", "refused"), [(6, 250, False), (6, 251, True)])
def test_the_container_limit_counts_init_containers_too(init: int, regular: int, refused: bool) -> None:
    pod = {"metadata": {"name": "p"},
           "spec": {"initContainers": [{"name": f"i{i}", "image": "x"} for i in range(init)],
                    "containers": [{"name": f"c{i}", "image": "x"} for i in range(regular)]}}
    if refused:
        with pytest.raises(InjectionRefused, match="the pod has 257 containers"):
            plan_pod(pod, options=InjectionOptions())
    else:
        assert len(plan_pod(pod, options=InjectionOptions()).containers) == 256


def test_a_megabyte_container_name_is_refused_not_copied_into_the_record() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": MEGA, "image": "x"}]}}
    with pytest.raises(InjectionRefused) as caught:
        plan_pod(pod, options=InjectionOptions())
    assert "longer than a container name may be (63 characters" in str(caught.value)
    assert len(str(caught.value)) < 1024
