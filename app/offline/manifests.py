"""The one reader of manifests, shared by `inject` and `check`.

Input: files of one or more YAML documents or of one JSON value, directories of them (their *.yaml,
*.yml and *.json, recursively, in sorted order), `-` for stdin. A document holds a Kubernetes object
or a `kind: List` of them (as `kubectl get -o yaml` writes it, followed a few levels deep). The gates
that keep a broken pipeline from passing on nothing are here too: a document that is not a Kubernetes
object is an error naming the file and the document's index, and so is a location that holds no
object at all (an empty file: a failed `helm template`) unless the caller allows it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from ruamel.yaml.nodes import Node

from tls_injector import names
from tls_injector.offline.errors import InputError
from tls_injector.offline.files import STDIN, manifest_files, read_stdin, read_text
from tls_injector.offline.yamltext import load_all

# kubectl never nests Lists; a few levels cover hand-made ones, and the bound stops a crafted one.
MAX_LIST_DEPTH = 4
Path_ = tuple[str | int, ...]  # where an object sits in its document: () or ("items", 0, ...)


@dataclass(frozen=True)
class Document:
    index: int  # 1-based, counted as the YAML parser counts documents (empty ones included)
    text: str  # the document's own source text, without its `---` / `...` markers
    start: int  # where that text starts in its source's
    data: Any  # as loaded: ruamel's round-trip types for YAML, plain values for JSON
    node: Node | None = None  # YAML: the composed node, its marks in the whole source's text

    def where(self, source: str) -> str:
        return f"{source}: document {self.index}"


@dataclass(frozen=True)
class Source:
    name: str  # the file's path, or <stdin>
    text: str
    format: Literal["yaml", "json"]
    documents: tuple[Document, ...]


@dataclass(frozen=True)
class Object:
    """One Kubernetes object of the input and where it came from."""

    where: str  # `FILE: document N` or `FILE: document N items[i]`, for messages
    path: Path_  # inside its document's data
    data: Mapping[str, Any]


def read_locations(locations: Sequence[str], stdin: TextIO, *, allow_empty: bool = False,
                   done: Callable[[int], object] = lambda _: None) -> list[Source]:
    """Every source behind `locations`, in order; an InputError for one that holds no Kubernetes
    object (unless `allow_empty`) or that holds a document that is not one. `done(1)` per document read."""
    sources = []
    for location in locations:
        found = read_location(location, stdin, done=done)
        if not allow_empty and not any(True for source in found for _ in objects(source)):
            name = STDIN if location == "-" else location
            raise InputError(f"{name}: no Kubernetes object in it (--allow-empty accepts empty input)")
        sources += found
    return sources


def read_each(locations: Sequence[str], stdin: TextIO, *, allow_empty: bool = False,
              done: Callable[[int], object] = lambda _: None) -> tuple[list[Source], list[str]]:
    """As read_locations, but going on past a bad file: every source that could be read, and one line
    for each file that could not (or location that holds no object, unless `allow_empty`)."""
    sources: list[Source] = []
    errors: list[str] = []
    for location in locations:
        found, failed = [], len(errors)
        for name, text in _readers(location, stdin):
            try:
                found.append(read_source(name, text(), done=done))
            except InputError as error:
                errors.append(str(error))
        if not allow_empty and len(errors) == failed and not any(True for s in found for _ in objects(s)):
            errors.append(f"{STDIN if location == '-' else location}: no Kubernetes object in it (--allow-empty "
                          "accepts empty input)")
            continue  # nothing of it printed: a failed `helm template` leaves nothing to pass along
        sources += found
    return sources, errors


def _readers(location: str, stdin: TextIO) -> list[tuple[str, Callable[[], str]]]:
    """(name, read its text) for each file behind `location`, nothing read yet."""
    if location == "-":
        return [(STDIN, functools.partial(read_stdin, stdin))]
    return [(str(path), functools.partial(read_text, path)) for path in manifest_files(Path(location))]


def read_location(location: str, stdin: TextIO, *, done: Callable[[int], object] = lambda _: None) -> list[Source]:
    if location == "-":
        return [read_source(STDIN, read_stdin(stdin), done=done)]
    return [read_source(str(path), read_text(path), done=done) for path in manifest_files(Path(location))]


def read_source(name: str, text: str, *, done: Callable[[int], object] = lambda _: None) -> Source:
    value = _json(name, text)
    if value is not None:
        done(1)
        source = Source(name, text, "json", (Document(1, text, 0, value[0]),))
    else:
        found = tuple(Document(i, text[loaded.start : loaded.end], loaded.start, loaded.data, loaded.node)
                      for i, loaded in enumerate(load_all(text, source=name, done=done), start=1))
        source = Source(name, text, "yaml", found)
    for _ in objects(source):  # the gate: every document an object, before anything is done with them
        pass
    return source


def _json(name: str, text: str) -> tuple[Any] | None:
    """(the value,) when the text is JSON: a *.json file must be; other input is when it parses as JSON."""
    must = name.endswith(".json")
    if not must and not text.lstrip().startswith(("{", "[")):
        return None
    try:
        return (json.loads(text),)
    except json.JSONDecodeError as error:
        if must:
            raise InputError(f"{name}:{error.lineno}:{error.colno}: not valid JSON: {error.msg}") from None
        return None  # flow-style YAML, read as YAML
    except RecursionError:
        raise InputError(f"{name}: not usable JSON: nested too deeply") from None


def objects(source: Source) -> Iterator[Object]:
    """Every Kubernetes object of `source`, `kind: List` items one by one; an empty document is skipped
    (kubectl skips it too), any other document that is not an object is an InputError."""
    for document in source.documents:
        if document.data is not None:
            yield from document_objects(document.data, where=document.where(source.name))


def document_objects(data: Any, *, where: str, path: Path_ = (), depth: int = 0) -> Iterator[Object]:
    if not isinstance(data, Mapping):
        raise InputError(f"{where}: expected a Kubernetes object, got {_what(data)}")
    api_version, kind, items = data.get("apiVersion"), data.get("kind"), data.get("items")
    if kind != "List" or not isinstance(items, list):  # a List is read by its kind and items alone
        if not (isinstance(api_version, str) and api_version and isinstance(kind, str) and kind):
            raise InputError(f"{where}: not a Kubernetes object: it needs string apiVersion and kind")
        yield Object(where, path, data)
        return
    if depth >= MAX_LIST_DEPTH:
        raise InputError(f"{where}: a List nested more than {MAX_LIST_DEPTH} deep")
    for i, item in enumerate(items):
        yield from document_objects(item, where=f"{where} items[{i}]", path=(*path, "items", i), depth=depth + 1)


def _what(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a string" if isinstance(value, str) else f"a {type(value).__name__}"


def enabled_namespaces(found: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Namespaces the input itself labels `tls-injector.io/inject: enabled`: `kubectl apply` creates a
    Namespace before what lives in it, so the webhook meets those objects in an opted-in namespace."""
    enabled = set()
    for obj in found:
        metadata = obj.get("metadata")
        if obj.get("kind") != "Namespace" or not isinstance(metadata, Mapping):
            continue
        labels = metadata.get("labels")
        if isinstance(labels, Mapping) and labels.get(names.INJECT_LABEL) == names.NAMESPACE_OPT_IN:
            enabled.add(str(metadata.get("name")))
    return frozenset(enabled)
