"""Reading rules files (YAML) into a RuleSet: the file and YAML edge of the pure tls_injector.rules core.

Every problem is reported with the file, the line of the rule and its name, e.g.
`rules.yaml:12: rules[1] (sidecar-tls) expression: CEL compile error: ...`, and raised before the
server starts or the check runs — never at request time.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from tls_injector.offline.errors import InputError
from tls_injector.offline.files import read_text
from tls_injector.offline.yamltext import load_all, plain
from tls_injector.rules import RulesError, RuleSet, build_rule_set

DEFAULTS_SOURCE = "built-in rules (app/rules/defaults.yaml)"
# A rules file is a few hundred nodes; the bound stops YAML aliases expanding a small file into billions.
MAX_RULES_NODES = 100_000


class RulesFileError(InputError):
    """A rules file that cannot be used; the message names the file, line, rule and field."""


def load_rule_set(path: Path | None) -> RuleSet:
    """The built-in rules, plus (or, with `includeDefaults: false`, replaced by) the file's rules."""
    defaults = default_rule_set()
    if path is None:
        return defaults
    try:
        text = read_text(path)
    except InputError as error:
        raise RulesFileError(str(error)) from None
    own, lines = _parse(text, str(path))
    if not own.include_defaults:
        return own
    try:
        return defaults.merged_with(own)
    except RulesError as error:
        raise RulesFileError(_describe(error, str(path), lines)) from None


def default_rule_set() -> RuleSet:
    """The built-in rules: a RuleSet of its own each time (a set keeps per-set memos), from a file read once."""
    data, lines = _default_rules()
    return _built(copy.deepcopy(data), DEFAULTS_SOURCE, lines)


@functools.cache
def _default_rules() -> tuple[Any, list[int]]:
    text = resources.files("tls_injector.rules").joinpath("defaults.yaml").read_text(encoding="utf-8")
    return _read(text, DEFAULTS_SOURCE)


def parse_rules_text(text: str, *, source: str) -> RuleSet:
    return _parse(text, source)[0]


def _parse(text: str, source: str) -> tuple[RuleSet, list[int]]:
    data, lines = _read(text, source)
    return _built(data, source, lines), lines


def _read(text: str, source: str) -> tuple[Any, list[int]]:
    """(the file's plain data, the line of each rule)."""
    try:
        documents = load_all(text, source=source)
        if len(documents) > 1:
            raise RulesFileError(f"{source}: one YAML document expected, found {len(documents)}")
        loaded = documents[0].data if documents else None
        return plain(loaded, budget=MAX_RULES_NODES, where=source), _rule_lines(loaded)
    except RulesFileError:
        raise
    except InputError as error:
        raise RulesFileError(str(error)) from None


def _built(data: Any, source: str, lines: list[int]) -> RuleSet:
    try:
        return build_rule_set(data)
    except RulesError as error:
        raise RulesFileError(_describe(error, source, lines)) from None


def _rule_lines(loaded: Any) -> list[int]:
    """The 1-based line where each entry of the top-level `rules` list starts."""
    rules = loaded.get("rules") if isinstance(loaded, Mapping) else None
    if not isinstance(rules, list) or not hasattr(rules, "lc"):
        return []
    return [rules.lc.item(i)[0] + 1 for i in range(len(rules))]


def _describe(error: RulesError, source: str, lines: list[int]) -> str:
    def located(index: int | None) -> str:
        return f"{source}:{lines[index]}" if index is not None and index < len(lines) else source

    count = len(error.problems)
    head = f"{source}: {count} problem{'s' if count != 1 else ''} in the rules file:"
    lines_out = [f"  {located(p.index)}: {p}".replace("\n", "\n      ") for p in error.problems]
    return "\n".join([head, *lines_out])
