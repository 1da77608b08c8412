"""`inject` offline: the webhook's plan and patch, applied to the pod templates of manifests.

The edge around the pure injector. Every pod template of a Pod, Deployment, StatefulSet, DaemonSet,
ReplicaSet, Job or CronJob (in `kind: List` items too) goes through the same plan_injection + patch_ops
as /mutate. The output is the input with only what was added: a document that needs no change is
written back byte for byte, a changed YAML one as its source text with the added lines inserted
(app/offline/splice.py), so comments stay where they were; JSON comes out as JSON, indented as it came.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from tls_injector import names
from tls_injector.injection import (
    TEMPLATE_PATHS,
    InjectionOptions,
    InjectionRefused,
    cronjob_pins,
    patch_ops,
    plan_pod,
    template_workload,
)
from tls_injector.injection.profile import profile_lines
from tls_injector.offline.errors import InputError
from tls_injector.offline.manifests import Document, Source, document_objects, enabled_namespaces, objects, read_source
from tls_injector.offline.splice import Change, Splicer, guess_indent
from tls_injector.offline.yamltext import dump, plain

# A pod template is a few hundred nodes; YAML aliases can make a small file expand exponentially when
# read as plain data (the "billion laughs"), so the copy the planner reads stops at this many nodes.
MAX_TEMPLATE_NODES = 100_000


@dataclass
class Injected:
    text: str = ""
    warnings: list[str] = field(default_factory=list)
    # One line per file that could not be read or injected, which is left out of `text`; the rest goes on.
    errors: list[str] = field(default_factory=list)
    templates: int = 0  # pod templates met in the files injected
    opted_in: int = 0  # of them, those selected (labelled, or in an opted-in namespace, or --all)


@dataclass(frozen=True)
class _Run:
    options: InjectionOptions
    cas: Sequence[str]
    include_unlabelled: bool
    enabled: frozenset[str]
    result: Injected


def inject(sources: Sequence[Source], *, options: InjectionOptions, ca_fingerprints: Sequence[str] = (),
           include_unlabelled: bool = False, done: Callable[[int], object] = lambda _: None) -> Injected:
    """Every source injected, as one stream: YAML sources joined by `---`, JSON ones by a line break when
    every source is JSON. Only templates labelled `tls-injector.io/inject: "true"` are injected, as the
    webhook's object selector would pick their pods; `include_unlabelled`, or a Namespace the input
    labels enabled, acts as an opted-in namespace (all but "false"). `done(n)` after n documents."""
    result = Injected()
    enabled = enabled_namespaces(obj.data for source in sources for obj in objects(source))
    run = _Run(options, ca_fingerprints, include_unlabelled, enabled, result)
    texts = [_inject_or_report(source, run, done) for source in sources]
    all_json = all(source.format == "json" for source in sources)
    result.text = "".join(_joined(texts, separator="" if all_json else "---\n"))
    return result


def _inject_or_report(source: Source, run: _Run, done: Callable[[int], object]) -> str:
    """The source injected, or (a template refused, say) nothing, its one-line error kept for the end:
    one bad file among many must not hide the problems of the others, nor stop them being injected. Its
    counts and warnings count only when the whole file was injected."""
    counts, warnings = (run.result.templates, run.result.opted_in), len(run.result.warnings)
    try:
        return _inject_source(source, run, done)
    except InputError as error:
        run.result.templates, run.result.opted_in = counts
        del run.result.warnings[warnings:]
        run.result.errors.append(str(error))
        return ""


def _joined(texts: Iterable[str], *, separator: str) -> Iterable[str]:
    first = True
    for text in texts:
        if not text.strip():
            continue
        if not first and not (separator == "---\n" and text.startswith("---")):  # no empty document between
            yield separator
        yield text if text.endswith("\n") else text + "\n"
        first = False


def _inject_source(source: Source, run: _Run, done: Callable[[int], object]) -> str:
    if source.format == "json":
        (document,) = source.documents
        changes = _inject_document(document, source.name, run)
        done(1)
        return _json_text(source.text, _applied(document.data, changes)) if changes else source.text
    splicer = Splicer(source.text)
    for document in source.documents:
        changes = _inject_document(document, source.name, run)
        done(1)
        if changes and (document.node is None or
                        not splicer.splice(document.node, changes, indent=guess_indent(document.text))):
            splicer.replace(document.start, document.start + len(document.text), _dumped(document, changes))
    return splicer.result()


def _inject_document(document: Document, source: str, run: _Run) -> list[Change]:
    if document.data is None:
        return []
    changes = []
    for obj in document_objects(document.data, where=document.where(source)):
        kind = obj.data["kind"]
        path = TEMPLATE_PATHS.get(kind)
        template = _at(obj.data, path) if path is not None else None
        if path is None or template is None:
            continue
        change = _inject_template(obj.data, kind, template, run, where=obj.where, source=source)
        if change is not None:
            changes.append(Change((*obj.path, *path), *change))
    return changes


def _inject_template(document: Mapping[str, Any], kind: str, template: Mapping[str, Any], run: _Run, *,
                     where: str, source: str) -> tuple[Any, Any] | None:
    metadata = _dict(document.get("metadata"))
    name = str(metadata.get("name") or "")
    named = f"{kind} {name}" if name else f"{kind} (no name)"
    before = plain(template, budget=MAX_TEMPLATE_NODES, where=f"{where}: {named}: pod template")
    run.result.templates += 1
    if not _selected(before, run.include_unlabelled or metadata.get("namespace") in run.enabled):
        return None
    run.result.opted_in += 1
    template_metadata = _dict(before.get("metadata"))
    # A CronJob's pods belong to one Job per run, so the template is pinned to the CronJob's Secret
    # and services exactly as /mutate pins each run's Job when it is created.
    pins = cronjob_pins(name, _dict(template_metadata.get("annotations"))) if kind == "CronJob" else {}
    try:
        plan = plan_pod(before, options=run.options, ca_fingerprints=run.cas,
                        workload=template_workload(kind, name, template_metadata), pins=pins)
    except InjectionRefused as refusal:
        raise InputError(f"{where}: {named}: {refusal}") from None
    run.result.warnings.extend(f"{source}: {named}: {warning}" for warning in plan.warnings)
    run.result.warnings.extend(f"{source}: {named}: {said}"
                               for said in _profile_warnings(_dict(template_metadata.get("annotations")), plan, run))
    if plan.changes_nothing:
        return None
    return before, jsonpatch.apply_patch(before, list(patch_ops(plan)))


def _profile_warnings(annotations: Mapping[str, Any], plan: Any, run: _Run) -> tuple[str, ...]:
    """The certificate profile's refusals (what the reconciler will refuse, under the same bounds), or that
    the profile does not apply in the pod's mode; the profile itself is no warning."""
    try:
        record = json.loads(plan.record) if plan.record else {}
    except ValueError:
        record = {}
    mode = str(record.get("mode") or names.MODE_SECRET) if isinstance(record, dict) else names.MODE_SECRET
    lines = profile_lines(annotations, run.options.profiles, mode=mode)
    return lines if mode != names.MODE_SECRET else lines[1:]


def _at(node: Any, path: Sequence[str]) -> Mapping[str, Any] | None:
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _selected(template: Mapping[str, Any], include_unlabelled: bool) -> bool:
    labels = _dict(_dict(template.get("metadata")).get("labels"))
    value = labels.get(names.INJECT_LABEL)
    return value == names.POD_OPT_IN or (include_unlabelled and value != names.POD_OPT_OUT)


def _applied(data: Any, changes: Sequence[Change]) -> Any:
    """`data` with each change's value put in place (for JSON, plain values throughout)."""
    data = copy.deepcopy(data)
    for change in changes:
        if not change.path:
            return change.after
        parent = data
        for key in change.path[:-1]:
            parent = parent[key]
        parent[change.path[-1]] = change.after
    return data


def _dumped(document: Document, changes: Sequence[Change]) -> str:
    """The whole document through the round-trip dump: its comments and styles kept, its layout re-made
    (for what the splicer does not write: aliases or merge keys on the way, a key removed)."""
    data = document.data
    for change in changes:
        target = data
        for key in change.path:
            target = target[key]
        ops = jsonpatch.make_patch(change.before, change.after).patch
        jsonpatch.apply_patch(target, copy.deepcopy(ops), in_place=True)
    return dump(data, indent=guess_indent(document.text))


def _json_text(source: str, value: Any) -> str:
    """`value` as JSON written the way `source` is: its indentation (or none), its line break at the end."""
    lines = [line for line in source.splitlines() if line.strip()]
    ascii_only = "\\u" in source
    if len(lines) <= 1:
        compact = '":' in source.replace(" ", "") and '": ' not in source
        separators = (",", ":") if compact else (", ", ": ")
        text = json.dumps(value, separators=separators, ensure_ascii=ascii_only)
    else:
        second = lines[1]
        step = second[: len(second) - len(second.lstrip())]
        text = json.dumps(value, indent=step or 2, ensure_ascii=ascii_only)
    return text + "\n" if source.endswith("\n") else text


def inject_manifests(text: str, *, options: InjectionOptions, ca_fingerprints: Sequence[str] = (),
                     include_unlabelled: bool = False, name: str = "<text>") -> Injected:
    """`inject` of one multi-document YAML or JSON text."""
    return inject([read_source(name, text)], options=options, ca_fingerprints=ca_fingerprints,
                  include_unlabelled=include_unlabelled)
