"""Judging in batches with remembered results gives the verdict of judging every rule on its own.

`judge` evaluates a group of rules sharing a `self` path in one CEL call and remembers the results by
the JSON bytes of the two values; `judge_each` evaluates every expression alone. Both run here on the
same random (and malformed) transitions, the remembered path included, and must agree to the letter.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from app.admission import GroupVersionKind
from app.offline.rulesfile import default_rule_set
from app.rules import RuleSet, build_rule_set, judge
from app.rules.cel import Environment
from app.rules.judge import MAX_SELF_DEPTH, Verdict, judge_each
from app.rules.memo import MEMO_ENTRIES, MEMO_KEY_BYTES, Memo
from app.rules.model import RULE_VARIABLES, SCOPE_ENABLED_NAMESPACES, SCOPE_OTHER_NAMESPACES
from bench.payloads import deployment_update_review
from tests.rules_matrix import cronjob, namespace

INJECT, SECRET, MODE = "tls-injector.io/inject", "tls-injector.io/secret-name", "tls-injector.io/mode"
DEFAULTS = default_rule_set()
SCOPED = {scope: DEFAULTS.scoped(scope) for scope in (SCOPE_OTHER_NAMESPACES, SCOPE_ENABLED_NAMESPACES)}
SEI = GroupVersionKind(group="example.com", version="v1", kind="SeiNode")
# What a label or annotation may hold in a hostile or broken body, beside the values that matter.
ODD_VALUES: list[Any] = ["", "TRUE", 1, 1.0, True, None, ["true"], {"x": "true"}, "{" * 120, "null"]
MEANINGFUL = {INJECT: ["true", "false", "enabled", "disabled"], SECRET: ["x-tls", "y-tls"],
              MODE: ["pod-certificate", "secret"]}


def summary(verdict: Verdict) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
    return verdict.allowed, verdict.warnings, tuple(failure.describe() for failure in verdict.failures)


def random_map(rng: random.Random, keys: list[str]) -> Any:
    """A labels or annotations map, sometimes absent, null or not a map at all."""
    shape = rng.random()
    if shape < 0.1:
        return rng.choice([None, "a string", ["a", "list"], 7])
    found: dict[str, Any] = {"app": "web"} if rng.random() < 0.7 else {}
    for key in keys:
        if rng.random() < 0.6:
            found[key] = rng.choice(MEANINGFUL[key] if rng.random() < 0.7 else ODD_VALUES)
    return found


def random_metadata(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return rng.choice([None, "not an object", []])
    metadata: dict[str, Any] = {}
    for field, keys in (("labels", [INJECT]), ("annotations", [SECRET, MODE])):
        if rng.random() < 0.85:
            metadata[field] = random_map(rng, keys)
    return metadata


def with_template_metadata(obj: dict[str, Any], kind: str, metadata: Any) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    if kind == "Namespace":
        changed["metadata"] = {"name": "shop", **metadata} if isinstance(metadata, dict) else metadata
    elif kind == "CronJob":
        changed["spec"]["jobTemplate"]["spec"]["template"]["metadata"] = metadata
    else:
        changed["spec"]["template"]["metadata"] = metadata
    return changed


BASES: dict[str, tuple[GroupVersionKind, dict[str, Any]]] = {
    "Deployment": (GroupVersionKind(group="apps", version="v1", kind="Deployment"),
                   deployment_update_review()["request"]["oldObject"]),
    "StatefulSet": (GroupVersionKind(group="apps", version="v1", kind="StatefulSet"),
                    deployment_update_review()["request"]["oldObject"] | {"kind": "StatefulSet"}),
    "CronJob": (GroupVersionKind(group="batch", version="v1", kind="CronJob"), cronjob(("true", "x-tls"))),
    "Namespace": (GroupVersionKind(group="", version="v1", kind="Namespace"), namespace("enabled")),
}


@pytest.mark.parametrize("scope", sorted(SCOPED))
@pytest.mark.parametrize("kind", sorted(BASES))
def test_random_tls_transitions_get_the_same_verdict_batched_remembered_and_one_by_one(scope: str, kind: str) -> None:
    rules, (gvk, base) = SCOPED[scope], BASES[kind]
    rng = random.Random(f"{scope}/{kind}")
    # Few enough distinct metadata values that pairs recur: later ones are answered from the memo.
    pool = [random_metadata(rng) for _ in range(25)]
    outcomes = set()
    for _ in range(300):
        old = with_template_metadata(base, kind, rng.choice(pool))
        new = with_template_metadata(base, kind, rng.choice(pool))
        expected = summary(judge_each(rules, gvk, old=old, new=new))
        assert summary(judge(rules, gvk, old=old, new=new)) == expected, (old, new)
        assert summary(judge(rules, gvk, old=old, new=new)) == expected, (old, new)  # now remembered
        outcomes.add((expected[0], bool(expected[1]), any("could not be evaluated" in f for f in expected[2])))
    # The walk reached allowed, warned, denied and errored verdicts, not one kind of answer 300 times.
    assert {allowed for allowed, _, _ in outcomes} == {True, False}
    assert any(warned for _, warned, _ in outcomes)
    assert any(errored for _, _, errored in outcomes)


def rule(name: str, self_path: str, expression: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "match": [{"group": "example.com", "kind": "SeiNode"}], "self": self_path,
            "expression": expression, "message": f"{name} says no", **extra}


def user_rules() -> RuleSet:
    """Two groups (spec, spec.sidecar) with rules that pass, fail, error and return a non-bool."""
    return build_rule_set({"rules": [
        rule("port-is-one", "spec", "!has(self.port) || self.port == 1", warnWhen="has(self.note)", warning="noted"),
        rule("sidecar-frozen", "spec.sidecar", "self == oldSelf // a trailing comment"),
        rule("image-kept", "spec", "self.image == oldSelf.image", warnWhen="self.nope == 1", warning="never"),
        rule("dyn-result", "spec.sidecar", "has(self.tls) ? self.tls : true"),
    ]})


SPECS: list[Any] = [
    {"image": "a"}, {"image": "b"}, {"image": "a", "port": 1}, {"image": "a", "port": 1.0},
    {"image": "a", "port": True}, {"image": "a", "port": "1"}, {"image": "a", "note": "n"},
    {"image": "a", "sidecar": {"tls": True}}, {"image": "a", "sidecar": {"tls": "yes"}},
    {"image": "a", "sidecar": {"tls": False, "x": None}}, {"image": "a", "sidecar": "text"},
    {"port": 1}, None,
]


def test_user_rules_that_error_or_return_non_bools_agree_batched_and_one_by_one() -> None:
    rules = user_rules()
    for old_spec in SPECS:
        for new_spec in SPECS:
            old, new = {"metadata": {"name": "n"}, "spec": old_spec}, {"metadata": {"name": "n"}, "spec": new_spec}
            expected = summary(judge_each(rules, SEI, old=old, new=new))
            for _ in range(2):
                assert summary(judge(rules, SEI, old=old, new=new)) == expected, (old_spec, new_spec)


def test_values_equal_in_python_but_not_in_cel_are_remembered_apart() -> None:
    # 1 == 1.0 == True in Python, so a memo keyed by the values would answer for True what it found for
    # 1; in CEL 1 == 1.0 but true != 1.
    rules = user_rules()
    for port, allowed in ((1, True), (True, False), (1.0, True), (True, False), ("1", False), (1, True)):
        spec = {"image": "a", "port": port}
        verdict = judge(rules, SEI, old={"spec": {"image": "a"}}, new={"spec": spec})
        assert verdict.allowed is allowed, port


def test_every_built_in_group_is_evaluated_in_one_batch() -> None:
    for rules in SCOPED.values():
        rules.prepare()
        kinds = [GroupVersionKind(group=m.group, version=m.version or "v1", kind=m.kind)
                 for r in rules for m in r.match]
        groups = [group for kind in kinds for group in rules.groups_for(kind)]
        assert groups
        for group in groups:
            assert group.batch is not None, [rule.name for rule in group.rules]
            assert group.batch.size == sum(2 if rule.warning else 1 for rule in group.rules)


def test_kinds_with_the_same_rules_share_one_group_and_its_memo() -> None:
    rules = SCOPED[SCOPE_OTHER_NAMESPACES]
    groups = {kind: rules.groups_for(GroupVersionKind(group="apps", version="v1", kind=kind))
              for kind in ("Deployment", "StatefulSet", "DaemonSet")}
    assert groups["Deployment"] == groups["StatefulSet"] == groups["DaemonSet"]
    assert all(a is b for a, b in zip(groups["Deployment"], groups["DaemonSet"], strict=True))


def test_a_self_nested_past_the_limit_in_few_bytes_is_refused_unevaluated() -> None:
    # 101 levels in ~600 bytes: small enough for a memo key, so the limit is read off the brackets.
    rules = user_rules()
    nested: Any = 1
    for _ in range(MAX_SELF_DEPTH + 1):
        nested = {"a": nested}
    just_within: Any = 1
    for _ in range(MAX_SELF_DEPTH - 1):  # spec -> image -> ... 100 levels from `self`
        just_within = {"a": just_within}
    for image, refused in ((nested, True), (just_within, False)):
        old, new = {"spec": {"image": "a"}}, {"spec": {"image": image}}
        verdict = judge(rules, SEI, old=old, new=new)
        assert summary(verdict) == summary(judge_each(rules, SEI, old=old, new=new))
        assert any(f"nested deeper than {MAX_SELF_DEPTH} levels" in f.describe() for f in verdict.failures) is refused


def test_the_memo_keeps_at_most_its_entries_the_least_recently_used_going_first() -> None:
    rules = build_rule_set({"rules": [rule("image-kept", "spec", "self.image == oldSelf.image")]})
    (spec_group,) = rules.groups_for(SEI)
    for i in range(MEMO_ENTRIES + 50):
        judge(rules, SEI, old={"spec": {"image": "a"}}, new={"spec": {"image": f"image-{i}"}})
    assert len(spec_group.memo) == MEMO_ENTRIES
    first_kept = spec_group.memo.key({"image": "a"}, {"image": "image-50"})
    assert first_kept is not None
    assert spec_group.memo.get(first_kept) is not None
    dropped = spec_group.memo.key({"image": "a"}, {"image": "image-49"})
    assert dropped is not None
    assert spec_group.memo.get(dropped) is None


class Labels(dict[str, Any]):
    """A dict subclass: JSON-shaped, but not what the parser produces."""


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"a": None}, {}),  # a null: to_cel drops it
        ({"a": float("nan")}, {}),  # written as null by orjson
        ({"a": "x" * MEMO_KEY_BYTES}, {}),  # too big to keep
        ({"a": 2**70}, {}),  # not a 64-bit integer: orjson refuses it
        ({"a": Labels(b=1)}, {}),  # a subclass
        ({1: "non-str key"}, {}),
    ],
)
def test_values_that_json_bytes_cannot_stand_for_get_no_memo_key(old: Any, new: Any) -> None:
    assert Memo().key(old, new) is None


def test_a_batch_is_each_programs_value_or_none_when_any_is_an_error_or_not_a_bool() -> None:
    env = Environment(RULE_VARIABLES)
    programs = [env.compile_bool(source) for source in ("true // a comment", "self.x == 1", "oldSelf.x != 1")]
    batch = env.compile_batch(programs)
    assert batch is not None
    for x in (1, 1.0, True, "1"):
        variables = {"self": {"x": x}, "oldSelf": {"x": x}}
        assert batch.evaluate(variables) == tuple(p.evaluate(variables) for p in programs)
    assert batch.evaluate({"self": {}, "oldSelf": {"x": 1}}) is None  # self.x: no such key
    text = env.compile_batch([programs[0], env.compile_any("'a string'")])
    assert text is not None
    assert text.evaluate({"self": {}, "oldSelf": {}}) is None
