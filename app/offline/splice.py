"""Writing an injected YAML document back as its source text plus the added lines.

A round-trip dump of the whole document would move comments (ruamel attaches a comment to the node
before it, so a comment after a mapping's last key, or heading the next document, would follow that key
into the middle of what was added) and rewrite what it does not keep (`~`, spacing). So the source text
stays as it is and only what the injection added is inserted: new keys after the last line of their
block mapping, new items after the last line of their block sequence, at that collection's own column
and nested the way the document indents. A changed scalar is rewritten in place; what is added to a flow
collection on one line (`[{name: app}]`) is written before its closing bracket, the rest of the line kept
as written, and a flow collection over several lines is rewritten whole. Where that is not possible (a
key removed, a merge key or an alias on the way), `splice` returns None and the caller writes the whole
document instead.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from tls_injector.offline.yamltext import Indent, dump

PathKey = str | int


@dataclass(frozen=True)
class Change:
    path: tuple[PathKey, ...]  # where the changed value sits in the document
    before: Any  # plain values
    after: Any


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    depth: int  # where two insertions meet, the deeper one's text comes first
    text: str


class Splicer:
    """Edits to one source text (a YAML stream), gathered document by document, then applied at once."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0, *itertools.accumulate(len(line) for line in self.lines)]
        self.edits: list[_Edit] = []

    def splice(self, root: Node, changes: Sequence[Change], *, indent: Indent) -> bool:
        """Write `changes` into the document `root` (composed from this text); False, and nothing
        written, where that cannot be done by adding lines and rewriting scalars and flow collections."""
        if _has_aliases(root):
            return False
        builder = _Builder(self, indent)
        for change in changes:
            node = _node_at(root, change.path)
            if node is None or not builder.diff(node, change.before, change.after, depth=len(change.path)):
                return False
        self.edits += builder.edits
        return True

    def replace(self, start: int, end: int, text: str) -> None:
        self.edits.append(_Edit(start, end, 0, text))

    def result(self) -> str:
        out = self.text
        for edit in sorted(self.edits, key=lambda e: (-e.start, e.depth)):
            out = out[: edit.start] + edit.text + out[edit.end :]
        return out


def _has_aliases(root: Node) -> bool:
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            return True
        seen.add(id(node))
        if isinstance(node, MappingNode):
            stack += [part for pair in node.value for part in pair]
        elif isinstance(node, SequenceNode):
            stack += node.value
    return False


def _node_at(node: Node, path: Sequence[PathKey]) -> Node | None:
    for key in path:
        if isinstance(node, MappingNode) and isinstance(key, str):
            found = _value_node(node, key)
            if found is None:
                return None
            node = found
        elif isinstance(node, SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            assert isinstance(node, Node)
        else:
            return None
    return node


def _value_node(node: MappingNode, key: str) -> Node | None:
    for key_node, value_node in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            return None  # a merge key (`<<: *base`) or a complex key: the keys are not where they seem
        if key_node.value == key:
            return value_node if isinstance(value_node, Node) else None
    return None


class _Builder:
    def __init__(self, splicer: Splicer, indent: Indent) -> None:
        self.text, self.lines, self.starts = splicer.text, splicer.lines, splicer.starts
        self.indent = indent
        self.edits: list[_Edit] = []

    def diff(self, node: Node, before: Any, after: Any, *, depth: int) -> bool:
        if before == after:
            return True
        flow = getattr(node, "flow_style", False)
        if isinstance(node, MappingNode) and not flow and isinstance(before, dict) and isinstance(after, dict):
            return self._mapping(node, before, after, depth)
        if isinstance(node, SequenceNode) and not flow and isinstance(before, list) and isinstance(after, list):
            return self._sequence(node, before, after, depth)
        if isinstance(node, MappingNode | SequenceNode) and not flow:
            return False  # a block collection replaced wholesale: not a change the injector makes
        if flow and self._flow_added(node, before, after, depth):
            return True
        self._replace(node, after, depth)
        return True

    def _flow_added(self, node: Node, before: Any, after: Any, depth: int) -> bool:
        """Keys or items added to a flow collection on one line (`{app: "api"}`), written before its closing
        bracket, so every character of it stays as written (quotes, spacing); False where only rewriting
        it whole can do (a key removed, or a collection over several lines, where a comment may sit)."""
        brackets = self.text[node.start_mark.index] + self.text[node.end_mark.index - 1]
        one_line = node.start_mark.line == node.end_mark.line and brackets in ("{}", "[]")  # not `[k: v]`
        found = _flow_parts(node, before, after) if one_line else None
        if found is None:
            return False
        pairs, added = found
        edits = len(self.edits)
        if not all(self.diff(child, old, new, depth=depth + 1) for child, old, new in pairs):
            del self.edits[edits:]
            return False
        if added:
            close = node.end_mark.index - 1  # the closing bracket
            inside = self.text[node.start_mark.index + 1 : close].rstrip()
            separator = "" if not inside.strip() else " " if inside.endswith(",") else ", "
            at = node.start_mark.index + 1 + len(inside)
            self.edits.append(_Edit(at, at, depth, separator + added))
        return True

    def _mapping(self, node: MappingNode, before: dict[str, Any], after: dict[str, Any], depth: int) -> bool:
        old, new = list(before), list(after)
        if new[: len(old)] != old:
            return False  # a key removed or moved
        for key in old:
            child = _value_node(node, key)
            if child is None or not self.diff(child, before[key], after[key], depth=depth + 1):
                return False
        added = {key: after[key] for key in new[len(old) :]}
        if added:
            self._insert(node, self._block(dump(added, indent=self.indent), node.start_mark.column), depth)
        return True

    def _sequence(self, node: SequenceNode, before: list[Any], after: list[Any], depth: int) -> bool:
        if len(after) < len(before) or len(node.value) != len(before):
            return False
        for child, old, new in zip(node.value, before, after[: len(before)], strict=True):
            if not self.diff(child, old, new, depth=depth + 1):
                return False
        added = after[len(before) :]
        if added:
            # Dumped under a key, then moved left to where the dashes of this sequence stand.
            lines = dump({"_": added}, indent=self.indent).splitlines(keepends=True)[1:]
            items = "".join(line[self.indent.offset :] for line in lines)
            self._insert(node, self._block(items, node.start_mark.column), depth)
        return True

    def _insert(self, node: Node, block: str, depth: int) -> None:
        line = self._trailing_comments_end(self._last_line(node), column=node.start_mark.column) + 1
        if line < len(self.lines):
            self.edits.append(_Edit(self.starts[line], self.starts[line], depth, block))
        else:  # the document's last line: it may lack its line break
            end = len(self.text)
            self.edits.append(_Edit(end, end, depth, block if self.text.endswith("\n") else "\n" + block))

    def _last_line(self, node: Node) -> int:
        """The 0-based line where the node's own text ends (its end-of-line comment goes with it; the
        comment lines after it belong to what follows)."""
        while isinstance(node, MappingNode | SequenceNode) and not node.flow_style and node.value:
            last = node.value[-1]
            node = last[1] if isinstance(last, tuple) else last
        mark = node.end_mark
        line: int = mark.line if mark.column > 0 else mark.line - 1
        if isinstance(node, ScalarNode) and node.style in ("|", ">") and not self._keeps_trailing_lines(node):
            while line > node.start_mark.line and not self.lines[line].strip():
                line -= 1  # a clipped or stripped block scalar does not own the blank lines after it
        first: int = node.start_mark.line
        return max(line, first)

    def _trailing_comments_end(self, last: int, *, column: int) -> int:
        """The last line of the comments that trail the collection at `column` whose last line is `last`:
        those indented inside it (at or past its column) and deeper than the line after them. A comment
        as deep as the next line, or shallower than the collection, heads what follows."""
        following = next((self.lines[i] for i in range(last + 1, len(self.lines))
                          if self.lines[i].strip() and not self.lines[i].lstrip().startswith("#")), "")
        next_column = _column(following) if following.strip() not in ("---", "...") else 0
        for i in range(last + 1, len(self.lines)):
            text = self.lines[i]
            if not text.strip():
                continue
            if not text.lstrip().startswith("#") or not column <= _column(text) > next_column:
                break
            last = i
        return last

    def _keeps_trailing_lines(self, node: ScalarNode) -> bool:
        header = self.lines[node.start_mark.line][node.start_mark.column :]
        return bool(re.match(r"[|>][0-9]?\+", header))

    def _replace(self, node: Node, value: Any, depth: int) -> None:
        start, end = node.start_mark.index, node.end_mark.index
        inline = _inline(value)
        if start == end and start > 0 and self.text[start - 1] == ":":
            inline = " " + inline  # an empty value (`annotations:`) given one
        self.edits.append(_Edit(start, end, depth, inline))

    @staticmethod
    def _block(text: str, column: int) -> str:
        return "".join(" " * column + line if line.strip() else line for line in text.splitlines(keepends=True))


def _flow_parts(node: Node, before: Any, after: Any) -> tuple[list[tuple[Node, Any, Any]], str] | None:
    """A flow collection's kept children with their old and new values, and what is added to it as flow
    text without the brackets; None when something was removed or moved."""
    if isinstance(node, MappingNode) and isinstance(before, dict) and isinstance(after, dict):
        old = list(before)
        children = [_value_node(node, key) for key in old]
        if list(after)[: len(old)] != old or len(node.value) != len(old) or None in children:
            return None
        pairs = [(child, before[key], after[key]) for child, key in zip(children, old, strict=True) if child]
        return pairs, _inline({key: after[key] for key in list(after)[len(old) :]})[1:-1]
    if isinstance(node, SequenceNode) and isinstance(before, list) and isinstance(after, list):
        if len(after) < len(before) or len(node.value) != len(before):
            return None
        return list(zip(node.value, before, after[: len(before)], strict=True)), _inline(after[len(before) :])[1:-1]
    return None


def _inline(value: Any) -> str:
    """`value` as YAML on one line: a scalar, or a flow collection."""
    text = dump({"_": value}, indent=Indent(), flow=True).strip()
    return text[len("{_: ") : -1]


def guess_indent(text: str) -> Indent:
    """The indentation the source used, from its first nested mapping and its first block sequence."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    mapping = offset = None
    for parent, child in itertools.pairwise(lines):
        if not parent.rstrip().endswith(":"):
            continue
        key_column = _key_column(parent)
        column = len(child) - len(child.lstrip(" "))
        if child.lstrip().startswith("- ") and offset is None and column >= key_column:
            offset = column - key_column
        elif column > key_column and mapping is None and not child.lstrip().startswith("- "):
            mapping = column - key_column
        if mapping is not None and offset is not None:
            break
    return Indent(mapping=mapping or 2, offset=offset or 0)


def _column(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _key_column(line: str) -> int:
    """Where the key of `line` starts, past any sequence dashes (`  - name:` -> 4)."""
    match = re.match(r"^(\s*(?:-\s+)*)", line)
    return len(match.group(1)) if match else 0
