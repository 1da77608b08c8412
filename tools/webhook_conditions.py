"""Write the rule-derived matchCondition into the shipped ValidatingWebhookConfigurations.

    .venv/bin/python tools/webhook_conditions.py          # rewrite them in place
    .venv/bin/python tools/webhook_conditions.py --check  # exit 1 when a file is not what it should be

The condition comes from app/rules/dispatch.py (the built-in rules' `fields`); this only puts it into
manifests/base/validatingwebhookconfiguration.yaml and the chart's template, as a folded YAML scalar,
keeping the files' comments and templating. tests/shipping/test_dispatch.py fails when they differ.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tls_injector.offline.rulesfile import load_rule_set  # noqa: E402
from tls_injector.rules.dispatch import CONDITION_NAME, entry_condition  # noqa: E402

BASE = ROOT / "manifests/base/validatingwebhookconfiguration.yaml"
FILES = (BASE, ROOT / "charts/tls-injector/templates/validatingwebhookconfiguration.yaml")
# The names the derived condition had before it was derived, replaced on the first run.
FORMER_NAMES = ("template-carries-opt-in-label", "created-or-template-carries-label-or-annotation",
                "namespace-carries-opt-in-label")
_ENTRY = re.compile(r"^  - name: (\S+)\n", re.MULTILINE)
_CONDITION = re.compile(r"^      - name: (?P<name>\S+)\n        expression: >-\n(?:          .*\n)+", re.MULTILINE)
WIDTH = 110


def conditions() -> dict[str, str]:
    """Each shipped entry's derived condition, by entry name."""
    rule_set = load_rule_set(None)
    hooks: list[dict[str, Any]] = yaml.safe_load(BASE.read_text())["webhooks"]
    return {hook["name"]: entry_condition(rule_set, hook) for hook in hooks}


def terms(expression: str) -> list[str]:
    """The expression cut after each top-level `||`, each piece keeping its `||`."""
    pieces, depth, start = [], 0, 0
    for index, char in enumerate(expression):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(char, 0)
        if depth == 0 and expression.startswith(" || ", index):
            pieces.append(expression[start:index + 3])
            start = index + 4
    return [*pieces, expression[start:]]


def block(expression: str) -> str:
    """The condition as a folded scalar, a line or more per term, broken at single spaces, so folding
    gives the text back."""
    lines = [line for term in terms(expression)
             for line in textwrap.wrap(term, width=WIDTH - 10, break_long_words=False, break_on_hyphens=False)]
    assert " ".join(lines) == expression, "the expression holds a run of spaces folding would lose"
    body = "".join(f"          {line}\n" for line in lines)
    return f"      - name: {CONDITION_NAME}\n        expression: >-\n{body}"


def rewritten(text: str, wanted: dict[str, str]) -> str:
    starts = [(m.start(), m.group(1)) for m in _ENTRY.finditer(text)]
    pieces, end = [text[:starts[0][0]] if starts else text], len(text)
    for index, (start, name) in enumerate(starts):
        stop = starts[index + 1][0] if index + 1 < len(starts) else end
        entry = text[start:stop]
        if name in wanted:
            entry = _CONDITION.sub(lambda m, n=name: block(wanted[n])
                                   if m.group("name") in (CONDITION_NAME, *FORMER_NAMES) else m.group(0), entry)
        pieces.append(entry)
    return "".join(pieces)


def main(argv: list[str]) -> int:
    wanted, stale = conditions(), []
    for path in FILES:
        text = path.read_text()
        new = rewritten(text, wanted)
        if new != text:
            stale.append(path)
            if "--check" not in argv:
                path.write_text(new)
    for path in stale:
        print(f"{'stale' if '--check' in argv else 'rewritten'}: {path.relative_to(ROOT)}")
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
