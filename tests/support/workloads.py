"""Every way pods are made, built as the cluster builds them: the object a user applies, the objects its
controllers create from it (each owned by the one before, with its uid), and the Pod the apiserver sends
to /mutate. The pure tests store the objects in a list, the emulator tests in the emulator: one builder,
so both check the same shapes.

The expected Secret and services are written out here from the documented table (docs/injection.md),
independently of app/injection/workload.py, so the chain is checked against what users are promised.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
INJECT = "tls-injector.io/inject"
SECRET = "tls-injector.io/secret-name"
SERVICES = "tls-injector.io/service-names"
HASH = "pod-template-hash"
# A CRD some operator runs pods with: the injector knows nothing about it.
CRD_API_VERSION, CRD_KIND = "postgres.example.com/v1", "Cluster"
KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "ReplicaSet", "Pod", CRD_KIND)
API_VERSIONS = {"Deployment": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "ReplicaSet": "apps/v1",
                "Job": "batch/v1", "CronJob": "batch/v1", "Pod": "v1", CRD_KIND: CRD_API_VERSION}
CONTAINERS = [{"name": "app", "image": "example/app:1"}]
# What the controllers would pick: a template hash, a CronJob run's scheduled minute, a generated suffix.
TEMPLATE_HASH = "5f6b7c9d8"
RUN_MINUTES = "29400000"
GENERATED = "x7k2p"

Create = Callable[[Obj], Obj]  # stores an object, returns it as stored (with uid)
AdmitJob = Callable[[Obj], Obj]  # a Job through /mutate: the Job as the apiserver would store it


@dataclass(frozen=True)
class Shape:
    kind: str
    name: str  # the user's object (a bare pod: its name, or the generateName stem)
    labels: dict[str, str] = field(default_factory=dict)  # of the pod template
    annotations: dict[str, str] = field(default_factory=dict)  # of the pod template
    generate_name: bool = True  # bare pods: generateName `<name>-` rather than a name
    name_filled: bool = False  # the apiserver generated the pod's name before admission
    hash_label: bool = False  # a bare ReplicaSet's template carries a pod-template-hash matching its name

    @property
    def rs_name(self) -> str:
        return f"{self.name}-{TEMPLATE_HASH}" if self.hash_label else self.name

    def expected_workload(self) -> str:
        """The name users are promised: the object they wrote (a Deployment for its ReplicaSet's pods)."""
        return self.name

    def expected_secret(self) -> str:
        """`<workload>-tls`; past the 253 characters a Secret name may have, the workload's name cut to 238
        and `-<first 10 hex digits of its SHA-256>` added before `-tls` (docs/injection.md)."""
        named = self.annotations.get(SECRET, "").strip()
        if named:
            return named
        workload = self.expected_workload()
        if len(workload) + 4 <= 253:
            return f"{workload}-tls"
        return f"{workload[:238].rstrip('-.')}-{hashlib.sha256(workload.encode()).hexdigest()[:10]}-tls"

    def expected_services(self) -> tuple[str, ...]:
        listed = sorted({s.strip() for s in self.annotations.get(SERVICES, "").split(",") if s.strip()})
        return tuple(listed) or (self.expected_workload(),)

    def __str__(self) -> str:
        if self.kind == "Pod" and self.generate_name:
            return f"Pod/{self.name}-{GENERATED if self.name_filled else ''}"
        return f"{self.kind}/{self.name}"


def app_label(shape: Shape) -> str:
    """The `app` label: the object's name, cut to the 63 characters a label value may have."""
    return shape.name[:63].rstrip("-.")


def template(shape: Shape, *, extra_labels: dict[str, str] | None = None) -> Obj:
    metadata: Obj = {"labels": {"app": app_label(shape), **shape.labels, **(extra_labels or {})}}
    if shape.annotations:
        metadata["annotations"] = dict(shape.annotations)
    return {"metadata": metadata, "spec": {"containers": copy.deepcopy(CONTAINERS), "restartPolicy": "Never"
                                           if shape.kind in ("Job", "CronJob") else "Always"}}


def manifest(shape: Shape, namespace: str) -> Obj | None:
    """What the user applies (and what `inject -f` reads); None for a CRD the injector cannot read."""
    meta: Obj = {"name": shape.name, "namespace": namespace}
    kind, api_version = shape.kind, API_VERSIONS[shape.kind]
    if kind == "Pod":
        pod = template(shape)
        pod["metadata"] |= {"namespace": namespace} | (
            {"generateName": f"{shape.name}-"} if shape.generate_name else {"name": shape.name})
        return {"apiVersion": "v1", "kind": "Pod", **pod}
    if kind == CRD_KIND:
        return None
    if kind == "CronJob":
        return {"apiVersion": api_version, "kind": kind, "metadata": meta,
                "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": template(shape)}}}}
    extra = {HASH: TEMPLATE_HASH} if kind == "ReplicaSet" and shape.hash_label else {}
    spec: Obj = {"template": template(shape, extra_labels=extra)}
    if kind != "Job":
        spec["selector"] = {"matchLabels": {"app": app_label(shape)}}
    if kind == "StatefulSet":
        spec["serviceName"] = shape.name
    if kind == "ReplicaSet":
        meta = {**meta, "name": shape.rs_name}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec}


def owner_reference(obj: Obj) -> Obj:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def build(shape: Shape, namespace: str, *, create: Create, admit_job: AdmitJob) -> Obj:
    """Create the user's object and its controllers' objects; return the Pod the apiserver sends to
    /mutate (name not yet generated unless `name_filled`; namespace set, as the apiserver sets it)."""
    if shape.kind == "Pod":
        pod = manifest(shape, namespace)
        assert pod is not None
        return _named(pod, shape)
    owner = _owner_chain(shape, namespace, create=create, admit_job=admit_job)
    labels = {HASH: TEMPLATE_HASH} if shape.kind == "Deployment" else {}
    pod_template = copy.deepcopy(_template_of(owner)) if owner["kind"] != CRD_KIND else template(shape)
    pod_template["metadata"]["labels"] = {**pod_template["metadata"].get("labels", {}), **labels}
    metadata = {**pod_template["metadata"], "namespace": namespace, "ownerReferences": [owner_reference(owner)]}
    if owner["kind"] == "StatefulSet":
        metadata["name"] = f"{owner['metadata']['name']}-0"  # ordinal names, no generateName
    else:
        metadata["generateName"] = f"{owner['metadata']['name']}-"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_template["spec"]}
    return _named(pod, shape)


def _owner_chain(shape: Shape, namespace: str, *, create: Create, admit_job: AdmitJob) -> Obj:
    """The object that owns the pods, after creating everything above it."""
    if shape.kind == CRD_KIND:
        return create({"apiVersion": CRD_API_VERSION, "kind": CRD_KIND,
                       "metadata": {"name": shape.name, "namespace": namespace}, "spec": {"instances": 1}})
    applied = manifest(shape, namespace)
    assert applied is not None
    top = create(applied)
    if shape.kind == "Deployment":
        rs_template = copy.deepcopy(_template_of(top))
        rs_template["metadata"]["labels"][HASH] = TEMPLATE_HASH
        return create({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                       "metadata": {"name": f"{shape.name}-{TEMPLATE_HASH}", "namespace": namespace,
                                    "labels": {HASH: TEMPLATE_HASH}, "ownerReferences": [owner_reference(top)]},
                       "spec": {"selector": {"matchLabels": {"app": app_label(shape), HASH: TEMPLATE_HASH}},
                                "template": rs_template}})
    if shape.kind == "CronJob":
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": f"{shape.name}-{RUN_MINUTES}", "namespace": namespace,
                            "ownerReferences": [owner_reference(top)]},
               "spec": {"template": copy.deepcopy(_template_of(top))}}
        return create(admit_job(job))
    return top


def _template_of(obj: Obj) -> Obj:
    spec = obj["spec"]
    found: Obj = spec["jobTemplate"]["spec"]["template"] if obj["kind"] == "CronJob" else spec["template"]
    return found


def _named(pod: Obj, shape: Shape) -> Obj:
    """The apiserver generates the name from generateName; admission may see it before or after."""
    metadata = pod["metadata"]
    if shape.name_filled and "generateName" in metadata and "name" not in metadata:
        metadata["name"] = metadata["generateName"] + GENERATED
    return pod


def stored_name(pod: Obj) -> Obj:
    """The pod as stored: the apiserver always fills the name in by then."""
    stored = copy.deepcopy(pod)
    metadata = stored["metadata"]
    metadata.setdefault("name", metadata.get("generateName", "") + GENERATED)
    return stored
