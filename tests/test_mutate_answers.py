"""Remembered /mutate answers: a replica gets exactly what planning it afresh would give; shapes never mix."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.admission import AdmissionResponse, parse_review
from app.injection import InjectionOptions, make_mutate_handler
from app.injection.answers import Answers
from tests.support.reviews import review
from tests.support.workloads import build
from tests.test_naming_chain import NAMESPACE, Cluster, admit_job, shapes

OPTIONS = InjectionOptions()


def fresh(pod: dict[str, Any], fingerprints: tuple[str, ...] = ()) -> AdmissionResponse:
    """The answer of a handler that has remembered nothing."""
    handler = make_mutate_handler(OPTIONS, ca_fingerprints=lambda: fingerprints)
    return handler(parse_review(review(obj=copy.deepcopy(pod), namespace=NAMESPACE)))


def without_uid(response: AdmissionResponse) -> dict[str, Any]:
    return {key: value for key, value in response.items() if key != "uid"}


def replica(pod: dict[str, Any], index: int) -> dict[str, Any]:
    """Another pod of the same template, as its controller makes it: its own name, uid and timestamp."""
    other = copy.deepcopy(pod)
    metadata = other["metadata"]
    if "generateName" in metadata or any(r.get("controller") for r in metadata.get("ownerReferences", [])):
        metadata["name"] = f"{metadata.get('generateName') or metadata.get('name', 'p')}-r{index}"
    metadata["uid"] = f"pod-uid-{index}"
    metadata["creationTimestamp"] = f"2026-11-22T00:00:{index:02d}Z"
    return other


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(shapes(), min_size=2, max_size=4), st.sampled_from([(), ("9f86d081884c7d65",)]))
def test_every_answer_equals_a_fresh_plan_across_replicas_and_shapes(drawn: list[Any],
                                                                     fingerprints: tuple[str, ...]) -> None:
    remembered = make_mutate_handler(OPTIONS, ca_fingerprints=lambda: fingerprints)
    pods = [build(shape, NAMESPACE, create=Cluster().create, admit_job=admit_job) for shape, _ in drawn]
    for round_ in range(2):
        for index, pod in enumerate(pods):
            sent = replica(pod, round_ * 10 + index)
            got = remembered(parse_review(review(obj=copy.deepcopy(sent), namespace=NAMESPACE)))
            assert without_uid(got) == without_uid(fresh(sent, fingerprints))


def bare(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"tls-injector.io/inject": "true"}},
            "spec": {"containers": [{"name": "app", "image": "nginx"}]}}


def test_replicas_are_answered_once_and_bare_pods_by_their_own_names() -> None:
    handler = make_mutate_handler(OPTIONS)
    answers: Answers = handler.answers  # type: ignore[attr-defined]
    first, second = (handler(parse_review(review(obj=bare(name)))) for name in ("a", "b"))
    assert first["patch"] != second["patch"]  # a-tls and b-tls
    assert (answers.hits, answers.misses) == (0, 2)
    again = handler(parse_review(review(obj=bare("a"))))
    assert (answers.hits, again["patch"]) == (1, first["patch"])
    assert again["uid"] != first["uid"]


def test_a_change_of_trusted_cas_is_a_new_answer() -> None:
    current: list[tuple[str, ...]] = [("aa",)]
    handler = make_mutate_handler(OPTIONS, ca_fingerprints=lambda: current[0])
    before = handler(parse_review(review(obj=bare("a"))))
    current[0] = ("aa", "bb")
    after = handler(parse_review(review(obj=bare("a"))))
    assert before["patch"] != after["patch"]


def test_the_store_is_bounded_in_entries_and_key_size() -> None:
    answers = Answers(max_entries=3, max_key_bytes=400)
    made = []

    def make(name: str) -> AdmissionResponse:
        made.append(name)
        return {"uid": "u", "allowed": True}

    for name in ("a", "b", "c", "d", "a"):
        answers.respond("u", bare(name), (), lambda name=name: make(name))  # type: ignore[misc]
    assert made == ["a", "b", "c", "d", "a"]  # "a" was dropped first when "d" came
    big = bare("x" * 500)
    for _ in range(2):
        answers.respond("u", big, (), lambda: make("big"))
    assert made[-2:] == ["big", "big"]  # over the key size: planned every time, never stored
