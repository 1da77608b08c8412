"""/validate's quick path (app/rules/quick.py) answers exactly what the full path answers, byte for byte.

Two endpoints over one set of bodies: one whose handler brings the quick path (as `serve` builds it), one
whose handler does not (the same handler wrapped, so only the full path runs). Every body, well formed
or broken, must get the same status and bytes from both, and the same access-log fields; and the quick
path must be taken where it may answer (counted), so the equality is not won by always declining.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.admission import AdmissionRequest, AdmissionResponse, Handler
from app.cli import admission_handlers
from app.rules import build_rule_set, make_validate_handler
from app.rulesfile import default_rule_set
from app.settings import ServeSettings
from app.web.endpoints import AdmissionEndpoint
from app.web.metrics import ServerMetrics
from tests.rules_matrix import (
    ENABLED_NAMESPACE_TRANSITIONS,
    EXAMPLE_RULES,
    NAMESPACE_TRANSITIONS,
    ON_X,
    WORKLOAD_KINDS,
    WORKLOAD_TRANSITIONS,
    cronjob,
    namespace,
    sei_node,
    templated,
    with_image,
    workload,
)
from tests.support.broken import CUTS, broken, each_place_changed
from tests.support.reviews import review

JSON = b"application/json"
APPS = ("apps", "v1")
SEI = ("example.com", "v1", "SeiNode")


class Pair:
    """One handler behind two endpoints: with its quick path, and wrapped so it has none."""

    def __init__(self, handler: Handler, name: str = "validate") -> None:
        def full_only(request: AdmissionRequest) -> AdmissionResponse:
            return handler(request)

        self.with_quick = AdmissionEndpoint(name=name, handler=handler, metrics=ServerMetrics())
        self.without = AdmissionEndpoint(name=name, handler=full_only, metrics=ServerMetrics())
        assert self.with_quick.quick_answer is not None
        assert self.without.quick_answer is None
        self.taken = 0
        quick: Callable[[bytes], Any] = self.with_quick.quick_answer

        def counted(body: bytes) -> Any:
            found = quick(body)
            self.taken += found is not None
            return found

        self.with_quick.quick_answer = counted
        self.logged: list[tuple[str, dict[str, object]]] = []
        for endpoint in (self.with_quick, self.without):
            endpoint.access_log.enabled = True
            endpoint.access_log.info = lambda msg, fields: self.logged.append((msg, fields))  # type: ignore[method-assign]

    def both(self, body: bytes) -> tuple[tuple[int, bytes], tuple[int, bytes]]:
        quick_status, quick_body, _ = self.with_quick.answer(b"POST", JSON, body)
        full_status, full_body, _ = self.without.answer(b"POST", JSON, body)
        if quick_status == 200 and full_status == 200:
            (_, quick_fields), (_, full_fields) = self.logged[-2:]
            assert _untimed(quick_fields) == _untimed(full_fields)
        return (quick_status, quick_body), (full_status, full_body)


def _untimed(fields: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in fields.items() if k != "latency_ms"}


def example_handlers() -> Any:
    return admission_handlers(ServeSettings(rules_file=EXAMPLE_RULES))


def cases() -> list[tuple[str, dict[str, Any], bool]]:
    """(path, review, whether the update is allowed) across every kind and transition the rules know."""
    out: list[tuple[str, dict[str, Any], bool]] = []
    for dry_run in (False, True):
        for kind in WORKLOAD_KINDS:
            for t in WORKLOAD_TRANSITIONS:
                old, new = workload(kind, t.old), with_image(workload(kind, t.new), "nginx:1.28")
                out.append(("validate", review(operation="UPDATE", obj=new, old=old, kind=(*APPS, kind),
                                               namespace="shop", dry_run=dry_run), t.allowed))
            for t in ENABLED_NAMESPACE_TRANSITIONS:
                out.append(("enabled", review(operation="UPDATE", obj=templated(kind, t.new),
                                              old=templated(kind, t.old), kind=(*APPS, kind), namespace="shop",
                                              dry_run=dry_run), t.allowed))
        for t in WORKLOAD_TRANSITIONS:
            out.append(("validate", review(operation="UPDATE", obj=cronjob(t.new), old=cronjob(t.old),
                                           kind=("batch", "v1", "CronJob"), dry_run=dry_run), t.allowed))
        for _, before, after, ok in NAMESPACE_TRANSITIONS:
            out.append(("validate", review(operation="UPDATE", obj=namespace(after), old=namespace(before),
                                           kind=("", "v1", "Namespace"), dry_run=dry_run), ok))
        for tls_old, tls_new, ok in ((None, {"secretName": "x"}, True), ({"secretName": "x"}, None, False)):
            out.append(("validate", review(operation="UPDATE", obj=sei_node(tls_new), old=sei_node(tls_old), kind=SEI,
                                           dry_run=dry_run), ok))
    return out


def test_every_transition_gets_the_full_paths_answer_and_allowed_updates_take_the_quick_path() -> None:
    handlers = example_handlers()
    pairs = {"validate": Pair(handlers.validate),
             "enabled": Pair(handlers.validate_enabled_namespace, "validate/enabled-namespace")}
    expected_taken = {"validate": 0, "enabled": 0}
    for path, sent, allowed in cases():
        for _ in range(2):  # the second time from the memo
            quick, full = pairs[path].both(orjson.dumps(sent))
            assert quick == full, (path, sent["request"]["kind"])
            assert quick[0] == 200
            assert (b'"allowed":true' in quick[1]) is allowed
            # Allowed real updates are answered quickly; denials and dry runs (preview line) go the full way.
            expected_taken[path] += allowed and not sent["request"]["dryRun"]
    assert {path: pair.taken for path, pair in pairs.items()} == expected_taken
    assert all(taken > 10 for taken in expected_taken.values())


@pytest.mark.parametrize("operation", ["CREATE", "DELETE", "CONNECT"])
def test_other_operations_are_allowed_by_the_quick_path(operation: str) -> None:
    pair = Pair(example_handlers().validate)
    old, new = workload("Deployment", ON_X), workload("Deployment", ON_X)
    objects = {"CREATE": (new, None), "DELETE": (None, old), "CONNECT": ({"kind": "PodAttachOptions"}, None)}[operation]
    quick, full = pair.both(orjson.dumps(review(operation=operation, obj=objects[0], old=objects[1],
                                                kind=(*APPS, "Deployment"))))
    assert quick == full
    assert pair.taken == 1


GOOD = review(operation="UPDATE", obj=with_image(workload("Deployment", ON_X), "nginx:1.28"),
              old=workload("Deployment", ON_X), kind=(*APPS, "Deployment"), namespace="shop")

# Ways a body differs from a good Deployment UPDATE: one to three places changed in a primed one (its
# values' results already remembered), so a wrong acceptance would be answered from memory.
_ODD = st.one_of(st.none(), st.booleans(), st.integers(-3, 3),
                 st.sampled_from(["", "Deployment", "UPDATE", "x" * 254, "true"]),
                 st.just([]), st.just({}), st.just({"a": [1]}), st.just({"labels": {"tls-injector.io/inject": "true"}}))
_OBJECT_PLACES = [("metadata",), ("spec",), ("spec", "template"), ("spec", "template", "metadata"),
                  ("spec", "template", "metadata", "labels"), ("spec", "template", "metadata", "annotations"),
                  ("spec", "template", "metadata", "labels", "tls-injector.io/inject"), ("status",)]
_PLACES = [("apiVersion",), ("kind",), ("request",), ("request", "uid"), ("request", "operation"),
           ("request", "kind"), ("request", "kind", "group"), ("request", "kind", "kind"),
           ("request", "kind", "version"), ("request", "namespace"), ("request", "name"), ("request", "dryRun"),
           ("request", "object"), ("request", "oldObject"), ("request", "userInfo"),
           *[("request", side, *place) for side in ("object", "oldObject") for place in _OBJECT_PLACES]]


# Beside the common cuts: the same values in other JSON text (not the memo's keys), and a second template
# earlier in the object (the last one counts, in both decoders).
_CUTS = {**CUTS, "spaced": lambda encoded: encoded.replace(b'":', b'" : ').replace(b",", b" ,\n"),
         "duplicate": lambda encoded: encoded.replace(b'"spec":{',
                                                      b'"spec":{"template":{"metadata":{"labels":{}}},', 1)}


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(broken(GOOD, _PLACES, _ODD, _CUTS))
def test_a_broken_or_unusual_body_gets_the_same_answer_both_ways(body: bytes) -> None:
    pair = Pair(example_handlers().validate)
    pair.both(orjson.dumps(GOOD))  # the good review's values are remembered
    quick, full = pair.both(body)
    assert quick == full


def test_every_place_changed_alone_gets_the_same_answer_both_ways() -> None:
    """Exhaustive where the generated bodies above sample: each place dropped or set to each variant."""
    pair = Pair(example_handlers().validate)
    pair.both(orjson.dumps(GOOD))
    variants: list[object] = [None, True, 0, "", "x" * 254, [], {}, {"a": [1]}, "UPDATE", "Deployment"]
    for place, value, body in each_place_changed(GOOD, _PLACES, variants):
        quick, full = pair.both(body)
        assert quick == full, (place, value)
    assert pair.taken > len(_PLACES)


def test_a_spaced_body_is_judged_from_its_decoded_values() -> None:
    pair = Pair(example_handlers().validate)
    spaced = orjson.dumps(GOOD, option=orjson.OPT_INDENT_2)
    assert pair.both(spaced)[0] == pair.both(orjson.dumps(GOOD))[0]
    assert pair.taken == 2


RULES_ON_NESTED_PATHS = {"rules": [
    {"name": "whole", "match": [{"group": "apps", "version": "v1", "kind": "Deployment"}],
     "expression": "!has(self.spec) || !has(self.spec.replicas) || self.spec.replicas >= 0", "message": "m"},
    {"name": "labels", "match": [{"group": "apps", "version": "v1", "kind": "Deployment"}],
     "self": "spec.template.metadata.labels",
     "expression": "!('tls-injector.io/inject' in oldSelf) || 'tls-injector.io/inject' in self", "message": "kept"},
]}


def test_rules_on_paths_below_other_rules_paths_are_judged_the_same() -> None:
    """The whole object (no `self`), the defaults' spec.template.metadata and a path below both."""
    pair = Pair(make_validate_handler(default_rule_set().merged_with(build_rule_set(RULES_ON_NESTED_PATHS))))
    for place in [None, *_OBJECT_PLACES]:
        for value in ["x", None, {}, {"replicas": 2}, {"metadata": None}]:
            body = copy.deepcopy(GOOD)
            if place is not None:
                target = body["request"]["object"]
                for key in place[:-1]:
                    target = target.get(key) if isinstance(target, dict) else None  # type: ignore[assignment]
                if isinstance(target, dict):
                    target[place[-1]] = value
            quick, full = pair.both(orjson.dumps(body))
            assert quick == full, (place, value)
    assert pair.taken > 0


@pytest.mark.parametrize("depth", [900, 1023, 1024, 1100])
@pytest.mark.parametrize("limit", [None, 20_000])
def test_nesting_in_a_skipped_field_is_judged_by_the_full_decode(depth: int, limit: int | None) -> None:
    pair = Pair(example_handlers().validate)
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


WHOLE_AND_DEEPER = {"includeDefaults": False, "rules": [
    {"name": "whole", "match": [{"group": "apps", "version": "v1", "kind": "Deployment"}],
     "expression": "true", "message": "m"},
    {"name": "labels", "match": [{"group": "apps", "version": "v1", "kind": "Deployment"}],
     "self": "spec.template.metadata.labels", "expression": "true", "message": "m"},
]}


def test_nesting_within_the_limit_for_the_first_decode_but_not_for_a_rereading_one_is_answered() -> None:
    """A rule on the whole object reads the other paths by decoding the object's text again, from a deeper
    stack: nesting the first decode took just within the interpreter's recursion limit must not escape
    as a RecursionError (the connection would be dropped unanswered), at any depth near that limit."""
    pair = Pair(make_validate_handler(build_rule_set(WHOLE_AND_DEEPER)))
    good = orjson.dumps(GOOD)
    for depth in range(sys.getrecursionlimit() - 80, sys.getrecursionlimit() + 5):
        body = good.replace(b'"object":{', b'"object":{"x":' + b"[" * depth + b"]" * depth + b",", 1)
        quick, full = pair.both(body)
        assert quick == full, depth


def test_a_bug_in_the_quick_path_falls_back_to_the_full_path(caplog: pytest.LogCaptureFixture) -> None:
    pair = Pair(example_handlers().validate)

    def broken(body: bytes) -> Any:
        raise RuntimeError("a bug")

    pair.with_quick.quick_answer = broken
    quick, full = pair.both(orjson.dumps(GOOD))
    assert quick == full
    assert quick[0] == 200
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        "quick path failed; the full path answers"]
