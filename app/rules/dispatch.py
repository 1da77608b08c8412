"""Which updates the webhook configurations send: a matchCondition derived from the rules themselves.

The apiserver evaluates a ValidatingWebhookConfiguration's matchConditions in-process, so a narrow one
keeps a webhook outage away from every update no rule can judge. Narrow is only safe when it is exact:
an update the condition keeps away is let through unjudged. So the condition is computed, never written:
a rule declares the `fields` of `self` its expression reads, and when none of them is present on either
side the rule has nothing to refuse (checked here by evaluating it with all of them absent). The
condition sent for an entry is then "some field a rule of this entry reads is present in the new or the
old object". A rule that declares no fields, or that refuses or warns with all of them absent, cannot be
narrowed that way: its entry's condition is `true` (every update is sent).

A new rule, or a new annotation read by an old one, changes the condition with it; the shipped
configurations (manifests/base, the chart) are held equal to this function's output by the test suite.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tls_injector.admission import GroupVersionKind
from tls_injector.rules.model import (
    SCOPE_ENABLED_NAMESPACES,
    SCOPE_OTHER_NAMESPACES,
    Rule,
    RuleSet,
    guess_resource,
)
from tls_injector.rules.paths import Path

# The condition's sides: the object after the update, and before it (null on CREATE).
OBJECT, OLD_OBJECT = "object", "oldObject"
# A CREATE has no old object: an entry that previews every workload it covers (enabled namespaces,
# where every pod template not labelled "false" is injected) sends every dry-run CREATE.
CREATED = f"{OLD_OBJECT} == null"
# The path each kind of namespace is sent to (app/web/server.py serves both), and so the rules it judges.
SCOPE_OF_PATH = {"/validate": SCOPE_OTHER_NAMESPACES, "/validate/enabled-namespace": SCOPE_ENABLED_NAMESPACES}
# The name of the derived condition in the shipped entries.
CONDITION_NAME = "carries-a-field-a-rule-reads"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def rules_for(rule_set: RuleSet, kinds: Iterable[GroupVersionKind], scope: str) -> tuple[Rule, ...]:
    """The rules the path for `scope` judges for any of `kinds`, each once, in the rule set's order."""
    scoped = rule_set.scoped(scope)
    wanted = {rule.name for kind in kinds for rule in scoped.for_kind(kind)}
    return tuple(rule for rule in scoped if rule.name in wanted)


def narrowable(rule: Rule) -> bool:
    """True when the rule allows, silently, an update where none of its fields is present on either side:
    tried with `self` and `oldSelf` each empty, holding the fields' parents empty, and holding them with a
    key no rule reads, in every pairing (so a rule reading a parent, not only its fields, is caught)."""
    if not rule.fields:
        return False
    shapes = [{}, _parents(rule, None), _parents(rule, "x")]
    for old_self in shapes:
        for new_self in shapes:
            values = {"self": new_self, "oldSelf": old_self}
            if rule.expression.evaluate(values) is not True:
                return False
            if rule.warning is not None and rule.warning.when.evaluate(values) is not False:
                return False
    return True


def _parents(rule: Rule, other: str | None) -> dict[str, Any]:
    """A `self` holding every field's parent (as maps) but none of the fields; with `other`, each parent
    also holds a key of that name that is none of the fields."""
    root: dict[str, Any] = {}
    for field in rule.fields:
        node = root
        for segment in field[:-1]:
            node = node.setdefault(segment, {})
    if other is not None:
        fields = {tuple(field) for field in rule.fields}
        _fill(root, (), other, fields)
    return root


def _fill(node: dict[str, Any], at: Path, other: str, fields: set[Path]) -> None:
    for key, child in list(node.items()):
        _fill(child, (*at, key), other, fields)
    name = other
    while (*at, name) in fields or name in node:
        name += "x"
    node[name] = other


def read_paths(rules: Sequence[Rule]) -> tuple[Path, ...] | None:
    """Every field the rules read, as a path from the object's root, each once; None when some rule
    cannot be narrowed (then every update must be sent)."""
    if not all(narrowable(rule) for rule in rules):
        return None
    paths: dict[Path, None] = {}
    for rule in rules:
        for field in rule.fields:
            paths[(*rule.self_path, *field)] = None
    return tuple(paths)


def match_condition(rule_set: RuleSet, *, kinds: Iterable[GroupVersionKind], scope: str,
                    every_create: bool = False) -> str:
    """The CEL of the matchCondition for an entry sending `kinds` to the path that judges `scope`.

    `every_create`: a CREATE (a dry run: the entries keep real ones out with a condition of their own)
    is sent whatever it carries, for the preview of what its pods will get.
    """
    rules = rules_for(rule_set, kinds, scope)
    paths = read_paths(rules)
    if paths is None:
        return "true"
    terms = [*([CREATED] if every_create else []), *_present(OBJECT, paths), *_present(OLD_OBJECT, paths)]
    return " || ".join(terms) if terms else "false"


def entry_kinds(rule_set: RuleSet, webhook: Mapping[str, Any]) -> tuple[GroupVersionKind, ...]:
    """The kinds of the rule set a webhook entry's `rules` send (by group, version and resource)."""
    found: dict[tuple[str, str, str], GroupVersionKind] = {}
    for rule in rule_set:
        for match in rule.match:
            resource = match.resource or guess_resource(match.kind)
            for sent in webhook.get("rules") or []:
                versions = sent.get("apiVersions") or []
                if (match.group in sent.get("apiGroups", []) and resource in sent.get("resources", [])
                        and (match.version is None or match.version in versions or "*" in versions)):
                    version = match.version or versions[0]
                    found[(match.group, version, match.kind)] = GroupVersionKind(
                        group=match.group, version=version, kind=match.kind)
    return tuple(found.values())


def entry_condition(rule_set: RuleSet, webhook: Mapping[str, Any]) -> str:
    """The derived condition a shipped ValidatingWebhookConfiguration entry must carry: its kinds, the
    rules of the path it calls, and on the enabled path every dry-run CREATE (each workload there is
    injected, so each gets the preview)."""
    path = webhook["clientConfig"]["service"]["path"]
    scope = SCOPE_OF_PATH[path]
    return match_condition(rule_set, kinds=entry_kinds(rule_set, webhook), scope=scope,
                           every_create=scope == SCOPE_ENABLED_NAMESPACES)


def condition_documents(rule_set: RuleSet) -> list[dict[str, Any]]:
    """`export-policy --format conditions`: per kind and path that some rule judges, the matchCondition its
    webhook entry needs (for entries of one's own, e.g. for a rules file's custom resources)."""
    documents: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for match in (m for rule in rule_set for m in rule.match):
        kind = GroupVersionKind(group=match.group, version=match.version or "", kind=match.kind)
        if (match.group, kind["version"], match.kind) in seen:
            continue
        seen.add((match.group, kind["version"], match.kind))
        for path, scope in SCOPE_OF_PATH.items():
            if not rules_for(rule_set, [kind], scope):
                continue
            documents.append({
                "kind": match.kind, "group": match.group, "version": match.version or "*",
                "resource": match.resource or guess_resource(match.kind), "path": path,
                "rules": [rule.name for rule in rules_for(rule_set, [kind], scope)],
                "matchConditions": [{"name": CONDITION_NAME, "expression": match_condition(
                    rule_set, kinds=[kind], scope=scope, every_create=scope == SCOPE_ENABLED_NAMESPACES)}],
            })
    return documents


def _present(root: str, paths: Sequence[Path]) -> list[str]:
    """One term per parent: "some of these keys is present there", each step guarded by has() or `in`, since
    selecting an absent field is an error and an error in a matchCondition fails the request."""
    by_parent: dict[Path, list[str]] = {}
    for path in paths:
        by_parent.setdefault(path[:-1], []).append(path[-1])
    guard = [f"{root} != null"] if root == OLD_OBJECT else []
    return [_term(root, parent, keys, guard) for parent, keys in by_parent.items()]


def _term(root: str, parent: Path, keys: list[str], guard: list[str]) -> str:
    steps, access = list(guard), root
    for segment in parent:
        steps.append(_has(access, segment))
        access = _select(access, segment)
    named = [f"has({access}.{key})" for key in keys if _IDENTIFIER.fullmatch(key)]
    quoted = [_quote(key) for key in keys if not _IDENTIFIER.fullmatch(key)]
    if len(quoted) == 1:
        named.append(f"{quoted[0]} in {access}")
    elif quoted:
        named.append(f"[{', '.join(quoted)}].exists(k, k in {access})")
    either = named[0] if len(named) == 1 else f"({' || '.join(named)})"
    return f"({' && '.join([*steps, either])})"


def _has(access: str, segment: str) -> str:
    return f"has({access}.{segment})" if _IDENTIFIER.fullmatch(segment) else f"{_quote(segment)} in {access}"


def _select(access: str, segment: str) -> str:
    return f"{access}.{segment}" if _IDENTIFIER.fullmatch(segment) else f"{access}[{_quote(segment)}]"


def _quote(text: str) -> str:
    """A CEL string literal, single-quoted as the rules write theirs."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
