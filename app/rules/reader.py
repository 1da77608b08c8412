"""What /validate reads of a review: the JSON text at each rule's `self` path, decoded once at the edge.

An UPDATE review carries the object twice (object and oldObject): a Deployment's is ~8.5 KB, and the
rules read one small value of each, the pod template's metadata. The review is decoded against a schema
made from the rule set's `self` paths (msgspec): each object is walked only along those paths, the value
at the end of each stays the JSON text it arrived as, and everything else is skipped unbuilt. The rules
then find their results for those texts in their memo, or decode just them (`judge_texts`).

As `get_path` finds a value: a step that is absent, null or not an object (`"spec": 5`) makes the path
absent. A path below another one's (`spec` and `spec.template.metadata`, the whole object and any
path) is read from that one's text, decoded once more for it (only for such rule sets).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from typing import Any, Optional, Union

import msgspec

from tls_injector.admission import BadReview, Request
from tls_injector.rules.paths import Path

_ABSENT = msgspec.Raw(b"")


Steps = dict[Path, tuple[str, ...]]


class Reader:
    """The JSON text at each of `paths` in an object decoded as `type`: b"" where the path is absent (a
    step missing, null or not an object, as `get_path` finds).

    The paths that are not below another one form a schema (a struct per step, the text of the value at
    each path's end kept raw); a path below another is read from that one's text, decoded again with a
    schema of its own. The empty path (a rule on the whole object) keeps the whole object's text."""

    def __init__(self, paths: frozenset[Path]) -> None:
        self.whole = () in paths
        self.type: Any = msgspec.Raw
        self.steps: Steps = {}
        self.getters: dict[Path, Callable[[Any], Any]] = {}  # per path not below another: its steps in one call
        self.outer: dict[Path, Path] = {}  # each path -> the path (not below another) it is read from
        self.below: dict[Path, tuple[Reader, msgspec.json.Decoder[Any]]] = {}
        if self.whole:
            self._below((), paths - {()})
            return
        outer = {p for p in paths if not any(p[:i] in paths for i in range(1, len(p)))}
        self.type, self.steps = _schema(outer)
        self.getters = {path: operator.attrgetter(".".join(steps)) for path, steps in self.steps.items()}
        for prefix in outer:
            self._below(prefix, frozenset(q[len(prefix):] for q in paths if len(q) > len(prefix)
                                          and q[:len(prefix)] == prefix))
        self.outer = {q: p for q in paths for p in outer if q[:len(p)] == p}

    def _below(self, prefix: Path, rest: frozenset[Path]) -> None:
        if rest:
            reader = Reader(rest)
            self.below[prefix] = (reader, msgspec.json.Decoder(Optional[reader.type]))  # noqa: UP045

    def top(self, obj: Any, field: str) -> Any:
        """The request's object as this reader holds it, None for null. Kept whole (a rule on the whole
        object), it is raw text, which must be an object (the schema checks it otherwise)."""
        if not self.whole or obj is None:
            return obj
        text = bytes(obj)
        if text == b"null":
            return None
        if not text.startswith(b"{"):
            raise BadReview(f"not a valid AdmissionReview: request.{field} must be an object or null")
        return obj

    def text(self, obj: Any, path: Path) -> bytes:
        prefix: Path
        if self.whole:
            prefix, node = (), obj
        else:
            prefix = self.outer[path]
            # The steps' attributes in one C call: 8.8k -> 5.6k instructions a read (cachegrind), against a loop here.
            # A step absent, null or not an object is None, a list or a scalar, none of which has
            # an attribute named like a struct's field (f0, f1, ...): the path is absent.
            try:
                node = self.getters[prefix](obj)
            except AttributeError:
                return b""
        text = bytes(node)
        if path is prefix or path == prefix:
            return text
        if not text.startswith(b"{"):  # absent, null or not an object: nothing below
            return b""
        reader, decoder = self.below[prefix]
        try:
            inner = decoder.decode(text)
        except RecursionError:  # nesting the first decode took just within the limit, from a deeper stack
            raise BadReview("invalid JSON: nested too deeply") from None
        return reader.text(inner, path[len(prefix):])


def _schema(paths: set[Path]) -> tuple[type, Steps]:
    """A struct per step of `paths` (none below another, none empty), and each path's attributes."""
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        for segment in path[:-1]:
            node = node.setdefault(segment, {})
        node[path[-1]] = None
    numbers = itertools.count()

    def build(node: dict[str, Any]) -> tuple[type, Steps]:
        fields: list[tuple[str, Any, Any]] = []
        rename: dict[str, str] = {}
        steps: Steps = {}
        for key, child in node.items():
            attribute = f"f{next(numbers)}"  # keys are any text (label keys: dots, slashes); names are not
            rename[attribute] = key
            if child is None:
                fields.append((attribute, msgspec.Raw, _ABSENT))
                steps[(key,)] = (attribute,)
            else:
                inner, inner_steps = build(child)
                # Any value at all, as `get_path` walks it: only an object goes on (arrays kept unbuilt).
                step = Union[inner, list[msgspec.Raw], str, int, float, bool, None]  # type: ignore[valid-type]  # noqa: UP007  # made at runtime
                fields.append((attribute, step, None))
                steps.update({(key, *path): (attribute, *rest) for path, rest in inner_steps.items()})
        return msgspec.defstruct(f"Level{next(numbers)}", fields, rename=rename), steps

    return build(tree)


def request_type(obj: Any) -> type:
    """A request whose object and oldObject are read along the rules' paths only."""
    # A raw value takes null as its text (msgspec has no optional raw): `Reader.top` reads it as None.
    field = (msgspec.Raw, msgspec.Raw(b"null")) if obj is msgspec.Raw else (Optional[obj], None)  # noqa: UP045
    request: type = msgspec.defstruct("ValidateRequest", [("object", *field), ("oldObject", *field)],
                                      bases=(Request,), kw_only=True)
    return request
