"""Remembered /mutate answers: a replica gets exactly what planning it afresh would give; shapes never mix."""

from __future__ import annotations

import base64
import copy
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.reviews import answer, review
from tests.support.workloads import build
from tests.test_naming_chain import NAMESPACE, Cluster, admit_job, shapes
from tls_injector import names
from tls_injector.admission import AdmissionResponse, JsonPatchOp, allowed, denied
from tls_injector.injection import InjectionOptions, make_mutate_handler
from tls_injector.injection.answers import SAMPLE_EVERY, TOKEN_PLACEHOLDER, Answer, Answers, shape_key, shareable

OPTIONS = InjectionOptions()


def fresh(pod: dict[str, Any], fingerprints: tuple[str, ...] = ()) -> AdmissionResponse:
    """The answer of a handler that has remembered nothing."""
    handler = make_mutate_handler(OPTIONS, ca_fingerprints=lambda: fingerprints)
    return answer(handler, review(obj=copy.deepcopy(pod), namespace=NAMESPACE))


def without_uid(response: AdmissionResponse) -> dict[str, Any]:
    return {key: value for key, value in response.items() if key != "uid"}


def replica(pod: dict[str, Any], index: int) -> dict[str, Any]:
    """Another pod of the same template, as the apiserver hands it to webhooks: its own name, uid and
    timestamp, and its own API token volume."""
    other = copy.deepcopy(pod)
    metadata = other["metadata"]
    if "generateName" in metadata or any(r.get("controller") for r in metadata.get("ownerReferences", [])):
        metadata["name"] = f"{metadata.get('generateName') or metadata.get('name', 'p')}-r{index}"
    metadata["uid"] = f"pod-uid-{index}"
    metadata["creationTimestamp"] = f"2026-11-22T00:00:{index:02d}Z"
    return with_token_volume(other, token_suffix(index))


TOKEN_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's generateName draws from these
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


def token_suffix(index: int) -> str:
    return "".join(TOKEN_ALPHABET[(index * 7 + i * 13) % len(TOKEN_ALPHABET)] for i in range(5))


def with_token_volume(pod: dict[str, Any], suffix: str) -> dict[str, Any]:
    """What the ServiceAccount admission plugin does before any webhook sees the pod: a projected token
    volume `kube-api-access-<5 random characters>`, mounted read-only in every container that does not
    mount something at its path already; nothing when the pod turns automounting off."""
    spec = pod.get("spec")
    if not isinstance(spec, dict) or spec.get("automountServiceAccountToken") is False:
        return pod
    volumes = spec.setdefault("volumes", [])
    if not isinstance(volumes, list):
        return pod
    name = f"kube-api-access-{suffix}"
    given = [v for v in volumes if isinstance(v, dict) and str(v.get("name")).startswith("kube-api-access-")]
    if given:  # a pod as an earlier plugin run left it (a fixture): this replica's volume has its own name
        old = given[0]["name"]
        return orjson.loads(orjson.dumps(pod).replace(f'"{old}"'.encode(), f'"{name}"'.encode()))  # type: ignore[no-any-return]
    volumes.append({"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}})
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or []:
            if not isinstance(container, dict):
                continue
            mounts = container.setdefault("volumeMounts", [])
            if isinstance(mounts, list) and not any(isinstance(m, dict) and m.get("mountPath") == TOKEN_PATH
                                                    for m in mounts):
                mounts.append({"name": name, "readOnly": True, "mountPath": TOKEN_PATH})
    return pod


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(shapes(), min_size=2, max_size=4), st.sampled_from([(), ("9f86d081884c7d65",)]))
def test_every_answer_equals_a_fresh_plan_across_replicas_and_shapes(drawn: list[Any],
                                                                     fingerprints: tuple[str, ...]) -> None:
    remembered = make_mutate_handler(OPTIONS, ca_fingerprints=lambda: fingerprints)
    pods = [build(shape, NAMESPACE, create=Cluster().create, admit_job=admit_job) for shape, _ in drawn]
    for round_ in range(2):
        for index, pod in enumerate(pods):
            sent = replica(pod, round_ * 10 + index)
            got = answer(remembered, review(obj=copy.deepcopy(sent), namespace=NAMESPACE))
            assert without_uid(got) == without_uid(fresh(sent, fingerprints))


def bare(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"tls-injector.io/inject": "true"}},
            "spec": {"containers": [{"name": "app", "image": "nginx"}]}}


def test_replicas_are_answered_once_and_bare_pods_by_their_own_names() -> None:
    answers = Answers()
    handler = make_mutate_handler(OPTIONS, answers=answers)
    first, second = (answer(handler, review(obj=bare(name))) for name in ("a", "b"))
    assert first["patch"] != second["patch"]  # a-tls and b-tls
    assert (answers.hits, answers.misses) == (0, 2)
    again = answer(handler, review(obj=bare("a")))
    assert (answers.hits, again["patch"]) == (1, first["patch"])
    assert again["uid"] != first["uid"]


def test_a_change_of_trusted_cas_is_a_new_answer() -> None:
    current: list[tuple[str, ...]] = [("aa",)]
    handler = make_mutate_handler(OPTIONS, ca_fingerprints=lambda: current[0])
    before = answer(handler, review(obj=bare("a")))
    current[0] = ("aa", "bb")
    after = answer(handler, review(obj=bare("a")))
    assert before["patch"] != after["patch"]


def test_the_store_is_bounded_in_entries_and_key_size() -> None:
    answers = Answers(max_entries=3, max_key_bytes=400)
    made = []

    def make(name: str) -> Answer:
        made.append(name)
        return Answer.of(allowed(""))

    for name in ("a", "b", "c", "d", "a"):
        answers.respond("u", lambda name=name: orjson.dumps(bare(name)), lambda name=name: make(name))  # type: ignore[misc]
    assert made == ["a", "b", "c", "d", "a"]  # "a" was dropped first when "d" came
    big = orjson.dumps(bare("x" * 500))
    for _ in range(2):
        answers.respond("u", lambda: big, lambda: make("big"))
    assert made[-2:] == ["big", "big"]  # over the key size: planned every time, never stored


def test_replicas_share_an_answer_though_each_has_its_own_token_volume() -> None:
    answers = Answers()
    handler = make_mutate_handler(OPTIONS, answers=answers)
    pod = bare("web")
    first, second = (answer(handler, review(obj=replica(pod, i))) for i in (1, 2))
    assert (answers.hits, answers.misses) == (1, 1)
    assert without_uid(first) == without_uid(second) == without_uid(fresh(replica(pod, 2)))


def test_an_answer_that_names_the_token_volume_is_not_shared() -> None:
    # The token volume mounted where the certificate goes: the refusal names that pod's own volume.
    pod = bare("web")
    pod["metadata"]["annotations"] = {names.CERT_PATH_ANNOTATION: TOKEN_PATH}
    answers = Answers()
    handler = make_mutate_handler(OPTIONS, answers=answers)
    for index in (1, 2):
        sent = replica(pod, index)
        got = answer(handler, review(obj=sent))
        assert not got["allowed"]
        assert f"kube-api-access-{token_suffix(index)}" in got["status"]["message"]
        assert without_uid(got) == without_uid(fresh(sent))
    assert answers.hits == 0


@pytest.mark.parametrize("where", ["patch", "warning", "message"])
def test_an_answer_holding_the_token_prefix_anywhere_is_not_shared_and_one_without_it_is(where: str) -> None:
    # The prefix alone is enough (a message cuts what it quotes), in any part of the answer; text that
    # holds only a part of it, or the token's mount path, is no reason to keep an answer to one pod.
    token = b'"kube-api-access-x2b4z"'
    for text, shared in (("x" * 7 + "kube-api-access-x2b4z" + "y" * 7, False),
                         ("kube-api-access-", False),
                         ("kube-api", True),
                         ("/var/run/secrets/kubernetes.io/serviceaccount", True)):
        ops: list[JsonPatchOp] = [{"op": "add", "path": "/metadata/annotations/a", "value": "b"}]
        if where == "patch":
            made = Answer.of(allowed(""), [*ops, {"op": "add", "path": "/spec/volumes/-", "value": {"name": text}}])
        elif where == "warning":
            made = Answer.of(allowed("", warnings=[f"container {text!r} uses envFrom"]), ops)
        else:
            made = Answer.of(denied("", f"tls-injector: {text} is mounted at /etc", code=422, reason="Invalid"))
        assert shareable(made, token) is shared, text
        assert shareable(made, None)
        if where == "patch":  # the patch was looked into before base64: the prefix is in what it encodes
            assert (b"kube-api-access-" in base64.b64decode(made.response["patch"])) is not shared


@given(st.text(alphabet="kube-apicsx2b4z/~\"\\é", max_size=40), st.sampled_from(["patch", "warning", "message"]))
@settings(max_examples=300)
def test_an_answers_token_prefix_is_found_as_before_its_patch_was_base64(text: str, where: str) -> None:
    # Answer.quotes_token looks into the response with its base64 patch in it, where the patch's JSON was
    # once looked into with the response before the patch was added: base64 writes no `-`, so both agree.
    ops: list[JsonPatchOp] = [{"op": "add", "path": "/spec/volumes/-", "value": {"name": text}}] \
        if where == "patch" else [{"op": "add", "path": "/metadata/annotations/a", "value": "b"}]
    response = allowed("", warnings=[f"container {text!r} uses envFrom"]) if where == "warning" else \
        denied("", f"tls-injector: {text} is mounted at /etc", code=422, reason="Invalid") if where == "message" \
        else allowed("")
    before = orjson.dumps(ops).find(b"kube-api-access-") >= 0 or orjson.dumps(response).find(b"kube-api-access-") >= 0
    made = Answer.of(copy.deepcopy(response), ops)
    assert "patch" in made.response
    assert made.quotes_token is before


@pytest.mark.parametrize(("text", "stands_in"), [
    (b'{"volumes":[{"name":"kube-api-access-x2b4z"}],"m":[{"name":"kube-api-access-x2b4z"}]}', True),
    (b'{"volumes":[{"name":"kube-api-access-x2b4z"},{"name":"kube-api-access-bbbbb"}]}', False),  # two
    (b'{"volumes":[{"name":"kube-api-access-x2b4z"},{"name":"kube-api-access-*"}]}', False),  # placeholder
    (b'{"volumes":[{"name":"kube-api-access-x2b4zz"}]}', False),  # not a generated name
    (b'{"volumes":[{"name":"data"}]}', False),
])
def test_shape_keys_stand_in_for_exactly_one_token_volume_name(text: bytes, stands_in: bool) -> None:
    key, token = shape_key(text)
    assert (token is not None) == stands_in
    if token is None:
        assert key == b"=" + text
    else:
        assert key.replace(TOKEN_PLACEHOLDER, token)[1:] == text  # the key and the name give the text back
        other = text.replace(token, b'"kube-api-access-q7r8s"')
        assert shape_key(other)[0] == key


def test_pods_named_like_a_token_volume_keep_their_own_secret() -> None:
    # No token volume (automount off), so the pod's own name is the one such name the key holds; the patch
    # (base64) names the Secret after it, so the answer must not be shared.
    answers = Answers()
    handler = make_mutate_handler(OPTIONS, answers=answers)
    for suffix in ("abcde", "zzzzz"):
        pod = bare(f"kube-api-access-{suffix}")
        pod["spec"]["automountServiceAccountToken"] = False
        got = answer(handler, review(obj=pod))
        assert f"kube-api-access-{suffix}-tls".encode() in base64.b64decode(got["patch"])
        assert without_uid(got) == without_uid(fresh(pod))
    assert answers.hits == 0


# ---- the memo steps aside where pods never repeat ------------------------------------------------------


class Counted:
    """Key texts and plans asked for, by name: what the memo spent on each pod."""

    def __init__(self) -> None:
        self.keyed: list[str] = []
        self.made: list[str] = []

    def respond(self, answers: Answers, name: str) -> AdmissionResponse:
        def key_text() -> bytes:
            self.keyed.append(name)
            return orjson.dumps(bare(name))

        def make() -> Answer:
            self.made.append(name)
            return Answer.of(allowed(""), [{"op": "add", "path": "/metadata/labels/x", "value": name}])

        return answers.respond(f"uid-{name}", key_text, make)


def test_after_idle_after_misses_in_a_row_only_one_pod_in_sample_every_is_keyed() -> None:
    answers, counted = Answers(idle_after=8), Counted()
    for index in range(8):
        counted.respond(answers, f"once-{index}")
    assert answers.stepped_aside
    assert counted.keyed == counted.made == [f"once-{index}" for index in range(8)]
    counted.keyed.clear()
    for index in range(8, 8 + 4 * SAMPLE_EVERY):
        response = counted.respond(answers, f"once-{index}")
        assert response["uid"] == f"uid-once-{index}"
        assert base64.b64decode(response["patch"]) == orjson.dumps(
            [{"op": "add", "path": "/metadata/labels/x", "value": f"once-{index}"}])
    assert len(counted.keyed) == 4  # one in SAMPLE_EVERY: every pod still planned, and answered as its own
    assert len(counted.made) == 8 + 4 * SAMPLE_EVERY
    assert answers.stepped_aside
    assert (answers.hits, answers.misses) == (0, 12)


def test_a_template_that_repeats_turns_the_memo_back_on_within_two_samples() -> None:
    answers, counted = Answers(idle_after=8), Counted()
    for index in range(8):
        counted.respond(answers, f"once-{index}")
    assert answers.stepped_aside
    pods = 0
    while answers.stepped_aside:  # a rollout's replicas, all of one key
        counted.respond(answers, "replica")
        pods += 1
        assert pods <= 2 * SAMPLE_EVERY  # the first sample stores it, the second finds it
    assert answers.hits == 1
    planned = len(counted.made)
    for _ in range(20):
        counted.respond(answers, "replica")
    assert (answers.hits, len(counted.made)) == (21, planned)  # remembered again: every replica a hit


def test_a_memo_that_finds_one_answer_in_idle_after_never_steps_aside() -> None:
    answers, counted = Answers(idle_after=8), Counted()
    for index in range(100):
        counted.respond(answers, "replica" if index % 7 == 0 else f"once-{index}")
        assert not answers.stepped_aside
    assert len(counted.keyed) == 100


def test_an_answer_not_remembered_is_its_pods_own_and_a_remembered_one_is_copied() -> None:
    # The memo writes the uid into an answer made for one pod alone, and into a copy of one it keeps.
    answers, counted = Answers(max_entries=0), Counted()
    assert [counted.respond(answers, "a")["uid"], counted.respond(answers, "a")["uid"]] == ["uid-a", "uid-a"]
    answers, counted = Answers(), Counted()
    first = counted.respond(answers, "a")
    first["uid"] = "changed by its reader"
    second = answers.respond("uid-b", lambda: orjson.dumps(bare("a")), lambda: Answer.of(allowed("")))
    assert (second["uid"], answers.hits) == ("uid-b", 1)
    assert base64.b64decode(second["patch"]) == orjson.dumps(
        [{"op": "add", "path": "/metadata/labels/x", "value": "a"}])
