"""/validate's one memo (the rules' results by their texts): every body gets the same status and bytes
with the memo as without it.

Two endpoints over one set of bodies: one whose rules remember results (as `serve` builds them), one
whose memos hold nothing, so every pair is evaluated. Every body, well formed or broken, must get the
same status and bytes from both, and the same access-log fields; and the memo must be used (counted),
so the equality is not won by never remembering.
"""

from __future__ import annotations

import copy
import functools
import importlib
import sys
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
from tests.support.broken import CUTS, broken, each_place_changed, nested, recursion_limit
from tests.support.reviews import review
from tls_injector.admission import Route
from tls_injector.cli import admission_handlers
from tls_injector.offline.rulesfile import default_rule_set
from tls_injector.rules import RuleSet, build_rule_set, make_validate_handler
from tls_injector.settings import ServeSettings
from tls_injector.web.endpoints import AdmissionEndpoint
from tls_injector.web.metrics import ServerMetrics

JSON = b"application/json"
APPS = ("apps", "v1")
SEI = ("example.com", "v1", "SeiNode")


class Pair:
    """The same routes, built twice: with their memo, and with memos that hold nothing."""

    def __init__(self, remembering: Route[Any], evaluating: Route[Any], name: str = "validate",
                 rules: RuleSet | None = None) -> None:
        self.with_memo = AdmissionEndpoint(name=name, route=remembering, metrics=ServerMetrics())
        self.without = AdmissionEndpoint(name=name, route=evaluating, metrics=ServerMetrics())
        self.logged: list[tuple[str, dict[str, object]]] = []
        for endpoint in (self.with_memo, self.without):
            endpoint.access_log.enabled = True
            endpoint.access_log.info = lambda msg, fields: self.logged.append((msg, fields))  # type: ignore[method-assign]

    def both(self, body: bytes) -> tuple[tuple[int, bytes], tuple[int, bytes]]:
        memo_status, memo_body, _ = self.with_memo.answer(b"POST", JSON, body)
        plain_status, plain_body, _ = self.without.answer(b"POST", JSON, body)
        if memo_status == 200 and plain_status == 200:
            (_, memo_fields), (_, plain_fields) = self.logged[-2:]
            assert _untimed(memo_fields) == _untimed(plain_fields)
        return (memo_status, memo_body), (plain_status, plain_body)


def _untimed(fields: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in fields.items() if k != "latency_ms"}


@functools.cache  # building the routes compiles every rule (~0.1 s): once per module, not per example
def example_pair(path: str = "validate") -> Pair:
    on, off = (admission_handlers(ServeSettings(rules_file=EXAMPLE_RULES), memo=memo) for memo in (True, False))
    if path == "validate":
        return Pair(on.validate, off.validate)
    return Pair(on.validate_enabled_namespace, off.validate_enabled_namespace, "validate/enabled-namespace")


def rules_pair(rule_set: RuleSet) -> Pair:
    return Pair(make_validate_handler(rule_set), make_validate_handler(rule_set, memo_entries=0))


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


def test_every_transition_gets_the_same_answer_with_and_without_the_memo() -> None:
    pairs = {"validate": example_pair(), "enabled": example_pair("enabled")}
    for path, sent, allowed in cases():
        for _ in range(2):  # the second time from the memo
            memo, plain = pairs[path].both(orjson.dumps(sent))
            assert memo == plain, (path, sent["request"]["kind"])
            assert memo[0] == 200
            assert (b'"allowed":true' in memo[1]) is allowed
            if sent["request"]["dryRun"] and allowed and sent["request"]["kind"]["group"] == "apps":
                template = sent["request"]["object"]["spec"]["template"]["metadata"]
                opted_out = template.get("labels", {}).get("tls-injector.io/inject") == "false"
                assert (b"tls-injector: pods of" in memo[1]) is not opted_out  # the preview line


@pytest.mark.parametrize("operation", ["CREATE", "DELETE", "CONNECT"])
def test_other_operations_are_allowed(operation: str) -> None:
    pair = example_pair()
    old, new = workload("Deployment", ON_X), workload("Deployment", ON_X)
    objects = {"CREATE": (new, None), "DELETE": (None, old), "CONNECT": ({"kind": "PodAttachOptions"}, None)}[operation]
    memo, plain = pair.both(orjson.dumps(review(operation=operation, obj=objects[0], old=objects[1],
                                                kind=(*APPS, "Deployment"))))
    assert memo == plain
    assert memo[0] == 200
    assert b'"allowed":true' in memo[1]


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
def test_a_broken_or_unusual_body_gets_the_same_answer_with_and_without_the_memo(body: bytes) -> None:
    pair = example_pair()
    pair.both(orjson.dumps(GOOD))  # the good review's values are remembered
    memo, plain = pair.both(body)
    assert memo == plain


def test_every_place_changed_alone_gets_the_same_answer_with_and_without_the_memo() -> None:
    """Exhaustive where the generated bodies above sample: each place dropped or set to each variant."""
    pair = example_pair()
    pair.both(orjson.dumps(GOOD))
    variants: list[object] = [None, True, 0, "", "x" * 254, [], {}, {"a": [1]}, "UPDATE", "Deployment"]
    for place, value, body in each_place_changed(GOOD, _PLACES, variants):
        memo, plain = pair.both(body)
        assert memo == plain, (place, value)


def test_a_spaced_body_is_judged_from_its_decoded_values() -> None:
    pair = example_pair()
    spaced = orjson.dumps(GOOD, option=orjson.OPT_INDENT_2)
    assert pair.both(spaced)[0] == pair.both(orjson.dumps(GOOD))[0]


RULES_ON_NESTED_PATHS = {"rules": [
    {"name": "whole", "match": [{"group": "apps", "version": "v1", "kind": "Deployment"}],
     "expression": "!has(self.spec) || !has(self.spec.replicas) || self.spec.replicas >= 0", "message": "m"},
    {"name": "labels", "match": [{"group": "apps", "version": "v1", "kind": "Deployment"}],
     "self": "spec.template.metadata.labels",
     "expression": "!('tls-injector.io/inject' in oldSelf) || 'tls-injector.io/inject' in self", "message": "kept"},
]}


def test_rules_on_paths_below_other_rules_paths_are_judged_the_same() -> None:
    """The whole object (no `self`), the defaults' spec.template.metadata and a path below both."""
    pair = rules_pair(default_rule_set().merged_with(build_rule_set(RULES_ON_NESTED_PATHS)))
    for place in [None, *_OBJECT_PLACES]:
        for value in ["x", None, {}, {"replicas": 2}, {"metadata": None}]:
            body = copy.deepcopy(GOOD)
            if place is not None:
                target = body["request"]["object"]
                for key in place[:-1]:
                    target = target.get(key) if isinstance(target, dict) else None  # type: ignore[assignment]
                if isinstance(target, dict):
                    target[place[-1]] = value
            memo, plain = pair.both(orjson.dumps(body))
            assert memo == plain, (place, value)
            assert memo[0] == 200, (place, value)


@pytest.mark.parametrize("depth", [900, 1023, 1024, 1100])
@pytest.mark.parametrize("limit", [None, 20_000])
def test_nesting_deeper_than_the_decode_takes_is_a_400(depth: int, limit: int | None) -> None:
    pair = example_pair()
    pair.both(orjson.dumps(GOOD))
    with recursion_limit(limit):
        memo, plain = pair.both(nested(orjson.dumps(GOOD), depth))
    assert memo == plain
    assert memo[0] == (200 if depth == 900 else 400)
    assert b"Traceback" not in memo[1]


WHOLE_AND_DEEPER = {"includeDefaults": False, "rules": [
    {"name": "whole", "match": [{"group": "apps", "version": "v1", "kind": "Deployment"}],
     "expression": "true", "message": "m"},
    {"name": "labels", "match": [{"group": "apps", "version": "v1", "kind": "Deployment"}],
     "self": "spec.template.metadata.labels", "expression": "true", "message": "m"},
]}


def test_nesting_near_the_limit_under_a_rule_on_the_whole_object_is_answered_not_dropped() -> None:
    """A rule on the whole object reads the other paths by decoding the object's text again, from a deeper
    stack: nesting the first decode took just within the interpreter's recursion limit must not escape
    as a RecursionError (the connection would be dropped unanswered), at any depth near that limit: it
    is judged, or refused as nested too deeply."""
    pair = rules_pair(build_rule_set(WHOLE_AND_DEEPER))
    good = orjson.dumps(GOOD)
    for depth in range(sys.getrecursionlimit() - 80, sys.getrecursionlimit() + 5):
        body = good.replace(b'"object":{', b'"object":{"x":' + b"[" * depth + b"]" * depth + b",", 1)
        memo, plain = pair.both(body)
        assert memo == plain, depth
        assert memo[0] in (200, 400), depth
        assert b"Traceback" not in memo[1], depth


def test_the_memo_is_used_and_only_when_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """A repeated pair of values is evaluated once with the memo, every time without it."""
    evaluated: list[object] = []
    judge = importlib.import_module("tls_injector.rules.judge")  # the package's `judge` is the function
    judge_group = judge._judge_group

    def counted(group: Any, old: object, new: object) -> Any:
        evaluated.append(group)
        return judge_group(group, old, new)

    monkeypatch.setattr(judge, "_judge_group", counted)
    rule_set = default_rule_set()
    remembering, evaluating = (AdmissionEndpoint(name="validate", route=make_validate_handler(rule_set, memo_entries=n),
                                                 metrics=ServerMetrics()) for n in (512, 0))
    for endpoint, times in ((remembering, 1), (evaluating, 3)):
        evaluated.clear()
        for _ in range(3):
            status, body, _ = endpoint.answer(b"POST", JSON, orjson.dumps(GOOD))
            assert status == 200
            assert b'"allowed":true' in body
        assert len(evaluated) == times
