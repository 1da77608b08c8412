"""/mutate's one memo: every body gets the same status and bytes with the memo as without it.

Two endpoints over one set of bodies: one whose route remembers answers (as `serve` runs it), one whose
memo holds nothing, so every pod is planned. Every body, well formed or broken, must get the same status
and the same bytes from both, and the same access-log fields.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import sys
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.instructions import stream
from tests.support.broken import broken, each_place_changed, nested, recursion_limit
from tests.support.reviews import fixture, review
from tests.support.workloads import build
from tests.test_mutate_answers import TOKEN_PATH, replica, token_suffix
from tests.test_naming_chain import NAMESPACE, Cluster, admit_job, shapes
from tls_injector import names
from tls_injector.injection import InjectionOptions, make_mutate_handler
from tls_injector.injection.answers import SAMPLE_EVERY, Answers
from tls_injector.injection.choices import _CHOICE_ANNOTATIONS, InjectionRefused, may_add_env, read_choices
from tls_injector.injection.patch import patch_ops
from tls_injector.injection.plan import plan_pod
from tls_injector.web.endpoints import AdmissionEndpoint
from tls_injector.web.metrics import ServerMetrics

JSON = b"application/json"
FINGERPRINTS = ("9f86d081884c7d65",)


class Pair:
    """The same route behind two endpoints: with its memo, and with a memo that holds nothing."""

    def __init__(self, memo: Answers | None = None) -> None:
        self.memo = Answers() if memo is None else memo
        remembering = make_mutate_handler(InjectionOptions(), ca_fingerprints=lambda: FINGERPRINTS, answers=self.memo)
        planning = make_mutate_handler(InjectionOptions(), ca_fingerprints=lambda: FINGERPRINTS,
                                       answers=Answers(max_entries=0))
        self.with_memo = AdmissionEndpoint(name="mutate", route=remembering, metrics=ServerMetrics())
        self.without = AdmissionEndpoint(name="mutate", route=planning, metrics=ServerMetrics())
        self.logged: list[tuple[str, dict[str, object]]] = []
        for endpoint in (self.with_memo, self.without):
            endpoint.access_log.enabled = True
            endpoint.access_log.info = lambda msg, fields: self.logged.append((msg, fields))  # type: ignore[method-assign]

    def both(self, body: bytes) -> tuple[tuple[int, bytes], tuple[int, bytes]]:
        memo_status, memo_body, _ = self.with_memo.answer(b"POST", JSON, body)
        plan_status, plan_body, _ = self.without.answer(b"POST", JSON, body)
        return (memo_status, memo_body), (plan_status, plan_body)


def pod_review(pod: dict[str, Any], uid: str) -> bytes:
    body = review(obj=copy.deepcopy(pod), namespace=NAMESPACE)
    body["request"]["uid"] = uid
    return orjson.dumps(body)


def without_timing(fields: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in fields.items() if k != "latency_ms"}


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(shapes(), min_size=1, max_size=4))
def test_replicas_get_a_fresh_plans_answer_from_the_memo(drawn: list[Any]) -> None:
    pair = Pair()
    pods = [build(shape, NAMESPACE, create=Cluster().create, admit_job=admit_job) for shape, _ in drawn]
    for round_ in range(3):
        for index, pod in enumerate(pods):
            body = pod_review(replica(pod, round_ * 10 + index), f"uid-{round_}-{index}")
            pair.logged.clear()
            remembered, planned = pair.both(body)
            assert remembered == planned
            assert [without_timing(f) for _, f in pair.logged[:1]] == [without_timing(f) for _, f in pair.logged[1:]]
    if any(enabled or "tls-injector.io/inject" in shape.labels for shape, enabled in drawn):
        assert pair.memo.hits > 0  # the memo was used, not merely skipped


def test_pods_that_never_repeat_then_replicas_get_the_same_bytes_with_the_memo_stepped_aside_and_back() -> None:
    pair = Pair(Answers(idle_after=4))
    for body in stream(4 + 2 * SAMPLE_EVERY, new=False, plan=True):  # a new plan at every review
        remembered, planned = pair.both(body)
        assert remembered == planned
        assert b'"patch"' in remembered[1]
    assert pair.memo.stepped_aside
    for body in stream(4 * SAMPLE_EVERY, new=False, plan=False):  # then a template's replicas
        remembered, planned = pair.both(body)
        assert remembered == planned
    assert not pair.memo.stepped_aside
    assert pair.memo.hits > 2 * SAMPLE_EVERY


def test_the_second_replica_is_answered_from_the_memo() -> None:
    pair = Pair()
    sent = fixture("synthetic/pod-create-from-replicaset.json")
    first = orjson.dumps(sent)
    sent["request"]["uid"] = "second"
    sent["request"]["object"]["metadata"]["name"] = "web-7d4b9c-zzzzz"
    second = orjson.dumps(sent)
    pair.both(first)
    assert (pair.memo.hits, pair.memo.misses) == (0, 1)
    remembered, planned = pair.both(second)
    assert remembered == planned
    assert (pair.memo.hits, pair.memo.misses) == (1, 1)
    assert json.loads(remembered[1])["response"]["uid"] == "second"


def test_replicas_with_their_own_token_volumes_share_the_answer_unless_it_names_the_volume() -> None:
    pair = Pair()
    pod = GOOD["request"]["object"]
    for index in range(3):
        remembered, planned = pair.both(pod_review(replica(pod, index), f"uid-{index}"))
        assert remembered == planned
    assert (pair.memo.hits, pair.memo.misses) == (2, 1)
    # The token volume mounted where the certificate goes: each refusal names that pod's own volume.
    pod = copy.deepcopy(pod)
    pod["metadata"]["annotations"][names.CERT_PATH_ANNOTATION] = TOKEN_PATH
    for index in range(3):
        remembered, planned = pair.both(pod_review(replica(pod, index), f"uid-refused-{index}"))
        assert remembered == planned
        assert f"kube-api-access-{token_suffix(index)}".encode() in remembered[1]
    assert pair.memo.hits == 2


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
def test_a_body_that_is_not_a_replica_gets_the_same_answer_with_and_without_the_memo(body: bytes) -> None:
    pair = Pair()
    pair.both(orjson.dumps(GOOD))  # the good review's shape is remembered
    remembered, planned = pair.both(body)
    assert remembered == planned


def test_a_pod_too_large_to_remember_is_planned_every_time() -> None:
    pair = Pair()
    sent = fixture("synthetic/pod-create-from-replicaset.json")
    sent["request"]["object"]["metadata"]["annotations"]["example.com/big"] = "x" * (pair.memo.max_key_bytes + 1)
    for _ in range(2):
        remembered, planned = pair.both(orjson.dumps(sent))
        assert remembered == planned
        assert remembered[0] == 200
    assert (pair.memo.hits, pair.memo.misses, len(pair.memo)) == (0, 0, 0)


_VARIANTS: list[object] = [None, True, 0, 2, "", "Pod", "CREATE", "v1", "admission.k8s.io/v1beta1", "x" * 254, [], {},
                           {"a": [1]}, {"tls-injector.io/inject": "false"}]


def test_every_place_changed_alone_gets_the_same_answer_with_and_without_the_memo() -> None:
    """Exhaustive where the generated bodies above sample: each place dropped or set to each variant."""
    pair = Pair()
    pair.both(orjson.dumps(GOOD))
    for place, value, body in each_place_changed(GOOD, _PLACES, _VARIANTS):
        remembered, planned = pair.both(body)
        assert remembered == planned, (place, value)


@pytest.mark.parametrize("depth", [900, 1023, 1024, 1100, 5000])
@pytest.mark.parametrize("limit", [None, 20_000])
def test_nesting_deeper_than_the_decode_takes_is_a_400_even_for_a_remembered_shape(depth: int,
                                                                                   limit: int | None) -> None:
    """Under the interpreter's own recursion limit (a server's) and under a raised one (as test runners
    run): the decode refuses what it cannot take, before any memo is asked."""
    pair = Pair()
    pair.both(orjson.dumps(GOOD))
    with recursion_limit(limit):
        remembered, planned = pair.both(nested(orjson.dumps(GOOD), depth))
    assert remembered == planned
    assert remembered[0] == (200 if depth == 900 else 400)
    assert b"Traceback" not in remembered[1]


def test_a_new_shape_is_planned_once_then_remembered() -> None:
    memo = Answers()
    route = make_mutate_handler(InjectionOptions(), answers=memo)
    endpoint = AdmissionEndpoint(name="mutate", route=route, metrics=ServerMetrics())
    body = orjson.dumps(GOOD)
    assert endpoint.answer(b"POST", JSON, body)[0] == 200
    assert (memo.hits, memo.misses) == (0, 1)
    assert endpoint.answer(b"POST", JSON, body)[0] == 200
    assert (memo.hits, memo.misses) == (1, 1)


@pytest.mark.parametrize("number", [b"123456789012345678901234567890", b"1e400", b"-0.0", b"1E2"])
def test_numbers_get_the_same_answer_with_and_without_the_memo(number: bytes) -> None:
    pair = Pair()
    pair.both(orjson.dumps(GOOD))
    text = orjson.dumps(GOOD)
    for place in (b'"metadata":{', b'"annotations":{', b'"spec":{'):
        body = text.replace(place, place + b'"example.com/n":' + number + b",", 1)
        remembered, planned = pair.both(body)
        assert remembered == planned, (place, number)
        assert remembered[0] in (200, 400)
        assert b"Traceback" not in remembered[1]


def test_a_bug_in_the_plan_is_a_500_with_the_uid(caplog: pytest.LogCaptureFixture,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("hunter2")

    monkeypatch.setattr("tls_injector.injection.mutate.plan_injection", broken)
    endpoint = AdmissionEndpoint(name="mutate", route=make_mutate_handler(InjectionOptions()), metrics=ServerMetrics())
    status, body, _ = endpoint.answer(b"POST", JSON, orjson.dumps(GOOD))
    assert status == 500
    assert orjson.loads(body) == {"error": "internal error while handling the review", "uid": GOOD["request"]["uid"]}
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == ["admission handler failed"]
    assert "hunter2" not in body.decode()


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
        remembered, planned = pair.both(pod_review(mine, f"uid-cut-{index}"))
        assert remembered == planned
        answers.append(orjson.loads(remembered[1])["response"]["status"]["message"])
    assert "kube-api-access-a" in answers[0]
    assert "kube-api-access-z" in answers[1]
    assert pair.memo.hits == 0


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
        remembered, planned = pair.both(body)
        assert remembered == planned, suffix
    assert pair.memo.hits == 0


def test_a_value_nested_deep_where_a_name_belongs_is_a_400_at_every_depth() -> None:
    """A mount whose name is an array nested near the recursion limit, at the certificate's path: the
    edge's typed decode (a mount's name is a string, tls_injector.injection.podspec) refuses it, with the path of
    the field while the nesting is within what it takes and as nested too deeply past it; never a 500."""
    limit = sys.getrecursionlimit()
    for depth in (1, limit - 300, limit - 200, *range(limit - 30, limit + 3)):
        pair = Pair()
        sent = copy.deepcopy(GOOD)
        sent["request"]["object"]["spec"]["containers"][0]["volumeMounts"].append(
            {"name": "NESTED", "mountPath": "/etc/tls-injector/certs"})
        body = orjson.dumps(sent).replace(b'"NESTED"', b"[" * depth + b"]" * depth)
        remembered, planned = pair.both(body)
        assert remembered == planned, depth
        assert remembered[0] == 400, depth
        reason = orjson.loads(remembered[1])["error"]
        assert "volumeMounts[1].name" in reason or "nested too deeply" in reason or "more than" in reason, reason


def _with_env(env: object, annotations: dict[str, str] | None = None, uid: str = "u") -> bytes:
    """The synthetic ReplicaSet pod with `env` as its container's env list, and `annotations` added."""
    sent = fixture("synthetic/pod-create-from-replicaset.json")
    sent["request"]["uid"] = uid
    pod = sent["request"]["object"]
    pod["spec"]["containers"][0]["env"] = env
    pod["metadata"]["annotations"].update(annotations or {})
    return orjson.dumps(sent)


def _env_ops(body: bytes) -> list[dict[str, Any]]:
    response = json.loads(body)["response"]
    return [op for op in json.loads(base64.b64decode(response["patch"])) if "/env" in op["path"]]


def test_env_lists_are_left_out_of_the_key_unless_the_pod_asks_for_the_tls_variables() -> None:
    """The plan reads a container's env (its names) only for a pod with the env annotation: the other pods'
    env lists, names and values, are not part of their answer, and replicas of templates that differ in
    them alone share it. A pod that asks gets its names read, and one that already sets a variable is
    not given it again: a different answer, so its own key."""
    pair = Pair()
    for uid, env in enumerate(([{"name": "A", "value": "1"}], [{"name": "B", "value": "2"}], None,
                               [{"name": "SSL_CERT_FILE", "value": "/mine"}])):
        remembered, planned = pair.both(_with_env(env, uid=str(uid)))
        assert remembered == planned
        assert remembered[0] == 200
        assert _env_ops(remembered[1]) == []
    assert (pair.memo.hits, pair.memo.misses) == (3, 1)
    asks = {names.ENV_ANNOTATION: "SSL_CERT_FILE"}
    answers = []
    for uid, env in enumerate(([{"name": "A", "value": "1"}], [{"name": "A", "value": "2"}],
                               [{"name": "SSL_CERT_FILE", "value": "/mine"}], None)):
        remembered, planned = pair.both(_with_env(env, asks, uid=f"asks-{uid}"))
        assert remembered == planned
        answers.append(_env_ops(remembered[1]))
    added = {"name": "SSL_CERT_FILE", "value": "/etc/tls-injector/trust/ca-bundle.crt"}
    assert answers[0] == answers[1] == [{"op": "add", "path": "/spec/containers/0/env/-", "value": added}]
    assert answers[2] == []  # set by the pod: kept, not added again
    assert answers[3] == [{"op": "add", "path": "/spec/containers/0/env", "value": [added]}]


@pytest.mark.parametrize("env", [[{"value": "no name"}], [{"name": 5}], 5, "A=1", {"name": "A"}],
                         ids=["no name", "name a number", "a number", "text", "an object"])
def test_an_env_list_the_api_would_refuse_is_refused_where_it_is_read(env: object) -> None:
    """The apiserver never sends one. Where the plan reads it (the env annotation) it is a 422 naming the
    container; elsewhere it is not read, as the rest of a spec the plan does not read (images, probes)."""
    pair = Pair()
    remembered, planned = pair.both(_with_env(env))
    assert remembered == planned
    assert remembered[0] == 200
    assert json.loads(remembered[1])["response"]["allowed"] is True
    remembered, planned = pair.both(_with_env(env, {names.ENV_ANNOTATION: "true"}))
    assert remembered == planned
    response = json.loads(remembered[1])["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert "invalid pod spec: container 'app': env: " in response["status"]["message"]
    assert "`$" not in response["status"]["message"]  # a path is named as in the spec: `env[0]`


@pytest.mark.parametrize(("annotations", "default_mode"), [
    ({names.MODE_ANNOTATION: names.MODE_TRUST_ONLY}, names.MODE_SECRET),
    ({names.PUBLIC_ROOTS: "true"}, names.MODE_SECRET),
    ({}, names.MODE_TRUST_ONLY),
    ({names.ENV_ANNOTATION: "true"}, names.MODE_SECRET),
], ids=["trust-only asked", "public roots", "trust-only by default", "env asked"])
def test_a_pod_given_the_tls_variables_keeps_its_own(annotations: dict[str, str], default_mode: str) -> None:
    """A trust-only pod (asked for, or the operator's default) and one asking for the public roots get the
    variables without the env annotation: their containers' own env is read, and ours are appended after
    it. The patch is applied as the apiserver applies it; what the container set before is all still there."""
    options = InjectionOptions(default_mode=default_mode)
    route = make_mutate_handler(options, ca_fingerprints=lambda: FINGERPRINTS)
    endpoint = AdmissionEndpoint(name="mutate", route=route, metrics=ServerMetrics())
    own = [{"name": "KEEP", "value": "1"}, {"name": "ALSO", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    for uid in ("first", "replica"):  # planned, then remembered
        body = _with_env(own, annotations, uid=uid)
        status, answer, _ = endpoint.answer(b"POST", JSON, body)
        assert status == 200
        response = json.loads(answer)["response"]
        assert response["allowed"] is True, response
        pod = jsonpatch.apply_patch(json.loads(body)["request"]["object"],
                                    json.loads(base64.b64decode(response["patch"])))
        env = pod["spec"]["containers"][0]["env"]
        assert env[:2] == own
        assert {e["name"] for e in env[2:]} >= {"SSL_CERT_FILE"}, env


_CHOICE_VALUES = st.sampled_from(["", "true", "false", "TRUE", " true", names.MODE_TRUST_ONLY, names.MODE_SECRET,
                                  names.MODE_POD_CERTIFICATE, "SSL_CERT_FILE", "SSL_CERT_FILE,NODE_EXTRA_CA_CERTS",
                                  "/etc/tls", "/etc/ca", "web", "0400", "nope"])


@settings(max_examples=400, deadline=None)
@given(annotations=st.dictionaries(st.sampled_from(sorted(_CHOICE_ANNOTATIONS)), _CHOICE_VALUES),
       default_mode=st.sampled_from(names.POD_MODES), pod_certificates=st.booleans())
def test_may_add_env_is_true_wherever_the_choices_add_variables(annotations: dict[str, str], default_mode: str,
                                                                pod_certificates: bool) -> None:
    """/mutate reads a pod's env lists only where choices.may_add_env says the pod may get the variables; a
    pod that gets them where it said no would have its env list replaced by ours. Held to the choices
    themselves over every choice annotation, their values and the operator's default mode."""
    options = InjectionOptions(default_mode=default_mode, pod_certificates=pod_certificates)
    try:
        choices = read_choices("web-tls", annotations, options)
    except InjectionRefused:
        return  # refused: no variables, whatever may_add_env says
    if choices.env:
        assert may_add_env(annotations, options), (annotations, default_mode)


_ANNOTATION_SETS = [{}, {names.MODE_ANNOTATION: names.MODE_TRUST_ONLY}, {names.MODE_ANNOTATION: names.MODE_SECRET},
                    {names.PUBLIC_ROOTS: "true"}, {names.PUBLIC_ROOTS: "false"}, {names.ENV_ANNOTATION: "true"},
                    {names.ENV_ANNOTATION: "SSL_CERT_FILE"}]
_ENV_LISTS = [None, [], [{"name": "KEEP", "value": "1"}], [{"name": "SSL_CERT_FILE", "value": "/mine"}]]


@pytest.mark.parametrize("default_mode", names.POD_MODES)
def test_mutate_patches_a_pod_as_the_plan_of_its_whole_spec_does(default_mode: str) -> None:
    """/mutate reads less of a spec than `inject` (plan_pod, the pod as plain JSON: every env list read);
    what it leaves unread must never change its patch. Over the choice annotations that bear on the env,
    env lists absent, empty, the container's own and one of ours already set, each default mode: the same
    ops, or the same refusal, planned and then remembered."""
    options = InjectionOptions(default_mode=default_mode)
    route = make_mutate_handler(options, ca_fingerprints=lambda: FINGERPRINTS)
    endpoint = AdmissionEndpoint(name="mutate", route=route, metrics=ServerMetrics())
    for index, (chosen, env) in enumerate(itertools.product(_ANNOTATION_SETS, _ENV_LISTS)):
        body = _with_env(env, chosen, uid=f"pod-{index}")
        try:
            planned: list[dict[str, Any]] | None = patch_ops(plan_pod(json.loads(body)["request"]["object"],
                                                                      options=options, ca_fingerprints=FINGERPRINTS))
        except InjectionRefused:
            planned = None
        for _ in ("planned", "remembered"):
            response = json.loads(endpoint.answer(b"POST", JSON, body)[1])["response"]
            assert response["allowed"] is (planned is not None), (chosen, env, response)
            if planned is not None:
                assert json.loads(base64.b64decode(response["patch"])) == planned, (chosen, env)
