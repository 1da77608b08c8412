"""/mutate and /validate over real HTTPS: the envelope as the kube-apiserver checks it, and every way
a call can be malformed answered with a 4xx and no stack trace."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.process import post_head, read_response
from tests.support.reviews import fixture, review
from tests.support.server import RunningServer, running_server
from tls_injector.admission import AdmissionResponse, Envelope, JsonPatchOp, envelope_route, patched

JSON = {"content-type": "application/json"}


def _add_annotation(request: Envelope) -> AdmissionResponse:
    ops: list[JsonPatchOp] = [{"op": "add", "path": "/metadata/annotations", "value": {"seen": "yes"}}]
    return patched(request.uid, ops)


def _broken(request: Envelope) -> AdmissionResponse:
    raise RuntimeError("a bug with a secret in its message: hunter2")


add_annotation, broken = envelope_route(_add_annotation), envelope_route(_broken)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with running_server(tmp_path_factory.mktemp("srv"), mutate=add_annotation, validate=broken) as running:
        yield running


@pytest.fixture
def client(server: RunningServer) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


def test_a_review_shaped_like_the_apiservers_gets_a_contract_valid_answer(client: httpx.Client) -> None:
    sent = fixture("synthetic/pod-create-from-replicaset.json")
    response = client.post("/mutate?timeout=10s", json=sent)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == sent["request"]["uid"]
    assert body["response"]["allowed"] is True
    assert body["response"]["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(body["response"]["patch"], validate=True))
    assert ops == [{"op": "add", "path": "/metadata/annotations", "value": {"seen": "yes"}}]


@pytest.mark.parametrize(
    ("body", "headers", "status", "says"),
    [
        (b"", JSON, 400, "empty body"),
        (b"{not json", JSON, 400, "invalid JSON"),
        (b"[" * 5000 + b"]" * 5000, JSON, 400, "invalid JSON"),
        (b'"a string"', JSON, 400, "must be a JSON object, got string"),
        (b"[1, 2]", JSON, 400, "got array"),
        (b"null", JSON, 400, "got null"),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), JSON, 400,
         "request must be an object"),
        (json.dumps({**review(), "apiVersion": "admission.k8s.io/v1beta1"}).encode(), JSON, 400,
         "apiVersion must be"),
        (b"{}", {"content-type": "text/plain"}, 415, "application/json"),
        (b"{}", {}, 415, "application/json"),
    ],
)
def test_a_malformed_call_is_a_4xx_with_a_json_reason(
    client: httpx.Client, body: bytes, headers: dict[str, str], status: int, says: str
) -> None:
    response = client.post("/mutate", content=body, headers=headers)
    assert response.status_code == status
    assert says in response.json()["error"]
    assert "Traceback" not in response.text


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda r: r["request"].pop("uid"), "request.uid"),
        (lambda r: r["request"].update(uid=42), "request.uid"),
        (lambda r: r["request"].update(uid=""), "request.uid"),
        (lambda r: r["request"].update(uid="x" * 1000), "request.uid"),
        (lambda r: r["request"].update(operation="PATCH"), "request.operation"),
        (lambda r: r["request"].update(kind="Pod"), "request.kind"),
        (lambda r: r["request"].update(object=[1]), "request.object"),
        (lambda r: r["request"].update(dryRun="yes"), "request.dryRun"),
    ],
)
def test_an_invalid_request_field_is_named_in_the_400(client: httpx.Client, change: Any, says: str) -> None:
    sent = review()
    change(sent)
    response = client.post("/validate", json=sent)
    assert response.status_code == 400
    assert says in response.json()["error"]


def test_every_problem_is_reported_not_only_the_first(client: httpx.Client) -> None:
    sent = review()
    sent["kind"] = "Nope"
    sent["request"].update(uid="", operation="PATCH")
    error = client.post("/mutate", json=sent).json()["error"]
    assert all(part in error for part in ("kind must be", "request.uid", "request.operation"))


def test_a_body_over_7_mib_is_refused_with_413_before_it_is_parsed(client: httpx.Client) -> None:
    padding = "x" * (7 * 1024 * 1024)
    response = client.post("/mutate", content=b'{"pad": "' + padding.encode() + b'"}', headers=JSON)
    assert response.status_code == 413


def test_a_chunked_body_over_the_cap_is_cut_off_while_streaming(client: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"pad": "'
        for _ in range(8):
            yield b"x" * (1024 * 1024)
        yield b'"}'

    response = client.post("/mutate", content=chunks(), headers=JSON)
    assert response.status_code == 413


def test_only_post_is_accepted(client: httpx.Client) -> None:
    response = client.get("/mutate")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


def test_a_bug_in_a_handler_is_a_500_without_traceback_or_details(client: httpx.Client) -> None:
    sent = review(operation="UPDATE")
    response = client.post("/validate", json=sent)
    assert response.status_code == 500
    assert response.json() == {"error": "internal error while handling the review", "uid": sent["request"]["uid"]}
    assert "hunter2" not in response.text


def test_the_server_stays_healthy_after_bad_calls(client: httpx.Client) -> None:
    for body in (b"", b"[", b"{}"):
        client.post("/mutate", content=body, headers=JSON)
    assert client.get("/healthz").status_code == 200
    assert client.post("/mutate", json=review()).status_code == 200


def test_metrics_count_requests_by_endpoint_and_outcome(tmp_path: Path) -> None:
    with running_server(tmp_path, mutate=add_annotation, validate=broken) as server, server.client() as client:
        client.post("/mutate", json=review())
        client.post("/mutate", content=b"[", headers=JSON)
        client.post("/validate", json=review(operation="UPDATE"))
        text = client.get("/metrics").text
    assert 'tls_injector_admission_requests_total{endpoint="mutate",outcome="patched"} 1.0' in text
    assert 'tls_injector_admission_requests_total{endpoint="mutate",outcome="bad_request"} 1.0' in text
    assert 'tls_injector_admission_requests_total{endpoint="validate",outcome="error"} 1.0' in text
    assert 'tls_injector_admission_duration_seconds_count{endpoint="mutate"} 2.0' in text


def test_requests_arriving_in_pieces_on_several_connections_are_each_answered_from_their_own_bytes(
        server: RunningServer) -> None:
    """Every connection reads into one buffer the server shares (tls_injector.web.connections): a request
    that arrives in pieces, with other connections' requests read in between, must still be answered from
    its own bytes."""
    def body_for(uid: str) -> bytes:
        sent = fixture("synthetic/pod-create-from-replicaset.json")
        sent["request"]["uid"] = uid
        return json.dumps(sent).encode()

    def connect() -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        return server.client_context().wrap_socket(raw, server_hostname="localhost")

    with connect() as slow, connect() as quick:
        slow_request = post_head("/mutate", len(body_for("slow-0"))) + body_for("slow-0")
        pieces = [slow_request[i:i + 700] for i in range(0, len(slow_request), 700)]
        for n, piece in enumerate(pieces):
            slow.sendall(piece)
            quick.sendall(post_head("/mutate", len(body_for(f"quick-{n}"))) + body_for(f"quick-{n}"))
            status, answer = read_response(quick)
            assert (status, json.loads(answer)["response"]["uid"]) == (200, f"quick-{n}")
        status, answer = read_response(slow)
        assert (status, json.loads(answer)["response"]["uid"]) == (200, "slow-0")
