"""Reading rules files (YAML) into a RuleSet: the file and YAML edge of the pure app.rules core.

Every problem is reported with the file, the line of the rule and its name, e.g.
`rules.yaml:12: rules[1] (sidecar-tls) expression: CEL compile error: ...`, and raised before the
server starts or the check runs — never at request time.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml

from app.rules import RulesError, RuleSet, build_rule_set

DEFAULTS_SOURCE = "built-in rules (app/rules/defaults.yaml)"


class RulesFileError(ValueError):
    """A rules file that cannot be used; the message names the file, line, rule and field."""


def load_rule_set(path: Path | None) -> RuleSet:
    """The built-in rules, plus (or, with `includeDefaults: false`, replaced by) the file's rules."""
    defaults = default_rule_set()
    if path is None:
        return defaults
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RulesFileError(f"{path}: cannot read the rules file: {error}") from None
    own, lines = _parse(text, str(path))
    if not own.include_defaults:
        return own
    try:
        return defaults.merged_with(own)
    except RulesError as error:
        raise RulesFileError(_describe(error, str(path), lines)) from None


def default_rule_set() -> RuleSet:
    text = resources.files("app.rules").joinpath("defaults.yaml").read_text(encoding="utf-8")
    return parse_rules_text(text, source=DEFAULTS_SOURCE)


def parse_rules_text(text: str, *, source: str) -> RuleSet:
    return _parse(text, source)[0]


def _parse(text: str, source: str) -> tuple[RuleSet, list[int]]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise RulesFileError(f"{source}: not valid YAML: {error}") from None
    except RecursionError:  # PyYAML composes nested nodes recursively: a crafted `[[[[...` ends here
        raise RulesFileError(f"{source}: not usable YAML: nested too deeply") from None
    lines = _rule_lines(node)
    try:
        return build_rule_set(data), lines
    except RulesError as error:
        raise RulesFileError(_describe(error, source, lines)) from None


def _rule_lines(node: yaml.Node | None) -> list[int]:
    """The 1-based line where each entry of the top-level `rules` list starts."""
    if not isinstance(node, yaml.MappingNode):
        return []
    for key, value in node.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "rules" and isinstance(value, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in value.value]
    return []


def _describe(error: RulesError, source: str, lines: list[int]) -> str:
    def located(index: int | None) -> str:
        return f"{source}:{lines[index]}" if index is not None and index < len(lines) else source

    count = len(error.problems)
    head = f"{source}: {count} problem{'s' if count != 1 else ''} in the rules file:"
    lines_out = [f"  {located(p.index)}: {p}".replace("\n", "\n      ") for p in error.problems]
    return "\n".join([head, *lines_out])
