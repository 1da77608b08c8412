"""Which workload a pod belongs to, named the way that workload's owner knows it.

The default certificate Secret is `<workload name>-tls`, so every pod of a workload must derive the same
name: a Deployment's pods from their ReplicaSet (minus the template hash), a StatefulSet's, DaemonSet's
or Job's pods from the owner itself, and a bare pod from its own name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.injection.names import POD_TEMPLATE_HASH_LABEL

# Kinds whose pods take the workload name straight from the template's owning object in a manifest.
# A Deployment's pods belong to a ReplicaSet `<deployment>-<hash>`; stripping the hash gives the
# Deployment's name back, so offline the Deployment's own name is the answer.
TEMPLATE_KINDS: frozenset[str] = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"})


def workload_name(metadata: Mapping[str, Any]) -> str:
    """The workload of a pod with this metadata; "" when the pod has no name of any kind."""
    owner = _controller(metadata.get("ownerReferences"))
    if owner is not None:
        return _owner_workload(owner, _labels(metadata))
    # Prefer the generateName stem: the apiserver may or may not have filled `name` in by the time
    # admission runs, and both orders must give the same Secret.
    stem = _stem(metadata.get("generateName"))
    name = metadata.get("name")
    return stem or (name if isinstance(name, str) else "")


def template_workload_name(kind: str, name: str, template_metadata: Mapping[str, Any]) -> str:
    """The workload name the webhook will derive for pods created from this object's pod template."""
    if kind in {"Deployment", "CronJob"}:
        return name
    owned = {**template_metadata, "ownerReferences": [{"kind": kind, "name": name, "controller": True}]}
    return workload_name(owned)


def _controller(references: object) -> Mapping[str, Any] | None:
    if not isinstance(references, list):
        return None
    controllers = [r for r in references if isinstance(r, dict) and r.get("controller") is True]
    owner = controllers[0] if controllers else None
    return owner if owner is not None and isinstance(owner.get("name"), str) and owner["name"] else None


def _owner_workload(owner: Mapping[str, Any], labels: Mapping[str, Any]) -> str:
    name: str = owner["name"]
    template_hash = labels.get(POD_TEMPLATE_HASH_LABEL)
    if owner.get("kind") == "ReplicaSet" and isinstance(template_hash, str) and template_hash:
        return name.removesuffix(f"-{template_hash}")
    return name


def _labels(metadata: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = metadata.get("labels")
    return labels if isinstance(labels, dict) else {}


def _stem(generate_name: object) -> str:
    return generate_name.removesuffix("-") if isinstance(generate_name, str) else ""
