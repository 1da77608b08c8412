"""The rule set: plain data (a parsed rules file) checked and compiled once, before any request.

Every problem is collected, each naming the rule (by position and name) and the field, so a bad file
is fixed in one pass and fails at startup, never at request time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from tls_injector.admission import GroupVersionKind
from tls_injector.rules.cel import Batch, CelCompileError, Environment, Program
from tls_injector.rules.memo import MEMO_ENTRIES, Memo
from tls_injector.rules.paths import BadPath, Path, parse_path

# The variables a rule sees, as in a CRD transition rule.
RULE_VARIABLES = ("self", "oldSelf")
# Rule names become parts of exported object names, so they follow the DNS label rules (63 characters).
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_RULE_FIELDS = frozenset({"name", "match", "self", "expression", "message", "fields", "warnWhen", "warning",
                          "scope", "exception"})
# Where a rule holds. `enabled-namespaces`: only namespaces labelled tls-injector.io/inject=enabled;
# `other-namespaces`: only the rest; `all`: both. The apiserver tells the two apart for us: the built-in
# entries select by that label and send each to its own path (/validate/enabled-namespace, /validate), so
# the webhook knows without reading the API, and each request is judged on exactly one path.
SCOPE_ALL = "all"
SCOPE_ENABLED_NAMESPACES = "enabled-namespaces"
SCOPE_OTHER_NAMESPACES = "other-namespaces"
SCOPES = (SCOPE_ALL, SCOPE_ENABLED_NAMESPACES, SCOPE_OTHER_NAMESPACES)
_REQUIRED = ("name", "match", "expression", "message")
_MATCH_FIELDS = frozenset({"group", "version", "kind", "resource"})
_TOP_FIELDS = frozenset({"rules", "includeDefaults"})
# Kinds whose rules a rule set keeps looked up. A cluster sends a handful; a caller may name any kind
# (up to 253 characters each), so past this many the lookups start over: a scan of the rules per
# request then, never unbounded memory.
MAX_CACHED_KINDS = 256


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a rules file; `index` is the rule's position in `rules` (0-based)."""

    message: str
    index: int | None = None
    rule: str | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = "" if self.index is None else f"rules[{self.index}]"
        if self.rule:
            where += f" ({self.rule})"
        if self.field:
            where += f" {self.field}"
        return f"{where.strip()}: {self.message}" if where else self.message


class RulesError(ValueError):
    """The rule set is invalid; `problems` lists every problem found."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = tuple(problems)


@dataclass(frozen=True, slots=True)
class Match:
    group: str
    kind: str
    version: str | None = None
    resource: str | None = None  # the plural, for the exported policy; guessed from kind when absent

    def matches(self, kind: GroupVersionKind) -> bool:
        return (kind["group"] == self.group and kind["kind"] == self.kind
                and self.version in (None, kind["version"]))


@dataclass(frozen=True, slots=True)
class RuleWarning:
    """Shown (kubectl prints it) when an allowed update makes `when` true, e.g. TLS enabled in place."""

    when: Program
    message: str


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    match: tuple[Match, ...]
    self_path: Path
    expression: Program
    message: str
    fields: tuple[Path, ...] = ()
    warning: RuleWarning | None = None
    scope: str = SCOPE_ALL
    # When true on an update the expression refuses, the update names itself as a sanctioned exception
    # (docs/rules.md, "Exceptions"): allowed to a subject granted it, refused to anyone else.
    exception: Program | None = None

    def applies_to(self, kind: GroupVersionKind) -> bool:
        return any(m.matches(kind) for m in self.match)


@dataclass(frozen=True, slots=True)
class Group:
    """A kind's rules that share one `self` path: one conversion, one CEL call, one memo for all of them.

    `batch` holds the rules' expressions in rule order, then the warnWhens of those that have one, in
    rule order too; None when they do not compile as one list, and then each is evaluated alone. So a
    batch's first len(rules) results say whether each rule passed, read without a loop in Python, and
    `warning_at` gives, per rule, the position of its warnWhen's result (None: it has no warnWhen), and
    `quiet` is the batch's results when every rule passed and no warnWhen holds: the usual update.
    """

    self_path: Path
    rules: tuple[Rule, ...]
    batch: Batch | None
    memo: Memo
    names: tuple[str, ...]  # the rules' names, in order
    warning_at: tuple[int | None, ...]
    quiet: tuple[bool, ...]

    @classmethod
    def of(cls, path: Path, rules: tuple[Rule, ...], memo: Memo) -> Group:
        """The group of `rules` on `path`, its batch compiled."""
        warned = [rule for rule in rules if rule.warning is not None]
        programs = [*(rule.expression for rule in rules), *(rule.warning.when for rule in warned if rule.warning)]
        positions = {rule.name: len(rules) + i for i, rule in enumerate(warned)}
        return cls(path, rules, _batch_environment().compile_batch(programs), memo,
                   tuple(rule.name for rule in rules), tuple(positions.get(rule.name) for rule in rules),
                   (True,) * len(rules) + (False,) * len(warned))


@dataclass(frozen=True, slots=True)
class RuleSet:
    rules: tuple[Rule, ...]
    include_defaults: bool = True
    memo_entries: int = MEMO_ENTRIES  # per group of rules; 0: every pair is evaluated (tests compare both)
    _by_kind: dict[tuple[str, str, str], tuple[Rule, ...]] = field(default_factory=dict, compare=False)
    _groups_by_kind: dict[tuple[str, str, str], tuple[Group, ...]] = field(default_factory=dict, compare=False)
    # By the names of their rules (unique in a set), so kinds with the same rules share a batch and memo;
    # bounded by the rule set itself: one entry per distinct set of rules some kind gets.
    _groups: dict[tuple[str, ...], Group] = field(default_factory=dict, compare=False)

    def for_kind(self, kind: GroupVersionKind) -> tuple[Rule, ...]:
        """The rules for a kind, looked up once per kind (a handful of kinds, thousands of requests)."""
        key = (kind["group"], kind["version"], kind["kind"])
        found = self._by_kind.get(key)
        if found is None:
            if len(self._by_kind) >= MAX_CACHED_KINDS:
                self._by_kind.clear()
            found = self._by_kind[key] = tuple(r for r in self.rules if r.applies_to(kind))
        return found

    def groups_for(self, kind: GroupVersionKind) -> tuple[Group, ...]:
        """The kind's rules grouped by `self` path, in the order each path first appears."""
        key = (kind["group"], kind["version"], kind["kind"])
        found = self._groups_by_kind.get(key)
        if found is None:
            if len(self._groups_by_kind) >= MAX_CACHED_KINDS:
                self._groups_by_kind.clear()
            by_path: dict[Path, list[Rule]] = {}
            for rule in self.for_kind(kind):
                by_path.setdefault(rule.self_path, []).append(rule)
            found = self._groups_by_kind[key] = tuple(self._group(path, tuple(rules))
                                                      for path, rules in by_path.items())
        return found

    def prepare(self) -> None:
        """Compile every group's batch now, at startup, rather than in some kind's first request (~3 ms
        each). Every kind a request can name gets the rules of one of these probes: those matching its
        group and kind at any version, plus those naming its version."""
        for match in (m for rule in self.rules for m in rule.match):
            for version in {match.version or "", ""}:  # "": a version no rule names (versions are non-empty)
                self.groups_for(GroupVersionKind(group=match.group, version=version, kind=match.kind))

    def _group(self, path: Path, rules: tuple[Rule, ...]) -> Group:
        names = tuple(rule.name for rule in rules)
        group = self._groups.get(names)
        if group is None:
            group = self._groups[names] = Group.of(path, rules, Memo(entries=self.memo_entries))
        return group

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def scoped(self, namespaces: str, *, memo_entries: int = MEMO_ENTRIES) -> RuleSet:
        """The rules that hold in `namespaces` (enabled- or other-namespaces): theirs and those of scope
        all. One handler per webhook path, one path per kind of namespace."""
        if namespaces == SCOPE_ALL:
            raise ValueError("a path serves enabled-namespaces or other-namespaces, not all")
        kept = tuple(r for r in self.rules if r.scope in (SCOPE_ALL, namespaces))
        return RuleSet(kept, include_defaults=self.include_defaults, memo_entries=memo_entries)

    def merged_with(self, other: RuleSet) -> RuleSet:
        """This set followed by `other`; a name in both is an error (two rules, one name in messages)."""
        names = {r.name for r in self.rules}
        clashes = [Problem("a built-in rule already has this name", index=i, rule=r.name, field="name")
                   for i, r in enumerate(other.rules) if r.name in names]
        if clashes:
            raise RulesError(clashes)
        return RuleSet((*self.rules, *other.rules), include_defaults=other.include_defaults)


def guess_resource(kind: str) -> str:
    """The plural Kubernetes guesses for a kind (as its own UnsafeGuessKindToResource does)."""
    lower = kind.lower()
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + "s"


@cache
def _batch_environment() -> Environment:
    """Where batches are compiled: the rules' own declarations, shared by rules from any file."""
    return Environment(RULE_VARIABLES)


def build_rule_set(data: object) -> RuleSet:
    """Check and compile a parsed rules file (`{"rules": [...], "includeDefaults": bool}`)."""
    if not isinstance(data, Mapping):
        raise RulesError([Problem(f"a rules file must be a mapping with a `rules` list, got {_type(data)}")])
    problems = [Problem(f"unknown field {key!r} (known: includeDefaults, rules)")
                for key in data if key not in _TOP_FIELDS]
    include_defaults = data.get("includeDefaults", True)
    if not isinstance(include_defaults, bool):
        problems.append(Problem("includeDefaults must be true or false"))
    entries = data.get("rules")
    if not isinstance(entries, list):
        raise RulesError([*problems, Problem(f"`rules` must be a list, got {_type(entries)}")])
    environment = Environment(RULE_VARIABLES)
    rules = [_build_rule(entry, index, environment, problems) for index, entry in enumerate(entries)]
    problems.extend(_duplicate_names(rules))
    if problems:
        raise RulesError(problems)
    return RuleSet(tuple(r for r in rules if r is not None), include_defaults=bool(include_defaults))


class _Collector:
    """Problems for one rule, each tagged with its position and name."""

    def __init__(self, index: int, name: str | None, problems: list[Problem]) -> None:
        self.index, self.name, self.problems = index, name, problems
        self.count = 0

    def add(self, field_name: str | None, message: str) -> None:
        self.problems.append(Problem(message, index=self.index, rule=self.name, field=field_name))
        self.count += 1


def _build_rule(entry: object, index: int, env: Environment, problems: list[Problem]) -> Rule | None:
    if not isinstance(entry, Mapping):
        problems.append(Problem(f"a rule must be a mapping, got {_type(entry)}", index=index))
        return None
    name = entry.get("name") if isinstance(entry.get("name"), str) else None
    out = _Collector(index, name, problems)
    _check_shape(entry, out)
    match = _matches(entry.get("match"), out)
    self_path = _path(entry.get("self", ""), "self", out)
    fields = tuple(_path(p, f"fields[{i}]", out) for i, p in enumerate(_list(entry.get("fields", []), "fields", out)))
    expression = _program(entry.get("expression"), "expression", env, out)
    warning = _warning(entry, env, out)
    exception = _program(entry.get("exception"), "exception", env, out) if "exception" in entry else None
    if "exception" in entry and entry["exception"] is None:
        out.add("exception", "must be a non-empty CEL expression")
    scope = entry.get("scope", SCOPE_ALL)
    if scope not in SCOPES:
        out.add("scope", f"must be one of {', '.join(SCOPES)}")
    if out.count or name is None or expression is None:
        return None
    return Rule(name=name, match=match, self_path=self_path, expression=expression,
                message=str(entry["message"]).strip(), fields=fields, warning=warning, scope=str(scope),
                exception=exception)


def _check_shape(entry: Mapping[str, Any], out: _Collector) -> None:
    for key in entry:
        if key not in _RULE_FIELDS:
            out.add(None, f"unknown field {key!r} (known: {', '.join(sorted(_RULE_FIELDS))})")
    for key in _REQUIRED:
        if key not in entry:
            out.add(None, f"missing required field {key!r}")
    name = entry.get("name")
    if "name" in entry and (not isinstance(name, str) or not _NAME.fullmatch(name)):
        out.add("name", "must be a DNS label: lowercase letters, digits and '-', at most 63 characters")
    if "message" in entry and (not isinstance(entry["message"], str) or not entry["message"].strip()):
        out.add("message", "must be a non-empty string")


def _matches(value: object, out: _Collector) -> tuple[Match, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        out.add("match", "must be a non-empty list of {group, kind, version?, resource?}")
        return ()
    return tuple(m for i, item in enumerate(value) if (m := _match(item, f"match[{i}]", out)) is not None)


def _match(item: object, where: str, out: _Collector) -> Match | None:
    if not isinstance(item, Mapping):
        out.add(where, "must be a mapping {group, kind, version?, resource?}")
        return None
    before = out.count
    for key in item:
        if key not in _MATCH_FIELDS:
            out.add(where, f"unknown field {key!r} (known: group, kind, resource, version)")
    for key in ("group", "kind"):
        if not isinstance(item.get(key), str) or (key == "kind" and not item[key]):
            out.add(where, f"{key} must be a string" + (" (\"\" for the core group)" if key == "group" else ""))
    for key in ("version", "resource"):
        if key in item and (not isinstance(item[key], str) or not item[key]):
            out.add(where, f"{key} must be a non-empty string when given")
    if out.count > before:
        return None
    return Match(group=item["group"], kind=item["kind"], version=item.get("version"), resource=item.get("resource"))


def _path(value: object, where: str, out: _Collector) -> Path:
    if not isinstance(value, str):
        out.add(where, f"must be a field path string like spec.sidecar, got {_type(value)}")
        return ()
    try:
        return parse_path(value.strip())
    except BadPath as error:
        out.add(where, str(error))
        return ()


def _program(value: object, where: str, env: Environment, out: _Collector) -> Program | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        out.add(where, "must be a non-empty CEL expression")
        return None
    try:
        return env.compile_bool(value.strip())
    except CelCompileError as error:
        out.add(where, f"CEL compile error: {error}")
        return None


def _warning(entry: Mapping[str, Any], env: Environment, out: _Collector) -> RuleWarning | None:
    if ("warnWhen" in entry) != ("warning" in entry):
        out.add("warnWhen", "warnWhen and warning go together")
        return None
    if "warnWhen" not in entry:
        return None
    when = _program(entry["warnWhen"], "warnWhen", env, out)
    if not isinstance(entry["warning"], str) or not entry["warning"].strip():
        out.add("warning", "must be a non-empty string")
        return None
    return None if when is None else RuleWarning(when=when, message=entry["warning"].strip())


def _list(value: object, where: str, out: _Collector) -> list[object]:
    if isinstance(value, list):
        return value
    out.add(where, f"must be a list, got {_type(value)}")
    return []


def _duplicate_names(rules: Sequence[Rule | None]) -> list[Problem]:
    seen: dict[str, int] = {}
    problems = []
    for index, rule in enumerate(rules):
        if rule is not None and rule.name in seen:
            problems.append(Problem(f"duplicate rule name (also rules[{seen[rule.name]}])", index=index,
                                    rule=rule.name, field="name"))
        elif rule is not None:
            seen[rule.name] = index
    return problems


def _type(value: object) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "a number"}
    return "nothing" if value is None else names.get(type(value), type(value).__name__)
