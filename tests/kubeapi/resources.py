"""The resource table: every kind the emulator serves is one row here.

A row says where the kind lives in the URL space (group, version, plural), whether it is namespaced,
whether its ``status`` is owned by a subresource (so writes to the main resource cannot change it, as
in the real API), and which extra field selectors the real API accepts for it beyond
``metadata.name`` / ``metadata.namespace``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool = False
    uses_generation: bool = False  # metadata.generation bumps on spec changes
    field_labels: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    # DELETE answers the object (the registry's ReturnDeletedObject, or graceful deletion) rather than a
    # Status; the official client's models expect exactly that (delete_namespaced_pod -> V1Pod).
    delete_returns_object: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """The resource name the real API uses in messages: ``secrets``, ``deployments.apps``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def prefix(self) -> str:
        """The URL prefix of the group-version: ``/api/v1`` or ``/apis/apps/v1``."""
        return f"/apis/{self.api_version}" if self.group else f"/api/{self.version}"


_POD_FIELDS = (
    "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
    "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
    "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
    "reason", "reportingComponent", "source", "type",
)


def _workload(plural: str, kind: str, short: str) -> Resource:
    return Resource("apps", "v1", plural, kind, namespaced=True, status_subresource=True, uses_generation=True,
                    short_names=(short,))


RESOURCES: tuple[Resource, ...] = (
    Resource("", "v1", "namespaces", "Namespace", namespaced=False, status_subresource=True,
             field_labels=("status.phase",), short_names=("ns",), delete_returns_object=True),
    Resource("", "v1", "nodes", "Node", namespaced=False, status_subresource=True, short_names=("no",),
             delete_returns_object=True),
    Resource("", "v1", "secrets", "Secret", namespaced=True, field_labels=("type",)),
    Resource("", "v1", "configmaps", "ConfigMap", namespaced=True, short_names=("cm",)),
    Resource("", "v1", "services", "Service", namespaced=True, status_subresource=True, short_names=("svc",),
             delete_returns_object=True),
    Resource("", "v1", "pods", "Pod", namespaced=True, status_subresource=True, field_labels=_POD_FIELDS,
             short_names=("po",), delete_returns_object=True),
    Resource("", "v1", "events", "Event", namespaced=True, field_labels=_EVENT_FIELDS, short_names=("ev",)),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True, short_names=("sa",),
             delete_returns_object=True),
    _workload("deployments", "Deployment", "deploy"),
    _workload("statefulsets", "StatefulSet", "sts"),
    _workload("daemonsets", "DaemonSet", "ds"),
    _workload("replicasets", "ReplicaSet", "rs"),
    Resource("batch", "v1", "jobs", "Job", namespaced=True, status_subresource=True, uses_generation=True),
    Resource("batch", "v1", "cronjobs", "CronJob", namespaced=True, status_subresource=True, uses_generation=True,
             short_names=("cj",)),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True),
    Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
             "MutatingWebhookConfiguration", namespaced=False),
    Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
             "ValidatingWebhookConfiguration", namespaced=False),
    Resource("events.k8s.io", "v1", "events", "Event", namespaced=True,
             field_labels=("regarding.kind", "regarding.namespace", "regarding.name", "reason", "type")),
    # Served so that `kubectl apply --dry-run=client -k` of the shipped overlays finds every kind it maps;
    # nothing but plain storage (no RBAC enforcement, no scheduling, no Job controller).
    Resource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy",
             namespaced=False, status_subresource=True),
    Resource("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
             "ValidatingAdmissionPolicyBinding", namespaced=False),
    Resource("rbac.authorization.k8s.io", "v1", "roles", "Role", namespaced=True),
    Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", namespaced=True),
    Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
    Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False),
    Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False, short_names=("pc",)),
    Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", namespaced=True, short_names=("netpol",)),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True,
             status_subresource=True, short_names=("pdb",)),
    # Create-only and never stored: the answer is computed from the RBAC objects above (authz.py).
    Resource("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False),
    Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
             namespaced=False, status_subresource=True, short_names=("crd",)),
    *(row for version in ("v1", "v1beta1") for row in (
        Resource("certificates.k8s.io", version, "podcertificaterequests", "PodCertificateRequest",
                 namespaced=True, status_subresource=True,
                 field_labels=("spec.signerName", "spec.podName", "spec.nodeName")),
        Resource("certificates.k8s.io", version, "clustertrustbundles", "ClusterTrustBundle", namespaced=False,
                 field_labels=("spec.signerName",)),
    )),
)
# Pod certificates and ClusterTrustBundles: certificates.k8s.io/v1 from Kubernetes 1.37, v1beta1 on 1.35
# and 1.36 with the beta enabled. An emulator serves the versions it is told to (none by default, like
# the 1.33 it reports), so a test chooses which cluster it is talking to.
OPTIONAL_GROUP = "certificates.k8s.io"
OPTIONAL_VERSIONS = ("v1", "v1beta1")

_BY_PATH: dict[tuple[str, str, str], Resource] = {(r.group, r.version, r.plural): r for r in RESOURCES}
NAMESPACES = _BY_PATH[("", "v1", "namespaces")]


def lookup(group: str, version: str, plural: str) -> Resource | None:
    return _BY_PATH.get((group, version, plural))


_BY_QUALIFIED = {r.qualified: r for r in RESOURCES}


def lookup_qualified(name: str) -> Resource:
    return _BY_QUALIFIED[name]


def served(res: Resource, certificates: tuple[str, ...]) -> bool:
    """Whether an emulator serving these certificates.k8s.io versions serves ``res`` at all."""
    return res.group != OPTIONAL_GROUP or res.version in certificates


def group_versions(certificates: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """Every (group, version) served, in table order, without duplicates."""
    return list(dict.fromkeys((r.group, r.version) for r in RESOURCES if served(r, certificates)))


def resource_list(group: str, version: str, certificates: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """The discovery document ``/api/v1`` or ``/apis/<group>/<version>`` (APIResourceList)."""
    rows = [r for r in RESOURCES if (r.group, r.version) == (group, version) and served(r, certificates)]
    if not rows:
        return None
    verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    return {
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": rows[0].api_version,
        "resources": [
            row
            for r in rows
            for row in (
                {"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced, "kind": r.kind,
                 "verbs": verbs, **({"shortNames": list(r.short_names)} if r.short_names else {})},
                *([{"name": f"{r.plural}/status", "singularName": "", "namespaced": r.namespaced, "kind": r.kind,
                    "verbs": ["get", "patch", "update"]}] if r.status_subresource else []),
            )
        ],
    }


def api_group_list(certificates: tuple[str, ...] = ()) -> dict[str, Any]:
    """The discovery document ``/apis`` (APIGroupList) for every non-core group."""
    groups: dict[str, list[str]] = {}
    for group, version in group_versions(certificates):
        if group:
            groups.setdefault(group, []).append(version)
    return {
        "kind": "APIGroupList", "apiVersion": "v1",
        "groups": [
            {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
             "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
            for g, vs in groups.items()
        ],
    }
