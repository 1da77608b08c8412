"""One naming for the whole chain: which workload a pod or a pod template belongs to, and the Secret and
service names that workload gets.

`/mutate` (a Pod), `inject` (a manifest's pod template) and the reconciler (listed workloads and pods)
all call this module and nothing else derives a name, so the Secret a pod mounts is the Secret the
reconciler issues, whatever made the pod. The shapes and the reason for each are in docs/injection.md:

- a Deployment's pod (owner ReplicaSet `<d>-<hash>`, label `pod-template-hash: <hash>`) -> `<d>`;
- a StatefulSet's, DaemonSet's, Job's, bare ReplicaSet's pod, or one of any other controller -> the owner;
- a CronJob run's pod: the run's Job is pinned to the CronJob's names at its creation (`cronjob_pins`),
  so the pod's own annotations name `<cronjob>-tls`; nothing else on the pod names the CronJob;
- a bare pod -> its generateName stem, else its name.

Pure: plain dicts in (as the apiserver sends them, so any value may have any JSON type), names out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tls_injector.kubenames import MAX_SUBDOMAIN
from tls_injector.names import (
    POD_TEMPLATE_HASH_LABEL,
    SECRET_NAME_ANNOTATION,
    SERVICE_NAMES_ANNOTATION,
    TLS_CHANGE_ANNOTATION,
)

# Where each kind keeps the template its controller stamps pods from; a Pod is its own template.
TEMPLATE_PATHS: Mapping[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
    "Pod": (),
}
TEMPLATE_KINDS: frozenset[str] = frozenset(TEMPLATE_PATHS) - {"Pod"}
# A Secret's name is a DNS subdomain of at most 253 characters. A workload may be named up to 253 too (a
# DaemonSet or a bare ReplicaSet with pods), so `<name>-tls` can be too long for the apiserver: such a
# name is cut and made unique again with a hash of the whole name, as controllers shorten generated names.
MAX_SECRET_NAME = MAX_SUBDOMAIN  # a Secret's name is a DNS-1123 subdomain
SECRET_SUFFIX = "-tls"  # noqa: S105 - a name's suffix, not a password
CLIENT_SECRET_SUFFIX = "-client-tls"  # noqa: S105 - a name's suffix, not a password
_HASH_CHARS = 10  # hex digits of SHA-256: 40 bits, no clash among the names one namespace can hold
# A Service's name: a DNS-1123 label of at most 63 characters, a leading digit allowed since 1.37 made
# RelaxedServiceNameValidation GA (app/pki/names.py checks names for certificates with the same rule; this
# package may not import that one).
_SERVICE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Workload:
    """The object whose pods share one Secret, and what that Secret is for."""

    kind: str  # "Pod" for a bare pod; "Deployment" for a ReplicaSet's pods with a matching template hash
    name: str  # "" when nothing names the workload (then only the annotation can name the Secret)
    secret_name: str  # "" when neither the annotation nor a workload name gives one
    service_names: tuple[str, ...]  # the certificate's services (its SANs): sorted, never empty if name is set
    # The services were asked for (the annotation), rather than the workload's own name taken by default:
    # a name asked for that no certificate may carry is the user's to fix, the default one is not.
    asked: bool = False


def pod_workload(metadata: Mapping[str, Any]) -> Workload:
    """The workload of a Pod with this metadata, as `/mutate` sees it and the reconciler lists it."""
    kind, name = _pod_owner(metadata)
    return _workload(kind, name, _map(metadata, "annotations"))


def pod_workload_name(metadata: Mapping[str, Any]) -> str:
    """`pod_workload(metadata).name` without the rest (its Secret and services, read from the annotations):
    what a pass's status says of each pod missing its injection, thousands of them after an outage."""
    return _pod_owner(metadata)[1]


def pod_secret_name(metadata: Mapping[str, Any]) -> str:
    """`pod_workload(metadata).secret_name`, derived the same way without building the rest of the
    Workload: the injection plan reads only this (the services and the Workload cost it ~10k
    instructions a pod)."""
    annotations = _map(metadata, "annotations")
    # The annotation, when set, is the name (see _secret_name): the owner is looked for only without it
    # (~6k instructions saved for a pod that names its Secret).
    return _text(annotations, SECRET_NAME_ANNOTATION) or _secret_name(_pod_owner(metadata)[1], annotations)


def naming_inputs(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Everything in a Pod's metadata that `pod_workload` and the injection plan read: pods that agree on
    these (every replica of one template) get the same workload and the same plan. The pod's own name
    counts only where it names the workload: no controller and no generateName."""
    generate_name = metadata.get("generateName")
    inputs = {"labels": metadata.get("labels"), "annotations": metadata.get("annotations"),
              "ownerReferences": metadata.get("ownerReferences"), "generateName": generate_name}
    if not _stem(generate_name) and controller_of(metadata) is None:
        inputs["name"] = metadata.get("name")
    return inputs


def template_workload(kind: str, name: str, template_metadata: Mapping[str, Any]) -> Workload:
    """The workload of a `kind` object called `name` whose pod template has this metadata: the same
    Secret and services `pod_workload` derives for every pod the object's controller will create."""
    annotations = _map(template_metadata, "annotations")
    if kind == "Pod":
        return pod_workload(template_metadata)
    if kind == "CronJob":
        annotations = {**annotations, **cronjob_pins(name, annotations)}
    workload_kind, workload_name = _owned(kind, name, _map(template_metadata, "labels"))
    return _workload(workload_kind, workload_name, annotations)


def cronjob_pins(cronjob: str, template_annotations: Mapping[str, Any]) -> dict[str, str]:
    """Annotations to add to the pod template of a Job the CronJob `cronjob` creates, so every run's pods
    name the CronJob's Secret and services: a run's Job is `<cronjob>-<minutes>` and its pods carry
    nothing else naming the CronJob (and a `-<digits>` suffix cannot be told from a Job's own name,
    `backup-20261122`). Only what the template does not set already, and the services only when the
    CronJob's name is a Service name: `1nightly` or `nightly.v2` is a legal CronJob but no Service, and
    pinned it would read as asked for and be refused; unpinned, a run's Job (`<name>-<minutes>`, no Service
    name either) names none, as the CronJob does."""
    pins = {SECRET_NAME_ANNOTATION: secret_name_for(cronjob)}
    if _SERVICE_NAME.match(cronjob):
        pins[SERVICE_NAMES_ANNOTATION] = cronjob
    return {key: value for key, value in pins.items() if not _text(template_annotations, key)}


def secret_name_for(workload: str, *, suffix: str = SECRET_SUFFIX) -> str:
    """`<workload>-tls`, the Secret of a workload whose template does not name one; past 253 characters the
    workload's name is cut and `-<hash of the whole name>` keeps it unique: `<cut>-<10 hex>-tls`."""
    name = f"{workload}{suffix}"
    if len(name) <= MAX_SECRET_NAME:
        return name
    digest = hashlib.sha256(workload.encode()).hexdigest()[:_HASH_CHARS]
    cut = workload[: MAX_SECRET_NAME - len(suffix) - _HASH_CHARS - 1].rstrip("-.")
    return f"{cut}-{digest}{suffix}"


def client_secret_name_for(serving_secret: str) -> str:
    """The client certificate's Secret of the workload whose serving Secret is `serving_secret`:
    `<workload>-tls` gives `<workload>-client-tls`, a name chosen by annotation `<name>-client-tls`, cut
    and hashed past 253 characters like the serving one. Derived from the serving Secret's name, which
    /mutate and the reconciler already agree on for every way pods are made, so they agree on this too."""
    return secret_name_for(serving_secret.removesuffix(SECRET_SUFFIX), suffix=CLIENT_SECRET_SUFFIX)


def controller_of(metadata: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference with `controller: true` and a name (the API allows at most one), if any."""
    references = metadata.get("ownerReferences")
    if not isinstance(references, list):
        return None
    for reference in references:
        if isinstance(reference, dict) and reference.get("controller") is True:
            name = reference.get("name")
            return reference if isinstance(name, str) and name else None
    return None


def template_of(kind: str, obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pod template of an object of `kind` (the object itself for a Pod); None when it has none."""
    node: Any = obj
    for key in TEMPLATE_PATHS.get(kind, ("-",)):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def tls_change(kind: str, obj: Mapping[str, Any]) -> str | None:
    """The TLS change the object's pod template names in tls-injector.io/tls-change (docs/rules.md,
    "Exceptions"), as written; None when it names none (no annotation, or not a string)."""
    metadata = (template_of(kind, obj) or {}).get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    value = annotations.get(TLS_CHANGE_ANNOTATION) if isinstance(annotations, dict) else None
    return value if isinstance(value, str) else None


def _pod_owner(metadata: Mapping[str, Any]) -> tuple[str, str]:
    owner = controller_of(metadata)
    if owner is not None:
        return _owned(str(owner.get("kind") or ""), owner["name"], _map(metadata, "labels"))
    # Prefer the generateName stem: the apiserver may or may not have filled `name` in by the time
    # admission runs, and both orders must give the same Secret.
    return "Pod", _stem(metadata.get("generateName")) or _text(metadata, "name")


def _owned(kind: str, name: str, labels: Mapping[str, Any]) -> tuple[str, str]:
    """The workload behind pods whose controller is `kind`/`name`: a Deployment's ReplicaSet is named
    `<deployment>-<pod-template-hash>` and its pods carry the hash, so removing it names the Deployment."""
    template_hash = labels.get(POD_TEMPLATE_HASH_LABEL)
    if kind == "ReplicaSet" and isinstance(template_hash, str) and template_hash:
        deployment = name.removesuffix(f"-{template_hash}")
        if deployment != name:
            return "Deployment", deployment
    return kind, name


def _workload(kind: str, name: str, annotations: Mapping[str, Any]) -> Workload:
    secret = _secret_name(name, annotations)
    raw = _text(annotations, SERVICE_NAMES_ANNOTATION)
    listed = {part.strip() for part in raw.split(",") if part.strip()} if raw else ()
    services = tuple(sorted(listed)) if listed else (name,) if name else ()
    return Workload(kind, name, secret, services, bool(listed))


def _secret_name(name: str, annotations: Mapping[str, Any]) -> str:
    return _text(annotations, SECRET_NAME_ANNOTATION) or (secret_name_for(name) if name else "")


def _map(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _text(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    return value.strip() if isinstance(value, str) else ""


def _stem(generate_name: object) -> str:
    return generate_name.removesuffix("-") if isinstance(generate_name, str) else ""
