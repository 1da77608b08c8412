"""Judging one update against the rule set: every matching rule runs, every failure is reported.

Policy for a rule that cannot be evaluated (a type error, a key that is not there): the update is
DENIED and the message carries CEL's error. That is what Kubernetes itself does for a failing CRD
validation rule and for a ValidatingAdmissionPolicy under its default failurePolicy Fail, so the
webhook and the exported policy agree; and a transition rule that cannot vouch for a change must not
let a disable or swap slip through. An error in a `warnWhen` only turns into a warning.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from app.admission import GroupVersionKind, clip
from app.rules.cel import EvalError, to_cel
from app.rules.model import Rule, RuleSet
from app.rules.paths import MISSING, Path, format_path, get_path

# A denial names what changed; a whole pod template can differ in many places, and kubectl shows the
# message in one block, so at most this many changes are listed (the rest are counted).
MAX_CHANGES = 5
# Values are shown as compact JSON cut to this many characters: enough for a Secret name or a tls block.
MAX_VALUE_CHARS = 80
# How deep a rule's `self` may nest before it is refused unevaluated. The deepest built-in object path
# (a Deployment's node-affinity match expressions) is about 12 levels; CRDs rarely pass 30. 100 keeps
# every real object and keeps the recursive walks (to_cel, diff, ==) far below Python's recursion limit
# (1000), which a body nested up to orjson's 1024 levels would otherwise hit: a 500 instead of a verdict.
MAX_SELF_DEPTH = 100
# And how many values (object members and array items, at any depth) it may hold. A pod template's
# metadata has tens; large CRD specs a few thousand. Each value costs the rule's conversions ~1-2 us, so
# 20,000 bounds a review's evaluation near 50 ms, where a 6 MB body of labels took 0.7-1 s of the event
# loop, during which no other review was answered.
MAX_SELF_VALUES = 20_000


@dataclass(frozen=True, slots=True)
class Change:
    path: Path  # from the object's root
    old: object
    new: object

    def __str__(self) -> str:
        return f"{format_path(self.path)}: {_show(self.old)} -> {_show(self.new)}"


@dataclass(frozen=True, slots=True)
class Failure:
    rule: Rule
    changes: tuple[Change, ...]
    hidden_changes: int = 0
    error: str | None = None  # set when the rule could not be evaluated

    def describe(self) -> str:
        if self.error is not None:
            return (f'rule "{self.rule.name}" could not be evaluated ({clip(self.error)}); the update is denied '
                    "because the rule cannot vouch for it: fix the object or the rule")
        # A path's keys come from the object, so each change is clipped: a 1 MB key stays a few hundred bytes.
        listed = "; ".join(clip(str(c)) for c in self.changes) or f"{format_path(self.rule.self_path)}: no change found"
        more = f" (and {self.hidden_changes} more changes)" if self.hidden_changes else ""
        return f'rule "{self.rule.name}" failed on {listed}{more}. {self.rule.message}'


@dataclass(frozen=True, slots=True)
class Verdict:
    failures: tuple[Failure, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return not self.failures


def judge(rule_set: RuleSet, kind: GroupVersionKind, *, old: Mapping[str, Any], new: Mapping[str, Any]) -> Verdict:
    """The verdict on an UPDATE from `old` to `new`; warnings are kept only for an allowed update."""
    failures: list[Failure] = []
    warnings: list[str] = []
    for rule in rule_set.for_kind(kind):
        too_big = _too_big(old, new, rule)
        if too_big is not None:
            failures.append(too_big)
            continue
        old_self, new_self = self_value(old, rule.self_path), self_value(new, rule.self_path)
        variables = {"self": new_self, "oldSelf": old_self}
        result = rule.expression.evaluate(variables)
        if result is True:
            warnings.extend(_warnings(rule, variables))
        else:
            failures.append(_failure(rule, old_self, new_self, result))
    return Verdict(tuple(failures), () if failures else tuple(warnings))


def self_value(obj: Mapping[str, Any], path: Path) -> object:
    """What a rule's `self` is: the value at its path, nulls dropped; an absent path is `{}`.

    `{}` rather than an error, so enabling TLS on an object that had no such block yet (nil -> X) is
    judged like any other transition — the same as a CRD rule placed on the parent node.
    """
    value = get_path(obj, path)
    return {} if value is MISSING or value is None else to_cel(value)


def measure(value: object, *, max_depth: int, max_values: int) -> tuple[int, int]:
    """(levels, values) of a JSON value, counted level by level without recursion; stops as soon as
    either passes its limit. Exact type checks: parsed JSON holds only dict and list, and an ABC check
    per node cost more than the rule's evaluation."""
    depth, values, level = 0, 0, [value]
    while depth <= max_depth and values <= max_values:
        containers = [node for node in level if (type(node) is dict or type(node) is list) and node]
        if not containers:
            break
        depth += 1
        level = [child for node in containers for child in (node.values() if type(node) is dict else node)]
        values += len(level)
    return depth, values


def nesting_depth(value: object, *, limit: int) -> int:
    return measure(value, max_depth=limit, max_values=sys.maxsize)[0]


def _too_big(old: Mapping[str, Any], new: Mapping[str, Any], rule: Rule) -> Failure | None:
    for value in (get_path(old, rule.self_path), get_path(new, rule.self_path)):
        depth, values = measure(value, max_depth=MAX_SELF_DEPTH, max_values=MAX_SELF_VALUES)
        if depth > MAX_SELF_DEPTH:
            reason = (f"{format_path(rule.self_path)} is nested deeper than {MAX_SELF_DEPTH} "
                      "levels, more than any Kubernetes object")
            return Failure(rule, (), 0, reason)
        if values > MAX_SELF_VALUES:
            reason = (f"{format_path(rule.self_path)} holds more than {MAX_SELF_VALUES:,} values, more than "
                      "tls-injector evaluates a rule on")
            return Failure(rule, (), 0, reason)
    return None


def _warnings(rule: Rule, variables: Mapping[str, object]) -> list[str]:
    if rule.warning is None:
        return []
    result = rule.warning.when.evaluate(variables)
    if isinstance(result, EvalError):
        return [f'rule "{rule.name}": warnWhen could not be evaluated: {result.message}']
    return [rule.warning.message] if result else []


def _failure(rule: Rule, old_self: object, new_self: object, result: bool | EvalError) -> Failure:
    changes = _changes(rule, old_self, new_self)
    error = result.message if isinstance(result, EvalError) else None
    return Failure(rule, tuple(changes[:MAX_CHANGES]), max(0, len(changes) - MAX_CHANGES), error)


def _changes(rule: Rule, old_self: object, new_self: object) -> list[Change]:
    """The rule's `fields` that changed; when it names none (or none changed), every changed leaf of `self`."""
    pairs = [(f, get_path(old_self, f), get_path(new_self, f)) for f in rule.fields]
    named = [Change((*rule.self_path, *f), old, new) for f, old, new in pairs if old != new]
    return named or [Change((*rule.self_path, *c.path), c.old, c.new) for c in diff(old_self, new_self)]


def diff(old: object, new: object, path: Path = ()) -> list[Change]:
    """Changed leaves between two JSON values, in key order; a list counts as one leaf."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        keys = sorted(set(old) | set(new))
        return [c for k in keys for c in diff(old.get(k, MISSING), new.get(k, MISSING), (*path, k))]
    return [] if old == new else [Change(path, old, new)]


def _show(value: object) -> str:
    if value is MISSING:
        return "(absent)"
    try:
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError:  # nested deeper than orjson writes (254 levels), though it reads 1024
        return "(a value too deeply nested to show)"
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."
