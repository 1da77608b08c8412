"""/validate's answer from the few values its rules read, without building the two objects.

An UPDATE review carries the object twice (object and oldObject): a Deployment's is ~8.5 KB, and the
full decode built all of it (~23 us) to hand the rules one small value from each, the pod template's
metadata. Here the review is decoded against a schema made from the rule set's `self` paths (msgspec):
each object is walked only along those paths, the value at the end of each stays the JSON text it
arrived as, and everything else is skipped unbuilt. `judge_texts` then finds the rules' results for
those texts in the memo, or decodes just them and judges as `judge` does.

This path only ever answers what the full path (parse_review, then the handler) would answer the same:
- it takes a review only when it decodes as app.admission.quick decodes (which leaves every body the full
  decode would refuse to the full path) and passes parse_review's checks on the same values; a field on a
  rule's path that is neither an object nor null (`"spec": 5`) fails the schema and goes the full way;
- a step that is absent or null is absent here too, as `get_path` finds it;
- it answers only an allowed update (and every other operation, which is allowed unjudged): a denial
  takes the full path, which names the changes in its message.
A path below another one's (`spec` and `spec.template.metadata`, the whole object and any path) is
read from that one's text, decoded once more for it.
"""

from __future__ import annotations

import itertools
from typing import Any, Optional

import msgspec

from app.admission import AdmissionResponse, allowed
from app.admission.quick import Envelope, Kind, decode, well_formed
from app.admission.review import GroupVersionKind
from app.rules.judge import judge_texts
from app.rules.model import RuleSet
from app.rules.paths import Path

_ABSENT = msgspec.Raw(b"")


class QuickValidate:
    def __init__(self, rule_set: RuleSet) -> None:
        self.rule_set = rule_set
        self._reader = _Reader(frozenset(rule.self_path for rule in rule_set))
        self._decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_review_type(self._reader.type))

    def answer(self, body: bytes) -> tuple[Envelope, AdmissionResponse] | None:
        """The full path's answer to `body` when this path may give it; None otherwise."""
        review = decode(self._decoder, body)
        if review is None:
            return None
        request = review.request
        kind = request.kind
        if not well_formed(review.apiVersion, review.kind, request):
            return None
        new, old = self._reader.top(request.object), self._reader.top(request.oldObject)
        if new is _NOT_AN_OBJECT or old is _NOT_AN_OBJECT:
            return None  # the full path's 400
        if request.operation != "UPDATE" or new is None or old is None:
            response = allowed(request.uid)
        else:
            gvk = GroupVersionKind(group=kind.group, version=kind.version, kind=kind.kind)
            verdict = judge_texts(self.rule_set, gvk, lambda path: self._texts(old, new, path))
            if verdict is None:
                return None
            response = allowed(request.uid, warnings=verdict.warnings)
        envelope = Envelope(request.uid, kind.kind, request.namespace or "", request.name or "", request.operation,
                            bool(request.dryRun))
        return envelope, response

    def _texts(self, old: object, new: object, path: Path) -> tuple[bytes, bytes] | None:
        old_text, new_text = self._reader.text(old, path), self._reader.text(new, path)
        return None if old_text is None or new_text is None else (old_text, new_text)


_NOT_AN_OBJECT = object()
Steps = dict[Path, tuple[str, ...]]


class _Reader:
    """The JSON text at each of `paths` in an object decoded as `type`: b"" where the path is absent (a
    step missing, null or not an object, as `get_path` finds), None where only the full decode can tell.

    The paths that are not below another one form a schema (a struct per step, the text of the value at
    each path's end kept raw); a path below another is read from that one's text, decoded again with a
    schema of its own. The empty path (a rule on the whole object) keeps the whole object's text."""

    def __init__(self, paths: frozenset[Path]) -> None:
        self.whole = () in paths
        self.type: Any = msgspec.Raw
        self.steps: Steps = {}
        self.outer: dict[Path, Path] = {}  # each path -> the path (not below another) it is read from
        self.below: dict[Path, tuple[_Reader, msgspec.json.Decoder[Any]]] = {}
        if self.whole:
            self._below((), paths - {()})
            return
        outer = {p for p in paths if not any(p[:i] in paths for i in range(1, len(p)))}
        self.type, self.steps = _schema(outer)
        for prefix in outer:
            self._below(prefix, frozenset(q[len(prefix):] for q in paths if len(q) > len(prefix)
                                          and q[:len(prefix)] == prefix))
        self.outer = {q: p for q in paths for p in outer if q[:len(p)] == p}

    def _below(self, prefix: Path, rest: frozenset[Path]) -> None:
        if rest:
            reader = _Reader(rest)
            self.below[prefix] = (reader, msgspec.json.Decoder(Optional[reader.type]))  # noqa: UP045

    def top(self, obj: Any) -> Any:
        """The request's object as this reader holds it: None for null; _NOT_AN_OBJECT for what the full
        path refuses (the schema itself refuses it unless the object is kept whole)."""
        if not self.whole or obj is None:
            return obj
        text = bytes(obj)
        return None if text == b"null" else obj if text.startswith(b"{") else _NOT_AN_OBJECT

    def text(self, obj: Any, path: Path) -> bytes | None:
        prefix: Path
        if self.whole:
            prefix, node = (), obj
        else:
            prefix, node = self.outer[path], obj
            for step in self.steps[prefix]:
                node = getattr(node, step)
                if node is None:  # absent or null on the way
                    return b""
        text = bytes(node)
        if path == prefix:
            return text
        if not text.startswith(b"{"):  # absent, null or not an object: nothing below
            return b""
        reader, decoder = self.below[prefix]
        try:
            inner = decoder.decode(text)
        except (msgspec.DecodeError, RecursionError):  # a step below is neither an object nor null; or
            return None  # nesting the first decode took just within the recursion limit, from a deeper stack
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
                fields.append((attribute, Optional[inner], None))  # noqa: UP045  # a type made at runtime
                steps.update({(key, *path): (attribute, *rest) for path, rest in inner_steps.items()})
        return msgspec.defstruct(f"Level{next(numbers)}", fields, rename=rename), steps

    return build(tree)


def _review_type(obj: Any) -> type:
    """An AdmissionReview whose object and oldObject are read along the rules' paths only."""
    # A raw value takes null as its text (msgspec has no optional raw): `_Reader.top` reads it as None.
    field = (msgspec.Raw, msgspec.Raw(b"null")) if obj is msgspec.Raw else (Optional[obj], None)  # noqa: UP045
    request = msgspec.defstruct("Request", [
        ("uid", str), ("kind", Kind), ("operation", str), ("object", *field), ("oldObject", *field),
        ("namespace", Optional[str], None), ("name", Optional[str], None),  # noqa: UP045
        ("dryRun", Optional[bool], None),  # noqa: UP045
    ])
    review: type = msgspec.defstruct("Review", [("apiVersion", str), ("kind", str), ("request", request)])
    return review
