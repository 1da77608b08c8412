"""/mutate's quick path (app/injection/quick.py) answers exactly what the full path answers, byte for byte.

Two endpoints over one set of bodies: one whose handler brings the quick path (as `serve` runs it), one
whose handler does not (the same handler wrapped, so only the full path runs). Every body, well formed
or broken, must get the same status and the same bytes from both, and the same access-log fields.
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.admission import AdmissionRequest, AdmissionResponse
from app.injection import InjectionOptions, make_mutate_handler, names
from app.injection.quick import QuickMutate
from app.web.endpoints import AdmissionEndpoint
from app.web.metrics import ServerMetrics
from tests.support.broken import broken, each_place_changed
from tests.support.reviews import fixture, review
from tests.support.workloads import build
from tests.test_mutate_answers import TOKEN_PATH, replica, token_suffix
from tests.test_naming_chain import NAMESPACE, Cluster, admit_job, shapes

JSON = b"application/json"
FINGERPRINTS = ("9f86d081884c7d65",)


class Pair:
    """The same handler behind two endpoints: with its quick path, and wrapped so it has none."""

    def __init__(self) -> None:
        handler = make_mutate_handler(InjectionOptions(), ca_fingerprints=lambda: FINGERPRINTS)
        self.quick: QuickMutate = handler.quick  # type: ignore[attr-defined]

        def full_only(request: AdmissionRequest) -> AdmissionResponse:
            return handler(request)

        self.with_quick = AdmissionEndpoint(name="mutate", handler=handler, metrics=ServerMetrics())
        self.without = AdmissionEndpoint(name="mutate", handler=full_only, metrics=ServerMetrics())
        self.logged: list[tuple[str, dict[str, object]]] = []
        for endpoint in (self.with_quick, self.without):
            endpoint.access_log.enabled = True
            endpoint.access_log.info = lambda msg, fields: self.logged.append((msg, fields))  # type: ignore[method-assign]

    def both(self, body: bytes) -> tuple[tuple[int, bytes], tuple[int, bytes]]:
        quick_status, quick_body, _ = self.with_quick.answer(b"POST", JSON, body)
        full_status, full_body, _ = self.without.answer(b"POST", JSON, body)
        return (quick_status, quick_body), (full_status, full_body)


def pod_review(pod: dict[str, Any], uid: str) -> bytes:
    body = review(obj=copy.deepcopy(pod), namespace=NAMESPACE)
    body["request"]["uid"] = uid
    return orjson.dumps(body)


def without_timing(fields: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in fields.items() if k != "latency_ms"}


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(shapes(), min_size=1, max_size=4))
def test_replicas_get_the_full_paths_answer_from_the_quick_path(drawn: list[Any]) -> None:
    pair = Pair()
    pods = [build(shape, NAMESPACE, create=Cluster().create, admit_job=admit_job) for shape, _ in drawn]
    for round_ in range(3):
        for index, pod in enumerate(pods):
            body = pod_review(replica(pod, round_ * 10 + index), f"uid-{round_}-{index}")
            pair.logged.clear()
            quick, full = pair.both(body)
            assert quick == full
            assert [without_timing(f) for _, f in pair.logged[:1]] == [without_timing(f) for _, f in pair.logged[1:]]
    if any(enabled or "tls-injector.io/inject" in shape.labels for shape, enabled in drawn):
        assert pair.quick.hits > 0  # the path was taken, not merely skipped


def test_the_second_replica_is_answered_without_the_full_path() -> None:
    pair = Pair()
    sent = fixture("synthetic/pod-create-from-replicaset.json")
    first = orjson.dumps(sent)
    sent["request"]["uid"] = "second"
    sent["request"]["object"]["metadata"]["name"] = "web-7d4b9c-zzzzz"
    second = orjson.dumps(sent)
    pair.both(first)
    assert (pair.quick.hits, pair.quick.misses) == (0, 1)
    quick, full = pair.both(second)
    assert quick == full
    assert (pair.quick.hits, pair.quick.misses) == (1, 1)
    assert json.loads(quick[1])["response"]["uid"] == "second"


def test_replicas_with_their_own_token_volumes_share_the_answer_unless_it_names_the_volume() -> None:
    pair = Pair()
    pod = GOOD["request"]["object"]
    for index in range(3):
        quick, full = pair.both(pod_review(replica(pod, index), f"uid-{index}"))
        assert quick == full
    assert (pair.quick.hits, pair.quick.misses) == (2, 1)
    # The token volume mounted where the certificate goes: each refusal names that pod's own volume.
    pod = copy.deepcopy(pod)
    pod["metadata"]["annotations"][names.CERT_PATH_ANNOTATION] = TOKEN_PATH
    for index in range(3):
        quick, full = pair.both(pod_review(replica(pod, index), f"uid-refused-{index}"))
        assert quick == full
        assert f"kube-api-access-{token_suffix(index)}".encode() in quick[1]
    assert pair.quick.hits == 2


# Ways a body differs from a good Pod CREATE review: the generated bodies change one to three places of
# a primed one (its shape already remembered), so a wrong acceptance would be answered from memory.
_ODD = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["", "Pod", "CREATE", "x" * 254]),
                 st.just([]), st.just({}), st.just({"a": [1]}))
_PLACES = [("apiVersion",), ("kind",), ("request",), ("request", "uid"), ("request", "operation"),
           ("request", "kind"), ("request", "kind", "group"), ("request", "kind", "kind"),
           ("request", "kind", "version"), ("request", "namespace"), ("request", "name"), ("request", "dryRun"),
           ("request", "subResource"), ("request", "oldObject"), ("request", "object"),
           ("request", "object", "metadata"), ("request", "object", "metadata", "labels"),
           ("request", "object", "spec"), ("request", "userInfo"), ("request", "object", "status")]


GOOD = fixture("synthetic/pod-create-from-replicaset.json")


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(broken(GOOD, _PLACES, _ODD))
def test_a_body_that_is_not_a_replica_gets_the_same_answer_both_ways(body: bytes) -> None:
    pair = Pair()
    pair.both(orjson.dumps(GOOD))  # the good review's shape is remembered
    quick, full = pair.both(body)
    assert quick == full


def test_a_pod_too_large_to_remember_is_planned_every_time() -> None:
    handler = make_mutate_handler(InjectionOptions())
    quick: QuickMutate = handler.quick  # type: ignore[attr-defined]
    sent = fixture("synthetic/pod-create-from-replicaset.json")
    sent["request"]["object"]["metadata"]["annotations"]["example.com/big"] = "x" * (quick.max_key_bytes + 1)
    assert quick.pod_review(orjson.dumps(sent)) is None


_VARIANTS: list[object] = [None, True, 0, 2, "", "Pod", "CREATE", "v1", "admission.k8s.io/v1beta1", "x" * 254, [], {},
                           {"a": [1]}, {"tls-injector.io/inject": "false"}]


def test_every_place_changed_alone_gets_the_same_answer_both_ways() -> None:
    """Exhaustive where the generated bodies above sample: each place dropped or set to each variant."""
    pair = Pair()
    pair.both(orjson.dumps(GOOD))
    for place, value, body in each_place_changed(GOOD, _PLACES, _VARIANTS):
        quick, full = pair.both(body)
        assert quick == full, (place, value)


@pytest.mark.parametrize("depth", [900, 1023, 1024, 1100, 5000])
@pytest.mark.parametrize("limit", [None, 20_000])
def test_nesting_in_a_skipped_field_is_judged_by_the_full_decode(depth: int, limit: int | None) -> None:
    """Nesting the full decode refuses must never be answered from memory: under the interpreter's own
    recursion limit (a server's) and under a raised one (as test runners run)."""
    pair = Pair()
    pair.both(orjson.dumps(GOOD))
    deep = orjson.dumps(GOOD).replace(b'"request":{', b'"request":{"options":' + b"[" * depth + b"]" * depth + b",", 1)
    before = sys.getrecursionlimit()
    try:
        if limit is not None:
            sys.setrecursionlimit(limit)
        quick, full = pair.both(deep)
    finally:
        sys.setrecursionlimit(before)
    assert quick == full
    assert full[0] == (200 if depth + 2 <= 1024 else 400)  # the envelope and request are two levels


def test_a_pod_the_quick_path_has_no_answer_for_is_planned_once_not_looked_up_twice() -> None:
    handler = make_mutate_handler(InjectionOptions())
    endpoint = AdmissionEndpoint(name="mutate", handler=handler, metrics=ServerMetrics())
    body = orjson.dumps(GOOD)
    assert endpoint.answer(b"POST", JSON, body)[0] == 200
    assert (handler.quick.misses, handler.answers.hits, handler.answers.misses) == (1, 0, 0)  # type: ignore[attr-defined]
    assert endpoint.answer(b"POST", JSON, body)[0] == 200
    assert handler.quick.hits == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("number", [b"123456789012345678901234567890", b"1e400", b"-0.0", b"1E2"])
def test_numbers_the_two_decoders_read_differently_get_the_same_answer_both_ways(number: bytes) -> None:
    """msgspec keeps an integer past 64 bits an int where orjson makes it a float: the quick path decodes
    what the plan reads (metadata and spec) with orjson, as the full path does."""
    pair = Pair()
    pair.both(orjson.dumps(GOOD))
    text = orjson.dumps(GOOD)
    for place in (b'"metadata":{', b'"annotations":{', b'"spec":{'):
        body = text.replace(place, place + b'"example.com/n":' + number + b",", 1)
        quick, full = pair.both(body)
        assert quick == full, (place, number)


def test_a_bug_in_the_plan_on_the_quick_path_is_a_500_with_the_uid(caplog: pytest.LogCaptureFixture) -> None:
    handler = make_mutate_handler(InjectionOptions())

    def broken(uid: str, pod: dict[str, Any], fingerprints: Any) -> AdmissionResponse:
        raise RuntimeError("hunter2")

    handler.quick._plan = broken  # type: ignore[attr-defined]
    endpoint = AdmissionEndpoint(name="mutate", handler=handler, metrics=ServerMetrics())
    status, body, _ = endpoint.answer(b"POST", JSON, orjson.dumps(GOOD))
    assert status == 500
    assert orjson.loads(body) == {"error": "internal error while handling the review", "uid": GOOD["request"]["uid"]}
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == ["admission handler failed"]


MODE = "tls-injector.io/mode"


def with_token(pod: dict[str, Any], suffix: str) -> dict[str, Any]:
    """`pod` whose token volume is kube-api-access-<suffix>, everywhere it is named."""
    ours = f"kube-api-access-{token_suffix(0)}".encode()
    text = orjson.dumps(pod).replace(ours, f"kube-api-access-{suffix}".encode())
    out: dict[str, Any] = orjson.loads(text)
    return out


def test_a_refusal_quoting_part_of_the_token_name_is_not_shared() -> None:
    """A message cuts a quoted value short, so it may hold the token's prefix and only the first letters
    of its suffix: still another message for another pod, so it is not remembered for the others."""
    pair = Pair()
    pod = replica(GOOD["request"]["object"], 0)
    answers = []
    for index, suffix in enumerate(("abcde", "zbcde")):
        mine = with_token(pod, suffix)
        mine["metadata"]["annotations"][MODE] = "x" * 57 + f'"kube-api-access-{suffix}'
        quick, full = pair.both(pod_review(mine, f"uid-cut-{index}"))
        assert quick == full
        answers.append(orjson.loads(quick[1])["response"]["status"]["message"])
    assert "kube-api-access-a" in answers[0]
    assert "kube-api-access-z" in answers[1]
    assert pair.quick.hits == 0


def test_a_token_name_written_with_escapes_keeps_the_pods_apart() -> None:
    """The key's placeholder stands in for the token name as the text writes it; written with a \\u escape
    (never by the apiserver), a name the scan cannot see would make two different pods one key."""
    pair = Pair()
    base = copy.deepcopy(GOOD["request"]["object"])
    base["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}, {"name": "x", "emptyDir": {}}]
    base["spec"]["containers"] = [
        {"name": "c0", "image": "i", "volumeMounts": [{"name": "data", "mountPath": '/etc/"kubeDASHapi-access-abcde'}]},
        {"name": "c1", "image": "i", "volumeMounts": [{"name": "x", "mountPath": "/etc/tls-injector/trust"}]},
    ]
    for index, suffix in enumerate(("zzzzz", "abcde")):
        pod = copy.deepcopy(base)
        pod["metadata"]["annotations"][names.CERT_PATH_ANNOTATION] = f'/etc/"kube-api-access-{suffix}'
        body = pod_review(pod, f"uid-escaped-{index}").replace(b"kubeDASHapi", b"kube\\u002dapi")
        quick, full = pair.both(body)
        assert quick == full, suffix
    assert pair.quick.hits == 0


def test_a_value_nested_deep_in_a_refusal_is_named_by_its_type() -> None:
    """A mount whose name is an array nested near the recursion limit, at the certificate's path: the
    refusal names it "an array" rather than turning it into text (which overflowed: a 500)."""
    for depth in range(sys.getrecursionlimit() - 30, sys.getrecursionlimit() + 3):
        pair = Pair()
        sent = copy.deepcopy(GOOD)
        sent["request"]["object"]["spec"]["containers"][0]["volumeMounts"].append(
            {"name": "NESTED", "mountPath": "/etc/tls-injector/certs"})
        body = orjson.dumps(sent).replace(b'"NESTED"', b"[" * depth + b"]" * depth)
        quick, full = pair.both(body)
        assert quick == full, depth
        assert quick[0] == 200, depth
        assert b"already mounts volume an array" in quick[1], depth
