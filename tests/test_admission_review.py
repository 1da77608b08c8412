"""The AdmissionReview envelope: the edge's typed decode of the Kubernetes fixtures, building responses."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.reviews import FIXTURES, decode, fixture
from tls_injector.admission import (
    BadReview,
    JsonPatchOp,
    allowed,
    decode_review,
    decoder,
    denied,
    patched,
    review_envelope,
)
from tls_injector.admission.review import review_problems
from tls_injector.injection import pod_spec
from tls_injector.injection.mutate import MutateRequest

API_TESTDATA = sorted(FIXTURES.glob("k8s-api-testdata*/*.json"))
REVIEWS = [p for p in API_TESTDATA if p.name.startswith("admission.k8s.io.v1.AdmissionReview")]
OBJECTS = [p for p in API_TESTDATA if not p.name.startswith("admission.k8s.io")]
SYNTHETIC = sorted((FIXTURES / "synthetic").glob("*.json"))


def mutate_request(body: object) -> MutateRequest:
    """What /mutate's decode makes of a review."""
    return decode_review(decoder(MutateRequest), orjson.dumps(body))


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
    request = mutate_request(body)
    assert request.uid == "uidValue"
    assert (request.kind.group, request.kind.version, request.kind.kind) == ("groupValue", "versionValue", "kindValue")
    assert (request.namespace, request.name, request.operation, request.dryRun) == (
        "namespaceValue", "nameValue", operation, True)
    assert request.object is not None
    assert request.object.metadata == kept["object"].get("metadata")
    assert request.object.spec == pod_spec(kept["object"].get("spec"))  # what the plan reads of it, typed


@pytest.mark.parametrize("path", REVIEWS, ids=lambda p: p.parent.name)
def test_the_placeholder_operation_is_refused_by_name(path: Path) -> None:
    with pytest.raises(BadReview, match=r"request\.operation"):
        decode(json.loads(path.read_text()))


@pytest.mark.parametrize("path", OBJECTS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_api_object_fixture_travels_unchanged_inside_a_review(path: Path) -> None:
    obj = json.loads(path.read_text())
    body = fixture("synthetic/pod-create-from-replicaset.json")
    body["request"].update(operation="UPDATE", object=obj, oldObject=copy.deepcopy(obj))
    request = mutate_request(body)
    assert request.object is not None
    assert request.object.metadata == obj.get("metadata")
    assert request.object.spec == pod_spec(obj.get("spec"))  # what the plan reads of it, typed


@pytest.mark.parametrize("path", SYNTHETIC, ids=lambda p: p.stem)
def test_every_synthetic_apiserver_review_parses(path: Path) -> None:
    body = json.loads(path.read_text())
    request = mutate_request(body)
    assert request.uid == body["request"]["uid"]
    assert request.namespace == body["request"].get("namespace")
    if request.operation == "DELETE":
        assert request.object is None
        assert request.oldObject is not None
    if request.operation == "CREATE":
        assert request.oldObject is None


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


# A review the apiserver would send, and for each field values it sends and values it never does: the
# generated reviews change a few fields of the good one, so they cross every check in both directions.
_GOOD: dict[str, Any] = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
         "request": {"uid": "0f1e", "operation": "CREATE", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                     "namespace": "team-a", "name": "web", "object": {}, "oldObject": None, "dryRun": False}}
_TEXT = st.sampled_from(["", "v1", "Pod", "x" * 253, "x" * 254])
_ODD = st.one_of(st.none(), st.booleans(), st.integers(), _TEXT, st.just([]), st.just({}), st.just({"a": 1}))
_DROPPED = object()
_REQUEST_FIELDS = {
    "uid": st.one_of(_ODD, st.sampled_from(["u" * 128, "u" * 129])),
    "operation": st.one_of(_ODD, st.sampled_from(["UPDATE", "DELETE", "CONNECT", "create"])),
    "kind": st.one_of(_ODD, st.fixed_dictionaries({}, optional={k: _ODD for k in ("group", "version", "kind")})),
    **{field: _ODD for field in ("object", "oldObject", "namespace", "name", "dryRun")},
}
_ENVELOPE_FIELDS = {"apiVersion": st.sampled_from(["admission.k8s.io/v1beta1", 1]),
                    "kind": st.sampled_from(["Pod", None]), "request": _ODD}


@st.composite
def _reviews(draw: st.DrawFn) -> object:
    body: dict[str, Any] = copy.deepcopy(_GOOD)
    for name in draw(st.lists(st.sampled_from(sorted(_REQUEST_FIELDS)), max_size=2, unique=True)):
        value = draw(st.one_of(st.just(_DROPPED), _REQUEST_FIELDS[name]))
        body["request"].pop(name) if value is _DROPPED else body["request"].update({name: value})
    if draw(st.integers(0, 9)) == 0:  # now and then the envelope itself is wrong
        name = draw(st.sampled_from(sorted(_ENVELOPE_FIELDS)))
        body[name] = draw(_ENVELOPE_FIELDS[name])
    return body if draw(st.integers(0, 49)) else draw(_ODD)


@given(_reviews())
@settings(max_examples=500, deadline=None)
def test_the_typed_decode_agrees_with_the_itemised_checks(body: object) -> None:
    """The edge accepts by a typed decode and one boolean test and itemises problems separately: the two
    must agree, or a review would be accepted that the checks refuse (or refused with no reason given)."""
    problems = review_problems(body)
    if problems:
        with pytest.raises(BadReview) as refused:
            decode(body)
        assert str(refused.value) == "not a valid AdmissionReview: " + "; ".join(problems)
    else:
        decode(body)


_SINGLE_ODD_VALUES = [None, True, 0, 1.5, "", "v1", "create", "x" * 253, "x" * 254, [], {}, {"a": 1}, _DROPPED]
_GOOD_KIND: dict[str, str] = _GOOD["request"]["kind"]
_ODD_TEXT: tuple[object, ...] = (None, 1, "x" * 253, "x" * 254, [])
_EXTRA_VALUES: dict[str, list[object]] = {
    "uid": ["u" * 128, "u" * 129],
    "kind": [*({k: v for k, v in _GOOD_KIND.items() if k != part} for part in _GOOD_KIND),
             *({**_GOOD_KIND, part: odd} for part in _GOOD_KIND for odd in _ODD_TEXT)],
}


@pytest.mark.parametrize("field", sorted(_REQUEST_FIELDS))
def test_every_single_field_change_is_judged_alike_both_ways(field: str) -> None:
    """Every field changed alone to each odd value: exhaustive where the generated reviews above sample."""
    for value in [*_SINGLE_ODD_VALUES, *_EXTRA_VALUES.get(field, [])]:
        body: dict[str, Any] = copy.deepcopy(_GOOD)
        body["request"].pop(field) if value is _DROPPED else body["request"].update({field: value})
        if review_problems(body):
            with pytest.raises(BadReview):
                decode(body)
        else:
            decode(body)  # accepted: raising here fails the test
