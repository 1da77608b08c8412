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

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TextIO

import orjson

from tls_injector.admission import AdmissionResponse, BadReview, Route
from tls_injector.offline import manifests
from tls_injector.offline.errors import InputError
from tls_injector.offline.yamltext import plain

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
# An object the apiserver stores fits etcd's 1.5 MiB; at 2 bytes for the smallest JSON value ("0,")
# that is under 800,000 values, so a larger one (YAML aliases expanded) is no real object.
MAX_OBJECT_NODES = 1_000_000


@dataclass(frozen=True)
class Outcome:
    key: Key
    response: AdmissionResponse
    changed: bool = True  # False: OLD and NEW hold the same object (still judged: a user's rule may
    # hold on any state, not only a transition), counted apart from the updates

    @property
    def title(self) -> str:
        api_version, kind, namespace, name = self.key
        return f"{api_version} {kind} {namespace + '/' if namespace else ''}{name}"


@dataclass(frozen=True)
class Report:
    outcomes: tuple[Outcome, ...]  # every pair, judged
    created: int
    deleted: int

    @property
    def updated(self) -> int:
        return sum(o.changed for o in self.outcomes)

    @property
    def unchanged(self) -> int:
        return len(self.outcomes) - self.updated

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
        outcomes.append(Outcome(key, _judged(judge, key, _update_review(key, old[key], obj)), old[key] != obj))
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
    return frozenset(named) | manifests.enabled_namespaces([*old.values(), *new.values()])


def load_manifests(location: str, stdin: TextIO, *, allow_empty: bool = False) -> dict[Key, dict[str, Any]]:
    """Every object under `location` (a file, a directory, or `-` for stdin), keyed for pairing."""
    objects: dict[Key, dict[str, Any]] = {}
    seen_in: dict[Key, str] = {}
    for source in manifests.read_locations([location], stdin, allow_empty=allow_empty):
        for found in manifests.objects(source):
            obj = plain(found.data, budget=MAX_OBJECT_NODES, where=found.where)
            key = _key(obj, found.where)
            if key in objects:
                raise InputError(f"{found.where}: {' '.join(key)} appears twice (also in {seen_in[key]})")
            objects[key], seen_in[key] = obj, found.where
    return objects


def render(report: Report) -> str:
    lines: list[str] = []
    for outcome in report.outcomes:
        response = outcome.response
        verdict = "allowed" if response["allowed"] else "REJECTED"
        lines.append(f"{verdict}: {outcome.title}{'' if outcome.changed else ' (unchanged)'}")
        if "status" in response:
            lines += [f"  {line}" for line in response["status"]["message"].splitlines()]
        lines += [f"  warning: {w}" for w in response.get("warnings", [])]
    lines.append(f"{report.updated} updated, {report.unchanged} unchanged, {len(report.rejected)} rejected; "
                 f"{report.created} created and {report.deleted} deleted (always allowed)")
    return "\n".join(lines)


def render_json(report: Report) -> str:
    """The report as one JSON object (`check -o json`), for a CI step to read without parsing text."""
    updates = []
    for outcome in report.outcomes:
        api_version, kind, namespace, name = outcome.key
        response = outcome.response
        updates.append({"apiVersion": api_version, "kind": kind, "namespace": namespace, "name": name,
                        "changed": outcome.changed, "allowed": response["allowed"],
                        "message": response["status"]["message"] if "status" in response else "",
                        "warnings": list(response.get("warnings", []))})
    counts = {"updated": report.updated, "unchanged": report.unchanged, "rejected": len(report.rejected),
              "created": report.created, "deleted": report.deleted}
    return orjson.dumps({"allowed": not report.rejected, "counts": counts, "pairs": updates},
                        option=orjson.OPT_INDENT_2).decode()


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
