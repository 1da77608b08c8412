"""Offline injection into YAML manifests: the webhook's plan and patch, applied to pod templates.

The edge around the pure injector: YAML in, YAML out, through a round-trip YAML library (ruamel.yaml) so
that people can diff and commit the result. A document that needs no change is written back verbatim; a
changed one keeps its comments, key order, quoting and flow/block styles, and is re-indented the way
its source was (guessed from the text). The patch comes from the same plan_injection + patch_ops the
/mutate handler uses, applied with jsonpatch to the loaded document in place. `kind: List` documents
(`kubectl get -o yaml`) are injected item by item.
"""

from __future__ import annotations

import copy
import io
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import jsonpatch
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.events import DocumentEndEvent, DocumentStartEvent
from ruamel.yaml.scalarbool import ScalarBoolean

from app.injection import (
    TEMPLATE_PATHS,
    InjectionOptions,
    InjectionRefused,
    cronjob_pins,
    names,
    patch_ops,
    plan_injection,
    template_workload,
)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
# kubectl never nests Lists; a few levels cover hand-made ones, and the bound stops a crafted one.
MAX_LIST_DEPTH = 4
# A pod template is a few hundred nodes; YAML aliases can make a small file expand exponentially when
# read as plain data (the "billion laughs"), so the copy the planner reads stops at this many nodes.
MAX_TEMPLATE_NODES = 100_000
# The injected record is one JSON string: a wide line keeps it on one line, readable in a diff.
LINE_WIDTH = 4096


class ManifestError(ValueError):
    """The manifests cannot be read or a pod template cannot be injected; the message says which."""


@dataclass
class Injected:
    text: str
    warnings: list[str] = field(default_factory=list)


def manifest_files(location: Path) -> list[Path]:
    """A file as given, or every *.yaml, *.yml and *.json under a directory, recursively, sorted."""
    if not location.is_dir():
        return [location]
    return sorted(p for p in location.rglob("*") if p.suffix in MANIFEST_SUFFIXES and p.is_file())


def inject_manifests(
    text: str, *, options: InjectionOptions, ca_fingerprints: Sequence[str] = (), include_unlabelled: bool = False
) -> Injected:
    """Every pod template in the multi-document `text`, injected as the webhook would inject its pods.

    Only templates labelled `tls-injector.io/inject: "true"` are injected, as the webhook's object selector
    would pick their pods; `include_unlabelled` acts as if the namespace were opted in (all but "false").
    """
    result = Injected("")
    prefix, documents = _documents(text)
    enabled = _enabled_namespaces(document for _, document in documents)
    run = _Run(options, ca_fingerprints, include_unlabelled, result.warnings, enabled)
    parts = []
    for segment, document in documents:
        if _inject_node(document, run, depth=0):
            parts.append(_dump(document, layout=_layout(segment)))
        elif segment.strip():
            parts.append(segment.strip("\n") + "\n")
    result.text = prefix + "---\n".join(parts)
    return result


def _yaml() -> YAML:
    loader = YAML(typ="rt")
    loader.preserve_quotes = True
    loader.width = LINE_WIDTH
    # `ports: [{containerPort: 80}]` stays so, rather than the equivalent but unfamiliar `[containerPort: 80]`.
    loader.brace_single_entry_mapping_in_flow_sequence = True
    return loader


def _documents(text: str) -> tuple[str, list[tuple[str, Any]]]:
    """(text before the first `---`, e.g. a header comment; [(source text, loaded document)])."""
    try:
        documents = list(_yaml().load_all(text))
        prefix, segments = _segments(text)
        return prefix, list(zip(segments, documents, strict=True))
    except YAMLError as error:
        raise ManifestError(f"not valid YAML: {error}") from None
    except RecursionError:
        raise ManifestError("not usable YAML: nested too deeply") from None


def _segments(text: str) -> tuple[str, list[str]]:
    """The source text of each document, without its `---` / `...` markers."""
    prefix, segments, start = "", list[str](), 0
    for event in _yaml().parse(text):
        if isinstance(event, DocumentStartEvent) and event.explicit:
            if not segments and not prefix:
                prefix = text[: event.start_mark.index] if text[: event.start_mark.index].strip() else ""
            start = event.end_mark.index
        elif isinstance(event, DocumentEndEvent):
            segments.append(text[start : event.start_mark.index])
            start = event.end_mark.index
    return prefix, segments


@dataclass(frozen=True)
class _Run:
    options: InjectionOptions
    cas: Sequence[str]
    include_unlabelled: bool
    warnings: list[str]
    enabled_namespaces: frozenset[str] = frozenset()


def _inject_node(document: Any, run: _Run, *, depth: int) -> bool:
    """Inject `document` in place; True when it changed (a List: when any item changed)."""
    if not isinstance(document, Mapping):
        return False
    kind = document.get("kind")
    if kind == "List" and isinstance(document.get("items"), list):
        if depth >= MAX_LIST_DEPTH:
            raise ManifestError(f"a List nested more than {MAX_LIST_DEPTH} deep")
        changed = [_inject_node(item, run, depth=depth + 1) for item in document["items"]]
        return any(changed)
    return isinstance(kind, str) and kind in TEMPLATE_PATHS and _inject_workload(document, kind, run)


def _inject_workload(document: Mapping[str, Any], kind: str, run: _Run) -> bool:
    name = str((document.get("metadata") or {}).get("name") or "")
    template = _template(document, TEMPLATE_PATHS[kind])
    if template is None:
        return False
    plain = _plain(template, budget=[MAX_TEMPLATE_NODES], where=f"{kind} {name!r}")
    namespace = _dict(document.get("metadata")).get("namespace")
    if not _selected(plain, run.include_unlabelled or namespace in run.enabled_namespaces):
        return False
    metadata = _dict(plain.get("metadata"))
    # A CronJob's pods belong to one Job per run, so the template is pinned to the CronJob's Secret
    # and services exactly as /mutate pins each run's Job when it is created.
    pins = cronjob_pins(name, _dict(metadata.get("annotations"))) if kind == "CronJob" else {}
    try:
        plan = plan_injection(plain, options=run.options, ca_fingerprints=run.cas,
                              workload=template_workload(kind, name, metadata), pins=pins)
    except InjectionRefused as refusal:
        raise ManifestError(f"{kind} {name!r}: {refusal}") from None
    run.warnings.extend(f"{kind} {name!r}: {warning}" for warning in plan.warnings)
    if plan.changes_nothing:
        return False
    # Copies: a value inserted twice would be written as a YAML anchor and alias.
    jsonpatch.apply_patch(template, copy.deepcopy(patch_ops(plan)), in_place=True)
    return True


def _template(document: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = document
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


def _plain(node: Any, *, budget: list[int], where: str) -> Any:
    """The loaded YAML as the JSON-like data the planner takes (what Kubernetes itself would see)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ManifestError(f"{where}: pod template larger than {MAX_TEMPLATE_NODES} nodes")
    if isinstance(node, Mapping):
        return {str(k): _plain(v, budget=budget, where=where) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v, budget=budget, where=where) for v in node]
    return _scalar(node)


def _scalar(node: Any) -> Any:
    if node is None or isinstance(node, bool):
        return node
    if isinstance(node, ScalarBoolean):  # an anchored true/false: an int subclass in ruamel
        return bool(node)
    if isinstance(node, date):  # Kubernetes reads YAML as JSON: an unquoted date is a string there
        return node.isoformat()
    # ruamel's scalar subclasses (quoted strings, hex ints, ...) as the plain values they stand for.
    plain = next((t for t in (str, int, float) if isinstance(node, t)), str)
    return plain(node)


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _enabled_namespaces(documents: Iterable[Any]) -> frozenset[str]:
    """Namespaces the input itself labels `tls-injector.io/inject: enabled`: `kubectl apply` creates a
    Namespace before what lives in it, so the webhook meets those pods in an opted-in namespace."""
    enabled = set()
    for document in documents:
        if isinstance(document, Mapping) and document.get("kind") == "Namespace":
            metadata = _dict(document.get("metadata"))
            labels = metadata.get("labels")
            if isinstance(labels, Mapping) and labels.get(names.INJECT_LABEL) == names.NAMESPACE_OPT_IN:
                enabled.add(str(metadata.get("name")))
    return frozenset(enabled)


def _selected(template: Mapping[str, Any], include_unlabelled: bool) -> bool:
    labels = (template.get("metadata") or {}).get("labels") or {}
    value = labels.get(names.INJECT_LABEL) if isinstance(labels, dict) else None
    return value == names.POD_OPT_IN or (include_unlabelled and value != names.POD_OPT_OUT)


@dataclass(frozen=True)
class Layout:
    mapping: int = 2  # a nested key's indent below its parent key
    offset: int = 0  # a sequence dash's indent below its parent key ("containers:\n- name" is 0)


def _layout(text: str) -> Layout:
    """The indentation the source used, from its first nested mapping and its first block sequence."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    mapping = offset = None
    for parent, child in itertools.pairwise(lines):
        if not parent.rstrip().endswith(":"):
            continue
        key_column = _key_column(parent)
        indent = len(child) - len(child.lstrip(" "))
        if child.lstrip().startswith("- ") and offset is None and indent >= key_column:
            offset = indent - key_column
        elif indent > key_column and mapping is None and not child.lstrip().startswith("- "):
            mapping = indent - key_column
        if mapping is not None and offset is not None:
            break
    return Layout(mapping=mapping or 2, offset=offset or 0)


def _key_column(line: str) -> int:
    """Where the key of `line` starts, past any sequence dashes (`  - name:` -> 4)."""
    match = re.match(r"^(\s*(?:-\s+)*)", line)
    return len(match.group(1)) if match else 0


def _dump(document: Any, *, layout: Layout) -> str:
    dumper = _yaml()
    # ruamel's `sequence` is where an item's content starts: the dash, then one space.
    dumper.indent(mapping=layout.mapping, sequence=layout.offset + 2, offset=layout.offset)
    out = io.StringIO()
    dumper.dump(document, out)
    return out.getvalue()


def read_texts(locations: Iterable[str], stdin: io.TextIOBase | Any) -> list[tuple[str, str]]:
    """(name, text) of every file behind `locations` (files, directories, or - for stdin), in order."""
    texts: list[tuple[str, str]] = []
    for location in locations:
        if location == "-":
            texts.append(("<stdin>", stdin.read()))
            continue
        for path in manifest_files(Path(location)):
            try:
                texts.append((str(path), path.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError) as error:
                raise ManifestError(f"{path}: cannot read: {error}") from None
    return texts
