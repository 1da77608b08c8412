"""`tls-injector check`: the /validate verdict for an update, offline, over whole sets of manifests.

Old and new are files (multi-document YAML or JSON, `kind: List` expanded) or directories of them,
so a whole git diff of manifests can be checked at once. Objects are paired by apiVersion, kind,
namespace and name; each pair goes, as JSON, through the very decode and handler `serve` uses. An object
only in NEW is a CREATE and one only in OLD a DELETE: both always allowed, so they are only counted.

An object in a namespace labelled tls-injector.io/inject=enabled is judged by the handler of
/validate/enabled-namespace instead, where the shipped entries send it. Offline there is no
cluster to ask, so a namespace counts as enabled when named with --namespace-enabled, or when the input
holds its Namespace labelled so in OLD or in NEW: `kubectl apply` creates and updates Namespaces before
what lives in them, and a Namespace losing the label is itself rejected, so the objects meet an enabled
namespace either way.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from app.admission import AdmissionResponse, BadReview, Route

NAMESPACE_OPT_IN = ("tls-injector.io/inject", "enabled")

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class _KubernetesYamlLoader(yaml.SafeLoader):
    """YAML read as Kubernetes reads it: converted to JSON, so an unquoted 2030-01-01 stays a string.

    PyYAML's safe loader would make it a datetime.date, which is no JSON (nor CEL) value at all.
    """


_KubernetesYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class InputError(ValueError):
    """Unusable input (missing file, bad YAML, an object without kind or name); exit status 2."""


@dataclass(frozen=True)
class Outcome:
    key: Key
    response: AdmissionResponse

    @property
    def title(self) -> str:
        api_version, kind, namespace, name = self.key
        return f"{api_version} {kind} {namespace + '/' if namespace else ''}{name}"


@dataclass(frozen=True)
class Report:
    outcomes: tuple[Outcome, ...]
    created: int
    deleted: int

    @property
    def rejected(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if not o.response["allowed"])


def check(old: dict[Key, dict[str, Any]], new: dict[Key, dict[str, Any]], handler: Route[Any], *,
          enabled_handler: Route[Any] | None = None, enabled: frozenset[str] = frozenset()) -> Report:
    """Each pair judged by `enabled_handler` when its namespace is in `enabled`, else by `handler`."""
    outcomes = []
    for key, obj in new.items():
        if key not in old:
            continue
        judge = enabled_handler if enabled_handler is not None and key[2] in enabled else handler
        outcomes.append(Outcome(key, _judged(judge, key, _update_review(key, old[key], obj))))
    return Report(tuple(outcomes), created=len(new.keys() - old.keys()), deleted=len(old.keys() - new.keys()))


def _judged(route: Route[Any], key: Key, review: dict[str, Any]) -> AdmissionResponse:
    where = " ".join(key)
    try:
        return route.answer(orjson.dumps(review))
    except orjson.JSONEncodeError as error:  # an integer past 64 bits, nesting past 254 levels
        raise InputError(f"{where}: not writable as the JSON the apiserver sends: {error}") from None
    except BadReview as error:
        raise InputError(f"{where}: {error}") from None


def enabled_namespaces(old: dict[Key, dict[str, Any]], new: dict[Key, dict[str, Any]], *,
                       named: Iterable[str] = ()) -> frozenset[str]:
    """The namespaces judged as enabled: those `named`, and every Namespace labelled so in OLD or NEW."""
    labelled = {key[3] for objects in (old, new) for key, obj in objects.items()
                if key[:2] == ("v1", "Namespace") and _labels(obj).get(NAMESPACE_OPT_IN[0]) == NAMESPACE_OPT_IN[1]}
    return frozenset(named) | labelled


def _labels(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return labels if isinstance(labels, dict) else {}


def load_manifests(location: str) -> dict[Key, dict[str, Any]]:
    """Every object under `location` (a file, a directory, or `-` for stdin), keyed for pairing."""
    objects: dict[Key, dict[str, Any]] = {}
    seen_in: dict[Key, str] = {}
    for source, text in _texts(location):
        for where, obj in _documents(text, source):
            key = _key(obj, where)
            if key in objects:
                raise InputError(f"{where}: {' '.join(key)} appears twice (also in {seen_in[key]})")
            objects[key], seen_in[key] = obj, where
    return objects


def render(report: Report) -> str:
    lines: list[str] = []
    for outcome in report.outcomes:
        response = outcome.response
        verdict = "allowed" if response["allowed"] else "REJECTED"
        lines.append(f"{verdict}: {outcome.title}")
        if "status" in response:
            lines += [f"  {line}" for line in response["status"]["message"].splitlines()]
        lines += [f"  warning: {w}" for w in response.get("warnings", [])]
    lines.append(f"{len(report.outcomes)} updated, {len(report.rejected)} rejected; "
                 f"{report.created} created and {report.deleted} deleted (always allowed)")
    return "\n".join(lines)


def _texts(location: str) -> Iterator[tuple[str, str]]:
    if location == "-":
        yield "<stdin>", sys.stdin.read()
        return
    path = Path(location)
    files = sorted(p for p in path.rglob("*") if p.suffix in MANIFEST_SUFFIXES) if path.is_dir() else [path]
    for file in files:
        try:
            yield str(file), file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise InputError(f"{file}: cannot read: {error}") from None


def _documents(text: str, source: str) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        documents = list(yaml.load_all(text, Loader=_KubernetesYamlLoader))
    except yaml.YAMLError as error:
        raise InputError(f"{source}: not valid YAML or JSON: {error}") from None
    except RecursionError:  # PyYAML composes nested nodes recursively: a crafted `[[[[...` ends here
        raise InputError(f"{source}: not usable YAML: nested too deeply") from None
    for number, document in enumerate(documents, start=1):
        where = f"{source} (document {number})"
        if document is None:
            continue
        if not isinstance(document, dict):
            raise InputError(f"{where}: expected a Kubernetes object, got {type(document).__name__}")
        if document.get("kind") == "List" and isinstance(document.get("items"), list):
            yield from ((f"{where} item {i}", item) for i, item in enumerate(document["items"]))
        else:
            yield where, document


def _key(obj: object, where: str) -> Key:
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a Kubernetes object")
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    fields = (obj.get("apiVersion"), obj.get("kind"), metadata.get("namespace", ""), metadata.get("name"))
    if not all(isinstance(f, str) for f in fields) or not all(fields[:2]) or not fields[3]:
        raise InputError(f"{where}: an object needs string apiVersion, kind and metadata.name")
    return (str(fields[0]), str(fields[1]), str(fields[2]), str(fields[3]))


def _update_review(key: Key, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The AdmissionReview the apiserver would send for this update (server-side dry run)."""
    api_version, kind, namespace, name = key
    group, _, version = api_version.rpartition("/")
    gvk = {"group": group, "version": version, "kind": kind}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": str(uuid.uuid4()), "kind": gvk, "operation": "UPDATE", "namespace": namespace,
                    "name": name, "object": new, "oldObject": old, "dryRun": True},
    }
