"""Judging in batches with remembered results gives the verdicts CEL's semantics give.

`judge` evaluates a group of rules sharing a `self` path in one CEL call and remembers the results by
the JSON bytes of the two values. Its verdicts on random (and malformed) transitions, and on user rules
that error or return non-bools, are checked against the same rules worked out in Python from CEL's
stated semantics (tests/cel_semantics.py), each update judged twice so the remembered answer is checked
too.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import pytest

from bench.payloads import deployment_update_review
from tests.cel_semantics import (
    ERROR,
    Value,
    all_of,
    any_of,
    cel_equal,
    choose,
    entry_is,
    entry_or_empty,
    field,
    has,
    member,
    negated,
    term,
    view,
)
from tests.rules_matrix import cronjob, namespace
from tls_injector.admission import GroupVersionKind
from tls_injector.offline.rulesfile import default_rule_set
from tls_injector.rules import RuleSet, build_rule_set, judge
from tls_injector.rules.cel import Environment
from tls_injector.rules.judge import MAX_SELF_DEPTH, Verdict
from tls_injector.rules.memo import MEMO_ENTRIES, MEMO_KEY_BYTES, Memo
from tls_injector.rules.model import RULE_VARIABLES, SCOPE_ENABLED_NAMESPACES, SCOPE_OTHER_NAMESPACES

INJECT, SECRET, MODE = "tls-injector.io/inject", "tls-injector.io/secret-name", "tls-injector.io/mode"
CLIENT = "tls-injector.io/client-certificate"
KEYSTORE, PASSWORD = "tls-injector.io/keystore", "tls-injector.io/keystore-password-secret"
PUBLIC = "tls-injector.io/public-roots"
DEFAULTS = default_rule_set()
SCOPED = {scope: DEFAULTS.scoped(scope) for scope in (SCOPE_OTHER_NAMESPACES, SCOPE_ENABLED_NAMESPACES)}
SEI = GroupVersionKind(group="example.com", version="v1", kind="SeiNode")
# What a label or annotation may hold in a hostile or broken body, beside the values that matter.
ODD_VALUES: list[Any] = ["", "TRUE", 1, 1.0, True, None, ["true"], {"x": "true"}, "{" * 120, "null"]
MEANINGFUL = {INJECT: ["true", "false", "enabled", "disabled"], SECRET: ["x-tls", "y-tls"],
              MODE: ["pod-certificate", "secret", "trust-only", " trust-only "], CLIENT: ["true", " True ", "false"],
              KEYSTORE: ["pkcs12", " pkcs12 ", "jks"], PASSWORD: ["pw", " pw ", "other-pw"],
              PUBLIC: ["true", " TRUE ", "false"]}


def summary(verdict: Verdict) -> Summary:
    """Allowed; the warnings (a warnWhen that erred by its rule's name); each failing rule, erred or not."""
    warnings = tuple(w.split(WARN_ERRED)[0] + WARN_ERRED if WARN_ERRED in w else w for w in verdict.warnings)
    return verdict.allowed, warnings, tuple((f.rule.name, f.error is not None) for f in verdict.failures)


Summary = tuple[bool, tuple[str, ...], tuple[tuple[str, bool], ...]]
WARN_ERRED = ": warnWhen could not be evaluated"
# A rule as CEL gives it: (its expression's value, its warnWhen's value) on (oldSelf, self) as a rule sees them.
Semantics = Callable[[Any, Any], tuple[Value, Value]]


def expected(rules: RuleSet, kind: GroupVersionKind, semantics: dict[str, Semantics], *, old: Any, new: Any) -> Summary:
    """The verdict the rules' CEL gives, worked out from `semantics` (every rule of `kind` must have one):
    a rule fails when its expression is not true (an error: "could not be evaluated"); the warnings of
    the passing rules count only when none failed."""
    failures: list[tuple[str, bool]] = []
    warnings: list[str] = []
    for rule in rules.for_kind(kind):
        at = rule.self_path
        old_self, new_self = (self_of(obj, at) for obj in (old, new))
        passed, warned = semantics[rule.name](old_self, new_self)
        if passed is not True:
            failures.append((rule.name, passed is ERROR))
        elif rule.warning is not None and warned is ERROR:
            warnings.append(f'rule "{rule.name}"' + WARN_ERRED)
        elif rule.warning is not None and warned is True:
            warnings.append(rule.warning.message)
    return not failures, () if failures else tuple(warnings), tuple(failures)


def self_of(obj: Any, path: tuple[str, ...]) -> Any:
    """A rule's `self`: the value at its path as a rule sees it; absent or null is `{}`."""
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return {} if obj is None else view(obj)


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
    annotations = [SECRET, MODE, CLIENT, KEYSTORE, PASSWORD, PUBLIC]
    for part, keys in (("labels", [INJECT, PUBLIC]), ("annotations", annotations)):
        if rng.random() < 0.85:
            metadata[part] = random_map(rng, keys)
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


def tls_is(obj: Any, value: str) -> Value:
    return entry_is(obj, "labels", INJECT, value)


def secret_of(obj: Any) -> Any:
    return entry_or_empty(obj, "annotations", SECRET)


def workload_tls(old: Any, new: Any) -> tuple[Value, Value]:
    """On may stay on only with the same secret-name; anything may turn on (and warns)."""
    return (any_of(lambda: negated(tls_is(old, "true")),
                   lambda: all_of(lambda: tls_is(new, "true"), lambda: cel_equal(lambda: secret_of(new),
                                                                                 lambda: secret_of(old)))),
            all_of(lambda: negated(tls_is(old, "true")), lambda: tls_is(new, "true")))


def enabled_namespace_tls(old: Any, new: Any) -> tuple[Value, Value]:
    """In an enabled namespace: an opted-out template may do anything (and warns when it opts back in);
    any other may not opt out nor change its secret-name."""
    return (any_of(lambda: tls_is(old, "false"),
                   lambda: all_of(lambda: negated(tls_is(new, "false")),
                                  lambda: cel_equal(lambda: secret_of(new), lambda: secret_of(old)))),
            all_of(lambda: tls_is(old, "false"), lambda: negated(tls_is(new, "false"))))


def namespace_tls(old: Any, new: Any) -> tuple[Value, Value]:
    """An enabled namespace stays enabled; any other may become enabled (and warns)."""
    return (any_of(lambda: negated(tls_is(old, "enabled")), lambda: tls_is(new, "enabled")),
            all_of(lambda: negated(tls_is(old, "enabled")), lambda: tls_is(new, "enabled")))


def tls_mode(old: Any, new: Any) -> tuple[Value, Value]:
    """pod-certificate stays pod-certificate; anything may move to it (and warns)."""
    def native(obj: Any) -> Value:
        return entry_is(obj, "annotations", MODE, "pod-certificate")
    return (any_of(lambda: negated(native(old)), lambda: native(new)),
            all_of(lambda: negated(native(old)), lambda: native(new)))


def trimmed_lower(value: Any) -> str:
    """`.trim().lowerAscii()`: of a string only."""
    if not isinstance(value, str):
        raise TypeError("trim() of a non-string")
    return "".join(c.lower() if c.isascii() else c for c in value.strip())


def wants_client(obj: Any, tls_on: Value) -> Value:
    """TLS on, and the client-certificate annotation "true" (trimmed, any case)."""
    return all_of(lambda: tls_on, lambda: has(obj, "annotations"), lambda: member(CLIENT, field(obj, "annotations")),
                  lambda: trimmed_lower(field(obj, "annotations")[CLIENT]) == "true")


def secret_written(obj: Any) -> Any:
    """'secret-name' in obj.annotations ? obj.annotations['secret-name'] : '' (no has(): an error without them)"""
    return choose(term(lambda: member(SECRET, field(obj, "annotations"))),
                  lambda: field(obj, "annotations")[SECRET], lambda: "")


def client_certificate(tls_on: Callable[[Any], Value]) -> Semantics:
    """A client certificate, once asked for with TLS on, stays asked for with the same secret-name; asking
    for it in place is allowed (and warns)."""
    def semantics(old: Any, new: Any) -> tuple[Value, Value]:
        had, has_now = wants_client(old, tls_on(old)), wants_client(new, tls_on(new))
        return (any_of(lambda: negated(had),
                       lambda: all_of(lambda: has_now, lambda: cel_equal(lambda: secret_written(new),
                                                                         lambda: secret_written(old)))),
                all_of(lambda: negated(had), lambda: has_now))
    return semantics


def tls_on_outside(obj: Any) -> Value:
    return tls_is(obj, "true")


def tls_on_inside(obj: Any) -> Value:  # an enabled namespace: on unless "false"
    return negated(tls_is(obj, "false"))


def trust_only(tls_on: Callable[[Any], Value]) -> Semantics:
    """A template serving with a certificate (TLS on, mode not trust-only, trimmed) may not move to
    trust-only; anything else may (no warning)."""
    def asks(obj: Any) -> Value:
        return all_of(lambda: has(obj, "annotations"), lambda: member(MODE, field(obj, "annotations")),
                      lambda: _trimmed(field(obj, "annotations")[MODE]) == "trust-only")

    def semantics(old: Any, new: Any) -> tuple[Value, Value]:
        return any_of(lambda: negated(all_of(lambda: tls_on(old), lambda: negated(asks(old)))),
                      lambda: negated(asks(new))), False
    return semantics


def _trimmed(value: Any) -> str:
    """`.trim()`: of a string only."""
    if not isinstance(value, str):
        raise TypeError("trim() of a non-string")
    return value.strip()


def keystore(old: Any, new: Any) -> tuple[Value, Value]:
    """A keystore, once asked for ("pkcs12", trimmed), stays asked for with the same password Secret
    (trimmed; absent is ""); asking for it is allowed, without a warning."""
    def asks(obj: Any) -> Value:
        return all_of(lambda: has(obj, "annotations"), lambda: member(KEYSTORE, field(obj, "annotations")),
                      lambda: _trimmed(field(obj, "annotations")[KEYSTORE]) == "pkcs12")

    def password(obj: Any) -> Any:
        return choose(term(lambda: member(PASSWORD, field(obj, "annotations"))),
                      lambda: _trimmed(field(obj, "annotations")[PASSWORD]), lambda: "")
    return any_of(lambda: negated(asks(old)),
                  lambda: all_of(lambda: asks(new),
                                 lambda: cel_equal(lambda: password(new), lambda: password(old)))), False


def public_roots(old: Any, new: Any) -> tuple[Value, Value]:
    """The public roots, once asked for ("true", trimmed, any case), stay asked for."""
    def asks(obj: Any) -> Value:
        return all_of(lambda: has(obj, "annotations"), lambda: member(PUBLIC, field(obj, "annotations")),
                      lambda: trimmed_lower(field(obj, "annotations")[PUBLIC]) == "true")
    return any_of(lambda: negated(asks(old)), lambda: asks(new)), False


def namespace_public_roots(old: Any, new: Any) -> tuple[Value, Value]:
    """A Namespace labelled for public roots stays labelled (exactly "true")."""
    return any_of(lambda: negated(entry_is(old, "labels", PUBLIC, "true")),
                  lambda: entry_is(new, "labels", PUBLIC, "true")), False


BUILT_IN: dict[str, Semantics] = {
    "workload-keystore-transition": keystore, "cronjob-keystore-transition": keystore,
    "workload-public-roots-transition": public_roots, "cronjob-public-roots-transition": public_roots,
    "namespace-public-roots-transition": namespace_public_roots,
    "workload-trust-only-transition": trust_only(tls_on_outside),
    "cronjob-trust-only-transition": trust_only(tls_on_outside),
    "enabled-namespace-workload-trust-only-transition": trust_only(tls_on_inside),
    "enabled-namespace-cronjob-trust-only-transition": trust_only(tls_on_inside),
    "workload-client-certificate-transition": client_certificate(tls_on_outside),
    "cronjob-client-certificate-transition": client_certificate(tls_on_outside),
    "enabled-namespace-workload-client-certificate-transition": client_certificate(tls_on_inside),
    "enabled-namespace-cronjob-client-certificate-transition": client_certificate(tls_on_inside),
    "workload-tls-transition": workload_tls, "cronjob-tls-transition": workload_tls,
    "enabled-namespace-workload-tls-transition": enabled_namespace_tls,
    "enabled-namespace-cronjob-tls-transition": enabled_namespace_tls,
    "namespace-tls-transition": namespace_tls, "workload-tls-mode-transition": tls_mode,
    "cronjob-tls-mode-transition": tls_mode,
}


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
def test_random_tls_transitions_get_the_verdicts_of_cel_first_and_when_remembered(scope: str, kind: str) -> None:
    rules, (gvk, base) = SCOPED[scope], BASES[kind]
    rng = random.Random(f"{scope}/{kind}")
    # Few enough distinct metadata values that pairs recur: later ones are answered from the memo.
    pool = [random_metadata(rng) for _ in range(40)]
    outcomes = set()
    for _ in range(300):
        old = with_template_metadata(base, kind, rng.choice(pool))
        new = with_template_metadata(base, kind, rng.choice(pool))
        want = expected(rules, gvk, BUILT_IN, old=old, new=new)
        assert summary(judge(rules, gvk, old=old, new=new)) == want, (old, new)
        assert summary(judge(rules, gvk, old=old, new=new)) == want, (old, new)  # now remembered
        outcomes.add((want[0], bool(want[1]), any(errored for _, errored in want[2])))
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


def port_is_one(old: Any, new: Any) -> tuple[Value, Value]:
    """!has(self.port) || self.port == 1; warnWhen has(self.note)"""
    return (any_of(lambda: negated(has(new, "port")), lambda: cel_equal(lambda: field(new, "port"), lambda: 1)),
            has(new, "note") if isinstance(new, dict) else ERROR)


def sidecar_frozen(old: Any, new: Any) -> tuple[Value, Value]:
    """self == oldSelf"""
    return cel_equal(lambda: new, lambda: old), False


def image_kept(old: Any, new: Any) -> tuple[Value, Value]:
    """self.image == oldSelf.image; warnWhen self.nope == 1 (no such key: always an error)"""
    return (cel_equal(lambda: field(new, "image"), lambda: field(old, "image")),
            cel_equal(lambda: field(new, "nope"), lambda: 1))


def dyn_result(old: Any, new: Any) -> tuple[Value, Value]:
    """has(self.tls) ? self.tls : true: a value that is not a bool is an error"""
    value = choose(all_of(lambda: has(new, "tls")), lambda: field(new, "tls"), lambda: True)
    return (value if isinstance(value, bool) else ERROR), False


USER_RULES: dict[str, Semantics] = {"port-is-one": port_is_one, "sidecar-frozen": sidecar_frozen,
                                    "image-kept": image_kept, "dyn-result": dyn_result}


def test_user_rules_that_error_or_return_non_bools_get_the_verdicts_of_cel() -> None:
    rules, verdicts = user_rules(), set()
    for old_spec in SPECS:
        for new_spec in SPECS:
            old, new = {"metadata": {"name": "n"}, "spec": old_spec}, {"metadata": {"name": "n"}, "spec": new_spec}
            want = expected(rules, SEI, USER_RULES, old=old, new=new)
            for _ in range(2):  # the second time remembered
                assert summary(judge(rules, SEI, old=old, new=new)) == want, (old_spec, new_spec)
            verdicts.update((name, errored) for name, errored in want[2])
    # The matrix reaches each way a rule fails: `self` is always an object here, so only the rules that
    # read a key that may be missing, or return what may not be a bool, err.
    assert verdicts == {("port-is-one", False), ("sidecar-frozen", False), ("image-kept", False),
                        ("image-kept", True), ("dyn-result", False), ("dyn-result", True)}


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
