"""YAML as the offline tools read and write it: ruamel.yaml, round-trip, errors in one line.

Round-trip (comments, key order, quoting and styles kept) so that `inject` can write back what it read.
Values are read as Kubernetes reads YAML, converted to JSON: an unquoted 2030-01-01 stays the string it
is written as (ruamel's timestamp type would be no JSON value, nor a CEL one), and `plain` turns the
round-trip types into the dicts, lists, strings, numbers and booleans the pure core takes.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.composer import Composer
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import DocumentEndEvent, DocumentStartEvent
from ruamel.yaml.nodes import Node, ScalarNode
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.scalarbool import ScalarBoolean

from tls_injector.offline.errors import InputError

# Written values stay on one line (the injected record is one JSON string), readable in a diff.
LINE_WIDTH = 4096
TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class Timestamp(str):
    """An unquoted timestamp (`2030-01-01`) as its own text, written back unquoted."""

    __slots__ = ()


def _construct_timestamp(constructor: RoundTripConstructor, node: ScalarNode) -> Timestamp:
    return Timestamp(constructor.construct_scalar(node))


def _represent_timestamp(representer: RoundTripRepresenter, data: Timestamp) -> Node:
    return representer.represent_scalar(TIMESTAMP_TAG, str(data))


class _Constructor(RoundTripConstructor):
    pass


class _Representer(RoundTripRepresenter):
    pass


_Constructor.add_constructor(TIMESTAMP_TAG, _construct_timestamp)
_Representer.add_representer(Timestamp, _represent_timestamp)


def round_trip() -> YAML:
    yaml = YAML(typ="rt")
    yaml.Constructor = _Constructor
    yaml.Representer = _Representer
    yaml.preserve_quotes = True
    yaml.width = LINE_WIDTH
    # `ports: [{containerPort: 80}]` stays so, rather than the equivalent but unfamiliar `[containerPort: 80]`.
    yaml.brace_single_entry_mapping_in_flow_sequence = True
    return yaml


@dataclass(frozen=True)
class Indent:
    mapping: int = 2  # a nested key's indent below its parent key
    offset: int = 0  # a sequence dash's indent below its parent key ("containers:\n- name" is 0)


def dump(data: Any, *, indent: Indent = Indent(), flow: bool = False) -> str:
    """`data` as YAML, indented as given; in block style, or with `flow` in flow style."""
    yaml = round_trip()
    yaml.default_flow_style = flow
    # ruamel's `sequence` is where an item's content starts: the dash, then one space.
    yaml.indent(mapping=indent.mapping, sequence=indent.offset + 2, offset=indent.offset)
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def dump_all(documents: list[Any], *, width: int = 120) -> str:
    """Documents as a `---`-separated block YAML stream, in the key order given."""
    yaml = round_trip()
    yaml.width = width
    out = io.StringIO()
    yaml.dump_all(documents, out)
    return out.getvalue()


@dataclass(frozen=True)
class Loaded:
    """One document of a YAML stream: where its text is (markers left out), its node and its data."""

    start: int
    end: int
    node: Node | None  # positions (marks) in the whole stream's text; None for an empty document
    data: Any  # ruamel's round-trip types


class _Composer(Composer):
    """The composer that also remembers each document's node and where its text starts and ends."""

    def __init__(self, loader: Any = None) -> None:
        super().__init__(loader)
        self.seen: list[tuple[DocumentStartEvent, Node | None, DocumentEndEvent]] = []

    def compose_document(self) -> Any:
        self.anchors = {}
        start = self.parser.get_event()
        node = self.compose_node(None, None)
        end = self.parser.get_event()
        self.seen.append((start, node, end))
        return node


def load_all(text: str, *, source: str, done: Callable[[int], object] = lambda _: None) -> list[Loaded]:
    """Every document of `text`, read in one pass; `done(1)` after each."""
    yaml = round_trip()
    yaml.Composer = _Composer
    data = []
    with errors_named(source):
        for document in yaml.load_all(text):
            data.append(document)
            done(1)
    documents, cursor = [], 0
    for (start, node, end), value in zip(yaml.composer.seen, data, strict=True):
        if start.explicit:
            cursor = start.end_mark.index
        documents.append(Loaded(cursor, end.start_mark.index, node, value))
        cursor = end.end_mark.index
    return documents


@contextmanager
def errors_named(source: str) -> Iterator[None]:
    """YAML errors as one InputError line: `FILE:LINE:COL: reason` (never ruamel's several lines)."""
    try:
        yield
    except YAMLError as error:
        raise InputError(describe(error, source)) from None
    except RecursionError:  # the parser nests recursively: a crafted `[[[[...` ends here
        raise InputError(f"{source}: not usable YAML: nested too deeply") from None


def describe(error: YAMLError, source: str) -> str:
    if not isinstance(error, MarkedYAMLError) or error.problem_mark is None:
        return f"{source}: not valid YAML: {' '.join(str(error).split())}"
    mark = error.problem_mark
    reason = " ".join(str(error.problem or "not valid YAML").split())
    if error.context and error.context_mark is not None and error.context_mark.line != mark.line:
        reason += f" ({' '.join(str(error.context).split())} at line {error.context_mark.line + 1})"
    return f"{source}:{mark.line + 1}:{mark.column + 1}: {reason}"


def plain(node: Any, *, budget: int, where: str) -> Any:
    """The loaded YAML as the JSON-like data Kubernetes itself would see (and the pure core takes).

    YAML aliases can make a small file stand for billions of nodes (the "billion laughs"), so the
    copy stops after `budget` nodes with an InputError.
    """
    left = [budget]

    def convert(value: Any) -> Any:
        left[0] -= 1
        if left[0] < 0:
            raise InputError(f"{where}: larger than {budget} nodes (YAML aliases expanded)")
        if isinstance(value, Mapping):
            return {str(k): convert(v) for k, v in value.items()}
        if isinstance(value, list):
            return [convert(v) for v in value]
        return scalar(value)

    try:
        return convert(node)
    except RecursionError:  # deeper than any object the apiserver would take (it stops JSON at 10,000 levels)
        raise InputError(f"{where}: nested too deeply") from None


def scalar(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, ScalarBoolean):  # an anchored true/false: an int subclass in ruamel
        return bool(value)
    # ruamel's scalar subclasses (quoted strings, hex ints, ...) as the plain values they stand for.
    kind = next((t for t in (str, int, float) if isinstance(value, t)), str)
    return kind(value)
