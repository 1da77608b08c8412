"""Label and field selectors, parsed and matched with the real API's grammar and semantics.

Label selectors: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``, ``k>n``,
``k<n``, comma-separated and ANDed. As in Kubernetes, ``!=`` and ``notin`` also match objects that lack
the label. Field selectors: ``f=v``, ``f==v``, ``f!=v`` over ``metadata.name``, ``metadata.namespace``
and the per-kind fields of the resource table; any other field is a 400, as the real API answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.kubeapi.errors import bad_request

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_NAME})?$")
_KEY = r"[^\s!=<>(),]+"
_SET = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<vals>[^()]*)\)\s*$")
_NOT_EXISTS = re.compile(rf"^\s*!\s*(?P<key>{_KEY})\s*$")
_BINARY = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=|>|<)\s*(?P<val>[^\s,()!=<>]*)\s*$")
_EXISTS = re.compile(rf"^\s*(?P<key>{_KEY})\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "in", "notin", "exists", "!exists", "gt", "lt"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
        if self.op == "in":
            return has and value in self.values
        if self.op == "notin":
            return not has or value not in self.values
        if self.op in ("gt", "lt"):
            return has and _compare(value, self.op, next(iter(self.values)))
        return has if self.op == "exists" else not has


def _compare(value: str | None, op: str, bound: str) -> bool:
    try:
        number = int(value or "")
    except ValueError:
        return False
    return number > int(bound) if op == "gt" else number < int(bound)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``( )``: ``a in (x,y),b`` is two requirements."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_labels(text: str | None) -> tuple[Requirement, ...]:
    if not text or not text.strip():
        return ()
    return tuple(_parse_requirement(part) for part in _split_top_level(text))


def _parse_requirement(text: str) -> Requirement:
    if m := _SET.match(text):
        values = [v.strip() for v in m["vals"].split(",")]
        return _checked(Requirement(m["key"], m["op"], frozenset(values)), text)
    if m := _NOT_EXISTS.match(text):
        return _checked(Requirement(m["key"], "!exists"), text)
    if m := _BINARY.match(text):
        op = {"=": "in", "==": "in", "!=": "notin", ">": "gt", "<": "lt"}[m["op"]]
        if op in ("gt", "lt") and not re.fullmatch(r"-?\d+", m["val"]):
            raise bad_request(f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an "
                              f"integer: {text!r}")
        return _checked(Requirement(m["key"], op, frozenset([m["val"]])), text)
    if m := _EXISTS.match(text):
        return _checked(Requirement(m["key"], "exists"), text)
    raise bad_request(f"unable to parse requirement: found {text.strip()!r}, expected a label selector requirement")


def _checked(req: Requirement, text: str) -> Requirement:
    if not _LABEL_KEY.match(req.key):
        raise bad_request(f"unable to parse requirement: invalid label key {req.key!r} in {text.strip()!r}")
    bad = [v for v in req.values if not _LABEL_VALUE.match(v)] if req.op not in ("gt", "lt") else []
    if bad:
        raise bad_request(f"unable to parse requirement: invalid label value {bad[0]!r} in {text.strip()!r}")
    return req


def labels_match(requirements: tuple[Requirement, ...], obj: Mapping[str, Any]) -> bool:
    if not requirements:
        return True
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(req.matches(labels) for req in requirements)


# Field labels whose value lives elsewhere in the object (core/v1 Event ``source`` is source.component).
_FIELD_ALIASES = {"source": "source.component"}


@dataclass(frozen=True)
class FieldTerm:
    path: tuple[str, ...]
    value: str
    equal: bool


def parse_fields(text: str | None, *, allowed: tuple[str, ...]) -> tuple[FieldTerm, ...]:
    if not text or not text.strip():
        return ()
    terms = []
    for part in _split_unescaped(text):
        m = re.fullmatch(r"\s*([^=!\s]+)\s*(==|=|!=)(.*)", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field = m[1]
        if field not in ("metadata.name", "metadata.namespace", *allowed):
            raise bad_request(f'field label not supported: {field}')
        value = re.sub(r"\\(.)", r"\1", m[3])
        path = _FIELD_ALIASES.get(field, field)
        terms.append(FieldTerm(tuple(path.split(".")), value, m[2] != "!="))
    return tuple(terms)


def _split_unescaped(text: str) -> list[str]:
    """Field selector values may contain ``\\,``; only an unescaped comma separates terms."""
    return [p for p in re.split(r"(?<!\\),", text) if p.strip()]


def _field_value(obj: Mapping[str, Any], path: tuple[str, ...]) -> str:
    node: Any = obj
    for step in path:
        node = node.get(step) if isinstance(node, Mapping) else None
    if isinstance(node, bool):
        return "true" if node else "false"
    return "" if node is None else str(node)


def fields_match(terms: tuple[FieldTerm, ...], obj: Mapping[str, Any]) -> bool:
    return all((_field_value(obj, t.path) == t.value) == t.equal for t in terms)


Matcher = Callable[[Mapping[str, Any]], bool]


def matcher(label_selector: str | None, field_selector: str | None, *, allowed: tuple[str, ...]) -> Matcher:
    """Parse both selectors once (raising 400 on bad syntax) and return one predicate over objects."""
    labels = parse_labels(label_selector)
    fields = parse_fields(field_selector, allowed=allowed)
    return lambda obj: labels_match(labels, obj) and fields_match(fields, obj)
