"""Field paths inside an object: `spec.template.metadata`, `labels["tls-injector.io/inject"]`.

One syntax serves the rules file (`self`, `fields`), the messages a person reads and the CEL that the
export writes, so all three name a field the same way. Plain names use dots; any other map key (label
keys carry dots and slashes) goes in brackets with double or single quotes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Final

Path = tuple[str, ...]


class _Missing:
    """The value at a path that does not exist (distinct from an explicit value)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()

# A CEL identifier, so a plain segment can be written as a CEL field selection in the export.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACKET = re.compile(r"""\[\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')\s*\]""")


class BadPath(ValueError):
    """The text is not a field path; the message says where it goes wrong."""


def parse_path(text: str) -> Path:
    """`a.b["c.d"]` -> ("a", "b", "c.d"); the empty string is the root."""
    segments: list[str] = []
    position = 0
    while position < len(text):
        if text[position] == "[":
            position = _bracket(text, position, segments)
            continue
        if segments:
            if text[position] != ".":
                raise BadPath(f"expected '.' or '[' at column {position + 1} of {text!r}")
            position += 1
        match = _NAME.match(text, position)
        if match is None:
            raise BadPath(f"expected a field name at column {position + 1} of {text!r}")
        segments.append(match.group())
        position = match.end()
    return tuple(segments)


def _bracket(text: str, position: int, segments: list[str]) -> int:
    match = _BRACKET.match(text, position)
    if match is None:
        raise BadPath(f"expected [\"key\"] at column {position + 1} of {text!r}")
    quoted = match.group(1) if match.group(1) is not None else match.group(2)
    segments.append(re.sub(r"\\(.)", r"\1", quoted))
    return match.end()


def format_path(path: Path) -> str:
    """The inverse of parse_path, as a person reads it; the root is `(the whole object)`."""
    if not path:
        return "(the whole object)"
    parts = [segment if _NAME.fullmatch(segment) else f"[{json.dumps(segment)}]" for segment in path]
    return "".join(part if index == 0 or part.startswith("[") else f".{part}" for index, part in enumerate(parts))


def get_path(value: object, path: Path) -> object:
    """The value at `path`, or MISSING when some step is absent or not an object."""
    for segment in path:  # parsed JSON holds plain dicts: the exact check first skips the ABC's ~0.5 us
        if (type(value) is not dict and not isinstance(value, Mapping)) or segment not in value:
            return MISSING
        value = value[segment]
    return value


def cel_value_or_empty(root: str, path: Path) -> str:
    """CEL for "the value at root.path, or {} when any step is absent" — the webhook's `self` rule."""
    if not path:
        return root
    guards, access = [], root
    for segment in path:
        if _NAME.fullmatch(segment):
            guards.append(f"has({access}.{segment})")
            access = f"{access}.{segment}"
        else:
            literal = json.dumps(segment)
            guards.append(f"{literal} in {access}")
            access = f"{access}[{literal}]"
    # dyn() on both branches: against a typed schema (ObjectMeta vs map) the two would not unify in a
    # type checker such as the apiserver's policy type checking; as dyn they always do.
    return f"({' && '.join(guards)} ? dyn({access}) : dyn({{}}))"
