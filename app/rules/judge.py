"""Judging one update against the rule set: every matching rule runs, every failure is reported.

Policy for a rule that cannot be evaluated (a type error, a key that is not there): the update is
DENIED and the message carries CEL's error. That is what Kubernetes itself does for a failing CRD
validation rule and for a ValidatingAdmissionPolicy under its default failurePolicy Fail, so the
webhook and the exported policy agree; and a transition rule that cannot vouch for a change must not
let a disable or swap slip through. An error in a `warnWhen` only turns into a warning.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from tls_injector.admission import BadReview, GroupVersionKind, clip
from tls_injector.rules.cel import EvalError, to_cel
from tls_injector.rules.memo import Key
from tls_injector.rules.model import Group, Rule, RuleSet
from tls_injector.rules.paths import MISSING, Path, format_path, get_path

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


# Why an exception the object names is refused by a webhook that grants none, and what to do about it.
EXCEPTIONS_OFF = ("exceptions are granted only where the cluster enforces them by RBAC, through the exported "
                  "admission policies (the admission-policy component, which runs the webhook with "
                  "--tls-exceptions policy); ask the cluster's administrators, or delete and recreate the object")
# The warning of an update let through as an exception: the webhook cannot see RBAC, the policy does.
EXCEPTION_TAKEN = ('rule "{rule}": refused in place, let through as the exception the object names; the '
                   "exported admission policy lets it through only to a subject granted the exception by RBAC")


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
    # The update names itself as the rule's exception, but this webhook grants none (`exceptions` off).
    exception_named: bool = False

    def describe(self) -> str:
        if self.error is not None:
            return (f'rule "{self.rule.name}" could not be evaluated ({clip(self.error)}); the update is denied '
                    "because the rule cannot vouch for it: fix the object or the rule")
        # A path's keys come from the object, so each change is clipped: a 1 MB key stays a few hundred bytes.
        listed = "; ".join(clip(str(c)) for c in self.changes) or f"{format_path(self.rule.self_path)}: no change found"
        more = f" (and {self.hidden_changes} more changes)" if self.hidden_changes else ""
        if self.exception_named:
            return (f'rule "{self.rule.name}" failed on {listed}{more}. The update names itself as an exception, '
                    f"but this webhook grants none (serve --tls-exceptions off): {EXCEPTIONS_OFF}")
        return f'rule "{self.rule.name}" failed on {listed}{more}. {self.rule.message}'


@dataclass(frozen=True, slots=True)
class Excepted:
    """A rule that refused the update, which its `exception` let through (the webhook grants them)."""

    rule: Rule


# What one rule contributes: its failure, the warnings of an allowed change, or its exception taken.
Outcome = Failure | list[str] | Excepted


@dataclass(frozen=True, slots=True)
class Verdict:
    failures: tuple[Failure, ...] = ()
    warnings: tuple[str, ...] = ()
    excepted: tuple[str, ...] = ()  # the rules whose exception let the update through

    @property
    def allowed(self) -> bool:
        return not self.failures


# The verdict on an update every rule allows without a warning.
ALLOWED = Verdict()


def judge(rule_set: RuleSet, kind: GroupVersionKind, *, old: Mapping[str, Any], new: Mapping[str, Any],
          exceptions: bool = False) -> Verdict:
    """The verdict on an UPDATE from `old` to `new`: `judge_texts` on the JSON texts of their values at
    each rule's `self` path, so a caller holding objects (tests, tools) is judged as /validate judges.
    tests/test_rules_batched.py checks the verdicts against CEL's semantics."""
    return judge_texts(rule_set, kind, lambda path: (_text(old, path), _text(new, path)), exceptions=exceptions)


def _text(obj: Mapping[str, Any], path: Path) -> bytes:
    value = get_path(obj, path)
    return b"" if value is MISSING else orjson.dumps(value)


# The JSON text of a value as it arrived, b"" for an absent path (as the memo writes MISSING).
Texts = Callable[[Path], "tuple[bytes, bytes]"]


def judge_texts(rule_set: RuleSet, kind: GroupVersionKind, texts: Texts, *, exceptions: bool = False) -> Verdict:
    """The verdict on an UPDATE whose `self` values are given as the JSON texts they arrived as
    (`texts(path)`: oldSelf's and self's); warnings are kept only for an allowed update. The rules
    sharing a `self` path are judged together (see Group): one limits check and one CEL call, or a
    remembered result.

    A pair of texts is first looked up in the memo as it stands: a text decodes to one value only, and
    the memo's keys are JSON texts of exactly the values their results were evaluated on (`Memo.key`),
    so a key equal to the texts holds those texts' results. A compact text the apiserver sent is the
    memo's key for its value, so an allowed update hits without decoding anything; otherwise (and to
    name the changes of a denial) the texts are decoded and judged as `judge` judges the values.

    A rule's failure on an update its `exception` holds for is, with `exceptions`, a warning instead
    (the exported policy checks that the requester is granted it, the webhook cannot: docs/rules.md),
    and without, a failure that says so. Evaluated only for failures: the allowed path costs nothing."""
    outcomes: dict[str, Outcome] = {}
    for group in rule_set.groups_for(kind):
        old_text, new_text = texts(group.self_path)
        results = group.memo.get((old_text, new_text))
        if results == group.quiet:  # every rule passed and none warns: the group has nothing to say
            continue
        group_outcomes = None if results is None else _passed(group, results)
        if group_outcomes is None:
            old_value, new_value = _decoded(old_text), _decoded(new_text)
            group_outcomes = (_judge_group(group, old_value, new_value) if results is None
                              else _read_results(group, results, old_value, new_value))
            group_outcomes = _exceptions(group_outcomes, old_value, new_value, granted=exceptions)
        outcomes.update(zip(group.names, group_outcomes, strict=True))
    if not outcomes:  # an allowed update without warnings, its verdict read from the memo alone (~20k
        return ALLOWED  # instructions less than reading each rule's result: cachegrind, a Deployment UPDATE)
    return _verdict([outcomes.get(rule.name, []) for rule in rule_set.for_kind(kind)])


def _exceptions(outcomes: list[Outcome], old_value: object, new_value: object, *, granted: bool) -> list[Outcome]:
    """Each failure of a rule whose `exception` holds on the update: a warning when `granted`, else a
    failure that names the exception it could not take. An exception that errors is not taken."""
    if not any(isinstance(o, Failure) and o.error is None and o.rule.exception is not None for o in outcomes):
        return outcomes
    variables = {"self": _as_self(new_value), "oldSelf": _as_self(old_value)}
    judged: list[Outcome] = []
    for outcome in outcomes:
        exception = outcome.rule.exception if isinstance(outcome, Failure) and outcome.error is None else None
        if not isinstance(outcome, Failure) or exception is None or exception.evaluate(variables) is not True:
            judged.append(outcome)
        elif granted:
            judged.append(Excepted(outcome.rule))
        else:
            judged.append(Failure(outcome.rule, outcome.changes, outcome.hidden_changes, exception_named=True))
    return judged


def _decoded(text: bytes) -> object:
    # The edge's decode checked the text's syntax; orjson parses it now the rules need its value, and
    # refuses only what no JSON encoder writes (a number past a double's range): that call's 400.
    try:
        return MISSING if text == b"" else orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise BadReview(f"invalid JSON in a rule's self value: {error}") from None


def _passed(group: Group, results: tuple[bool, ...]) -> list[Outcome] | None:
    """`_read_results` for a group whose every rule passed; None when one failed. The common answer of a
    memo hit, so the rules' results are read as a slice (Group's batch order), not rule by rule."""
    if not all(results[:len(group.rules)]):
        return None
    return [_warned(rule, results, at) for rule, at in zip(group.rules, group.warning_at, strict=True)]


def self_value(obj: Mapping[str, Any], path: Path) -> object:
    """What a rule's `self` is: the value at its path, nulls dropped; an absent path is `{}`.

    `{}` rather than an error, so enabling TLS on an object that had no such block yet (nil -> X) is
    judged like any other transition — the same as a CRD rule placed on the parent node.
    """
    return _as_self(get_path(obj, path))


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


def _limit_breach(old_value: object, new_value: object, path: Path) -> str | None:
    for value in (old_value, new_value):
        depth, values = measure(value, max_depth=MAX_SELF_DEPTH, max_values=MAX_SELF_VALUES)
        if depth > MAX_SELF_DEPTH:
            return f"{format_path(path)} is nested deeper than {MAX_SELF_DEPTH} levels, more than any Kubernetes object"
        if values > MAX_SELF_VALUES:
            return (f"{format_path(path)} holds more than {MAX_SELF_VALUES:,} values, more than "
                    "tls-injector evaluates a rule on")
    return None


def _judge_group(group: Group, old_value: object, new_value: object) -> list[Outcome]:
    """One outcome per rule of the group, in its order, given the values at its `self` path."""
    key = group.memo.key(old_value, new_value)
    results = None if key is None else group.memo.get(key)
    if results is not None:  # the same bytes as values that were within the limits and evaluated
        return _read_results(group, results, old_value, new_value)
    if key is not None and _key_within_limits(key):
        # JSON without a null: nothing for to_cel to drop, so the values are `self` as they stand.
        variables = {"self": _present(new_value), "oldSelf": _present(old_value)}
    else:
        reason = _limit_breach(old_value, new_value, group.self_path)
        if reason is not None:
            return [Failure(rule, (), 0, reason) for rule in group.rules]
        variables = {"self": _as_self(new_value), "oldSelf": _as_self(old_value)}
    results = None if group.batch is None else group.batch.evaluate(variables)
    if results is None:  # an error or a non-bool somewhere: each rule alone reports its own
        return [_judge_rule(rule, variables) for rule in group.rules]
    if key is not None:
        group.memo.put(key, results)
    return _read_results(group, results, old_value, new_value)


def _key_within_limits(key: Key) -> bool:
    """The limits read off the JSON bytes, without a walk: every value takes at least one byte, and
    every level of nesting opens at least one { or [ (brackets inside strings only overcount)."""
    old, new = key
    return (len(old) + len(new) <= MAX_SELF_VALUES
            and old.count(b"{") + old.count(b"[") <= MAX_SELF_DEPTH
            and new.count(b"{") + new.count(b"[") <= MAX_SELF_DEPTH)


def _read_results(group: Group, results: tuple[bool, ...], old_value: object, new_value: object) -> list[Outcome]:
    """The batch's bools as outcomes, one per rule: the rules' expressions first, then their warnWhens."""
    return [_warned(rule, results, at) if passed else _failure(rule, _as_self(old_value), _as_self(new_value), False)
            for rule, passed, at in zip(group.rules, results[:len(group.rules)], group.warning_at, strict=True)]


def _warned(rule: Rule, results: tuple[bool, ...], at: int | None) -> list[str]:
    """The warning of a rule that passed, when its warnWhen (the batch's result at `at`) is true."""
    return [rule.warning.message] if at is not None and results[at] and rule.warning is not None else []


def _judge_rule(rule: Rule, variables: Mapping[str, object]) -> Outcome:
    result = rule.expression.evaluate(variables)
    if result is True:
        return _warnings(rule, variables)
    return _failure(rule, variables["oldSelf"], variables["self"], result)


def _verdict(outcomes: Iterable[Outcome]) -> Verdict:
    failures: list[Failure] = []
    warnings: list[str] = []
    excepted: list[str] = []
    for outcome in outcomes:
        if isinstance(outcome, Failure):
            failures.append(outcome)
        elif isinstance(outcome, Excepted):
            warnings.append(EXCEPTION_TAKEN.format(rule=outcome.rule.name))
            excepted.append(outcome.rule.name)
        else:
            warnings.extend(outcome)
    return Verdict(tuple(failures), () if failures else tuple(warnings), () if failures else tuple(excepted))


def _as_self(value: object) -> object:
    return {} if value is MISSING or value is None else to_cel(value)


def _present(value: object) -> object:
    return {} if value is MISSING else value


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
