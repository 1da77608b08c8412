"""Offline injection into YAML manifests: the webhook's plan and patch, applied to pod templates.

The edge around the pure injector: YAML in, YAML out. A document that needs no change is written back
verbatim (comments and formatting kept); a changed one is re-serialised. Every document's patch comes
from the same plan_injection + patch_ops the /mutate handler uses, applied with jsonpatch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import yaml

from app.injection import (
    TEMPLATE_KINDS,
    InjectionOptions,
    InjectionRefused,
    names,
    patch_ops,
    plan_injection,
    template_workload_name,
)

# Where each kind keeps the pod template its controller stamps pods from.
_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {kind: ("spec", "template") for kind in TEMPLATE_KINDS}
_TEMPLATE_PATHS["CronJob"] = ("spec", "jobTemplate", "spec", "template")
_TEMPLATE_PATHS["Pod"] = ()


class ManifestError(ValueError):
    """The manifests cannot be read or a pod template cannot be injected; the message says which."""


@dataclass
class Injected:
    text: str
    warnings: list[str] = field(default_factory=list)


def inject_manifests(
    text: str, *, options: InjectionOptions, ca_fingerprints: Sequence[str] = (), include_unlabelled: bool = False
) -> Injected:
    """Every pod template in the multi-document `text`, injected as the webhook would inject its pods.

    Only templates labelled `tls-injector.io/inject: "true"` are injected, as the webhook's object selector
    would pick their pods; `include_unlabelled` acts as if the namespace were opted in (all but "false").
    """
    result = Injected("")
    parts = []
    for segment, document in _documents(text):
        changed = _inject_document(document, options, ca_fingerprints, include_unlabelled, result.warnings)
        parts.append(_dump(changed) if changed is not None else segment.strip("\n") + "\n")
    result.text = "".join(f"---\n{part}" for part in parts)
    return result


def _documents(text: str) -> list[tuple[str, Any]]:
    try:
        documents = list(yaml.safe_load_all(text))
        return list(zip(_segments(text), documents, strict=True))
    except yaml.YAMLError as error:
        raise ManifestError(f"not valid YAML: {error}") from None


def _segments(text: str) -> Iterable[str]:
    """The source text of each document, without its `---` / `...` markers."""
    start = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.DocumentStartEvent) and event.explicit:
            start = _index(event.end_mark)
        elif isinstance(event, yaml.DocumentEndEvent):
            yield text[start : _index(event.start_mark)]
            start = _index(event.end_mark)


def _index(mark: Any) -> int:
    # The parser sets marks on every event it emits; None would mean a hand-built event.
    index: int = mark.index
    return index


def _inject_document(
    document: Any, options: InjectionOptions, cas: Sequence[str], include_unlabelled: bool, warnings: list[str]
) -> dict[str, Any] | None:
    """The injected document, or None when it has no template to inject or nothing changes."""
    if not isinstance(document, dict) or document.get("kind") not in _TEMPLATE_PATHS:
        return None
    kind, name = document["kind"], str((document.get("metadata") or {}).get("name") or "")
    template = _template(document, _TEMPLATE_PATHS[kind])
    if template is None or not _selected(template, include_unlabelled):
        return None
    workload = None if kind == "Pod" else template_workload_name(kind, name, template.get("metadata") or {})
    try:
        # A CronJob's pods belong to Jobs named after each run, so the Secret is pinned in the template.
        plan = plan_injection(template, options=options, ca_fingerprints=cas, workload=workload,
                              pin_secret_name=kind == "CronJob")
    except InjectionRefused as refusal:
        raise ManifestError(f"{kind} {name!r}: {refusal}") from None
    warnings.extend(f"{kind} {name!r}: {warning}" for warning in plan.warnings)
    if plan.changes_nothing:
        return None
    return _replace_template(document, _TEMPLATE_PATHS[kind], jsonpatch.apply_patch(template, patch_ops(plan)))


def _template(document: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    node: Any = document
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _selected(template: Mapping[str, Any], include_unlabelled: bool) -> bool:
    labels = (template.get("metadata") or {}).get("labels") or {}
    value = labels.get(names.INJECT_LABEL) if isinstance(labels, dict) else None
    return value == names.POD_OPT_IN or (include_unlabelled and value != names.POD_OPT_OUT)


def _replace_template(document: dict[str, Any], path: tuple[str, ...], template: dict[str, Any]) -> dict[str, Any]:
    if not path:
        return template
    head, *rest = path
    return {**document, head: _replace_template(document[head], tuple(rest), template)}


def _dump(document: dict[str, Any]) -> str:
    # A wide line keeps the injected record (one JSON string) on one line, readable in a diff.
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, allow_unicode=True, width=4096)
