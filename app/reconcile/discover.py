"""Which workloads opted in, and what certificate each namespace needs. Pure: plain dicts in, targets out."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.injection import names
from app.pki import dns_names_for_services

Obj = dict[str, Any]


@dataclass(frozen=True, order=True)
class WorkloadRef:
    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = "apps/v1"

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class Target:
    """One certificate Secret the cluster needs: where, for which names, for whom."""

    namespace: str
    secret_name: str
    dns_names: tuple[str, ...]
    workloads: tuple[WorkloadRef, ...]


def opted_in(pod_labels: Mapping[str, str], *, namespace_enabled: bool) -> bool:
    """The pod label "true" opts in; a namespace labelled "enabled" opts in all pods not labelled "false"."""
    value = pod_labels.get(names.INJECT_LABEL)
    if value == names.POD_OPT_IN:
        return True
    return namespace_enabled and value != names.POD_OPT_OUT


def enabled_namespaces(namespaces: Iterable[Obj]) -> set[str]:
    return {
        ns["metadata"]["name"]
        for ns in namespaces
        if (ns["metadata"].get("labels") or {}).get(names.INJECT_LABEL) == names.NAMESPACE_OPT_IN
    }


def discover(
    workloads: Iterable[tuple[str, Obj]],
    pods: Iterable[Obj],
    *,
    enabled: set[str],
    cluster_domain: str = names.DEFAULT_CLUSTER_DOMAIN,
) -> list[Target]:
    """Targets for opted-in (kind, object) workloads and bare Pods; workloads sharing a Secret share it."""
    wanted: dict[tuple[str, str], list[tuple[WorkloadRef, list[str]]]] = defaultdict(list)
    for kind, obj in workloads:
        _add(wanted, kind, obj, (obj.get("spec") or {}).get("template") or {}, enabled)
    for pod in pods:
        if not _controller(pod):
            _add(wanted, "Pod", pod, pod, enabled)
    return [_target(ns, secret, users, cluster_domain) for (ns, secret), users in sorted(wanted.items())]


def _add(
    wanted: dict[tuple[str, str], list[tuple[WorkloadRef, list[str]]]],
    kind: str,
    obj: Obj,
    template: Obj,
    enabled: set[str],
) -> None:
    meta = obj["metadata"]
    pod_meta = template.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    if not opted_in(pod_meta.get("labels") or {}, namespace_enabled=namespace in enabled):
        return
    # The pod template's annotations win: they are what the webhook sees on the Pod it mutates.
    annotations = {**(meta.get("annotations") or {}), **(pod_meta.get("annotations") or {})}
    ref = WorkloadRef(kind, namespace, meta["name"], meta.get("uid") or "", "v1" if kind == "Pod" else "apps/v1")
    secret = names.secret_name(ref.name, annotations)
    wanted[namespace, secret].append((ref, names.service_names(ref.name, annotations)))


def _target(namespace: str, secret: str, users: list[tuple[WorkloadRef, list[str]]], domain: str) -> Target:
    services = sorted({s for _, svc in users for s in svc})
    dns = dns_names_for_services(services, namespace, cluster_domain=domain)
    return Target(namespace, secret, tuple(dns), tuple(sorted(ref for ref, _ in users)))


def _controller(pod: Obj) -> bool:
    """Pods run by a controller get their certificate through the controller's template, not by themselves."""
    return any(ref.get("controller") for ref in pod["metadata"].get("ownerReferences") or [])
