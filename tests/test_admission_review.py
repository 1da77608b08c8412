"""The AdmissionReview envelope as plain data: parsing the Kubernetes fixtures, building responses."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from app.admission import BadReview, JsonPatchOp, allowed, denied, parse_review, patched, review_envelope
from tests.support.reviews import FIXTURES, fixture

API_TESTDATA = sorted(FIXTURES.glob("k8s-api-testdata*/*.json"))
REVIEWS = [p for p in API_TESTDATA if p.name.startswith("admission.k8s.io.v1.AdmissionReview")]
OBJECTS = [p for p in API_TESTDATA if not p.name.startswith("admission.k8s.io")]
SYNTHETIC = sorted((FIXTURES / "synthetic").glob("*.json"))


def test_the_fixtures_are_there() -> None:
    assert len(REVIEWS) == 2
    assert len(OBJECTS) == 16
    assert len(SYNTHETIC) == 6


@pytest.mark.parametrize("path", REVIEWS, ids=lambda p: p.parent.name)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE", "CONNECT"])
def test_every_field_of_the_api_fixture_parses_and_is_kept(path: Path, operation: str) -> None:
    body = json.loads(path.read_text())
    body["request"]["operation"] = operation  # the fixture's placeholder "operationValue" is no operation
    kept = copy.deepcopy(body["request"])
    request = parse_review(body)
    assert request.uid == "uidValue"
    assert request.kind == {"group": "groupValue", "version": "versionValue", "kind": "kindValue"}
    assert (request.namespace, request.name, request.operation, request.dry_run) == (
        "namespaceValue", "nameValue", operation, True)
    assert request.object == kept["object"]
    assert request.old_object == kept["oldObject"]
    assert request.raw == kept  # unknown and unused fields (options, userInfo.extra, ...) are all preserved


@pytest.mark.parametrize("path", REVIEWS, ids=lambda p: p.parent.name)
def test_the_placeholder_operation_is_refused_by_name(path: Path) -> None:
    with pytest.raises(BadReview, match=r"request\.operation"):
        parse_review(json.loads(path.read_text()))


@pytest.mark.parametrize("path", OBJECTS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_api_object_fixture_travels_unchanged_inside_a_review(path: Path) -> None:
    obj = json.loads(path.read_text())
    body = fixture("synthetic/pod-create-from-replicaset.json")
    body["request"].update(operation="UPDATE", object=obj, oldObject=copy.deepcopy(obj))
    request = parse_review(json.loads(json.dumps(body)))
    assert request.object == obj
    assert request.old_object == obj


@pytest.mark.parametrize("path", SYNTHETIC, ids=lambda p: p.stem)
def test_every_synthetic_apiserver_review_parses(path: Path) -> None:
    body = json.loads(path.read_text())
    request = parse_review(body)
    assert request.uid == body["request"]["uid"]
    assert request.namespace == body["request"].get("namespace", "")
    if request.operation == "DELETE":
        assert request.object is None
        assert request.old_object is not None
    if request.operation == "CREATE":
        assert request.old_object is None


def test_a_patched_response_carries_standard_base64_of_the_json_patch() -> None:
    ops: list[JsonPatchOp] = [{"op": "add", "path": "/metadata/labels/a~1b", "value": "ü/+?"}]
    response = patched("u1", ops)
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"], validate=True)) == ops


def test_no_ops_means_no_patch_and_no_patch_type() -> None:
    assert patched("u1", []) == {"uid": "u1", "allowed": True}


def test_a_denial_is_allowed_false_with_a_4xx_status_and_the_message() -> None:
    response = denied("u2", "TLS cannot be removed", code=422, reason="Invalid")
    assert response == {"uid": "u2", "allowed": False,
                        "status": {"code": 422, "reason": "Invalid", "message": "TLS cannot be removed"}}


def test_warnings_are_kept_short_enough_for_kubectl() -> None:
    response = allowed("u3", warnings=["short", "x" * 1000])
    assert response["warnings"][0] == "short"
    assert len(response["warnings"][1]) == 256


def test_the_envelope_names_the_api_version_and_kind() -> None:
    envelope: dict[str, Any] = review_envelope(allowed("u4"))
    assert envelope == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                        "response": {"uid": "u4", "allowed": True}}
